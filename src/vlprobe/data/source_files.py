"""Reading a benchmark's source files: its JSON folder, JSON objects and lines, its images.

Every error is one line that starts with the parameter the file came from (``data_dir: ...``).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from vlprobe.io.text import text_lines
from vlprobe.provenance import sha256_file
from vlprobe.validation import InputError

__all__ = [
    "check_text_fields",
    "find_json_dir",
    "hash_image_files",
    "iter_json_lines",
    "parse_source_roots",
    "read_csv_rows",
    "read_json_list",
    "read_json_object",
    "read_subset_file",
    "record_error",
]


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


def read_json_list(path: Path, param: str = "data_dir", holds: str = "records") -> list[Any]:
    """The one JSON array a file holds (``holds`` says what it lists, for the error)."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(f"{param}: {path.name} is not valid JSON ({exc.msg}, line {exc.lineno})") from None
    except UnicodeDecodeError:
        raise InputError(f"{param}: {path.name} is not a UTF-8 text file") from None
    if not isinstance(raw, list):
        raise InputError(f"{param}: {path.name} must hold one JSON array of {holds}")
    return raw


def read_csv_rows(
    path: Path, expected: str, param: str = "data_dir", *, whole_lines: bool = False,
) -> tuple[list[str], list[list[str]]]:
    """A CSV file's header and data rows (UTF-8, a byte-order mark allowed); ``expected`` says what an
    empty file should have held, for the error.

    ``whole_lines``: the file must end with a line break, as every file a CSV writer finishes
    does; one that stops inside its last row (a download cut short) is refused, where it would
    otherwise be read with that row's last field cut (``"...,78.0"`` read as ``7``).
    """
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise InputError(f"{param}: {path.name} is not a UTF-8 text file") from None
    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        raise InputError(f"{param}: {path.name} is empty (expected {expected})")
    if whole_lines and not text.endswith(("\n", "\r")):
        raise InputError(f"{param}: {path.name} ends inside row {len(rows)} (no line break after its last field, "
                         "as a file cut short has): the file looks truncated; fetch it again")
    return rows[0], rows[1:]


def record_error(param: str, where: str, field: str, expected: str) -> InputError:
    """The one-line error of a record lacking a field: ``data_dir: <file> record 12: field 'x' must be ...``."""
    return InputError(f"{param}: {where}: field {field!r} must be {expected}")


def check_text_fields(rec: Mapping[str, Any], names: Iterable[str], where: str, param: str = "data_dir") -> None:
    """Each of ``names`` present in the record and a non-empty string, else one line naming the first that is not."""
    for name in names:
        if name not in rec:
            raise InputError(f"{param}: {where}: field {name!r} is missing")
        if not isinstance(rec[name], str) or not rec[name].strip():
            raise record_error(param, where, name, "a non-empty string")


def parse_source_roots(
    specs: Iterable[str] | Mapping[str, Any] | None, sources: tuple[str, ...], param: str = "image_root",
) -> dict[str, Path]:
    """``["vg=DIR", "coco=DIR"]`` (or ``["DIR"]`` for every source, key ``"*"``) -> {source: folder}.

    Raises
    ------
    InputError
        An unknown source (the known ones are named).
    FileNotFoundError
        A folder that does not exist.
    """
    if specs is None:
        return {}
    if isinstance(specs, Mapping):
        pairs = [(str(k), Path(v)) for k, v in specs.items()]
    else:
        pairs = []
        for spec in specs:
            name, sep, text = str(spec).partition("=")
            if not sep:
                name, text = "*", str(spec)
            pairs.append((name.strip(), Path(text)))
    out: dict[str, Path] = {}
    for source, folder in pairs:
        if source != "*" and source not in sources:
            raise InputError(
                f"{param}: unknown source {source!r} (expected SOURCE=DIR with SOURCE one of "
                f"{', '.join(sources)}, or a bare DIR for all)"
            )
        if not folder.is_dir():
            raise FileNotFoundError(f"{param}: no such directory {str(folder)!r} (for source {source!r})")
        out[source] = folder
    return out


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
