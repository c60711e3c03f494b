"""Fingerprints, versions and git revision: what every cache and manifest records."""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
import subprocess
from collections.abc import Iterable
from pathlib import Path

__all__ = ["fingerprint_files", "git_revision", "package_versions", "sha256_file"]

_PACKAGES = (
    "vlprobe", "torch", "transformers", "tokenizers", "huggingface_hub", "safetensors",
    "h5py", "numpy", "scikit-learn", "pillow", "typer",
)


def sha256_file(path: str | os.PathLike[str], chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes.

    Remembered per file while its inode, size, mtime and ctime stay the same: a run that checks
    an input before its work and records it after reads a large cache once.
    """
    with open(path, "rb") as fh:
        st = os.fstat(fh.fileno())
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        known = _SHA256_SEEN.get(key)
        if known is not None:
            return known
        h = hashlib.sha256()
        while block := fh.read(chunk):
            h.update(block)
    digest = h.hexdigest()
    if len(_SHA256_SEEN) > 4096:
        _SHA256_SEEN.clear()
    _SHA256_SEEN[key] = digest
    return digest


_SHA256_SEEN: dict[tuple[int, ...], str] = {}


def fingerprint_files(paths: Iterable[Path], root: Path) -> str:
    """sha256 over (relative name, content hash) of each file, in the given order."""
    h = hashlib.sha256()
    for p in paths:
        h.update(str(p.relative_to(root)).encode())
        h.update(b"\0")
        h.update(sha256_file(p).encode())
        h.update(b"\n")
    return h.hexdigest()


def package_versions() -> dict[str, str]:
    """Versions of Python and the packages vlprobe's results depend on."""
    out = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def git_revision(path: str | os.PathLike[str] | None = None) -> str:
    """Commit of the vlprobe source tree (``+dirty`` when it has local changes), or "unknown".

    Without ``path``, the checkout vlprobe runs from; an installed copy inside some other git
    repository (a venv in a project folder) is not mistaken for it.
    """
    package = Path(__file__).resolve().parent
    where = Path(path) if path is not None else package

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=where, capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()

    try:
        if path is None and Path(git("rev-parse", "--show-toplevel")).resolve() / "src" / "vlprobe" != package:
            return "unknown"
        rev = git("rev-parse", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return rev + ("+dirty" if dirty else "")
