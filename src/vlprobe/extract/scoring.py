"""The one pair-scoring engine: ``probe extract`` and ``probe eval`` score image-text pairs here.

A batch of (image, text) pairs is given as a list of texts, a source of images
(:class:`ImageSource`) and two index arrays into them. :func:`score_pairs` yields the pairs'
scores batch by batch (:class:`PairBatch`), with the pooled states of a cross-encoder's ``pair``
streams when asked, whatever kind of model scores them:

* a :class:`~vlprobe.extract.models.base.DualEncoder` (CLIP, SigLIP): every distinct image and
  every distinct text used is encoded once, in batches (:func:`encode_stream`), keeping their
  pooled embeddings; each batch of pairs is scored by ``scores_from_pooled`` on the distinct rows
  of that batch only, never on the full image x text matrix;
* a :class:`~vlprobe.extract.models.base.CrossEncoder` (LXMERT, UNITER, BLIP-ITM): every distinct
  text is tokenised once (``prepare_texts``); the distinct images are prepared once each, in
  blocks of ``image_block`` images (``prepare_images``: region features read once from the
  region store, or pixels loaded once and encoded by the model); the pairs of each block run in
  batches through ``encode_pairs`` (never one forward per pair);
* a blind text scorer (:class:`~vlprobe.extract.models.blind.TextScorer`): every distinct text is
  scored once, the image ignored.

The runner (:mod:`vlprobe.extract.runner`) writes each batch into the cache as it comes; ``probe
eval`` (:class:`PairScorer`) collects them. :func:`encode_stream` is the batch loop of one
``text`` or ``image`` stream (inputs of the next batch read in a background thread while the model
runs), shared by the runner's streams and the dual encoders' embeddings here.

What a model reads for an image is its declared ``image_input`` (``pixels``, ``regions`` or
``none``); :func:`check_model_inputs` is the one place that turns it into the input checks of
both commands (``--regions`` required or refused, image folders refused where no pixels are
read, the load options a model declares), and :func:`require_image_files` checks that a model
that reads pixels has a file for every image.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vlprobe.data.items import ImageRef
from vlprobe.extract.models.base import (
    IMAGE_INPUTS,
    PIXEL_ORIENTATION,
    Adapter,
    CrossEncoder,
    DualEncoder,
)
from vlprobe.extract.models.pooling import TOKEN_POOLINGS, pool_states
from vlprobe.progress import say
from vlprobe.registry import MODELS
from vlprobe.validation import InputError, check_choice, check_positive_int

__all__ = [
    "MATCH_THRESHOLDS",
    "ImageSource",
    "PairBatch",
    "PairScorer",
    "StreamRows",
    "check_model_inputs",
    "check_region_width",
    "encode_stream",
    "load_scorer",
    "model_kind",
    "pooled_score_fn",
    "require_image_files",
    "score_pairs",
]

#: Score kinds with a natural match / no-match threshold (VALSE's binary metrics need one).
#: ``match_probability``: the model's probability that caption and image match (LXMERT's and
#: UNITER's softmax, BLIP's ITM head, SigLIP's sigmoid).
MATCH_THRESHOLDS: dict[str, float] = {"match_probability": 0.5}

#: How the dataset loaders take image folders, named in the messages.
_IMAGE_FLAGS = {"image_dir": "--image-dir DIR", "image_root": "--image-root SOURCE=DIR"}


# -- what a model is and what it reads ------------------------------------------------------------


def model_kind(cls: Any) -> str:
    """``"dual"``, ``"cross"`` or ``"text"`` for a registered model's class.

    Raises
    ------
    InputError
        The object is none of a dual encoder, a cross-encoder or a blind text scorer.
    """
    from vlprobe.extract.models.blind import TextScorer

    if isinstance(cls, type):
        if issubclass(cls, DualEncoder):
            return "dual"
        if issubclass(cls, CrossEncoder):
            return "cross"
        if issubclass(cls, TextScorer):
            return "text"
    name = getattr(cls, "name", None) or getattr(cls, "__name__", repr(cls))
    raise InputError(f"model {name!r} is neither a dual encoder, a cross-encoder nor a text scorer; it cannot score pairs")


def _image_input(cls: Any) -> str:
    kind = getattr(cls, "image_input", None)
    if kind not in IMAGE_INPUTS:
        raise TypeError(f"{getattr(cls, '__name__', cls)!r} declares no image_input (one of {', '.join(IMAGE_INPUTS)})")
    return str(kind)


#: Load options with a flag of their own; any other goes through ``--model-option NAME=VALUE``.
_LOAD_FLAGS = {"model_config": "--model-config", "tokenizer": "--tokenizer", "acceptable_label": "--acceptable-label"}


def _flag(option: str) -> str:
    if option in ("image_dir", "image_root"):
        return "--" + option.replace("_", "-")
    return _LOAD_FLAGS.get(option, f"--model-option {option}=...")


def check_model_inputs(
    model: str, cls: Any, *, regions: str | os.PathLike[str] | None = None,
    image_options: Mapping[str, Any] | None = None, load_options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Check a model's inputs against what its class declares; return the load options to pass.

    Parameters
    ----------
    model : str
        The registered name (named in the errors).
    cls : type
        Its class (``MODELS.get(model)``).
    regions : path, optional
        The ``--regions`` file: required when ``cls.image_input == "regions"``, refused otherwise.
    image_options : mapping, optional
        Image folders given to the dataset loader (``image_dir``, ``image_root``; None or empty =
        not given): refused unless the model reads pixels.
    load_options : mapping, optional
        Extra keyword arguments for ``cls.load``; None values are dropped, the others must be in
        ``cls.load_options``.

    Returns
    -------
    dict
        The load options given.

    Raises
    ------
    InputError
        One line naming the option and what the model reads instead.
    """
    reads = _image_input(cls)
    if reads == "regions" and regions is None:
        raise InputError(
            f"regions: {model} reads precomputed region features; give --regions FILE.h5 "
            "(see `probe regions import`, or `probe fixtures regions` for random ones)"
        )
    if reads != "regions" and regions is not None:
        what = "reads pixels" if reads == "pixels" else "scores captions only"
        raise InputError(f"regions: {model} {what}, not region features; drop --regions")
    if reads != "pixels":
        given = [k for k, v in (image_options or {}).items() if v]
        if given:
            what = "reads region features (--regions)" if reads == "regions" else "scores captions only"
            raise InputError(f"{given[0]}: {model} {what}, not pixels; drop {_flag(given[0])}")
    out: dict[str, Any] = {}
    declared = tuple(getattr(cls, "load_options", ()))
    for name, value in (load_options or {}).items():
        if value is None:
            continue
        if name not in declared:
            raise InputError(f"{name}: {model} does not take {_flag(name)}")
        out[name] = value
    return out


