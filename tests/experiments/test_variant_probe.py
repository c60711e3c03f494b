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
