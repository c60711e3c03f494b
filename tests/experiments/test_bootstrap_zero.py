"""``bootstrap = 0`` means no intervals, in every experiment that takes it: the point values are
written, the ``.ci95_*`` rows are not."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.every_experiment import MLP, pair_scores
from vlprobe.cli import app
from vlprobe.experiments.benchmark_eval import EvalConfig, run_eval
from vlprobe.experiments.conditional import ConditionalConfig, run_conditional
from vlprobe.experiments.erasure import ErasureConfig, run_erasure
from vlprobe.experiments.patch import PatchConfig, run_patch
from vlprobe.experiments.recall import RecallConfig, run_recall
from vlprobe.experiments.separability import SeparabilityConfig, run_separability
from vlprobe.experiments.task_adaptation import TaskAdaptationConfig, run_task_adaptation
from vlprobe.experiments.variant_probe import VariantProbeConfig, run_variant_probe
from vlprobe.experiments.variant_similarity import VariantSimilarityConfig, run_variant_similarity
from vlprobe.experiments.winoground_scores import WinogroundScoresConfig, run_winoground_scores
from vlprobe.fixtures.caches import planted_cache


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return planted_cache(tmp_path_factory.mktemp("planted") / "p.h5", n_items=12, n_variants=3, n_layers=2,
                         signal_layer=1, hidden=4)


def _runs(root: Path, cache: Path, planted: Path, tiny_clip: Path, data: Path) -> dict[str, Callable[[], Any]]:
    out = root / "results"
    return {
        "winoground-scores": lambda: run_winoground_scores(WinogroundScoresConfig(out=out, cache=cache, bootstrap=0)),
        "recall": lambda: run_recall(RecallConfig(out=out, cache=cache, bootstrap=0)),
        "variant-similarity": lambda: run_variant_similarity(VariantSimilarityConfig(out=out, cache=cache, bootstrap=0)),
        "separability": lambda: run_separability(SeparabilityConfig(out=out, cache=planted, seeds=1, held_out=True,
                                                                    bootstrap=0, progress=False)),
        "task-adaptation": lambda: run_task_adaptation(TaskAdaptationConfig(out=out, cache=planted, seeds=1, pooling="cls",
                                                                            bootstrap=0, **MLP)),
        "variant-probe": lambda: run_variant_probe(VariantProbeConfig(out=out, cache=planted, seeds=1, draws=1,
                                                                      bootstrap=0, **MLP)),
        "sugarcrepe": lambda: run_eval(EvalConfig(
            benchmark="sugarcrepe", out=out, bootstrap=0,
            scores=pair_scores(root / "sc.scores.jsonl", "sugarcrepe", ("swap_obj", "add_att"), 10, 0))),
        "valse": lambda: run_eval(EvalConfig(
            benchmark="valse", out=out, bootstrap=0, threshold=0.5,
            scores=pair_scores(root / "valse.scores.jsonl", "valse", ("existence", "plurals"), 10, 1))),
        "conditional": lambda: run_conditional(ConditionalConfig(out=out, cache=planted, seeds=1, bootstrap=0,
                                                                 progress=False, **MLP)),
        "patch": lambda: run_patch(PatchConfig(out=out, model="clip", checkpoint=str(tiny_clip), data_dir=data, limit=3,
                                               layers="0,-1", bootstrap=0, progress=False)),
        "erasure": lambda: run_erasure(ErasureConfig(out=out, model="clip", checkpoint=str(tiny_clip), data_dir=data,
                                                     limit=4, layers="1", bootstrap=0, progress=False)),
    }


NAMES = ("winoground-scores", "recall", "variant-similarity", "separability", "task-adaptation", "variant-probe",
         "sugarcrepe", "valse", "conditional", "patch", "erasure")


@pytest.mark.parametrize("name", NAMES)
def test_bootstrap_zero_writes_the_values_without_intervals(
    name: str, tmp_path: Path, reference_cache: Path, planted: Path, tiny_clip: Path, synthetic_dir: Path,
) -> None:
    result = _runs(tmp_path, reference_cache, planted, tiny_clip, synthetic_dir)[name]()
    rows = result[2]
    assert rows and any(r["metric"] and ".ci95_" not in r["metric"] for r in rows)
    assert not [r["metric"] for r in rows if ".ci95_" in str(r["metric"])]


def test_bootstrap_zero_on_the_command_line_and_negative_refused(reference_cache: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    ok = runner.invoke(app, ["run", "recall", "--cache", str(reference_cache), "--out", str(tmp_path), "--bootstrap", "0"])
    assert ok.exit_code == 0, ok.output
    bad = runner.invoke(app, ["run", "recall", "--cache", str(reference_cache), "--out", str(tmp_path), "--bootstrap", "-1"])
    assert bad.exit_code == 2 and "bootstrap must be an integer >= 0" in bad.output
