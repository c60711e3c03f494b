"""Reading a benchmark's source files: its JSON folder, JSON objects and lines, its images.

Every error is one line that starts with the parameter the file came from (``data_dir: ...``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from vlprobe.io.text import text_lines
from vlprobe.provenance import sha256_file
from vlprobe.validation import InputError

__all__ = ["find_json_dir", "hash_image_files", "iter_json_lines", "read_json_object", "read_subset_file"]


def find_json_dir(data_dir: Path, names: tuple[str, ...], param: str = "data_dir") -> Path:
    """``data_dir`` or its ``data/`` folder, whichever holds one of ``<name>.json``."""
    if not data_dir.is_dir():
        raise FileNotFoundError(f"{param}: no such directory {str(data_dir)!r}")
    for cand in (data_dir, data_dir / "data"):
        if any((cand / f"{n}.json").is_file() for n in names):
            return cand
    raise InputError(
        f"{param}: {str(data_dir)!r} holds none of the expected files ({', '.join(f'{n}.json' for n in names[:3])}, ...)"
    )


def read_json_object(path: Path, param: str = "data_dir", holds: str = "key -> record") -> dict[str, Any]:
    """The one JSON object a file holds (``holds`` says what it maps, for the error)."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(f"{param}: {path.name} is not valid JSON ({exc.msg}, line {exc.lineno})") from None
    except UnicodeDecodeError:
        raise InputError(f"{param}: {path.name} is not a UTF-8 text file") from None
    if not isinstance(raw, dict):
        raise InputError(f"{param}: {path.name} must hold one JSON object of {holds}")
    return raw


def read_subset_file(root: Path, name: str, h: Any) -> dict[str, Any]:
    """``<root>/<name>.json`` (one object of key -> record), its ``<name>:<sha256>`` fed to ``h``."""
    path = root / f"{name}.json"
    if not path.is_file():
        raise FileNotFoundError(f"data_dir: {name}.json is missing from {root}")
    h.update(f"{name}:{sha256_file(path)}\n".encode())
    return read_json_object(path)


def iter_json_lines(path: Path, param: str) -> Iterator[tuple[int, str, Any]]:
    """``(line number, where, value)`` per non-blank line of a JSONL file; ``where`` = ``"<name> line <n>"``."""
    for lineno, line in text_lines(path, param):
        if not line.strip():
            continue
        where = f"{path.name} line {lineno}"
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{param}: {where} is not valid JSON ({exc.msg})") from None
        yield lineno, where, value


def hash_image_files(h: Any, paths: Iterable[Path], param: str, expected: str = "") -> None:
    """Check every image exists, then feed ``<name>:<sha256>`` of each (sorted by path) to ``h``.

    Raises
    ------
    FileNotFoundError
        Naming the first missing image, its folder and how many are missing (``expected``, e.g.
        ``"; expected COCO val2017 files"``, is appended to the count).
    """
    files = sorted(set(paths))
    missing = [p for p in files if not p.is_file()]
    if missing:
        raise FileNotFoundError(
            f"{param}: image {missing[0].name!r} is not in {str(missing[0].parent)!r} "
            f"({len(missing)} of {len(files)} images missing{expected})"
        )
    for p in files:
        h.update(f"{p.name}:{sha256_file(p)}\n".encode())
