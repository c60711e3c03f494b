"""One small run of every experiment that writes tidy CSVs, for the tests of what reads results back
(units, plots, report, collect): the ``every_experiment`` fixture of ``tests/conftest.py``."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vlprobe.data.benchmark_fixtures import write_benchmark_fixture
from vlprobe.experiments.benchmark_eval import EvalConfig, run_eval
from vlprobe.experiments.bias_gap import BiasGapConfig, run_bias_gap
from vlprobe.experiments.conditional import ConditionalConfig, run_conditional
from vlprobe.experiments.erasure import ErasureConfig, run_erasure
from vlprobe.experiments.mdl import MDLConfig, run_mdl
from vlprobe.experiments.patch import PatchConfig, run_patch
from vlprobe.experiments.recall import RecallConfig, run_recall
from vlprobe.experiments.separability import SeparabilityConfig, run_separability
from vlprobe.experiments.task_adaptation import TaskAdaptationConfig, run_task_adaptation
from vlprobe.experiments.variant_probe import VariantProbeConfig, run_variant_probe
from vlprobe.experiments.variant_similarity import VariantSimilarityConfig, run_variant_similarity
from vlprobe.experiments.winoground_scores import WinogroundScoresConfig, run_winoground_scores
from vlprobe.fixtures.caches import planted_cache
from vlprobe.runs.score_files import write_item_scores

MLP = {"depth": 2, "width": 8, "lr": 1e-2, "epochs": 2, "batch_size": 32}


def pair_scores(path: Path, benchmark: str, subsets: tuple[str, ...], n: int, seed: int) -> Path:
    """A per-item score file of ``n`` items per subset, P(match)-like scores in (0, 1)."""
    ids = [f"{benchmark}/{s}/{k}" for s in subsets for k in range(n)]
    values = np.random.default_rng(seed).uniform(0.01, 0.99, size=2 * len(ids))
    return write_item_scores(path, [i for i in ids for _ in (0, 1)], [f"{i}/i0" for i in ids for _ in (0, 1)],
                             [f"{i}/c{k}" for i in ids for k in (0, 1)], values)


def build_every_experiment(root: Path, reference_cache: Path, tiny_clip: Path, synthetic_dir: Path) -> Path:
    """One small run of every experiment that writes tidy CSVs, all into one results folder."""
    out = root / "results"
    planted = planted_cache(root / "planted.h5", n_items=12, n_variants=3, n_layers=3, signal_layer=1, hidden=4)
    run_winoground_scores(WinogroundScoresConfig(out=out, cache=reference_cache, bootstrap=50))
    run_recall(RecallConfig(out=out, cache=reference_cache, bootstrap=50))
    run_variant_similarity(VariantSimilarityConfig(out=out, cache=reference_cache))
    run_separability(SeparabilityConfig(out=out, cache=planted, seeds=2, held_out=True, bootstrap=50))
    run_task_adaptation(TaskAdaptationConfig(out=out, cache=planted, seeds=1, pooling="cls", **MLP))
    run_variant_probe(VariantProbeConfig(out=out, cache=planted, seeds=1, draws=1, **MLP))
    run_eval(EvalConfig(benchmark="sugarcrepe", out=out, bootstrap=50,
                        scores=pair_scores(root / "sc.scores.jsonl", "sugarcrepe", ("swap_obj", "add_att"), 10, 0)))
    run_eval(EvalConfig(benchmark="valse", out=out, bootstrap=50, threshold=0.5,
                        scores=pair_scores(root / "valse.scores.jsonl", "valse", ("existence", "plurals"), 10, 1)))
    aro = write_benchmark_fixture(root / "aro-data", "aro", n_items=6)
    run_eval(EvalConfig(benchmark="aro", out=out, model="caption-length", data_dir=aro,
                        subsets="vg_relation,vg_attribution", bootstrap=50, progress=False))
    run_bias_gap(BiasGapConfig(dataset="aro", out=out, scorers=("caption-length",), data_dir=aro,
                               subsets="vg_relation,vg_attribution", bootstrap=50, progress=False))
    run_mdl(MDLConfig(out=out, cache=planted, seeds=1, progress=False, **MLP))
    run_conditional(ConditionalConfig(out=out, cache=planted, seeds=1, bootstrap=50, progress=False, **MLP))
    run_patch(PatchConfig(out=out, model="clip", checkpoint=str(tiny_clip), data_dir=synthetic_dir, limit=3,
                          layers="0,-1", bootstrap=50, progress=False))
    run_erasure(ErasureConfig(out=out, model="clip", checkpoint=str(tiny_clip), data_dir=synthetic_dir, limit=4,
                              layers="1", bootstrap=50, progress=False))
    return out
