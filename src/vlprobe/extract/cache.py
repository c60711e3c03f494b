"""The HDF5 activation cache: one file per (checkpoint, dataset, pair plan).

Schema (version 1)
------------------
Root attributes (``/``)::

    vlprobe_schema          int, 1
    model                   registry name ("clip")
    checkpoint              what the user passed (not compared)
    checkpoint_fingerprint  "sha256:<hex>" of the checkpoint folder (UNITER: of the .pt file), or
                            "hub:<id>@<commit>"
    dataset                 registry name ("winoground")
    dataset_fingerprint     sha256 over the dataset's files (captions, fields, image bytes)
    variants_fingerprint    sha256 of the variants file, "" without one
    pair_plan               "item" or "all" (dual encoders always score all pairs: "all")
    pair_states             bool; cross-encoders: whether pair streams (states) are stored
                            besides the scores (False: scores only; always False for dual encoders)
    regions_fingerprint     "sha256:<hex>" of the region-feature file (LXMERT, UNITER), else ""
    config_fingerprint      "sha256:<hex>" of a model config file read apart from the checkpoint
                            (UNITER's JSON), else ""
    tokenizer_fingerprint   "sha256:<hex>" of a tokenizer loaded apart from the checkpoint (UNITER's
                            --tokenizer, its default tokenizer/ folder, or "hub:<id>@<commit>"), else ""
    dataset_selection       JSON of the loader options that choose items (subsets, limit, all_items),
                            "" without any (image folders are covered by dataset_fingerprint)
    poolings                JSON list, e.g. ["cls", "mean", "max", "pooled"]
    dtype                   "float32" or "float16" (storage and model weights)
    shard                   "K/N" ("0/1" unsharded)
    layers                  JSON {stream: [layer numbers]}
    complete                bool; True once every row (and the scores) are written
    -- recorded, not compared: created, vlprobe_version, versions (JSON), git_revision,
       device, dataset_source, tags_fingerprint, model_info (JSON), batch_size,
       dataset_options (JSON: the loader's options, e.g. image_dir, subsets, limit)

Index tables (all rows of the dataset, also in shard files)::

    /items/id        (n_items,)  str   namespaced item id
    /items/tags      (n_items,)  str   JSON {tag family: [tags]}
    /images/id       (n_images,) str   canonical image order
    /images/name     (n_images,) str   benchmark image name
    /images/item     (n_images,) int32 row in /items
    /texts/id        (n_texts,)  str   originals first (canonical order), then variants
    /texts/text      (n_texts,)  str
    /texts/item      (n_texts,)  int32 row in /items
    /texts/parent    (n_texts,)  int32 row of the original caption, -1 for originals
    /texts/strategy  (n_texts,)  str   augmentation strategy, "" for originals

One group per stream, ``/streams/<name>``, attributes ``modality`` (text|image|pair),
``layer_kinds`` (JSON, every layer of the model's stream), ``cls_rule``, ``hidden_size``,
``pooled_size`` (0 = none), ``n_rows`` (rows of the whole run), ``row_start``/``row_stop`` (the
rows this file holds; a shard holds a contiguous block)::

    layers    (L,)            int16  model layer numbers stored (0 = embeddings)
    image     (R,)            int32  row in /images, -1 if the row has no image
    text      (R,)            int32  row in /texts, -1 if the row has no text
    done      (R,)            bool   the done-mask: True once the row's states are written
    cls|mean|max (R, L, H)    dtype  pooled token states per stored layer (NaN until done)
    pooled    (R, D)          dtype  the model's own pooled output

Scores, ``/scores`` (attrs ``kind``, e.g. "cosine" or "match_probability"; ``orientation`` =
"image x text"; absent in a dual encoder's shard files, where ``probe cache merge`` computes it)::

    matrix    (n_images, n_texts) float32  s(image i, text t); NaN where not computed
    done      (n_images, n_texts) bool

Cross-encoders (one forward per pair) also keep the pair plan, ``/pairs`` (attrs ``n_rows``,
``row_start``, ``row_stop`` as for streams: a shard holds a contiguous block of the plan)::

    image     (P,)  int32    row in /images
    text      (P,)  int32    row in /texts
    score     (P,)  float32  the pair's score (NaN until done)
    done      (P,)  bool     True once the pair's score and states are written

Each batch writes its pairs' states (every pair stream) and scores, flushes, then marks them
done; ``/scores/matrix`` is filled from ``/pairs`` when the run completes. With ``pair_states``
the pair streams' rows are exactly the rows of ``/pairs``; without, ``/streams`` is absent.

Crash safety: state datasets are allocated in full when the file is created (no compression, so
writes never move data or change metadata); each chunk of rows is written, flushed, and only then
marked done and flushed again. A killed run loses at most the chunk in flight and resumes from
the done-mask. Opening an existing file with other settings is refused, naming the field.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from vlprobe.extract.models.base import StreamSpec

__all__ = [
    "COMPARED_FIELDS",
    "SCHEMA_VERSION",
    "ActivationCache",
    "CacheHeader",
    "CacheTables",
    "CacheWriter",
    "PairLayout",
    "StreamLayout",
]

SCHEMA_VERSION = 1
_STR = h5py.string_dtype(encoding="utf-8")
_CHUNK_BYTES = 1 << 20


@dataclass(frozen=True)
class CacheHeader:
    """The settings that identify a cache; all but ``checkpoint`` must match to resume."""

    model: str
    checkpoint: str
    checkpoint_fingerprint: str
    dataset: str
    dataset_fingerprint: str
    variants_fingerprint: str
    pair_plan: str
    poolings: tuple[str, ...]
    dtype: str
    shard: str
    layers: dict[str, list[int]]
    pair_states: bool = False
    regions_fingerprint: str = ""
    config_fingerprint: str = ""
    tokenizer_fingerprint: str = ""
    dataset_selection: str = ""

    def to_attrs(self) -> dict[str, Any]:
        d = asdict(self)
        d["poolings"] = json.dumps(list(self.poolings))
        d["layers"] = json.dumps(self.layers, sort_keys=True)
        return d

    @classmethod
    def from_attrs(cls, attrs: Mapping[str, Any]) -> CacheHeader:
        return cls(
            model=_s(attrs["model"]),
            checkpoint=_s(attrs["checkpoint"]),
            checkpoint_fingerprint=_s(attrs["checkpoint_fingerprint"]),
            dataset=_s(attrs["dataset"]),
            dataset_fingerprint=_s(attrs["dataset_fingerprint"]),
            variants_fingerprint=_s(attrs["variants_fingerprint"]),
            pair_plan=_s(attrs["pair_plan"]),
            poolings=tuple(json.loads(_s(attrs["poolings"]))),
            dtype=_s(attrs["dtype"]),
            shard=_s(attrs["shard"]),
            layers={k: list(v) for k, v in json.loads(_s(attrs["layers"])).items()},
            pair_states=bool(attrs.get("pair_states", False)),
            regions_fingerprint=_s(attrs.get("regions_fingerprint", "")),
            config_fingerprint=_s(attrs.get("config_fingerprint", "")),
            tokenizer_fingerprint=_s(attrs.get("tokenizer_fingerprint", "")),
            dataset_selection=_s(attrs.get("dataset_selection", "")),
        )


#: Header fields that must be equal for a run to resume (or shards to merge) into a file.
COMPARED_FIELDS: tuple[str, ...] = (
    "model", "checkpoint_fingerprint", "dataset", "dataset_fingerprint", "variants_fingerprint",
    "pair_plan", "pair_states", "poolings", "dtype", "shard", "layers", "regions_fingerprint",
    "config_fingerprint", "tokenizer_fingerprint", "dataset_selection",
)


@dataclass(frozen=True)
class CacheTables:
    """Index tables of a run (see the schema)."""

    item_id: list[str]
    item_tags: list[str]
    image_id: list[str]
    image_name: list[str]
    image_item: list[int]
    text_id: list[str]
    text: list[str]
    text_item: list[int]
    text_parent: list[int]
    text_strategy: list[str]


class _RowBlock:
    """Rows ``row_start:row_stop`` (None: to the end) of a run's ``image``/``text`` row arrays."""

    image: np.ndarray
    row_stop: int | None

    @property
    def n_rows(self) -> int:
        """Rows of the whole run."""
        return len(self.image)

    @property
    def stop(self) -> int:
        """End of this file's block."""
        return self.n_rows if self.row_stop is None else self.row_stop


