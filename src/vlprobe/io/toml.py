"""TOML reading on every supported Python: the standard library's ``tomllib`` (3.11+), ``tomli`` before."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from vlprobe.validation import InputError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised only on Python 3.10
    import tomli as tomllib

TOMLDecodeError = tomllib.TOMLDecodeError
loads = tomllib.loads

__all__ = ["TOMLDecodeError", "loads", "read_toml"]


def read_toml(path: str | os.PathLike[str], param: str, what: str) -> dict[str, Any]:
    """The table a TOML file holds; one line ``<param>: '<path>' is not <what> (<why>)`` when it is not
    TOML or not UTF-8 text."""
    p = Path(path)
    try:
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{param}: {str(p)!r} is not {what} ({exc})") from None
