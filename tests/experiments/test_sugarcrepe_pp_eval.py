"""`probe eval sugarcrepe-pp`: ITT, Image-P1-Neg and Image-P2-Neg per file against a literal
re-implementation of the authors' loop (VLMs/test_Variants_CLIP.py) on planted scores with ties,
and a tiny CLIP end to end."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from vlprobe.cli import app
from vlprobe.data.benchmark_fixtures import write_benchmark_fixture
from vlprobe.data.sugarcrepe_pp import SUGARCREPE_PP_SUBSETS, load_sugarcrepe_pp
from vlprobe.experiments.benchmark_eval import EvalConfig, run_eval
from vlprobe.runs.score_files import write_item_scores


def authors_loop(samples: list[tuple[float, float, float]]) -> dict[str, float]:
    """The counting loop of the authors' test scripts, on (cos_p1, cos_p2, cos_neg) per sample."""
    total = 0
    correct_img_p1 = 0
    correct_img_p2 = 0
    correct_full = 0
    for cos_p1, cos_p2, cos_neg in samples:
        total += 1
        if cos_p1 > cos_neg and cos_p2 > cos_neg:
            correct_full += 1
        if cos_p1 > cos_neg:
            correct_img_p1 += 1
        if cos_p2 > cos_neg:
            correct_img_p2 += 1
    return {"itt": float(correct_full) / float(total), "image_p1_neg": float(correct_img_p1) / float(total),
            "image_p2_neg": float(correct_img_p2) / float(total)}


@pytest.fixture(scope="module")
def pp_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_benchmark_fixture(tmp_path_factory.mktemp("scpp-eval") / "scpp", "sugarcrepe-pp", n_items=30,
                                   seed=7, image_size=16)


def test_planted_scores_with_ties_equal_the_authors_loop(pp_dir: Path, tmp_path: Path) -> None:
    ds = load_sugarcrepe_pp(pp_dir)
    s = np.random.default_rng(2).integers(0, 3, size=(len(ds), 3)).astype(np.float64) / 4  # many ties
    items = [it.id for it in ds for _ in range(3)]
    images = [it.images[0].id for it in ds for _ in range(3)]
    texts = [t.id for it in ds for t in it.texts]
    path = write_item_scores(tmp_path / "planted.scores.jsonl", items, images, texts, s.ravel())
    _, _, rows = run_eval(EvalConfig(benchmark="sugarcrepe-pp", out=tmp_path, scores=path, data_dir=pp_dir,
                                     bootstrap=20))
    got = {(r["subset"], r["metric"]): r for r in rows}
    subsets = np.array([it.meta["subset"] for it in ds])
    for subset in SUGARCREPE_PP_SUBSETS:
        ref = authors_loop([tuple(v) for v in s[subsets == subset]])
        for metric, value in ref.items():
            assert got[(subset, metric)]["value"] == pytest.approx(100 * value, abs=1e-9)
        assert got[(subset, "itt")]["n"] == 30
    assert "the paper's ITT" in got[("swap_att", "itt")]["note"]
    assert any(got[(s_, "itt")]["value"] < got[(s_, "image_p1_neg")]["value"] for s_ in SUGARCREPE_PP_SUBSETS)


def test_eval_with_clip(pp_dir: Path, tiny_clip: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, [
        "eval", "sugarcrepe-pp", "--model", "clip", "--checkpoint", str(tiny_clip), "--data-dir", str(pp_dir),
        "--image-dir", str(pp_dir / "val2017"), "--subsets", "swap_obj,replace_rel", "--limit", "4",
        "--out", str(tmp_path), "--bootstrap", "30", "--quiet",
    ])
    assert result.exit_code == 0, result.output
    csv_path = tmp_path / "sugarcrepe-pp" / "clip@bootstrap=30.csv"
    with open(csv_path, encoding="utf-8", newline="") as fh:
        rows = {(r["subset"], r["metric"]): r for r in csv.DictReader(fh)}
    assert rows[("swap_obj", "itt")]["n"] == "4" and ("replace_rel", "itt.ci95_low") in rows
    cfg = EvalConfig(benchmark="sugarcrepe-pp", out=tmp_path / "again", scores=csv_path.with_suffix(".scores.jsonl"),
                     data_dir=pp_dir, subsets="swap_obj,replace_rel", limit=4, bootstrap=30)
    _, _, again = run_eval(cfg)
    for r in again:
        assert float(rows[(r["subset"], r["metric"])]["value"]) == pytest.approx(r["value"], abs=1e-9)
