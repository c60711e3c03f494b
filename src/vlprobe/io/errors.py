"""What an error from the OS, HDF5 or safetensors means: a full disk, raised naming the output.

A full disk (``ENOSPC``, ``EDQUOT``) comes as an :class:`OSError` from Python, inside HDF5's own
message from h5py (``... errno = 28, error message = 'No space ...'``), and as Rust's
``os error 28`` from safetensors; :func:`is_disk_full` recognises all three and
:func:`no_space_error` turns any of them into the one :class:`OSError` the command line shows,
naming the output (not its temporary file).
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

from vlprobe.io.paths import output_of

__all__ = ["is_disk_full", "no_space_error"]

_DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})
# HDF5 reports a failed write inside its own message: "... errno = 28, error message = 'No space ...'"
_HDF5_ERRNO = re.compile(r"errno = (\d+)")
_HDF5_FILE = re.compile(r"filename = '([^']*)'")
_RUST_ERRNO = re.compile(r"os error (\d+)")


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
        path = output_of(Path(os.fsdecode(found)))
    return OSError(code, os.strerror(code), os.fspath(path))
