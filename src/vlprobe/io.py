"""Writing outputs safely: atomically, with the user's umask, never over a file vlprobe did not write.

Atomic
    An output is written to ``.NAME.vlprobe-tmp`` beside it and renamed onto ``NAME`` when
    complete, so it appears whole or not at all; a failed write leaves the old file as it was.
    The temporary name is fixed, so a rerun after a killed run reuses (and removes) it.
Modes
    A new output gets the mode :func:`open` would give it (``0o666`` less the umask); a replaced
    one keeps its mode.
Ownership (:func:`check_replaceable`)
    Files vlprobe writes whole are listed in their folder's ``.vlprobe-outputs.json`` with the
    writer's ``kind`` (``"variants"``, ``"results"``, ...) and their sha256. An existing file is replaced
    only when that list names it under the same kind with its current content: a file vlprobe did
    not write, or one changed since, is never replaced. Files vlprobe updates in place (caches and
    region files, resumed chunk by chunk) are recognised by their own attributes instead
    (``recognise``).
Locking (:func:`output_lock`)
    A writer holds an ``flock`` on ``.NAME.vlprobe-lock`` while it writes ``NAME``; the lock file
    is removed when it is done. Short writes wait for another writer of the same file; long runs
    (an extraction) refuse to start beside one.
Opening HDF5 files (:func:`h5_open_failure`)
    Why h5py could not open a file, from HDF5's message: held by another process's file lock,
    truncated (shorter than its superblock records), or not readable as HDF5.
Disk full
    A full disk (``ENOSPC``, ``EDQUOT``, also as HDF5 reports it) is raised as an :class:`OSError`
    that names the output (:func:`no_space_error`); the temporary file is removed.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import IO, Any, TypeVar

from vlprobe.validation import InputError

__all__ = [
    "OUTPUTS_LIST",
    "atomic_dir",
    "atomic_path",
    "atomic_write",
    "check_output",
    "check_replaceable",
    "check_writable",
    "claim_folder",
    "discard_h5",
    "ensure_folder",
    "h5_open_failure",
    "is_disk_full",
    "new_file_mode",
    "no_space_error",
    "output_lock",
    "schema_attrs",
    "schema_version_of",
    "stop_h5_writes",
    "temp_name",
    "text_lines",
    "write_json",
]

#: The per-folder list of the files vlprobe wrote there (name -> kind and accepted sha256s).
OUTPUTS_LIST = ".vlprobe-outputs.json"
_LIST_FORMAT = "vlprobe-outputs"
_TMP_SUFFIX = ".vlprobe-tmp"
_LOCK_SUFFIX = ".vlprobe-lock"

_DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})
# HDF5 reports a failed write inside its own message: "... errno = 28, error message = 'No space ...'"
_HDF5_ERRNO = re.compile(r"errno = (\d+)")
_HDF5_FILE = re.compile(r"filename = '([^']*)'")
_RUST_ERRNO = re.compile(r"os error (\d+)")
# HDF5's open errors: "unable to lock file, errno = 11, ..." and "truncated file: eof = 1000,
# sblock->base_addr = 0, stored_eof = 2048" (whose "sblock" must not be read as a lock)
_HDF5_LOCKED = re.compile(r"\bunable to lock file\b", re.IGNORECASE)
_HDF5_TRUNCATED = re.compile(r"\btruncated file\b.*?\beof = (\d+).*?\bstored_eof = (\d+)", re.IGNORECASE)
# errno values of file systems without flock (some network mounts): the write goes ahead unlocked.
_NO_LOCKING = frozenset({errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL})


# -- modes -------------------------------------------------------------------------------------


def _umask() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _THREAD_LOCK:  # os.umask can only be read by setting it
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def new_file_mode(directory: bool = False) -> int:
    """The mode :func:`open` (``directory``: :func:`os.mkdir`) gives a new file under the current umask."""
    return (0o777 if directory else 0o666) & ~_umask()


# -- folders, temporary names --------------------------------------------------------------------


def ensure_folder(folder: str | os.PathLike[str], param: str = "out") -> Path:
    """Create ``folder`` (and its parents) unless it exists.

    Raises
    ------
    InputError
        A part of the path is a regular file.
    """
    p = Path(folder)
    try:
        p.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        blocker = next((a for a in [p, *p.parents] if a.exists() and not a.is_dir()), p)
        raise InputError(f"{param}: cannot create folder {str(p)!r}: {str(blocker)!r} is a file, not a folder") from None
    return p


def temp_name(target: str | os.PathLike[str]) -> Path:
    """The fixed temporary name a write of ``target`` uses (``.NAME.vlprobe-tmp`` beside it)."""
    t = Path(target)
    return t.with_name(f".{t.name}{_TMP_SUFFIX}")


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


# -- disk full ---------------------------------------------------------------------------------


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` is a full disk or an exceeded quota, also as h5py raises it (an OSError,
    RuntimeError or ValueError whose HDF5 message says ``errno = 28``) and as safetensors does
    (``os error 28``)."""
    if isinstance(exc, OSError) and exc.errno in _DISK_FULL:
        return True
    if type(exc).__name__ == "SafetensorError":  # safetensors' writer reports Rust's io::Error
        return any(int(m) in _DISK_FULL for m in _RUST_ERRNO.findall(str(exc)))
    if type(exc) not in (OSError, RuntimeError, ValueError):
        return False
    return any(int(m) in _DISK_FULL for m in _HDF5_ERRNO.findall(str(exc)))


