"""Task adaptation (paper §3.2): planted rule learnt, control at chance, splits, CLI errors."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.experiments.helpers import only_run
from vlprobe.cli import app
from vlprobe.experiments.task_adaptation import (
    MODE_EXAMPLES,
    TaskAdaptationConfig,
    run_task_adaptation,
)
from vlprobe.fixtures.caches import planted_cache
from vlprobe.runs.summary import summarize

SIGNAL = 1
FAST = {"depth": 3, "width": 32, "lr": 1e-2, "epochs": 60, "batch_size": 32}


@pytest.fixture(scope="module")
def dual(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return planted_cache(tmp_path_factory.mktemp("ta") / "dual.h5", n_items=40, n_variants=0, n_layers=3,
                         signal_layer=SIGNAL, hidden=4)


@pytest.fixture(scope="module")
def cross(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return planted_cache(tmp_path_factory.mktemp("ta") / "cross.h5", n_items=40, n_variants=0, n_layers=3,
                         signal_layer=SIGNAL, hidden=4, streams={"lang": "pair", "vision": "pair"}, model="cross")


def test_mode_examples_label_the_mismatched_first_option() -> None:
    for mode, examples in MODE_EXAMPLES.items():
        for (j1, k1), (j2, k2), label in examples:
            assert label == int(j1 != k1)  # option 1 = (image j1, caption k1)
            assert (j1 == j2) if mode == "text" else (k1 == k2)  # the distractor shares the image / caption
        assert sorted(e[2] for e in examples) == [0, 0, 1, 1]


@pytest.mark.parametrize("which", ["dual", "cross"])
def test_planted_rule_is_learnt_and_control_stays_at_chance(which: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    cache = request.getfixturevalue(which)
    _, manifest_path, rows = run_task_adaptation(
        TaskAdaptationConfig(cache=cache, out=tmp_path, seeds=3, pooling="cls", **FAST)
    )
    summary = {(r["layer"], r["subset"], r["split"]): r for r in summarize(rows)}
    assert {k[1] for k in summary} == {"text-score", "image-score"}
    for mode in ("text-score", "image-score"):
        hit = summary[(str(SIGNAL), mode, "test")]
        assert hit["target_min"] == 100.0, hit  # every seed learns the rule
        assert 25.0 <= hit["control_mean"] <= 75.0, hit  # half the test items flipped: chance
        assert hit["selectivity"] >= 25.0
        for layer in ("0", "2"):  # noise layers: nothing to learn
            assert summary[(layer, mode, "test")]["target_mean"] <= 75.0
    run = only_run(manifest_path)
    assert (len(run["split"]["train"]), len(run["split"]["test"])) == (30, 10)
    assert not set(run["split"]["train"]) & set(run["split"]["test"])
    flipped = run["control_flipped_items"]
    assert sorted(flipped) == ["0", "1", "2"] and all(len(v) == 15 + 5 for v in flipped.values())
    assert run["seeds"] == [0, 1, 2]
    n = {(r["split"]) : r["n"] for r in rows if r["metric"] == "accuracy" and r["task"] != "selectivity"}
    assert n == {"train": 120, "test": 40}  # four examples per item


def test_pooled_default_and_both_streams(dual: Path, tmp_path: Path) -> None:
    _, _, rows = run_task_adaptation(TaskAdaptationConfig(cache=dual, out=tmp_path, seeds=1, mode="image", **FAST))
    assert {r["layer"] for r in rows} == {None} and {r["stream"] for r in rows} == {"image+text"}
    assert {r["subset"] for r in rows} == {"image-score"}


def test_per_stream_layer_spec_pairs_layers(cross: Path, tmp_path: Path) -> None:
    _, manifest_path, rows = run_task_adaptation(TaskAdaptationConfig(
        cache=cross, out=tmp_path, seeds=1, mode="text", pooling="cls", layers="lang=0,1;vision=-1", **FAST,
    ))
    assert {r["layer"] for r in rows} == {0, 1}
    run = only_run(manifest_path)
    assert run["layer_positions"] == [{"lang": 0, "vision": 2}, {"lang": 1, "vision": 2}]


def test_cli_runs_and_reports(dual: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, [
        "run", "task-adaptation", "--cache", str(dual), "--out", str(tmp_path), "--mode", "text",
        "--pooling", "cls", "--layers", "1", "--seeds", "2", "--depth", "2", "--width", "16", "--epochs", "5",
        "--device", "cpu", "--test-size", "10",
    ])
    assert result.exit_code == 0, result.output
    assert "text-score" in result.stdout and "selectivity" in result.stdout
    assert len(list((tmp_path / "task-adaptation").glob("planted@*.summary.csv"))) == 1


def test_threads_run_the_training_and_are_recorded(dual: Path, tmp_path: Path) -> None:
    """``--threads N``: the training runs on N torch threads (recorded in the manifest as
    ``cpu_threads``), and the process's count is as it was after the run; a runtime option, so a
    rerun with another count is the same run."""
    import json

    import torch

    before = torch.get_num_threads()
    base = ["run", "task-adaptation", "--cache", str(dual), "--out", str(tmp_path), "--mode", "text", "--pooling",
            "cls", "--layers", "1", "--seeds", "1", "--depth", "2", "--width", "16", "--epochs", "2", "--device", "cpu"]
    result = CliRunner().invoke(app, [*base, "--threads", "1"])
    assert result.exit_code == 0, result.output
    assert torch.get_num_threads() == before
    runs = json.loads((tmp_path / "task-adaptation" / "manifest.json").read_text(encoding="utf-8"))["runs"]
    assert [r["cpu_threads"] for r in runs.values()] == [1]
    result = CliRunner().invoke(app, [*base, "--threads", "0"])
    assert result.exit_code == 2 and "threads must be" in result.output


@pytest.mark.parametrize(
    ("extra", "needles"),
    [
        (["--seeds", "0"], ["seeds must be"]),
        (["--mode", "caption"], ["mode: unknown mode 'caption'", "known: text, image, both"]),
        (["--streams", "lang"], ["stream 'lang' is not in"]),
        (["--pooling", "median"], ["pooling: unknown pooling 'median'"]),
        (["--pooling", "cls", "--layers", "text=all;vision=0"], ["layers: 'vision=0' does not name a stream"]),
        (["--test-size", "abc"], ["test_size must be"]),
        (["--stratify", "wwh"], ["tag family 'wwh' is missing"]),
        (["--epochs", "0"], ["epochs must be"]),
    ],
)
def test_bad_input_is_one_error_line(extra: list[str], needles: list[str], dual: Path, tmp_path: Path,
                                     one_error_line: Callable[..., str]) -> None:
    result = CliRunner().invoke(app, ["run", "task-adaptation", "--cache", str(dual), "--out", str(tmp_path), *extra])
    one_error_line(result, *needles)


def test_examples_never_cross_the_split(dual: Path, tmp_path: Path) -> None:
    """Every example of a test item is scored on the test side only (n counts four per item)."""
    _, manifest_path, rows = run_task_adaptation(TaskAdaptationConfig(cache=dual, out=tmp_path, seeds=1, mode="text",
                                                                      test_size=7, **FAST))
    run = only_run(manifest_path)
    assert len(run["split"]["test"]) == 7
    assert {r["n"] for r in rows if r["split"] == "test" and r["metric"] == "accuracy" and r["task"] != "selectivity"} == {28}
    assert {r["n"] for r in rows if r["split"] == "test" and r["task"] == "selectivity"} == {7}  # items
    assert np.isclose(sum(run["split"]["strata"].values()), 40)


def test_split_file_replaces_the_seeded_split(dual: Path, tmp_path: Path, one_error_line: Callable[..., str]) -> None:
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"train": list(range(0, 30)), "test": [f"winoground/{i}" for i in range(30, 36)]}))
    _, manifest_path, rows = run_task_adaptation(TaskAdaptationConfig(
        cache=dual, out=tmp_path, seeds=1, mode="text", split_file=split, **{**FAST, "epochs": 2},
    ))
    run = only_run(manifest_path)
    assert run["split"]["test"] == [f"winoground/{i}" for i in range(30, 36)]
    assert run["split"]["source"] == str(split) and run["inputs"]["split_file"]["sha256"]
    examples = {r["n"] for r in rows if r["split"] == "test" and r["metric"] == "accuracy" and r["task"] != "selectivity"}
    assert examples == {24}  # items 36..39 are left out
    base = ["run", "task-adaptation", "--cache", str(dual), "--out", str(tmp_path)]
    split.write_text(json.dumps({"train": [0, 1], "test": [1]}))
    one_error_line(CliRunner().invoke(app, [*base, "--split-file", str(split)]), "on both sides")
    split.write_text(json.dumps({"train": [0, 99], "test": [1]}))
    one_error_line(CliRunner().invoke(app, [*base, "--split-file", str(split)]), "99", "not in the cache")
    split.write_text("[1, 2]")
    one_error_line(CliRunner().invoke(app, [*base, "--split-file", str(split)]), "is not JSON of the form")


def test_item_intervals_selectivity_and_permutation_test(dual: Path, tmp_path: Path) -> None:
    csv_path, manifest_path, rows = run_task_adaptation(TaskAdaptationConfig(
        cache=dual, out=tmp_path, seeds=2, pooling="cls", bootstrap=200, bootstrap_seed=3, permutations=400, **FAST))
    got = {(r["layer"], r["subset"], r["task"], r["metric"]): r for r in rows if r["split"] == "test"}
    for mode in ("text-score", "image-score"):
        sel = got[(SIGNAL, mode, "selectivity", "accuracy")]
        low = got[(SIGNAL, mode, "selectivity", "accuracy.ci95_low")]["value"]
        high = got[(SIGNAL, mode, "selectivity", "accuracy.ci95_high")]["value"]
        assert 0 < low <= sel["value"] <= high  # the planted layer: target above control on resampled items
        assert got[(SIGNAL, mode, "selectivity", "accuracy.p_value")]["value"] < 0.05
        assert got[(SIGNAL, mode, "target", "accuracy.ci95_low")]["seed"] is None
    with open(csv_path.with_name(csv_path.stem + ".items.csv"), newline="", encoding="utf-8") as fh:
        items = list(csv.DictReader(fh))
    manifest = next(iter(json.loads(manifest_path.read_text())["runs"].values()))
    test_ids = set(manifest["split"]["test"])
    assert manifest["permutation_test"]["permutations"] == 400 and manifest["bootstrap"]["seed"] == 3
    ids = {r["subset"].split(":", 1)[1] for r in items if r["split"] == "test"}
    assert ids == test_ids  # one row per test item, mode and probe
    assert {r["subset"].split(":", 1)[0] for r in items} == {"text-score", "image-score"}
