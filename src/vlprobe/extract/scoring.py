"""The one pair-scoring engine: ``probe extract`` and ``probe eval`` score image-text pairs here.

A batch of (image, text) pairs is given as a list of texts, a source of images
(:class:`ImageSource`) and two index arrays into them. :func:`score_pairs` yields the pairs'
scores batch by batch (:class:`PairBatch`), with the pooled states of a cross-encoder's ``pair``
streams when asked, whatever kind of model scores them:

* a :class:`~vlprobe.extract.models.base.DualEncoder` (CLIP, SigLIP): every distinct image and
  every distinct text used is encoded once, in batches (:func:`encode_stream`), keeping their
  pooled embeddings; each batch of pairs is scored by ``scores_from_pooled`` on the distinct rows
  of that batch only, never on the full image x text matrix;
* a :class:`~vlprobe.extract.models.base.CrossEncoder` (LXMERT, UNITER, BLIP-ITM, the generative
  models): every distinct text is tokenised once (``prepare_texts``); the distinct images are
  prepared once each, in blocks of ``image_block`` images (``prepare_images``: region features
  read once from the region store, or pixels loaded once and encoded by the model); the pairs of
  each block run in batches through ``encode_pairs`` (never one forward per pair), sorted by
  length first where the adapter gives the pairs' lengths (``pair_lengths``: generative models,
  whose joint sequences differ in length), so that a batch pads little;
* a blind text scorer (:class:`~vlprobe.extract.models.blind.TextScorer`): every distinct text is
  scored once, the image ignored.

The runner (:mod:`vlprobe.extract.runner`) writes each batch into the cache as it comes; ``probe
eval``'s scorer (:mod:`vlprobe.extract.eval_scorer`) collects them. :func:`encode_stream` is the
batch loop of one ``text`` or ``image`` stream (inputs of the next batch read in a background
thread while the model runs), shared by the runner's streams and the dual encoders' embeddings
here. What a model reads, and the checks of its inputs, are :mod:`vlprobe.extract.model_inputs`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vlprobe.data.items import ImageRef
from vlprobe.extract.model_inputs import model_kind
from vlprobe.extract.models.base import (
    IMAGE_INPUTS,
    PIXEL_ORIENTATION,
    Adapter,
    CrossEncoder,
    DualEncoder,
)
from vlprobe.extract.models.pooling import TOKEN_POOLINGS, pool_states
from vlprobe.validation import InputError, check_choice, check_positive_int

__all__ = [
    "ImageSource",
    "PairBatch",
    "StreamRows",
    "encode_stream",
    "pooled_score_fn",
    "score_pairs",
]


# -- images ---------------------------------------------------------------------------------------


@dataclass
class ImageSource:
    """The images of a run, read as the model declares: pixels from files, or region features.

    Attributes
    ----------
    image_input : {"pixels", "regions", "none"}
    images : sequence of ImageRef
        Row i of the source is ``images[i]``.
    store : RegionStore or None
        Where region features are read (``image_input == "regions"``), keyed by ``ImageRef.name``.
    rgb : bool
        Pixels converted to RGB on decoding; False: in the mode each file stores (the model's
        ``rgb_on_load``).
    """

    image_input: str
    images: Sequence[ImageRef]
    store: Any = None
    rgb: bool = True

    @classmethod
    def for_adapter(cls, adapter: Adapter, images: Sequence[ImageRef], store: Any = None) -> ImageSource:
        """The images of a run as ``adapter`` reads them (its ``image_input``; pixels converted to
        RGB on decoding unless its ``rgb_on_load`` is False)."""
        return cls(adapter.image_input, images, store, rgb=adapter.rgb_on_load)

    def __post_init__(self) -> None:
        check_choice(self.image_input, "image_input", IMAGE_INPUTS)
        if self.image_input == "regions" and self.store is None:
            raise InputError("store: a region store is needed to read region features")

    def read(self, rows: np.ndarray) -> Any:
        """The inputs of image ``rows``: a list of PIL images (RGB unless :attr:`rgb` is False), or
        a ``RegionBatch``."""
        if self.image_input == "pixels":
            return [self.images[int(i)].load(PIXEL_ORIENTATION, rgb=self.rgb) for i in rows]
        if self.image_input == "regions":
            return self.store.get([self.images[int(i)].name for i in rows])
        raise InputError("image_input: this model reads no images")


# -- one stream, batch by batch ---------------------------------------------------------------------


@dataclass
class StreamRows:
    """One batch of a ``text`` or ``image`` stream.

    Attributes
    ----------
    index : ndarray of int, shape (B,)
        Positions in the ``rows`` given to :func:`encode_stream`.
    states : dict of str to ndarray
        Pooling -> (B, L, H) float32 pooled states of the asked layers.
    pooled : ndarray, shape (B, D), or None
        The model's own pooled output (float32).
    """

    index: np.ndarray
    states: dict[str, np.ndarray]
    pooled: np.ndarray | None


def _bar(total: int, desc: str, unit: str, progress: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, disable=not progress, file=sys.stderr, leave=False)


def encode_stream(
    adapter: Adapter, stream: str, load: Callable[[np.ndarray], list[Any]], rows: np.ndarray,
    layers: Sequence[int], poolings: Sequence[str], *, batch_size: int = 32, progress: bool = False,
) -> Iterator[StreamRows]:
    """Run ``rows`` of one ``text``/``image`` stream in batches, reading the next batch's inputs in a
    background thread while the model runs.

    Parameters
    ----------
    adapter : Adapter
    stream : str
    load : callable
        (rows of one batch) -> the model inputs (strings or PIL images).
    rows : ndarray of int, shape (N,)
        The rows to encode, in this order (handed to ``load`` batch by batch).
    layers : sequence of int
        Layers to return (0 = embeddings).
    poolings : sequence of str
        Token poolings to compute (``cls``, ``mean``, ``max``; others ignored).
    """
    rows = np.asarray(rows, dtype=np.int64)
    if not len(rows):
        return
    token = [p for p in poolings if p in TOKEN_POOLINGS]
    starts = list(range(0, len(rows), batch_size))
    bar = _bar(len(rows), stream, "row", progress)
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(load, rows[: batch_size])
        for n, start in enumerate(starts):
            data = pending.result()
            if n + 1 < len(starts):
                nxt = starts[n + 1]
                pending = pool.submit(load, rows[nxt : nxt + batch_size])
            out = adapter.encode(stream, data, layers)
            pooled = pool_states(out.hidden, out.mask, out.cls_index, token) if token else {}
            index = np.arange(start, min(start + batch_size, len(rows)))
            yield StreamRows(
                index, {p: v.cpu().numpy() for p, v in pooled.items()},
                out.pooled.float().cpu().numpy() if out.pooled is not None else None,
            )
            bar.update(len(index))
    bar.close()


def pooled_score_fn(cls: type[DualEncoder], info: Mapping[str, Any] | None) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """(image pooled (I, D), text pooled (T, D)) -> scores (I, T) of a dual encoder, with the learned
    constants its score needs taken from ``info`` (the model's ``describe()``, as a cache records it)."""

    def score(image_pooled: np.ndarray, text_pooled: np.ndarray) -> np.ndarray:
        return cls.scores_from_pooled(image_pooled, text_pooled, info)

    return score


# -- pairs ------------------------------------------------------------------------------------------


@dataclass
class PairBatch:
    """One batch of scored pairs.

    Attributes
    ----------
    index : ndarray of int, shape (B,)
        Positions in the ``text_idx``/``image_idx`` given to :func:`score_pairs`, ascending
        within the batch.
    scores : ndarray of float32, shape (B,)
    states : dict of str to dict of str to ndarray
        Pair stream -> pooling -> (B, L, H) float32; empty unless ``layers`` were asked.
    pooled : dict of str to ndarray
        Pair stream -> (B, D), the model's own pooled output, where it has one.
    logits : ndarray of float32, shape (B, 2), or None
        The raw (no match, match) logits of a binary matching head whose softmax is the score
        (LXMERT, UNITER's and BLIP's ITM heads); None for other models.
    positions : ndarray of int64, shape (B, K), or None
        Where each pair's parts sit in its joint sequence (the adapter's ``position_columns``);
        None for models without one.
    """

    index: np.ndarray
    scores: np.ndarray
    states: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    pooled: dict[str, np.ndarray] = field(default_factory=dict)
    logits: np.ndarray | None = None
    positions: np.ndarray | None = None


def _check_indices(text_idx: Any, image_idx: Any, n_texts: int, n_images: int | None) -> tuple[np.ndarray, np.ndarray]:
    t = np.asarray(text_idx, dtype=np.int64)
    i = np.asarray(image_idx, dtype=np.int64)
    if t.ndim != 1 or t.shape != i.shape:
        raise InputError(f"text_idx and image_idx must be 1-d of equal length, got shapes {t.shape} and {i.shape}")
    if len(t) and (t.min() < 0 or t.max() >= n_texts):
        raise InputError(f"text_idx: rows must lie in 0..{n_texts - 1}")
    if n_images is not None and len(i) and (i.min() < 0 or i.max() >= n_images):
        raise InputError(f"image_idx: rows must lie in 0..{n_images - 1}")
    return t, i


def _batches(positions: np.ndarray, size: int) -> Iterator[np.ndarray]:
    for start in range(0, len(positions), size):
        yield positions[start : start + size]


def score_pairs(
    scorer: Any, texts: Sequence[str], images: ImageSource | None, text_idx: Any, image_idx: Any, *,
    layers: Mapping[str, Sequence[int]] | None = None, poolings: Sequence[str] = (),
    batch_size: int = 32, progress: bool = False,
) -> Iterator[PairBatch]:
    """Score the pairs (``images`` row ``image_idx[p]``, ``texts[text_idx[p]]``) batch by batch.

    Parameters
    ----------
    scorer : DualEncoder, CrossEncoder or TextScorer
        A loaded model.
    texts : sequence of str
        Texts the pairs index (only those used are encoded).
    images : ImageSource or None
        Images the pairs index (only those used are read); None for a text scorer.
    text_idx, image_idx : array of int, shape (P,)
    layers : mapping of str to sequence of int, optional
        Cross-encoders: pair stream -> layers whose pooled states to return (see
        ``CrossEncoder.pair_layers``); None for scores only.
    poolings : sequence of str
        Token poolings of those states.
    batch_size : int
        Pairs per batch (and texts/images per batch where they are encoded alone).
    progress : bool
        Show tqdm bars on stderr.

    Yields
    ------
    PairBatch
        Every pair exactly once. Dual encoders and text scorers yield the pairs in their order;
        cross-encoders block by block of images.
    """
    check_positive_int(batch_size, "batch_size")
    kind = model_kind(type(scorer))
    n_images = None if images is None else len(images.images)
    t_idx, i_idx = _check_indices(text_idx, image_idx, len(texts), n_images)
    if kind != "cross" and layers:
        raise InputError(f"layers: {scorer.name} has no pair streams; only cross-encoders return pair states")
    if kind == "text":
        yield from _text_pairs(scorer, texts, t_idx, batch_size, progress)
        return
    if images is None:
        raise InputError(f"images: {scorer.name} reads images; give an ImageSource")
    if kind == "dual":
        yield from _dual_pairs(scorer, texts, images, t_idx, i_idx, batch_size, progress)
    else:
        yield from _cross_pairs(scorer, texts, images, t_idx, i_idx, layers, poolings, batch_size, progress)


def _text_pairs(scorer: Any, texts: Sequence[str], t_idx: np.ndarray, batch_size: int, progress: bool) -> Iterator[PairBatch]:
    used, inverse = np.unique(t_idx, return_inverse=True)
    values = np.asarray(scorer.score_texts([texts[int(t)] for t in used], batch_size))
    for sel in _batches(np.arange(len(t_idx)), batch_size):
        yield PairBatch(sel, values[inverse[sel]].astype(np.float32))


def _embeddings(adapter: DualEncoder, stream: str, load: Callable[[np.ndarray], list[Any]], rows: np.ndarray,
                batch_size: int, progress: bool) -> np.ndarray:
    """Pooled embeddings (len(rows), D) of one stream (no token states)."""
    parts: list[np.ndarray] = []
    for got in encode_stream(adapter, stream, load, rows, [0], (), batch_size=batch_size, progress=progress):
        if got.pooled is None:
            raise InputError(f"model {adapter.name!r}: stream {stream!r} has no pooled output to score with")
        parts.append(got.pooled)
    return np.concatenate(parts)


def _dual_pairs(adapter: DualEncoder, texts: Sequence[str], images: ImageSource, t_idx: np.ndarray,
                i_idx: np.ndarray, batch_size: int, progress: bool) -> Iterator[PairBatch]:
    by_modality = {spec.modality: name for name, spec in adapter.streams.items()}
    used_t, t_inv = np.unique(t_idx, return_inverse=True)
    used_i, i_inv = np.unique(i_idx, return_inverse=True)
    txt = _embeddings(adapter, by_modality["text"], lambda rows: [texts[int(t)] for t in rows], used_t, batch_size, progress)
    img = _embeddings(adapter, by_modality["image"], images.read, used_i, batch_size, progress)
    score = pooled_score_fn(type(adapter), adapter.describe())
    for sel in _batches(np.arange(len(t_idx)), batch_size):
        # Only the batch's distinct images x distinct texts: at most batch_size^2 scores.
        bi, bi_inv = np.unique(i_inv[sel], return_inverse=True)
        bt, bt_inv = np.unique(t_inv[sel], return_inverse=True)
        block = score(img[bi], txt[bt])
        yield PairBatch(sel, np.asarray(block[bi_inv, bt_inv], dtype=np.float32))


def _cross_pairs(
    adapter: CrossEncoder, texts: Sequence[str], images: ImageSource, t_idx: np.ndarray, i_idx: np.ndarray,
    layers: Mapping[str, Sequence[int]] | None, poolings: Sequence[str], batch_size: int, progress: bool,
) -> Iterator[PairBatch]:
    if not len(t_idx):
        return
    used_t, t_inv = np.unique(t_idx, return_inverse=True)
    used_i, i_inv = np.unique(i_idx, return_inverse=True)
    token = [p for p in TOKEN_POOLINGS if p in poolings]
    text_table = adapter.prepare_texts([texts[int(t)] for t in used_t])
    step = max(1, int(adapter.image_block))
    blocks = [np.arange(a, min(a + step, len(used_i))) for a in range(0, len(used_i), step)]
    bar = _bar(len(t_idx), "pairs", "pair", progress)
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(images.read, used_i[blocks[0]])
        for n, block in enumerate(blocks):
            read = pending.result()
            if n + 1 < len(blocks):
                pending = pool.submit(images.read, used_i[blocks[n + 1]])
            image_table = adapter.prepare_images(read)
            del read
            first = int(block[0])
            in_block = np.flatnonzero((i_inv >= first) & (i_inv <= int(block[-1])))
            lengths = adapter.pair_lengths(text_table, image_table, t_inv[in_block], i_inv[in_block] - first)
            if lengths is not None:  # batches of similar lengths pad little
                in_block = in_block[np.argsort(np.asarray(lengths), kind="stable")]
            for sel in _batches(in_block, batch_size):
                sel = np.sort(sel)  # each batch's pairs ascending (what the cache writer takes)
                out = adapter.encode_pairs(text_table, image_table, t_inv[sel], i_inv[sel] - first, layers, token)
                states = {s: {p: v.cpu().numpy() for p, v in d.items()} for s, d in out.states.items()}
                pooled = {s: v.float().cpu().numpy() for s, v in out.pooled.items()}
                logits = None if out.logits is None else out.logits.float().cpu().numpy()
                positions = None if out.positions is None else out.positions.cpu().numpy()
                yield PairBatch(sel, out.scores.float().cpu().numpy(), states, pooled, logits, positions)
                bar.update(len(sel))
            del image_table
    bar.close()
