"""Create or resume a cache file and write rows into it (the schema is in :mod:`.schema`).

A writer holds the cache's write lock (:func:`vlprobe.io.output_lock`) from :meth:`CacheWriter.open`
to :meth:`CacheWriter.close`: a second run on the same file is refused in one line. Every dataset
and attribute is allocated when the file is created (a temporary file renamed into place), so
the file never grows afterwards: a disk that fills up during a run cannot leave a half-written
cache, and one too small for the cache fails at the start, before any row is computed (the free
space is compared with the file's planned size before HDF5 writes anything).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import errno
import io
import json
import math
import os
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
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
    header_diff,
    open_h5,
)
from vlprobe.io.errors import is_disk_full, no_space_error
from vlprobe.io.h5 import OpenH5, discard_h5, schema_attrs, stop_h5_writes
from vlprobe.io.locks import output_lock
from vlprobe.io.paths import check_writable, ensure_folder, temp_name
from vlprobe.validation import InputError

__all__ = ["CacheWriter"]

_CHUNK_BYTES = 1 << 20
# Room kept free beyond a new cache's planned size (HDF5's own metadata, B-trees of the chunks).
_SPACE_MARGIN = 1 << 20
# While set, _allocate adds the bytes it would allocate here instead of allocating them.
_SIZING: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("_SIZING", default=None)


class CacheWriter(OpenH5):
    """Create or resume a cache file and write rows into it."""

    def __init__(self, f: h5py.File, path: Path, lock: contextlib.ExitStack | None = None) -> None:
        self.f = f
        self.path = path
        self._lock = lock

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
        p = Path(path)
        ensure_folder(p.parent)
        lock = contextlib.ExitStack()
        lock.enter_context(output_lock(p, wait=False))
        try:
            if os.path.lexists(p):
                f = _resume(p, header)
            else:
                f = cls._create_file(p, header, tables, layouts, record, with_scores, pairs, score_kind)
        except BaseException:
            lock.close()
            raise
        return cls(f, p, lock)

    @staticmethod
    def check_out(path: str | os.PathLike[str]) -> None:
        """Before any work: refuse an ``--out`` that cannot be written or is not a vlprobe cache
        (its settings are compared when the run opens it)."""
        p = Path(path)
        check_writable(p)
        with output_lock(p, wait=False):  # another run writing it: refused now, in one line
            if os.path.lexists(p):
                _look(p)

    @classmethod
    def _create_file(
        cls, p: Path, header: CacheHeader, tables: CacheTables, layouts: Sequence[StreamLayout],
        record: CacheRecord, with_scores: bool, pairs: PairLayout | None, score_kind: str,
    ) -> h5py.File:
        """Create the whole file under a temporary name, then rename it into place."""
        tmp = temp_name(p)
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()  # a killed run's
        # A disk too small is refused before HDF5 writes anything: HDF5 closing a file whose
        # creation failed part-way can crash the process.
        need = _planned_bytes(lambda f: cls._create(f, header, tables, layouts, record, with_scores, pairs, score_kind))
        if shutil.disk_usage(p.parent).free < need + need // 50 + _SPACE_MARGIN:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.fspath(p))
        try:
            f = h5py.File(tmp, "w")
        except BaseException as exc:
            tmp.unlink(missing_ok=True)
            if is_disk_full(exc):
                raise no_space_error(exc, p) from exc
            raise
        try:
            cls._create(f, header, tables, layouts, record, with_scores, pairs, score_kind)
            f.flush()
            f.close()
            os.replace(tmp, p)
        except BaseException as exc:
            discard_h5(f, tmp)
            if is_disk_full(exc):
                raise no_space_error(exc, p) from exc
            raise
        return open_h5(p, "r+")

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
        g = self.f[f"streams/{stream}"]
        sel = _selection(rows)
        with self._writing():
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
        with self._writing():
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
        g = self.f["scores"]
        with self._writing():
            g["matrix"][...] = np.where(done, matrix, np.nan).astype(np.float32)
            self.f.flush()
            g["done"][...] = done
            self.f.flush()

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
        with self._writing():
            for k in values:
                if k in self.f.attrs and np.asarray(self.f.attrs[k]).dtype == np.asarray(attrs[k]).dtype:
                    self.f.attrs.modify(k, attrs[k])  # in place: the file does not grow
                else:
                    self.f.attrs[k] = attrs[k]
            self.f.flush()

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """A full disk as an OSError naming the cache (the CLI's one line)."""
        try:
            yield
        except (OSError, RuntimeError, ValueError) as exc:
            if is_disk_full(exc):
                stop_h5_writes(self.f)  # the file stays as the last flush left it: resumable
                raise no_space_error(exc, self.path) from exc
            raise

    def close(self) -> None:
        """Close the file, then release the write lock."""
        try:
            super().close()
        finally:
            if self._lock is not None:
                self._lock.close()
                self._lock = None


def _resume(p: Path, header: CacheHeader) -> h5py.File:
    """``p`` opened for writing, after a read-only look shows a vlprobe cache of this run's settings
    (nothing that is not one is opened for writing, so nothing else is ever changed)."""
    version, old = _look(p)
    where = f"cache {str(p)!r}"
    diff = header_diff(old, header)
    if diff:
        raise InputError(f"{where} was made with other settings ({diff}); use another --out or delete the file")
    f = open_h5(p, "r+")
    if version < SCHEMA_VERSION:
        try:
            _relabel(f, old)
        except BaseException:
            f.close()
            raise
    return f


def _look(p: Path) -> tuple[int, CacheHeader]:
    """The schema version and header of the existing file ``p``, read without opening it for
    writing; InputError unless it is a vlprobe cache."""
    refuse = f"out: {str(p)!r} exists and is not a vlprobe cache; refusing to touch it"
    if p.is_symlink() or not p.is_file():
        raise InputError(f"out: {str(p)!r} exists and is not a regular file; refusing to touch it")
    if not h5py.is_hdf5(p):
        raise InputError(f"{refuse} (not an HDF5 file)")
    where = f"cache {str(p)!r}"
    with open_h5(p, "r") as f:
        if "schema" not in f.attrs and LEGACY_VERSION_ATTR not in f.attrs:
            raise InputError(refuse)
        version = cache_version(f.attrs, where)
        return version, CacheHeader.from_attrs(f.attrs, version, where)


def _relabel(f: h5py.File, header: CacheHeader) -> None:
    """An older file as the current version: the version attributes and the header fields it
    lacked (at their defaults); its datasets are already what the current version holds."""
    f.attrs.update(schema_attrs(SCHEMA, SCHEMA_VERSION))
    if LEGACY_VERSION_ATTR in f.attrs:
        del f.attrs[LEGACY_VERSION_ATTR]
    for k, v in header.to_attrs().items():
        if k not in f.attrs:
            f.attrs[k] = v
    f.flush()


def _selection(rows: np.ndarray) -> slice | np.ndarray:
    rows = np.asarray(rows, dtype=np.int64)
    if rows.size and rows[-1] - rows[0] + 1 == rows.size:
        return slice(int(rows[0]), int(rows[-1]) + 1)
    return rows


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
    np_dtype = np.dtype(dtype)
    shape_l = (n, len(lay.layers), spec.hidden_size)
    for pooling in lay.poolings:
        if pooling == "pooled":
            if spec.pooled_size:
                _allocate(g, "pooled", (n, spec.pooled_size), np_dtype)
        elif pooling in spec.poolings:
            _allocate(g, pooling, shape_l, np_dtype)


def _planned_bytes(create: Callable[[h5py.File], None]) -> int:
    """About how many bytes ``create(f)`` makes a new file take: its allocations counted, not
    made, everything else built in memory."""
    counted = [0]
    token = _SIZING.set(counted)
    try:
        with h5py.File(io.BytesIO(), "w") as f:
            create(f)
            f.flush()
            meta = f.id.get_filesize()
    finally:
        _SIZING.reset(token)
    return counted[0] + int(meta)


def _allocate(
    g: h5py.Group, name: str, shape: tuple[int, ...], dtype: np.dtype,
    chunks: tuple[int, ...] | str | None = "rows",
) -> None:
    """A dataset allocated and filled in full now (NaN, or False for a done mask), so that writing
    it later never needs new space in the file (see "Crash safety").

    ``chunks``: ``"rows"`` (chunks of whole rows of about 1 MiB), a chunk shape, or None (contiguous).
    """
    if chunks == "rows":
        row_bytes = int(np.prod(shape[1:])) * dtype.itemsize
        chunk_rows = max(1, min(shape[0], _CHUNK_BYTES // max(row_bytes, 1)))
        chunks = (chunk_rows, *shape[1:]) if shape[0] else None
    sizing = _SIZING.get()
    if sizing is not None:  # whole chunks are allocated, the last ones too
        if chunks and all(shape) and not isinstance(chunks, str):
            cells = math.prod(-(-n // c) * c for n, c in zip(shape, chunks, strict=True))
        else:
            cells = math.prod(shape)
        sizing[0] += cells * dtype.itemsize
        return
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    if chunks and all(shape):
        dcpl.set_chunk(tuple(chunks))
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    dcpl.set_fill_time(h5py.h5d.FILL_TIME_ALLOC)
    dcpl.set_fill_value(np.array(False if dtype == np.dtype(bool) else np.nan, dtype=dtype))
    space = h5py.h5s.create_simple(shape)
    tid = h5py.h5t.py_create(dtype)
    h5py.h5d.create(g.id, name.encode(), tid, space, dcpl=dcpl)
