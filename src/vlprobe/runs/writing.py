"""Tidy CSVs and manifests: what every experiment writes.

``OUT/<experiment>/<run>.csv`` holds one row per measured value, with the columns of
:data:`TIDY_COLUMNS` (empty where a column does not apply; ``unit`` is the metric's unit
(:mod:`vlprobe.runs.units`), filled in when the file is written; ``seed`` is a probe's or a
control's seed, blank on rows that are not one seed's: means over seeds, selectivity, intervals and
p-values, whose resampling seed is the ``bootstrap_seed`` setting column; ``n`` is how many the
value is over: items or cases in a run's CSV, one case's points or examples in its
``.items.csv``; ``note`` says, on the rows it concerns,
what a number is where its name alone could mislead: a metric undefined for this run and why,
an aggregate's weighting, which of two variants is the paper's number, a metric no reference
computes) followed by the run's *setting
columns*: one per setting that changes a number (``scale``, ``C``, ``depth``, ``lr``, ...; a
sweep inside one run, such as variant-similarity's ``agg`` and ``lambda``, fills its columns per
row), so runs with different settings can be stacked into one table and still be told apart.
Side files of the same run share the stem (``<run>.summary.csv``, ``<run>.scores.jsonl``, ...;
:func:`result_stem`). ``OUT/<experiment>/manifest.json`` maps each run to its manifest: the full
config, the settings, every seed, the vlprobe git revision, package versions and the
fingerprints of every input. Both are written atomically.

A run is named by its results label and the settings it changed from the experiment's
defaults (:meth:`RunSettings.key`): ``clip`` for a run on the defaults,
``clip@C=1,scale=standard`` for another, so one folder holds a whole sweep over one model. Which
config fields are settings is declared with each option (its role,
:mod:`vlprobe.runs.declare`): inputs (caches, score and data files, checkpoints, the items
chosen), outputs (the folder and the label) and runtime options (device, workers, progress) are
not. Running the same model again with the same settings replaces its run; a run under the same
name whose inputs differ (another cache or score file; runtime and output options aside) is
refused before anything is computed, with the differing field named: give it another ``--out``
or another results label (``--name``), or delete the old run's files first.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlprobe import __version__
from vlprobe.io.atomic import atomic_write, write_json
from vlprobe.io.locks import output_lock
from vlprobe.io.ownership import check_output
from vlprobe.io.paths import ensure_folder
from vlprobe.provenance import git_revision, package_versions, sha256_file
from vlprobe.validation import InputError

__all__ = [
    "LATER_TIDY_COLUMNS",
    "REQUIRED_TIDY_COLUMNS",
    "RESULTS_KIND",
    "RUN_NEUTRAL",
    "TIDY_COLUMNS",
    "RunRows",
    "RunSettings",
    "RunSlot",
    "build_manifest",
    "check_run_slot",
    "config_record",
    "format_cell",
    "result_stem",
    "setting_cell",
    "write_results",
    "write_tidy_csv",
]

TIDY_COLUMNS: tuple[str, ...] = (
    "experiment", "model", "stream", "layer", "kind", "pooling", "probe", "task", "seed", "split",
    "subset", "metric", "value", "unit", "n", "note",
)
#: Tidy columns that results written before them lack (read as empty): ``kind``, ``unit``, ``note``.
LATER_TIDY_COLUMNS: tuple[str, ...] = ("kind", "unit", "note")
#: The tidy columns every vlprobe results CSV has.
REQUIRED_TIDY_COLUMNS: tuple[str, ...] = tuple(c for c in TIDY_COLUMNS if c not in LATER_TIDY_COLUMNS)

#: What experiment outputs are listed as among the files vlprobe wrote (:mod:`vlprobe.io`): a
#: results file is replaced only by another results file of vlprobe's.
RESULTS_KIND = "results"

#: Config fields that do not change what a run measures, for callers that do not say: a rerun
#: that differs only in these replaces the recorded run. Declared experiments pass their own
#: (:meth:`~vlprobe.runs.declare.Experiment.ignored_on_rerun`).
RUN_NEUTRAL: frozenset[str] = frozenset({"out", "name", "jobs", "device", "progress"})
#: Longest run-name file stem; a longer one is shortened to the model and a hash of the settings.
MAX_STEM = 120


def setting_cell(value: Any) -> str:
    """A setting as a CSV cell and in a run name: lists joined by ``+``, floats in shortest form."""
    if isinstance(value, (list, tuple)):
        return "+".join(setting_cell(v) for v in value)
    if isinstance(value, bool) or value is None:
        return "" if value is None else str(value)
    if isinstance(value, float):
        return "nan" if math.isnan(value) else format(value, ".12g")
    return str(value)


def _json_value(value: Any) -> Any:
    return json.loads(json.dumps(value, default=lambda v: os.fspath(v)))


@dataclass(frozen=True)
class RunSettings:
    """The settings of one run: what names it among the runs of one model, and its setting columns.

    Attributes
    ----------
    values : dict
        Every setting of the run (JSON values), in config order.
    defaults : dict
        The experiment's declared default of each setting.
    columns : dict
        Setting column -> the setting it shows; the same value in every row.
    row_columns : tuple of str
        Setting columns each row fills itself (a sweep inside the run: variant-similarity's
        ``agg`` and ``lambda``).
    """

    values: dict[str, Any]
    defaults: dict[str, Any]
    columns: dict[str, str]
    row_columns: tuple[str, ...] = ()

    @property
    def changed(self) -> dict[str, Any]:
        """The settings whose value is not the default."""
        return {k: v for k, v in self.values.items() if v != self.defaults.get(k)}

    def key(self, model: str) -> str:
        """The run's name: ``model``, then ``@`` and ``setting=value`` for each changed setting."""
        changed = self.changed
        if not changed:
            return model
        # A comma inside a value (a layer spec "0,-1") is written as "+": commas separate settings.
        return model + "@" + ",".join(f"{k}={setting_cell(v).replace(',', '+')}" for k, v in changed.items())

    def cells(self) -> dict[str, str]:
        """The run-constant setting columns' cells."""
        return {col: setting_cell(self.values[name]) for col, name in self.columns.items()}

    @property
    def column_names(self) -> tuple[str, ...]:
        return (*self.columns, *self.row_columns)

    @classmethod
    def build(
        cls, values: Mapping[str, Any], defaults: Mapping[str, Any], *, swept: Sequence[str] = (),
        row_columns: Sequence[str] = (),
    ) -> RunSettings:
        """The settings of a run from its setting values and their defaults.

        Parameters
        ----------
        values, defaults : mapping
            Each setting's value in the run and its declared default (made JSON values here).
        swept : sequence of str
            Settings the rows already show (``layers``, ``seeds``, ``ks``, ...): they name the
            run but get no column. Settings named as a tidy column (``pooling``) get none either.
        row_columns : sequence of str
            Setting columns the rows fill themselves.
        """
        got = {k: _json_value(v) for k, v in values.items()}
        base = {k: _json_value(defaults.get(k)) for k in values}
        columns = {n: n for n in got if n not in swept and n not in TIDY_COLUMNS and n not in row_columns}
        return cls(got, base, columns, tuple(row_columns))


