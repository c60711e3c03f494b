"""The device and dtype a model runs in: ``--device`` and ``--dtype`` resolved in one place.

Used by the model adapters, the MLP probes and the neural caption strategies alike.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from vlprobe.validation import InputError

__all__ = ["DTYPES", "cpu_threads", "device_name", "resolve_device", "resolve_dtype"]

DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def resolve_device(device: str) -> torch.device:
    """``cpu``, ``cuda``, ``cuda:N`` or ``auto`` (cuda when available) -> torch.device."""
    text = (device or "").strip().lower()
    if text == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(text)
    except (RuntimeError, TypeError):
        raise InputError(f"device must be cpu, cuda, cuda:N or auto, got {device!r}") from None
    if dev.type not in ("cpu", "cuda"):
        raise InputError(f"device must be cpu, cuda, cuda:N or auto, got {device!r}")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise InputError(f"device {device!r} asked for, but torch sees no CUDA device here")
    return dev


def device_name(device: torch.device | str | None) -> str:
    """The device work ran on, as outputs record it: ``cpu`` or ``cuda:N`` (never ``auto``, and a
    CUDA device always with its index: plain ``cuda`` means the current one)."""
    if device is None:
        return "cpu"
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        return f"cuda:{torch.cuda.current_device()}"
    return str(dev)


def resolve_dtype(dtype: str) -> torch.dtype:
    """``float32``, ``float16`` or ``bfloat16`` -> torch dtype."""
    if dtype not in DTYPES:
        raise InputError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    return DTYPES[dtype]


@contextlib.contextmanager
def cpu_threads(threads: int | None) -> Iterator[int]:
    """Run the block on ``threads`` CPU threads of torch (None: as they are), restored after;
    yields the count the block runs with (what outputs record)."""
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
