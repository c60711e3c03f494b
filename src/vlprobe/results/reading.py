"""Reading results back: a run's tidy CSV with its manifest entry, and the runs of a results folder.

What ``probe plot``, ``probe report``, ``probe collect`` and ``probe compare`` read. A results
folder ``OUT`` holds one folder per experiment (``OUT/<experiment>/``) with a ``manifest.json``
that maps each run's name to its manifest, and per run ``<name>.csv`` (tidy) and side files of
the same stem: ``<name>.items.csv`` (per-item results), ``<name>.summary.csv`` (per layer),
``<name>.scores.jsonl`` (per-item scores), ``<name>.scores.npy`` (a score matrix).

:func:`read_result` refuses a file that is not a run's tidy CSV with one line naming what it is
(a per-item file, a summary, a CSV vlprobe did not write).
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vlprobe.runs.summary import SUMMARY_COLUMNS, read_tidy_csv
from vlprobe.runs.writing import REQUIRED_TIDY_COLUMNS, result_stem
from vlprobe.validation import InputError, check_file

__all__ = [
    "RunResult",
    "classify_csv",
    "find_runs",
    "not_settings",
    "read_result",
    "run_settings",
]

@dataclass(frozen=True)
class RunResult:
    """One run of one experiment, read back.

    Attributes
    ----------
    csv : Path
        Its tidy CSV.
    experiment : str
    name : str
        The run's name (the ``model`` column; the key of its manifest entry).
    rows : list of dict
        The tidy rows, as strings.
    manifest : dict
        Its manifest entry (empty when the folder has no manifest naming it).
    """

    csv: Path
    experiment: str
    name: str
    rows: list[dict[str, str]] = field(repr=False)
    manifest: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def version(self) -> int | None:
        """The experiment's version the run was made with (None without a manifest)."""
        v = self.manifest.get("experiment_version")
        return int(v) if isinstance(v, int) else None

    @property
    def settings(self) -> dict[str, Any]:
        """The settings it was run with (:func:`run_settings`)."""
        return run_settings(self.manifest)

    @property
    def notes(self) -> list[str]:
        """What its manifest notes (``notes``: e.g. separability's "no case is separable at any
        layer"), for the figure and the report to say."""
        got = self.manifest.get("notes") or []
        return [str(n) for n in got] if isinstance(got, list) else [str(got)]

    def side_file(self, suffix: str) -> Path:
        """``<stem><suffix>`` beside the tidy CSV (``.items.csv``, ``.scores.jsonl``, ...)."""
        return self.csv.with_name(self.csv.stem + suffix)


def run_settings(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The settings a run's manifest records; for a manifest written before runs recorded them,
    its config without the fields the experiment declares as inputs, outputs or runtime options
    (:func:`not_settings`)."""
    if isinstance(manifest.get("settings"), dict):
        return dict(manifest["settings"])
    config = manifest.get("config")
    if not isinstance(config, dict):
        return {}
    skip = not_settings(str(manifest.get("experiment", "")))
    return {k: v for k, v in sorted(config.items()) if k not in skip}


def not_settings(experiment: str) -> frozenset[str]:
    """The config fields a registered experiment declares as inputs, outputs or runtime options
    (for an unknown experiment: those of any registered one). A field it does not declare (one
    an older release recorded) counts as a setting."""
    from vlprobe.registry import EXPERIMENTS
    from vlprobe.runs.declare import Experiment

    known = EXPERIMENTS.names()
    found: set[str] = set()
    for name in [experiment] if experiment in known else known:
        exp = EXPERIMENTS.get(name)
        if isinstance(exp, Experiment):
            found.update(o.name for o in exp.options() if o.spec.role != "setting")
            found.update(exp.fixed)
    return frozenset(found)


def classify_csv(path: str | os.PathLike[str]) -> str:
    """What a CSV is: ``tidy``, ``items`` (per-item results), ``summary`` (per layer) or ``other``."""
    p = Path(path)
    try:
        with open(p, encoding="utf-8", newline="") as fh:
            header = next(csv.reader(fh), [])
    except (OSError, UnicodeDecodeError, csv.Error):
        return "other"
    if p.name.endswith(".items.csv") or ("item" in header and set(REQUIRED_TIDY_COLUMNS) <= set(header)):
        return "items"
    if set(SUMMARY_COLUMNS[:5]) <= set(header) and "target_mean" in header:
        return "summary"
    return "tidy" if set(REQUIRED_TIDY_COLUMNS) <= set(header) else "other"


def _manifest_runs(folder: Path) -> dict[str, Any]:
    path = folder / "manifest.json"
    if not path.is_file():
        return {}
    try:
        runs = json.loads(path.read_text(encoding="utf-8")).get("runs", {})
    except (ValueError, AttributeError, UnicodeDecodeError):
        raise InputError(f"manifest: {path} is not a vlprobe manifest") from None
    return runs if isinstance(runs, dict) else {}


def read_result(path: str | os.PathLike[str], *, param: str = "csv") -> RunResult:
    """Read a run's tidy CSV and its manifest entry.

    Raises
    ------
    InputError
        The file is a per-item or summary CSV (naming the tidy CSV to use), not a tidy CSV, holds
        no rows or rows of several experiments or models.
    FileNotFoundError
        No such file.
    """
    p = check_file(path, param)
    kind = classify_csv(p)
    if kind in ("items", "summary"):
        stem = p.name.removesuffix(".items.csv").removesuffix(".summary.csv")
        what = "per-item results" if kind == "items" else "a per-layer summary"
        raise InputError(f"{param}: {p.name} holds {what}, not a run's tidy results; give {stem}.csv")
    rows = read_tidy_csv(p)
    experiments = sorted({r["experiment"] for r in rows})
    models = sorted({r["model"] for r in rows})
    if len(experiments) != 1 or len(models) != 1:
        raise InputError(
            f"{param}: {p.name} holds rows of {len(experiments)} experiment(s) and {len(models)} model(s); "
            "expected one run (collected tables cannot be drawn as one run)"
        )
    runs = _manifest_runs(p.parent)
    name = models[0]
    entry = runs.get(name)
    if entry is None:  # a run whose name was made file-safe
        entry = next((v for k, v in runs.items() if result_stem(k) == p.stem), None)
    return RunResult(p, experiments[0], name, rows, dict(entry) if isinstance(entry, dict) else {})


def find_runs(folders: Iterable[str | os.PathLike[str]], *, param: str = "results_dir") -> list[RunResult]:
    """Every run of every experiment under results folders, in name order.

    Each folder is a results folder (``OUT``, holding ``OUT/<experiment>/manifest.json``) or one
    experiment's folder (holding ``manifest.json``).

    Raises
    ------
    InputError
        A folder holds no vlprobe results; a manifest names a run whose CSV is missing.
    """
    out: list[RunResult] = []
    for folder in folders:
        root = Path(folder)
        if not root.is_dir():
            raise FileNotFoundError(f"{param}: no such folder {str(root)!r}")
        experiment_dirs = [root] if (root / "manifest.json").is_file() else sorted(
            d for d in root.iterdir() if d.is_dir() and (d / "manifest.json").is_file()
        )
        if not experiment_dirs:
            raise InputError(f"{param}: {root} holds no vlprobe results (no <experiment>/manifest.json)")
        for d in experiment_dirs:
            for name in sorted(_manifest_runs(d)):
                csv_path = d / f"{result_stem(name)}.csv"
                if not csv_path.is_file():
                    raise InputError(f"{param}: {d / 'manifest.json'} records run {name!r} but {csv_path.name} is missing")
                out.append(read_result(csv_path, param=param))
    return out
