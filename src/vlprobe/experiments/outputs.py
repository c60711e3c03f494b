"""Tidy CSVs and manifests: what every experiment writes.

``OUT/<experiment>/<model>.csv`` holds one row per measured value, with the columns of
:data:`TIDY_COLUMNS` (empty where a column does not apply). ``OUT/<experiment>/manifest.json``
maps each model to its run's manifest: the full config, every seed, the vlprobe git revision,
package versions and the fingerprints of every input. Both are written atomically.
"""

from __future__ import annotations

import csv
import json
import math
import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from vlprobe import __version__
from vlprobe.io import atomic_write, write_json
from vlprobe.provenance import git_revision, package_versions

__all__ = ["TIDY_COLUMNS", "build_manifest", "write_results", "write_tidy_csv"]

TIDY_COLUMNS: tuple[str, ...] = (
    "experiment", "model", "stream", "layer", "pooling", "probe", "task", "seed", "split",
    "subset", "metric", "value", "n",
)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        # float() first: repr of a numpy float64 (a float subclass) is "np.float64(x)".
        return "nan" if math.isnan(value) else repr(float(value))
    return str(value)


def write_tidy_csv(path: str | os.PathLike[str], rows: Iterable[Mapping[str, Any]]) -> Path:
    """Write rows (dicts keyed by :data:`TIDY_COLUMNS`) as CSV, atomically.

    Raises
    ------
    ValueError
        A row has a key that is not a tidy column.
    """
    target = Path(path)
    with atomic_write(target) as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(TIDY_COLUMNS)
        for row in rows:
            extra = set(row) - set(TIDY_COLUMNS)
            if extra:
                raise ValueError(f"rows: unknown tidy column(s) {sorted(extra)}")
            writer.writerow([_cell(row.get(c)) for c in TIDY_COLUMNS])
    return target


def build_manifest(
    experiment: str,
    version: int,
    config: Mapping[str, Any],
    inputs: Mapping[str, Mapping[str, Any]],
    seeds: Iterable[int] = (),
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The manifest of one experiment run.

    Parameters
    ----------
    experiment : str
        Registered name.
    version : int
        The experiment's own version (bumped when its outputs change meaning).
    config : mapping
        The full, resolved config (JSON-serialisable).
    inputs : mapping of str to mapping
        Per input (cache path, score file, ...): its fingerprints and provenance.
    seeds : iterable of int
        Every seed used.
    """
    return {
        "experiment": experiment,
        "experiment_version": version,
        "config": dict(config),
        "seeds": list(seeds),
        "inputs": {k: dict(v) for k, v in inputs.items()},
        "vlprobe_version": __version__,
        "git_revision": git_revision(),
        "versions": package_versions(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **(dict(extra) if extra else {}),
    }


def write_results(
    out_dir: str | os.PathLike[str], experiment: str, model: str,
    rows: Iterable[Mapping[str, Any]], manifest: Mapping[str, Any],
) -> tuple[Path, Path]:
    """Write ``OUT/<experiment>/<model>.csv`` and this model's entry of ``manifest.json``."""
    folder = Path(out_dir) / experiment
    safe_model = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in model) or "model"
    csv_path = write_tidy_csv(folder / f"{safe_model}.csv", rows)
    manifest_path = folder / "manifest.json"
    runs: dict[str, Any] = {}
    if manifest_path.is_file():
        try:
            runs = dict(json.loads(manifest_path.read_text(encoding="utf-8")).get("runs", {}))
        except (ValueError, AttributeError):
            runs = {}
    runs[model] = dict(manifest)
    write_json(manifest_path, {"experiment": experiment, "runs": runs})
    return csv_path, manifest_path
