"""`probe run bias-gap` as SugarCrepe's Figure 1 draws it: every benchmark's blind bars and VLM bars
measured with the benchmark's own metric and tie rule, grouped as the figure (CREPE Atomic / Swap /
Negate, ARO's four tasks, VL-CheckList Object / Attribute / Relation), from `probe eval` CSVs;
SugarCrepe++'s two positives; hyphenated scorer names in --checkpoint."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from vlprobe.cli import app
from vlprobe.data.benchmark_fixtures import write_benchmark_fixture


@pytest.fixture(scope="module")
def aro_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_benchmark_fixture(tmp_path_factory.mktemp("fig1-aro") / "aro", "aro", n_items=6, seed=2)


def read_rows(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def test_a_hyphenated_scorer_takes_its_checkpoint(aro_dir: Path, tiny_gpt2: Path, tiny_bert_classifier: Path,
                                                   tmp_path: Path) -> None:
    """--checkpoint blind-lm=DIR names the scorer as registered (key_values turned `-` into `_` before)."""
    result = CliRunner().invoke(app, [
        "run", "bias-gap", "--dataset", "aro", "--data-dir", str(aro_dir), "--subsets", "vg_relation", "--scorers", "blind-lm,blind-grammar", "--checkpoint", f"blind-lm={tiny_gpt2}",
        "--checkpoint", f"blind-grammar={tiny_bert_classifier}", "--out", str(tmp_path), "--bootstrap", "0",
        "--device", "cpu", "--quiet"])
    assert result.exit_code == 0, result.output
    (csv_path,) = (tmp_path / "bias-gap").glob("*[!s].csv")
    assert {r["probe"] for r in read_rows(csv_path)} == {"blind-lm", "blind-grammar"}


def _eval_then_bias_gap(benchmark: str, data: Path, out: Path, *extra: str) -> tuple[dict[str, Any], dict[tuple[str, str, str], float]]:
    """`probe eval BENCHMARK --model caption-length`, then bias-gap with caption-length as the blind
    scorer and that eval CSV as the VLM run: one model as both bars. The run's manifest entry and
    its values by (probe, subset, metric)."""
    runner = CliRunner()
    common = ["--data-dir", str(data), *extra, "--out", str(out), "--bootstrap", "20", "--quiet"]
    result = runner.invoke(app, ["eval", benchmark, "--model", "caption-length", *common])
    assert result.exit_code == 0, result.output
    (eval_csv,) = (out / benchmark).glob("caption-length*.csv")
    result = runner.invoke(app, ["run", "bias-gap", "--dataset", benchmark, "--scorers", "caption-length",
                                 "--vlm-result", str(eval_csv), *common])
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "bias-gap" / "manifest.json").read_text(encoding="utf-8"))
    (entry,) = manifest["runs"].values()
    (csv_path,) = [p for p in (out / "bias-gap").glob("*.csv") if not p.name.endswith(".items.csv")]
    values = {(r["probe"], r["subset"], r["metric"]): float(r["value"]) for r in read_rows(csv_path)}
    return entry, values


def _both_bars(entry: dict[str, Any], values: dict[tuple[str, str, str], float]) -> dict[str, tuple[float, float]]:
    """Figure 1's bars: label -> (blind scorer's value, the VLM run's value) of the bar's scope and metric."""
    return {b["label"]: (values[("caption-length", b["subset"], b["metric"])],
                         values[("vlm:caption-length", b["subset"], b["metric"])])
            for b in entry["bars"] if b["figure1"]}


def test_aro_bars_are_its_own_metrics_for_blind_and_vlm_alike(aro_dir: Path, tmp_path: Path,
                                                               fake_spacy: None) -> None:
    """VG: the macro accuracy for both (bias-gap measured the blind bar as accuracy over items before);
    order: Precision@1 with ARO's tie rule, a tie to the caption (bias-gap counted ties wrong before:
    caption-length on shuffled captions, all ties, gave 0 beside the VLM's 100)."""
    roots = ["--image-root", f"coco={aro_dir / 'coco'}", "--image-root", f"flickr30k={aro_dir / 'flickr30k'}"]
    entry, values = _eval_then_bias_gap("aro", aro_dir, tmp_path, *roots)
    assert [(b["label"], b["subset"], b["metric"]) for b in entry["bars"]] == [
        ("VG Relation", "vg_relation", "macro_accuracy"), ("VG Attribution", "vg_attribution", "macro_accuracy"),
        ("COCO Order", "coco_order", "precision_at_1"), ("Flickr Order", "flickr30k_order", "precision_at_1")]
    bars = _both_bars(entry, values)
    for label, (blind, vlm) in bars.items():
        assert blind == pytest.approx(vlm, abs=1e-9, nan_ok=True), label
    assert bars["COCO Order"][0] == 100.0  # every perturbation keeps the caption's length: ties, the caption's
    assert values[("caption-length", "coco_order", "gap_positive")] == 0.0  # the gap's own rule: ties wrong
    assert entry["bars"][2]["chance"] == pytest.approx(20.0)  # one caption among five texts


