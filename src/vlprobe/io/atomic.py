"""Atomic writes: an output appears whole or not at all, with the user's umask.

An output is written to ``.NAME.vlprobe-tmp`` beside it and renamed onto ``NAME`` when complete
(:func:`atomic_path`, :func:`atomic_write`, a folder: :func:`atomic_dir`); a failed write leaves
the old file as it was, and a full disk is raised naming the output. A new output gets the mode
:func:`open` would give it (``0o666`` less the umask, :func:`new_file_mode`); a replaced one keeps
its mode. With a ``kind``, the writer holds the output's lock, refuses a file vlprobe did not write
and lists what it wrote (:mod:`vlprobe.io.ownership`).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from vlprobe.io.errors import is_disk_full, no_space_error
from vlprobe.io.locks import output_lock
from vlprobe.io.ownership import check_owned, list_output, listed_entry
from vlprobe.io.paths import ensure_folder, remove_path, temp_beside, temp_name
from vlprobe.provenance import sha256_file
from vlprobe.validation import InputError

__all__ = ["atomic_dir", "atomic_path", "atomic_write", "new_file_mode", "write_json"]

_UMASK_LOCK = threading.Lock()


def _umask() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:  # os.umask can only be read by setting it
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def new_file_mode(directory: bool = False) -> int:
    """The mode :func:`open` (``directory``: :func:`os.mkdir`) gives a new file under the current umask."""
    return (0o777 if directory else 0o666) & ~_umask()


@contextlib.contextmanager
def atomic_path(
    path: str | os.PathLike[str], *, kind: str | None = None, param: str = "out",
    recognise: Callable[[Path], bool] | None = None,
) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; move it onto ``path`` when the block succeeds.

    On an exception the temporary file is removed and ``path`` is left as it was. With ``kind``,
    an existing ``path`` is first checked (:func:`~vlprobe.io.ownership.check_replaceable`) and
    the result is listed as written by ``kind``. The temporary file exists (empty, with the mode ``path`` will have) when
    the block starts.

    Raises
    ------
    InputError
        From :func:`~vlprobe.io.ownership.check_replaceable`, before anything is written.
    OSError
        A full disk names ``path`` (:func:`~vlprobe.io.errors.no_space_error`).
    """
    target = Path(path)
    ensure_folder(target.parent, param)
    with output_lock(target, param=param):
        old = check_owned(target, kind, param, recognise)[1] if kind else None
        tmp = temp_name(target)
        try:
            with temp_beside(target) as tmp:
                yield tmp
                if kind:
                    # Listed with both contents before the rename, with the new one only after it: a
                    # run killed in between still owns whichever file is there.
                    sha = sha256_file(tmp)
                    list_output(target, {"kind": kind, "sha256": [sha, *([old] if old and old != sha else [])]})
                    os.replace(tmp, target)
                    try:  # tidying only: the entry above already vouches for the new content
                        list_output(target, {"kind": kind, "sha256": [sha]})
                    except OSError as exc:
                        if not is_disk_full(exc):
                            raise
                else:
                    os.replace(tmp, target)
        except (OSError, RuntimeError, ValueError) as exc:
            if is_disk_full(exc):
                named = getattr(exc, "filename", None)
                named = named is not None and os.fsdecode(named) not in (str(tmp), tmp.name)
                raise no_space_error(exc, None if named else target) from exc
            raise


@contextlib.contextmanager
def atomic_write(
    path: str | os.PathLike[str], mode: str = "w", *, kind: str | None = None, param: str = "out",
    recognise: Callable[[Path], bool] | None = None,
) -> Iterator[IO[Any]]:
    """Open a temporary file for writing and move it onto ``path`` when the block succeeds
    (see :func:`atomic_path`)."""
    with atomic_path(path, kind=kind, param=param, recognise=recognise) as tmp:
        text = "b" not in mode
        with open(tmp, mode, encoding="utf-8" if text else None, newline="" if text else None) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())


@contextlib.contextmanager
def atomic_dir(
    path: str | os.PathLike[str], *, kind: str, param: str = "out",
) -> Iterator[Path]:
    """Yield a temporary folder beside ``path`` to fill; it replaces ``path`` when the block succeeds.

    ``path`` may be absent, an empty folder, or a folder this ``kind`` of writer made (listed in
    the parent's outputs list); anything else is refused before the block runs.
    """
    target = Path(path)
    flag = f"--{param.replace('_', '-')}"
    ensure_folder(target.parent, param)
    with output_lock(target, param=param):
        entry = listed_entry(target)
        if os.path.lexists(target):
            if target.is_symlink() or not target.is_dir():
                raise InputError(f"{param}: {str(target)!r} exists and is not a folder; give a folder name")
            ours = isinstance(entry, dict) and entry.get("kind") == kind and entry.get("folder")
            if not ours and any(target.iterdir()):
                raise InputError(
                    f"{param}: {str(target)!r} is a folder vlprobe did not write and is not empty; "
                    f"refusing to replace it (move it away or choose another {flag})"
                )
        tmp = temp_name(target)
        remove_path(tmp)
        try:
            os.mkdir(tmp, 0o777)
            yield tmp
            aside = target.with_name(f".{target.name}.vlprobe-old")
            remove_path(aside)
            list_output(target, {"kind": kind, "folder": True})
            if os.path.lexists(target):
                os.replace(target, aside)
            os.replace(tmp, target)
            remove_path(aside)
        except (OSError, RuntimeError, ValueError) as exc:
            if is_disk_full(exc):
                raise no_space_error(exc, target) from exc
            raise
        finally:
            remove_path(tmp)


def write_json(path: str | os.PathLike[str], obj: Any, *, kind: str | None = None) -> None:
    """Write ``obj`` as indented, key-sorted JSON, atomically."""
    with atomic_write(path, kind=kind) as fh:
        json.dump(obj, fh, indent=2, sort_keys=True, ensure_ascii=False)
        fh.write("\n")
