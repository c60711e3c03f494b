"""One unit per metric name: every CSV every experiment writes, against its manifest and the vocabulary."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from vlprobe.runs.units import MARGIN, NOT_MEANS, P_VALUE, PERCENT, RANK, base_metric, metric_unit


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def value_columns(path: Path, row: dict[str, str]) -> list[str]:
    """The columns of a row that hold values in the metric's unit (tidy: value; summary: means...)."""
    if path.name.endswith(".summary.csv"):
        return [row[c] for c in ("target_mean", "target_min", "target_max", "control_mean", "control_min",
                                 "control_max")]
    return [row["value"]]


def test_every_metric_of_every_csv_has_one_declared_unit(every_experiment: Path) -> None:
    experiments = sorted(p.name for p in every_experiment.iterdir())
    assert experiments == ["aro", "bias-gap", "conditional", "erasure", "mdl", "patch", "recall", "separability",
                           "sugarcrepe", "task-adaptation", "valse", "variant-probe", "variant-similarity",
                           "winoground-scores"]
    seen: dict[str, str] = {}  # metric -> unit, over every experiment
    n_files = 0
    for folder in sorted(every_experiment.iterdir()):
        runs = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))["runs"]
        assert len(runs) == 1, folder.name
        declared = next(iter(runs.values()))["units"]
        assert isinstance(declared, dict), (folder.name, declared)
        in_files: set[str] = set()
        for path in sorted(folder.glob("*.csv")):
            n_files += 1
            for row in read_csv(path):
                name = base_metric(row["metric"])
                in_files.add(name)
                unit = metric_unit(name)
                assert declared.get(name) == unit, (path.name, name, declared.get(name), unit)
                assert seen.setdefault(name, unit) == unit, name
                for raw in value_columns(path, row):
                    v = float(raw) if raw not in ("", "nan") else math.nan
                    if math.isnan(v):
                        continue
                    if row.get("task") == "selectivity" and unit != P_VALUE:
                        # Target minus control in the metric's unit: a difference, negative too.
                        assert (-100 - 1e-9 <= v <= 100 + 1e-9) if unit == PERCENT else math.isfinite(v), (path.name, row)
                    elif unit == P_VALUE:
                        assert 0 < v <= 1, (path.name, row)
                    elif unit == PERCENT:
                        assert -1e-9 <= v <= 100 + 1e-9, (path.name, row)
                    elif unit == RANK:
                        assert v >= 1, (path.name, row)
                    elif unit == MARGIN:
                        assert v > 0, (path.name, row)
        assert set(declared) == in_files, folder.name  # nothing declared that no file holds
    assert n_files >= 11  # tidy CSVs, separability's items.csv, the MLP and separability summaries


def test_per_case_values_average_to_the_aggregate(every_experiment: Path) -> None:
    # A per-case file in the aggregate's unit: the mean over a subset's cases is the subset's value
    # (percentages are 0..100 per case, not fractions).
    for items_path in every_experiment.glob("*/*.items.csv"):
        tidy = {(r["stream"], r["layer"], r["task"], r["seed"], r["metric"]): r
                for r in read_csv(items_path.with_name(items_path.name.replace(".items", "")))
                if r["subset"] == "all" and base_metric(r["metric"]) == r["metric"]}  # intervals: no per-case rows
        per_case: dict[tuple[str, ...], list[float]] = {}
        for r in read_csv(items_path):
            # A case of a group with its own subset (task-adaptation's mode) is named "<subset>:<item>".
            group = r["subset"].split(":", 1)[0] if ":" in r["subset"] else "all"
            # A sweep inside one run (variant-similarity's agg and lambda) keys its rows too.
            per_case.setdefault((group, r["stream"], r["layer"], r["probe"], r["task"], r["seed"], r["split"],
                                 r["metric"], r.get("agg", ""), r.get("lambda", "")), []).append(float(r["value"]))
        groups = {k[0] for k in per_case}
        tidy = {(r["subset"], r["stream"], r["layer"], r["probe"], r["task"], r["seed"], r["split"], r["metric"],
                 r.get("agg", ""), r.get("lambda", "")): r
                for r in read_csv(items_path.with_name(items_path.name.replace(".items", "")))
                if r["subset"] in groups and r["task"] in ("target", "control") and base_metric(r["metric"]) == r["metric"]
                and not r["metric"].endswith(".p_value") and r["metric"] not in NOT_MEANS}
        assert set(per_case) == set(tidy), items_path.name
        for key, values in per_case.items():
            finite = [v for v in values if not math.isnan(v)]
            want = float(tidy[key]["value"])
            n = int(tidy[key]["n"])
            if items_path.parent.name in ("task-adaptation", "variant-probe"):
                assert not finite or n % len(finite) == 0, key  # n counts examples: the same number per item
            else:
                assert len(finite) == n, key
            if finite:
                assert want == pytest.approx(sum(finite) / len(finite), rel=1e-12), key
            else:
                assert math.isnan(want), key


def test_an_undeclared_metric_is_a_bug() -> None:
    with pytest.raises(KeyError, match="no declared unit"):
        metric_unit("accuracy_fraction")
    assert metric_unit("recall@7.ci95_low") == PERCENT and metric_unit("median_rank") == RANK
