"""Caches written from arrays: for tests, benchmarks and states computed elsewhere.

:func:`write_array_cache` writes a complete cache (the schema of :mod:`vlprobe.extract.cache.schema`)
from index tables and per-stream state arrays, without a model. :func:`winoground_tables` makes
Winoground-shaped tables (2 images and 2 captions per item, optional variants), and
:func:`planted_cache` fills them with states that carry a known signal at one layer and
i.i.d. noise at every other layer:

* a text of caption ``k`` (original or variant) has ``+a`` (k = 0) or ``-a`` (k = 1) in
  coordinate 0, so the two captions' variants are linearly separable;
* image ``j`` has ``+a`` / ``-a`` in coordinate 0 in the same way;
* a pair row (image j, text of caption k) has the caption's sign in coordinate 0 and
  ``+a`` when the pair matches (j = k), ``-a`` when not, in coordinate 1;

all other coordinates of the signal layer are N(0, ``noise``\\ :sup:`2`); other layers are N(0, 1).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vlprobe.extract.cache.schema import CacheHeader, CacheTables, StreamLayout
from vlprobe.extract.cache.writer import CacheWriter
from vlprobe.extract.models.base import StreamSpec

__all__ = ["ArrayStream", "planted_cache", "winoground_tables", "write_array_cache"]


@dataclass(frozen=True)
class ArrayStream:
    """One stream's rows and states.

    Attributes
    ----------
    modality : {"text", "image", "pair"}
    image, text : ndarray of int, shape (R,)
        Table rows of each stream row (-1 = none).
    states : dict of str to ndarray
        Pooling (``cls``, ``mean``, ``max``) -> (R, L, H).
    layers : list of int
        Model layer numbers of the L stored layers.
    n_layers : int
        Layers of the model's stream (>= max(layers) + 1).
    pooled : ndarray, shape (R, D), optional
    """

    modality: str
    image: np.ndarray
    text: np.ndarray
    states: Mapping[str, np.ndarray]
    layers: Sequence[int]
    n_layers: int
    pooled: np.ndarray | None = None
    cls_rule: str = field(default="token0")


def winoground_tables(
    n_items: int, n_variants: int | np.ndarray = 0, tags: Sequence[Mapping[str, Sequence[str]]] | None = None
) -> CacheTables:
    """Index tables of ``n_items`` Winoground-shaped items.

    Parameters
    ----------
    n_items : int
    n_variants : int or ndarray of int, shape (n_items, 2)
        Variants per caption.
    tags : sequence of dict, optional
        Tag families per item (default: ``collapsed_tag`` cycling Object/Relation/Both).
    """
    nv = np.broadcast_to(np.asarray(n_variants, dtype=int), (n_items, 2))
    if tags is None:
        cycle = ("Object", "Relation", "Both")
        tags = [{"collapsed_tag": [cycle[i % 3]], "num_main_preds": [str(1 + (i % 3 == 2))]} for i in range(n_items)]
    ids = [f"winoground/{i}" for i in range(n_items)]
    text_id = [f"{ids[i]}/c{k}" for i in range(n_items) for k in (0, 1)]
    text = [f"item {i} caption {k}" for i in range(n_items) for k in (0, 1)]
    text_item = [i for i in range(n_items) for _ in (0, 1)]
    parent = [-1] * len(text_id)
    for i in range(n_items):
        for k in (0, 1):
            for v in range(int(nv[i, k])):
                text_id.append(f"{ids[i]}/c{k}/v{v}")
                text.append(f"item {i} caption {k} variant {v}")
                text_item.append(i)
                parent.append(2 * i + k)
    return CacheTables(
        item_id=ids,
        item_tags=[json.dumps({k: list(v) for k, v in t.items()}, sort_keys=True) for t in tags],
        image_id=[f"{ids[i]}/i{j}" for i in range(n_items) for j in (0, 1)],
        image_name=[f"ex_{i}_img_{j}" for i in range(n_items) for j in (0, 1)],
        image_item=[i for i in range(n_items) for _ in (0, 1)],
        text_id=text_id,
        text=text,
        text_item=text_item,
        text_parent=parent,
        text_strategy=["" if p < 0 else "synthetic" for p in parent],
    )


def write_array_cache(
    path: str | os.PathLike[str],
    tables: CacheTables,
    streams: Mapping[str, ArrayStream],
    *,
    model: str = "arrays",
    pair_plan: str = "item",
    with_variants: bool | None = None,
) -> Path:
    """Write a complete cache file from arrays (see the module docstring).

    Returns
    -------
    Path
    """
    p = Path(path)
    if p.exists():
        raise ValueError(f"path: {str(p)!r} exists; write_array_cache makes new files only")
    layouts, data = [], {}
    poolings: list[str] = []
    for name, s in streams.items():
        some = next(iter(s.states.values()), None)
        hidden = some.shape[2] if some is not None else 0
        kinds = ("embed",) + ("self",) * (s.n_layers - 1)
        spec = StreamSpec(name, s.modality, kinds, hidden, s.cls_rule,
                          None if s.pooled is None else s.pooled.shape[1])
        names = tuple(s.states) + (("pooled",) if s.pooled is not None else ())
        poolings.extend(n for n in names if n not in poolings)
        layouts.append(StreamLayout(spec, list(s.layers), np.asarray(s.image), np.asarray(s.text), 0, None, names))
        data[name] = s
    digest = hashlib.sha256()
    for name in sorted(data):
        for arr in data[name].states.values():
            digest.update(np.ascontiguousarray(arr, dtype=np.float32).tobytes())
    has_variants = any(t >= 0 for t in tables.text_parent) if with_variants is None else with_variants
    header = CacheHeader(
        model=model, checkpoint="(arrays)", checkpoint_fingerprint=f"sha256:{digest.hexdigest()}",
        dataset="winoground", dataset_fingerprint=hashlib.sha256(json.dumps(tables.text_id).encode()).hexdigest(),
        variants_fingerprint="synthetic" if has_variants else "", pair_plan=pair_plan,
        poolings=tuple(poolings), dtype="float32", shard="0/1",
        layers={n: list(s.layers) for n, s in data.items()},
        pair_states=any(s.modality == "pair" for s in data.values()),
    )
    with CacheWriter.open(p, header, tables, layouts, {"vlprobe_source": "arrays"}, with_scores=False) as w:
        for name, s in data.items():
            rows = np.arange(len(s.image))
            w.write(name, rows, {k: np.asarray(v, dtype=np.float32) for k, v in s.states.items()},
                    None if s.pooled is None else np.asarray(s.pooled, dtype=np.float32))
        w.set_attrs(complete=True)
    return p


def planted_cache(
    path: str | os.PathLike[str],
    *,
    n_items: int = 12,
    n_variants: int = 7,
    n_layers: int = 4,
    signal_layer: int = 2,
    hidden: int = 4,
    streams: Mapping[str, str] | None = None,
    strength: float = 3.0,
    noise: float = 0.3,
    seed: int = 0,
    model: str = "planted",
) -> Path:
    """A Winoground-shaped cache with a planted signal at ``signal_layer`` (module docstring).

    Parameters
    ----------
    streams : mapping of str to str
        Stream name -> modality; default ``{"text": "text", "image": "image"}`` (a dual encoder).
        ``{"lang": "pair", "vision": "pair"}`` gives a cross-encoder with pair plan ``item``.
    hidden : int
        Width of every stream; with few dimensions and many variants, noise is rarely separable.

    Returns
    -------
    Path
    """
    from vlprobe.extract.runner import pair_rows

    if not 0 <= signal_layer < n_layers:
        raise ValueError(f"signal_layer must lie in 0..{n_layers - 1}, got {signal_layer}")
    if hidden < 2:
        raise ValueError(f"hidden must be at least 2, got {hidden}")
    streams = dict(streams or {"text": "text", "image": "image"})
    tables = winoground_tables(n_items, n_variants)
    rng = np.random.default_rng(seed)
    parent = np.asarray(tables.text_parent)
    text_rows = np.arange(len(parent))
    orig = np.where(parent < 0, text_rows, parent)
    caption_sign = np.where(orig % 2 == 0, 1.0, -1.0)  # originals are 2i + k
    image_sign = np.where(np.arange(2 * n_items) % 2 == 0, 1.0, -1.0)
    out: dict[str, ArrayStream] = {}
    for name, modality in streams.items():
        if modality == "text":
            img, txt = np.full(len(parent), -1), text_rows
        elif modality == "image":
            img, txt = np.arange(2 * n_items), np.full(2 * n_items, -1)
        elif modality == "pair":
            img, txt = pair_rows(tables, "item")
        else:
            raise ValueError(f"streams: modality must be text, image or pair, got {modality!r}")
        R = len(img)
        states = rng.normal(size=(R, n_layers, hidden))
        signal = rng.normal(scale=noise, size=(R, hidden))
        if modality == "text":
            signal[:, 0] += strength * caption_sign[txt]
        elif modality == "image":
            signal[:, 0] += strength * image_sign[img]
        else:
            signal[:, 0] += strength * caption_sign[txt]
            signal[:, 1] += strength * caption_sign[txt] * image_sign[img]
        states[:, signal_layer] = signal
        mean = states + rng.normal(scale=noise, size=states.shape)
        out[name] = ArrayStream(
            modality, img, txt, {"cls": states.astype(np.float32), "mean": mean.astype(np.float32)},
            list(range(n_layers)), n_layers, pooled=signal.astype(np.float32),
        )
    return write_array_cache(path, tables, out, model=model)