def require_image_files(model: str, images: Sequence[ImageRef], dataset: str = "", takes: Sequence[str] = ()) -> None:
    """A model that reads pixels needs a file for every image (SugarCrepe/VALSE load without them).

    Parameters
    ----------
    model : str
    images : sequence of ImageRef
    dataset : str
        The dataset's name, for the message.
    takes : sequence of str, optional
        The loader's options (``loader_options(dataset)``), for the message: the image-folder flags
        it takes; without them both flags are named.
    """
    lacking = next((img for img in images if img.path is None), None)
    if lacking is not None:
        known = [k for k in _IMAGE_FLAGS if k in takes] if takes else list(_IMAGE_FLAGS)
        flags = " or ".join(_IMAGE_FLAGS[k] for k in known) or "a data_dir with the images"
        where = f"{dataset} image" if dataset else "image"
        raise InputError(
            f"{model} reads pixels and needs images, but {where} {lacking.name!r} ({lacking.id}) has no file; "
            f"pass {flags}"
        )


def check_region_width(model: str, adapter: Any, store: Any) -> None:
    """Refuse a region store whose feature width is not the one the loaded model reads."""
    if store.feature_dim != adapter.feature_dim:
        raise InputError(
            f"regions: {store.path.name} holds {store.feature_dim}-d features; {model} reads "
            f"{adapter.feature_dim}-d region features"
        )


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
    """

    image_input: str
    images: Sequence[ImageRef]
    store: Any = None

    def __post_init__(self) -> None:
        check_choice(self.image_input, "image_input", IMAGE_INPUTS)
        if self.image_input == "regions" and self.store is None:
            raise InputError("store: a region store is needed to read region features")

    def read(self, rows: np.ndarray) -> Any:
        """The inputs of image ``rows``: a list of RGB PIL images, or a ``RegionBatch``."""
        if self.image_input == "pixels":
            return [self.images[int(i)].load(PIXEL_ORIENTATION) for i in rows]
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
        Positions in the ``text_idx``/``image_idx`` given to :func:`score_pairs`, ascending.
    scores : ndarray of float32, shape (B,)
    states : dict of str to dict of str to ndarray
        Pair stream -> pooling -> (B, L, H) float32; empty unless ``layers`` were asked.
    pooled : dict of str to ndarray
        Pair stream -> (B, D), the model's own pooled output, where it has one.
    logits : ndarray of float32, shape (B, 2), or None
        The raw (no match, match) logits of a binary matching head whose softmax is the score
        (LXMERT, UNITER's and BLIP's ITM heads); None for other models.
    """

    index: np.ndarray
    scores: np.ndarray
    states: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    pooled: dict[str, np.ndarray] = field(default_factory=dict)
    logits: np.ndarray | None = None


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
            for sel in _batches(in_block, batch_size):
                out = adapter.encode_pairs(text_table, image_table, t_inv[sel], i_inv[sel] - first, layers, token)
                states = {s: {p: v.cpu().numpy() for p, v in d.items()} for s, d in out.states.items()}
                pooled = {s: v.float().cpu().numpy() for s, v in out.pooled.items()}
                logits = None if out.logits is None else out.logits.float().cpu().numpy()
                yield PairBatch(sel, out.scores.float().cpu().numpy(), states, pooled, logits)
                bar.update(len(sel))
            del image_table
    bar.close()


