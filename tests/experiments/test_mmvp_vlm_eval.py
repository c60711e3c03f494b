"""`probe eval mmvp-vlm`: the pair accuracy against a literal re-implementation of MMVP's
evaluate_vlm.py on planted scores with ties, a tiny CLIP end to end, and the same rows from its
saved scores."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from tests.experiments.helpers import write_pair_scores
from vlprobe.cli import app
from vlprobe.data.benchmark_fixtures import write_benchmark_fixture
from vlprobe.data.mmvp_vlm import MMVP_CATEGORIES, MMVP_SUBSETS, load_mmvp_vlm
from vlprobe.experiments.benchmark_eval import EvalConfig, run_eval
from vlprobe.stats.benchmark_metrics import mmvp_pair_right


def evaluate_vlm(logits: np.ndarray, qids: list[tuple[int, int]]) -> dict[str, float]:
    """MMVP's ``benchmark_model`` loop after the model call, line for line: ``logits[p]`` is
    ``[[text1 x img1, text1 x img2], [text2 x img1, text2 x img2]]`` (``logits_per_text``)."""
    categories = list(MMVP_CATEGORIES)
    pair_accuracies = {category: 0 for category in categories}
    num_pairs = 0
    for (qid1, qid2), pair in zip(qids, logits, strict=True):
        probs1 = torch.tensor(pair[0:1]).softmax(dim=-1).numpy()
        probs2 = torch.tensor(pair[1:2]).softmax(dim=-1).numpy()
        img1_score1 = probs1[0][0]
        img1_score2 = probs2[0][0]
        pred1 = "img1" if img1_score1 > 0.5 else "img2"
        pred2 = "img1" if img1_score2 > 0.5 else "img2"
        gt1 = "img1" if qid1 % 2 == 1 else "img2"
        gt2 = "img1" if qid2 % 2 == 1 else "img2"
        current_category = categories[num_pairs // 15]
        if pred1 == gt1 and pred2 == gt2:
            pair_accuracies[current_category] += 1
        num_pairs += 1
    for category in pair_accuracies:
        pair_accuracies[category] = (pair_accuracies[category] / (num_pairs // len(categories))) * 100
    return pair_accuracies


@pytest.fixture(scope="module")
def mmvp_full(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_benchmark_fixture(tmp_path_factory.mktemp("mmvp-eval") / "mmvp", "mmvp-vlm", n_items=135, seed=5,
                                   image_size=16)


def planted(n: int, seed: int) -> np.ndarray:
    """(n, 2, 2) logits on a 0.25 grid (CLIP's scale), so that ties are exact and every other
    difference is far above float32 rounding in the reference's softmax."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, 5, size=(n, 2, 2)).astype(np.float64) * 0.25 * 100


def test_pair_rule_equals_the_script_with_ties() -> None:
    s = planted(135, 0)
    s[:10] = 25.0  # whole pairs tied: statement 1 wrong, so the pair is wrong
    s[10:20, 1] = 50.0  # statement 2 tied: right (a tie picks image 2, its own)
    qids = [(2 * p + 1, 2 * p + 2) for p in range(135)]
    ref = evaluate_vlm(s, qids)
    right = mmvp_pair_right(s)
    assert not right[:10].any()
    ours = {c: 100 * right[k * 15:(k + 1) * 15].mean() for k, c in enumerate(MMVP_CATEGORIES)}
    assert ours == pytest.approx(ref, abs=1e-9)  # counts over 15: the same fractions, exactly or to rounding
    assert (right[10:20] == (s[10:20, 0, 0] > s[10:20, 0, 1])).all()  # statement 2's tie never costs the pair


def test_planted_scores_through_probe_eval(mmvp_full: Path, tmp_path: Path) -> None:
    ds = load_mmvp_vlm(mmvp_full)
    s = planted(len(ds), 1)
    s[:5] = 0.0
    path = write_pair_scores(tmp_path / "planted.scores.jsonl", ds, s)
    _, _, rows = run_eval(EvalConfig(benchmark="mmvp-vlm", out=tmp_path, scores=path, data_dir=mmvp_full, bootstrap=20))
    got = {(r["subset"], r["metric"]): r["value"] for r in rows}
    ref = evaluate_vlm(s, [it.meta["question_ids"] for it in ds])
    for subset, category in zip(MMVP_SUBSETS, MMVP_CATEGORIES, strict=True):
        assert got[(subset, "pair_accuracy")] == pytest.approx(ref[category], abs=1e-9)
    assert got[("mean-of-subsets", "pair_accuracy")] == pytest.approx(np.mean(list(ref.values())), abs=1e-9)
    low, high = got[("mean-of-subsets", "pair_accuracy.ci95_low")], got[("mean-of-subsets", "pair_accuracy.ci95_high")]
    assert low <= got[("mean-of-subsets", "pair_accuracy")] <= high


def test_eval_with_clip_then_from_its_scores(mmvp_full: Path, tiny_clip: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, [
        "eval", "mmvp-vlm", "--model", "clip", "--checkpoint", str(tiny_clip), "--data-dir", str(mmvp_full),
        "--subsets", f"{MMVP_SUBSETS[0]},{MMVP_SUBSETS[7]}", "--out", str(tmp_path), "--bootstrap", "30", "--quiet",
    ])
    assert result.exit_code == 0, result.output
    csv_path = tmp_path / "mmvp-vlm" / "clip@bootstrap=30.csv"
    with open(csv_path, encoding="utf-8", newline="") as fh:
        rows = {(r["subset"], r["metric"]): r for r in csv.DictReader(fh)}
    assert {s for s, _ in rows} >= {MMVP_SUBSETS[0], MMVP_SUBSETS[7], "mean-of-subsets"}
    assert rows[(MMVP_SUBSETS[0], "pair_accuracy")]["n"] == "15"
    assert "a tie is wrong for statement 1" in rows[(MMVP_SUBSETS[0], "pair_accuracy")]["note"]
    manifest = json.loads((tmp_path / "mmvp-vlm" / "manifest.json").read_text(encoding="utf-8"))
    entry = manifest["runs"]["clip@bootstrap=30"]
    assert entry["items_per_subset"] == {MMVP_SUBSETS[0]: 15, MMVP_SUBSETS[7]: 15}
    assert entry["inputs"]["dataset"]["fingerprint"] == load_mmvp_vlm(
        mmvp_full, subsets=[MMVP_SUBSETS[0], MMVP_SUBSETS[7]]).fingerprint
    cfg = EvalConfig(benchmark="mmvp-vlm", out=tmp_path / "again", scores=csv_path.with_suffix(".scores.jsonl"),
                     data_dir=mmvp_full, subsets=f"{MMVP_SUBSETS[0]},{MMVP_SUBSETS[7]}", bootstrap=30)
    _, _, again = run_eval(cfg)
    for r in again:  # the scores round-trip through JSON text: the same floats, the same decisions
        assert float(rows[(r["subset"], r["metric"])]["value"]) == pytest.approx(r["value"], abs=1e-9)
