"""What a model adapter declares and returns.

An adapter wraps one model family. It declares its *streams* (CLIP: ``text`` and ``image``;
LXMERT: ``lang`` and ``vision``) with their layers (0 = embedding output, then one per block)
and a ``kind`` per layer, and turns a batch of inputs into token states. Pooling, batching,
caching and sharding are shared code (:mod:`vlprobe.extract.models.pooling`,
:mod:`vlprobe.extract.runner`).

A stream's rows are texts (``modality="text"``), images (``"image"``) or image-text pairs
(``"pair"``, for cross-encoders whose states depend on both).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from vlprobe.extract.models.hf import ResolvedCheckpoint
from vlprobe.validation import InputError

__all__ = [
    "Adapter",
    "CrossEncoder",
    "PairOutput",
    "StreamBatch",
    "StreamSpec",
    "TextTable",
    "check_pair_indices",
    "check_regions",
    "text_max_length",
]

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
    #: What a score is ("cosine", "match_probability", ...), recorded in the cache.
    score_kind: ClassVar[str] = ""
    #: Whether the model reads precomputed region features (``--regions``).
    needs_regions: ClassVar[bool] = False
    #: Extra keyword arguments :meth:`load` accepts (``model_config``, ``tokenizer``).
    load_options: ClassVar[tuple[str, ...]] = ()

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

    def input_fingerprints(self) -> dict[str, str]:
        """Fingerprints of side inputs besides the checkpoint (``config``, ``tokenizer``), compared on resume."""
        return {}


@dataclass
class PairOutput:
    """A cross-encoder's output for one batch of (image, text) pairs.

    Attributes
    ----------
    scores : Tensor, shape (B,)
        The model's match score of each pair.
    states : dict of str to dict of str to Tensor
        Stream -> pooling -> (B, L, H) float32 pooled states of the requested layers; empty when
        no states were asked for.
    pooled : dict of str to Tensor
        Stream -> (B, D), the model's own pooled output, for streams that have one.
    logits : Tensor, shape (B, 2), optional
        The raw (no match, match) logits of a binary image-text matching head, whose softmax gives
        ``scores`` (LXMERT, UNITER's ITM head); None for a model without such a head.
    """

    scores: torch.Tensor
    states: dict[str, dict[str, torch.Tensor]]
    pooled: dict[str, torch.Tensor]
    logits: torch.Tensor | None = None


@dataclass
class TextTable:
    """Every caption of a run tokenised once, padded to the longest (a cross-encoder's text table).

    Attributes
    ----------
    input_ids, attention_mask : Tensor, shape (N, T)
    lengths : ndarray of int, shape (N,)
        Real tokens per caption (special tokens included).
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    lengths: np.ndarray

    def __len__(self) -> int:
        return len(self.lengths)

    def take(self, rows: Any, device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
        """Token ids and attention mask of ``rows``, trimmed to the longest of them (right padding).

        Returns
        -------
        input_ids, attention_mask : Tensor, shape (len(rows), T)
        """
        rows = np.asarray(rows, dtype=np.int64)
        t = int(self.lengths[rows].max())
        idx = torch.from_numpy(rows)
        return self.input_ids[idx, :t].to(device), self.attention_mask[idx, :t].to(device)


class CrossEncoder(Adapter):
    """Base class of cross-encoders: every (image, text) pair needs its own forward pass.

    The runner tokenises every text once (:meth:`prepare_texts`), reads every image's region
    features once (:meth:`prepare_images`), then calls :meth:`encode_pairs` with index arrays
    into those tables, one batch of pairs at a time; all pair streams and the score come from
    that one pass.
    """

    dual_encoder = False
    needs_regions = True

    #: What :meth:`prepare_texts` builds (a :class:`TextTable` or a subclass).
    text_table: ClassVar[type[TextTable]] = TextTable
    #: Set by subclasses: the tokenizer, the longest token sequence it may produce, and the
    #: region-feature width the model reads.
    tokenizer: Any
    max_length: int
    feature_dim: int

    def prepare_texts(self, texts: Sequence[str]) -> TextTable:
        """Tokenise all texts once (truncated to ``max_length``, padded to the longest)."""
        tok = self.tokenizer(
            list(texts), padding=True, truncation=True, max_length=self.max_length, return_tensors="pt",
            padding_side="right",  # the tables trim padding off the right, and token 0 is [CLS]
        )
        mask = tok["attention_mask"]
        return self.text_table(tok["input_ids"], mask, mask.sum(dim=1).numpy())

    @abstractmethod
    def prepare_images(self, features: np.ndarray, boxes: np.ndarray, mask: np.ndarray) -> Any:
        """Hold the region inputs of all images once; returns the adapter's image table.

        Parameters
        ----------
        features : ndarray, shape (N, R, D)
        boxes : ndarray, shape (N, R, 4)
            Normalised x1, y1, x2, y2.
        mask : ndarray of bool, shape (N, R)
            True for real boxes.
        """

    @abstractmethod
    def encode_pairs(
        self, texts: Any, images: Any, text_idx: np.ndarray, image_idx: np.ndarray,
        layers: Mapping[str, Sequence[int]] | None, poolings: Sequence[str],
    ) -> PairOutput:
        """Run one batch of pairs.

        Parameters
        ----------
        texts, images
            Tables from :meth:`prepare_texts` and :meth:`prepare_images`.
        text_idx, image_idx : ndarray of int, shape (B,)
            Rows of those tables forming the pairs.
        layers : mapping of str to sequence of int, or None
            Stream -> layers to return, in that order (negative: from the last; see
            :meth:`pair_layers`); None for scores only.
        poolings : sequence of str
            Token poolings (``cls``, ``mean``, ``max``) to compute where the stream offers them.
        """

    def encode(self, stream: str, inputs: Sequence[Any], layers: Sequence[int]) -> StreamBatch:
        raise NotImplementedError(f"{self.name} is a cross-encoder: its states come from encode_pairs")

    def pair_layers(self, layers: Mapping[str, Sequence[int]] | None) -> dict[str, list[int]] | None:
        """``encode_pairs``' ``layers`` checked: one entry per stream, negative numbers counted from
        the last layer, order and repeats kept; None (or empty) for scores only.

        Raises
        ------
        InputError
            A stream is missing, unknown, or a layer is out of range (naming ``layers[stream]``).
        """
        if not layers:
            return None
        unknown = sorted(set(layers) - set(self.streams))
        missing = [s for s in self.streams if s not in layers]
        if unknown or missing:
            raise InputError(
                f"layers: expected one entry per stream ({', '.join(self.streams)}), "
                f"got {', '.join(map(repr, layers))}"
            )
        out: dict[str, list[int]] = {}
        for name, spec in self.streams.items():
            n = spec.n_layers
            resolved = []
            for k in layers[name]:
                if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
                    raise InputError(f"layers[{name}] must hold ints, got {k!r}")
                if not -n <= int(k) < n:
                    raise InputError(f"layers[{name}]: layer {int(k)} is out of range for layers 0..{n - 1}")
                resolved.append(int(k) % n)
            out[name] = resolved
        return out


def check_regions(
    features: np.ndarray, boxes: np.ndarray, mask: np.ndarray, feature_dim: int, model: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Region inputs of a cross-encoder checked and converted.

    Parameters
    ----------
    features : ndarray, shape (N, R, feature_dim)
    boxes : ndarray, shape (N, R, 4)
    mask : ndarray, shape (N, R)
        True (or 1) for real boxes; every image needs one.
    feature_dim : int
        The width the model reads.
    model : str
        Named in the errors.

    Returns
    -------
    features : ndarray of float32, shape (N, R, D), C-contiguous
    boxes : ndarray of float32, shape (N, R, 4), C-contiguous
    mask : ndarray of bool, shape (N, R)
    """
    features = np.asarray(features)
    if features.ndim != 3 or features.shape[2] != feature_dim:
        raise InputError(f"regions: {model} expects features of shape (N, R, {feature_dim}), got {features.shape}")
    boxes = np.ascontiguousarray(boxes, dtype=np.float32)
    if boxes.shape != (*features.shape[:2], 4):
        raise InputError(f"regions: boxes must have shape {(*features.shape[:2], 4)}, got {boxes.shape}")
    m = np.asarray(mask, dtype=bool)
    if m.shape != features.shape[:2]:
        raise InputError(f"regions: mask must have shape {features.shape[:2]}, got {m.shape}")
    if not m.any(axis=1).all():
        raise InputError("regions: every image needs at least one box")
    return np.ascontiguousarray(features, dtype=np.float32), boxes, m


def check_pair_indices(text_idx: Any, image_idx: Any) -> tuple[np.ndarray, np.ndarray]:
    """``text_idx``, ``image_idx`` as int64 arrays; InputError unless both are 1-d of equal length."""
    text_idx = np.asarray(text_idx, dtype=np.int64)
    image_idx = np.asarray(image_idx, dtype=np.int64)
    if text_idx.shape != image_idx.shape or text_idx.ndim != 1:
        raise InputError(
            f"text_idx and image_idx must be 1-d of equal length, got shapes {text_idx.shape} and {image_idx.shape}"
        )
    return text_idx, image_idx


def text_max_length(tokenizer: Any, max_positions: int) -> int:
    """The longest token sequence to feed: the model's positions, or the tokenizer's limit if lower."""
    limit = getattr(tokenizer, "model_max_length", None) or max_positions
    return int(min(max_positions, limit))
