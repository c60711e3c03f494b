"""Variant probe (paper §5.3): example construction, planted rule, pair streams, errors."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.experiments.helpers import only_run
from vlprobe.cli import app
from vlprobe.experiments.variant_probe import (
    VariantProbeConfig,
    run_variant_probe,
    variant_examples,
)
from vlprobe.fixtures.caches import planted_cache
from vlprobe.runs.summary import summarize

SIGNAL = 1
FAST = {"depth": 3, "width": 32, "lr": 1e-2, "epochs": 40, "batch_size": 32, "device": "cpu"}


@pytest.fixture(scope="module")
def dual(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return planted_cache(tmp_path_factory.mktemp("vp") / "dual.h5", n_items=24, n_variants=3, n_layers=3,
                         signal_layer=SIGNAL, hidden=4)


def test_examples_pair_a_paraphrase_with_a_distractor() -> None:
    fams = [[np.array([0, 10, 11]), np.array([1, 12])], [np.array([2, 13]), np.array([3, 14, 15])]]
    caption_of = {0: 0, 10: 0, 11: 0, 1: 1, 12: 1, 2: 0, 13: 0, 3: 1, 14: 1, 15: 1}
    texts, image, labels, owner = variant_examples(fams, [np.array([0, 1]), np.array([2, 3])], [0, 1], 3, seed=5)
    assert texts.shape == (2 * 4 * 3, 3) and sorted(set(labels)) == [0, 1]
    for (ref, o1, o2), lab, n, img in zip(texts, labels, owner, image, strict=True):
        same = o1 if lab == 0 else o2
        other = o2 if lab == 0 else o1
        assert ref != same and caption_of[ref] == caption_of[same] != caption_of[other]
        assert img in (2 * n, 2 * n + 1)
    again = variant_examples(fams, [np.array([0, 1]), np.array([2, 3])], [0, 1], 3, seed=5)
    np.testing.assert_array_equal(texts, again[0])


def test_planted_rule_is_learnt_and_control_stays_at_chance(dual: Path, tmp_path: Path) -> None:
    _, manifest_path, rows = run_variant_probe(VariantProbeConfig(cache=dual, out=tmp_path, seeds=2, draws=2, **FAST))
    summary = {(r["layer"], r["split"]): r for r in summarize(rows)}
    hit = summary[(str(SIGNAL), "test")]
    assert hit["target_min"] >= 95.0, hit
    assert 25.0 <= hit["control_mean"] <= 75.0, hit
    assert summary[("0", "test")]["target_mean"] <= 75.0
    run = only_run(manifest_path)
    assert run["n_examples"] == 24 * 4 * 2 and run["skipped_items"] == []
    assert (len(run["split"]["train"]), len(run["split"]["test"])) == (18, 6)


def test_pair_stream_reads_texts_under_an_image(tmp_path: Path) -> None:
    cache = planted_cache(tmp_path / "cross.h5", n_items=8, n_variants=2, n_layers=2, signal_layer=1, hidden=4,
                          streams={"lang": "pair", "vision": "pair"}, model="cross")
    _, _, rows = run_variant_probe(VariantProbeConfig(cache=cache, out=tmp_path, seeds=1, draws=1,
                                                      **{**FAST, "epochs": 3}))
    assert {r["stream"] for r in rows} == {"lang"} and {r["layer"] for r in rows} == {0, 1}


def test_cli_and_errors(dual: Path, tmp_path: Path, one_error_line: Callable[..., str]) -> None:
    runner = CliRunner()
    ok = runner.invoke(app, ["run", "variant-probe", "--cache", str(dual), "--out", str(tmp_path), "--seeds", "1",
                             "--layers", "1", "--depth", "2", "--width", "8", "--epochs", "2", "--device", "cpu"])
    assert ok.exit_code == 0, ok.output
    assert (tmp_path / "variant-probe" / "planted@layers=1,seeds=1,depth=2,width=8,epochs=2.csv").is_file()
    no_var = planted_cache(tmp_path / "novar.h5", n_items=4, n_variants=0, n_layers=2, signal_layer=1)
    base = ["run", "variant-probe", "--out", str(tmp_path)]
    one_error_line(runner.invoke(app, [*base, "--cache", str(no_var)]), "no caption variants")
    one_error_line(runner.invoke(app, [*base, "--cache", str(dual), "--seeds", "-2"]), "seeds must be")
    one_error_line(runner.invoke(app, [*base, "--cache", str(dual), "--draws", "0"]), "draws must be")
    one_error_line(runner.invoke(app, [*base, "--cache", str(dual), "--streams", "image"]), "holds image rows")
    one_error_line(runner.invoke(app, [*base, "--cache", str(tmp_path / "missing.h5")]), "no such file")


def test_a_long_run_says_its_estimate_and_the_cheaper_choices_first(
    dual: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before the first probe trains: the time the run will take (one measured step times the
    steps), and for a long one the cheaper choices with their own estimates; it asks nothing and
    goes on. The step is made to take 400 s here, so a one-epoch run of 6 probes reads as long."""
    import math
    import re

    import vlprobe.probes.ensemble as ensemble
    from vlprobe.experiments.mlp_estimate import format_duration

    measured: list[tuple[int, int]] = []

    def slow_step(dims: list[int], n_models: int, batch_rows: int, device: object, steps: int = 3) -> float:
        measured.append((dims[1], n_models))
        return 400.0

    monkeypatch.setattr(ensemble, "step_seconds", slow_step)
    args = ["run", "variant-probe", "--cache", str(dual), "--seeds", "1", "--epochs", "1", "--width", "1024",
            "--device", "cpu"]
    res = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "a")], input="")
    assert res.exit_code == 0, res.output
    lines = [line for line in res.stderr.splitlines() if line.startswith("variant-probe:")]
    estimate, cheaper, training = lines[:3]
    rows, features = map(int, re.search(r" on (\d+) rows x (\d+) features", training).groups())
    chunk = ensemble.models_per_chunk(ensemble.mlp_dims(features, 3, 1024), min(rows, 128))
    steps = math.ceil(rows / 128) * math.ceil(6 / chunk)  # one epoch of batches of 128 (the default), per chunk
    quick_chunk = ensemble.models_per_chunk(ensemble.mlp_dims(features, 3, 128), min(rows, 128))
    quick_steps = math.ceil(rows / 128) * math.ceil(18 / quick_chunk)  # 3 seeds x 3 layers x 2 tasks
    assert estimate.startswith(f"variant-probe: about {format_duration(400.0 * steps)} on the CPU for 6 probes"), estimate
    assert cheaper.startswith("variant-probe: a long run; cheaper: --layers -1 (one layer of 3: about "
                              f"{format_duration(400.0 * steps / 3)}); --preset quick (3 seeds, width 128, 30 epochs: "
                              f"about {format_duration(400.0 * 30 * quick_steps)}); --device cuda (on a GPU)"), cheaper
    assert training.startswith("variant-probe: training 6 MLP probes")
    assert (tmp_path / "a" / "variant-probe").is_dir()  # it went on, without a question
    assert measured[0] == (1024, min(6, chunk))
    measured.clear()
    quiet = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "b"), "--quiet"])
    assert quiet.exit_code == 0 and "about" not in quiet.stderr and measured == []  # --quiet: nothing measured