@dataclass(frozen=True)
class StreamLayout(_RowBlock):
    """Rows and layers of one stream in one file.

    ``image``/``text`` hold the rows of the whole run; this file stores rows
    ``row_start:row_stop`` of them.
    """

    spec: StreamSpec
    layers: list[int]
    image: np.ndarray
    text: np.ndarray
    row_start: int = 0
    row_stop: int | None = None
    poolings: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class PairLayout(_RowBlock):
    """The pair plan of a cross-encoder run: (image, text) table rows of every pair.

    ``image``/``text`` hold the pairs of the whole run; this file stores pairs
    ``row_start:row_stop`` of them.
    """

    image: np.ndarray
    text: np.ndarray
    row_start: int = 0
    row_stop: int | None = None


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _header_diff(old: CacheHeader, new: CacheHeader) -> str | None:
    for name in COMPARED_FIELDS:
        a, b = getattr(old, name), getattr(new, name)
        if a != b:
            return f"{name}: file has {a!r}, this run has {b!r}"
    return None


def _open_h5(path: Path, mode: str) -> h5py.File:
    try:
        return h5py.File(path, mode)
    except OSError as exc:
        msg = str(exc)
        if "lock" in msg.lower():
            raise ValueError(
                f"cache {str(path)!r} is open for writing in another process "
                "(to read it meanwhile, set HDF5_USE_FILE_LOCKING=FALSE)"
            ) from None
        raise ValueError(f"cache {str(path)!r} is not a readable HDF5 file ({msg.splitlines()[0]})") from None


