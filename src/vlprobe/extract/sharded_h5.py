"""Sharded, resumable HDF5 files: the one writer core and the one merge behind activation caches
(:mod:`vlprobe.extract.cache`) and extracted region files (:mod:`vlprobe.extract.regions.chunked`).

A file kind subclasses :class:`ShardedH5Writer`: it declares how its header is read from a file
(:meth:`~ShardedH5Writer._read_header`) and what a new file holds (the ``create`` function it
passes to :meth:`~ShardedH5Writer._open`); the rest is shared:

Create or resume
    A new file is built whole under a temporary name (:func:`vlprobe.io.paths.temp_name`) and renamed
    into place; every dataset is allocated and filled in full then (:func:`allocate`; nothing is
    compressed), so a later write never moves data, changes metadata or needs new space. The free
    space is compared with the file's planned size (:func:`planned_bytes`) before HDF5 writes
    anything. An existing file is first looked at read-only: anything that is not a file of this
    kind is refused (never opened for writing), and one whose header differs is refused with a
    message naming the first field that differs (:func:`header_diff`).
Ownership
    A writer holds the file's write lock (:func:`vlprobe.io.locks.output_lock`) from opening to
    :meth:`~ShardedH5Writer.close`: a second run on the same file is refused in one line.
Rows in flushed chunks
    :meth:`~ShardedH5Writer.commit` writes a chunk of rows, flushes, marks them in the done
    mask(s) and flushes again: a run killed at any write loses at most the chunk in flight and
    resumes from the done mask. A full disk is an ``OSError`` naming the file, which stays as its
    last flush left it.
Shards
    A run split ``--shard K/N`` (:func:`parse_shard`) writes a contiguous block of rows per file;
    :func:`merge_files` joins the N files into one, as an unsharded run writes it: it checks that
    the headers agree but for the shard, that shards 0..N-1 are each there once and complete, and
    copies every row dataset in bounded pieces (:meth:`~ShardedH5Writer.copy_rows`).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import errno
import io
import math
import os
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import h5py
import numpy as np

from vlprobe.io.atomic import atomic_path
from vlprobe.io.errors import is_disk_full, no_space_error
from vlprobe.io.h5 import OpenH5, discard_h5, h5_open_failure, stop_h5_writes
from vlprobe.io.locks import output_lock
from vlprobe.io.paths import check_writable, ensure_folder, temp_name
from vlprobe.shards import parse_shard
from vlprobe.validation import InputError

__all__ = [
    "CHUNK_BYTES",
    "MERGE_CHUNK_BYTES",
    "Shard",
    "ShardHeader",
    "ShardedH5Writer",
    "allocate",
    "first_difference",
    "header_diff",
    "merge_files",
    "open_h5",
    "parse_shard",
    "planned_bytes",
    "row_selection",
]

#: ``chunks="rows"`` datasets are chunked in whole rows of about this many bytes.
CHUNK_BYTES = 1 << 20
#: :func:`merge_files` copies rows in pieces of about this many bytes (shards can outgrow memory).
MERGE_CHUNK_BYTES = 64 << 20
# Room kept free beyond a new file's planned size, for HDF5's own metadata (the chunk indexes grow
# with the number of chunks, so with the size): this much plus 1/20 of the planned size.
_SPACE_MARGIN = 256 << 10
# While set, allocate adds the bytes it would allocate here instead of allocating them.
_SIZING: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("_SIZING", default=None)


class ShardHeader(Protocol):
    """What identifies a run: a frozen dataclass with a ``shard`` field (``"K/N"``)."""

    @property
    def shard(self) -> str: ...

    def compared(self) -> dict[str, Any]:
        """The fields compared on resume and merge, in the order they are reported (``shard`` too)."""
        ...


H = TypeVar("H", bound=ShardHeader)
W = TypeVar("W", bound="ShardedH5Writer[Any]")


def first_difference(old: ShardHeader, new: ShardHeader, *, skip: Sequence[str] = ()) -> tuple[str, Any, Any] | None:
    """The first compared field (a key ``a.b`` is skipped with ``a``) whose values differ, with the
    two values; None when they all agree."""
    mine, theirs = old.compared(), new.compared()
    for key in dict.fromkeys([*mine, *theirs]):
        if key in skip or key.split(".")[0] in skip:
            continue
        if mine.get(key) != theirs.get(key):
            return key, mine.get(key), theirs.get(key)
    return None


def header_diff(old: ShardHeader, new: ShardHeader, *, skip: Sequence[str] = ()) -> str | None:
    """:func:`first_difference` of a file's header ``old`` and a run's ``new``, described as
    ``"field: file has A, this run has B"``."""
    diff = first_difference(old, new, skip=skip)
    return None if diff is None else f"{diff[0]}: file has {diff[1]!r}, this run has {diff[2]!r}"


def open_h5(path: Path, mode: str, where: str) -> h5py.File:
    """``h5py.File(path, mode)``; InputError naming ``where`` (``"cache '/x.h5'"``) when another process
    holds HDF5's lock on it or it is no readable HDF5 file."""
    try:
        return h5py.File(path, mode)
    except OSError as exc:
        kind, detail = h5_open_failure(exc)
        if kind == "locked":
            raise InputError(
                f"{where} is open for writing in another process "
                "(to read it meanwhile, set HDF5_USE_FILE_LOCKING=FALSE)"
            ) from None
        if kind == "truncated":
            raise InputError(
                f"{where} is truncated ({detail}): the file was cut short (an interrupted "
                "copy or download, a full disk); make it again or copy it again"
            ) from None
        raise InputError(f"{where} is not a readable HDF5 file ({detail})") from None


