"""One unit per metric name: every CSV every experiment writes, against its manifest and the vocabulary."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from vlprobe.experiments.benchmark_eval import EvalConfig, run_eval
from vlprobe.experiments.recall import RecallConfig, run_recall
from vlprobe.experiments.score_files import write_item_scores
from vlprobe.experiments.separability import SeparabilityConfig, run_separability
from vlprobe.experiments.task_adaptation import TaskAdaptationConfig, run_task_adaptation
from vlprobe.experiments.units import MARGIN, PERCENT, RANK, base_metric, metric_unit
from vlprobe.experiments.variant_probe import VariantProbeConfig, run_variant_probe
from vlprobe.experiments.variant_similarity import VariantSimilarityConfig, run_variant_similarity
from vlprobe.experiments.winoground_scores import WinogroundScoresConfig, run_winoground_scores
from vlprobe.fixtures.caches import planted_cache

MLP = {"depth": 2, "width": 8, "lr": 1e-2, "epochs": 2, "batch_size": 32}


def pair_scores(path: Path, benchmark: str, subsets: tuple[str, ...], n: int, seed: int) -> Path:
    """A per-item score file of ``n`` items per subset, P(match)-like scores in (0, 1)."""
    ids = [f"{benchmark}/{s}/{k}" for s in subsets for k in range(n)]
    values = np.random.default_rng(seed).uniform(0.01, 0.99, size=2 * len(ids))
    return write_item_scores(path, [i for i in ids for _ in (0, 1)], [f"{i}/i0" for i in ids for _ in (0, 1)],
                             [f"{i}/c{k}" for i in ids for k in (0, 1)], values)


@pytest.fixture(scope="module")
def every_experiment(tmp_path_factory: pytest.TempPathFactory, reference_cache: Path) -> Path:
    """One small run of every experiment that writes tidy CSVs, all into one results folder."""
    root = tmp_path_factory.mktemp("units")
    out = root / "results"
    planted = planted_cache(root / "planted.h5", n_items=12, n_variants=3, n_layers=3, signal_layer=1, hidden=4)
    run_winoground_scores(WinogroundScoresConfig(out=out, cache=reference_cache, bootstrap=50))
    run_recall(RecallConfig(out=out, cache=reference_cache, bootstrap=50))
    run_variant_similarity(VariantSimilarityConfig(out=out, cache=reference_cache))
    run_separability(SeparabilityConfig(out=out, cache=planted, seeds=2))
    run_task_adaptation(TaskAdaptationConfig(out=out, cache=planted, seeds=1, pooling="cls", **MLP))
    run_variant_probe(VariantProbeConfig(out=out, cache=planted, seeds=1, draws=1, **MLP))
    run_eval(EvalConfig(benchmark="sugarcrepe", out=out, bootstrap=50,
                        scores=pair_scores(root / "sc.scores.jsonl", "sugarcrepe", ("swap_obj", "add_att"), 10, 0)))
    run_eval(EvalConfig(benchmark="valse", out=out, bootstrap=50, threshold=0.5,
                        scores=pair_scores(root / "valse.scores.jsonl", "valse", ("existence", "plurals"), 10, 1)))
    return out


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
    assert experiments == ["recall", "separability", "sugarcrepe", "task-adaptation", "valse", "variant-probe",
                           "variant-similarity", "winoground-scores"]
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
                    if unit == PERCENT:
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
                for r in read_csv(items_path.with_name(items_path.name.replace(".items", ""))) if r["subset"] == "all"}
        per_case: dict[tuple[str, ...], list[float]] = {}
        for r in read_csv(items_path):
            per_case.setdefault((r["stream"], r["layer"], r["task"], r["seed"], r["metric"]), []).append(float(r["value"]))
        assert set(per_case) == set(tidy), items_path.name
        for key, values in per_case.items():
            finite = [v for v in values if not math.isnan(v)]
            want = float(tidy[key]["value"])
            assert len(finite) == int(tidy[key]["n"]), key
            if finite:
                assert want == pytest.approx(sum(finite) / len(finite), rel=1e-12), key
            else:
                assert math.isnan(want), key


def test_an_undeclared_metric_is_a_bug() -> None:
    with pytest.raises(KeyError, match="no declared unit"):
        metric_unit("accuracy_fraction")
    assert metric_unit("recall@7.ci95_low") == PERCENT and metric_unit("median_rank") == RANK