@dataclass(frozen=True)
class RunSlot:
    """The results slot a run claimed (:meth:`~vlprobe.runs.declare.Experiment.claim`).

    Attributes
    ----------
    label : str
        The results label: ``config.name`` or the input's model; the rows' ``model`` column.
    name : str
        The run's name: the label and the settings it changed (``clip@C=1``).
    """

    label: str
    name: str

    @property
    def stem(self) -> str:
        """The file stem of the run's outputs (:func:`result_stem`)."""
        return result_stem(self.name)

    def file(self, suffix: str) -> str:
        """The name of one of the run's files: ``file(".items.csv")`` -> ``clip@C=1.items.csv``."""
        return f"{self.stem}{suffix}"


@dataclass(frozen=True)
class RunRows:
    """What an experiment computed, for :meth:`~vlprobe.runs.declare.Experiment.run` to write.

    Attributes
    ----------
    rows : list of dict
        The tidy rows: ``<run>.csv``.
    inputs : dict
        Per input (cache, score file, checkpoint): its fingerprints, for the manifest.
    extra : dict
        The experiment's own manifest entries (model, units, definitions, bootstrap, ...).
    seeds : sequence of int
        Every seed used.
    device : str
        The device the run computed on (the manifest's ``device``).
    item_rows : list of dict, optional
        Per-item tidy rows: ``<run>.items.csv`` (with the setting columns).
    summary : bool
        Also write ``<run>.summary.csv``, the per-layer summary of ``rows``
        (:func:`~vlprobe.runs.summary.summarize`).
    files : dict
        Further side files: suffix (``".scores.jsonl"``) -> ``write(path)``.
    """

    rows: list[dict[str, Any]]
    inputs: Mapping[str, Mapping[str, Any]]
    extra: Mapping[str, Any]
    seeds: Sequence[int] = ()
    device: str = "cpu"
    item_rows: list[dict[str, Any]] | None = None
    summary: bool = False
    files: Mapping[str, Callable[[Path], object]] = dataclasses.field(default_factory=dict)


