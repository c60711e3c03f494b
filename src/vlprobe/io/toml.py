"""TOML on every supported Python: reading through the standard library's ``tomllib`` (3.11+),
``tomli`` before; writing the plain tables vlprobe writes (plans) with :func:`dumps`."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vlprobe.validation import InputError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised only on Python 3.10
    import tomli as tomllib

TOMLDecodeError = tomllib.TOMLDecodeError
loads = tomllib.loads

__all__ = ["TOMLDecodeError", "dumps", "loads", "read_toml"]

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def read_toml(path: str | os.PathLike[str], param: str, what: str) -> dict[str, Any]:
    """The table a TOML file holds; one line ``<param>: '<path>' is not <what> (<why>)`` when it is not
    TOML or not UTF-8 text."""
    p = Path(path)
    try:
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{param}: {str(p)!r} is not {what} ({exc})") from None


def _key(key: str) -> str:
    return key if _BARE_KEY.match(key) else json.dumps(key, ensure_ascii=False)


def _value(value: Any, where: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):  # a JSON string's escapes are TOML's basic-string escapes
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v, where) for v in value) + "]"
    raise TypeError(f"{where}: {type(value).__name__} is not a TOML value vlprobe writes")


def _is_table_list(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and bool(value) and all(isinstance(v, Mapping) for v in value)


def _emit(table: Mapping[str, Any], path: list[str], lines: list[str]) -> None:
    for k, v in table.items():  # keys of this table first, then its sub-tables
        if not isinstance(v, Mapping) and not _is_table_list(v):
            lines.append(f"{_key(k)} = {_value(v, '.'.join([*path, k]))}")
    for k, v in table.items():
        name = [*path, k]
        if isinstance(v, Mapping):
            if not v or any(not isinstance(x, Mapping) and not _is_table_list(x) for x in v.values()):
                lines.extend(["", "[" + ".".join(map(_key, name)) + "]"])  # (else its sub-tables make it)
            _emit(v, name, lines)
        elif _is_table_list(v):
            for item in v:
                lines.extend(["", "[[" + ".".join(map(_key, name)) + "]]"])
                _emit(item, name, lines)


def dumps(table: Mapping[str, Any]) -> str:
    """``table`` as TOML text: strings, numbers, booleans, lists of them, tables and lists of
    tables (``[[name]]``); what :func:`loads` reads back equal (floats as ``repr`` writes them).

    Raises
    ------
    TypeError
        A value of another type (None, a date, ...), naming its key.
    """
    lines: list[str] = []
    _emit(table, [], lines)
    return "\n".join(lines).lstrip("\n") + "\n"
