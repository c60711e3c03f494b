"""The bars of ``probe run bias-gap`` (SugarCrepe's Figure 1): which scopes, with which metric, and
the values a ``probe eval`` run gives them.

A bar is one scope of ``probe eval``'s rows (a subset, or a group of subsets such as CREPE's
``prod_atom`` or VL-CheckList's ``Object``) with its benchmark's headline metric; a blind scorer's
value is its own row of that scope and metric (computed by ``probe eval``'s code), a VLM's the
same row of its ``probe eval`` CSV, so both bars are one quantity.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vlprobe.data.items import Dataset, Item
from vlprobe.provenance import sha256_file
from vlprobe.validation import InputError

__all__ = ["bars_of", "headline_scopes", "scope_members", "vlm_rows"]


def scope_members(benchmark: str, scope: str, subsets: Sequence[str]) -> tuple[str, ...]:
    """The subsets (of ``subsets``, in their order) whose items a scope of ``probe eval``'s rows
    covers: itself, a spec's pool of subsets, or a spec's mean over members (recursively)."""
    from vlprobe.experiments.benchmark_specs import SPECS

    spec = SPECS.get(benchmark)
    if spec is None or scope in subsets:
        return (scope,) if scope in subsets else ()
    wanted: set[str] = set()
    pools = dict(spec.pools)
    means = dict(spec.means)

    def add(name: str) -> None:
        if name in pools:
            wanted.update(pools[name])
        elif name in means:
            for member in means[name]:
                add(member)
        else:
            wanted.add(name)

    add(scope)
    return tuple(s for s in subsets if s in wanted)


def headline_scopes(rows: Sequence[Mapping[str, Any]], headline: Sequence[str]) -> dict[str, str]:
    """Scope -> its headline metric (the first of ``headline`` the rows have for it), in the rows'
    order; slices and per-group rows (a ``/`` in the scope) left out."""
    have = {(r["subset"], r["metric"]) for r in rows}
    out: dict[str, str] = {}
    for r in rows:
        scope = str(r["subset"])
        if "/" in scope or scope in out:
            continue
        metric = next((m for m in headline if (scope, m) in have), None)
        if metric is not None:
            out[scope] = metric
    return out


def bars_of(benchmark: str, layout: Sequence[tuple[str, str]], scopes: Mapping[str, str], items: Sequence[Item],
            subsets: Sequence[str]) -> list[dict[str, Any]]:
    """The bars: the ``layout``'s (label, scope) whose scope has a metric (``figure1``), then every
    subset no bar covers (its own label); each with its metric, member subsets and chance.

    Chance is the mean over the members' items of 100 / C(texts, positives): the percent a scorer
    with random, never tied scores gets right under any of these metrics (macro means of 50 are 50).
    """
    bars: list[dict[str, Any]] = []
    covered: set[str] = set()
    for label, scope in layout:
        if scope in scopes:
            members = scope_members(benchmark, scope, subsets)
            bars.append({"label": label, "subset": scope, "metric": scopes[scope], "members": list(members),
                         "figure1": True})
            covered.update(members)
    for subset in subsets:
        if subset not in covered and subset in scopes:
            bars.append({"label": subset, "subset": subset, "metric": scopes[subset], "members": [subset],
                         "figure1": False})
    for bar in bars:
        mine = [100.0 / math.comb(len(it.captions), int(it.meta.get("positives", 1))) for it in items
                if it.meta["subset"] in bar["members"]]
        bar["chance"] = float(np.mean(mine)) if mine else None
    return bars


def _read_eval_run(path: Path) -> tuple[str, str, list[dict[str, str]], dict[str, Any]]:
    """A ``probe eval`` run's experiment, run name, tidy rows and manifest entry ({} if none)."""
    from vlprobe.runs.summary import read_tidy_csv
    from vlprobe.runs.writing import result_stem

    if path.name.endswith((".items.csv", ".summary.csv")):
        raise InputError(f"vlm_results: {path.name} is not a run's tidy results; give "
                         f"{path.name.removesuffix('.items.csv').removesuffix('.summary.csv')}.csv")
    try:
        rows = read_tidy_csv(path)
    except InputError as err:
        raise InputError(f"vlm_results: {str(err).removeprefix('csv: ')}") from None
    experiments = sorted({r["experiment"] for r in rows})
    models = sorted({r["model"] for r in rows})
    if len(experiments) != 1 or len(models) != 1:
        raise InputError(f"vlm_results: {path.name} holds rows of {len(experiments)} experiment(s) and "
                         f"{len(models)} model(s); expected one `probe eval` run")
    entry: Any = {}
    manifest = path.parent / "manifest.json"
    if manifest.is_file():
        try:
            runs = json.loads(manifest.read_text(encoding="utf-8")).get("runs") or {}
        except (json.JSONDecodeError, AttributeError):
            runs = {}
        entry = runs.get(models[0]) or next((v for k, v in runs.items() if result_stem(k) == path.stem), {})
    return experiments[0], models[0], rows, entry if isinstance(entry, dict) else {}


def vlm_rows(paths: Sequence[Path], benchmark: str, dataset: Dataset, scopes: Mapping[str, str], base: dict[str, Any]
             ) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]]:
    """Each ``probe eval`` CSV's value of every scope's headline metric (and its interval rows),
    the manifest's inputs and record of the runs read.

    Raises
    ------
    InputError
        A CSV of another benchmark, two of one run, or one with none of the scopes.
    """
    rows: list[dict[str, Any]] = []
    inputs: dict[str, Any] = {}
    record: dict[str, Any] = {}
    for k, path in enumerate(paths):
        experiment, run_name, run_rows, run_manifest = _read_eval_run(Path(path))
        if experiment != benchmark:
            raise InputError(f"vlm_results: {Path(path).name} holds {experiment} results, not {benchmark}'s "
                             f"(give the CSV of `probe eval {benchmark}`)")
        by_key = {(r["subset"], r["metric"]): r for r in run_rows if r.get("task", "target") in ("target", "")}
        probe = f"vlm:{run_name}"
        if any(r["probe"] == probe for r in rows):
            raise InputError(f"vlm_results: two CSVs of one run name {run_name!r} ({Path(path).name})")
        shown: dict[str, str] = {}
        for scope, metric in scopes.items():
            src = by_key.get((scope, metric))
            if src is None:
                continue
            shown[scope] = metric
            row = {**base, "probe": probe, "subset": scope, "n": src.get("n") or None}
            note = f"`probe eval {benchmark}`'s {metric} of run {run_name} ({Path(path).name})"
            rows.append({**row, "metric": metric, "value": float(src["value"]), "note": note})
            for bound in ("low", "high"):
                ci = by_key.get((scope, f"{metric}.ci95_{bound}"))
                if ci is not None:
                    rows.append({**row, "metric": f"{metric}.ci95_{bound}", "value": float(ci["value"]),
                                 "seed": ci.get("seed") or None})
        if not shown:
            wanted = ", ".join(f"{s} {m}" for s, m in list(scopes.items())[:6])
            raise InputError(f"vlm_results: {Path(path).name} has none of the scopes and metrics the blind scorers "
                             f"have ({wanted}{', ...' if len(scopes) > 6 else ''})")
        their = ((run_manifest.get("inputs") or {}).get("dataset") or {}).get("fingerprint")
        inputs[f"vlm_results_{k}"] = {"path": str(path), "sha256": sha256_file(path)}
        record[run_name] = {"csv": str(path), "metrics": shown,
                            "missing": [s for s in scopes if s not in shown],
                            "same_dataset": None if their is None else their == dataset.fingerprint}
    return rows, inputs, record
