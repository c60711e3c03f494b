"""probe compare: McNemar for 0/1 outcomes, the paired bootstrap otherwise, on the same items only."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import binomtest
from typer.testing import CliRunner

from vlprobe.cli import app
from vlprobe.results.compare import CompareConfig, read_item_results, run_compare
from vlprobe.runs.score_files import write_item_scores
from vlprobe.runs.summary import read_tidy_csv
from vlprobe.runs.writing import write_results, write_tidy_csv
from vlprobe.validation import InputError


def items_csv(folder: Path, name: str, separable: list[float], margin: list[float], ids: list[str] | None = None) -> Path:
    """A separability-like run: its tidy CSV (one aggregate row) and per-item file."""
    ids = ids or [f"winoground/{k}" for k in range(len(separable))]
    base = {"experiment": "separability", "model": name, "stream": "text", "layer": 1, "pooling": "cls",
            "probe": "linear-separability", "task": "target", "split": "train", "n": 4}
    rows = [{**base, "subset": i, "metric": "separable", "value": v} for i, v in zip(ids, separable, strict=True)]
    rows += [{**base, "subset": i, "metric": "separable_margin", "value": v} for i, v in zip(ids, margin, strict=True)]
    csv_path, _ = write_results(folder, "separability", name,
                                [{**base, "subset": "all", "metric": "separable", "value": float(np.mean(separable))}],
                                {"experiment": "separability", "experiment_version": 2, "config": {}})
    write_tidy_csv(csv_path.with_name(f"{name}.items.csv"), rows)
    return csv_path


def by_metric(rows: list[dict]) -> dict[str, dict]:
    return {r["metric"]: r for r in rows}


def test_binary_outcomes_get_mcnemar_and_continuous_ones_the_paired_bootstrap(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    a_sep = [100.0] * 14 + [0.0] * 2 + [100.0] * 10 + [0.0] * 4  # 14 only-A, 2 only-B among the first 16
    b_sep = [0.0] * 14 + [100.0] * 2 + [100.0] * 10 + [0.0] * 4
    margin_a = list(rng.uniform(1, 2, size=30))
    margin_b = [m - 0.5 for m in margin_a]
    a = items_csv(tmp_path / "a", "a", a_sep, margin_a)
    b = items_csv(tmp_path / "b", "b", b_sep, margin_b)
    csv_path, manifest_path, rows = run_compare(CompareConfig(a=a, b=b, out=tmp_path / "out", bootstrap=300))
    got = by_metric(rows)
    assert got["separable.p_value"]["test"] == "mcnemar-exact"  # 16 discordant items < 25
    assert (got["separable.a_only"]["value"], got["separable.b_only"]["value"]) == (14, 2)
    assert got["separable.p_value"]["value"] == pytest.approx(binomtest(2, 16, 0.5).pvalue)
    assert got["separable.difference"]["value"] == pytest.approx(100.0 * 12 / 30)
    assert got["separable_margin.p_value"]["test"] == "paired-bootstrap"
    assert got["separable_margin.difference"]["value"] == pytest.approx(0.5)
    # Every item is 0.5 apart: every resample's difference is 0.5 up to summation round-off.
    assert got["separable_margin.ci95_low"]["value"] == pytest.approx(0.5) == got["separable_margin.ci95_high"]["value"]
    assert got["separable_margin.p_value"]["value"] == pytest.approx(1 / 301)
    assert csv_path == tmp_path / "out" / "compare" / "a-vs-b.csv"
    written = read_tidy_csv(csv_path)
    assert {r["test"] for r in written} == {"mcnemar-exact", "paired-bootstrap"}
    manifest = json.loads(manifest_path.read_text())["runs"]["a-vs-b"]
    assert manifest["tests"] == ["mcnemar-exact", "paired-bootstrap"]
    assert manifest["inputs"]["a"]["path"].endswith("a.items.csv") and len(manifest["inputs"]["b"]["sha256"]) == 64
    assert manifest["bootstrap"] == {"resamples": 300, "seed": 0, "level": 0.95}


def test_many_discordant_items_use_the_chi_square_form(tmp_path: Path) -> None:
    a = items_csv(tmp_path / "a", "a", [100.0] * 30 + [0.0] * 10, [1.0] * 40)
    b = items_csv(tmp_path / "b", "b", [0.0] * 30 + [100.0] * 10, [1.0] * 40)
    rows = run_compare(CompareConfig(a=a, b=b, out=tmp_path / "out", bootstrap=50))[2]
    got = by_metric(rows)
    assert got["separable.p_value"]["test"] == "mcnemar-chi2"
    assert got["separable.statistic"]["value"] == pytest.approx((20 - 1) ** 2 / 40)


def test_different_item_sets_are_refused_naming_how_many_differ(tmp_path: Path) -> None:
    a = items_csv(tmp_path / "a", "a", [100.0] * 5, [1.0] * 5)
    b = items_csv(tmp_path / "b", "b", [100.0] * 5, [1.0] * 5,
                  ids=["winoground/0", "winoground/1", "winoground/2", "winoground/7", "winoground/8"])
    with pytest.raises(InputError, match=r"2 only in a.items.csv, 2 only in b.items.csv"):
        run_compare(CompareConfig(a=a, b=b, out=tmp_path / "out"))


def pair_file(path: Path, n: int, seed: int) -> Path:
    ids = [f"sugarcrepe/swap_obj/{k}" for k in range(n)]
    values = np.random.default_rng(seed).uniform(0.01, 0.99, size=2 * n)
    return write_item_scores(path, [i for i in ids for _ in (0, 1)], [f"{i}/i0" for i in ids for _ in (0, 1)],
                             [f"{i}/c{k}" for i in ids for k in (0, 1)], values)


def test_score_files_give_accuracy_and_the_score_gap(tmp_path: Path) -> None:
    a = read_item_results(pair_file(tmp_path / "a.scores.jsonl", 20, 0))
    metrics = {k[-1] for k in a.values}
    assert metrics == {"accuracy", "score_gap"} and a.name == "a"
    rows = run_compare(CompareConfig(a=pair_file(tmp_path / "a.scores.jsonl", 20, 0),
                                     b=pair_file(tmp_path / "b.scores.jsonl", 20, 1), out=tmp_path / "out", bootstrap=100))[2]
    tests = {r["metric"]: r["test"] for r in rows if r["metric"].endswith(".p_value")}
    assert tests == {"accuracy.p_value": "mcnemar-exact", "score_gap.p_value": "paired-bootstrap"}


def test_winoground_score_files_compare_text_image_group(tmp_path: Path, reference_cache: Path) -> None:
    from vlprobe.experiments.winoground_scores import WinogroundScoresConfig, run_winoground_scores

    csv_path = run_winoground_scores(WinogroundScoresConfig(out=tmp_path / "r", cache=reference_cache, bootstrap=20))[0]
    (scores,) = csv_path.parent.glob("*.scores.jsonl")
    rows = run_compare(CompareConfig(a=csv_path, b=scores, out=tmp_path / "out", name="self", bootstrap=20))[2]
    got = by_metric(rows)
    for metric in ("text", "image", "group"):
        assert got[f"{metric}.difference"]["value"] == 0.0 and got[f"{metric}.p_value"]["value"] == 1.0


def test_variant_similarity_runs_are_compared_setting_by_setting(tmp_path: Path, reference_cache: Path) -> None:
    from vlprobe.experiments.variant_similarity import (
        VariantSimilarityConfig,
        run_variant_similarity,
    )

    a = run_variant_similarity(VariantSimilarityConfig(cache=reference_cache, out=tmp_path / "r", bootstrap=20))[0]
    b = run_variant_similarity(VariantSimilarityConfig(cache=reference_cache, out=tmp_path / "r", bootstrap=20,
                                                       variants_only=True))[0]
    assert read_item_results(a).sweep == ("agg", "lambda")
    csv_path, _, rows = run_compare(CompareConfig(a=a, b=b, out=tmp_path / "out", bootstrap=20))
    # One comparison per (agg, lambda, metric): 2 x 5 x 3, each McNemar on 0/100 outcomes.
    diffs = {(r["agg"], float(r["lambda"]), r["metric"]): r for r in read_tidy_csv(csv_path)
             if r["metric"].endswith(".difference")}
    assert len(diffs) == 2 * 5 * 3 and {r["test"] for r in rows} == {"mcnemar-exact"}
    for agg in ("mean", "max"):
        for metric in ("text", "image", "group"):
            # lambda 0 ignores the variants: with or without the original caption, the same outcomes.
            assert float(diffs[(agg, 0.0, f"{metric}.difference")]["value"]) == 0.0


def test_cli_compare_and_its_one_line_errors(tmp_path: Path, one_error_line: Callable[..., str]) -> None:
    runner = CliRunner()
    a = items_csv(tmp_path / "a", "a", [100.0, 0.0, 100.0], [1.0, 2.0, 3.0])
    b = items_csv(tmp_path / "b", "b", [100.0, 100.0, 0.0], [1.5, 2.0, 2.0])
    ok = runner.invoke(app, ["compare", str(a), str(b), "--out", str(tmp_path / "out"), "--bootstrap", "50",
                             "--bootstrap-seed", "3", "--name", "ab"])
    assert ok.exit_code == 0, ok.output
    assert "mcnemar-exact" in ok.stdout and "paired-bootstrap" in ok.stdout and "ab.csv" in ok.stdout
    alone = write_tidy_csv(tmp_path / "alone.csv", [{"experiment": "recall", "model": "m", "metric": "x", "value": 1.0}])
    one_error_line(runner.invoke(app, ["compare", str(alone), str(b), "--out", str(tmp_path / "o")]),
                   "has no per-item results beside it")
    one_error_line(runner.invoke(app, ["compare", str(tmp_path / "nope.csv"), str(b), "--out", str(tmp_path / "o")]),
                   "no such file")
    one_error_line(runner.invoke(app, ["compare", str(a), str(b), "--out", str(tmp_path / "o"), "--bootstrap", "0"]),
                   "bootstrap")
