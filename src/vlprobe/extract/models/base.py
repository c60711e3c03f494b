"""What a model adapter declares and returns.

An adapter wraps one model family. It declares its *streams* (CLIP: ``text`` and ``image``;
LXMERT: ``lang`` and ``vision``) with their layers (0 = embedding output, then one per block)
and a ``kind`` per layer, and turns a batch of inputs into token states. Pooling, batching,
caching and sharding are shared code (:mod:`vlprobe.extract.models.pooling`,
:mod:`vlprobe.extract.scoring`, :mod:`vlprobe.extract.runner`).

A stream's rows are texts (``modality="text"``), images (``"image"``) or image-text pairs
(``"pair"``, for cross-encoders whose states depend on both).

Two kinds of adapter score pairs:

* a :class:`DualEncoder` (CLIP, SigLIP) encodes texts and images apart; a pair's score comes from
  the two pooled embeddings (:meth:`DualEncoder.scores_from_pooled`), with no pair forward
  (:class:`HFDualEncoder`: one built from a transformers model, tokenizer and image processor);
* a :class:`CrossEncoder` (LXMERT, UNITER, BLIP-ITM) needs a forward per pair: texts and images
  are prepared once (:meth:`~CrossEncoder.prepare_texts`, :meth:`~CrossEncoder.prepare_images`)
  and batches of pairs are index arrays into those tables (:meth:`~CrossEncoder.encode_pairs`).
  Its ``pair`` streams come from that pass; a ``text`` or ``image`` stream it may also have
  (BLIP's unimodal encoders) comes from :meth:`Adapter.encode`, once per text or image.

Every adapter declares what it reads for an image, ``image_input``: ``"pixels"`` (RGB PIL
images; every image needs a file), ``"regions"`` (precomputed region features from a
``--regions`` file) or ``"none"``. The input checks of ``probe extract`` and ``probe eval`` read
this declaration (:func:`vlprobe.extract.model_inputs.check_model_inputs`). A pixel model is fed its
images as stored (:data:`PIXEL_ORIENTATION`: the EXIF Orientation tag ignored, as the reference
code's ``Image.open(path).convert("RGB")`` ignores it) through its image processor's PIL backend;
:meth:`Adapter.image_preprocessing` reports both for the cache header.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import numpy as np
import torch

from vlprobe.extract.models.hf import LoadedModel, ResolvedCheckpoint, image_backend_of
from vlprobe.extract.models.hooks import LayerSite
from vlprobe.extract.models.streams import StreamSpec
from vlprobe.validation import InputError

#: What an adapter reads for an image (its ``image_input``): RGB pixels, precomputed region
#: features, or nothing (text-only scorers).
IMAGE_INPUTS: tuple[str, ...] = ("pixels", "regions", "none")
#: How a pixel model's image files are decoded (:data:`vlprobe.data.items.IMAGE_ORIENTATIONS`):
#: as stored, the EXIF Orientation tag ignored, as CLIP's, SigLIP's and BLIP's reference code
#: (``PIL.Image.open(path).convert("RGB")``) decodes them.
PIXEL_ORIENTATION = "stored"

__all__ = [
    "IMAGE_INPUTS",
    "PIXEL_ORIENTATION",
    "Adapter",
    "CrossEncoder",
    "DualEncoder",
    "HFDualEncoder",
    "PairOutput",
    "ReferenceCheckpoint",
    "StreamBatch",
    "StreamSpec",
    "TextTable",
    "check_pair_indices",
    "check_regions",
    "cosine_matrix",
    "text_max_length",
]

@dataclass(frozen=True)
class ReferenceCheckpoint:
    """The checkpoint the papers ran a model with: what ``probe extract --model NAME`` loads when no
    ``--checkpoint`` is given (see :mod:`vlprobe.extract.defaults`).

    Attributes
    ----------
    name : str
        A hub id (``"unc-nlp/lxmert-base-uncased"``), or the file name of an official checkpoint
        that is not on the hub (``"uniter-base.pt"``).
    hub : bool
        Whether ``name`` is a hub id.
    source : str
        Where the checkpoint comes from, said in the message when it cannot be found (for one
        that is not on the hub: where to download it).
    """

    name: str
    hub: bool = True
    source: str = ""


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
    #: What the model reads for an image: one of :data:`IMAGE_INPUTS`.
    image_input: ClassVar[str]
    #: What a score is ("cosine", "match_probability", ...), recorded in the cache; a model whose
    #: load options change it (BLIP's score_head) sets it per instance.
    score_kind: str = ""
    #: Extra keyword arguments :meth:`load` accepts (``model_config``, ``tokenizer``, ...).
    load_options: ClassVar[tuple[str, ...]] = ()
    #: The checkpoint the papers used, the default of ``probe extract --checkpoint``; None: the
    #: model has none and a checkpoint must be given.
    reference_checkpoint: ClassVar[ReferenceCheckpoint | None] = None
    #: The dtype the model's reference code loads it in: what ``dtype="auto"`` (the default of
    #: ``--dtype``) resolves to (:func:`vlprobe.extract.model_inputs.model_dtype`). float32
    #: unless a model declares another; the others stay named options beside it.
    reference_dtype: ClassVar[str] = "float32"
    #: Models that read regions: the box-selection preset of the features the model was trained
    #: on (:mod:`vlprobe.extract.regions.detector.presets`), used when ``probe extract`` makes the
    #: regions itself. None for a model whose features came from another detector (ViLBERT's and
    #: VisualBERT's ResNeXt-152 Detectron models): ``--regions`` must then be given.
    region_preset: ClassVar[str | None] = None
    #: Pixel models: whether vlprobe converts each image to RGB as it decodes it (True: the
    #: transformers processors the papers ran convert first, and so do LLaVA's and Qwen2-VL's), or
    #: hands it over in the mode its file stores (RGBA, L, P, ...) because the model's
    #: preprocessing converts later, as its reference does (OpenCLIP: after the resize and crop).
    rgb_on_load: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        kind = cls.__dict__.get("image_input")
        if kind is not None and kind not in IMAGE_INPUTS:
            raise TypeError(f"{cls.__name__}.image_input must be one of {', '.join(IMAGE_INPUTS)}, got {kind!r}")

    def __init__(self, checkpoint: ResolvedCheckpoint, device: torch.device, dtype: torch.dtype) -> None:
        self.checkpoint = checkpoint
        self.device = device
        self.dtype = dtype

    @classmethod
    @abstractmethod
    def load(cls, checkpoint: str, *, device: str = "auto", dtype: str = "float32") -> Adapter:
        """Load from a local directory or a hub id (offline: fails fast when not cached)."""

    @property
    @abstractmethod
    def streams(self) -> dict[str, StreamSpec]:
        """Stream name -> spec, in the order they are extracted."""

    @abstractmethod
    def encode(self, stream: str, inputs: Sequence[Any], layers: Sequence[int]) -> StreamBatch:
        """Run one batch of one ``text`` or ``image`` stream.

        Parameters
        ----------
        stream : str
        inputs : sequence
            Strings for text streams, PIL images for image streams (RGB unless the adapter's
            :attr:`rgb_on_load` is False).
        layers : sequence of int
            Layer numbers to return (0 = embeddings), in this order.
        """

    def describe(self) -> dict[str, Any]:
        """Facts about the loaded model recorded in the cache (JSON-serialisable)."""
        return {}

    def layer_sites(self, stream: str) -> list[LayerSite]:
        """Where each layer of ``stream`` comes out (index = layer number), for editing its states
        during a run (:func:`vlprobe.extract.models.hooks.edited_layers`: activation patching,
        running from a layer on with erased states).

        Raises
        ------
        InputError
            The adapter does not support editing this stream's states.
        """
        raise InputError(f"model: {self.name} does not support editing the states of stream {stream!r}")

    def tokens(self, texts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Token ids and attention mask of ``texts``, each shape (B, T), padded as :meth:`encode`
        pads a batch of exactly these texts; for aligning the tokens of two captions."""
        raise InputError(f"model: {self.name} does not expose its token ids")

    def input_fingerprints(self) -> dict[str, str]:
        """Fingerprints of side inputs besides the checkpoint (``config``, ``tokenizer``), compared on resume."""
        return {}

    def model_options(self) -> dict[str, Any]:
        """Load options that change what the model computes (e.g. BLIP's ``score_head``), recorded
        in the cache and compared on resume (JSON-serialisable); empty for most models."""
        return {}

    def image_preprocessing(self) -> dict[str, str]:
        """How image files become model input, recorded in the cache and compared on resume:
        ``image_backend`` (the image processor's transformers backend, ``"pil"``) and
        ``image_orientation`` (:data:`PIXEL_ORIENTATION`); empty for models that read no pixels
        (region models: their region file records how its images were decoded)."""
        if self.image_input != "pixels":
            return {}
        processor = getattr(self, "processor", None)
        return {
            "image_backend": image_backend_of(processor) if processor is not None else "",
            "image_orientation": PIXEL_ORIENTATION,
        }


