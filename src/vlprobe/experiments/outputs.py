"""Tidy CSVs and manifests: what every experiment writes.

``OUT/<experiment>/<model>.csv`` holds one row per measured value, with the columns of
:data:`TIDY_COLUMNS` (empty where a column does not apply); side files of the same run share the
stem (``<model>.summary.csv``, ``<model>.scores.jsonl``, ...; :func:`result_stem`).
``OUT/<experiment>/manifest.json`` maps each model to its run's manifest: the full config, every
seed, the vlprobe git revision, package versions and the fingerprints of every input. Both are
written atomically.

One folder holds one run per model name. Running the same model again with the same settings
replaces its run; a run whose settings differ from the recorded one (another pooling, stream,
layer spec, seed count, cache, ...; the fields of :data:`RUN_NEUTRAL` aside) is refused before
anything is computed, with the differing field named: give it another ``--out`` or another model
name (``--model``; ``probe eval``: ``--name``), or delete the old run's files first.
"""

from __future__ import annotations

import csv
import dataclasses
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
from vlprobe.validation import InputError

__all__ = [
    "RUN_NEUTRAL",
    "TIDY_COLUMNS",
    "build_manifest",
    "check_run_slot",
    "config_record",
    "format_cell",
    "result_stem",
    "write_results",
    "write_tidy_csv",
]

TIDY_COLUMNS: tuple[str, ...] = (
    "experiment", "model", "stream", "layer", "pooling", "probe", "task", "seed", "split",
    "subset", "metric", "value", "n",
)

#: Config fields that do not change what a run measures: a rerun that differs only in these (or
#: in the field naming the run, ``model`` by default) replaces the recorded run.
RUN_NEUTRAL: frozenset[str] = frozenset({"out", "jobs", "device", "progress"})


def format_cell(value: Any) -> str:
    """A CSV cell: empty for None, ``repr`` of floats (exact round trip), ``nan``, else ``str``."""
    if value is None:
        return ""
    if isinstance(value, float):
        # float() first: repr of a numpy float64 (a float subclass) is "np.float64(x)".
        return "nan" if math.isnan(value) else repr(float(value))
    return str(value)


def result_stem(model: str) -> str:
    """The file stem of a model's outputs: the name with characters other than ``[A-Za-z0-9._-]`` as ``_``."""
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in model) or "model"


def config_record(config: Any) -> dict[str, Any]:
    """A config dataclass as the JSON value a manifest records (paths as strings, tuples as lists)."""
    return json.loads(json.dumps(dataclasses.asdict(config), default=lambda v: os.fspath(v)))


def write_tidy_csv(path: str | os.PathLike[str], rows: Iterable[Mapping[str, Any]]) -> Path:
    """Write rows (dicts keyed by :data:`TIDY_COLUMNS`) as CSV, atomically.

    Raises
    ------
    InputError
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
            writer.writerow([format_cell(row.get(c)) for c in TIDY_COLUMNS])
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
        The full, resolved config (JSON-serialisable; :func:`config_record`).
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


def _recorded_runs(manifest_path: Path) -> dict[str, Any]:
    if not manifest_path.is_file():
        return {}
    try:
        runs = json.loads(manifest_path.read_text(encoding="utf-8")).get("runs", {})
        if not isinstance(runs, dict):
            raise ValueError
    except (ValueError, AttributeError, UnicodeDecodeError):
        raise InputError(
            f"out: {manifest_path} is not a vlprobe manifest; move it away or choose another --out"
        ) from None
    return runs


def check_run_slot(
    out_dir: str | os.PathLike[str], experiment: str, model: str, config: Mapping[str, Any] | None,
    *, name_field: str = "model",
) -> None:
    """Refuse to replace a recorded run of ``model`` made with other settings (module docstring).

    Experiments call it as soon as the model name is known, so a refused run costs nothing;
    :func:`write_results` calls it again. ``name_field`` is the config field that names the run
    (``probe eval``: ``name``); it is not compared.

    Raises
    ------
    InputError
        ``OUT/<experiment>/`` holds a run under this file stem whose config differs from
        ``config`` outside :data:`RUN_NEUTRAL`, or a run of another model name with this stem.
    """
    folder = Path(out_dir) / experiment
    stem = result_stem(model)
    for name, run in _recorded_runs(folder / "manifest.json").items():
        if result_stem(name) != stem:
            continue
        where = f"out: {folder / stem}.csv already holds the {experiment} run of {name!r}"
        if name != model:
            raise InputError(f"{where}, which shares its file name with {model!r}; choose another model name")
        old = run.get("config") if isinstance(run, dict) else None
        if config is None or not isinstance(old, dict):
            continue  # nothing recorded to compare against
        new = json.loads(json.dumps(dict(config), default=str))
        differ = sorted(k for k in set(old) | set(new) if k not in RUN_NEUTRAL and k != name_field and old.get(k) != new.get(k))
        if differ:
            k = differ[0]
            more = f" (and {len(differ) - 1} more field(s))" if len(differ) > 1 else ""
            raise InputError(
                f"{where} made with other settings ({k}={old.get(k)!r} there, {new.get(k)!r} now{more}); "
                "use another --out or another model name to keep both, or delete that run's files first"
            )


def write_results(
    out_dir: str | os.PathLike[str], experiment: str, model: str,
    rows: Iterable[Mapping[str, Any]], manifest: Mapping[str, Any], *, name_field: str = "model",
) -> tuple[Path, Path]:
    """Write ``OUT/<experiment>/<model>.csv`` and this model's entry of ``manifest.json``.

    Raises
    ------
    InputError
        From :func:`check_run_slot`, before anything is written.
    """
    folder = Path(out_dir) / experiment
    check_run_slot(out_dir, experiment, model, manifest.get("config"), name_field=name_field)
    manifest_path = folder / "manifest.json"
    runs = _recorded_runs(manifest_path)
    csv_path = write_tidy_csv(folder / f"{result_stem(model)}.csv", rows)
    runs[model] = dict(manifest)
    write_json(manifest_path, {"experiment": experiment, "runs": runs})
    return csv_path, manifest_path
