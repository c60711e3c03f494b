"""The record of a run's steps (``<run>/state/``), and what a step of another key replaces.

``state/<step>.json``
    A finished step: its key (:mod:`vlprobe.launch.identity`), command and time. A rerun skips a
    step whose record has its key (and whose ``done`` check passes).
``state/<step>.try.json``
    The step's latest start: its key, its Slurm job when it was submitted, and what it leaves
    (:class:`Owned`). A step started again under another key (other weights, data or options)
    first removes what its earlier try of the other key left: the files it wrote (a cache, a
    shard) and the runs it recorded in a results folder (their CSV, side files and manifest
    entry), so that the new try writes them afresh instead of resuming or being refused. Only
    what the record names is removed, and only when it is a file vlprobe wrote (an HDF5 file
    with vlprobe's schema, or a file the folder's outputs list names with its current content)
    that no process is writing: a file vlprobe did not write is never touched, and the step's
    own command refuses it in one line.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlprobe.io.atomic import write_json
from vlprobe.validation import InputError

__all__ = ["Owned", "forget_run", "read_exit", "read_record", "read_try", "replace_earlier", "safe_name", "write_exit",
           "write_record", "write_try"]

_RECORD_KIND = "step-state"


@dataclass(frozen=True)
class Owned:
    """What a step leaves that a try of another key replaces.

    Attributes
    ----------
    files : tuple of str
        Files it writes (caches, shard files, region files, score shards).
    runs : tuple of (str, str)
        ``(experiment folder, results label)`` of the runs it records (``probe run ... --name
        LABEL`` into ``OUT/<experiment>/``): every run of that label there.
    """

    files: tuple[str, ...] = ()
    runs: tuple[tuple[str, str], ...] = ()

    def as_json(self) -> dict[str, Any]:
        return {"files": list(self.files), "runs": [list(r) for r in self.runs]}

    @classmethod
    def from_json(cls, raw: Any) -> Owned:
        if not isinstance(raw, dict):
            return cls()
        files = tuple(str(f) for f in raw.get("files", ()) if isinstance(f, str))
        runs = tuple((str(r[0]), str(r[1])) for r in raw.get("runs", ()) if isinstance(r, list) and len(r) == 2)
        return cls(files, runs)


def safe_name(name: str) -> str:
    """A step's name as a file name (``"shard 3/8"`` -> ``"shard.3.8"``)."""
    return "".join(c if c.isalnum() or c in "-_." else "." for c in name)


def _read(path: Path) -> dict[str, Any] | None:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return raw if isinstance(raw, dict) else None


def read_record(root: Path, name: str) -> dict[str, Any] | None:
    """The finished-step record of ``name`` (None when there is none)."""
    return _read(Path(root) / "state" / f"{safe_name(name)}.json")


def read_try(root: Path, name: str) -> dict[str, Any] | None:
    """The record of ``name``'s latest start (None when there is none)."""
    return _read(Path(root) / "state" / f"{safe_name(name)}.try.json")