class DualEncoder(Adapter):
    """Base class of dual encoders: texts and images are encoded apart, and a pair's score comes
    from the two pooled embeddings (``pooled`` of the ``text`` and ``image`` streams)."""

    @classmethod
    @abstractmethod
    def scores_from_pooled(
        cls, image_pooled: np.ndarray, text_pooled: np.ndarray, info: Mapping[str, Any] | None = None
    ) -> np.ndarray:
        """Pair scores from pooled embeddings (no model needed).

        Parameters
        ----------
        image_pooled : ndarray, shape (I, D)
        text_pooled : ndarray, shape (T, D)
        info : mapping, optional
            The loaded model's :meth:`Adapter.describe` (as a cache records it), for models whose
            score has learned constants (SigLIP's scale and bias).

        Returns
        -------
        ndarray of float32, shape (I, T)
        """

    @classmethod
    def scores_from_cosine(cls, cosine: np.ndarray, info: Mapping[str, Any] | None = None) -> np.ndarray:
        """Pair scores from the cosines of pooled embeddings, any shape (the score as a function of
        the cosine: CLIP's is the cosine itself; SigLIP's a sigmoid of it). ``info`` as in
        :meth:`scores_from_pooled`."""
        return np.asarray(cosine)


class HFDualEncoder(DualEncoder):
    """A dual encoder over a transformers model with its tokenizer and image processor, as
    :func:`~vlprobe.extract.models.hf.load_hf` loads them (CLIP, SigLIP); it declares its
    ``text`` and ``image`` streams in :meth:`stream_specs`."""

    def __init__(
        self, model: Any, tokenizer: Any, processor: Any, checkpoint: ResolvedCheckpoint,
        device: torch.device, dtype: torch.dtype,
    ) -> None:
        super().__init__(checkpoint, device, dtype)
        self.model, self.tokenizer, self.processor = model, tokenizer, processor
        self._streams = self.stream_specs(model.config)
        self.max_length = text_max_length(tokenizer, model.config.text_config.max_position_embeddings)

    @classmethod
    def from_loaded(cls: type[_HF], hf: LoadedModel) -> _HF:
        """The adapter of what :func:`~vlprobe.extract.models.hf.load_hf` loaded."""
        return cls(hf.model, hf.tokenizer, hf.processor, hf.checkpoint, hf.device, hf.dtype)

    @staticmethod
    @abstractmethod
    def stream_specs(config: Any) -> dict[str, StreamSpec]:
        """The streams of a model of this transformers config (``text_config``, ``vision_config``)."""

    @property
    def streams(self) -> dict[str, StreamSpec]:
        return self._streams