def no_space_error(exc: BaseException, path: str | os.PathLike[str] | None = None) -> OSError:
    """``exc`` (a full disk) as ``OSError(ENOSPC, ..., path)``: the one line the CLI shows names the file."""
    code = exc.errno if isinstance(exc, OSError) and exc.errno in _DISK_FULL else errno.ENOSPC
    if path is None:
        found = getattr(exc, "filename", None) or next(iter(_HDF5_FILE.findall(str(exc))), None)
        if found is None:
            return OSError(code, os.strerror(code))
        path = _output_of(Path(os.fsdecode(found)))
    return OSError(code, os.strerror(code), os.fspath(path))


def _output_of(path: Path) -> Path:
    """The output a temporary file of :func:`atomic_path` stands for (``.NAME.vlprobe-tmp`` -> ``NAME``)."""
    name = path.name
    if name.startswith(".") and name.endswith(_TMP_SUFFIX) and len(name) > len(_TMP_SUFFIX) + 1:
        return path.with_name(name[1 : -len(_TMP_SUFFIX)])
    return path


# -- locking -----------------------------------------------------------------------------------

_THREAD_LOCK = threading.RLock()
_HELD: dict[str, list[Any]] = {}  # lock file -> [fd or None, depth]


def _lock_name(target: Path) -> Path:
    return target.with_name(f".{target.name}{_LOCK_SUFFIX}")


@contextlib.contextmanager
def output_lock(target: str | os.PathLike[str], *, wait: bool = True, param: str = "out") -> Iterator[None]:
    """Hold the write lock of ``target`` (re-entrant within a process).

    Parameters
    ----------
    wait : bool
        Wait for another process's writer to finish (short writes); False refuses instead.

    Raises
    ------
    InputError
        ``wait`` is False and another process holds the lock.
    """
    t = Path(target)
    lock = _lock_name(t)
    key = os.path.abspath(lock)
    with _THREAD_LOCK:
        held = _HELD.get(key)
        if held is not None:
            held[1] += 1
    if held is not None:
        try:
            yield
        finally:
            with _THREAD_LOCK:
                held[1] -= 1
        return
    fd = _acquire(lock, t, wait, param)
    with _THREAD_LOCK:
        _HELD[key] = held = [fd, 1]
    try:
        yield
    finally:
        with _THREAD_LOCK:
            held[1] -= 1
            if not held[1]:
                del _HELD[key]
        if not held[1] and fd is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(lock)  # while still holding it: a waiter sees the file gone and retries
            os.close(fd)


def _acquire(lock: Path, target: Path, wait: bool, param: str) -> int | None:
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except OSError as exc:
            # the lock file beside the output cannot be made: neither can the output (read-only, ...)
            raise OSError(exc.errno, exc.strerror, os.fspath(target)) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            who = f" (pid {holder})" if holder else ""
            raise InputError(
                f"{param}: {str(target)!r} is being written by another vlprobe process{who}; "
                f"wait for it to finish or choose another --{param.replace('_', '-')}"
            ) from None
        except OSError as exc:
            if exc.errno in _NO_LOCKING:
                os.close(fd)
                return None
            os.close(fd)
            raise
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(lock))
        except FileNotFoundError:
            same = False
        if same:
            with contextlib.suppress(OSError):  # the pid only informs a refused writer; a full disk may refuse it
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()}\n".encode())
            return fd
        os.close(fd)  # the previous holder removed it as we opened it: take the new one


def _read_pid(fd: int) -> int | None:
    try:
        return int(os.pread(fd, 32, 0).split()[0])
    except (OSError, ValueError, IndexError):
        return None


# -- ownership ---------------------------------------------------------------------------------


def _list_path(target: Path) -> Path:
    return target.parent / OUTPUTS_LIST


