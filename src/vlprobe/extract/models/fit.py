"""Does a checkpoint's config fit its weights? One check and one message for the Hugging Face families and ViLBERT.

A config whose sizes differ from its weights' (a GPT-2 ``n_embd``, a VisualBERT
``visual_embedding_dim``, a ViLBERT ``v_hidden_size``) builds a model of other shapes than the
weights have. Each family compares the shapes its config builds with the shapes its weights
hold and, on the first key where they differ, raises :func:`refuse_mismatch`'s one line (an
:class:`~vlprobe.validation.InputError`, exit code 2) instead of the loader's traceback:

    checkpoint: 'DIR' does not fit its config (config.json): transformer.wte.weight is (100, 32)
    in the weights, (100, 64) by the config (the config's 64: n_embd)

Hugging Face models go through :func:`vlprobe.extract.models.hf.from_pretrained_with_info`,
which first compares the shapes in the weight files' headers (:func:`checkpoint_shapes`, no
tensor read) with the model the config builds on the meta device (:func:`hf_model_shapes`),
before anything is allocated; keys the two name differently (transformers' renames of legacy
checkpoints) are left to transformers, loaded with ``ignore_mismatched_sizes`` and its
mismatched keys refused the same way. ViLBERT, written natively, calls :func:`first_mismatch`
on its own state dict. OpenCLIP and UNITER keep checks of their own, with their own messages
(OpenCLIP: ``openclip.checkpoint.check_sizes`` before building and ``fit_state_dict`` after;
UNITER: ``UniterModel.from_official``).
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlprobe.validation import InputError

__all__ = [
    "ShapeMismatch", "align_keys", "check_hf_fits", "checkpoint_shapes", "config_fields_of", "first_mismatch", "hf_model_shapes", "lacking_size",
    "refuse_mismatch", "shapes_of",
]


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


def checkpoint_shapes(folder: str | Path) -> dict[str, tuple[int, ...]]:
    """Key -> shape of a Hugging Face folder's weights, read from the files' headers: every
    ``*.safetensors`` (sharded or not), else every ``pytorch_model*.bin`` (loaded onto the meta
    device, memory-mapped); ``{}`` where neither can be read that way (a legacy pickle)."""
    import torch

    root = Path(folder)
    shapes: dict[str, tuple[int, ...]] = {}
    tensors = sorted(root.glob("*.safetensors"))
    if tensors:
        from safetensors import safe_open

        for f in tensors:
            with safe_open(str(f), framework="pt") as fh:
                for key in fh.keys():
                    shapes[key] = tuple(int(d) for d in fh.get_slice(key).get_shape())
        return shapes
    index = root / "pytorch_model.bin.index.json"
    try:
        files = (sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
                 if index.is_file() else ["pytorch_model.bin"])
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    for name in files:
        if not (root / name).is_file():
            return {}
        try:
            state = torch.load(str(root / name), map_location="meta", weights_only=True, mmap=True)
        except (RuntimeError, OSError, ValueError, EOFError, pickle.UnpicklingError):
            return {}  # a legacy or damaged file: the loader reports it when it reads it
        if isinstance(state, Mapping):
            shapes.update(shapes_of({k: v for k, v in state.items() if hasattr(v, "shape")}))
    return shapes


def hf_model_shapes(model_cls: Any, config: Any) -> tuple[dict[str, tuple[int, ...]], str]:
    """Key -> shape of the model ``config`` builds (on the meta device: nothing allocated) and its
    ``base_model_prefix``."""
    from vlprobe.extract.models.meta import meta_skeleton

    build = getattr(model_cls, "from_config", None) or model_cls._from_config
    with meta_skeleton():
        model = build(config)
    return shapes_of(model.state_dict()), str(getattr(model, "base_model_prefix", "") or "")


def align_keys(weights: Mapping[str, Sequence[int]], model: Mapping[str, Sequence[int]], prefix: str
               ) -> dict[str, Sequence[int]]:
    """``weights`` under the model's key names where a base-model prefix is all that differs (a
    checkpoint saved from the base model loaded with a head, or the reverse); other keys as
    they are."""
    if not prefix:
        return dict(weights)
    out: dict[str, Sequence[int]] = {}
    for key, shape in weights.items():
        if key not in model and f"{prefix}.{key}" in model:
            key = f"{prefix}.{key}"
        elif key not in model and key.startswith(f"{prefix}.") and key[len(prefix) + 1:] in model:
            key = key[len(prefix) + 1:]
        out[key] = shape
    return out


def check_hf_fits(model_cls: Any, folder: str | Path, checkpoint: str) -> None:
    """Refuse a Hugging Face folder whose ``config.json`` builds other shapes than its weight files
    hold (:func:`refuse_mismatch`), comparing headers with the model built on the meta device.
    A folder whose config or weights cannot be read so is left to the loader."""
    from transformers import AutoConfig

    weights = checkpoint_shapes(folder)
    if not weights:
        return
    try:
        config = AutoConfig.from_pretrained(folder)
        model, prefix = hf_model_shapes(model_cls, config)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return  # another model type, an unreadable config: the loader's own checks say so
    found = first_mismatch(model, align_keys(weights, model, prefix))
    if found is not None:
        raise refuse_mismatch(checkpoint, found, config=config)
