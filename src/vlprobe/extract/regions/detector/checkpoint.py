"""Reading ``pytorch_model.bin`` of the detector and loading it with strict checks.

The file is a plain ``torch.save`` of the state dict (read with ``weights_only=True``, so a
pickle that wants to run code is refused). Old names are accepted: a last name component
``gamma``/``beta`` (pre-1.0 batch norm) reads as ``weight``/``bias``, and ``num_batches_tracked``
counters of trainable batch norms are ignored (the detector's batch norms are frozen). Every
other key must match the model exactly, in name and shape.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import Tensor, nn

from .errors import DetectorInputError

__all__ = ["WEIGHTS_NAME", "load_weights", "normalize_keys", "read_state_dict"]

WEIGHTS_NAME = "pytorch_model.bin"


def read_state_dict(path: str | os.PathLike[str]) -> dict[str, Tensor]:
    """``{name: tensor}`` of a torch file, read with ``weights_only=True``.

    Raises
    ------
    DetectorInputError
        If the file is missing or unreadable, refused by ``weights_only`` (a pickle that runs
        code), or not a mapping of names to tensors.
    """
    p = Path(path)
    if not p.is_file():
        raise DetectorInputError(f"detector: no {p.name} in {str(p.parent)!r} (expected the checkpoint's weights)")
    try:
        state = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises several types (UnpicklingError, RuntimeError, EOFError)
        text = str(exc).strip()
        first = text.splitlines()[0] if text else type(exc).__name__
        raise DetectorInputError(f"{p}: cannot read as a torch state dict with weights_only=True ({first})") from None
    if not isinstance(state, Mapping):
        raise DetectorInputError(f"{p}: expected a state dict (names to tensors), got {type(state).__name__}")
    bad = [k for k, v in state.items() if not isinstance(k, str) or not isinstance(v, Tensor)]
    if bad:
        raise DetectorInputError(f"{p}: expected names mapped to tensors; {len(bad)} entries are not, e.g. {bad[0]!r}")
    return dict(state)


def normalize_keys(state: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Rename ``*.gamma``/``*.beta`` to ``*.weight``/``*.bias``; drop ``num_batches_tracked``."""
    out: dict[str, Tensor] = {}
    for key, value in state.items():
        head, _, last = key.rpartition(".")
        if last == "num_batches_tracked":
            continue
        if last in ("gamma", "beta"):
            key = f"{head}.{'weight' if last == 'gamma' else 'bias'}" if head else ("weight" if last == "gamma" else "bias")
        if key in out:
            raise DetectorInputError(f"checkpoint: key {key!r} appears twice (once under an old gamma/beta name)")
        out[key] = value
    return out


def load_weights(model: nn.Module, state: Mapping[str, Tensor], where: str = "checkpoint") -> None:
    """Copy ``state`` into ``model`` after checking names and shapes.

    Raises
    ------
    DetectorInputError
        One line naming the first missing, unexpected or wrongly shaped key.
    """
    state = normalize_keys(state)
    expected = model.state_dict()
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise DetectorInputError(f"{where}: missing key {missing[0]!r}{more} (not a VG Faster R-CNN checkpoint for this config.yaml?)")
    if unexpected:
        more = f" and {len(unexpected) - 1} more" if len(unexpected) > 1 else ""
        raise DetectorInputError(f"{where}: unexpected key {unexpected[0]!r}{more}")
    for k, v in expected.items():
        if tuple(state[k].shape) != tuple(v.shape):
            raise DetectorInputError(
                f"{where}: key {k!r} has shape {tuple(state[k].shape)}, but config.yaml gives the model {tuple(v.shape)}"
            )
        if not (state[k].is_floating_point() or state[k].dtype == v.dtype):
            raise DetectorInputError(f"{where}: key {k!r} has dtype {state[k].dtype}, expected a float tensor")
    model.load_state_dict({k: state[k].to(v.dtype) for k, v in expected.items()}, strict=True)
