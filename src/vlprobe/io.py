"""Atomic file writes: outputs appear whole or not at all."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from vlprobe.validation import InputError

__all__ = ["atomic_path", "atomic_write", "text_lines", "write_json"]


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; move it onto ``path`` when the block succeeds.

    On an exception the temporary file is removed and ``path`` is left as it was.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, target)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike[str], mode: str = "w") -> Iterator[IO[Any]]:
    """Open a temporary file for writing and move it onto ``path`` when the block succeeds."""
    with atomic_path(path) as tmp:
        kwargs = {"encoding": "utf-8", "newline": ""} if "b" not in mode else {}
        with open(tmp, mode, **kwargs) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())


def write_json(path: str | os.PathLike[str], obj: Any) -> None:
    """Write ``obj`` as indented, key-sorted JSON, atomically."""
    with atomic_write(path) as fh:
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
