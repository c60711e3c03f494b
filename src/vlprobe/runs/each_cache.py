"""An experiment on every cache of a folder: ``probe run NAME`` without ``--cache``.

``probe extract`` writes ``caches/<model>-<dataset>.h5`` when no ``--out`` is given;
``probe run separability --layers all`` without ``--cache`` then runs on every activation cache
under ``caches/`` (``--cache DIR``: under ``DIR``), one run per cache, each named by its model as
a run on one cache is (``results/separability/clip.csv``); two caches of one model are named by
their file stems instead (``clip-winoground``, ``clip-sugarcrepe``). Files that are not activation
caches (the region files ``probe extract`` makes beside them) are passed over; shards of an
unmerged extraction and unfinished caches are skipped with the reason.

A cache the experiment refuses (no caption variants, say) does not stop the others: its one-line
error is kept and shown in the summary (:func:`summary_lines`), one line per model at the end.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vlprobe.validation import InputError

__all__ = ["CacheRun", "cache_files", "headline", "run_on_caches", "summary_lines"]

#: The option of an experiment that takes one cache; not given, the experiment runs on each cache of a folder.
CACHE_OPTION = "cache"
#: Inputs an experiment takes instead of a cache (``--scores``): given, there is no folder to run on.
INSTEAD_OF_CACHE = ("scores",)


@dataclass
class CacheRun:
    """One cache's run.

    Attributes
    ----------
    cache : Path
    label : str
        The run's results label (the cache's model, or its file stem where two caches share a model).
    result : Any
        What :meth:`~vlprobe.runs.declare.Experiment.run` returned (None when it failed or was skipped).
    error : str
        The one-line refusal of the run, or why the cache was skipped ("" when it ran).
    skipped : bool
        Not run (a shard, an unfinished cache).
    """

    cache: Path
    label: str
    result: Any = None
    error: str = ""
    skipped: bool = False
    lines: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.result is not None


def cache_files(folder: str | Path, *, instead: str = "") -> tuple[list[tuple[Path, str]], list[CacheRun]]:
    """The activation caches under ``folder`` (recursively, in name order) with their models, and
    the ones skipped (shards of an extraction not merged yet, unfinished caches).

    ``instead`` names what the experiment takes in place of a cache (``--scores FILE``), for the message.

    Raises
    ------
    InputError
        ``folder`` is not a folder or holds no activation cache (the message says how to make one).
    """
    import h5py

    from vlprobe.extract.cache.reader import ActivationCache
    from vlprobe.extract.cache.schema import LEGACY_VERSION_ATTR, SCHEMA, attr_str

    root = Path(folder)
    how = "`probe extract --model MODEL` writes caches/<model>-<dataset>.h5; or pass --cache FILE" + (f" or {instead}" if instead else "")
    if not root.is_dir():
        raise InputError(f"cache: not given, and {str(root)!r} is not a folder of caches; {how}")
    found: list[tuple[Path, str]] = []
    skipped: list[CacheRun] = []
    for path in sorted(p for p in root.rglob("*.h5") if p.is_file()):
        try:
            with h5py.File(path, "r") as f:
                is_cache = attr_str(f.attrs.get("schema", "")) == SCHEMA or LEGACY_VERSION_ATTR in f.attrs
        except OSError:
            continue  # not an HDF5 file vlprobe can read: not a cache
        if not is_cache:
            continue  # a region file, another tool's file
        with ActivationCache(path) as cache:
            model, shard, complete = cache.header.model, cache.header.shard, cache.complete
        if shard not in ("", "0/1"):
            skipped.append(CacheRun(path, model, error=f"shard {shard} of an extraction (merge the shards with "
                                                       "`probe cache merge`)", skipped=True))
        elif not complete:
            skipped.append(CacheRun(path, model, error="unfinished (rerun its `probe extract` to finish it)",
                                    skipped=True))
        else:
            found.append((path, model))
    if not found:
        extra = f" ({len(skipped)} skipped: {skipped[0].cache.name}, {skipped[0].error})" if skipped else ""
        raise InputError(f"cache: not given, and {root} holds no finished activation cache{extra}; {how}")
    return found, skipped


def run_on_caches(
    exp: Any, values: Mapping[str, Any], folder: str | Path, *, preset: str | None = None,
    given: Iterable[str] | None = None, report: Callable[[str], None] | None = None,
) -> list[CacheRun]:
    """Run ``exp`` on every cache under ``folder`` (see the module docstring).

    Parameters
    ----------
    exp : Experiment
        A registered experiment whose config takes ``cache``.
    values : mapping
        Its other option values (as :meth:`~vlprobe.runs.declare.Experiment.make_config` takes
        them); ``cache`` is set per run, and ``name`` too where two caches share a model.
    folder : path
        Where the caches are (``caches``).
    preset, given
        As :meth:`~vlprobe.runs.declare.Experiment.make_config` takes them.
    report : callable, optional
        Called with each line the experiment prints about a run (its report), a run's header first.

    Returns
    -------
    list of CacheRun
        The skipped caches first, then one per cache in name order.

    Raises
    ------
    InputError
        No cache under ``folder``; ``name`` given for several caches; options the config refuses
        (before any run).
    """
    import dataclasses

    fields = {f.name for f in dataclasses.fields(exp.config)} if dataclasses.is_dataclass(exp.config) else set()
    instead = " or ".join(f"--{k} FILE" for k in INSTEAD_OF_CACHE if k in fields)
    found, skipped = cache_files(folder, instead=instead)
    if values.get("name") and len(found) > 1:
        raise InputError(f"name: one results label for {len(found)} caches under {folder}; pass --cache FILE to "
                         "name one run, or leave --name out (each run is named by its model)")
    models = [m for _, m in found]
    labels = [m if models.count(m) == 1 else path.stem for path, m in found]
    explicit = set(values) if given is None else set(given)
    configs = []
    for (path, model), label in zip(found, labels, strict=True):
        named = {"name": label} if label != model else {}
        configs.append(exp.make_config({**values, CACHE_OPTION: path, **named}, preset=preset,
                                       given=explicit | {CACHE_OPTION, *named}))
    runs = list(skipped)
    for (path, _), label, config in zip(found, labels, configs, strict=True):
        run = CacheRun(path, label)
        if report is not None:
            report(f"== {exp.name} on {path} ({label})")
        try:
            run.result = exp.run(config)
        except InputError as exc:
            run.error = str(exc)
            if report is not None:
                report(f"error: {exc}")
        else:
            if exp.report is not None:
                run.lines = list(exp.report(config, run.result))
                if report is not None:
                    for line in run.lines:
                        report(line)
        runs.append(run)
    return runs


def headline(exp: Any, rows: Iterable[Mapping[str, Any]]) -> str:
    """One line of a run's results as its chart draws them: for layer curves, the layer where the
    target is highest (target, control, selectivity); for scores, each score of the first subset."""
    chart = getattr(exp, "chart", None)
    rows = list(rows)
    if chart is None or not rows:
        return f"{len(rows)} rows"
    metrics = [m for m in chart.metrics if any(r.get("metric") == m for r in rows)]
    if not metrics:
        return f"{len(rows)} rows"
    if chart.kind == "layers":
        from vlprobe.runs.summary import summarize

        metric = metrics[0]
        recs = [r for r in summarize(rows) if r["metric"] == metric and math.isfinite(r.get("target_mean", math.nan))]
        splits = [r["split"] for r in recs]
        split = chart.split if chart.split in splits else (splits[0] if splits else "")
        subsets = [r["subset"] for r in recs if r["split"] == split]
        subset = "all" if "all" in subsets else (subsets[0] if subsets else "")
        recs = [r for r in recs if r["split"] == split and r["subset"] == subset]
        if not recs:
            return f"{len(rows)} rows"
        best = max(recs, key=lambda r: r["target_mean"])
        where = f"{best['stream']} layer {best['layer']}" if best.get("layer") not in (None, "") else best["stream"]
        return (f"{metric} ({split}) highest at {where}: target {best['target_mean']:.2f}, control "
                f"{best['control_mean']:.2f}, selectivity {best['selectivity']:.2f}")
    first = [r for r in rows if r.get("metric") in metrics and r.get("task", "target") in ("target", "")]
    subset = first[0].get("subset") if first else None
    shown = [f"{r['metric']} {float(r['value']):.2f}" for r in first if r.get("subset") == subset][:6]
    return f"{subset}: " + ", ".join(shown) if shown else f"{len(rows)} rows"


def summary_lines(exp: Any, runs: Iterable[CacheRun]) -> list[str]:
    """One line per cache: its label, the headline of its results and the CSV written, or why it
    did not run; a count first."""
    runs = list(runs)
    ran = sum(r.ok for r in runs)
    lines = [f"{exp.name}: {ran} of {len(runs)} caches run"]
    width = max(len(r.label) for r in runs)
    for r in runs:
        if r.ok and isinstance(r.result, tuple) and len(r.result) == 3:
            csv_path, _, rows = r.result
            lines.append(f"{r.label:<{width}}  {headline(exp, rows)}  -> {csv_path}")
        elif r.ok:
            lines.append(f"{r.label:<{width}}  done ({r.cache})")
        else:
            lines.append(f"{r.label:<{width}}  {'skipped' if r.skipped else 'failed'} ({r.cache}): {r.error}")
    return lines
