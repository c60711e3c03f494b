"""Create or resume a cache file and write rows into it (the schema is in :mod:`.schema`).

:class:`CacheWriter` is the cache kind of :class:`vlprobe.extract.sharded_h5.ShardedH5Writer`:
it holds the cache's write lock from :meth:`CacheWriter.open` to :meth:`CacheWriter.close` (a
second run on the same file is refused in one line), creates the whole file under a temporary
name with every dataset allocated (a disk too small fails at the start, before any row is
computed), and writes rows in flushed chunks with the done masks of the schema.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from vlprobe.extract.cache.schema import (
    LEGACY_VERSION_ATTR,
    SCHEMA,
    SCHEMA_VERSION,
    STR_DTYPE,
    CacheHeader,
    CacheRecord,
    CacheTables,
    PairLayout,
    StreamLayout,
    attr_str,
    cache_version,
)
from vlprobe.extract.sharded_h5 import ShardedH5Writer, allocate, row_selection
from vlprobe.io.h5 import schema_attrs
from vlprobe.validation import InputError

__all__ = ["STORED_DTYPES", "CacheWriter"]

#: The dtype states are stored in for a run's ``dtype`` where HDF5 has no such type: bfloat16
#: states are stored as float32 (exactly: every bfloat16 value is a float32 value).
STORED_DTYPES: dict[str, str] = {"bfloat16": "float32"}


class CacheWriter(ShardedH5Writer[CacheHeader]):
    """Create or resume a cache file and write rows into it."""

    noun = "cache"
    kind = "a vlprobe cache"

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        header: CacheHeader,
        tables: CacheTables,
        layouts: Sequence[StreamLayout],
        record: CacheRecord,
        *,
        with_scores: bool,
        pairs: PairLayout | None = None,
        score_kind: str = "",
    ) -> CacheWriter:
        """Open ``path`` for this run: create it, or resume it if its header matches.

        ``record`` is what the run records (``created`` and ``complete`` are set here). A
        file of an older version whose header matches is resumed and relabelled the current version
        (same datasets).
        ``score_kind`` is what a score is (``/scores`` attribute ``kind``).

        Raises
        ------
        InputError
            The file exists with other settings (the message names the first differing field),
            is not a vlprobe cache, has a schema version this vlprobe does not read, or another
            process is writing it.
        OSError
            The disk has no room for the cache (it names ``path``; nothing is left behind).
        """
        writer = cls._open(
            path, header, lambda f: cls._create(f, header, tables, layouts, record, with_scores, pairs, score_kind),
        )
        try:
            writer._add_jobs(record.job_ids)
        except BaseException:
            writer.close()
            raise
        return writer

    def _add_jobs(self, jobs: Sequence[Mapping[str, str]]) -> None:
        """Append this run's ``job_ids`` entries to a resumed file's (a new file has them already)."""
        if not jobs:
            return
        raw = self.f.attrs.get("job_ids")
        try:
            have = json.loads(attr_str(raw)) if raw is not None else []
        except ValueError:
            have = []
        new = [dict(j) for j in jobs]
        if not isinstance(have, list) or have[len(have) - len(new):] != new:
            self.set_attrs({"job_ids": json.dumps([*(have if isinstance(have, list) else []), *new], sort_keys=True)})

    @classmethod
    def _read_header(cls, f: h5py.File, p: Path) -> tuple[int, CacheHeader]:
        if "schema" not in f.attrs and LEGACY_VERSION_ATTR not in f.attrs:
            raise InputError(f"out: {str(p)!r} exists and is not a vlprobe cache; refusing to touch it")
        where = cls.where(p)
        version = cache_version(f.attrs, where)
        return version, CacheHeader.from_attrs(f.attrs, version, where)

    @classmethod
    def _relabel(cls, f: h5py.File, version: int, old: CacheHeader) -> None:
        """An older file as the current version: the version attributes and the header fields it
        lacked (at their defaults); its datasets are already what the current version holds."""
        if version >= SCHEMA_VERSION:
            return
        f.attrs.update(schema_attrs(SCHEMA, SCHEMA_VERSION))
        if LEGACY_VERSION_ATTR in f.attrs:
            del f.attrs[LEGACY_VERSION_ATTR]
        for k, v in old.to_attrs().items():
            if k not in f.attrs:
                f.attrs[k] = v
        f.flush()

    @staticmethod
    def _create(
        f: h5py.File, header: CacheHeader, tables: CacheTables, layouts: Sequence[StreamLayout],
        record: CacheRecord, with_scores: bool, pairs: PairLayout | None = None, score_kind: str = "",
    ) -> None:
        f.attrs.update(schema_attrs(SCHEMA, SCHEMA_VERSION))
        f.attrs.update(header.to_attrs())
        record = dataclasses.replace(record, created=time.strftime("%Y-%m-%dT%H:%M:%S%z"), complete=False)
        f.attrs.update(record.to_attrs())
        _write_tables(f, tables)
        for lay in layouts:
            _create_stream(f, lay, header.dtype)
        if with_scores:
            n_img, n_txt = len(tables.image_id), len(tables.text_id)
            g = f.create_group("scores")
            chunks = (min(n_img, 256), min(n_txt, 256)) if n_img and n_txt else None
            _allocate(g, "matrix", (n_img, n_txt), np.dtype(np.float32), chunks=chunks)
            _allocate(g, "done", (n_img, n_txt), np.dtype(bool), chunks=chunks)
            g.attrs["orientation"] = "image x text"
            g.attrs["kind"] = score_kind
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
        at = f"streams/{stream}"
        data = {f"{at}/{name}": arr for name, arr in states.items()}
        if pooled is not None and "pooled" in self.f[at]:
            data[f"{at}/pooled"] = pooled
        self.commit(data, [f"{at}/done"], row_selection(rows))

    def pair_todo(self) -> np.ndarray:
        """Local pair numbers not yet done, ascending."""
        return np.flatnonzero(~self.f["pairs/done"][()])

    def pair_inputs(self) -> tuple[np.ndarray, np.ndarray]:
        """(image, text) table rows of this file's local pairs."""
        return self.f["pairs/image"][()], self.f["pairs/text"][()]

    def write_pairs(
        self, rows: np.ndarray, scores: np.ndarray, states: Mapping[str, Mapping[str, np.ndarray]],
        pooled: Mapping[str, np.ndarray], positions: np.ndarray | None = None,
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
        positions : ndarray of int, shape (B, K), optional
            Where each pair's parts sit in its joint sequence (stored where the file keeps
            ``/pairs/positions``).
        """
        data: dict[str, np.ndarray] = {}
        streams = [s for s in states if f"streams/{s}" in self.f]
        for s in streams:
            g = self.f[f"streams/{s}"]
            data.update({f"streams/{s}/{name}": arr for name, arr in states[s].items() if name in g})
            if s in pooled and "pooled" in g:
                data[f"streams/{s}/pooled"] = pooled[s]
        data["pairs/score"] = np.asarray(scores, dtype=np.float32)
        if positions is not None and "positions" in self.f["pairs"]:
            data["pairs/positions"] = np.asarray(positions, dtype=np.int32)
        self.commit(data, [*(f"streams/{s}/done" for s in streams), "pairs/done"], row_selection(rows))

    def scores_from_pairs(self, kind: str) -> None:
        """Fill ``/scores`` from this file's ``/pairs`` (the pairs not done stay NaN); ``kind`` is
        what a score is (``/scores`` attribute ``kind``)."""
        self._set_score_kind(kind)
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
        self.commit({"scores/matrix": np.where(done, matrix, np.nan).astype(np.float32)}, [], ...)
        self.commit({"scores/done": done}, [], ...)

    def _set_score_kind(self, kind: str) -> None:
        """Set at creation; written again only for a file made before the kind was known then."""
        g = self.f["scores"]
        if attr_str(g.attrs.get("kind", "")) != kind:
            with self._writing():
                g.attrs["kind"] = kind

    def scores_from_pooled(self, score: Callable[[np.ndarray, np.ndarray], np.ndarray], kind: str) -> None:
        """Fill the score matrix of a dual encoder from the stored pooled embeddings.

        Parameters
        ----------
        score : callable
            (image pooled (I, D), text pooled (T, D)) -> scores (I, T), e.g. an adapter's
            ``scores_from_pooled``.
        kind : str
            Recorded as ``/scores`` attribute ``kind``.
        """
        f = self.f
        by_modality = {f[f"streams/{s}"].attrs["modality"]: s for s in f["streams"]}
        img = f[f"streams/{by_modality['image']}/pooled"][()].astype(np.float32)
        txt = f[f"streams/{by_modality['text']}/pooled"][()].astype(np.float32)
        matrix = score(img, txt)
        self._set_score_kind(kind)
        self.write_scores(matrix, np.ones(matrix.shape, dtype=bool))

    def update_record(self, **values: Any) -> None:
        """Set fields of the file's :class:`CacheRecord` (``complete=True`` at the end of a run)."""
        unknown = sorted(set(values) - {f.name for f in dataclasses.fields(CacheRecord)})
        if unknown:
            raise TypeError(f"update_record: {', '.join(unknown)} are not CacheRecord fields")
        attrs = dataclasses.replace(CacheRecord(), **values).to_attrs()
        self.set_attrs({k: attrs[k] for k in values})


