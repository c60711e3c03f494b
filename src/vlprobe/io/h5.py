"""HDF5 files vlprobe writes: closing them however a block ends, discarding one after a failed
write, the root attributes that name a file's format (``schema``, ``schema_version``), and why
h5py could not open a file (held by another process's lock, truncated, or no HDF5)."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from vlprobe.io.paths import remove_path
from vlprobe.validation import InputError

__all__ = [
    "ClosesOnExit", "OpenH5", "discard_h5", "h5_open_failure", "schema_attrs", "schema_version_of", "stop_h5_writes",
]

# HDF5's open errors: "unable to lock file, errno = 11, ..." and "truncated file: eof = 1000,
# sblock->base_addr = 0, stored_eof = 2048" (whose "sblock" must not be read as a lock)
_HDF5_LOCKED = re.compile(r"\bunable to lock file\b", re.IGNORECASE)
_HDF5_TRUNCATED = re.compile(r"\btruncated file\b.*?\beof = (\d+).*?\bstored_eof = (\d+)", re.IGNORECASE)

_S = TypeVar("_S", bound="ClosesOnExit")


class ClosesOnExit:
    """The ``with`` protocol of an object that holds a file open: ``with obj:`` gives ``obj`` and
    calls its :meth:`close` however the block ends (a writer that discards its work on an error
    overrides :meth:`__exit__`)."""

    def close(self) -> Any:
        raise NotImplementedError

    def __enter__(self: _S) -> _S:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


class OpenH5(ClosesOnExit):
    """Holds an open h5py file as ``self.f``; :meth:`close` closes it (closing twice is harmless)."""

    f: Any

    def close(self) -> None:
        if self.f.id.valid:
            self.f.close()


def stop_h5_writes(f: Any) -> None:
    """Send every later write HDF5 makes to the open h5py file ``f`` to ``/dev/null``.

    For a file whose write has just failed (a full disk): HDF5 flushes its caches when a dataset
    or the file closes, and each flush into the full disk fails again (errors from garbage
    collection, or a crash in HDF5). What reached the disk before stays as it was: for a file
    written in flushed chunks that is the state a killed run leaves, which a rerun resumes.
    """
    try:
        fd = f.id.get_vfd_handle()
    except Exception:  # closed already, or a driver without a file descriptor
        return
    if not isinstance(fd, int) or fd < 0:
        return
    null = os.open(os.devnull, os.O_RDWR)
    try:
        os.dup2(null, fd)
    finally:
        os.close(null)


def discard_h5(f: Any, path: str | os.PathLike[str]) -> None:
    """Close the h5py file ``f``, open on the temporary file ``path``, and remove it, after an error
    (its pending writes go nowhere: :func:`stop_h5_writes`)."""
    stop_h5_writes(f)
    with contextlib.suppress(Exception):
        f.close()
    remove_path(Path(path))


def schema_attrs(schema: str, version: int) -> dict[str, Any]:
    """The two root attributes that name a vlprobe file's format: ``schema`` and ``schema_version``."""
    return {"schema": schema, "schema_version": version}


def schema_version_of(attrs: Mapping[str, Any], schema: str, newest: int, where: str, what: str) -> int:
    """The ``schema_version`` of a vlprobe file whose ``schema`` attribute must be ``schema``.

    Parameters
    ----------
    attrs : mapping
        The file's root attributes.
    schema : str
        The expected format name (``"vlprobe-cache"``, ``"vlprobe-regions"``).
    newest : int
        The newest version this vlprobe reads (all from 1 up are read).
    where, what : str
        The file as named in errors, and what it should be (``"a vlprobe cache"``).

    Raises
    ------
    InputError
        Another or no format name, or a version outside 1..newest (a newer vlprobe wrote it).
    """
    found = attrs.get("schema")
    found = found.decode() if isinstance(found, bytes) else found
    if found != schema:
        other = f"; it is a {found!r} file" if isinstance(found, str) and found else ""
        raise InputError(f"{where} is not {what} (no schema={schema!r} attribute{other})")
    try:
        version = int(attrs["schema_version"])
    except (KeyError, TypeError, ValueError):
        raise InputError(f"{where} has no readable schema_version") from None
    if not 1 <= version <= newest:
        raise InputError(
            f"{where} has schema_version {version}; this vlprobe reads {schema} versions 1 to {newest} "
            "(a newer vlprobe may have written it: upgrade vlprobe)"
        )
    return version



def h5_open_failure(exc: BaseException) -> tuple[str, str]:
    """Why h5py could not open a file: ``(kind, detail)``.

    ``kind`` is ``"locked"`` (another process holds HDF5's lock on it: a writer still running),
    ``"truncated"`` (the file is shorter than its superblock records: a copy, download or write
    cut short; ``detail`` gives both sizes) or ``"unreadable"`` (anything else; ``detail`` is the
    first line of HDF5's message).
    """
    msg = str(exc)
    if _HDF5_LOCKED.search(msg):
        return "locked", ""
    m = _HDF5_TRUNCATED.search(msg)
    if m:
        return "truncated", f"{int(m.group(1))} of its {int(m.group(2))} bytes are there"
    return "unreadable", msg.splitlines()[0] if msg else type(exc).__name__
