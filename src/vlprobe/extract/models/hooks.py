"""Editing a stream's hidden states at chosen layers while the model runs (forward hooks).

An adapter that supports edits names, per stream, the *site* of every layer: the module whose
output holds that layer's states (layer 0: the embedding module), and, when that output is a
tuple, which element (:class:`LayerSite`). :func:`edited_layers` installs one forward hook per
edited layer that replaces those states by ``edit(states)`` — so every later layer runs on the
edited states — and removes every hook on exit, also when the run fails. This is the machinery of
activation patching (states taken from another input) and of running a model from a layer on with
erased states.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["LayerEdit", "LayerSite", "edited_layers", "hook_count"]

#: ``states (B, T, H) -> states (B, T, H)``, the edit of one layer.
LayerEdit = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class LayerSite:
    """Where one layer's states come out: ``module``'s output, or its element ``index`` when a tuple.

    ``tail``: the stream is the *last* positions of those states, a view that follows another
    stream's positions in a joint sequence (UNITER's regions after the text, whose padded width
    varies from batch to batch); edits that address positions count them from there.
    """

    module: torch.nn.Module
    index: int | None = None
    tail: bool = False


def _replace(output: Any, index: int | None, edit: LayerEdit) -> Any:
    if index is None:
        if isinstance(output, torch.Tensor):
            return edit(output)
        index = 0  # a module returning (hidden, ...) tuples: the states come first
    items = list(output)
    items[index] = edit(items[index])
    return type(output)(items) if isinstance(output, tuple) else items


@contextmanager
def edited_layers(sites: Sequence[LayerSite], edits: Mapping[int, LayerEdit]) -> Iterator[None]:
    """Replace layer ``l``'s states by ``edits[l](states)`` in every forward run inside the block.

    Parameters
    ----------
    sites : sequence of LayerSite
        ``sites[l]``: where layer ``l`` comes out (the adapter's ``layer_sites(stream)``).
    edits : mapping of int to callable
        Layer -> edit; layers not in it run unchanged. ``{}`` installs nothing.

    Raises
    ------
    IndexError
        A layer outside ``0 .. len(sites) - 1``.
    """
    bad = [layer for layer in edits if not 0 <= layer < len(sites)]
    if bad:
        raise IndexError(f"layers {bad} are outside 0..{len(sites) - 1}")
    handles = []
    try:
        for layer, edit in edits.items():
            site = sites[layer]

            def hook(_module: torch.nn.Module, _args: Any, output: Any, site: LayerSite = site,
                     edit: LayerEdit = edit) -> Any:
                return _replace(output, site.index, edit)

            handles.append(site.module.register_forward_hook(hook))
        yield
    finally:
        for h in handles:
            h.remove()


def hook_count(model: torch.nn.Module) -> int:
    """Forward hooks (and pre-hooks) registered on ``model`` and its submodules (a leak check)."""
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())
