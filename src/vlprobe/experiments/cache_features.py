"""What the probing experiments read from a cache: index tables, caption families, states.

A *caption family* is an original caption and its variants (texts whose ``/texts/parent`` is
that caption). Captions are numbered within their item in table order (Winoground: caption 0
and caption 1). A stream's rows are texts, images or (image, text) pairs; the helpers here find
the rows of a text, an image or a pair whatever the stream's modality.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vlprobe.data.bow import table_tags
from vlprobe.extract.cache.reader import ActivationCache
from vlprobe.layers import parse_layers, stream_part
from vlprobe.validation import InputError, check_file, check_positive_int

__all__ = [
    "DEFAULT_POOLING_ORDER",
    "DEFAULT_STRATIFY",
    "POOLINGS",
    "SCALINGS",
    "CacheIndex",
    "StreamStates",
    "cache_label",
    "cache_path",
    "check_seeds",
    "load_index",
    "load_states",
    "pooling_notes",
    "read_stream",
    "require_variants",
    "resolve_layers",
    "resolve_stream",
    "row_lookup",
    "scale_states",
    "stratum_keys",
    "stream_layers",
    "stream_pooling",
]

POOLINGS = ("cls", "mean", "max", "pooled")
#: A stream's default pooling is the first of these it holds (``cls`` where the stream has a
#: summary token, e.g. LXMERT ``lang``; ``mean`` where it has none, e.g. LXMERT ``vision``).
DEFAULT_POOLING_ORDER = ("cls", "mean", "max", "pooled")
SCALINGS = ("none", "divide100", "standard")
#: Tag families a split is stratified on by default, when the items carry them (Winoground).
DEFAULT_STRATIFY = ("collapsed_tag", "num_main_preds")


@dataclass(frozen=True)
class CacheIndex:
    """The index tables of a cache, arranged for the experiments.

    Attributes
    ----------
    model : str
    item_ids : list of str
    item_tags : list of dict
        The items' tag families, plus ``bow`` (``same`` when the item's original captions hold
        the same multiset of words; :mod:`vlprobe.data.bow`).
    image_item : ndarray, shape (n_images,)
    text_item : ndarray, shape (n_texts,)
    text_parent : ndarray, shape (n_texts,)
    text_caption : ndarray, shape (n_texts,)
        Caption number within the item of the text's original caption (0, 1, ...).
    item_images : list of ndarray
        Image rows per item, in table order.
    families : list of list of ndarray
        ``families[item][k]``: text rows of caption ``k`` of ``item``, original first.
    n_variants : int
        Texts with a parent.
    provenance : dict
    """

    model: str
    item_ids: list[str]
    item_tags: list[dict[str, list[str]]]
    image_item: np.ndarray
    text_item: np.ndarray
    text_parent: np.ndarray
    text_caption: np.ndarray
    item_images: list[np.ndarray]
    families: list[list[np.ndarray]]
    n_variants: int
    provenance: dict[str, Any]


def load_index(cache: ActivationCache) -> CacheIndex:
    """Read the index tables of an open cache."""
    items, images, texts = cache.table("items"), cache.table("images"), cache.table("texts")
    n_items = len(items["id"])
    image_item = np.asarray(images["item"], dtype=np.int64)
    text_item = np.asarray(texts["item"], dtype=np.int64)
    parent = np.asarray(texts["parent"], dtype=np.int64)
    caption = np.full(len(parent), -1, dtype=np.int64)
    originals = np.flatnonzero(parent < 0)
    seen = np.zeros(n_items, dtype=np.int64)
    for r in originals:
        caption[r] = seen[text_item[r]]
        seen[text_item[r]] += 1
    variants = parent >= 0
    caption[variants] = caption[parent[variants]]
    families: list[list[np.ndarray]] = [[] for _ in range(n_items)]
    for i in range(n_items):
        for k in range(int(seen[i])):
            rows = np.flatnonzero((text_item == i) & (caption == k))
            families[i].append(np.concatenate([rows[parent[rows] < 0], rows[parent[rows] >= 0]]))
    item_tags = table_tags(items, texts)
    return CacheIndex(
        model=cache.header.model,
        item_ids=[str(x) for x in items["id"]],
        item_tags=item_tags,
        image_item=image_item,
        text_item=text_item,
        text_parent=parent,
        text_caption=caption,
        item_images=[np.flatnonzero(image_item == i) for i in range(n_items)],
        families=families,
        n_variants=int(variants.sum()),
        provenance=cache.provenance(),
    )


def check_seeds(seeds: int, name: str = "seeds") -> list[int]:
    """``seeds`` (a count >= 1) -> ``[0, 1, ..., seeds - 1]``."""
    return list(range(check_positive_int(seeds, name, " (the number of seeds)")))


def require_variants(index: CacheIndex, cache_file: Path | str, experiment: str) -> None:
    """InputError when the cache holds no caption variants (the experiment needs them)."""
    if index.n_variants == 0:
        raise InputError(
            f"cache: {Path(cache_file).name} holds no caption variants; {experiment} needs them "
            "(extract with --variants FILE)"
        )


@dataclass(frozen=True)
class StreamStates:
    """One stream as an experiment reads it.

    Attributes
    ----------
    name, modality : str
    layers : list of int or None
        Model layer numbers read (``[None]`` for ``pooled``).
    lookup : dict
        (image row, text row) -> row of ``states`` (see :func:`row_lookup`).
    states : ndarray, shape (R, len(layers), H)
    pooling : str
        The pooling read: the one given, or (none given) the preferred one or the stream's
        default when it lacks it.
    asked_pooling : str
        The pooling given, or the preferred one when none was.
    kinds : list of str
        The kind of each layer read (``embed``, ``self``, ``lang``, ``rel``, ``cross``,
        ``joint``; the model's declaration); None for ``pooled``.
    """

    name: str
    modality: str
    layers: list[int | None]
    lookup: dict[tuple[int, int], int]
    states: np.ndarray
    pooling: str = ""
    asked_pooling: str = ""
    kinds: list[str | None] = dataclasses.field(default_factory=list)

    def kind(self, layer: int | None) -> str | None:
        """The kind of a layer read (None for ``pooled``)."""
        return self.kinds[self.layers.index(layer)] if self.kinds else None

    @property
    def fell_back(self) -> bool:
        """True when the stream lacks the asked pooling and its default was read instead."""
        return self.pooling != self.asked_pooling


def stream_pooling(cache: ActivationCache, stream: str, pooling: str | None, *, preferred: str = "cls") -> str:
    """The pooling ``stream`` is read with.

    ``pooling`` given (``--pooling mean``): that one, refused in one line when the stream lacks it
    (never another pooling under the asked one's name). None (not given): ``preferred`` when the
    stream holds it, else the stream's default, the first of :data:`DEFAULT_POOLING_ORDER` it holds.
    """
    if pooling is not None:
        if pooling not in POOLINGS:
            raise InputError(f"pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
        held = cache.poolings(stream)
        if pooling not in held:
            raise InputError(
                f"pooling: stream {stream!r} of {cache.path.name} has no {pooling!r} states (it holds "
                f"{', '.join(held) or 'none'}); leave --pooling out to read each stream's own default, "
                f"name other --streams, or extract with --poolings including {pooling}"
            )
        return pooling
    if preferred not in POOLINGS:
        raise InputError(f"pooling must be one of {', '.join(POOLINGS)}, got {preferred!r}")
    held = cache.poolings(stream)
    if preferred in held:
        return preferred
    for p in DEFAULT_POOLING_ORDER:
        if p in held:
            return p
    raise InputError(f"stream {stream!r} of {cache.path.name} holds no pooled states")


def stream_layers(
    cache: ActivationCache, stream: str, pooling: str | None, layers: str, *, preferred: str = "cls",
) -> tuple[str, list[int | None]]:
    """The pooling a stream is read with (:func:`stream_pooling`) and its layers (:func:`resolve_layers`).

    When ``pooled`` was preferred (one vector, no layer axis) and the stream falls back to a
    pooling with layers, a spec of ``all`` reads the stream's last stored layer, as deep as a
    pooled output.
    """
    used = stream_pooling(cache, stream, pooling, preferred=preferred)
    asked = preferred if pooling is None else pooling
    if used != asked and asked == "pooled" and layers.strip().lower() in ("all", "*"):
        layers = str(cache.layers(stream)[-1])
    return used, resolve_layers(cache, stream, used, layers)


def read_stream(
    cache: ActivationCache, stream: str | None, modalities: Sequence[str], pooling: str | None, layers: str,
    *, param: str = "stream", preferred: str = "cls",
) -> StreamStates:
    """Resolve ``stream`` (:func:`resolve_stream`), its pooling and layers (:func:`stream_layers`;
    ``pooling`` None: ``preferred``, else the stream's default); read the states."""
    name = resolve_stream(cache, stream, modalities, param=param)
    used, chosen = stream_layers(cache, name, pooling, layers, preferred=preferred)
    modality, lookup = row_lookup(cache, name)
    model_kinds = cache.model_layer_kinds(name)
    kinds = [None if layer is None else str(model_kinds[layer]) for layer in chosen]
    asked = preferred if pooling is None else pooling
    return StreamStates(name, modality, chosen, lookup, load_states(cache, name, used, chosen), used, asked, kinds)


def pooling_notes(reads: Sequence[StreamStates], experiment: str) -> list[str]:
    """One line per stream read with its default pooling instead of the asked one."""
    return [
        f"{experiment}: stream {r.name} has no {r.asked_pooling!r} states; using its default {r.pooling!r}"
        + (f" at layer {r.layers[0]}" if r.asked_pooling == "pooled" and len(r.layers) == 1 else "")
        for r in reads if r.fell_back
    ]


def resolve_stream(cache: ActivationCache, stream: str | None, modalities: Sequence[str], *, param: str = "stream") -> str:
    """The stream to read: ``stream``, or the first stream whose modality is in ``modalities``."""
    info = {s: cache.modality(s) for s in cache.streams}
    if stream is None:
        for s, m in info.items():
            if m in modalities and s == "text":
                return s
        for s, m in info.items():
            if m in modalities:
                return s
        raise InputError(
            f"cache {cache.path.name} has no stream of modality {' or '.join(modalities)} "
            f"(streams: {', '.join(f'{s} ({m})' for s, m in info.items()) or 'none'})"
        )
    if stream not in info:
        raise InputError(
            f"{param}: stream {stream!r} is not in {cache.path.name} (streams: {', '.join(info) or 'none'})"
        )
    if info[stream] not in modalities:
        raise InputError(
            f"{param}: stream {stream!r} holds {info[stream]} rows; this experiment needs "
            f"{' or '.join(modalities)} rows"
        )
    return stream


def resolve_layers(cache: ActivationCache, stream: str, pooling: str, spec: str, *,
                   param: str = "layers") -> list[int | None]:
    """Model layer numbers to read (``[None]`` for ``pooled``, which has no layer axis).

    ``all`` means every stored layer; other specs (``0,4,-1``, ``2:6``) count the model's layers
    and each chosen layer must be stored. A per-stream spec (``lang=all;vision=-1``) may name any
    stream of the cache; ``stream`` reads its part (``all`` when not named). Errors name ``param``,
    the option the spec came from.
    """
    spec = stream_part(spec, stream, list(cache.streams), param=param)
    if pooling not in POOLINGS:
        raise InputError(f"pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
    if pooling not in cache.poolings(stream):
        raise InputError(
            f"pooling {pooling!r} is not in stream {stream!r} of {cache.path.name} "
            f"(has {', '.join(cache.poolings(stream)) or 'none'})"
        )
    if pooling == "pooled":
        return [None]
    stored = cache.layers(stream)
    if spec.strip().lower() in ("all", "*"):
        return list(stored)
    n_model = len(cache.model_layer_kinds(stream))
    chosen = parse_layers(spec, n_model, param=f"{param}[{stream}]")
    missing = [layer for layer in chosen if layer not in stored]
    if missing:
        raise InputError(f"{param}: layer(s) {missing} of stream {stream!r} are not stored in {cache.path.name} (stored: {stored})")
    return list[int | None](chosen)


def load_states(cache: ActivationCache, stream: str, pooling: str, layers: Sequence[int | None]) -> np.ndarray:
    """States of every row of ``stream`` at ``layers``, float32, shape (R, len(layers), H)."""
    if pooling == "pooled":
        return np.asarray(cache.states(stream, "pooled"), dtype=np.float32)[:, None, :]
    stored = cache.layers(stream)
    numbers = [x for x in layers if x is not None]
    if len(numbers) != len(layers):
        raise ValueError(f"load_states: layer None is the pooled output only, got layers {list(layers)}")
    if numbers == stored:
        return np.ascontiguousarray(cache.states(stream, pooling), dtype=np.float32)
    # A subset: one read per layer, so a few layers of a large cache never load all of it.
    return np.stack([np.asarray(cache.states(stream, pooling, x), dtype=np.float32) for x in numbers], axis=1)


def scale_states(states: np.ndarray, mode: str) -> np.ndarray:
    """``none``; ``divide100``: every state divided by 100 (the reference ``probe_clip.py``); or
    ``standard``: per layer and dimension, zero mean and unit variance over rows.

    Parameters
    ----------
    states : ndarray, shape (R, L, H)
    """
    if mode not in SCALINGS:
        raise InputError(f"scale must be one of {', '.join(SCALINGS)}, got {mode!r}")
    if mode == "none":
        return states
    if mode == "divide100":
        return (states / np.float32(100.0)).astype(np.float32)
    mean = states.mean(axis=0, keepdims=True)
    std = states.std(axis=0, keepdims=True)
    return ((states - mean) / np.where(std > 0, std, 1.0)).astype(np.float32)


def row_lookup(cache: ActivationCache, stream: str) -> tuple[str, dict[tuple[int, int], int]]:
    """The stream's modality and a map (image row, text row) -> row of the stream's states.

    Text rows have image -1, image rows text -1.
    """
    modality = cache.modality(stream)
    rows = cache.rows(stream)
    lookup = {(int(i), int(t)): r for r, (i, t) in enumerate(zip(rows["image"], rows["text"], strict=True))}
    return modality, lookup


def stratum_keys(index: CacheIndex, items: Sequence[int], families: Sequence[str] | None = None) -> tuple[list[str], list[str]]:
    """One stratification key per item, and the tag families used.

    Default families: ``collapsed_tag`` and ``num_main_preds`` where every item has them
    (Winoground), else none (one stratum).
    """
    tags = [index.item_tags[i] for i in items]
    if families is None:
        families = [f for f in DEFAULT_STRATIFY if tags and all(f in t for t in tags)]
    else:
        missing = [f for f in families if not all(f in t for t in tags)]
        if missing:
            known = sorted({f for t in tags for f in t})
            raise InputError(f"stratify: tag family {missing[0]!r} is missing from some items (families: {known})")
    keys = ["|".join(f"{f}={','.join(sorted(t.get(f, [])))}" for f in families) or "all" for t in tags]
    return keys, list(families)


def cache_label(config: Any) -> str:
    """The results label of a run on ``config.cache``: ``config.name``, else the cache's model (read
    from its header, before any work); without a cache, the stem of ``config.scores`` (a score
    file given instead)."""
    if config.name:
        return str(config.name)
    if config.cache is None:
        return Path(config.scores).stem
    with ActivationCache(cache_path(config.cache)) as cache:
        return cache.header.model


def cache_path(path: Path | str) -> Path:
    """``path`` as a Path, checked to exist (a clear error before h5py's)."""
    p = check_file(path, "cache")
    return p
