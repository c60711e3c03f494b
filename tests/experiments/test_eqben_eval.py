"""`probe eval eqben`: text, image and group scores per sub-dataset against a literal
re-implementation of the authors' scoring (evaluate_eqben_locally.py's cal_wino_score, per
dataset) on planted scores with ties, a tiny CLIP end to end, and the same rows from its scores."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.experiments.helpers import write_pair_scores
from vlprobe.cli import app
from vlprobe.data.benchmark_fixtures import write_benchmark_fixture
from vlprobe.data.eqben import EQBEN_SUBSETS, load_eqben
from vlprobe.experiments.benchmark_eval import EvalConfig, run_eval


def cal_wino_score(result: dict[str, np.ndarray]) -> tuple[float, float, float]:
    """evaluate_eqben_locally.py's cal_wino_score, line for line (numpy, as that script)."""
    def text_correct(result: dict[str, np.ndarray]) -> np.ndarray:
        return np.logical_and(result["c0i0"] > result["c1i0"], result["c1i1"] > result["c0i1"])

    def image_correct(result: dict[str, np.ndarray]) -> np.ndarray:
        return np.logical_and(result["c0i0"] > result["c0i1"], result["c1i1"] > result["c1i0"])

    def group_correct(result: dict[str, np.ndarray]) -> np.ndarray:
        return np.logical_and(image_correct(result), text_correct(result))

    def cal_score(list_correct: np.ndarray) -> float:
        correct_cnt = list_correct.sum()
        denominator = len(list_correct)
        return correct_cnt / denominator

    return cal_score(text_correct(result)), cal_score(image_correct(result)), cal_score(group_correct(result))


@pytest.fixture(scope="module")
def eq_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_benchmark_fixture(tmp_path_factory.mktemp("eqben-eval") / "eq", "eqben", n_items=12, seed=5,
                                   image_size=16)


def test_planted_scores_with_ties_equal_cal_wino_score(eq_dir: Path, tmp_path: Path) -> None:
    ds = load_eqben(eq_dir)
    # (N, text, image) on a coarse grid: many exact ties, which the script counts as wrong (strict >)
    s = np.random.default_rng(0).integers(0, 3, size=(len(ds), 2, 2)).astype(np.float64) / 4
    path = write_pair_scores(tmp_path / "planted.scores.jsonl", ds, s)
    _, _, rows = run_eval(EvalConfig(benchmark="eqben", out=tmp_path, scores=path, data_dir=eq_dir, bootstrap=20))
    got = {(r["subset"], r["metric"]): r for r in rows}
    subsets = np.array([it.meta["subset"] for it in ds])
    for subset in (*EQBEN_SUBSETS, "all"):
        mask = subsets == subset if subset != "all" else np.ones(len(ds), dtype=bool)
        m = s[mask]
        text, image, group = cal_wino_score({"c0i0": m[:, 0, 0], "c0i1": m[:, 0, 1], "c1i0": m[:, 1, 0],
                                             "c1i1": m[:, 1, 1]})
        assert got[(subset, "text")]["value"] == pytest.approx(100 * text, abs=1e-9)
        assert got[(subset, "image")]["value"] == pytest.approx(100 * image, abs=1e-9)
        assert got[(subset, "group")]["value"] == pytest.approx(100 * group, abs=1e-9)
        assert got[(subset, "group")]["n"] == int(mask.sum())
    assert "not in the paper's table" in got[("all", "group")]["note"]
    assert "cal_wino_score" in got[("eqbenag", "text")]["note"]
    assert 0 < got[("all", "group")]["value"] < got[("all", "text")]["value"]


def test_eval_with_clip_then_from_its_scores(eq_dir: Path, tiny_clip: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, [
        "eval", "eqben", "--model", "clip", "--checkpoint", str(tiny_clip), "--data-dir", str(eq_dir),
        "--subsets", "eqbenyoucook2,eqbensd", "--limit", "5", "--out", str(tmp_path), "--bootstrap", "30", "--quiet",
    ])
    assert result.exit_code == 0, result.output
    csv_path = tmp_path / "eqben" / "clip@bootstrap=30.csv"
    with open(csv_path, encoding="utf-8", newline="") as fh:
        rows = {(r["subset"], r["metric"]): r for r in csv.DictReader(fh)}
    assert rows[("eqbenyoucook2", "group")]["n"] == "5" and rows[("all", "group")]["n"] == "10"
    assert rows[("eqbensd/bow=same", "text")]["n"] == "5"  # the fixture's captions swap two colour words
    assert ("eqbensd", "text.ci95_low") in rows
    cfg = EvalConfig(benchmark="eqben", out=tmp_path / "again", scores=csv_path.with_suffix(".scores.jsonl"),
                     data_dir=eq_dir, subsets="eqbenyoucook2,eqbensd", limit=5, bootstrap=30)
    _, _, again = run_eval(cfg)
    for r in again:
        assert float(rows[(r["subset"], r["metric"])]["value"]) == pytest.approx(r["value"], abs=1e-9)