def format_cell(value: Any) -> str:
    """A CSV cell: empty for None, ``repr`` of floats (exact round trip), ``nan``, else ``str``."""
    if value is None:
        return ""
    if isinstance(value, float):
        # float() first: repr of a numpy float64 (a float subclass) is "np.float64(x)".
        return "nan" if math.isnan(value) else repr(float(value))
    return str(value)


def result_stem(run: str) -> str:
    """The file stem of a run's outputs: its name with characters other than ``[A-Za-z0-9._-@=+,]``
    as ``_``; a stem longer than :data:`MAX_STEM` keeps the part before ``@`` and a hash of the rest."""
    stem = "".join(ch if ch.isalnum() or ch in "-_.@=+," else "_" for ch in run) or "model"
    if len(stem) > MAX_STEM:
        head = stem.split("@", 1)[0][: MAX_STEM - 14]
        stem = f"{head}@{hashlib.sha256(run.encode('utf-8')).hexdigest()[:12]}"
    return stem


def config_record(config: Any) -> dict[str, Any]:
    """A config dataclass as the JSON value a manifest records (paths as strings, tuples as lists)."""
    return json.loads(json.dumps(dataclasses.asdict(config), default=lambda v: os.fspath(v)))


def write_tidy_csv(
    path: str | os.PathLike[str], rows: Iterable[Mapping[str, Any]], settings: RunSettings | None = None,
) -> Path:
    """Write rows (dicts keyed by :data:`TIDY_COLUMNS`) as CSV, atomically, with the run's setting columns.

    Raises
    ------
    ValueError
        A row has a key that is neither a tidy column nor one of the setting columns.
    """
    target = Path(path)
    columns = (*TIDY_COLUMNS, *(settings.column_names if settings else ()))
    known = set(columns)
    constant = settings.cells() if settings else {}
    with atomic_write(target, kind=RESULTS_KIND) as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(columns)
        for row in rows:
            extra = set(row) - known
            if extra:
                raise ValueError(f"rows: unknown tidy column(s) {sorted(extra)}")
            full = {**constant, **row}
            if not full.get("unit") and full.get("metric"):
                full["unit"] = _unit(str(full["metric"]))
            writer.writerow([format_cell(full.get(c)) for c in columns])
    return target


def _unit(metric: str) -> str:
    """The ``unit`` cell of a metric (:func:`~vlprobe.runs.units.metric_unit`; blank if undeclared)."""
    from vlprobe.runs.units import metric_unit

    try:
        return metric_unit(metric)
    except KeyError:
        return ""