# -- probe eval's scorer ----------------------------------------------------------------------------


@dataclass
class PairScorer:
    """A loaded model that scores (image, text) pairs for ``probe eval`` (see :func:`load_scorer`).

    Attributes
    ----------
    model : str
        Registered name.
    score_kind : str
        What a score is (``cosine``, ``match_probability``, ``mean_token_logprob``, ...).
    image_input : {"pixels", "regions", "none"}
        What the model reads for an image.
    fingerprint : str
        The checkpoint's fingerprint ("" when the model has none).
    info : dict
        The model's own description (recorded in the manifest).
    impl : object
        The loaded adapter or text scorer.
    batch_size : int
    regions : Path or None
        Region-feature file of a model that reads regions.
    regions_fingerprint : str
        Its fingerprint ("" without one).
    input_fingerprints : dict
        Fingerprints of the model's side inputs (UNITER's ``config``, ``tokenizer``).
    model_options : dict
        Load options that change what the model computes (BLIP's ``score_head``).
    """

    model: str
    score_kind: str
    image_input: str
    fingerprint: str
    info: dict[str, Any]
    impl: Any
    batch_size: int = 32
    regions: Path | None = None
    regions_fingerprint: str = ""
    input_fingerprints: dict[str, str] = field(default_factory=dict)
    model_options: dict[str, Any] = field(default_factory=dict)

    @property
    def device(self) -> str:
        """The device the model runs on, as outputs record it (``cpu`` for a model without weights)."""
        from vlprobe.devices import device_name

        return device_name(getattr(self.impl, "device", None))

    def score(self, images: Sequence[ImageRef], texts: Sequence[str], *, progress: bool = False) -> np.ndarray:
        """Scores of the pairs (images[p], texts[p]), float64 of shape (P,); see :meth:`score_with_logits`."""
        return self.score_with_logits(images, texts, progress=progress)[0]

    def score_with_logits(
        self, images: Sequence[ImageRef], texts: Sequence[str], *, progress: bool = False
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Scores of the pairs (images[p], texts[p]), and a binary matching head's raw logits.

        Distinct texts (by string) and distinct images (by file for pixels, by normalised name for
        region features) are encoded or read once.

        Parameters
        ----------
        images : sequence of ImageRef, length P
            Ignored by text-only models (may lack files then).
        texts : sequence of str, length P

        Returns
        -------
        scores : ndarray of float64, shape (P,)
        logits : ndarray of float64, shape (P, 2), or None
            The (no match, match) logits of a model whose score is the softmax of two (LXMERT,
            UNITER's and BLIP's ITM heads); None for every other model.
        """
        if len(images) != len(texts):
            raise InputError(f"images and texts must pair up, got {len(images)} and {len(texts)}")
        uniq_texts = list(dict.fromkeys(texts))
        t_row = {t: i for i, t in enumerate(uniq_texts)}
        t_idx = np.array([t_row[t] for t in texts], dtype=np.int64)
        out = np.empty(len(texts), dtype=np.float64)
        logits: np.ndarray | None = np.empty((len(texts), 2), dtype=np.float64)

        def collect(got: PairBatch) -> None:
            nonlocal logits
            out[got.index] = got.scores
            if got.logits is None:
                logits = None
            elif logits is not None:
                logits[got.index] = got.logits

        if self.image_input == "none":
            self._announce(progress, len(texts), len(uniq_texts), 0)
            for got in score_pairs(self.impl, uniq_texts, None, t_idx, np.zeros_like(t_idx),
                                   batch_size=self.batch_size, progress=progress):
                collect(got)
            return out, logits
        if self.image_input == "pixels":
            require_image_files(self.model, images)
            keys: list[Any] = [im.path for im in images]
        else:
            from vlprobe.extract.regions.boxes import normalise_image_id

            keys = [normalise_image_id(im.name) for im in images]
        first = dict(zip(keys, images, strict=True))
        order = list(dict.fromkeys(keys))
        row = {k: i for i, k in enumerate(order)}
        i_idx = np.array([row[k] for k in keys], dtype=np.int64)
        distinct = [first[k] for k in order]
        store = None
        try:
            if self.image_input == "regions":
                from vlprobe.extract.regions.store import RegionStore

                if self.regions is None:
                    raise ValueError(f"{self.model}: a region model's scorer has no region file")
                store = RegionStore(self.regions)
                store.require([im.name for im in distinct], "the")
                check_region_width(self.model, self.impl, store)
            source = ImageSource(self.image_input, distinct, store)
            self._announce(progress, len(texts), len(uniq_texts), len(distinct))
            for got in score_pairs(self.impl, uniq_texts, source, t_idx, i_idx, batch_size=self.batch_size,
                                   progress=progress):
                collect(got)
        finally:
            if store is not None:
                store.close()
        return out, logits

    def _announce(self, progress: bool, n_pairs: int, n_texts: int, n_images: int) -> None:
        """With ``progress``, one line on stderr saying what will be scored, once the inputs are checked."""
        images = f", {n_images} images" if self.image_input != "none" else ""
        say(progress, f"{self.model}: scoring {n_pairs} pairs ({n_texts} distinct texts{images}) in batches of "
                      f"{self.batch_size}")


def load_scorer(
    model: str, checkpoint: str | None, *, device: str = "auto", dtype: str = "float32", batch_size: int = 32,
    options: Mapping[str, Any] | None = None, regions: str | os.PathLike[str] | None = None,
    image_options: Mapping[str, Any] | None = None,
) -> PairScorer:
    """Load a registered model as a :class:`PairScorer` (see the module docstring).

    Parameters
    ----------
    model : str
        Registered name (``probe ls models``).
    checkpoint : str or None
        Directory or hub id (None for models without one, e.g. ``caption-length``); UNITER: the
        ``.pt`` file.
    options : mapping, optional
        Load options, None values ignored, each one the model declares (``acceptable_label`` for
        ``blind-grammar``, ``model_config`` and ``tokenizer`` for UNITER, ``score_head`` for BLIP).
    regions : path, optional
        Region-feature file (vlprobe HDF5) for a model that reads regions; refused for others.
    image_options : mapping, optional
        Image folders the dataset was loaded with; refused for models that read no pixels.
    """
    from vlprobe.extract.models.blind import TextScorer

    check_positive_int(batch_size, "batch_size")
    cls = MODELS.get(model)
    model_kind(cls)
    if not (isinstance(cls, type) and issubclass(cls, Adapter | TextScorer)):  # model_kind refused the rest
        raise TypeError(f"model {model!r} is registered as {cls!r}")
    load_opts = check_model_inputs(model, cls, regions=regions, image_options=image_options, load_options=options)
    store_fp = ""
    if cls.image_input == "regions":
        from vlprobe.extract.regions.store import RegionStore

        if regions is None:
            raise ValueError(f"{model}: no region file, which check_model_inputs requires")
        with RegionStore(regions) as store:
            store_fp = store.fingerprint
    impl: Adapter | TextScorer
    if issubclass(cls, TextScorer):
        impl = cls.load(checkpoint, device=device, dtype=dtype, **load_opts)
    elif not checkpoint:
        raise InputError(f"checkpoint: model {model!r} needs --checkpoint (a directory or hub id)")
    else:
        impl = cls.load(checkpoint, device=device, dtype=dtype, **load_opts)
    ckpt = getattr(impl, "checkpoint", None)
    return PairScorer(
        model=model, score_kind=str(impl.score_kind), image_input=cls.image_input,
        fingerprint=getattr(ckpt, "fingerprint", "") if ckpt else "", info=impl.describe(), impl=impl,
        batch_size=batch_size, regions=Path(regions) if regions is not None else None, regions_fingerprint=store_fp,
        input_fingerprints=impl.input_fingerprints() if hasattr(impl, "input_fingerprints") else {},
        model_options=impl.model_options() if hasattr(impl, "model_options") else {},
    )
