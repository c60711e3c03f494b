"""Model lists: ``probe eval NAME --models FILE`` and ``probe extract --models FILE``.

A models file (TOML) names models the way one ``--model`` run is given, one table each, in the
order of the paper's table::

    [models.openai-RN50]
    row = "OpenAI RN50"                     # the paper's row (default: the table's name)
    model = "openclip"                      # a registered model (`probe ls models`)
    checkpoint = "timm/resnet50_clip.openai"
    options = { arch = "RN50-quickgelu" }   # its --model-option NAME=VALUE
    # model_config, tokenizer: as --model-config, --tokenizer; regions: as --regions
    # dtype: as --dtype, this model's own (default: the command's, auto: the one its reference
    # code loads it in, e.g. SugarCrepe's Vera in bfloat16)

The table's name names the model's run (``--name``) and its files. A relative ``checkpoint``,
``model_config``, ``tokenizer`` or ``regions`` is read from the models file's folder when it
exists there; otherwise it is used as given (a hub id). Every entry is checked (its model
registered, its options declared, its inputs those the model reads) before the first model
runs.

``probe eval`` runs each model in turn as ``--model ... --name TABLE_NAME`` would, then writes
``OUT/<benchmark>/<file stem>.table.csv`` in the paper's layout (:func:`table_rows`): one row
per model and metric, one column per subset (SugarCrepe: the seven subsets, then the
micro-averages ``replace``, ``swap``, ``add`` and ``all``), and ``<file stem>.table.json``, its
manifest. A model whose run is recorded in ``OUT/<benchmark>/manifest.json`` with the same
settings and inputs is not run again, so a rerun after an interruption (or with models added
to the file) runs only the models not yet done. ``probe extract`` writes one cache per model,
``OUT/<name>-<dataset>.h5``, each resumed as a single extraction resumes.
"""

from __future__ import annotations

import csv
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vlprobe.validation import InputError

