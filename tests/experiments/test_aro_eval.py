"""`probe eval aro`: a tiny CLIP on the ARO fixture (crops scored, four order perturbations), the same rows
from the saved scores, and planted scores whose macro accuracy is known."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from vlprobe.cli import app
from vlprobe.data.aro import load_aro
from vlprobe.data.benchmark_fixtures import write_benchmark_fixture
from vlprobe.experiments.benchmark_eval import EvalConfig, run_eval
from vlprobe.runs.score_files import read_item_scores, write_item_scores

# ARO's order subsets tag captions: the fixture's stand-in tagger instead of spaCy (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("fake_spacy")


@pytest.fixture(scope="module")
def aro_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_benchmark_fixture(tmp_path_factory.mktemp("aro-eval") / "aro", "aro", n_items=4, seed=1)


def rows_of(path: Path) -> dict[tuple[str, str], dict[str, str]]:
    with open(path, encoding="utf-8", newline="") as fh:
        return {(r["subset"], r["metric"]): r for r in csv.DictReader(fh)}


def test_eval_aro_with_clip_then_from_its_scores(aro_dir: Path, tiny_clip: Path, tmp_path: Path) -> None:
    roots = [f"coco={aro_dir / 'coco'}", f"flickr30k={aro_dir / 'flickr30k'}"]
    result = CliRunner().invoke(app, [
        "eval", "aro", "--model", "clip", "--checkpoint", str(tiny_clip), "--data-dir", str(aro_dir),
        *[a for r in roots for a in ("--image-root", r)], "--out", str(tmp_path), "--bootstrap", "50", "--quiet",
    ])
    assert result.exit_code == 0, result.output
    csv_path = tmp_path / "aro" / "clip@bootstrap=50.csv"
    rows = rows_of(csv_path)
    assert {s for s, _ in rows} >= {"vg_relation", "vg_attribution", "coco_order", "flickr30k_order",
                                    "vg_relation/relation=on", "coco_order/bow=same"}
    assert rows[("coco_order", "precision_at_1")]["n"] == "20"
    assert "a tie goes to the caption" in rows[("coco_order", "precision_at_1")]["note"]
    assert "the paper's number" in rows[("vg_relation", "macro_accuracy")]["note"]
    assert "vg_relation/relation=on" not in result.output  # per-relation rows: in the CSV only
    scores = read_item_scores(csv_path.with_suffix(".scores.jsonl"))
    assert len(scores) == 4 * 2 * 2 + 20 * 5 * 2
    manifest = json.loads((tmp_path / "aro" / "manifest.json").read_text(encoding="utf-8"))
    entry = manifest["runs"]["clip@bootstrap=50"]
    ds = load_aro(aro_dir, image_root=roots)
    assert entry["inputs"]["dataset"]["fingerprint"] == ds.fingerprint
    assert entry["items_per_subset"] == {"vg_relation": 4, "vg_attribution": 4, "coco_order": 20, "flickr30k_order": 20}
    assert entry["config"]["order_seed"] == 0 and entry["bow_slices"]["items"]["same"] == 48
    # the same metrics from the saved scores (same items, same bootstrap)
    cfg = EvalConfig(benchmark="aro", out=tmp_path / "again", scores=csv_path.with_suffix(".scores.jsonl"),
                     data_dir=aro_dir, image_root=tuple(roots), bootstrap=50)
    _, _, again = run_eval(cfg)
    for r in again:
        assert float(rows[(r["subset"], r["metric"])]["value"]) == pytest.approx(r["value"], abs=1e-9, nan_ok=True)


def test_planted_scores_give_the_macro_accuracy(aro_dir: Path, tmp_path: Path) -> None:
    ds = load_aro(aro_dir, subsets="vg_relation")
    relations = [it.tags["relation"][0] for it in ds]
    # item k: right iff k is even; item 1 a tie (wrong)
    items, images, texts, values = [], [], [], []
    for k, it in enumerate(ds):
        pos, neg = (1.0, 0.0) if k % 2 == 0 else (0.0, 1.0)
        if k == 1:
            pos = neg = 0.5
        for t, v in zip(it.texts, (pos, neg), strict=True):
            items.append(it.id)
            images.append(it.images[0].id)
            texts.append(t.id)
            values.append(v)
    path = write_item_scores(tmp_path / "planted.scores.jsonl", items, images, texts, values)
    _, _, rows = run_eval(EvalConfig(benchmark="aro", out=tmp_path, scores=path, data_dir=aro_dir,
                                     subsets="vg_relation", bootstrap=0))
    got = {(r["subset"], r["metric"]): r["value"] for r in rows}
    right = {rel: [] for rel in relations}
    for k, rel in enumerate(relations):
        right[rel].append(k % 2 == 0)
    kept = [np.mean(v) for rel, v in right.items() if rel not in ("near", "with")]
    assert got[("vg_relation", "macro_accuracy")] == pytest.approx(100 * np.mean(kept))
    assert got[("vg_relation", "accuracy")] == pytest.approx(100 * np.mean([k % 2 == 0 for k in range(len(ds))]))
    assert not any(".ci95_" in r["metric"] for r in rows)  # bootstrap 0: no intervals


def test_bad_score_files_and_options(aro_dir: Path, tmp_path: Path, one_error_line: Callable[..., str]) -> None:
    runner = CliRunner()
    ds = load_aro(aro_dir, subsets="vg_relation")
    it = ds.items[0]
    path = write_item_scores(tmp_path / "short.scores.jsonl", [it.id], [it.images[0].id], [it.texts[0].id], [1.0])
    result = runner.invoke(app, ["eval", "aro", "--scores", str(path), "--data-dir", str(aro_dir), "--subsets",
                                 "vg_relation", "--out", str(tmp_path / "o")])
    one_error_line(result, "scores: missing the score of text aro/vg_relation/0/c1")
    result = runner.invoke(app, ["eval", "aro", "--scores", str(path), "--out", str(tmp_path / "o")])
    one_error_line(result, "data_dir")
    result = runner.invoke(app, ["eval", "aro", "--scores", str(path), "--data-dir", str(aro_dir),
                                 "--threshold", "0.5", "--out", str(tmp_path / "o")])
    assert result.exit_code == 2  # valse's options are not aro's