class CacheWriter:
    """Create or resume a cache file and write rows into it."""

    def __init__(self, f: h5py.File, path: Path) -> None:
        self.f = f
        self.path = path

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        header: CacheHeader,
        tables: CacheTables,
        layouts: Sequence[StreamLayout],
        recorded: Mapping[str, Any],
        *,
        with_scores: bool,
        pairs: PairLayout | None = None,
    ) -> CacheWriter:
        """Open ``path`` for this run: create it, or resume it if its header matches.

        Raises
        ------
        ValueError
            The file exists with other settings (the message names the first differing field),
            or is not a vlprobe cache.
        """
        p = Path(path)
        if p.exists():
            f = _open_h5(p, "r+")
            try:
                if "vlprobe_schema" not in f.attrs:
                    raise ValueError(f"out: {str(p)!r} exists and is not a vlprobe cache; refusing to touch it")
                if int(f.attrs["vlprobe_schema"]) != SCHEMA_VERSION:
                    raise ValueError(
                        f"cache {str(p)!r} has schema {int(f.attrs['vlprobe_schema'])}, "
                        f"this vlprobe writes {SCHEMA_VERSION}; use another --out"
                    )
                diff = _header_diff(CacheHeader.from_attrs(f.attrs), header)
                if diff:
                    raise ValueError(
                        f"cache {str(p)!r} was made with other settings ({diff}); "
                        "use another --out or delete the file"
                    )
            except BaseException:
                f.close()
                raise
            return cls(f, p)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(f".{p.name}.creating")
        f = h5py.File(tmp, "w")
        try:
            cls._create(f, header, tables, layouts, recorded, with_scores, pairs)
            f.flush()
            f.close()
            os.replace(tmp, p)
        finally:
            if f.id.valid:
                f.close()
            if tmp.exists():
                tmp.unlink()
        return cls(_open_h5(p, "r+"), p)

    @staticmethod
    def _create(
        f: h5py.File, header: CacheHeader, tables: CacheTables, layouts: Sequence[StreamLayout],
        recorded: Mapping[str, Any], with_scores: bool, pairs: PairLayout | None = None,
    ) -> None:
        f.attrs["vlprobe_schema"] = SCHEMA_VERSION
        for k, v in header.to_attrs().items():
            f.attrs[k] = v
        for k, v in recorded.items():
            f.attrs[k] = v if isinstance(v, (str, int, float, bool)) else json.dumps(v, sort_keys=True)
        f.attrs["created"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        f.attrs["complete"] = False
        _write_tables(f, tables)
        for lay in layouts:
            _create_stream(f, lay, header.dtype)
        if with_scores:
            n_img, n_txt = len(tables.image_id), len(tables.text_id)
            g = f.create_group("scores")
            chunks = (min(n_img, 256), min(n_txt, 256)) if n_img and n_txt else None
            g.create_dataset("matrix", shape=(n_img, n_txt), dtype="f4", fillvalue=np.nan, chunks=chunks)
            g.create_dataset("done", shape=(n_img, n_txt), dtype=bool, fillvalue=False, chunks=chunks)
            g.attrs["orientation"] = "image x text"
        if pairs is not None:
            _create_pairs(f, pairs)

    def todo(self, stream: str) -> np.ndarray:
        """Local row numbers of ``stream`` not yet done, ascending."""
        return np.flatnonzero(~self.f[f"streams/{stream}/done"][()])

    def row_inputs(self, stream: str) -> tuple[np.ndarray, np.ndarray]:
        """(image, text) table rows of this file's local rows."""
        g = self.f[f"streams/{stream}"]
        return g["image"][()], g["text"][()]

    def write(
        self, stream: str, rows: np.ndarray, states: Mapping[str, np.ndarray], pooled: np.ndarray | None
    ) -> None:
        """Write one chunk of rows, flush, then mark them done and flush again.

        Parameters
        ----------
        rows : ndarray of int, shape (B,)
            Ascending local row numbers.
        states : dict of str to ndarray, each (B, L, H)
        pooled : ndarray, shape (B, D), or None
        """
        g = self.f[f"streams/{stream}"]
        sel = _selection(rows)
        for name, arr in states.items():
            g[name][sel] = arr.astype(g[name].dtype, copy=False)
        if pooled is not None and "pooled" in g:
            g["pooled"][sel] = pooled.astype(g["pooled"].dtype, copy=False)
        self.f.flush()
        g["done"][sel] = True
        self.f.flush()

    def pair_todo(self) -> np.ndarray:
        """Local pair numbers not yet done, ascending."""
        return np.flatnonzero(~self.f["pairs/done"][()])

    def pair_inputs(self) -> tuple[np.ndarray, np.ndarray]:
        """(image, text) table rows of this file's local pairs."""
        return self.f["pairs/image"][()], self.f["pairs/text"][()]

    def write_pairs(
        self, rows: np.ndarray, scores: np.ndarray, states: Mapping[str, Mapping[str, np.ndarray]],
        pooled: Mapping[str, np.ndarray],
    ) -> None:
        """Write one chunk of pairs (scores and every pair stream), flush, then mark them done.

        Parameters
        ----------
        rows : ndarray of int, shape (B,)
            Ascending local pair numbers (also the rows of the pair streams).
        scores : ndarray, shape (B,)
        states : dict of stream to dict of pooling to ndarray (B, L, H)
            Empty for a scores-only run.
        pooled : dict of stream to ndarray (B, D)
        """
        sel = _selection(rows)
        streams = [s for s in states if f"streams/{s}" in self.f]
        for s in streams:
            g = self.f[f"streams/{s}"]
            for name, arr in states[s].items():
                if name in g:
                    g[name][sel] = arr.astype(g[name].dtype, copy=False)
            if s in pooled and "pooled" in g:
                g["pooled"][sel] = pooled[s].astype(g["pooled"].dtype, copy=False)
        p = self.f["pairs"]
        p["score"][sel] = np.asarray(scores, dtype=np.float32)
        self.f.flush()
        for s in streams:
            self.f[f"streams/{s}/done"][sel] = True
        p["done"][sel] = True
        self.f.flush()

    def scores_from_pairs(self) -> None:
        """Fill ``/scores`` from this file's ``/pairs`` (the pairs not done stay NaN)."""
        p = self.f["pairs"]
        image, text, score, done = p["image"][()], p["text"][()], p["score"][()], p["done"][()]
        g = self.f["scores"]
        matrix = np.full(g["matrix"].shape, np.nan, dtype=np.float32)
        mask = np.zeros(g["done"].shape, dtype=bool)
        matrix[image[done], text[done]] = score[done]
        mask[image[done], text[done]] = True
        self.write_scores(matrix, mask)

    def write_scores(self, matrix: np.ndarray, done: np.ndarray) -> None:
        """Set the score matrix (NaN where ``done`` is False) and flush."""
        g = self.f["scores"]
        g["matrix"][...] = np.where(done, matrix, np.nan).astype(np.float32)
        self.f.flush()
        g["done"][...] = done
        self.f.flush()

    def set_attrs(self, **attrs: Any) -> None:
        for k, v in attrs.items():
            self.f.attrs[k] = v if isinstance(v, (str, int, float, bool)) else json.dumps(v, sort_keys=True)
        self.f.flush()

    def close(self) -> None:
        if self.f.id.valid:
            self.f.close()

    def __enter__(self) -> CacheWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _selection(rows: np.ndarray) -> slice | np.ndarray:
    rows = np.asarray(rows, dtype=np.int64)
    if rows.size and rows[-1] - rows[0] + 1 == rows.size:
        return slice(int(rows[0]), int(rows[-1]) + 1)
    return rows


def _write_tables(f: h5py.File, t: CacheTables) -> None:
    def put(name: str, values: Sequence[Any], dtype: Any) -> None:
        f.create_dataset(name, data=np.asarray(values, dtype=object if dtype is _STR else dtype), dtype=dtype)

    put("items/id", t.item_id, _STR)
    put("items/tags", t.item_tags, _STR)
    put("images/id", t.image_id, _STR)
    put("images/name", t.image_name, _STR)
    put("images/item", t.image_item, np.int32)
    put("texts/id", t.text_id, _STR)
    put("texts/text", t.text, _STR)
    put("texts/item", t.text_item, np.int32)
    put("texts/parent", t.text_parent, np.int32)
    put("texts/strategy", t.text_strategy, _STR)


def _create_pairs(f: h5py.File, pairs: PairLayout) -> None:
    g = f.create_group("pairs")
    g.attrs["n_rows"] = pairs.n_rows
    g.attrs["row_start"] = pairs.row_start
    g.attrs["row_stop"] = pairs.stop
    local = slice(pairs.row_start, pairs.stop)
    n = pairs.stop - pairs.row_start
    g.create_dataset("image", data=np.asarray(pairs.image[local], dtype=np.int32))
    g.create_dataset("text", data=np.asarray(pairs.text[local], dtype=np.int32))
    _allocate(g, "score", (n,), np.dtype(np.float32))
    g.create_dataset("done", shape=(n,), dtype=bool, fillvalue=False)


def _create_stream(f: h5py.File, lay: StreamLayout, dtype: str) -> None:
    spec = lay.spec
    g = f.create_group(f"streams/{spec.name}")
    g.attrs["modality"] = spec.modality
    g.attrs["layer_kinds"] = json.dumps(list(spec.layer_kinds))
    g.attrs["cls_rule"] = spec.cls_rule
    g.attrs["hidden_size"] = spec.hidden_size
    g.attrs["pooled_size"] = spec.pooled_size or 0
    g.attrs["n_rows"] = lay.n_rows
    g.attrs["row_start"] = lay.row_start
    g.attrs["row_stop"] = lay.stop
    local = slice(lay.row_start, lay.stop)
    n = lay.stop - lay.row_start
    g.create_dataset("layers", data=np.asarray(lay.layers, dtype=np.int16))
    g.create_dataset("image", data=np.asarray(lay.image[local], dtype=np.int32))
    g.create_dataset("text", data=np.asarray(lay.text[local], dtype=np.int32))
    g.create_dataset("done", shape=(n,), dtype=bool, fillvalue=False)
    np_dtype = np.dtype(dtype)
    shape_l = (n, len(lay.layers), spec.hidden_size)
    for pooling in lay.poolings:
        if pooling == "pooled":
            if spec.pooled_size:
                _allocate(g, "pooled", (n, spec.pooled_size), np_dtype)
        elif pooling in spec.poolings:
            _allocate(g, pooling, shape_l, np_dtype)


def _allocate(g: h5py.Group, name: str, shape: tuple[int, ...], dtype: np.dtype) -> None:
    """A chunked dataset allocated in full now, filled with NaN (see "Crash safety")."""
    row_bytes = int(np.prod(shape[1:])) * dtype.itemsize
    chunk_rows = max(1, min(shape[0], _CHUNK_BYTES // max(row_bytes, 1)))
    chunks = (chunk_rows, *shape[1:]) if shape[0] else None
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    if chunks:
        dcpl.set_chunk(chunks)
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    dcpl.set_fill_value(np.array(np.nan, dtype=dtype))
    space = h5py.h5s.create_simple(shape)
    tid = h5py.h5t.py_create(dtype)
    h5py.h5d.create(g.id, name.encode(), tid, space, dcpl=dcpl)


class ActivationCache:
    """Read access to a cache file (see the module docstring for the schema).

    Parameters
    ----------
    path : path
        A cache written by ``probe extract`` (or ``probe cache merge``).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"cache: no such file {str(self.path)!r}")
        self.f = _open_h5(self.path, "r")
        if "vlprobe_schema" not in self.f.attrs:
            self.f.close()
            raise ValueError(f"cache: {str(self.path)!r} is not a vlprobe cache")
        self.header = CacheHeader.from_attrs(self.f.attrs)

    def close(self) -> None:
        if self.f.id.valid:
            self.f.close()

    def __enter__(self) -> ActivationCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def attrs(self) -> dict[str, Any]:
        return {k: (v.item() if isinstance(v, np.generic) else _s(v) if isinstance(v, bytes) else v)
                for k, v in self.f.attrs.items()}

    @property
    def complete(self) -> bool:
        return bool(self.f.attrs.get("complete", False))

    @property
    def streams(self) -> list[str]:
        return list(self.f["streams"].keys()) if "streams" in self.f else []

    def layers(self, stream: str) -> list[int]:
        return [int(x) for x in self._stream(stream)["layers"][()]]

    def layer_kinds(self, stream: str) -> list[str]:
        """Kinds of the stored layers (see :meth:`model_layer_kinds` for all of the model's)."""
        kinds = self.model_layer_kinds(stream)
        return [kinds[i] for i in self.layers(stream)]

    def model_layer_kinds(self, stream: str) -> list[str]:
        """Kind of every layer the model has in ``stream`` (stored or not), layer 0 first."""
        return list(json.loads(_s(self._stream(stream).attrs["layer_kinds"])))

    def modality(self, stream: str) -> str:
        """``text``, ``image`` or ``pair``: what one row of ``stream`` is."""
        return _s(self._stream(stream).attrs["modality"])

    def poolings(self, stream: str) -> list[str]:
        g = self._stream(stream)
        return [p for p in ("cls", "mean", "max", "pooled") if p in g]

    def done(self, stream: str) -> np.ndarray:
        return self._stream(stream)["done"][()]

    def rows(self, stream: str) -> dict[str, np.ndarray]:
        """Table rows per stored row: ``{"image": (R,), "text": (R,)}`` (-1 = none)."""
        g = self._stream(stream)
        return {"image": g["image"][()], "text": g["text"][()]}

    def states(self, stream: str, pooling: str, layer: int | None = None) -> np.ndarray:
        """Stored states.

        Parameters
        ----------
        stream, pooling : str
        layer : int, optional
            A model layer number (negative counts from the last stored); None for all.

        Returns
        -------
        ndarray
            (R, L, H) for all layers, (R, H) for one layer or for ``pooled``.
        """
        g = self._stream(stream)
        if pooling not in g or pooling in ("layers", "image", "text", "done"):
            raise ValueError(
                f"pooling {pooling!r} is not in stream {stream!r} of {self.path.name} "
                f"(has {', '.join(self.poolings(stream))})"
            )
        if not bool(g["done"][()].all()):
            raise ValueError(
                f"cache {self.path.name}: stream {stream!r} is incomplete "
                f"({int(g['done'][()].sum())}/{len(g['done'])} rows); resume the extraction first"
            )
        ds = g[pooling]
        if pooling == "pooled" or layer is None:
            return ds[()]
        stored = self.layers(stream)
        if layer < 0:
            layer = stored[layer] if -len(stored) <= layer else layer
        if layer not in stored:
            raise ValueError(f"layer {layer} is not stored for stream {stream!r} (stored: {stored})")
        return ds[:, stored.index(layer), :]

    def table(self, name: str) -> dict[str, np.ndarray]:
        """One index table (``items``, ``images`` or ``texts``) as column -> array."""
        if name not in ("items", "images", "texts"):
            raise ValueError(f"table must be items, images or texts, got {name!r}")
        g = self.f[name]
        out = {}
        for col in g:
            arr = g[col][()]
            out[col] = np.array([_s(x) for x in arr], dtype=object) if arr.dtype.kind == "O" else arr
        return out

    def pairs(self) -> dict[str, np.ndarray]:
        """A cross-encoder's pair plan in this file: ``image``, ``text``, ``score``, ``done`` (P,)."""
        if "pairs" not in self.f:
            raise ValueError(f"cache {self.path.name} holds no pair plan (made by a dual encoder)")
        g = self.f["pairs"]
        return {k: g[k][()] for k in ("image", "text", "score", "done")}

    def scores(self) -> tuple[np.ndarray, np.ndarray]:
        """(matrix (n_images, n_texts) float32, done (n_images, n_texts) bool)."""
        if "scores" not in self.f:
            raise ValueError(f"cache {self.path.name} holds no scores")
        return self.f["scores/matrix"][()], self.f["scores/done"][()]

    def provenance(self) -> dict[str, Any]:
        """What a manifest records about this cache as an input: path, hash, model, every input
        fingerprint of the header, pair plan and score kind."""
        from vlprobe.provenance import sha256_file

        h = self.header
        return {
            "path": str(self.path), "sha256": sha256_file(self.path), "model": h.model,
            "checkpoint": h.checkpoint, "checkpoint_fingerprint": h.checkpoint_fingerprint,
            "dataset": h.dataset, "dataset_fingerprint": h.dataset_fingerprint,
            "variants_fingerprint": h.variants_fingerprint, "layers": h.layers, "dtype": h.dtype,
            "regions_fingerprint": h.regions_fingerprint, "config_fingerprint": h.config_fingerprint,
            "tokenizer_fingerprint": h.tokenizer_fingerprint, "dataset_selection": h.dataset_selection,
            "pair_plan": h.pair_plan, "pair_states": h.pair_states,
            "score_kind": _s(self.f["scores"].attrs.get("kind", "")) if "scores" in self.f else "",
        }

    def _stream(self, stream: str) -> h5py.Group:
        if stream not in self.streams:
            raise ValueError(
                f"stream {stream!r} is not in {self.path.name} (streams: {', '.join(self.streams)})"
            )
        return self.f[f"streams/{stream}"]

    def info(self) -> dict[str, Any]:
        """A JSON-serialisable summary (what ``probe cache info`` prints)."""
        attrs = self.attrs
        for key in ("versions", "model_info"):
            if isinstance(attrs.get(key), str):
                attrs[key] = json.loads(attrs[key])
        for key in ("poolings", "layers"):
            attrs[key] = json.loads(attrs[key])
        streams = {}
        for s in self.streams:
            g = self._stream(s)
            done = g["done"][()]
            streams[s] = {
                "modality": _s(g.attrs["modality"]),
                "layers": self.layers(s),
                "layer_kinds": self.layer_kinds(s),
                "cls_rule": _s(g.attrs["cls_rule"]),
                "hidden_size": int(g.attrs["hidden_size"]),
                "poolings": {p: list(g[p].shape) for p in self.poolings(s)},
                "rows": [int(g.attrs["row_start"]), int(g.attrs["row_stop"])],
                "n_rows": int(g.attrs["n_rows"]),
                "done": int(done.sum()),
            }
        out: dict[str, Any] = {
            "path": str(self.path),
            "size_bytes": self.path.stat().st_size,
            "attrs": attrs,
            "items": len(self.f["items/id"]),
            "images": len(self.f["images/id"]),
            "texts": len(self.f["texts/id"]),
            "variants": int((self.f["texts/parent"][()] >= 0).sum()),
            "streams": streams,
        }
        if "scores" in self.f:
            done = self.f["scores/done"][()]
            out["scores"] = {
                "shape": list(done.shape), "done": int(done.sum()),
                "kind": _s(self.f["scores"].attrs.get("kind", "")),
                "orientation": _s(self.f["scores"].attrs.get("orientation", "")),
            }
        if "pairs" in self.f:
            g = self.f["pairs"]
            out["pairs"] = {
                "rows": [int(g.attrs["row_start"]), int(g.attrs["row_stop"])],
                "n_rows": int(g.attrs["n_rows"]), "done": int(g["done"][()].sum()),
            }
        return out