__all__ = ["ModelEntry", "load_models_file", "table_rows", "write_table"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
#: The keys of one model's table.
ENTRY_KEYS = ("row", "model", "checkpoint", "options", "model_config", "tokenizer", "regions", "dtype")
#: Entry keys that name a file or folder (read relative to the models file when there).
_PATH_KEYS = ("checkpoint", "model_config", "tokenizer", "regions")


@dataclass(frozen=True)
class ModelEntry:
    """One model of a models file.

    Attributes
    ----------
    name : str
        Its table's name: the run's ``--name`` and the cache's file stem.
    row : str
        The paper's row it reproduces (the table's ``row`` column).
    model : str
        The registered model.
    checkpoint, model_config, tokenizer, regions, dtype : str or None
        As the command-line options of the same names (paths resolved, hub ids as given); a
        ``dtype`` overrides the command's for this model.
    options : dict of str to str
        Its ``--model-option NAME=VALUE`` values.
    """

    name: str
    row: str
    model: str
    checkpoint: str | None = None
    options: Mapping[str, str] = field(default_factory=dict)
    model_config: str | None = None
    tokenizer: str | None = None
    regions: str | None = None
    dtype: str | None = None

    def model_option_args(self) -> tuple[str, ...]:
        """``options`` as ``NAME=VALUE`` strings (what ``--model-option`` takes)."""
        return tuple(f"{k}={v}" for k, v in self.options.items())


def _resolved(value: str, base: Path) -> str:
    """A path given in the file, read from the file's folder when it exists there; else as given."""
    p = Path(value).expanduser()
    if p.is_absolute():
        return str(p)
    beside = base / p
    return str(beside) if beside.exists() else value


def _scalar(value: Any, where: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    raise InputError(f"models: {where} must be a string or number, got {value!r}")


def load_models_file(path: str | os.PathLike[str], param: str = "models") -> list[ModelEntry]:
    """The entries of a models file (module docstring), in the file's order.

    Raises
    ------
    InputError
        Not a TOML file, no ``[models.NAME]`` table, an unknown key, a value of the wrong type,
        an unknown registered model, an option the model does not declare, or inputs the model
        does not read (each naming the entry).
    """
    from vlprobe.extract.model_inputs import check_model_inputs
    from vlprobe.io.toml import read_toml
    from vlprobe.registry import MODELS
    from vlprobe.validation import check_file

    p = check_file(path, param)
    raw = read_toml(p, param, "a TOML models file")
    unknown = sorted(set(raw) - {"models"})
    if unknown:
        raise InputError(f"{param}: {p.name}: unknown top-level key(s) {', '.join(unknown)} (a models file holds "
                         "[models.NAME] tables)")
    tables = raw.get("models")
    if not isinstance(tables, dict) or not tables or not all(isinstance(v, dict) for v in tables.values()):
        raise InputError(f"{param}: {p.name} holds no [models.NAME] tables")
    entries: list[ModelEntry] = []
    stems: dict[str, str] = {}
    for name, t in tables.items():
        where = f"{p.name}: models.{name}"
        if not _NAME.match(name):
            raise InputError(f"{param}: {where}: a name is letters, digits, '.', '_', '+' or '-'")
        if name.lower() in stems:
            raise InputError(f"{param}: {where}: names its files as models.{stems[name.lower()]} does")
        stems[name.lower()] = name
        bad = sorted(set(t) - set(ENTRY_KEYS))
        if bad:
            raise InputError(f"{param}: {where}: unknown key(s) {', '.join(bad)} (known: {', '.join(ENTRY_KEYS)})")
        if "model" not in t:
            raise InputError(f"{param}: {where} needs model = \"<registered model>\" (see `probe ls models`)")
        values = {k: _scalar(t[k], f"{where}.{k}") for k in ENTRY_KEYS if k in t and k != "options"}
        options = t.get("options", {})
        if not isinstance(options, dict):
            raise InputError(f"{param}: {where}.options must be a table (options = {{ arch = \"ViT-B-32\" }})")
        opts = {str(k): _scalar(v, f"{where}.options.{k}") for k, v in options.items()}
        for k in _PATH_KEYS:
            if k in values:
                values[k] = _resolved(values[k], p.parent)
        entry = ModelEntry(
            name=name, row=values.get("row") or name, model=values["model"], checkpoint=values.get("checkpoint"),
            options=opts, model_config=values.get("model_config"), tokenizer=values.get("tokenizer"),
            regions=values.get("regions"), dtype=values.get("dtype"),
        )
        if entry.dtype is not None:
            from vlprobe.devices import DTYPES

            if entry.dtype not in ("auto", *DTYPES):
                raise InputError(f"{param}: {where}.dtype must be auto or one of {', '.join(DTYPES)}, got "
                                 f"{entry.dtype!r}")
        try:
            check_model_inputs(entry.model, MODELS.get(entry.model), regions=entry.regions,
                               load_options={"model_config": entry.model_config, "tokenizer": entry.tokenizer, **opts})
        except InputError as exc:
            raise InputError(f"{param}: {where}: {exc}") from None
        entries.append(entry)
    return entries


# -- the paper's table ----------------------------------------------------------------------------------


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def table_rows(
    runs: Sequence[tuple[ModelEntry, Sequence[Mapping[str, Any]]]],
) -> tuple[list[str], list[dict[str, Any]]]:
    """The paper's layout of some runs' tidy rows: models x subsets.

    Parameters
    ----------
    runs : sequence of (entry, tidy rows)
        Each model's run, in the table's order.

    Returns
    -------
    columns : list of str
        ``name``, ``row``, ``model``, ``metric``, then the subsets in the order the runs list them
        (the benchmark's own order; its aggregates after its subsets). Interval rows, per-group
        rows (``subset/tag=value``) and bag-of-words slices stay in the runs' own CSVs.
    rows : list of dict
        One per (model, metric), values in percent (empty where a run has no such value).
    """
    subsets: dict[str, None] = {}
    out: list[dict[str, Any]] = []
    for entry, rows in runs:
        by_metric: dict[str, dict[str, Any]] = {}
        for r in rows:
            metric, subset = str(r["metric"]), str(r["subset"])
            if ".ci95_" in metric or "/" in subset or "=" in subset:
                continue
            subsets.setdefault(subset)
            value = r["value"]
            by_metric.setdefault(metric, {})[subset] = _number(value) if isinstance(value, str) else float(value)
        for metric, values in by_metric.items():
            out.append({"name": entry.name, "row": entry.row, "model": entry.model, "metric": metric, **values})
    return ["name", "row", "model", "metric", *subsets], out


def write_table(path: Path, columns: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> Path:
    """Write the table atomically as CSV (floats exact, as the tidy CSVs write them)."""
    from vlprobe.io.atomic import atomic_write
    from vlprobe.runs.writing import RESULTS_KIND, format_cell

    with atomic_write(path, kind=RESULTS_KIND) as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(columns)
        for row in rows:
            writer.writerow([format_cell(row.get(c)) for c in columns])
    return path


# -- probe extract --models -------------------------------------------------------------------------------


def extract_models(
    path: str | os.PathLike[str], base: Any, out_dir: Path | None = None, echo: Any = None,
) -> list[Any]:
    """``probe extract --models FILE``: each model of the file extracted with ``base``'s other
    settings into ``OUT/<name>-<dataset>.h5`` (``out_dir`` default ``caches/``), in the file's
    order; each cache resumes as one extraction does (:func:`vlprobe.extract.runner.extract`).

    Parameters
    ----------
    base : ExtractConfig
        The settings every model shares (its model, checkpoint and load options are replaced).
    echo : callable, optional
        Called with a line per model when it starts.

    Returns
    -------
    list of ExtractResult
        One per model.
    """
    import dataclasses

    from vlprobe.extract.model_inputs import image_input
    from vlprobe.extract.runner import extract
    from vlprobe.registry import MODELS
    from vlprobe.shards import parse_shard

    if base.shard != "0/1" and (base.shard == "auto" or parse_shard(base.shard)[1] > 1):
        raise InputError("shard: a models file runs its models one after another; shard one model at a time "
                         "(--model), or give each its own job (probe sweep)")
    from vlprobe.extract.models.base import Adapter

    entries = load_models_file(path)
    for entry in entries:  # every one before the first runs
        cls = MODELS.get(entry.model)
        if not (isinstance(cls, type) and issubclass(cls, Adapter)):
            raise InputError(f"models: {Path(path).name}: models.{entry.name}: {entry.model} has no hidden-state "
                             "streams to extract (a blind text-only baseline is scored with `probe eval`)")
    folder = Path("caches") if out_dir is None else Path(out_dir)
    if folder.suffix == ".h5":
        raise InputError(f"out: with models, out is a folder of caches (<name>-<dataset>.h5), got {str(folder)!r}")
    results = []
    for i, entry in enumerate(entries, 1):
        options = dict(base.dataset_options)
        if image_input(MODELS.get(entry.model)) != "pixels":
            options = {k: v for k, v in options.items() if k not in ("image_dir", "image_root")}
        config = dataclasses.replace(
            base, model=entry.model, checkpoint=entry.checkpoint, out=folder / f"{entry.name}-{base.dataset}.h5",
            model_config=None if entry.model_config is None else Path(entry.model_config), tokenizer=entry.tokenizer,
            regions=None if entry.regions is None else Path(entry.regions), model_options=dict(entry.options),
            dataset_options=options, **({"dtype": entry.dtype} if entry.dtype else {}),
        )
        if echo is not None:
            echo(f"[{i}/{len(entries)}] {entry.name}: {entry.model} {entry.checkpoint or ''}".rstrip())
        try:
            results.append(extract(config))
        except (InputError, FileNotFoundError) as exc:  # the model it concerns, named
            raise InputError(f"models: {Path(path).name}: models.{entry.name}: {exc}") from None
    return results
