"""Atomic file writes: outputs appear whole or not at all."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from vlprobe.validation import InputError

__all__ = [
    "atomic_path", "atomic_write", "check_writable", "schema_attrs", "schema_version_of", "text_lines", "write_json",
]


def _umask() -> int:
    current = os.umask(0o022)  # reading the umask means setting it; put it straight back
    os.umask(current)
    return current


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; move it onto ``path`` when the block succeeds.

    The file gets the permissions a plain ``open`` would give it (``0666`` less the umask).
    On an exception the temporary file is removed and ``path`` is left as it was.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    os.chmod(tmp_path, 0o666 & ~_umask())  # mkstemp makes 0600; an output gets the user's umask
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
        text = "b" not in mode
        with open(tmp, mode, encoding="utf-8" if text else None, newline="" if text else None) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())


def check_writable(path: str | os.PathLike[str], param: str = "out") -> None:
    """InputError naming ``param`` unless ``path`` can be written (its folder is made if missing).

    An existing file must be writable; otherwise a scratch file is created and removed beside
    ``path``, so that a read-only folder or a path under a regular file fails before any work.
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
        return
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".probe", dir=target.parent)
    except OSError as exc:
        raise InputError(f"{param}: cannot create {str(target)!r} ({exc.strerror or exc})") from None
    os.close(fd)
    os.unlink(tmp)


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


def schema_attrs(schema: str, version: int) -> dict[str, Any]:
    """The two root attributes that name a vlprobe file's format: ``schema`` and ``schema_version``."""
    return {"schema": schema, "schema_version": version}


def schema_version_of(attrs: Mapping[str, Any], schema: str, newest: int, where: str, what: str) -> int:
    """The ``schema_version`` of a vlprobe file whose ``schema`` attribute must be ``schema``.

    Parameters
    ----------
    attrs : mapping
        The file's root attributes.
    schema : str
        The expected format name (``"vlprobe-cache"``, ``"vlprobe-regions"``).
    newest : int
        The newest version this vlprobe reads (all from 1 up are read).
    where, what : str
        The file as named in errors, and what it should be (``"a vlprobe cache"``).

    Raises
    ------
    InputError
        Another or no format name, or a version outside 1..newest (a newer vlprobe wrote it).
    """
    found = attrs.get("schema")
    found = found.decode() if isinstance(found, bytes) else found
    if found != schema:
        other = f"; it is a {found!r} file" if isinstance(found, str) and found else ""
        raise InputError(f"{where} is not {what} (no schema={schema!r} attribute{other})")
    try:
        version = int(attrs["schema_version"])
    except (KeyError, TypeError, ValueError):
        raise InputError(f"{where} has no readable schema_version") from None
    if not 1 <= version <= newest:
        raise InputError(
            f"{where} has schema_version {version}; this vlprobe reads {schema} versions 1 to {newest} "
            "(a newer vlprobe may have written it: upgrade vlprobe)"
        )
    return version

