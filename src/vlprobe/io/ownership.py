"""Which files and folders vlprobe wrote: the outputs list ``.vlprobe-outputs.json`` of each folder.

Files vlprobe writes whole are listed in their folder's ``.vlprobe-outputs.json`` with the
writer's ``kind`` (``"variants"``, ``"results"``, ...) and their sha256. An existing file is
replaced only when that list names it under the same kind with its current content
(:func:`check_replaceable`): a file vlprobe did not write, or one changed since, is never
replaced. Files vlprobe updates in place (caches and region files, resumed chunk by chunk) are
recognised by their own attributes instead (``recognise``). Output folders a long run fills are
listed too (:func:`claim_folder`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vlprobe.io.errors import is_disk_full, no_space_error
from vlprobe.io.locks import output_lock
from vlprobe.io.paths import check_writable, ensure_folder, remove_path, temp_beside
from vlprobe.provenance import sha256_file
from vlprobe.validation import InputError

__all__ = [
    "OUTPUTS_LIST",
    "check_output",
    "check_owned",
    "check_replaceable",
    "claim_folder",
    "list_output",
    "listed_entry",
]

#: The per-folder list of the files vlprobe wrote there (name -> kind and accepted sha256s).
OUTPUTS_LIST = ".vlprobe-outputs.json"
_LIST_FORMAT = "vlprobe-outputs"


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
    """Replace the outputs list ``path`` atomically (its writer holds the list's lock)."""
    if not files:
        remove_path(path)
        return
    try:
        with temp_beside(path) as tmp:
            with open(tmp, "w", encoding="utf-8", newline="") as fh:
                json.dump({"format": _LIST_FORMAT, "version": 1, "files": files}, fh, indent=1, sort_keys=True)
                fh.write("\n")
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
    except (OSError, RuntimeError, ValueError) as exc:
        if is_disk_full(exc):
            raise no_space_error(exc, path) from exc
        raise


def listed_entry(target: Path) -> Any:
    """``target``'s entry in its folder's outputs list (None when it is not listed)."""
    return _read_list(_list_path(target)).get(target.name)


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
    return check_owned(Path(target), kind, param, recognise)[0]


def check_owned(t: Path, kind: str, param: str, recognise: Callable[[Path], bool] | None) -> tuple[bool, str | None]:
    """:func:`check_replaceable`, returning (whether ``t`` exists, its sha256 when the outputs list
    vouched for it)."""
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
    sha = sha256_file(t)
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


def list_output(target: Path, entry: dict[str, Any] | None) -> None:
    """Set (None: remove) ``target``'s entry in its folder's outputs list."""
    path = _list_path(target)
    with output_lock(path):
        files = _read_list(path)
        if entry is None:
            files.pop(target.name, None)
        else:
            files[target.name] = entry
        _write_list(path, files)


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
        entry = listed_entry(target)
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
        list_output(target, {"kind": kind, "folder": True})
        ensure_folder(target, param)
    return target
