"""Does a checkpoint's config fit its weights? One check and one message for every model family.

A config whose sizes differ from its weights' (a GPT-2 ``n_embd``, a VisualBERT
``visual_embedding_dim``, a ViLBERT ``v_hidden_size``) builds a model of other shapes than the
weights have. Each family compares the shapes its config builds with the shapes its weights
hold and, on the first key where they differ, raises :func:`refuse_mismatch`'s one line (an
:class:`~vlprobe.validation.InputError`, exit code 2) instead of the loader's traceback:

    checkpoint: 'DIR' does not fit its config (config.json): transformer.wte.weight is (100, 32)
    in the weights, (100, 64) by the config (the config's 64: n_embd)

Hugging Face models go through :func:`vlprobe.extract.models.hf.from_pretrained_with_info`,
which loads with ``ignore_mismatched_sizes`` and hands transformers' mismatched keys to
:func:`refuse_mismatch`; natively written families (ViLBERT, UNITER, OpenCLIP) call
:func:`first_mismatch` on their own state dicts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vlprobe.validation import InputError

__all__ = ["ShapeMismatch", "config_fields_of", "first_mismatch", "lacking_size", "refuse_mismatch", "shapes_of"]


@dataclass(frozen=True)
class ShapeMismatch:
    """The first weight whose shape differs: its key, its shape in the weights and by the config."""

    key: str
    weights: tuple[int, ...]
    config: tuple[int, ...]


def shapes_of(tensors: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """Key -> shape of a state dict (anything with a ``shape``)."""
    return {str(k): tuple(int(d) for d in v.shape) for k, v in tensors.items()}


def first_mismatch(
    config: Mapping[str, Sequence[int]], weights: Mapping[str, Sequence[int]], order: Iterable[str] | None = None,
) -> ShapeMismatch | None:
    """The first key held by both whose shapes differ, in ``order`` (default: ``config``'s order).

    Parameters
    ----------
    config : mapping
        Key -> shape the config builds.
    weights : mapping
        Key -> shape in the checkpoint.
    order : iterable of str, optional
        The order to look in (the model's own parameter order gives the embedding first).
    """
    for key in config if order is None else order:
        if key in config and key in weights:
            want, got = tuple(int(d) for d in config[key]), tuple(int(d) for d in weights[key])
            if want != got:
                return ShapeMismatch(key, got, want)
    return None


def lacking_size(mismatch: ShapeMismatch) -> int | None:
    """The first size the config builds that the weights do not have at that place."""
    if len(mismatch.config) == len(mismatch.weights):
        return next((c for c, w in zip(mismatch.config, mismatch.weights, strict=True) if c != w), None)
    return next((c for c in mismatch.config if c not in mismatch.weights), None)


def config_fields_of(config: Any, size: int) -> list[str]:
    """Integer fields of ``config`` (a mapping or an object with ``to_dict``; nested configs as
    ``text_config.hidden_size``) whose value is ``size``."""
    values = config.to_dict() if hasattr(config, "to_dict") else config
    found: list[str] = []

    def walk(d: Mapping[str, Any], prefix: str) -> None:
        for k, v in d.items():
            if isinstance(v, Mapping):
                walk(v, f"{prefix}{k}.")
            elif isinstance(v, int) and not isinstance(v, bool) and v == size:
                found.append(prefix + str(k))

    if isinstance(values, Mapping):
        walk(values, "")
    return found


def refuse_mismatch(
    checkpoint: str, mismatch: ShapeMismatch, *, config: Any = None, config_name: str = "config.json",
) -> InputError:
    """The one-line error for a checkpoint whose config does not fit its weights (raise it).

    Parameters
    ----------
    checkpoint : str
        What the user passed.
    mismatch : ShapeMismatch
        From :func:`first_mismatch`.
    config : mapping or config object, optional
        The config, to name the fields that hold the size the weights lack.
    config_name : str
        The config's file name, as the message names it.
    """
    size = lacking_size(mismatch)
    fields = config_fields_of(config, size) if config is not None and size is not None else []
    hint = f" (the config's {size}: {', '.join(fields)})" if fields else ""
    return InputError(
        f"checkpoint: {checkpoint!r} does not fit its config ({config_name}): {mismatch.key} is "
        f"{mismatch.weights} in the weights, {mismatch.config} by the config{hint}"
    )