_HF = TypeVar("_HF", bound=HFDualEncoder)


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
    positions : Tensor of int64, shape (B, K), optional
        Where each pair's parts sit in its joint sequence, one column per name of the adapter's
        ``position_columns`` (generative models: the image tokens, the caption, the scored
        tokens); None for models without a joint token sequence to record.
    """

    scores: torch.Tensor
    states: dict[str, dict[str, torch.Tensor]]
    pooled: dict[str, torch.Tensor]
    logits: torch.Tensor | None = None
    positions: torch.Tensor | None = None


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

    The pair-scoring engine (:mod:`vlprobe.extract.scoring`) tokenises every text once
    (:meth:`prepare_texts`), prepares every image once (:meth:`prepare_images`: region features
    or pixels, as ``image_input`` says), then calls :meth:`encode_pairs` with index arrays into
    those tables, one batch of pairs at a time; every ``pair`` stream and the score come from
    that one pass.
    """

    #: What :meth:`prepare_texts` builds (a :class:`TextTable` or a subclass).
    text_table: ClassVar[type[TextTable]] = TextTable
    #: How many prepared images the engine holds at once (a region table is small; a table of
    #: vision-transformer outputs is not).
    image_block: ClassVar[int] = 512
    #: Names of the columns of :attr:`PairOutput.positions` (recorded in the cache as
    #: ``/pairs/positions``); empty for models that return no positions.
    position_columns: ClassVar[tuple[str, ...]] = ()
    #: Set by subclasses: the tokenizer and the longest token sequence it may produce; models
    #: that read regions also set the region-feature width they read (``feature_dim``).
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
    def prepare_images(self, images: Any) -> Any:
        """Hold the inputs of a block of images once; returns the adapter's image table.

        Parameters
        ----------
        images : RegionBatch or sequence of PIL images
            ``image_input == "regions"``: a :class:`vlprobe.extract.regions.store.RegionBatch`
            (features (N, R, D), normalised x1, y1, x2, y2 boxes (N, R, 4), mask (N, R));
            ``"pixels"``: N RGB PIL images.
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

    def pair_lengths(self, texts: Any, images: Any, text_idx: np.ndarray, image_idx: np.ndarray) -> np.ndarray | None:
        """Each pair's input length, shape (B,), for the engine to batch pairs of similar length
        together (less padding); None (the default) keeps the pairs in their order."""
        return None

    def plain_pair_scores(self, texts: Any, images: Any, text_idx: np.ndarray, image_idx: np.ndarray) -> torch.Tensor:
        """Scores (B,) of a batch of pairs from one plain forward pass in which every layer runs
        over the pair rows (no per-caption or per-image memo, no last-layer shortcut), so forward
        hooks on :meth:`layer_sites` see, and may edit, each pair's own states.

        Raises
        ------
        InputError
            The adapter has no such pass.
        """
        raise InputError(f"model: {self.name} does not support editing its states during a run")

    def encode(self, stream: str, inputs: Sequence[Any], layers: Sequence[int]) -> StreamBatch:
        """Cross-encoders without ``text``/``image`` streams have nothing to encode alone."""
        raise InputError(f"stream: {self.name} has only pair streams ({', '.join(self.streams)}), got {stream!r}")

    @property
    def pair_streams(self) -> dict[str, StreamSpec]:
        """The ``pair`` streams (what :meth:`encode_pairs` returns states of)."""
        return {name: spec for name, spec in self.streams.items() if spec.modality == "pair"}

    def pair_layers(self, layers: Mapping[str, Sequence[int]] | None) -> dict[str, list[int]] | None:
        """``encode_pairs``' ``layers`` checked: one entry per pair stream, negative numbers counted
        from the last layer, order and repeats kept; None (or empty) for scores only.

        Raises
        ------
        InputError
            A stream is missing, unknown, or a layer is out of range (naming ``layers[stream]``).
        """
        if not layers:
            return None
        streams = self.pair_streams
        unknown = sorted(set(layers) - set(streams))
        missing = [s for s in streams if s not in layers]
        if unknown or missing:
            raise InputError(
                f"layers: expected one entry per pair stream ({', '.join(streams)}), "
                f"got {', '.join(map(repr, layers))}"
            )
        out: dict[str, list[int]] = {}
        for name, spec in streams.items():
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


def check_regions(regions: Any, feature_dim: int, model: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Region inputs of a cross-encoder checked and converted.

    Parameters
    ----------
    regions : RegionBatch
        Anything with ``features`` (N, R, feature_dim), ``boxes`` (N, R, 4) and ``mask`` (N, R;
        True or 1 for real boxes, every image needs one), e.g. what ``RegionStore.get`` returns.
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
    features, boxes, mask = (getattr(regions, k, None) for k in ("features", "boxes", "mask"))
    if features is None or boxes is None or mask is None:
        raise TypeError(f"regions: {model} reads region features (features, boxes, mask), got {type(regions).__name__}")
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


def cosine_matrix(image_pooled: np.ndarray, text_pooled: np.ndarray) -> np.ndarray:
    """Cosine similarities (I, T), float64, of image embeddings (I, D) and text embeddings (T, D)."""
    img = np.asarray(image_pooled, dtype=np.float64)
    txt = np.asarray(text_pooled, dtype=np.float64)
    img = img / np.linalg.norm(img, axis=1, keepdims=True)
    txt = txt / np.linalg.norm(txt, axis=1, keepdims=True)
    return img @ txt.T


def text_max_length(tokenizer: Any, max_positions: int) -> int:
    """The longest token sequence to feed: the model's positions, or the tokenizer's limit if lower."""
    limit = getattr(tokenizer, "model_max_length", None) or max_positions
    return int(min(max_positions, limit))