def test_crepe_eval_csvs_are_read_and_grouped_as_figure_1(tmp_path: Path) -> None:
    """bias-gap refused a CREPE eval CSV (recall@1 was not a metric it knew); now Figure 1's Atomic /
    Swap / Negate bars: the productivity files of each type, complexities pooled, recall@1 with CREPE's
    tie rule for both bars."""
    crepe = write_benchmark_fixture(tmp_path / "crepe", "crepe", n_items=4, seed=1, image_size=24)
    entry, values = _eval_then_bias_gap("crepe", crepe, tmp_path / "out", "--subsets",
                                        ",".join(f"prod_{n}_{c}" for n in ("atom", "swap", "negate") for c in range(4, 13)))
    assert [(b["label"], b["subset"], b["metric"]) for b in entry["bars"]] == [
        ("Atomic", "prod_atom", "recall@1"), ("Swap", "prod_swap", "recall@1"), ("Negate", "prod_negate", "recall@1")]
    assert all(len(b["members"]) == 9 for b in entry["bars"])
    bars = _both_bars(entry, values)
    assert all(blind == pytest.approx(vlm, abs=1e-9) for blind, vlm in bars.values()), bars
    assert bars["Swap"] == (100.0, 100.0) and bars["Negate"] == (100.0, 100.0)  # equal lengths: ties, the caption's
    # a pooled bar is the item-weighted mean of its files' recall@1
    per_file = [(values[("vlm:caption-length", f"prod_atom_{c}", "recall@1")], 4) for c in range(4, 13)]
    assert bars["Atomic"][1] == pytest.approx(sum(v * n for v, n in per_file) / 36)
    # each item's own recall@k in the per-case file: their mean per file is the file's row
    (items_csv,) = (tmp_path / "out" / "bias-gap").glob("*.items.csv")
    per_case: dict[tuple[str, str], list[float]] = {}
    for r in read_rows(items_csv):
        if r["metric"].startswith("recall@"):
            per_case.setdefault((r["subset"].split(":")[0], r["metric"]), []).append(float(r["value"]))
    assert len(per_case) == 27 * 4
    for (subset, metric), vals in per_case.items():
        assert values[("caption-length", subset, metric)] == pytest.approx(np.mean(vals)) and len(vals) == 4


def test_vl_checklist_is_grouped_as_figure_1(tmp_path: Path) -> None:
    vlc = write_benchmark_fixture(tmp_path / "vlc", "vl-checklist", n_items=3, seed=2, image_size=16)
    entry, values = _eval_then_bias_gap("vl-checklist", vlc, tmp_path / "out")
    assert [(b["label"], b["subset"], b["metric"]) for b in entry["bars"]] == [
        ("Object", "Object", "accuracy"), ("Attribute", "Attribute", "accuracy"), ("Relation", "Relation", "accuracy")]
    assert sum(len(b["members"]) for b in entry["bars"]) == 56  # every file under one bar
    for label, (blind, vlm) in _both_bars(entry, values).items():
        assert blind == pytest.approx(vlm, abs=1e-9), label


def test_sugarcrepe_pp_has_two_positives(tmp_path: Path) -> None:
    """Both P1 and P2 are positive: an item is right when both outscore the negative (SugarCrepe++'s
    ITT), chance 1/3; bias-gap took P2 for a negative before."""
    from vlprobe.data.sugarcrepe_pp import load_sugarcrepe_pp

    scpp = write_benchmark_fixture(tmp_path / "scpp", "sugarcrepe-pp", n_items=6, seed=5, image_size=16)
    entry, values = _eval_then_bias_gap("sugarcrepe-pp", scpp, tmp_path / "out")
    ds = load_sugarcrepe_pp(scpp)
    for subset in entry["items_per_subset"]:
        lengths = [[-len(t.text) for t in it.captions] for it in ds if it.meta["subset"] == subset]
        want = 100 * np.mean([min(p1, p2) > neg for p1, p2, neg in lengths])
        assert values[("caption-length", subset, "gap_positive")] == pytest.approx(want)
        assert values[("caption-length", subset, "itt")] == pytest.approx(want)
        assert values[("vlm:caption-length", subset, "itt")] == pytest.approx(want)
        assert entry["chance_percent"][subset] == pytest.approx(100 / 3)


def test_the_figure_draws_figure_1s_bars(tmp_path: Path) -> None:
    from vlprobe.results.plots import make_figure
    from vlprobe.results.reading import read_result

    crepe = write_benchmark_fixture(tmp_path / "crepe", "crepe", n_items=3, seed=1, image_size=16)
    _eval_then_bias_gap("crepe", crepe, tmp_path / "out")  # every file: systematicity's bars too, not drawn
    (csv_path,) = [p for p in (tmp_path / "out" / "bias-gap").glob("*.csv") if not p.name.endswith(".items.csv")]
    axes = [a for a in make_figure([read_result(csv_path)]).axes if a.get_visible()]
    *hists, share = axes
    assert [a.get_title() for a in hists] == ["Atomic", "Swap", "Negate"]
    assert [t.get_text() for t in share.get_xticklabels()] == ["Atomic\nrecall@1", "Swap\nrecall@1", "Negate\nrecall@1"]
    assert len([p for p in share.patches if type(p).__name__ == "Rectangle"]) == 6  # the scorer and the VLM run
