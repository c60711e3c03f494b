"""`probe run bias-gap`: SugarCrepe's bias analysis with tiny Vera and grammar models on the ARO
fixture (gaps equal to the scorers' own scores, planted ties, the hardest negative of the order
subsets), the comparison with a `probe eval` run, the figure, refused inputs, and the real
SugarCrepe files (the pipeline real, the tiny models' numbers meaningless)."""

from __future__ import annotations

import csv
import json
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from vlprobe.cli import app
from vlprobe.data.aro import load_aro
from vlprobe.data.benchmark_fixtures import write_benchmark_fixture
from vlprobe.experiments.benchmark_eval import EvalConfig, run_eval
from vlprobe.experiments.bias_gap import BiasGapConfig, item_gaps, run_bias_gap
from vlprobe.extract.models.blind import GrammarScorer
from vlprobe.extract.models.vera import VeraScorer
from vlprobe.fixtures.text_models import write_tiny_vera
from vlprobe.runs.score_files import read_item_scores

# ARO's order subsets tag captions: the fixture's stand-in tagger instead of spaCy (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("fake_spacy")


@pytest.fixture(scope="module")
def aro_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_benchmark_fixture(tmp_path_factory.mktemp("bias-aro") / "aro", "aro", n_items=6, seed=2)


@pytest.fixture(scope="module")
def tiny_vera(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_vera(tmp_path_factory.mktemp("models") / "tiny-vera", 0)


def roots(aro: Path) -> tuple[str, ...]:
    """ARO's image roots, which hold the order subsets' Karpathy files (the authors' layout)."""
    return (f"coco={aro / 'coco'}", f"flickr30k={aro / 'flickr30k'}")


def scorers_args(vera: Path, grammar: Path) -> tuple[str, ...]:
    return (f"vera={vera}", f"grammar={grammar}")


def read_rows(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def test_item_gaps_hardest_each_and_ties() -> None:
    s = np.array([0.6, 0.2, 0.7, 0.6])  # one positive, three negatives; the third ties it
    np.testing.assert_allclose(item_gaps(s, 1), [-0.1])
    np.testing.assert_allclose(item_gaps(s, 1, "each"), [0.4, -0.1, 0.0])
    assert item_gaps(np.array([0.5, 0.5]), 1)[0] == 0.0  # a tie: gap 0, not right
    # two positives: the worse one against the best negative; each pair positive-major
    np.testing.assert_allclose(item_gaps(np.array([0.9, 0.4, 0.5, 0.1]), 2), [-0.1])
    np.testing.assert_allclose(item_gaps(np.array([0.9, 0.4, 0.5, 0.1]), 2, "each"), [0.4, 0.8, -0.1, 0.3])


def test_bias_gap_on_aro_with_tiny_vera_and_grammar(aro_dir: Path, tiny_vera: Path, tiny_bert_classifier: Path,
                                                    tmp_path: Path) -> None:
    cfg = BiasGapConfig(dataset="aro", data_dir=aro_dir, image_root=roots(aro_dir), out=tmp_path,
                        checkpoints=scorers_args(tiny_vera, tiny_bert_classifier), bootstrap=50, device="cpu",
                        progress=False)
    csv_path, _, rows = run_bias_gap(cfg)
    assert csv_path == tmp_path / "bias-gap" / "aro@bootstrap=50.csv"
    ds = load_aro(aro_dir, image_root=roots(aro_dir))
    vera = VeraScorer.load(str(tiny_vera), device="cpu")
    grammar = GrammarScorer.load(str(tiny_bert_classifier), device="cpu")
    gaps = {(r["probe"], r["subset"].split(":", 1)[1]): float(r["value"])
            for r in read_rows(csv_path.with_suffix(".items.csv")) if r["metric"] == "gap"}
    got = {(r["probe"], r["subset"], r["metric"]): r for r in rows}
    for name, scorer in (("vera", vera), ("grammar", grammar)):
        right: dict[str, list[bool]] = {}
        for it in ds:
            s = scorer.score_texts([t.text for t in it.captions])
            want = s[0] - s[1:].max()  # the hardest negative (four of them on the order subsets)
            # batched vs one item at a time, right-padded: 1e-5 on probabilities (see test_vera)
            assert gaps[(name, it.id)] == pytest.approx(want, abs=1e-5)
            right.setdefault(it.meta["subset"], []).append(gaps[(name, it.id)] > 0)
        for subset, hits in right.items():
            row = got[(name, subset, "gap_positive")]
            assert row["value"] == pytest.approx(100 * np.mean(hits)) and row["n"] == len(hits)
            assert (name, subset, "gap_positive.ci95_low") in got and (name, subset, "gap_median") in got
        assert got[(name, "all", "gap_positive")]["n"] == len(ds)
        # beside the gaps, ARO's own metrics as probe eval computes them
        assert (name, "vg_relation", "macro_accuracy") in got and (name, "coco_order", "precision_at_1") in got
        scores = read_item_scores(csv_path.with_name(f"aro@bootstrap=50.{name}.scores.jsonl"))
        assert len(scores) == sum(len(it.captions) for it in ds)
    manifest = json.loads((tmp_path / "bias-gap" / "manifest.json").read_text(encoding="utf-8"))
    entry = manifest["runs"]["aro@bootstrap=50"]
    assert entry["chance_percent"]["vg_relation"] == 50.0 and entry["chance_percent"]["coco_order"] == 20.0
    # dtype auto: each scorer as its reference code loads it (Vera bfloat16, as SugarCrepe's
    # text_model_eval.py), recorded as what it resolved to, never "auto"
    assert entry["config"]["dtype"] == ["vera=bfloat16", "grammar=float32"]
    assert {n: entry["scorers"][n]["dtype"] for n in ("vera", "grammar")} == {"vera": "bfloat16", "grammar": "float32"}
    assert {r["dtype"] for r in read_rows(csv_path)} == {"vera=bfloat16+grammar=float32"}
    hist = entry["histograms"]["vera"]["coco_order"]
    assert sum(hist["counts"]) == 30 and hist["edges"][0] == -1.0 and len(hist["counts"]) == 20
    assert entry["inputs"]["dataset"]["fingerprint"] == ds.fingerprint
    assert entry["units"]["gap"].startswith("the blind scorer's own score")
    # Figure 1 (histograms per subset) and Figure 2 (share right) through probe plot and probe report
    result = CliRunner().invoke(app, ["plot", str(csv_path), "--out", str(tmp_path / "gaps.png")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "gaps.png").stat().st_size > 10_000
    result = CliRunner().invoke(app, ["report", str(tmp_path), "--out", str(tmp_path / "report.html")])
    assert result.exit_code == 0, result.output
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "bias-gap" in page and "No figure" not in page


def test_each_pair_and_a_vlm_run_compared(aro_dir: Path, tiny_vera: Path, tmp_path: Path) -> None:
    _, _, eval_rows = run_eval(EvalConfig(benchmark="aro", out=tmp_path, model="caption-length", data_dir=aro_dir,
                                          image_root=roots(aro_dir), subsets="vg_relation,coco_order", bootstrap=20,
                                          progress=False))
    eval_csv = tmp_path / "aro" / "caption-length@bootstrap=20.csv"
    result = CliRunner().invoke(app, [
        "run", "bias-gap", "--dataset", "aro", "--data-dir", str(aro_dir), "--subsets", "vg_relation,coco_order",
        *[a for r in roots(aro_dir) for a in ("--image-root", r)],
        "--scorers", "vera,caption-length", "--checkpoint", f"vera={tiny_vera}", "--negatives", "each",
        "--vlm-result", str(eval_csv), "--out", str(tmp_path), "--bootstrap", "20", "--device", "cpu", "--quiet"])
    assert result.exit_code == 0, result.output
    assert "vlm:caption-length" in result.stdout
    out = tmp_path / "bias-gap" / "aro@negatives=each,bootstrap=20.csv"
    rows = {(r["probe"], r["subset"], r["metric"]): r for r in read_rows(out)}
    want = {(r["subset"], r["metric"]): r["value"] for r in eval_rows}
    assert float(rows[("vlm:caption-length", "vg_relation", "macro_accuracy")]["value"]) == pytest.approx(
        want[("vg_relation", "macro_accuracy")], nan_ok=True)
    assert float(rows[("vlm:caption-length", "coco_order", "precision_at_1")]["value"]) == pytest.approx(
        want[("coco_order", "precision_at_1")])
    # each: 4 pairs per coco_order item (30 items), one per vg_relation item
    assert rows[("vera", "coco_order", "gap_positive")]["n"] == "120"
    assert rows[("vera", "vg_relation", "gap_positive")]["n"] == "6"
    items = [r for r in read_rows(out.with_suffix(".items.csv")) if r["metric"] == "gap"]
    assert {r["subset"].rsplit("/", 1)[-1] for r in items if r["subset"].startswith("coco_order:")} == {"c1", "c2", "c3", "c4"}
    # caption length: minus the characters; each gap is the length difference
    ds = load_aro(aro_dir, subsets="coco_order", image_root=roots(aro_dir))
    it = ds.items[0]
    gap = {r["subset"]: float(r["value"]) for r in items if r["probe"] == "caption-length"}
    assert gap[f"coco_order:{it.id}/c2"] == len(it.captions[2].text) - len(it.captions[0].text)
    manifest = json.loads((tmp_path / "bias-gap" / "manifest.json").read_text(encoding="utf-8"))
    entry = manifest["runs"]["aro@negatives=each,bootstrap=20"]
    assert entry["vlm_results"]["caption-length"]["same_dataset"] is True
    assert entry["chance_percent"]["coco_order"] == 50.0


def test_refused_inputs(aro_dir: Path, synthetic_dir: Path, tiny_clip: Path, tmp_path: Path,
                        one_error_line: Callable[..., str]) -> None:
    runner = CliRunner()
    base = ["run", "bias-gap", "--out", str(tmp_path), "--quiet"]
    one_error_line(runner.invoke(app, [*base, "--dataset", "winoground", "--data-dir", str(synthetic_dir),
                                       "--scorers", "caption-length"]),
                   "winoground item", "not one image with positive and negative captions")
    one_error_line(runner.invoke(app, [*base, "--dataset", "aro", "--data-dir", str(aro_dir), "--scorers", "clip"]),
                   "scorers: 'clip' reads images")
    one_error_line(runner.invoke(app, [*base, "--dataset", "aro", "--data-dir", str(aro_dir),
                                       "--scorers", "caption-length", "--checkpoint", f"vera={tiny_clip}"]),
                   "checkpoints: 'vera' is not one of the scorers")
    other = run_eval(EvalConfig(benchmark="sugarcrepe", out=tmp_path / "e", scores=_sugarcrepe_scores(tmp_path),
                                bootstrap=0))[0]
    one_error_line(runner.invoke(app, [*base, "--dataset", "aro", "--data-dir", str(aro_dir), "--subsets", "vg_relation",
                                       "--scorers", "caption-length", "--vlm-result", str(other)]),
                   "vlm_results:", "holds sugarcrepe results")
    one_error_line(runner.invoke(app, [*base, "--dataset", "aro", "--data-dir", str(tmp_path / "nowhere"),
                                       "--scorers", "caption-length"]), "data_dir")


def _sugarcrepe_scores(tmp_path: Path) -> Path:
    from vlprobe.runs.score_files import write_item_scores

    ids = [f"sugarcrepe/swap_obj/{k}" for k in range(3)]
    return write_item_scores(tmp_path / "sc.scores.jsonl", [i for i in ids for _ in (0, 1)],
                             [f"{i}/i0" for i in ids for _ in (0, 1)], [f"{i}/c{k}" for i in ids for k in (0, 1)],
                             [0.6, 0.4, 0.3, 0.7, 0.5, 0.5])


def test_on_the_real_sugarcrepe_files(sugarcrepe_dir: Path, tiny_vera: Path, tiny_bert_classifier: Path,
                                      tmp_path: Path) -> None:
    """The whole pipeline on SugarCrepe's own files (the first 8 items of each subset; tiny random
    scorers, so the numbers mean nothing)."""
    start = time.perf_counter()
    csv_path, manifest_path, rows = run_bias_gap(BiasGapConfig(
        dataset="sugarcrepe", data_dir=sugarcrepe_dir, out=tmp_path, limit=8, bootstrap=50, device="cpu",
        checkpoints=scorers_args(tiny_vera, tiny_bert_classifier), progress=False))
    elapsed = time.perf_counter() - start
    acc = {(r["probe"], r["subset"]): r for r in rows if r["metric"] == "accuracy"}
    subsets = ("replace_obj", "replace_att", "replace_rel", "swap_obj", "swap_att", "add_obj", "add_att")
    for scorer in ("vera", "grammar"):
        assert all(acc[(scorer, s)]["n"] == 8 for s in subsets)
        assert acc[(scorer, "all")]["n"] == 56
    items = [r for r in read_rows(csv_path.with_suffix(".items.csv")) if r["metric"] == "gap"]
    assert len(items) == 2 * 56 and {r["subset"].split(":")[0] for r in items} == set(subsets)
    entry = json.loads(manifest_path.read_text(encoding="utf-8"))["runs"][csv_path.stem]
    assert entry["items_per_subset"] == dict.fromkeys(subsets, 8)
    assert all(sum(entry["histograms"][s]["all"]["counts"]) == 56 for s in ("vera", "grammar"))
    assert elapsed < 120, elapsed
