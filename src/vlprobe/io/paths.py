"""Paths around an output: its folder, the fixed temporary name beside it, whether it can be written.

A write of ``NAME`` goes to ``.NAME.vlprobe-tmp`` beside it first (:func:`temp_name`); the name is
fixed, so a rerun after a killed run reuses (and removes) it.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from vlprobe.validation import InputError

__all__ = [
    "check_folder_writable",
    "check_writable",
    "ensure_folder",
    "folders_removed_on_failure",
    "output_of",
    "remove_empty_folders",
    "remove_path",
    "temp_beside",
    "temp_name",
]

_TMP_SUFFIX = ".vlprobe-tmp"


# The folders ensure_folder made inside a folders_removed_on_failure block (outermost first).
_MADE: contextvars.ContextVar[list[Path] | None] = contextvars.ContextVar("vlprobe_made_folders", default=None)


def ensure_folder(folder: str | os.PathLike[str], param: str = "out") -> Path:
    """Create ``folder`` (and its parents) unless it exists.

    Inside :func:`folders_removed_on_failure` the folders it creates are recorded.

    Raises
    ------
    InputError
        A part of the path is a regular file.
    """
    p = Path(folder)
    missing = []
    a = p
    while not os.path.lexists(a) and a != a.parent:
        missing.append(a)
        a = a.parent
    try:
        p.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        blocker = next((a for a in [p, *p.parents] if a.exists() and not a.is_dir()), p)
        raise InputError(f"{param}: cannot create folder {str(p)!r}: {str(blocker)!r} is a file, not a folder") from None
    made = _MADE.get()
    if made is not None:
        made.extend(reversed(missing))
    return p


@contextlib.contextmanager
def folders_removed_on_failure() -> Iterator[list[Path]]:
    """Record the folders :func:`ensure_folder` creates in the block; when the block raises
    (bad input found late, a full disk, Ctrl-C), remove those of them that are still empty,
    deepest first, so that a failed command leaves no empty ``--out`` folders behind. A folder
    that holds anything (another run's files, a resumable part) is kept. Blocks nest: an inner
    block's folders are also the outer block's.
    """
    made: list[Path] = []
    token = _MADE.set(made)
    try:
        yield made
    except BaseException:
        remove_empty_folders(made)
        raise
    finally:
        _MADE.reset(token)
        outer = _MADE.get()
        if outer is not None:
            outer.extend(made)


def remove_empty_folders(folders: list[Path]) -> None:
    """Remove each of ``folders`` that is an empty folder, the last given first (children
    before their parents); anything else is left."""
    for f in reversed(folders):
        if f.is_dir() and not f.is_symlink():
            with contextlib.suppress(OSError):
                f.rmdir()  # only an empty folder goes


def temp_name(target: str | os.PathLike[str]) -> Path:
    """The fixed temporary name a write of ``target`` uses (``.NAME.vlprobe-tmp`` beside it)."""
    t = Path(target)
    return t.with_name(f".{t.name}{_TMP_SUFFIX}")


def output_of(path: Path) -> Path:
    """The output a temporary file stands for (``.NAME.vlprobe-tmp`` -> ``NAME``); any other path as it is."""
    name = path.name
    if name.startswith(".") and name.endswith(_TMP_SUFFIX) and len(name) > len(_TMP_SUFFIX) + 1:
        return path.with_name(name[1 : -len(_TMP_SUFFIX)])
    return path


def remove_path(path: Path) -> None:
    """Remove a file, link or folder tree; nothing there is fine."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


@contextlib.contextmanager
def temp_beside(target: Path) -> Iterator[Path]:
    """The temporary file of a write of ``target``, removed when the block ends.

    A killed run's is removed first; the new one exists (empty) when the block starts, with the
    mode ``target`` has if it exists (else the mode :func:`open` gives under the umask). The block
    renames it onto ``target`` when its content is complete.
    """
    tmp = temp_name(target)
    remove_path(tmp)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        try:
            if target.exists():
                os.fchmod(fd, os.stat(target).st_mode & 0o7777)
        finally:
            os.close(fd)
        yield tmp
    finally:
        remove_path(tmp)


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
    _check_creatable(target.parent, target, param)


def check_folder_writable(folder: str | os.PathLike[str], param: str = "out") -> None:
    """InputError naming ``param`` unless files can be created in ``folder`` (created or not).

    The folder, or the nearest existing folder above a missing one, must be a folder that takes a
    new file (a scratch file is created and removed there); nothing else is created.
    """
    f = Path(folder)
    _check_creatable(f, f, param)


def _check_creatable(folder: Path, shown: Path, param: str) -> None:
    base = folder
    while not os.path.lexists(base) and base != base.parent:
        base = base.parent
    if not base.is_dir():
        raise InputError(f"{param}: cannot create folder {str(folder)!r}: {str(base)!r} is a file, not a folder")
    try:  # the folder too: outputs are renamed into it, and their lock files live there
        fd, tmp = tempfile.mkstemp(prefix=f".{shown.name}.", suffix=".probe", dir=base)
    except OSError as exc:
        raise InputError(f"{param}: cannot create {str(shown)!r} ({exc.strerror or exc})") from None
    os.close(fd)
    os.unlink(tmp)