def _write_tables(f: h5py.File, t: CacheTables) -> None:
    def put(name: str, values: Sequence[Any], dtype: Any) -> None:
        f.create_dataset(name, data=np.asarray(values, dtype=object if dtype is STR_DTYPE else dtype), dtype=dtype)

    put("items/id", t.item_id, STR_DTYPE)
    put("items/tags", t.item_tags, STR_DTYPE)
    put("images/id", t.image_id, STR_DTYPE)
    put("images/name", t.image_name, STR_DTYPE)
    put("images/item", t.image_item, np.int32)
    put("texts/id", t.text_id, STR_DTYPE)
    put("texts/text", t.text, STR_DTYPE)
    put("texts/item", t.text_item, np.int32)
    put("texts/parent", t.text_parent, np.int32)
    put("texts/strategy", t.text_strategy, STR_DTYPE)


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
    _allocate(g, "done", (n,), np.dtype(bool), chunks=None)
    if pairs.position_columns:
        allocate(g, "positions", (n, len(pairs.position_columns)), np.int32, fill=-1)
        g.attrs["position_columns"] = json.dumps(list(pairs.position_columns))


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
    _allocate(g, "done", (n,), np.dtype(bool), chunks=None)
    np_dtype = np.dtype(STORED_DTYPES.get(dtype, dtype))
    shape_l = (n, len(lay.layers), spec.hidden_size)
    for pooling in lay.poolings:
        if pooling == "pooled":
            if spec.pooled_size:
                _allocate(g, "pooled", (n, spec.pooled_size), np_dtype)
        elif pooling in spec.poolings:
            _allocate(g, pooling, shape_l, np_dtype)


def _allocate(
    g: h5py.Group, name: str, shape: tuple[int, ...], dtype: np.dtype,
    chunks: tuple[int, ...] | str | None = "rows",
) -> None:
    """A dataset allocated in full now, NaN (False for a done mask) until its rows are written."""
    allocate(g, name, shape, dtype, fill=False if dtype == np.dtype(bool) else np.nan, chunks=chunks)