def _read_list(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
        if obj.get("format") != _LIST_FORMAT or not isinstance(obj.get("files"), dict):
            raise ValueError
    except (ValueError, AttributeError, UnicodeDecodeError):
        raise InputError(
            f"{str(path)!r} is not vlprobe's list of the files it wrote in that folder; move it away"
        ) from None
    return dict(obj["files"])


def _write_list(path: Path, files: dict[str, Any]) -> None:
    if not files:
        _remove(path)
        return
    with atomic_write(path) as fh:
        json.dump({"format": _LIST_FORMAT, "version": 1, "files": files}, fh, indent=1, sort_keys=True)
        fh.write("\n")


def _sha256(path: Path) -> str:
    from vlprobe.provenance import sha256_file

    return sha256_file(path)


def check_replaceable(
    target: str | os.PathLike[str], kind: str, *, param: str = "out",
    recognise: Callable[[Path], bool] | None = None,
) -> bool:
    """Refuse unless ``target`` is absent or a file vlprobe wrote there as ``kind`` (module docstring).

    Parameters
    ----------
    kind : str
        The writer (``"probe augment"``); a file another writer made is not replaced either.
    recognise : callable, optional
        ``path -> bool``: whether an existing file is this writer's by its own content (the root
        attributes of an HDF5 file vlprobe updates in place).

    Returns
    -------
    bool
        Whether ``target`` exists (and may be replaced).

    Raises
    ------
    InputError
        ``target`` is a folder, a link, or a file vlprobe did not write as ``kind`` or that has
        changed since.
    """
    return _check(Path(target), kind, param, recognise)[0]


def _check(t: Path, kind: str, param: str, recognise: Callable[[Path], bool] | None) -> tuple[bool, str | None]:
    """(whether ``t`` exists, its sha256 when the outputs list vouched for it)."""
    flag = f"--{param.replace('_', '-')}"
    if not os.path.lexists(t):
        return False, None
    if t.is_symlink():
        raise InputError(f"{param}: {str(t)!r} is a symbolic link; refusing to replace it (give the file itself)")
    if t.is_dir():
        raise InputError(f"{param}: {str(t)!r} is a folder; give a file name")
    if recognise is not None and recognise(t):
        return True, None
    entry = _read_list(_list_path(t)).get(t.name)
    refuse = f"refusing to replace it (move it away or choose another {flag})"
    if not isinstance(entry, dict) or entry.get("folder"):
        raise InputError(f"{param}: {str(t)!r} exists and was not written by vlprobe; {refuse}")
    if entry.get("kind") != kind:
        raise InputError(f"{param}: {str(t)!r} was written by `{entry.get('kind')}`, not by `{kind}`; {refuse}")
    sha = _sha256(t)
    if sha not in entry.get("sha256", ()):
        raise InputError(f"{param}: {str(t)!r} has changed since vlprobe wrote it; {refuse}")
    return True, sha


def check_output(
    target: str | os.PathLike[str], kind: str | None = None, *, param: str = "out",
    recognise: Callable[[Path], bool] | None = None,
) -> None:
    """Before any work: refuse an output that could not be written, or (with ``kind``) that must
    not be replaced (:func:`check_replaceable`), in one line naming ``param``.

    Nothing is created.
    """
    t = Path(target)
    if kind is not None:
        check_replaceable(t, kind, param=param, recognise=recognise)
    check_writable(t, param)


def _list_entry(target: Path, entry: dict[str, Any] | None) -> None:
    path = _list_path(target)
    with output_lock(path):
        files = _read_list(path)
        if entry is None:
            files.pop(target.name, None)
        else:
            files[target.name] = entry
        _write_list(path, files)


# -- atomic writers --------------------------------------------------------------------------------


@contextlib.contextmanager
def atomic_path(
    path: str | os.PathLike[str], *, kind: str | None = None, param: str = "out",
    recognise: Callable[[Path], bool] | None = None,
) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; move it onto ``path`` when the block succeeds.

    On an exception the temporary file is removed and ``path`` is left as it was. With ``kind``,
    an existing ``path`` is first checked (:func:`check_replaceable`) and the result is listed as
    written by ``kind``. The temporary file exists (empty, with the mode ``path`` will have) when
    the block starts.

    Raises
    ------
    InputError
        From :func:`check_replaceable`, before anything is written.
    OSError
        A full disk names ``path`` (:func:`no_space_error`).
    """
    target = Path(path)
    ensure_folder(target.parent, param)
    with output_lock(target, param=param):
        if kind:
            existed, old = _check(target, kind, param, recognise)
        else:
            existed, old = target.exists(), None
        tmp = temp_name(target)
        _remove(tmp)  # a killed run's
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
            try:
                if existed:
                    os.fchmod(fd, os.stat(target).st_mode & 0o7777)
            finally:
                os.close(fd)
            yield tmp
            if kind:
                # Listed with both contents before the rename, with the new one only after it: a
                # run killed in between still owns whichever file is there.
                sha = _sha256(tmp)
                _list_entry(target, {"kind": kind, "sha256": [sha, *([old] if old and old != sha else [])]})
                os.replace(tmp, target)
                try:  # tidying only: the entry above already vouches for the new content
                    _list_entry(target, {"kind": kind, "sha256": [sha]})
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
        finally:
            _remove(tmp)


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
        entry = _read_list(_list_path(target)).get(target.name)
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
        _remove(tmp)
        try:
            os.mkdir(tmp, 0o777)
            yield tmp
            aside = target.with_name(f".{target.name}.vlprobe-old")
            _remove(aside)
            _list_entry(target, {"kind": kind, "folder": True})
            if os.path.lexists(target):
                os.replace(target, aside)
            os.replace(tmp, target)
            _remove(aside)
        except (OSError, RuntimeError, ValueError) as exc:
            if is_disk_full(exc):
                raise no_space_error(exc, target) from exc
            raise
        finally:
            _remove(tmp)


def claim_folder(
    path: str | os.PathLike[str], *, kind: str, param: str = "out",
    recognise: Callable[[Path], bool] | None = None,
) -> Path:
    """Make ``path`` an output folder of ``kind`` that a long-running writer fills (and may clear
    parts of) in place; return it.

    ``path`` may be absent, an empty folder, or a folder this ``kind`` of writer made (listed in
    the parent's outputs list, or ``recognise(path)``); anything else is refused before anything
    is created. The folder is listed as ``kind``'s before it is returned.

    Raises
    ------
    InputError
        ``path`` is a file, a folder vlprobe did not make, or cannot be created.
    """
    target = Path(path)
    flag = f"--{param.replace('_', '-')}"
    if os.path.lexists(target):
        if target.is_symlink() or not target.is_dir():
            raise InputError(f"{param}: {str(target)!r} exists and is not a folder; give a folder name")
        entry = _read_list(_list_path(target)).get(target.name)
        ours = (isinstance(entry, dict) and entry.get("kind") == kind and entry.get("folder")) or (
            recognise is not None and recognise(target))
        if not ours and any(target.iterdir()):
            raise InputError(
                f"{param}: {str(target)!r} is a folder vlprobe did not write and is not empty; "
                f"refusing to write into it (move it away or choose another {flag})"
            )
        if ours:
            check_writable(target / ".probe", param)
            return target
    else:
        check_writable(target / ".probe", param)
    ensure_folder(target.parent, param)
    with output_lock(target, param=param):
        _list_entry(target, {"kind": kind, "folder": True})
        ensure_folder(target, param)
    return target


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
    _remove(Path(path))


def check_writable(path: str | os.PathLike[str], param: str = "out") -> None:
    """InputError naming ``param`` unless ``path`` can be written; nothing is created.

    An existing file must be writable, and its folder (or the nearest existing folder above a
    missing one) must take a new file: a scratch file is created and removed there, so that a
    read-only folder or a path under a regular file fails before any work.
    """
    target = Path(path)
    if target.is_dir():
        raise InputError(f"{param}: {str(target)!r} is a folder; give a file name")
    if target.exists():
        try:
            with open(target, "r+b"):
                pass
        except OSError as exc:
            raise InputError(f"{param}: cannot write {str(target)!r} ({exc.strerror or exc})") from None
    base = target.parent
    while not os.path.lexists(base) and base != base.parent:
        base = base.parent
    if not base.is_dir():
        raise InputError(f"{param}: cannot create folder {str(target.parent)!r}: {str(base)!r} is a file, not a folder")
    try:  # the folder too: outputs are renamed into it, and their lock files live there
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".probe", dir=base)
    except OSError as exc:
        raise InputError(f"{param}: cannot create {str(target)!r} ({exc.strerror or exc})") from None
    os.close(fd)
    os.unlink(tmp)


def write_json(path: str | os.PathLike[str], obj: Any, *, kind: str | None = None) -> None:
    """Write ``obj`` as indented, key-sorted JSON, atomically."""
    with atomic_write(path, kind=kind) as fh:
        json.dump(obj, fh, indent=2, sort_keys=True, ensure_ascii=False)
        fh.write("\n")


def text_lines(path: str | os.PathLike[str], param: str) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of a UTF-8 text file; a file that is not UTF-8 text is an
    :class:`~vlprobe.validation.InputError` naming ``param``, the file and the line."""
    p = Path(path)
    with open(p, encoding="utf-8") as fh:
        lineno = 0
        while True:
            try:
                line = fh.readline()
            except UnicodeDecodeError:
                raise InputError(f"{param}: {p.name} line {lineno + 1} is not UTF-8 text") from None
            if not line:
                return
            lineno += 1
            yield lineno, line


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

