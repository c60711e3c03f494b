"""Output locks: a writer holds an ``flock`` on ``.NAME.vlprobe-lock`` while it writes ``NAME``.

The lock file is removed when the writer is done. Short writes wait for another writer of the
same file; long runs (an extraction) refuse to start beside one. On a file system without
``flock`` (some network mounts) the write goes ahead unlocked. The lock is re-entrant within a
thread; another thread of the same process waits for it (or is refused) as another process does
(``flock`` locks belong to an open file, and each thread opens its own).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from vlprobe.validation import InputError

__all__ = ["output_lock"]

_LOCK_SUFFIX = ".vlprobe-lock"
# errno values of file systems without flock (some network mounts): the write goes ahead unlocked.
_NO_LOCKING = frozenset({errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL})

_THREAD_LOCK = threading.RLock()
_HELD: dict[tuple[str, int], list[Any]] = {}  # (lock file, thread) -> [fd or None, depth]


def _lock_name(target: Path) -> Path:
    return target.with_name(f".{target.name}{_LOCK_SUFFIX}")


@contextlib.contextmanager
def output_lock(target: str | os.PathLike[str], *, wait: bool = True, param: str = "out") -> Iterator[None]:
    """Hold the write lock of ``target`` (re-entrant within a thread).

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
    key = (os.path.abspath(lock), threading.get_ident())
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
            if not holder:
                who = ""
            else:
                who = f" (pid {holder})" if holder != os.getpid() else " (another thread of this one)"
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