def build_manifest(
    experiment: str,
    version: int,
    config: Mapping[str, Any],
    inputs: Mapping[str, Mapping[str, Any]],
    seeds: Iterable[int] = (),
    extra: Mapping[str, Any] | None = None,
    device: str = "cpu",
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
    device : str
        The device the run computed on (``cpu``, ``cuda:0``; :func:`vlprobe.devices.device_name`),
        beside the config's ``device``, which says what was asked for (``auto``).
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
        "device": device,
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
    *, ignore: Iterable[str] = RUN_NEUTRAL, settings: RunSettings | None = None,
) -> str:
    """The run's name (:meth:`RunSettings.key`); refuse to replace a recorded run of that name
    made from other inputs (module docstring).

    Experiments call it as soon as the results label is known, so a refused run costs nothing;
    :func:`write_results` calls it again.

    Parameters
    ----------
    ignore : iterable of str
        Config fields not compared (runtime and output options, the label's own field).
    settings : RunSettings, optional
        The run's settings; the run is named by the label and the ones it changed.

    Raises
    ------
    InputError
        ``OUT/<experiment>/`` holds a run under this file stem whose config differs from
        ``config`` outside ``ignore``, or a run of another name with this stem.
    """
    folder = Path(out_dir) / experiment
    run = settings.key(model) if settings is not None else model
    stem = result_stem(run)
    skip = set(ignore)
    if Path(out_dir).exists() and not Path(out_dir).is_dir():
        raise InputError(f"out: {str(out_dir)!r} is a file; give a results folder")
    for path in (folder / f"{stem}.csv", folder / "manifest.json"):
        check_output(path, RESULTS_KIND)  # writable, and not a file vlprobe did not write
    for name, recorded in _recorded_runs(folder / "manifest.json").items():
        if result_stem(name) != stem:
            continue
        where = f"out: {folder / stem}.csv already holds the {experiment} run {name!r}"
        if name != run:
            raise InputError(f"{where}, which shares its file name with {run!r}; choose another --name")
        old = recorded.get("config") if isinstance(recorded, dict) else None
        if config is None or not isinstance(old, dict):
            continue  # nothing recorded to compare against
        new = json.loads(json.dumps(dict(config), default=str))
        hashes = _input_hashes(recorded)
        differ = sorted(
            k for k in set(old) | set(new)
            if k not in skip and old.get(k) != new.get(k) and not _same_input(old.get(k), new.get(k), hashes)
        )
        if not differ:
            for k in sorted(set(old) & set(new) - skip):
                was, now = hashes.get(old[k]) if isinstance(old[k], str) else None, None
                if was is not None and isinstance(new[k], str) and os.path.isfile(new[k]):
                    now = sha256_file(new[k])
                if was is not None and now is not None and now != was:
                    raise InputError(
                        f"{where} made from another {k} file ({new[k]!r} had sha256 {was[:12]}... then, "
                        f"{now[:12]}... now); use another --out or another name to keep both, "
                        "or delete that run's files first"
                    )
        if differ:
            k = differ[0]
            more = f" (and {len(differ) - 1} more field(s))" if len(differ) > 1 else ""
            raise InputError(
                f"{where} made with other settings or inputs ({k}={old.get(k)!r} there, {new.get(k)!r} now{more}); "
                "use another --out or another --name to keep both, or delete that run's files first"
            )
    return run


def _input_hashes(run: Mapping[str, Any]) -> dict[str, str]:
    """Path (as given) -> sha256 of each input file a recorded run names in its ``inputs``."""
    inputs = run.get("inputs")
    if not isinstance(inputs, dict):
        return {}
    return {
        v["path"]: v["sha256"] for v in inputs.values()
        if isinstance(v, dict) and isinstance(v.get("path"), str) and isinstance(v.get("sha256"), str)
    }


def _same_input(old: Any, new: Any, hashes: Mapping[str, str]) -> bool:
    """Whether two spellings of an input path name the same content (the sha256 recorded for
    ``old`` is that of the file at ``new`` now): a run is compared by what it read, not by how
    its paths were written."""
    if not (isinstance(old, str) and isinstance(new, str)) or old not in hashes or not os.path.isfile(new):
        return False
    return sha256_file(new) == hashes[old]


def write_results(
    out_dir: str | os.PathLike[str], experiment: str, model: str,
    rows: Iterable[Mapping[str, Any]], manifest: Mapping[str, Any], *, ignore: Iterable[str] = RUN_NEUTRAL,
    settings: RunSettings | None = None,
) -> tuple[Path, Path]:
    """Write ``OUT/<experiment>/<run>.csv`` (with the setting columns) and the run's entry of
    ``manifest.json`` (with ``run``, ``settings`` and ``settings_changed``).

    Raises
    ------
    InputError
        From :func:`check_run_slot`, before anything is written.
    """
    folder = Path(out_dir) / experiment
    manifest_path = folder / "manifest.json"
    if not folder.is_dir():  # a bad --out is refused before a folder is made (cheap: nothing recorded yet)
        check_run_slot(out_dir, experiment, model, manifest.get("config"), ignore=ignore, settings=settings)
        ensure_folder(folder)
    # The manifest is read, changed and rewritten under its lock: a run of the same experiment
    # into the same folder at the same time (another process or thread) waits, and its entry is
    # added to the manifest this one wrote instead of being lost.
    with output_lock(manifest_path):
        run = check_run_slot(out_dir, experiment, model, manifest.get("config"), ignore=ignore, settings=settings)
        runs = _recorded_runs(manifest_path)
        csv_path = write_tidy_csv(folder / f"{result_stem(run)}.csv", rows, settings)
        entry = dict(manifest)
        if settings is not None:
            entry.update(run=run, settings=settings.values, settings_changed=settings.changed,
                         setting_columns={**settings.columns, **{c: c for c in settings.row_columns}})
        runs[run] = entry
        write_json(manifest_path, {"experiment": experiment, "runs": runs}, kind=RESULTS_KIND)
    return csv_path, manifest_path
