"""Gather the runs of results folders into one table (``probe collect``).

Every run (``<experiment>/<name>.csv`` with its manifest entry) of every folder becomes rows of
one CSV: the tidy columns, the columns a run's CSV adds (e.g. ``test``), then ``experiment_version``,
``results_dir`` (the folder the run came from) and one column per setting (the config fields that
change the numbers, :func:`~vlprobe.results.reading.run_settings`; a setting already written
as a column of the run keeps that column; lists are joined with ``,``). A run without a setting
leaves its cell empty; a run reached through two of the folders is collected once. Runs of one
experiment made with different versions of it measure different things and are refused, naming
the experiment and the two versions.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vlprobe.results.reading import RunResult, find_runs
from vlprobe.runs.writing import REQUIRED_TIDY_COLUMNS, TIDY_COLUMNS, format_cell
from vlprobe.validation import InputError

__all__ = ["collect_rows", "write_collected"]


def _cell(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(map(str, value))
    if isinstance(value, dict):
        return ";".join(f"{k}={v}" for k, v in value.items())
    return format_cell(value)


def _check_versions(runs: Sequence[RunResult]) -> None:
    seen: dict[str, tuple[int | None, RunResult]] = {}
    for run in runs:
        first = seen.setdefault(run.experiment, (run.version, run))
        if first[0] != run.version:
            raise InputError(
                f"results_dir: {run.experiment} runs of two versions cannot be collected into one table: "
                f"version {first[0]} ({first[1].csv}) and version {run.version} ({run.csv}); "
                "rerun the older one or collect them apart"
            )


def collect_rows(folders: Sequence[str | os.PathLike[str]]) -> tuple[list[str], list[dict[str, str]]]:
    """The collected table's columns and rows (module docstring).

    Raises
    ------
    InputError
        No folder given; a folder holds no results; two versions of one experiment.
    """
    if not folders:
        raise InputError("results_dir: give at least one results folder")
    seen: set[Path] = set()
    runs = []
    for run in find_runs(folders):  # a run reached through two of the folders is collected once
        if run.csv.resolve() not in seen:
            seen.add(run.csv.resolve())
            runs.append(run)
    _check_versions(runs)
    extra = list(dict.fromkeys(c for r in runs for row in r.rows[:1] for c in row if c not in TIDY_COLUMNS))
    fixed = [*TIDY_COLUMNS, *extra, "experiment_version", "results_dir"]
    settings = sorted({k for r in runs for k in r.settings if k not in fixed})
    out: list[dict[str, str]] = []
    for run in runs:
        own = {k: _cell(v) for k, v in run.settings.items() if k in settings}
        meta = {"experiment_version": "" if run.version is None else str(run.version),
                "results_dir": str(run.csv.parent.parent)}
        for row in run.rows:
            out.append({**{c: row.get(c, "") for c in (*TIDY_COLUMNS, *extra)}, **meta,
                        **{k: own.get(k, "") for k in settings}})
    return [*fixed, *settings], out


#: What collected tables are listed as among the files vlprobe wrote (:mod:`vlprobe.io`).
COLLECT_KIND = "collect"


def _is_collected(path: Path) -> bool:
    """Whether an existing file is a table vlprobe collected (tidy columns and ``results_dir``)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            header = fh.readline().strip().split(",")
    except OSError:
        return False
    return set(REQUIRED_TIDY_COLUMNS) <= set(header) and "results_dir" in header


def write_collected(folders: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str]) -> tuple[Path, int, int]:
    """Write the collected table; return its path, the number of runs and of rows.

    Raises
    ------
    InputError
        As :func:`collect_rows`; ``out`` exists and is not a table vlprobe collected.
    """
    from vlprobe.io.atomic import atomic_write
    from vlprobe.io.ownership import check_output

    target = Path(out)
    check_output(target, COLLECT_KIND, recognise=_is_collected)
    columns, rows = collect_rows(folders)
    with atomic_write(target, kind=COLLECT_KIND, recognise=_is_collected) as fh:
        writer = csv.DictWriter(fh, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    runs = len({(r["experiment"], r["model"], r["results_dir"]) for r in rows})
    return target, runs, len(rows)
