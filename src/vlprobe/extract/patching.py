"""Activation patching on minimal pairs: run a model on one input with some of a layer's states
taken from another.

A batch holds ``n`` *recipients* followed by their ``n`` *donors* (so both are padded alike). A
first pass records the donors' states at the patched layers; a second pass replaces, in the
recipient rows, the states at the chosen token positions by the donor's
(:func:`patched_run`). Which positions: a *source map* ``(n, T)`` giving, for every recipient
position, the donor position whose state it takes (``-1``: keep its own), built per *position
group* by :func:`position_sources` from the two inputs' token ids:

* ``all``: every position (inputs with the same token count only);
* ``swapped``: the positions where the two token sequences differ (same token count only);
* ``rest``: the positions where they agree (same token count only; special tokens included);
* ``cls``: the stream's summary position (CLIP text: the EOS token; BERT-style: token 0), the
  recipient's from the donor's, whatever the lengths.

A stream that is a view of a longer sequence at positions that vary from pair to pair (a
generative model's caption or image tokens in its joint sequence) builds the source map in the
stream's positions, then moves it into the sequence's with :func:`joint_sources`.

Patching every layer at every position gives the recipient the donor's states everywhere, hence
the donor's output; patching nothing changes nothing (both checked in the tests).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from vlprobe.extract.models.hooks import LayerSite, edited_layers

__all__ = ["POSITION_GROUPS", "joint_sources", "patched_run", "position_sources"]

POSITION_GROUPS = ("all", "swapped", "rest", "cls")


def position_sources(
    recipient_ids: torch.Tensor, donor_ids: torch.Tensor, recipient_mask: torch.Tensor, donor_mask: torch.Tensor,
    group: str, recipient_cls: torch.Tensor | None = None, donor_cls: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The source map of a position group (module docstring).

    Parameters
    ----------
    recipient_ids, donor_ids : Tensor, shape (n, T)
        Token ids, padded alike.
    recipient_mask, donor_mask : Tensor, shape (n, T)
        1 for real tokens.
    group : str
        One of :data:`POSITION_GROUPS`.
    recipient_cls, donor_cls : Tensor, shape (n,), optional
        Summary positions (for ``cls``).

    Returns
    -------
    source : Tensor of int64, shape (n, T)
        Donor position per recipient position, ``-1`` where not patched.
    defined : Tensor of bool, shape (n,)
        Whether the group exists for the pair (the token-wise groups need equal token counts);
        rows where it does not are all ``-1``.
    """
    n, t = recipient_ids.shape
    source = torch.full((n, t), -1, dtype=torch.long)
    rm, dm = recipient_mask.bool().cpu(), donor_mask.bool().cpu()
    if group == "cls":
        if recipient_cls is None or donor_cls is None:
            raise ValueError("group 'cls' needs the summary positions")
        source[torch.arange(n), recipient_cls.cpu()] = donor_cls.cpu().long()
        return source, torch.ones(n, dtype=torch.bool)
    if group not in POSITION_GROUPS:
        raise ValueError(f"group must be one of {POSITION_GROUPS}, got {group!r}")
    defined = rm.sum(1) == dm.sum(1)
    same = recipient_ids.cpu() == donor_ids.cpu()
    pick = {"all": rm, "swapped": rm & ~same, "rest": rm & same}[group] & defined[:, None]
    positions = torch.arange(t).expand(n, t)
    source[pick] = positions[pick]
    return source, defined


def joint_sources(source: torch.Tensor, recipient_index: torch.Tensor, donor_index: torch.Tensor,
                  width: int) -> torch.Tensor:
    """A source map in a stream's positions moved into the joint sequence's.

    Parameters
    ----------
    source : Tensor of int64, shape (n, W)
        Donor stream position per recipient stream position, ``-1``: keep (:func:`position_sources`).
    recipient_index, donor_index : Tensor of int64, shape (n, W)
        Each stream position's index in the joint sequence of the recipient / the donor (``-1``
        past the stream's tokens).
    width : int
        The joint sequence's length ``T`` (with padding).

    Returns
    -------
    Tensor of int64, shape (n, T)
        Donor sequence position per recipient sequence position, ``-1``: keep.
    """
    n = source.shape[0]
    out = torch.full((n, width), -1, dtype=torch.long)
    r, p = torch.nonzero(source >= 0, as_tuple=True)
    q = source[r, p]
    to, frm = recipient_index[r, p], donor_index[r, q]
    if bool((to < 0).any() or (frm < 0).any()):
        raise ValueError("source maps a position outside the stream's tokens")
    out[r, to] = frm
    return out


def patched_run(
    run: Callable[[], Any], sites: Sequence[LayerSite], layers: Sequence[int], source: torch.Tensor,
) -> Any:
    """Run ``run()`` twice: record the donors' states at ``layers``, then patch the recipients.

    Parameters
    ----------
    run : callable
        One forward pass over ``2n`` rows (``n`` recipients, then their donors, in that order);
        whatever it returns is returned for the patched pass.
    sites : sequence of LayerSite
        The stream's layer sites (the adapter's ``layer_sites``).
    layers : sequence of int
        Layers patched together in the one patched pass (``[]``: no patching).
    source : Tensor of int64, shape (n, T)
        Donor position per recipient position (:func:`position_sources`), ``-1``: keep. A site
        whose output is longer than ``T`` (a joint text-and-regions sequence) keeps the positions
        past ``T``, or, for a ``tail`` site (the regions' view of it), the positions before its
        last ``T``.

    Returns
    -------
    The patched pass's result.
    """
    recorded: dict[int, torch.Tensor] = {}

    def recorder(layer: int) -> Callable[[torch.Tensor], torch.Tensor]:
        def keep(h: torch.Tensor) -> torch.Tensor:
            recorded[layer] = h.detach().clone()
            return h
        return keep

    def patcher(layer: int) -> Callable[[torch.Tensor], torch.Tensor]:
        tail = sites[layer].tail

        def patch(h: torch.Tensor) -> torch.Tensor:
            n = source.shape[0]
            donor = recorded[layer][n:]
            t = min(h.shape[1], source.shape[1])
            start = h.shape[1] - t if tail else 0  # a tail view: its positions are the last t
            src = source[:, :t].to(h.device)
            take = src >= 0
            if not take.any():
                return h
            out = h.clone()
            rows = torch.arange(n, device=h.device)[:, None].expand(n, t)
            out[:n, start:start + t][take] = donor[rows[take], start + src[take]].to(out.dtype)
            return out
        return patch

    layers = sorted(set(int(x) for x in layers))
    if not layers:
        return run()
    with edited_layers(sites, {layer: recorder(layer) for layer in layers}):
        run()
    with edited_layers(sites, {layer: patcher(layer) for layer in layers}):
        return run()
