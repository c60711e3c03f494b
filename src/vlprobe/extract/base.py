"""What a model adapter declares and returns.

An adapter wraps one model family. It declares its *streams* (CLIP: ``text`` and ``image``;
LXMERT: ``lang`` and ``vision``) with their layers (0 = embedding output, then one per block)
and a ``kind`` per layer, and turns a batch of inputs into token states. Pooling, batching,
caching and sharding are shared code (:mod:`vlprobe.extract.pooling`,
:mod:`vlprobe.extract.runner`).

A stream's rows are texts (``modality="text"``), images (``"image"``) or image-text pairs
(``"pair"``, for cross-encoders whose states depend on both).
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from vlprobe.extract.checkpoints import ResolvedCheckpoint

__all__ = [
    "DTYPES",
    "Adapter",
    "StreamBatch",
    "StreamSpec",
    "quiet_transformers",
    "resolve_device",
    "resolve_dtype",
]

DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "float16": torch.float16}


@dataclass(frozen=True)
class StreamSpec:
    """One stream of hidden states.

    Attributes
    ----------
    name : str
    modality : {"text", "image", "pair"}
        What one row of the stream is.
    layer_kinds : tuple of str
        One entry per layer, layer 0 first (``embed``, ``self``, ``cross``, ...).
    hidden_size : int
    cls_rule : str
        Where ``cls`` pooling reads (``eos``, ``token0``, ``patch0``) or ``none``.
    pooled_size : int or None
        Width of the model's own pooled output, None when the stream has none.
    """

    name: str
    modality: str
    layer_kinds: tuple[str, ...]
    hidden_size: int
    cls_rule: str
    pooled_size: int | None

    @property
    def n_layers(self) -> int:
        return len(self.layer_kinds)

    @property
    def poolings(self) -> tuple[str, ...]:
        out = ("cls",) if self.cls_rule != "none" else ()
        out += ("mean", "max")
        return out + (("pooled",) if self.pooled_size else ())


@dataclass
class StreamBatch:
    """An adapter's output for one batch of one stream.

    Attributes
    ----------
    hidden : Tensor, shape (B, L, T, H)
        States of the requested layers, in the requested order.
    mask : Tensor, shape (B, T)
        1 for valid tokens.
    cls_index : Tensor, shape (B,), or None
    pooled : Tensor, shape (B, D), or None
    """

    hidden: torch.Tensor
    mask: torch.Tensor
    cls_index: torch.Tensor | None
    pooled: torch.Tensor | None


class Adapter(ABC):
    """Base class of model adapters (see the module docstring)."""

    name: ClassVar[str]
    #: Dual encoders score a pair from the two pooled embeddings (no pair forward).
    dual_encoder: ClassVar[bool] = True
    #: What a score is ("cosine", "itm_probability", ...), recorded in the cache.
    score_kind: ClassVar[str] = ""

    def __init__(self, checkpoint: ResolvedCheckpoint, device: torch.device, dtype: torch.dtype) -> None:
        self.checkpoint = checkpoint
        self.device = device
        self.dtype = dtype

    @classmethod
    @abstractmethod
    def load(cls, checkpoint: str, *, device: str = "cpu", dtype: str = "float32") -> Adapter:
        """Load from a local directory or a hub id (offline: fails fast when not cached)."""

    @property
    @abstractmethod
    def streams(self) -> dict[str, StreamSpec]:
        """Stream name -> spec, in the order they are extracted."""

    @abstractmethod
    def encode(self, stream: str, inputs: Sequence[Any], layers: Sequence[int]) -> StreamBatch:
        """Run one batch of one stream.

        Parameters
        ----------
        stream : str
        inputs : sequence
            Strings for text streams, RGB PIL images for image streams.
        layers : sequence of int
            Layer numbers to return (0 = embeddings).
        """

    @classmethod
    def scores_from_pooled(cls, image_pooled: np.ndarray, text_pooled: np.ndarray) -> np.ndarray:
        """Pair scores of a dual encoder from pooled embeddings (no model needed).

        Parameters
        ----------
        image_pooled : ndarray, shape (I, D)
        text_pooled : ndarray, shape (T, D)

        Returns
        -------
        ndarray, shape (I, T)
        """
        raise NotImplementedError(f"{cls.name} is not a dual encoder")

    def describe(self) -> dict[str, Any]:
        """Facts about the loaded model recorded in the cache (JSON-serialisable)."""
        return {}


def resolve_device(device: str) -> torch.device:
    """``cpu``, ``cuda``, ``cuda:N`` or ``auto`` (cuda when available) -> torch.device."""
    text = (device or "").strip().lower()
    if text == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(text)
    except (RuntimeError, TypeError):
        raise ValueError(f"device must be cpu, cuda, cuda:N or auto, got {device!r}") from None
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be cpu, cuda, cuda:N or auto, got {device!r}")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} asked for, but torch sees no CUDA device here")
    return dev


def resolve_dtype(dtype: str) -> torch.dtype:
    """``float32`` or ``float16`` -> torch dtype."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    return DTYPES[dtype]


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """Silence transformers' warnings and progress bars (e.g. the PIL image-processor fallback)."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()
