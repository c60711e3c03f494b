"""Separability (paper §5.1) on planted-signal caches, pair streams, parallel fits, the CLI."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from vlprobe.cli import app
from vlprobe.experiments.separability import SeparabilityConfig, run_separability
from vlprobe.fixtures.caches import (
    ArrayStream,
    pair_rows,
    planted_cache,
    winoground_tables,
    write_array_cache,
)
from vlprobe.runs.summary import SUMMARY_COLUMNS
from vlprobe.runs.writing import TIDY_COLUMNS
from vlprobe.validation import InputError

SIGNAL = 2
# 16 points per caption in 4 dimensions: noise is almost never linearly separable.
PLANTED = {"n_items": 10, "n_variants": 15, "n_layers": 4, "signal_layer": SIGNAL, "hidden": 4}


@pytest.fixture(scope="module")
def dual(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return planted_cache(tmp_path_factory.mktemp("planted") / "dual.h5", **PLANTED)


@pytest.fixture(scope="module")
def cross(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return planted_cache(tmp_path_factory.mktemp("planted") / "cross.h5", streams={"lang": "pair", "vision": "pair"},
                         model="cross", **PLANTED)


def by(rows: list[dict], **match: object) -> dict[tuple, float]:
    """(stream, layer, task, seed) -> value of the rows matching ``match``."""
    return {(r["stream"], r["layer"], r["task"], r["seed"]): r["value"] for r in rows
            if all(r[k] == v for k, v in match.items())}


def read(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def test_planted_layer_is_separable_and_noise_layers_sit_at_the_control(dual: Path, tmp_path: Path) -> None:
    _, _, rows = run_separability(SeparabilityConfig(cache=dual, out=tmp_path, seeds=2))
    sep = by(rows, metric="separable", subset="all")
    assert sep[("text", SIGNAL, "target", None)] == 100.0
    for layer in range(4):
        control = [sep[("text", layer, "control", s)] for s in (0, 1)]
        assert max(control) <= 20.0, (layer, control)
        if layer != SIGNAL:
            assert abs(sep[("text", layer, "target", None)] - np.mean(control)) <= 20.0, layer
    conv = by(rows, metric="converged", subset="all")
    assert conv[("text", SIGNAL, "target", None)] == 100.0
    margins = by(rows, metric="separable_margin", subset="all")
    assert margins[("text", SIGNAL, "target", None)] > 0
    assert by(rows, metric="no_hyperplane", subset="all")[("text", SIGNAL, "target", None)] == 0.0


def test_pair_streams_are_conditioned_on_each_image(cross: Path, tmp_path: Path) -> None:
    csv_path, _, rows = run_separability(SeparabilityConfig(cache=cross, out=tmp_path, seeds=1))
    assert {r["stream"] for r in rows} == {"lang", "vision"}  # every pair stream by default
    tags = {"collapsed_tag=Object", "collapsed_tag=Relation", "collapsed_tag=Both"}
    # planted tables' captions ("item 0 caption 0" / "... caption 1") differ in a word
    assert {r["subset"] for r in rows} == {"all", "image=0", "image=1", "bow=different", *tags}
    n_tag = {r["subset"]: r["n"] for r in rows if r["subset"] in tags and r["metric"] == "separable"}
    assert sum(n_tag.values()) == 2 * PLANTED["n_items"]  # each case has one collapsed tag
    sep = by(rows, metric="separable", subset="all")
    for stream in ("lang", "vision"):
        assert sep[(stream, SIGNAL, "target", None)] == 100.0
        assert sep[(stream, SIGNAL, "control", 0)] <= 20.0
    n_all = {r["n"] for r in rows if r["subset"] == "all" and r["metric"] == "separable"}
    assert n_all == {2 * PLANTED["n_items"]}  # one case per (item, image)
    items = read(csv_path.with_name(f"{csv_path.stem}.items.csv"))
    names = {r["subset"] for r in items}
    assert "winoground/3/i0" in names and "winoground/3/i1" in names
    assert {r["n"] for r in items} == {str(2 * (1 + PLANTED["n_variants"]))}


def test_parallel_fits_equal_sequential(dual: Path, tmp_path: Path) -> None:
    _, _, seq = run_separability(SeparabilityConfig(cache=dual, out=tmp_path / "a", seeds=2, jobs=1))
    _, _, par = run_separability(SeparabilityConfig(cache=dual, out=tmp_path / "b", seeds=2, jobs=2))
    assert [{k: v for k, v in r.items() if k != "value"} for r in seq] == [
        {k: v for k, v in r.items() if k != "value"} for r in par]
    # Workers may run their BLAS with other thread counts: equal within round-off, not bit for bit.
    np.testing.assert_allclose([r["value"] for r in seq], [r["value"] for r in par], rtol=1e-9)


def layer0_like_cache(path: Path, n_items: int = 6, n_variants: int = 5, hidden: int = 16) -> Path:
    """Layer 0 as CLIP's EOS state is for a word swap: variant v of caption 0 and variant v of
    caption 1 are the same point (distinct across variants); layer 1 separates the captions."""
    tables = winoground_tables(n_items, n_variants)
    parent = np.asarray(tables.text_parent)
    rows = np.arange(len(parent))
    orig = np.where(parent < 0, rows, parent)
    item, caption = orig // 2, orig % 2
    slot = np.zeros(len(parent), int)  # 0 for the original, v + 1 for variant v
    for r in np.flatnonzero(parent >= 0):
        slot[r] = int(tables.text_id[r].rsplit("/v", 1)[1]) + 1
    rng = np.random.default_rng(0)
    points = rng.normal(size=(n_items, n_variants + 1, hidden)) * 5 + 20  # a large shared offset
    states = np.empty((len(parent), 2, hidden))
    states[:, 0] = points[item, slot]
    states[:, 1] = rng.normal(size=(len(parent), hidden))
    states[:, 1, 0] += np.where(caption == 0, 4.0, -4.0)
    stream = ArrayStream("text", np.full(len(parent), -1), rows, {"cls": states}, [0, 1], n_layers=2)
    return write_array_cache(path, tables, {"text": stream})


def test_identical_captions_have_no_hyperplane_and_no_margin(tmp_path: Path) -> None:
    cache = layer0_like_cache(tmp_path / "layer0.h5")
    csv_path, manifest_path, rows = run_separability(SeparabilityConfig(cache=cache, out=tmp_path / "o", seeds=2))
    target = {(r["layer"], r["metric"]): r for r in rows if r["task"] == "target" and r["subset"] == "all"}
    assert target[(0, "no_hyperplane")]["value"] == 100.0 and target[(0, "separable")]["value"] == 0.0
    assert np.isnan(target[(0, "separable_margin")]["value"]) and target[(0, "separable_margin")]["n"] == 0
    assert target[(1, "no_hyperplane")]["value"] == 0.0 and target[(1, "separable")]["value"] == 100.0
    margin = target[(1, "separable_margin")]
    assert margin["n"] == 6 and 0 < margin["value"] < 100  # a real gap, not the ~1e14 of a w made of round-off
    assert csv_path.name == "arrays@seeds=2.csv"  # named by the model and the settings it changed
    items = read(csv_path.with_name(f"{csv_path.stem}.items.csv"))
    layer0 = {r["value"] for r in items if r["layer"] == "0" and r["metric"] == "separable_margin"}
    assert layer0 == {"nan"}
    units = json.loads(manifest_path.read_text())["runs"]["arrays@seeds=2"]["units"]
    assert units["separable_margin"].startswith("2/||w||") and units["no_hyperplane"] == "percent"


def test_per_case_rows_use_the_aggregate_units(dual: Path, tmp_path: Path) -> None:
    # One unit per metric name: the mean of the per-case values is the aggregate, for every metric.
    csv_path, _, rows = run_separability(SeparabilityConfig(cache=dual, out=tmp_path, seeds=2))
    items = read(csv_path.with_name(f"{csv_path.stem}.items.csv"))
    per_case: dict[tuple, list[float]] = {}
    for r in items:
        per_case.setdefault((r["layer"], r["task"], r["seed"], r["metric"]), []).append(float(r["value"]))
    checked = 0
    for r in rows:
        if r["subset"] != "all" or r["task"] == "selectivity" or "." in r["metric"]:
            continue  # intervals and tests are checked in test_intervals_selectivity_and_the_permutation_test
        values = np.array(per_case[(str(r["layer"]), r["task"], "" if r["seed"] is None else str(r["seed"]), r["metric"])])
        values = values[np.isfinite(values)]
        assert len(values) == r["n"], r
        if len(values):
            assert r["value"] == pytest.approx(values.mean(), rel=1e-12), r
            checked += 1
        if r["metric"] in ("separable", "no_hyperplane", "converged"):
            assert set(values) <= {0.0, 100.0}, r
    assert checked > 0


def test_outputs_summary_and_manifest(dual: Path, tmp_path: Path) -> None:
    csv_path, manifest_path, rows = run_separability(
        SeparabilityConfig(cache=dual, out=tmp_path, seeds=3, scale="standard", layers="1:3")
    )
    assert csv_path == tmp_path / "separability" / "planted@layers=1_3,scale=standard.csv"
    with open(csv_path, encoding="utf-8") as fh:
        # Tidy columns, then a column per setting that changes a number (pooling has its own).
        header = next(csv.reader(fh))
        # (in the declared config's field order, which follows its option groups)
        assert header[: len(TIDY_COLUMNS)] == list(TIDY_COLUMNS)
        assert sorted(header[len(TIDY_COLUMNS):]) == sorted(["scale", "C", "max_iter", "tol", "held_out", "held_out_layers", "bootstrap",
                                                             "bootstrap_seed", "permutations"])
    lines = read(csv_path)
    assert {(r["scale"], r["C"], r["max_iter"], r["tol"]) for r in lines} == {("standard", "100", "100000", "0.001")}
    assert {r["kind"] for r in lines} == {"self"}  # the planted cache's layers 1, 2
    assert {r["layer"] for r in rows} == {1, 2}
    assert {r["split"] for r in rows} == {"train"} and {r["probe"] for r in rows} == {"linear-separability"}
    summary = read(csv_path.with_name(f"{csv_path.stem}.summary.csv"))
    assert list(summary[0]) == list(SUMMARY_COLUMNS)
    row = next(r for r in summary if r["layer"] == str(SIGNAL) and r["metric"] == "separable")
    assert row["target_seeds"] == "1" and row["control_seeds"] == "3"
    assert float(row["selectivity"]) == pytest.approx(float(row["target_mean"]) - float(row["control_mean"]))
    assert float(row["control_min"]) <= float(row["control_mean"]) <= float(row["control_max"])
    run = json.loads(manifest_path.read_text())["runs"]["planted@layers=1:3,scale=standard"]
    assert run["config"]["scale"] == "standard" and run["config"]["C"] == 100.0
    assert run["settings_changed"] == {"layers": "1:3", "scale": "standard"}
    assert run["seeds"] == [0, 1, 2]
    assert run["inputs"]["cache"]["sha256"] and run["git_revision"]
    assert run["streams"] == {"text": {"modality": "text", "layers": [1, 2], "pooling": "cls"}}
    assert run["pooling_fallback"] == {}


def test_nothing_separable_at_any_layer_is_said_with_the_scaling_to_try(dual: Path, tmp_path: Path) -> None:
    """A C so small (or states so tiny: the same thing to a soft-margin SVM) that no case is
    separable anywhere: one line says so, even with --quiet, names the options and is kept in the
    manifest; a run where some case separates says nothing."""
    result = CliRunner().invoke(app, ["run", "separability", "--cache", str(dual), "--out", str(tmp_path), "--seeds", "1",
                                      "--C", "1e-9", "--scale", "none", "--quiet"])
    assert result.exit_code == 0, result.output
    line = "separability: no case is separable at any layer of stream text (median state norm "
    assert line in result.stderr and "try --scale standard" in result.stderr and "--C 1e-05" in result.stderr
    runs = json.loads((tmp_path / "separability" / "manifest.json").read_text())["runs"]
    assert [n.split(" (")[0] for n in next(iter(runs.values()))["notes"]] == [
        "no case is separable at any layer of stream text"]
    _, manifest, _ = run_separability(SeparabilityConfig(cache=dual, out=tmp_path / "ok", seeds=1))
    assert next(iter(json.loads(manifest.read_text())["runs"].values()))["notes"] == []


def test_cli_on_the_tiny_clip_cache_and_plot(reference_cache: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["run", "separability", "--cache", str(reference_cache), "--out", str(tmp_path),
                                 "--layers", "0,-1", "--seeds", "1"])
    assert result.exit_code == 0, result.output
    assert "layer   0 separable (train)" in result.stdout
    csv_path = tmp_path / "separability" / "clip@layers=0+-1,seeds=1.csv"
    rows = read(csv_path)
    assert {(r["layer"], r["kind"]) for r in rows} == {("0", "embed"), ("3", "self")}
    assert {r["stream"] for r in rows} == {"text"} and {r["task"] for r in rows} == {"target", "control", "selectivity"}
    subsets = {r["subset"] for r in rows}
    assert {"all", "wwh=NoTag-corrected", "collapsed_tag=Object"} <= subsets  # per-tag subsets of the synthetic data
    plot = runner.invoke(app, ["plot", str(csv_path), "--out", str(tmp_path / "fig.png")])
    assert plot.exit_code == 0, plot.output
    assert (tmp_path / "fig.png").stat().st_size > 0 and (tmp_path / "fig.pdf").stat().st_size > 0


@pytest.fixture(scope="module")
def bad_caches(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bad")
    no_variants = planted_cache(root / "novar.h5", n_items=4, n_variants=0, n_layers=3, signal_layer=1)
    tables = winoground_tables(4, 2)
    n = len(tables.text_id)
    states = np.random.default_rng(0).normal(size=(n, 2, 3)).astype(np.float32)
    sparse = write_array_cache(root / "sparse.h5", tables, {
        "text": ArrayStream("text", np.full(n, -1), np.arange(n), {"cls": states}, [0, 2], n_layers=4),
    })
    return {"no_variants": no_variants, "sparse": sparse}


@pytest.mark.parametrize(
    ("which", "extra", "needles"),
    [
        ("no_variants", [], ["no caption variants", "--variants"]),
        ("dual", ["--streams", "nope"], ["stream 'nope' is not in"]),
        ("dual", ["--streams", "image"], ["holds image rows"]),
        ("dual", ["--pooling", "median"], ["pooling: unknown pooling 'median'"]),
        ("sparse", ["--layers", "1"], ["layer(s) [1]", "not stored", "stored: [0, 2]"]),
        ("dual", ["--layers", "9"], ["layer 9 is out of range"]),
        ("dual", ["--seeds", "0"], ["seeds must be"]),
        ("dual", ["--scale", "minmax"], ["scale: unknown scale 'minmax'", "known: paper, none, divide100, standard"]),
        ("dual", ["--jobs", "0"], ["jobs must be"]),
    ],
)
def test_bad_input_is_one_error_line(
    which: str, extra: list[str], needles: list[str], dual: Path, bad_caches: dict[str, Path],
    tmp_path: Path, one_error_line: Callable[..., str],
) -> None:
    path = dual if which == "dual" else bad_caches[which]
    result = CliRunner().invoke(app, ["run", "separability", "--cache", str(path), "--out", str(tmp_path), *extra])
    one_error_line(result, *needles)
    assert not (tmp_path / "separability").exists()


def test_a_sweep_over_one_model_shares_one_folder(
    reference_cache: Path, tmp_path: Path, one_error_line: Callable[..., str]
) -> None:
    runner = CliRunner()
    folder = tmp_path / "separability"
    base = ["run", "separability", "--cache", str(reference_cache), "--out", str(tmp_path), "--layers", "-1"]
    assert runner.invoke(app, base).exit_code == 0
    first = (folder / "clip@layers=-1.csv").read_bytes()
    # Other settings: another run of the same model beside the first, named by what changed.
    assert runner.invoke(app, [*base, "--pooling", "mean"]).exit_code == 0
    assert runner.invoke(app, [*base, "--C", "1"]).exit_code == 0
    assert (folder / "clip@layers=-1.csv").read_bytes() == first
    assert runner.invoke(app, [*base, "--jobs", "2"]).exit_code == 0  # same settings: replaces
    runs = json.loads((folder / "manifest.json").read_text())["runs"]
    assert sorted(runs) == ["clip@layers=-1", "clip@layers=-1,C=1", "clip@pooling=mean,layers=-1"]
    assert {r["pooling"] for r in read(folder / "clip@pooling=mean,layers=-1.csv")} == {"mean"}
    assert {(r["model"], r["C"]) for r in read(folder / "clip@layers=-1,C=1.csv")} == {("clip", "1")}
    # Inputs count by content: the same cache bytes under another path are the same run (replaced);
    # a cache with other content under the same name is refused (tests/runs/test_writing.py).
    other = tmp_path / "other.h5"
    other.write_bytes(reference_cache.read_bytes())
    moved = ["run", "separability", "--cache", str(other), "--out", str(tmp_path), "--layers", "-1"]
    assert runner.invoke(app, moved).exit_code == 0
    assert (folder / "clip@layers=-1.csv").read_bytes() == first


def test_intervals_selectivity_and_the_permutation_test(dual: Path, tmp_path: Path) -> None:
    config = SeparabilityConfig(cache=dual, out=tmp_path, seeds=2, bootstrap=200, bootstrap_seed=5, permutations=500)
    csv_path, manifest_path, rows = run_separability(config)
    got = {(r["layer"], r["task"], r["metric"]): r for r in rows if r["subset"] == "all" and r["stream"] == "text"}
    target = got[(SIGNAL, "target", "separable")]["value"]
    control = np.mean([r["value"] for r in rows if r["subset"] == "all" and r["layer"] == SIGNAL
                       and r["task"] == "control" and r["metric"] == "separable"])
    sel = got[(SIGNAL, "selectivity", "separable")]
    assert sel["value"] == pytest.approx(target - control)
    low, high = (got[(SIGNAL, "selectivity", f"separable.ci95_{b}")]["value"] for b in ("low", "high"))
    assert 0 < low <= sel["value"] <= high  # the planted layer: the target beats its control on resampled cases
    assert got[(SIGNAL, "selectivity", "separable.p_value")]["value"] < 0.05
    for task in ("target", "control"):
        lo, hi = (got[(SIGNAL, task, f"separable.ci95_{b}")]["value"] for b in ("low", "high"))
        assert 0 <= lo <= hi <= 100 and got[(SIGNAL, task, "separable.ci95_low")]["seed"] is None
    assert ("0", "selectivity", "separable_margin.p_value") in {(str(k[0]), k[1], k[2]) for k in got}
    manifest = next(iter(json.loads(manifest_path.read_text())["runs"].values()))
    assert manifest["permutation_test"]["permutations"] == 500 and manifest["permutation_test"]["seed"] == 5
    assert manifest["bootstrap"]["resamples"] == 200
    again = run_separability(SeparabilityConfig(cache=dual, out=tmp_path / "again", seeds=2, bootstrap=200,
                                                bootstrap_seed=5, permutations=500))[2]
    # The same seeds through the same code path: the same resamples and sign flips (NaN = no separable case).
    np.testing.assert_array_equal([r["value"] for r in again if "." in r["metric"]],
                                  [r["value"] for r in rows if "." in r["metric"]])
    summary = read(csv_path.with_name(csv_path.stem + ".summary.csv"))
    rec = next(r for r in summary if r["layer"] == str(SIGNAL) and r["metric"] == "separable" and r["subset"] == "all"
               and r["stream"] == "text")
    assert float(rec["selectivity_ci95_low"]) == pytest.approx(low) and float(rec["p_value"]) < 0.05
def test_every_fit_metric_has_intervals_selectivity_and_a_test(dual: Path, tmp_path: Path) -> None:
    rows = run_separability(SeparabilityConfig(cache=dual, out=tmp_path, seeds=2, layers=str(SIGNAL), bootstrap=200,
                                               permutations=500))[2]
    got = {(r["task"], r["metric"]): r["value"] for r in rows if r["subset"] == "all" and r["stream"] == "text"}
    points = {(r["task"], r["metric"]): [] for r in rows}
    for r in rows:
        if r["subset"] == "all" and r["stream"] == "text" and "." not in r["metric"]:
            points[(r["task"], r["metric"])].append(r["value"])
    for metric in ("separable", "separable_margin", "train_accuracy", "no_hyperplane", "converged"):
        for task in ("target", "control", "selectivity"):
            low, high = got[(task, f"{metric}.ci95_low")], got[(task, f"{metric}.ci95_high")]
            if metric == "separable_margin":  # NaN where no case is separable (the control here)
                assert low <= high or (np.isnan(low) and np.isnan(high)), task
                continue
            assert (-100 if task == "selectivity" else 0) <= low <= high <= 100, (metric, task)
        p_value = got[("selectivity", f"{metric}.p_value")]
        assert 0 <= p_value <= 1 or (metric == "separable_margin" and np.isnan(p_value))
    # The selectivity point value is the target minus the seed-mean control, as for separable.
    control = np.mean(points[("control", "train_accuracy")])
    assert got[("selectivity", "train_accuracy")] == pytest.approx(got[("target", "train_accuracy")] - control)
    # At the planted layer every target fit separates its points: a constant 100 over cases, whose
    # resampled means are all 100 (and no case lacks a hyperplane: all 0).
    assert got[("target", "train_accuracy")] == 100.0
    assert got[("target", "train_accuracy.ci95_low")] == pytest.approx(100.0) == got[("target", "train_accuracy.ci95_high")]
    assert got[("target", "no_hyperplane.ci95_low")] == pytest.approx(0.0) == got[("target", "no_hyperplane.ci95_high")]


def test_held_out_accuracy_generalises_at_the_planted_layer_only(dual: Path, tmp_path: Path) -> None:
    csv_path, manifest_path, rows = run_separability(SeparabilityConfig(
        cache=dual, out=tmp_path, seeds=2, held_out=True, layers="1,2", bootstrap=200))
    held = by(rows, metric="heldout_accuracy", subset="all")
    # planted: caption 0's variants lie on one side of feature 0, caption 1's on the other
    assert held[("text", SIGNAL, "target", None)] == 100.0
    assert held[("text", 1, "target", None)] < 75.0  # noise: a held-out variant is near chance
    for s in (0, 1):
        assert held[("text", SIGNAL, "control", s)] < 75.0  # permuted labels do not generalise
    assert all(r["split"] == "heldout" for r in rows if r["metric"].startswith("heldout_accuracy"))
    assert all(r["split"] == "train" for r in rows if r["metric"] == "train_accuracy")
    low = by(rows, metric="heldout_accuracy.ci95_low", subset="all")
    high = by(rows, metric="heldout_accuracy.ci95_high", subset="all")
    assert low[("text", 1, "target", None)] <= held[("text", 1, "target", None)] <= high[("text", 1, "target", None)]
    # 16 points per caption: every point of every case is held out once
    n = {r["layer"]: r["n"] for r in read(csv_path.with_name(f"{csv_path.stem}.items.csv"))
         if r["metric"] == "heldout_accuracy" and r["task"] == "target"}
    assert set(n.values()) == {"32"}
    manifest = json.loads(manifest_path.read_text())["runs"][csv_path.stem]
    assert "leave-one-out" in manifest["heldout_accuracy"] and manifest["config"]["held_out"] is True
    # without held_out, no such rows
    _, _, plain = run_separability(SeparabilityConfig(cache=dual, out=tmp_path / "plain", seeds=1, layers="2"))
    assert not any(r["metric"].startswith("heldout") for r in plain)


def _target(rows: list[dict], metric: str) -> dict[object, float]:
    return {r["layer"]: r["value"] for r in rows if r["metric"] == metric and r["subset"] == "all"
            and r["task"] == "target" and r["seed"] is None}


@pytest.mark.parametrize("family", ["clip", "openclip", "lxmert"])
def test_the_default_is_the_papers_computation_for_the_model_family(family: str, tmp_path: Path) -> None:
    # 6 points in 16 dimensions: raw states are always separable with C = 100; C bites when the
    # states are divided by 100 (the reference probe_clip.py), as it did in the paper's CLIP numbers.
    # openclip is the CLIP family too: the same OpenAI weights get the same setting in either format.
    cache = planted_cache(tmp_path / f"{family}.h5", n_items=8, n_variants=3, n_layers=3, signal_layer=2, hidden=16,
                          model=family)
    common = {"cache": cache, "seeds": 1, "bootstrap": 10, "progress": False}
    _, manifest_path, default = run_separability(SeparabilityConfig(out=tmp_path / "default", **common))
    _, _, raw = run_separability(SeparabilityConfig(out=tmp_path / "raw", scale="none", **common))
    _, _, small_c = run_separability(SeparabilityConfig(out=tmp_path / "c", scale="none", C=0.01, **common))
    (run,) = json.loads(manifest_path.read_text())["runs"].values()
    assert run["config"]["scale"] == "paper"
    if family in ("clip", "openclip"):
        # probe_clip.py: states / 100, then C = 100, i.e. C = 0.01 on raw states, margins in 1/100.
        assert run["scaling"]["resolved"] == "divide100" and run["scaling"]["C"] == 100.0
        assert run["scaling"]["C_on_raw_states"] == pytest.approx(0.01)
        assert _target(default, "separable") == _target(small_c, "separable") != _target(raw, "separable")
        for layer, margin in _target(default, "separable_margin").items():
            # the same optimum found by libsvm on rescaled data: equal up to its stopping tolerance
            assert margin * 100 == pytest.approx(_target(small_c, "separable_margin")[layer], rel=1e-3)
    else:
        # probe_lxmert.py / probe_uniter.py: raw states, C = 100.
        assert run["scaling"]["resolved"] == "none" and run["scaling"]["C_on_raw_states"] == 100.0
        assert _target(default, "separable") == _target(raw, "separable") != _target(small_c, "separable")
    assert run["scaling"]["paper_setting"] is True


def _prefusion_cache(path: Path, n_items: int = 12, n_variants: int = 5) -> Path:
    """A cross-encoder whose layers 0 and 1 read the text only (each caption's states the same
    under both images, as LXMERT's language layers) and whose layer 2 reads the pair; half the
    items carry a "Why is Winoground Hard?" tag."""
    wwh = [[] if i % 2 else ["Non Minimal" if i % 4 == 0 else "Visually Difficult"] for i in range(n_items)]
    tags = [{"collapsed_tag": ["Object"], "wwh": w} for w in wwh]
    tables = winoground_tables(n_items, n_variants, tags=tags)
    img, txt = pair_rows(tables, "item")
    rng = np.random.default_rng(0)
    per_text = rng.normal(size=(len(tables.text_id), 2, 4))
    states = np.concatenate([per_text[txt], rng.normal(size=(len(img), 1, 4))], axis=1).astype(np.float32)
    return write_array_cache(path, tables, {
        "lang": ArrayStream("pair", img, txt, {"cls": states}, [0, 1, 2], n_layers=3),
    }, model="cross")


def test_cases_an_item_repeats_before_fusion_count_once(tmp_path: Path) -> None:
    """LXMERT's pre-fusion layers give both images of an item the same points: the paper fits them
    once per item, so `all` holds one case per item there (not a copy counted as independent)."""
    cache = _prefusion_cache(tmp_path / "cross.h5")
    csv_path, manifest, rows = run_separability(SeparabilityConfig(cache=cache, out=tmp_path, seeds=2, bootstrap=200))
    n_all = {r["layer"]: r["n"] for r in rows if r["subset"] == "all" and r["metric"] == "separable"
             and r["task"] == "target"}
    assert n_all == {0: 12, 1: 12, 2: 24}
    # Before fusion `all` is image 0's cases: the same values, intervals and tests, not narrower ones.
    for layer in (0, 1):
        for metric in ("separable", "train_accuracy", "train_accuracy.ci95_low", "train_accuracy.ci95_high",
                       "train_accuracy.p_value"):
            pick = {r["subset"]: r["value"] for r in rows if r["layer"] == layer and r["metric"] == metric
                    and r["task"] in ("target", "selectivity") and r["subset"] in ("all", "image=0")}
            assert pick["all"] == pytest.approx(pick["image=0"], nan_ok=True), (layer, metric)
    items = read(csv_path.with_name(f"{csv_path.stem}.items.csv"))
    names = {(r["layer"], r["subset"]) for r in items if r["task"] == "target" and r["metric"] == "separable"}
    assert ("0", "winoground/3") in names and ("0", "winoground/3/i0") not in names
    assert {("2", "winoground/3/i0"), ("2", "winoground/3/i1")} <= names
    run = next(iter(json.loads(manifest.read_text())["runs"].values()))
    recorded = run["repeated_cases"]["per_stream_layer"]
    assert recorded == {"lang": {"0": 12, "1": 12}}


def test_the_fit_count_said_before_fitting_adds_up_with_repeated_cases(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    cache = _prefusion_cache(tmp_path / "cross.h5")
    run_separability(SeparabilityConfig(cache=cache, out=tmp_path, seeds=2, bootstrap=10, progress=True))
    # 24 cases (12 items x 2 images) x 3 layers, of which the 12 second images of layers 0 and 1
    # repeat the first: 48 case-layers, each a target and 2 controls
    assert "fitting 144 linear SVMs ((24 cases x 3 layers - 24 repeated) x (target + 2 controls))" in capsys.readouterr().err


def test_the_papers_wwh_sets_are_reported(tmp_path: Path) -> None:
    cache = _prefusion_cache(tmp_path / "cross.h5")
    _, _, rows = run_separability(SeparabilityConfig(cache=cache, out=tmp_path, seeds=1, bootstrap=50))
    n = {r["subset"]: r["n"] for r in rows if r["layer"] == 2 and r["metric"] == "separable" and r["task"] == "target"}
    # 6 untagged items, 3 Non Minimal, 3 Visually Difficult; two cases (images) each after fusion.
    assert n["wwh=NoTag"] == n["wwh=NoTag-corrected"] == 12
    assert n["wwh=Easier"] == n["wwh=Easier-corrected"] == 18
    assert n["wwh=Harder"] == n["wwh=Harder-corrected"] == 6
    assert n["wwh=Non Minimal"] == 6 and "wwh=Unusual Text" not in n  # tags no item has are left out


def test_held_out_accuracy_at_chosen_layers_only(dual: Path, tmp_path: Path) -> None:
    _, _, rows = run_separability(SeparabilityConfig(cache=dual, out=tmp_path, seeds=1, held_out=True,
                                                     held_out_layers="-1", bootstrap=50))
    held = {r["layer"] for r in rows if r["metric"].startswith("heldout_accuracy")}
    assert held == {3}
    assert {r["layer"] for r in rows if r["metric"] == "separable"} == {0, 1, 2, 3}
    with pytest.raises(InputError, match="held_out_layers"):
        run_separability(SeparabilityConfig(cache=dual, out=tmp_path / "x", seeds=1, layers="0,1", held_out=True,
                                            held_out_layers="-1"))


def test_held_out_layers_is_checked_as_layers_are_before_any_fit(dual: Path, cross: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """--held-out-layers takes --layers' checks, naming itself: its grammar when the config is
    made, its layers against every stream before the first fit; without --held-out it would
    choose nothing (and only rename the run), so it is refused."""
    with pytest.raises(InputError, match=r"^held_out_layers"):
        SeparabilityConfig(cache=dual, out=tmp_path, held_out=True, held_out_layers="foo")
    with pytest.raises(InputError, match=r"^held_out_layers: .*--held-out"):
        SeparabilityConfig(cache=dual, out=tmp_path, held_out_layers="-1")
    with pytest.raises(InputError, match=r"^held_out_layers\[text\]: layer 9 is out of range"):
        run_separability(SeparabilityConfig(cache=dual, out=tmp_path / "a", seeds=1, held_out=True,
                                            held_out_layers="9"))
    capsys.readouterr()
    with pytest.raises(InputError, match=r"^held_out_layers\[vision\]"):  # the second stream's, before lang is fitted
        run_separability(SeparabilityConfig(cache=cross, out=tmp_path / "b", seeds=1, held_out=True,
                                            held_out_layers="lang=-1;vision=9", progress=True))
    assert "fitting" not in capsys.readouterr().err