# -- allocation ----------------------------------------------------------------------------------


def allocate(
    g: h5py.Group, name: str, shape: tuple[int, ...], dtype: Any, *, fill: Any = None,
    chunks: tuple[int, ...] | str | None = "rows",
) -> None:
    """A dataset allocated and filled in full now, so that writing it later never needs new space.

    Parameters
    ----------
    fill : scalar, optional
        The fill value (``np.nan``, ``False``); None: zeros of ``dtype`` (``b""`` for bytes).
    chunks : "rows", tuple or None
        ``"rows"``: chunks of whole rows of about :data:`CHUNK_BYTES`; a chunk shape; None:
        contiguous. A dataset with an empty dimension is always contiguous.
    """
    dt = np.dtype(dtype)
    if chunks == "rows":
        row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * dt.itemsize
        chunk_rows = max(1, min(shape[0], CHUNK_BYTES // max(row_bytes, 1)))
        chunks = (chunk_rows, *shape[1:]) if shape[0] else None
    chunked = isinstance(chunks, tuple) and all(shape)
    sizing = _SIZING.get()
    if sizing is not None:  # whole chunks are allocated, the last ones too
        if chunked:
            assert isinstance(chunks, tuple)
            cells = math.prod(-(-n // c) * c for n, c in zip(shape, chunks, strict=True))
        else:
            cells = math.prod(shape)
        sizing[0] += cells * dt.itemsize
        return
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    if chunked:
        assert isinstance(chunks, tuple)
        dcpl.set_chunk(tuple(chunks))
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    dcpl.set_fill_time(h5py.h5d.FILL_TIME_ALLOC)
    value = np.zeros((), dt)[()] if fill is None else fill
    string = h5py.h5t.check_string_dtype(dt)
    # h5py hands HDF5 a fixed-length string fill value as a variable-length one (its own
    # create_dataset does so too): HDF5 reads garbage from a fixed-length one
    dcpl.set_fill_value(np.array(value, dtype=h5py.string_dtype(string.encoding) if string else dt))
    dcpl.set_obj_track_times(False)  # as h5py's own datasets: the file's bytes do not depend on the clock
    h5py.h5d.create(g.id, name.encode(), h5py.h5t.py_create(dt), h5py.h5s.create_simple(shape), dcpl=dcpl)


def planned_bytes(create: Callable[[h5py.File], None]) -> int:
    """About how many bytes ``create(f)`` makes a new file take: its :func:`allocate` calls counted,
    not made, everything else built in memory."""
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


# -- the writer ----------------------------------------------------------------------------------


class ShardedH5Writer(OpenH5, Generic[H]):
    """An open file of one kind (see the module docstring); subclasses add the kind's schema.

    Attributes
    ----------
    f : h5py.File
    path : Path
    header : ShardHeader
        This run's header.
    """

    #: How messages name a file of this kind after ``where``: ``"cache"``, ``"region file"``.
    noun: ClassVar[str] = "file"
    #: What a file of this kind is, in refusals: ``"a vlprobe cache"``.
    kind: ClassVar[str] = "a vlprobe file"

    def __init__(self, f: h5py.File, path: Path, header: H, lock: contextlib.ExitStack | None = None) -> None:
        self.f = f
        self.path = path
        self.header = header
        self._lock = lock

    @classmethod
    def where(cls, p: Path) -> str:
        return f"{cls.noun} {str(p)!r}"

    # -- opening ----------------------------------------------------------------------------
    @classmethod
    def _open(
        cls: type[W], path: str | os.PathLike[str], header: H, create: Callable[[h5py.File], None],
        *, check: Callable[[h5py.File], None] | None = None,
    ) -> W:
        """Open ``path`` for this run: create it (``create(f)`` fills a new file), or resume it if
        its header matches (``check(f)`` may refuse it further; InputError).

        Raises
        ------
        InputError
            The file exists and is not of this kind, was made with other settings (the message
            names the first differing field), or another process is writing it.
        OSError
            The disk has no room for the file (it names ``path``; nothing is left behind).
        """
        p = Path(path)
        ensure_folder(p.parent)
        lock = contextlib.ExitStack()
        lock.enter_context(output_lock(p, wait=False))
        try:
            if os.path.lexists(p):
                f = cls._resume(p, header, check)
            else:
                f = cls._create_file(p, create)
        except BaseException:
            lock.close()
            raise
        return cls(f, p, header, lock)

    @classmethod
    def check_out(cls, path: str | os.PathLike[str]) -> H | None:
        """Before any work: refuse an ``--out`` that cannot be written, that another run is
        writing, or that is not a file of this kind (its settings are compared when the run opens
        it). Returns the existing file's header, None when there is none."""
        p = Path(path)
        check_writable(p)
        if not p.parent.is_dir():
            return None
        with output_lock(p, wait=False):  # another run writing it: refused now, in one line
            return cls._look(p)[1] if os.path.lexists(p) else None

    @classmethod
    def _look(cls, p: Path) -> tuple[int, H]:
        """The schema version and header of the existing file ``p``, read without opening it for
        writing; InputError unless it is a file of this kind."""
        if p.is_symlink() or not p.is_file():
            raise InputError(f"out: {str(p)!r} exists and is not a regular file; refusing to touch it")
        if not h5py.is_hdf5(p):
            raise InputError(f"out: {str(p)!r} exists and is not {cls.kind}; refusing to touch it (not an HDF5 file)")
        with open_h5(p, "r", cls.where(p)) as f:
            return cls._read_header(f, p)

    @classmethod
    def _read_header(cls, f: h5py.File, p: Path) -> tuple[int, H]:
        """The schema version and header of the open file ``f`` (at ``p``); InputError unless it
        is a file of this kind (a message that says not to touch it) that this vlprobe writes."""
        raise NotImplementedError

    @classmethod
    def _relabel(cls, f: h5py.File, version: int, old: H) -> None:
        """Bring the resumed file ``f`` of an older ``version`` (header ``old``) up to the current one."""

    @classmethod
    def _resume(cls, p: Path, header: H, check: Callable[[h5py.File], None] | None) -> h5py.File:
        """``p`` opened for writing, after a read-only look shows a file of this kind and settings
        (nothing that is not one is opened for writing, so nothing else is ever changed)."""
        version, old = cls._look(p)
        diff = header_diff(old, header)
        if diff:
            raise InputError(
                f"{cls.where(p)} was made with other settings ({diff}); use another --out or delete the file"
            )
        f = open_h5(p, "r+", cls.where(p))
        try:
            if check is not None:
                check(f)
            cls._relabel(f, version, old)
        except BaseException:
            f.close()
            raise
        return f

    @classmethod
    def _create_file(cls, p: Path, create: Callable[[h5py.File], None]) -> h5py.File:
        """Create the whole file under a temporary name, then rename it into place."""
        tmp = temp_name(p)
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()  # a killed run's
        # A disk too small is refused before HDF5 writes anything: HDF5 closing a file whose
        # creation failed part-way can crash the process.
        need = planned_bytes(create)
        if shutil.disk_usage(p.parent).free < need + need // 20 + _SPACE_MARGIN:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.fspath(p))
        try:
            f = h5py.File(tmp, "w")
        except BaseException as exc:
            tmp.unlink(missing_ok=True)
            if is_disk_full(exc):
                raise no_space_error(exc, p) from exc
            raise
        try:
            create(f)
            f.flush()
            f.close()
            os.replace(tmp, p)
        except BaseException as exc:
            discard_h5(f, tmp)
            if is_disk_full(exc):
                raise no_space_error(exc, p) from exc
            raise
        return open_h5(p, "r+", cls.where(p))

    # -- writing ----------------------------------------------------------------------------
    def commit(self, rows: Mapping[str, np.ndarray], done: Sequence[str], sel: Any) -> None:
        """Write one chunk, flush, then mark it done and flush again.

        Parameters
        ----------
        rows : dict of dataset path to ndarray
            Each array's rows ``sel`` (cast to the dataset's dtype).
        done : sequence of str
            The done masks (bool datasets) whose ``sel`` becomes True once the rows are flushed
            (then flushed again); empty: the rows are written and flushed only.
        sel : slice, ndarray of int or Ellipsis
            The rows (see :func:`row_selection`).
        """
        with self._writing():
            for name, arr in rows.items():
                ds = self.f[name]
                ds[sel] = np.asarray(arr).astype(ds.dtype, copy=False)
            self.f.flush()
            self._mark_done(done, sel)

    def _mark_done(self, done: Sequence[str], sel: Any) -> None:
        if not done:
            return
        for name in done:
            self.f[name][sel] = True
        self.f.flush()

    def set_attrs(self, values: Mapping[str, Any]) -> None:
        """Set root attributes and flush; one of the same dtype is changed in place (the file does
        not grow)."""
        with self._writing():
            for k, v in values.items():
                if k in self.f.attrs and np.asarray(self.f.attrs[k]).dtype == np.asarray(v).dtype:
                    self.f.attrs.modify(k, v)
                else:
                    self.f.attrs[k] = v
            self.f.flush()

    def copy_rows(
        self, src: h5py.Group, group: str, names: Sequence[str], offset: int, *, done: str = "done",
    ) -> int:
        """Copy every row of ``src``'s datasets ``names`` into this file's ``group`` (``""``: the
        root) from row ``offset``, in pieces of about :data:`MERGE_CHUNK_BYTES`, marking them done in
        ``group/done``; returns the row after the last.

        ``src`` is a group of a shard file whose rows are all done.
        """
        n = int(src[done].shape[0])
        at = f"{group}/" if group else ""
        row_bytes = sum(int(np.prod(src[k].shape[1:], dtype=np.int64)) * src[k].dtype.itemsize for k in names)
        step = max(1, MERGE_CHUNK_BYTES // max(1, row_bytes))
        for a in range(0, n, step):  # a shard's rows in bounded pieces, never all at once
            b = min(n, a + step)
            self.commit({at + k: src[k][a:b] for k in names}, [at + done], slice(offset + a, offset + b))
        return offset + n

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """A full disk as an OSError naming the file (the CLI's one line)."""
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


def row_selection(rows: np.ndarray) -> slice | np.ndarray:
    """Ascending row numbers as a slice when they are consecutive (one HDF5 hyperslab), else as they are."""
    rows = np.asarray(rows, dtype=np.int64)
    if rows.size and rows[-1] - rows[0] + 1 == rows.size:
        return slice(int(rows[0]), int(rows[-1]) + 1)
    return rows


# -- merge ---------------------------------------------------------------------------------------


@dataclass
class Shard(Generic[H]):
    """One shard file, open for reading.

    Attributes
    ----------
    path : Path
    header : ShardHeader
    f : h5py.File
    incomplete : str
        Where rows are not done (``"in stream 'image'"``); ``""`` for a complete file.
    owner : object, optional
        The reader that opened ``f`` (closed with the shard), else ``f`` itself is closed.
    """

    path: Path
    header: H
    f: h5py.File
    incomplete: str = ""
    owner: Any = None

    @property
    def k(self) -> int:
        return parse_shard(self.header.shard)[0]

    def close(self) -> None:
        (self.owner if self.owner is not None else self.f).close()


def merge_files(
    paths: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    *,
    open_shard: Callable[[Path], Shard[H]],
    read_merged: Callable[[Path], tuple[H, Sequence[str]]],
    write: Callable[[Path, H, list[Shard[H]]], None],
    check: Callable[[list[Shard[H]], H], None] | None = None,
) -> Path:
    """Join the N complete shard files of one run into ``out`` (written atomically).

    Parameters
    ----------
    open_shard : callable
        ``path -> Shard``; InputError unless ``path`` is a shard file of this kind.
    read_merged : callable
        ``path -> (header, merged_from)`` of an existing file at ``out`` (InputError or OSError if
        it is none of this kind): ``out`` is replaced only when it is an earlier merge of shards
        of this run.
    write : callable
        ``(tmp, header, shards)``: write the merged file (header: shard ``"0/1"``) at the path
        ``tmp``, which does not exist, from the shards in order (:meth:`ShardedH5Writer.copy_rows`).
    check : callable, optional
        ``(shards, header)``: further checks of the whole set, in order (InputError).

    Raises
    ------
    InputError
        No shards; ``out`` is one of them, or exists and is not an earlier merge of these shards;
        a shard is missing, repeated, incomplete, of another shard count, or made with other
        settings (the message names the field).
    """
    if not paths:
        raise InputError("shards: give the shard files to merge")
    target = Path(out)
    check_writable(target)
    if os.path.lexists(target) and any(os.path.lexists(p) and os.path.samefile(target, p) for p in paths):
        raise InputError(f"out: {str(target)!r} is one of the shard files; choose a new file name")
    shards: list[Shard[H]] = []
    try:
        for p in paths:
            shards.append(open_shard(Path(p)))
        first = shards[0]
        n = parse_shard(first.header.shard)[1]
        seen: dict[int, Path] = {}
        for s in shards:
            name = s.path.name
            diff = first_difference(first.header, s.header, skip=("shard",))
            if diff:
                key, a, b = diff
                raise InputError(
                    f"shards: {name} differs from {first.path.name} in {key} "
                    f"({first.path.name} has {a!r}, {name} has {b!r})"
                )
            k, n_k = parse_shard(s.header.shard)
            if n_k != n:
                raise InputError(f"shards: {name} is shard {s.header.shard}, {first.path.name} one of {n}")
            if k in seen:
                raise InputError(f"shards: {name} and {seen[k].name} are both shard {k}/{n}")
            seen[k] = s.path
            if s.incomplete:
                raise InputError(f"shards: {name} is incomplete {s.incomplete}; resume it first")
        missing = sorted(set(range(n)) - set(seen))
        if missing:
            raise InputError(f"shards: missing shard(s) {', '.join(f'{m}/{n}' for m in missing)}")
        shards.sort(key=lambda s: s.k)
        merged: H = dataclasses.replace(shards[0].header, shard="0/1")  # type: ignore[type-var]
        if check is not None:
            check(shards, merged)
        if os.path.lexists(target) and not _earlier_merge(target, merged, read_merged):
            raise InputError(
                f"out: {str(target)!r} already exists and is not an earlier merge of these shards; "
                "choose a new file name"
            )
        with atomic_path(target) as tmp:
            tmp.unlink()
            write(tmp, merged, shards)
    finally:
        for s in shards:
            s.close()
    return target


def _earlier_merge(path: Path, header: H, read_merged: Callable[[Path], tuple[H, Sequence[str]]]) -> bool:
    """Whether ``path`` is a file merged before from shards of this run (the same command with the
    same settings may replace its own output)."""
    try:
        old, merged_from = read_merged(path)
    except (InputError, OSError, ValueError):
        return False
    return bool(merged_from) and header_diff(old, header) is None
