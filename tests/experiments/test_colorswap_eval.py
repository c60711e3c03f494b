"""`probe eval colorswap`: Winoground's text, image and group scores (which ColorSwap follows) per
split against a literal re-implementation on planted scores with ties, and a tiny CLIP end to end."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.experiments.helpers import write_pair_scores
from vlprobe.cli import app
from vlprobe.data.benchmark_fixtures import write_benchmark_fixture
from vlprobe.data.colorswap import load_colorswap
from vlprobe.experiments.benchmark_eval import EvalConfig, run_eval


def winoground_scores(result: dict[str, float]) -> tuple[bool, bool, bool]:
    """Winoground's text/image/group correctness of one example (its paper's definitions, as code)."""
    text = result["c0_i0"] > result["c1_i0"] and result["c1_i1"] > result["c0_i1"]
    image = result["c0_i0"] > result["c0_i1"] and result["c1_i1"] > result["c1_i0"]
    return text, image, text and image


@pytest.fixture(scope="module")
def cs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_benchmark_fixture(tmp_path_factory.mktemp("cs-eval") / "cs", "colorswap", n_items=40, seed=4,
                                   image_size=16)


def test_planted_scores_with_ties(cs_dir: Path, tmp_path: Path) -> None:
    ds = load_colorswap(cs_dir)
    s = np.random.default_rng(1).integers(0, 3, size=(len(ds), 2, 2)).astype(np.float64) / 4  # many ties
    path = write_pair_scores(tmp_path / "planted.scores.jsonl", ds, s)
    _, _, rows = run_eval(EvalConfig(benchmark="colorswap", out=tmp_path, scores=path, data_dir=cs_dir, bootstrap=20))
    got = {(r["subset"], r["metric"]): r["value"] for r in rows}
    for split in ("test", "train"):
        picked = [winoground_scores({"c0_i0": m[0, 0], "c0_i1": m[0, 1], "c1_i0": m[1, 0], "c1_i1": m[1, 1]})
                  for it, m in zip(ds, s, strict=True) if it.meta["subset"] == split]
        for n, metric in enumerate(("text", "image", "group")):
            assert got[(split, metric)] == pytest.approx(100 * np.mean([p[n] for p in picked]), abs=1e-9)
    assert not any(r["subset"] == "all" for r in rows)  # the splits are not pooled


def test_eval_with_clip(cs_dir: Path, tiny_clip: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, [
        "eval", "colorswap", "--model", "clip", "--checkpoint", str(tiny_clip), "--data-dir", str(cs_dir),
        "--subsets", "test", "--limit", "6", "--out", str(tmp_path), "--bootstrap", "30", "--quiet",
    ])
    assert result.exit_code == 0, result.output
    with open(tmp_path / "colorswap" / "clip@bootstrap=30.csv", encoding="utf-8", newline="") as fh:
        rows = {(r["subset"], r["metric"]): r for r in csv.DictReader(fh)}
    assert rows[("test", "group")]["n"] == "6" and "main ITM metric" in rows[("test", "group")]["note"]
    assert rows[("test/bow=same", "text")]["n"] == "6"  # swapped colour words: the same words
