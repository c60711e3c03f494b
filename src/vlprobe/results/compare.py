"""Two models (or two settings) on the same items: paired tests per metric (``probe compare``).

Each side is a run's per-item results: its tidy CSV (``OUT/<experiment>/<name>.csv``, whose
per-item side file ``<name>.items.csv`` or ``<name>.scores.jsonl`` is read), the per-item file
itself, or a per-item score file. Per (stream, layer, pooling, probe, task, seed, split, metric,
and the setting of a sweep inside the run: variant-similarity's agg and lambda, in their
columns) present in both, the items are matched by id; the two sides must hold the same items (refused
otherwise, naming how many differ). A metric whose per-item values are all 0/1 (or 0/100:
correct, separable) is compared with McNemar's test (the exact binomial test when there are
fewer than 25 discordant items, else chi-square with continuity correction); any other metric
with the paired bootstrap over items (:func:`~vlprobe.stats.uncertainty.paired_bootstrap_test`,
on :func:`~vlprobe.stats.metrics.bootstrap_indices` seeded by ``bootstrap_seed``).

A per-item score file gives per-item outcomes: Winoground items (four pairs) ``text``, ``image``
and ``group`` (0/100); caption/foil items (SugarCrepe, VALSE) ``accuracy`` (the caption scores
above the foil, 0/100) and ``score_gap`` (caption score minus foil score, continuous).

Writes ``OUT/compare/<name>.csv``: the tidy columns plus ``test`` (``mcnemar-exact``,
``mcnemar-chi2`` or ``paired-bootstrap``), per compared key the rows ``<metric>.a`` and
``<metric>.b`` (each side's mean), ``<metric>.difference`` (a minus b) with ``.ci95_low`` /
``.ci95_high`` (bootstrap only), ``<metric>.p_value``, and for McNemar ``<metric>.a_only``,
``<metric>.b_only`` (the discordant items) and ``<metric>.statistic``; ``n`` = paired items.
And ``manifest.json`` as every experiment.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vlprobe.runs.summary import read_tidy_csv
from vlprobe.runs.writing import (
    TIDY_COLUMNS,
    RunSettings,
    build_manifest,
    check_run_slot,
    config_record,
    write_results,
)
from vlprobe.stats.uncertainty import MCNEMAR_EXACT_BELOW, mcnemar_test, paired_bootstrap_test
from vlprobe.validation import InputError, check_file, check_positive_int, check_seed

__all__ = ["COLUMNS", "CompareConfig", "ItemResults", "read_item_results", "run_compare"]

NAME = "compare"
VERSION = 1
#: Key columns of a per-item value (besides the item).
KEY = ("stream", "layer", "pooling", "probe", "task", "seed", "split", "metric")
#: Extra column of the comparison table.
COLUMNS = ("test",)


@dataclass(frozen=True)
class CompareConfig:
    """One comparison: two per-item results in, ``OUT/compare/<name>.csv`` out.

    Attributes
    ----------
    a, b : Path
        A run's tidy CSV, its ``.items.csv``, or a per-item score file (``.scores.jsonl``).
    out : Path
    name : str, optional
        The comparison's name (default ``<a>-vs-<b>`` from the runs' names).
    bootstrap : int
        Resamples of the paired bootstrap.
    bootstrap_seed : int
        Seed of the resampled item indices.
    """

    a: Path
    b: Path
    out: Path
    name: str | None = None
    bootstrap: int = 1000
    bootstrap_seed: int = 0


@dataclass(frozen=True)
class ItemResults:
    """Per-item values of one side: ``values[key][item] = value``.

    A key is the values of :data:`KEY`, then those of ``sweep``: the setting columns whose value
    changes from row to row of the file (a sweep inside one run: variant-similarity's ``agg``
    and ``lambda``), so each setting of the sweep is compared with the same setting of the other
    side.
    """

    name: str
    experiment: str
    source: Path
    values: dict[tuple[str, ...], dict[str, float]]
    sweep: tuple[str, ...] = ()


def _float(v: str) -> float:
    try:
        return float(v) if v != "" else float("nan")
    except ValueError:
        return float("nan")


def _from_items_csv(path: Path, param: str) -> ItemResults:
    rows = read_tidy_csv(path)
    extra = [c for c in rows[0] if c not in TIDY_COLUMNS]
    sweep = tuple(c for c in extra if len({r[c] for r in rows}) > 1)
    values: dict[tuple[str, ...], dict[str, float]] = {}
    for r in rows:
        values.setdefault(tuple(r[c] for c in (*KEY, *sweep)), {})[r["subset"]] = _float(r["value"])
    names = sorted({r["model"] for r in rows})
    experiments = sorted({r["experiment"] for r in rows})
    if len(names) != 1 or len(experiments) != 1:
        raise InputError(f"{param}: {path.name} holds several runs ({', '.join(names)}); give one run's per-item file")
    return ItemResults(names[0], experiments[0], path, values, sweep)


def _from_scores(path: Path, param: str) -> ItemResults:
    from vlprobe.runs.score_files import (
        caption_foil_scores,
        read_item_scores,
        winoground_from_item_scores,
    )
    from vlprobe.stats.metrics import winoground_outcomes

    scores = read_item_scores(path, param=param)
    name = path.name.removesuffix(".scores.jsonl").removesuffix(".jsonl")
    base = ("", "", "", "", "target", "", "")
    values: dict[tuple[str, ...], dict[str, float]] = {}
    if all(str(i).startswith("winoground/") for i in scores.item):
        ids, s = winoground_from_item_scores(scores, param=param)
        outcomes = winoground_outcomes(s)
        for metric in ("text", "image", "group"):
            values[(*base, metric)] = {f"winoground/{w}": 100.0 * float(v) for w, v in zip(ids, outcomes[metric], strict=True)}
        return ItemResults(name, "winoground-scores", path, values)
    item_ids, pos, neg = caption_foil_scores(scores, param=param)
    values[(*base, "accuracy")] = {i: 100.0 * float(p > n) for i, p, n in zip(item_ids, pos, neg, strict=True)}
    values[(*base, "score_gap")] = {i: float(p - n) for i, p, n in zip(item_ids, pos, neg, strict=True)}
    return ItemResults(name, "eval", path, values)


def read_item_results(path: str | os.PathLike[str], *, param: str = "a") -> ItemResults:
    """One side's per-item values (module docstring).

    Raises
    ------
    InputError
        A tidy CSV without a per-item side file; a file of neither kind.
    FileNotFoundError
        No such file.
    """
    from vlprobe.results.reading import classify_csv
    from vlprobe.runs.score_files import is_item_scores_file

    p = check_file(path, param)
    if p.name.endswith(".jsonl"):
        if not is_item_scores_file(p):
            raise InputError(f"{param}: {p.name} is not a vlprobe per-item score file")
        return _from_scores(p, param)
    kind = classify_csv(p)
    if kind == "items":
        return _from_items_csv(p, param)
    if kind == "tidy":
        for suffix, reader in ((".items.csv", _from_items_csv), (".scores.jsonl", _from_scores)):
            side = p.with_name(p.stem + suffix)
            if side.is_file():
                return reader(side, param)
        raise InputError(
            f"{param}: {p.name} has no per-item results beside it ({p.stem}.items.csv or {p.stem}.scores.jsonl); "
            "its run kept aggregates only"
        )
    raise InputError(f"{param}: {p.name} is not a run's tidy CSV, per-item CSV or per-item score file")


def _binary(values: np.ndarray) -> float | None:
    """The 'true' value (1 or 100) when every finite value is 0 or it, else None."""
    finite = values[np.isfinite(values)]
    for top in (100.0, 1.0):
        if len(finite) and np.isin(finite, (0.0, top)).all():
            return top
    return None


def _compare_key(key: tuple[str, ...], columns: tuple[str, ...], a: Mapping[str, float], b: Mapping[str, float],
                 config: CompareConfig, base: dict[str, Any]) -> list[dict[str, Any]]:
    items = sorted(a)
    x = np.array([a[i] for i in items])
    y = np.array([b[i] for i in items])
    row = {**base, **dict(zip(columns, key, strict=True)), "subset": "all"}
    metric = row.pop("metric")
    top_a, top_b = _binary(x), _binary(y)
    both = np.isfinite(x) & np.isfinite(y)
    out: list[dict[str, Any]] = []

    def add(suffix: str, value: float | np.floating[Any], test: str, n: int) -> None:
        out.append({**row, "metric": f"{metric}.{suffix}", "value": float(value), "n": n, "test": test})

    if top_a is not None and top_a == top_b:
        res = mcnemar_test(x[both] > 0, y[both] > 0)
        for suffix, value in (("a", x[both].mean()), ("b", y[both].mean()), ("difference", x[both].mean() - y[both].mean()),
                              ("a_only", res.a_only), ("b_only", res.b_only), ("statistic", res.statistic),
                              ("p_value", res.p_value)):
            add(suffix, value, res.test, res.n)
        return out
    boot = paired_bootstrap_test(x, y, n_boot=config.bootstrap, seed=config.bootstrap_seed)
    n = boot.n
    for suffix, value in (("a", np.nanmean(np.where(both, x, np.nan)) if n else np.nan),
                          ("b", np.nanmean(np.where(both, y, np.nan)) if n else np.nan),
                          ("difference", boot.difference), ("ci95_low", boot.low), ("ci95_high", boot.high),
                          ("p_value", boot.p_value)):
        add(suffix, value, boot.test, n)
    return out


def run_compare(config: CompareConfig) -> tuple[Path, Path, list[dict[str, Any]]]:
    """Compare two per-item results and write the table and manifest (module docstring).

    Raises
    ------
    InputError
        The two sides share no key, or hold different items for a shared key.
    """
    check_positive_int(config.bootstrap, "bootstrap")
    check_seed(config.bootstrap_seed, "bootstrap_seed")
    a = read_item_results(config.a, param="a")
    b = read_item_results(config.b, param="b")
    # Keys of sides sweeping different settings never match: nothing is shared.
    shared = [k for k in a.values if k in b.values] if a.sweep == b.sweep else []
    if not shared:
        raise InputError(
            f"b: {b.source.name} shares no metric/layer with {a.source.name} "
            f"(a: {a.experiment}, {len(a.values)} keys; b: {b.experiment}, {len(b.values)} keys)"
        )
    for key in shared:
        only_a = set(a.values[key]) - set(b.values[key])
        only_b = set(b.values[key]) - set(a.values[key])
        if only_a or only_b:
            example = sorted(only_a or only_b)[0]
            raise InputError(
                f"b: the two runs hold different items ({len(only_a)} only in {a.source.name}, "
                f"{len(only_b)} only in {b.source.name}, e.g. {example!r}); compare runs on the same items"
            )
    name = config.name or f"{a.name}-vs-{b.name}"
    settings = RunSettings({}, {}, {}, (*COLUMNS, *a.sweep))
    check_run_slot(config.out, NAME, name, config_record(config), settings=settings)
    base = {"experiment": NAME, "model": name}
    rows: list[dict[str, Any]] = []
    for key in shared:
        rows += _compare_key(key, (*KEY, *a.sweep), a.values[key], b.values[key], config, base)
    tests = sorted({r["test"] for r in rows})
    from vlprobe.provenance import sha256_file

    manifest = build_manifest(
        NAME, VERSION, config_record(config),
        {side: {"path": str(r.source), "sha256": sha256_file(r.source), "run": r.name, "experiment": r.experiment}
         for side, r in (("a", a), ("b", b))},
        seeds=[config.bootstrap_seed],
        extra={
            "tests": tests,
            "test_definitions": {
                "mcnemar-exact": f"exact two-sided binomial test on the discordant items (fewer than {MCNEMAR_EXACT_BELOW})",
                "mcnemar-chi2": "McNemar's chi-square with continuity correction (|a_only - b_only| - 1)^2 / (a_only + b_only)",
                "paired-bootstrap": "difference of means over the same resampled items, percentile 95% interval, "
                                    "centred two-sided p = (1 + #{|D* - D| >= |D|}) / (1 + B)",
            },
            "bootstrap": {"resamples": config.bootstrap, "seed": config.bootstrap_seed, "level": 0.95},
            "keys_compared": len(shared), "keys_only_in_a": len(a.values) - len(shared),
            "keys_only_in_b": len(b.values) - len(shared),
            "difference": "a minus b",
        },
    )
    csv_path, manifest_path = write_results(config.out, NAME, name, rows, manifest, settings=settings)
    return csv_path, manifest_path, rows
