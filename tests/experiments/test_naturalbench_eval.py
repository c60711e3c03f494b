"""`probe eval naturalbench`: the four scores against a literal re-implementation of the authors'
get_scores on planted answers (ties = no answer), a tiny CLIP end to end, and the same rows from its
saved scores."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.experiments.helpers import write_pair_scores
from vlprobe.cli import app
from vlprobe.data.benchmark_fixtures import write_benchmark_fixture
from vlprobe.data.naturalbench import load_naturalbench
from vlprobe.experiments.benchmark_eval import EvalConfig, run_eval
from vlprobe.stats.benchmark_metrics import naturalbench_answers, naturalbench_outcomes


def get_scores(scores: dict[int, dict[str, int]]) -> dict[str, float]:
    """The authors' get_scores (example.py), its dict branch, line for line."""
    question_score = 0.0
    image_score = 0.0
    binary_score = 0.0
    group = 0.0
    num_samples = len(scores)

    def calculate_image_score(result: dict[str, int]) -> int:
        image_correct = 0
        if result["q0_i0"] == 1.0 and result["q1_i0"] == 0.0:
            image_correct += 1
        if result["q1_i1"] == 1.0 and result["q0_i1"] == 0.0:
            image_correct += 1
        return image_correct

    def calculate_question_score(result: dict[str, int]) -> int:
        text_correct = 0
        if result["q0_i0"] == 1.0 and result["q0_i1"] == 0.0:
            text_correct += 1
        if result["q1_i1"] == 1.0 and result["q1_i0"] == 0.0:
            text_correct += 1
        return text_correct

    def calculate_binary_score(result: dict[str, int]) -> int:
        binary_score_correct = 0
        binary_score_correct += 1 if result["q0_i0"] == 1.0 else 0
        binary_score_correct += 1 if result["q0_i1"] == 0.0 else 0
        binary_score_correct += 1 if result["q1_i0"] == 0.0 else 0
        binary_score_correct += 1 if result["q1_i1"] == 1.0 else 0
        return binary_score_correct

    def calculate_group(result: dict[str, int]) -> int:
        group_correct = 0
        if calculate_question_score(result) == 2 and calculate_image_score(result) == 2:
            group_correct += 1
        return group_correct

    for _, result in scores.items():
        question_score += calculate_question_score(result)
        image_score += calculate_image_score(result)
        binary_score += calculate_binary_score(result)
        group += calculate_group(result)
    return {
        "question_score": question_score / float(num_samples * 2),
        "image_score": image_score / float(num_samples * 2),
        "binary_score": binary_score / float(num_samples * 4),
        "group_score": group / num_samples,
    }


NAMES = {"question_score": "question_accuracy", "image_score": "image_accuracy", "binary_score": "binary_accuracy",
         "group_score": "group_accuracy"}


def planted(n: int, seed: int) -> np.ndarray:
    """(n, 4, 2) scores on a coarse grid: many exact ties, every other gap far from rounding."""
    return np.random.default_rng(seed).integers(0, 3, size=(n, 4, 2)).astype(np.float64) / 4


def as_answers(scores: np.ndarray) -> dict[int, dict[str, int]]:
    """What extract_answer would give for each (question, image): the higher text, -1 on a tie."""
    out = {}
    for k, s in enumerate(scores):
        out[k] = {f"q{q}_i{i}": (1 if s[2 * q, i] > s[2 * q + 1, i] else 0 if s[2 * q, i] < s[2 * q + 1, i] else -1)
                  for q in (0, 1) for i in (0, 1)}
    return out


def test_four_scores_equal_get_scores_with_ties() -> None:
    s = planted(400, 0)
    s[:3, :, :] = 0.5  # every answer a tie: no answer, all four scores 0
    ref = get_scores(as_answers(s))
    out = naturalbench_outcomes(naturalbench_answers(s))
    for theirs, ours in NAMES.items():
        assert out[ours].mean() == pytest.approx(ref[theirs], abs=1e-12)  # the same counts over the same totals
    assert all(out[m][:3].sum() == 0 for m in out)
    assert 0 < out["group_accuracy"].mean() < out["binary_accuracy"].mean() < 1