def write_record(root: Path, name: str, key: str, args: Sequence[str], **extra: Any) -> None:
    """Record ``name`` finished under ``key``."""
    write_json(Path(root) / "state" / f"{safe_name(name)}.json", {
        "name": name, "key": key, "args": list(args), "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **extra},
        kind=_RECORD_KIND)


def read_exit(root: Path, name: str) -> dict[str, Any] | None:
    """What a step's Slurm job wrote when its command failed (``job_id``, ``rc``, ``missing``)."""
    return _read(Path(root) / "state" / f"{safe_name(name)}.exit.json")


def write_exit(root: Path, name: str, **what: Any) -> None:
    """Record in a step's job that its command failed (``job_id``, ``rc``, ``missing``)."""
    write_json(Path(root) / "state" / f"{safe_name(name)}.exit.json", {"name": name, **what}, kind=_RECORD_KIND)


def write_try(root: Path, name: str, key: str, owned: Owned, **extra: Any) -> None:
    """Record that ``name`` starts (or was submitted) under ``key``, leaving ``owned``."""
    write_json(Path(root) / "state" / f"{safe_name(name)}.try.json", {
        "name": name, "key": key, "owns": owned.as_json(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **extra}, kind=_RECORD_KIND)


def replace_earlier(root: Path, name: str, key: str, owned: Owned, echo: Callable[[str], Any] = print) -> list[str]:
    """Before ``name`` starts under ``key``: remove what its earlier finished run or try of another
    key left (module docstring), as those records name it and as ``owned`` names it now; returns
    what was removed.

    Raises
    ------
    InputError
        A file to remove is being written by another process.
    """
    earlier = [r for r in (read_record(root, name), read_try(root, name)) if r is not None and r.get("key") != key]
    if not earlier:
        return []
    files = dict.fromkeys([*owned.files, *(f for r in earlier for f in Owned.from_json(r.get("owns")).files)])
    runs = dict.fromkeys([*owned.runs, *(x for r in earlier for x in Owned.from_json(r.get("owns")).runs)])
    removed = [f for f in files if _remove_file(Path(f))]
    for folder, label in runs:
        removed += forget_run(Path(folder), label)
    record = Path(root) / "state" / f"{safe_name(name)}.json"
    with contextlib.suppress(FileNotFoundError):
        record.unlink()
    if removed:
        echo(f"{name}: its inputs or options changed; removed what its earlier run made: {', '.join(removed)}")
    return removed


def _vlprobe_h5(path: Path) -> bool:
    """Whether ``path`` is an HDF5 file with vlprobe's schema attribute (a cache, a region file)."""
    import h5py

    if not h5py.is_hdf5(path):
        return False
    try:
        with h5py.File(path, "r") as f:
            if "vlprobe_schema" in f.attrs:  # caches of schema version 1
                return True
            schema = f.attrs.get("schema", "")
    except OSError:
        return False
    if isinstance(schema, bytes):
        schema = schema.decode(errors="replace")
    return isinstance(schema, str) and schema.startswith("vlprobe")


def _listed(path: Path) -> bool:
    """Whether the folder's outputs list names ``path`` with its current content."""
    from vlprobe.io.ownership import listed_entry
    from vlprobe.provenance import sha256_file

    entry = listed_entry(path)
    return isinstance(entry, dict) and "kind" in entry and sha256_file(path) in entry.get("sha256", ())


def _remove_file(path: Path) -> bool:
    """Remove ``path`` if it is a file vlprobe wrote that no process is writing; whether it was."""
    from vlprobe.io.locks import output_lock
    from vlprobe.io.ownership import list_output, listed_entry

    if path.is_symlink() or not path.is_file():
        return False
    # the cheap schema check first: a listed file is hashed (read in full) only when it is no vlprobe HDF5
    h5 = _vlprobe_h5(path)
    listed = listed_entry(path) is not None if h5 else _listed(path)
    if not (h5 or listed):
        return False
    try:
        with output_lock(path, wait=False):
            path.unlink()
    except InputError:
        raise InputError(f"{path} is being written by another process; wait for it (or stop it) and run again") from None
    if listed:
        list_output(path, None)
    return True


def forget_run(folder: Path, label: str) -> list[str]:
    """Remove every run of results label ``label`` from the experiment folder ``folder`` (``OUT/<experiment>/``):
    its files (``<run>.csv`` and the side files of its stem) and its manifest entry; returns the
    files removed (the manifest is rewritten, not listed)."""
    from vlprobe.io.locks import output_lock
    from vlprobe.runs.writing import RESULTS_KIND, result_stem

    manifest = folder / "manifest.json"
    if not manifest.is_file():
        return []
    removed: list[str] = []
    with output_lock(manifest):
        raw = _read(manifest)
        runs = raw.get("runs") if raw is not None else None
        if raw is None or not isinstance(runs, dict):
            return []
        mine = [name for name, entry in runs.items() if _label_of(name, entry) == label]
        if not mine:
            return []
        for name in mine:
            stem = result_stem(name)
            for f in sorted(folder.iterdir()):
                if f.name.startswith(stem + ".") and _remove_file(f):
                    removed.append(str(f))
            del runs[name]
        write_json(manifest, {**raw, "runs": runs}, kind=RESULTS_KIND)
    return removed


def _label_of(name: str, entry: Any) -> str:
    """The results label of a recorded run: its config's ``name``, else the run name up to ``@``."""
    config = entry.get("config") if isinstance(entry, dict) else None
    if isinstance(config, dict) and isinstance(config.get("name"), str) and config["name"]:
        return str(config["name"])
    return name.split("@", 1)[0]
