"""SugarCrepe's adversarial refinement (vlprobe.experiments.refine)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from vlprobe.cli import app
from vlprobe.experiments.refine import RefineConfig, adversarial_refine, run_refine
from vlprobe.runs.score_files import write_item_scores


def biased_scores(n: int, seed: int) -> tuple[list[str], dict[str, tuple[np.ndarray, np.ndarray]]]:
    """Two blind scorers far from chance: A right on ~80% of items, B on ~25%; scores in [0, 1]."""
    rng = np.random.default_rng(seed)
    ids = [f"sugarcrepe/{('swap_obj', 'add_att', 'replace_rel')[i % 3]}/{i}" for i in range(n)]
    out = {}
    for name, p_right in (("a", 0.8), ("b", 0.25)):
        base = rng.uniform(0.1, 0.9, n)
        gap = rng.uniform(0.01, 0.5, n) * np.where(rng.random(n) < p_right, 1, -1)
        pos = np.clip(base + gap / 2, 0, 1)
        neg = np.clip(base - gap / 2, 0, 1)
        out[name] = (pos, neg)
    return ids, out


def write(path: Path, ids: list[str], pos: np.ndarray, neg: np.ndarray) -> Path:
    return write_item_scores(path, [i for i in ids for _ in (0, 1)], [f"{i}/i0" for i in ids for _ in (0, 1)],
                             [f"{i}/c{k}" for i in ids for k in (0, 1)], np.column_stack([pos, neg]).ravel())


def test_biased_scorers_end_at_chance(tmp_path: Path) -> None:
    ids, s = biased_scores(6000, seed=0)
    right = {k: pos > neg for k, (pos, neg) in s.items()}
    assert right["a"].mean() > 0.75 and right["b"].mean() < 0.3  # far from 50% before
    paths = {k: write(tmp_path / f"{k}.jsonl", ids, *v) for k, v in s.items()}
    out, manifest_path, result = run_refine(RefineConfig(scores_a=paths["a"], scores_b=paths["b"],
                                                         out=tmp_path / "keep.jsonl", seed=7))
    kept = result.kept
    assert len(kept) > 500
    for k in ("a", "b"):
        assert 100 * right[k][kept].mean() == pytest.approx(50, abs=1), k
    lines = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert [x["item"] for x in lines] == [ids[i] for i in kept]
    m = json.loads(manifest_path.read_text(encoding="utf-8"))
    assert manifest_path.name == "keep.manifest.json"
    assert m["items_kept"] == len(kept) and m["seeds"] == [7]
    assert m["accuracy_percent"]["scores_a"]["after"] == pytest.approx(100 * right["a"][kept].mean())
    assert m["inputs"]["scores_a"]["path"] == str(paths["a"])


def test_seeded_and_symmetric() -> None:
    rng = np.random.default_rng(1)
    a, b = rng.uniform(-1, 1, 3000), rng.uniform(-1, 1, 3000) * 0.5 + 0.3
    r1 = adversarial_refine(a, b, seed=3)
    np.testing.assert_array_equal(r1.kept, adversarial_refine(a, b, seed=3).kept)
    r2 = adversarial_refine(a, b, seed=4)
    assert len(r2.kept) == len(r1.kept) and not np.array_equal(r1.kept, r2.kept)  # same cell sizes, other draws
    ka, kb = a[r1.kept], b[r1.kept]
    assert (ka > 0).sum() == (ka < 0).sum() and (kb > 0).sum() == (kb < 0).sum()


def test_axes_zero_gaps_and_unit_gaps() -> None:
    # both zero: kept; on an axis: balanced in 1-D bins; |gap| = 1 falls into the outermost bin.
    a = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.55, -0.52, 1.0, -1.0, 1.0, 0.3, -0.3])
    b = np.array([0.0, 0.35, -0.31, 0.33, 1.0, 0.0, 0.0, 0.2, -0.2, -1.0, 0.9, 0.6])
    r = adversarial_refine(a, b, grid=10, axis_bins=10, seed=0)
    kept = set(r.kept.tolist())
    assert 0 in kept                                   # both gaps zero
    assert 4 not in kept                               # b = 1 on the a = 0 axis: its bin (-10) is empty
    assert len(kept & {1, 2, 3}) == 2 and 2 in kept    # bin +3 (two items) vs bin -3 (one): one of the two kept
    assert {5, 6} <= kept                              # b = 0 axis: +5 vs -5
    assert {7, 8} <= kept                              # (1, .2) reflects to (-1, -.2): gap 1 has a bin
    assert not kept & {9, 10, 11}                      # partners empty
    assert r.steps["both_zero"] == {"items": 1, "kept": 1}
    assert r.steps["axis_a_zero"] == {"items": 4, "kept": 2}
    assert r.steps["axis_b_zero"] == {"items": 2, "kept": 2}


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"grid": 7}, "grid must be an even integer"),
    ({"axis_bins": 0}, "axis_bins"),
])
def test_bad_parameters(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        adversarial_refine(np.zeros(2), np.zeros(2), **kwargs)
    with pytest.raises(ValueError, match=r"gap_b must lie in \[-1, 1\]"):
        adversarial_refine(np.zeros(2), np.array([0.0, 1.5]))


def test_cli_refine_transforms_and_errors(tmp_path: Path, one_error_line: Callable[..., str]) -> None:
    ids, s = biased_scores(3000, seed=2)
    a = write(tmp_path / "a.jsonl", ids, *s["a"])
    logp = write(tmp_path / "lm.jsonl", ids, np.log(0.99 * s["b"][0] + 1e-3), np.log(0.99 * s["b"][1] + 1e-3))  # like blind-lm
    runner = CliRunner()
    args = ["refine", "--scores-a", str(a), "--scores-b", str(logp), "--out", str(tmp_path / "k.jsonl"), "--seed", "1"]
    one_error_line(runner.invoke(app, args), "scores_b", "outside [0, 1]", "--transform-b exp")
    res = runner.invoke(app, [*args, "--transform-b", "exp"])
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("kept ") and "on the kept items" in res.stdout
    one_error_line(runner.invoke(app, [*args, "--transform-b", "log"]), "transform_b", "none, exp, sigmoid, rank")
    other = write(tmp_path / "other.jsonl", ids[:-1], s["a"][0][:-1], s["a"][1][:-1])
    one_error_line(runner.invoke(app, ["refine", "--scores-a", str(a), "--scores-b", str(other), "--out", str(tmp_path / "k.jsonl")]),
                   "different items")
    one_error_line(runner.invoke(app, ["refine", "--scores-a", str(a), "--scores-b", str(a), "--out", str(tmp_path / "k.jsonl"),
                                       "--grid", "9"]), "grid must be an even integer")
