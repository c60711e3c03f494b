"""Per-item score files, score matrices and the importers of winoground-scores and recall."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from vlprobe.cli import app
from vlprobe.experiments.recall import RecallConfig, run_recall
from vlprobe.experiments.winoground_scores import (
    WinogroundScoresConfig,
    read_winoground_scores,
    run_winoground_scores,
)
from vlprobe.runs.score_files import (
    caption_foil_logits,
    caption_foil_scores,
    read_item_scores,
    read_score_matrix,
    winoground_from_item_scores,
    winoground_from_matrix,
    write_item_scores,
)
from vlprobe.stats.metrics import recall_at_k, winoground_outcomes


def winoground_matrix(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(2 * n, 2 * n))


def official_lines(s: np.ndarray) -> list[str]:
    return [json.dumps({"label": f"{i}_c{k}_i{j}", "score": float(s[i, k, j])})
            for i in range(len(s)) for k in (0, 1) for j in (0, 1)]


def csv_values(path: Path) -> dict[tuple[str, str], float]:
    with open(path, encoding="utf-8", newline="") as fh:
        return {(r["subset"], r["metric"]): float(r["value"]) for r in csv.DictReader(fh)}


# --- vlprobe's own format ---------------------------------------------------------------------------


def test_item_scores_round_trip(tmp_path: Path) -> None:
    path = write_item_scores(
        tmp_path / "s.jsonl", ["sugarcrepe/swap_obj/3"] * 2, ["sugarcrepe/swap_obj/3/i0"] * 2,
        ["sugarcrepe/swap_obj/3/c0", "sugarcrepe/swap_obj/3/c1"], [0.25, -1.5],
    )
    got = read_item_scores(path)
    assert got.item.tolist() == ["sugarcrepe/swap_obj/3"] * 2
    assert got.score.tolist() == [0.25, -1.5]
    ids, pos, neg = caption_foil_scores(got)
    assert ids == ["sugarcrepe/swap_obj/3"] and pos.tolist() == [0.25] and neg.tolist() == [-1.5]


def test_item_scores_keep_the_logits(tmp_path: Path) -> None:
    ids = ["valse/existence/1", "valse/existence/2"]
    logits = np.array([[0.5, 2.0], [1.0, -1.0], [0.25, 0.25], [-3.0, 4.5]])
    path = write_item_scores(tmp_path / "s.jsonl", [i for i in ids for _ in (0, 1)], [f"{i}/i0" for i in ids for _ in (0, 1)],
                             [f"{i}/c{k}" for i in ids for k in (0, 1)], [0.8, 0.1, 0.5, 0.9], logits)
    got = read_item_scores(path)
    np.testing.assert_array_equal(got.logits, logits)  # JSON keeps every float64 exactly
    order, _, _ = caption_foil_scores(got)
    caption, foil = caption_foil_logits(got, order)
    np.testing.assert_array_equal(caption, logits[[0, 2]])
    np.testing.assert_array_equal(foil, logits[[1, 3]])
    plain = write_item_scores(tmp_path / "p.jsonl", ids[:1] * 2, [f"{ids[0]}/i0"] * 2, [f"{ids[0]}/c0", f"{ids[0]}/c1"], [1, 2])
    assert read_item_scores(plain).logits is None and caption_foil_logits(read_item_scores(plain), ids[:1]) is None
    with pytest.raises(ValueError, match="logits must have shape"):
        write_item_scores(tmp_path / "x.jsonl", ids[:1], [f"{ids[0]}/i0"], [f"{ids[0]}/c0"], [1.0], logits)


@pytest.mark.parametrize(
    ("lines", "match"),
    [
        (['{"item": "a", "image": "a/i0", "text": "a/c0", "score": 1, "logits": [1, 2]}',
          '{"item": "a", "image": "a/i0", "text": "a/c1", "score": 1}'], "every line or on none"),
        (['{"item": "a", "image": "a/i0", "text": "a/c0", "score": 1}',
          '{"item": "a", "image": "a/i0", "text": "a/c1", "score": 1, "logits": [1, 2]}'], "every line or on none"),
        (['{"item": "a", "image": "a/i0", "text": "a/c0", "score": 1, "logits": [1]}'], "two finite numbers"),
        (['{"item": "a", "image": "a/i0", "text": "a/c0", "score": 1, "logits": [1, NaN]}'], "two finite numbers"),
        (['{"item": "a", "image": "a/i0", "text": "a/c0"}'], "not a vlprobe score record"),
        (['{"item": "a", "image": "a/i0", "text": "a/c0", "score": "x"}'], "finite number"),
        (['{"item": "a", "image": "a/i0", "text": "a/c0", "score": NaN}'], "finite number"),
        (['{"item": "a", "image": "a/i0", "text": "a/c0", "score": 1}'] * 2, "repeats the pair"),
        (["not json"], "not valid JSON"),
        ([""], "holds no scores"),
    ],
)
def test_item_scores_bad_files(tmp_path: Path, lines: list[str], match: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=match):
        read_item_scores(path)


def test_caption_foil_scores_missing_and_foreign(tmp_path: Path) -> None:
    path = write_item_scores(tmp_path / "s.jsonl", ["v/x/1"], ["v/x/1/i0"], ["v/x/1/c0"], [1.0])
    with pytest.raises(ValueError, match="missing the score of text v/x/1/c1"):
        caption_foil_scores(read_item_scores(path))
    path = write_item_scores(tmp_path / "t.jsonl", ["v/x/1"], ["v/x/2/i0"], ["v/x/1/c0"], [1.0])
    with pytest.raises(ValueError, match="expected image v/x/1/i0"):
        caption_foil_scores(read_item_scores(path))
    path = write_item_scores(tmp_path / "u.jsonl", ["v/x/1"] * 2, ["v/x/1/i0"] * 2, ["v/x/1/c0", "v/x/1/c1"], [1, 2])
    with pytest.raises(ValueError, match="not in the dataset"):
        caption_foil_scores(read_item_scores(path), items=["v/x/2"])


# --- Winoground importers --------------------------------------------------------------------------


def test_winoground_three_formats_agree(tmp_path: Path) -> None:
    m = winoground_matrix(30, seed=0)
    s = winoground_from_matrix(m)
    assert s.shape == (30, 2, 2) and s[4, 1, 0] == m[9, 8]  # caption 2*4+1, image 2*4
    (tmp_path / "official.jsonl").write_text("\n".join(official_lines(s)) + "\n", encoding="utf-8")
    np.save(tmp_path / "matrix.npy", m)
    np.savez(tmp_path / "matrix.npz", scores=m, other=np.zeros(2))
    results = {}
    for name in ("official.jsonl", "matrix.npy", "matrix.npz"):
        ids, got = read_winoground_scores(tmp_path / name)
        assert ids == list(range(30))
        np.testing.assert_allclose(got, s)
        _, _, rows = run_winoground_scores(WinogroundScoresConfig(out=tmp_path / name.replace(".", "-"),
                                                                  scores=tmp_path / name, name="m"))
        results[name] = {(r["subset"], r["metric"]): r["value"] for r in rows}
    # assert_equal: NaN equals NaN (the matching score is undefined for these signed scores)
    np.testing.assert_equal(results["official.jsonl"], results["matrix.npy"])
    np.testing.assert_equal(results["official.jsonl"], results["matrix.npz"])
    # The run saved its per-item scores; they reproduce every value.
    saved = tmp_path / "official-jsonl" / "winoground-scores" / "m.scores.jsonl"
    ids, again = winoground_from_item_scores(read_item_scores(saved))
    np.testing.assert_allclose(again, s)
    _, _, rows = run_winoground_scores(WinogroundScoresConfig(out=tmp_path / "again", scores=saved, name="m"))
    np.testing.assert_equal({(r["subset"], r["metric"]): r["value"] for r in rows}, results["official.jsonl"])
    outcomes = winoground_outcomes(s)
    assert results["matrix.npy"][("all", "group")] == pytest.approx(100 * outcomes["group"].mean())
    low, high = results["matrix.npy"][("all", "group.ci95_low")], results["matrix.npy"][("all", "group.ci95_high")]
    assert low <= 100 * outcomes["group"].mean() <= high


def test_winoground_item_scores_missing_pair(tmp_path: Path) -> None:
    path = write_item_scores(tmp_path / "s.jsonl", ["winoground/0"] * 3, ["winoground/0/i0", "winoground/0/i1", "winoground/0/i0"],
                             ["winoground/0/c0", "winoground/0/c1", "winoground/0/c1"], [1, 2, 3])
    with pytest.raises(ValueError, match="lacks 1 of its 4 scores"):
        winoground_from_item_scores(read_item_scores(path))


# --- matrices ----------------------------------------------------------------------------------------


def test_read_score_matrix_shapes_and_errors(tmp_path: Path) -> None:
    np.save(tmp_path / "ok.npy", np.zeros((4, 4), dtype=np.float32))
    assert read_score_matrix(tmp_path / "ok.npy").dtype == np.float32
    np.save(tmp_path / "rect.npy", np.zeros((4, 6)))
    with pytest.raises(ValueError, match=r"shape \(4, 6\).*square"):
        read_score_matrix(tmp_path / "rect.npy")
    assert read_score_matrix(tmp_path / "rect.npy", shape=(4, 6)).shape == (4, 6)
    with pytest.raises(ValueError, match="expected a caption x image matrix, 6 x 4"):
        read_score_matrix(tmp_path / "rect.npy", shape=(6, 4))
    np.savez(tmp_path / "two.npz", a=np.zeros((2, 2)), b=np.zeros((2, 2)))
    with pytest.raises(ValueError, match="name the score matrix 'scores'"):
        read_score_matrix(tmp_path / "two.npz")
    np.save(tmp_path / "nan.npy", np.full((2, 2), np.nan))
    with pytest.raises(ValueError, match="NaN"):
        read_score_matrix(tmp_path / "nan.npy")
    (tmp_path / "m.txt").write_text("1 2\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"not a \.npy or \.npz"):
        read_score_matrix(tmp_path / "m.txt")
    with pytest.raises(ValueError, match="2N x 2N"):
        winoground_from_matrix(np.zeros((3, 3)))


def test_recall_from_matrix_equals_recall_at_k(tmp_path: Path) -> None:
    m = winoground_matrix(20, seed=1).astype(np.float32)
    np.save(tmp_path / "m.npy", m)
    csv_path, manifest_path, rows = run_recall(RecallConfig(out=tmp_path / "o", scores=tmp_path / "m.npy"))
    values = {(r["subset"], r["metric"]): r["value"] for r in rows}
    for direction, mat in (("t2i", m), ("i2t", m.T)):
        for k, v in recall_at_k(mat, np.arange(40)).items():
            assert values[(direction, f"recall@{k}")] == pytest.approx(100 * v)
    np.testing.assert_array_equal(np.load(csv_path.with_suffix(".scores.npy")), m)
    run = json.loads(manifest_path.read_text(encoding="utf-8"))["runs"]["m"]
    assert run["inputs"]["scores"]["path"] == str(tmp_path / "m.npy")


# --- CLI: one-line errors ------------------------------------------------------------------------


def test_cli_scores_inputs(tmp_path: Path, one_error_line: Callable[..., str],
                           monkeypatch: pytest.MonkeyPatch) -> None:
    m = winoground_matrix(10, seed=2)
    np.save(tmp_path / "m.npy", m)
    runner = CliRunner()
    ok = runner.invoke(app, ["run", "winoground-scores", "--scores", str(tmp_path / "m.npy"), "--out", str(tmp_path / "o")])
    assert ok.exit_code == 0, ok.output
    assert "[" in ok.stdout and "(n=10)" in ok.stdout  # value with its interval
    ok = runner.invoke(app, ["run", "recall", "--scores", str(tmp_path / "m.npy"), "--out", str(tmp_path / "o")])
    assert ok.exit_code == 0, ok.output
    assert csv_values(tmp_path / "o" / "recall" / "m.csv")[("t2i", "recall@1")] == pytest.approx(
        100 * recall_at_k(m, np.arange(20), ks=(1,))[1])

    np.save(tmp_path / "rect.npy", np.zeros((20, 18)))
    for cmd in (["run", "recall"], ["run", "winoground-scores"]):
        bad = runner.invoke(app, [*cmd, "--scores", str(tmp_path / "rect.npy"), "--out", str(tmp_path / "o")])
        one_error_line(bad, "rect.npy", "shape (20, 18)")
    np.save(tmp_path / "odd.npy", np.zeros((3, 3)))
    one_error_line(runner.invoke(app, ["run", "winoground-scores", "--scores", str(tmp_path / "odd.npy"), "--out", str(tmp_path / "o")]),
                   "2N x 2N")
    lines = official_lines(winoground_from_matrix(m))
    (tmp_path / "dup.jsonl").write_text("\n".join([*lines, lines[5]]) + "\n", encoding="utf-8")
    one_error_line(runner.invoke(app, ["run", "winoground-scores", "--scores", str(tmp_path / "dup.jsonl"), "--out", str(tmp_path / "o")]),
                   "repeats label")
    (tmp_path / "missing.jsonl").write_text("\n".join(lines[:-1]) + "\n", encoding="utf-8")
    one_error_line(runner.invoke(app, ["run", "winoground-scores", "--scores", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "o")]),
                   "3 of 4 scores for id 9")
    # neither a cache nor scores, and no caches/ folder in the working directory (a tmp folder)
    monkeypatch.chdir(tmp_path)
    one_error_line(runner.invoke(app, ["run", "recall", "--out", str(tmp_path / "o")]), "cache: not given", "or --scores FILE")