@pytest.fixture(scope="module")
def nb_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_benchmark_fixture(tmp_path_factory.mktemp("nb-eval") / "nb", "naturalbench", n_items=30, seed=3,
                                   image_size=16)


def test_planted_scores_through_probe_eval(nb_dir: Path, tmp_path: Path) -> None:
    ds = load_naturalbench(nb_dir)
    s = planted(len(ds), 1)
    path = write_pair_scores(tmp_path / "planted.scores.jsonl", ds, s)
    _, _, rows = run_eval(EvalConfig(benchmark="naturalbench", out=tmp_path, scores=path, data_dir=nb_dir,
                                     bootstrap=20))
    got = {(r["subset"], r["metric"]): r["value"] for r in rows}
    types = np.array([it.meta["subset"] for it in ds])
    for subset, mask in (("yes_no", types == "yes_no"), ("multiple_choice", types == "multiple_choice"),
                         ("all", np.ones(len(ds), dtype=bool))):
        ref = get_scores(as_answers(s[mask]))
        for theirs, ours in NAMES.items():
            assert got[(subset, ours)] == pytest.approx(100 * ref[theirs], abs=1e-9)
    assert not any("bow=" in r["subset"] for r in rows)  # the texts differ by their answers: no slices


def test_eval_with_clip_then_from_its_scores(nb_dir: Path, tiny_clip: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, [
        "eval", "naturalbench", "--model", "clip", "--checkpoint", str(tiny_clip), "--data-dir", str(nb_dir),
        "--limit", "10", "--out", str(tmp_path), "--bootstrap", "30", "--quiet",
    ])
    assert result.exit_code == 0, result.output
    csv_path = tmp_path / "naturalbench" / "clip@bootstrap=30.csv"
    with open(csv_path, encoding="utf-8", newline="") as fh:
        rows = {(r["subset"], r["metric"]): r for r in csv.DictReader(fh)}
    assert rows[("all", "group_accuracy")]["n"] == "20"
    assert "the paper's G-Acc" in rows[("all", "group_accuracy")]["note"]
    manifest = json.loads((tmp_path / "naturalbench" / "manifest.json").read_text(encoding="utf-8"))
    entry = manifest["runs"]["clip@bootstrap=30"]
    assert entry["items_per_subset"] == {"yes_no": 10, "multiple_choice": 10}
    assert entry["inputs"]["dataset"]["fingerprint"] == load_naturalbench(nb_dir).fingerprint
    cfg = EvalConfig(benchmark="naturalbench", out=tmp_path / "again", scores=csv_path.with_suffix(".scores.jsonl"),
                     data_dir=nb_dir, limit=10, bootstrap=30)
    _, _, again = run_eval(cfg)
    for r in again:  # the scores round-trip through JSON text: the same floats, the same answers
        assert float(rows[(r["subset"], r["metric"])]["value"]) == pytest.approx(r["value"], abs=1e-9)


def test_models_file_table(nb_dir: Path, tiny_clip: Path, tmp_path: Path) -> None:
    models = tmp_path / "models.toml"
    models.write_text(f'[models.tiny]\nrow = "Tiny CLIP"\nmodel = "clip"\ncheckpoint = "{tiny_clip}"\n\n'
                      '[models.length]\nmodel = "caption-length"\n', encoding="utf-8")
    result = CliRunner().invoke(app, [
        "eval", "naturalbench", "--models", str(models), "--data-dir", str(nb_dir), "--limit", "3",
        "--out", str(tmp_path / "out"), "--bootstrap", "0", "--device", "cpu", "--quiet"])
    assert result.exit_code == 0, result.output
    with open(tmp_path / "out" / "naturalbench" / "models.table.csv", encoding="utf-8", newline="") as fh:
        table = list(csv.DictReader(fh))
    assert [(r["name"], r["metric"]) for r in table if r["metric"] == "group_accuracy"] == [
        ("tiny", "group_accuracy"), ("length", "group_accuracy")]
    assert {"yes_no", "multiple_choice", "all"} <= set(table[0])
    # caption length: both answers of a question differ in length by a fixed amount, so the answer is
    # the same on both images and no question is right on both (Q-Acc and G-Acc 0)
    length = {r["metric"]: float(r["all"]) for r in table if r["name"] == "length"}
    assert length["question_accuracy"] == 0.0 and length["group_accuracy"] == 0.0
