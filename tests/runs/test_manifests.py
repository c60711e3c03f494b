"""Every experiment's manifest records config, seeds, versions, git revision and input fingerprints."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from vlprobe.experiments.recall import RecallConfig, run_recall
from vlprobe.experiments.separability import SeparabilityConfig, run_separability
from vlprobe.experiments.task_adaptation import TaskAdaptationConfig, run_task_adaptation
from vlprobe.experiments.variant_probe import VariantProbeConfig, run_variant_probe
from vlprobe.experiments.variant_similarity import VariantSimilarityConfig, run_variant_similarity
from vlprobe.experiments.winoground_scores import WinogroundScoresConfig, run_winoground_scores
from vlprobe.registry import EXPERIMENTS

MLP = {"seeds": 2, "depth": 2, "width": 8, "epochs": 2, "batch_size": 64, "layers": "-1"}
RUNS: dict[str, tuple[Callable[..., Any], Callable[..., Any], dict[str, Any]]] = {
    "winoground-scores": (WinogroundScoresConfig, run_winoground_scores, {"bootstrap": 20, "bootstrap_seed": 3}),
    "recall": (RecallConfig, run_recall, {"bootstrap": 20, "bootstrap_seed": 3}),
    "variant-similarity": (VariantSimilarityConfig, run_variant_similarity, {}),
    "separability": (SeparabilityConfig, run_separability, {"seeds": 1, "layers": "-1"}),
    "task-adaptation": (TaskAdaptationConfig, run_task_adaptation, {**MLP, "pooling": "cls"}),
    "variant-probe": (VariantProbeConfig, run_variant_probe, MLP),
}


@pytest.mark.parametrize("experiment", list(RUNS))
def test_manifest_holds_config_seeds_versions_revision_and_fingerprints(
    experiment: str, reference_cache: Path, tmp_path: Path
) -> None:
    make, run, extra = RUNS[experiment]
    _, manifest_path, _ = run(make(cache=reference_cache, out=tmp_path, **extra))
    data = json.loads(manifest_path.read_text(encoding="utf-8"))
    assert data["experiment"] == experiment
    ((_, m),) = data["runs"].items()
    assert m["config"]["cache"] == str(reference_cache)
    for key, value in extra.items():
        assert m["config"][key] == value, key
    assert isinstance(m["seeds"], list)
    if "bootstrap_seed" in extra:
        assert m["seeds"] == [extra["bootstrap_seed"]]
    if "seeds" in extra:
        assert m["seeds"] == list(range(extra["seeds"]))
    assert m["git_revision"] and m["vlprobe_version"]
    assert m["experiment_version"] == EXPERIMENTS.get(experiment).version  # the declaration's
    if "device" in m["config"]:  # the device asked for and the one used
        assert m["config"]["device"] == "auto" and m["device"] in ("cpu", "cuda:0", "mps")
    assert {"numpy", "torch"} <= set(m["versions"])
    cache = m["inputs"]["cache"]
    assert len(cache["sha256"]) == 64
    # the device the run computed on, never what was asked for ("auto"); no GPU in the test runs
    assert m["device"] == "cpu"


@pytest.mark.parametrize("experiment", ["task-adaptation", "variant-probe"])
def test_manifest_records_the_device_used_not_auto(experiment: str, reference_cache: Path, tmp_path: Path) -> None:
    import torch

    make, run, extra = RUNS[experiment]
    _, manifest_path, _ = run(make(cache=reference_cache, out=tmp_path, **extra, device="auto"))
    ((_, m),) = json.loads(manifest_path.read_text(encoding="utf-8"))["runs"].items()
    assert m["config"]["device"] == "auto"  # what was asked for stays in the config
    assert m["device"] == ("cuda:0" if torch.cuda.is_available() else "cpu")


def test_a_cache_records_the_device_used(reference_cache: Path) -> None:
    from vlprobe.extract.cache.reader import ActivationCache

    with ActivationCache(reference_cache) as c:
        assert c.record.device == "cpu"
