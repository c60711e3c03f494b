"""Reading a text file vlprobe is given, line by line: one that is not UTF-8 is refused naming the line."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from vlprobe.validation import InputError

__all__ = ["text_lines"]


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
