"""Recall@k over the full image x caption matrix (``probe run recall``; paper §3.1).

Image-to-text (I2T): each image ranks all original captions; text-to-image (T2I): each caption
ranks all images. The positive of image 2i+k is caption 2i+k, so the other image or caption of
the same item is a hard negative. Ties count against the model (metrics module): the rank of a
query's positive is the number of candidates scoring at least as high (1 = best). Per direction
(``subset`` = ``i2t`` / ``t2i``): ``recall@k`` in percent of queries (k = 1, 2, 5, 10 by
default), and ``median_rank`` and ``mean_rank`` of the positive, as ranks (1 to the number of
candidates; the paper's code prints the median rank; ``mean_rank`` is vlprobe's, computed by no
reference, as its ``note`` says).

The matrix comes from a cache (``--pair-plan all``, or any dual encoder) or from a caption x image
``.npy``/``.npz`` score file in canonical order (caption r matches image r). Every run writes the matrix
it used as ``<model>.scores.npy`` (caption x image) beside its CSV, and 95% bootstrap intervals
(queries resampled, seeded) as metrics ``<metric>.ci95_low`` / ``<metric>.ci95_high``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vlprobe.experiments.cache_features import cache_label
from vlprobe.io.atomic import atomic_write
from vlprobe.progress import format_bytes, say
from vlprobe.provenance import sha256_file
from vlprobe.runs.charts import Chart
from vlprobe.runs.declare import Experiment, ints, option
from vlprobe.runs.option_groups import BootstrapOptions, ProgressOption, ResultsOptions
from vlprobe.runs.printout import metric_lines
from vlprobe.runs.score_files import read_score_matrix
from vlprobe.runs.units import units_of
from vlprobe.runs.writing import RESULTS_KIND, RunRows, RunSlot
from vlprobe.stats.metrics import bootstrap_indices, ci95_rows, recall_ranks
from vlprobe.validation import InputError, check_positive_int

__all__ = ["EXPERIMENT", "RecallConfig", "run_recall"]


def _check_ks(ks: tuple[int, ...], param: str) -> tuple[int, ...]:
    if not ks:
        raise InputError(f"{param} must name at least one k, got {ks!r}")
    for k in ks:
        check_positive_int(k, param, f" (each k; got {param}={ks!r})")
    return ks

#: The ``note`` of the rows whose name alone could mislead.
RECALL_NOTE = "ties count against the model (the paper's compute_metrics counts a tie as a hit)"
MEAN_RANK_NOTE = "vlprobe's: no reference computes a mean rank (the paper's code prints the median rank)"


@dataclass(frozen=True, kw_only=True)
class RecallConfig(BootstrapOptions, ProgressOption, ResultsOptions):
    """One cache or one caption x image score matrix in, one CSV out; give ``cache`` or ``scores``."""

    cache: Path | None = option(
        None, role="input", help="A vlprobe cache with the full score matrix (a dual encoder, or --pair-plan all).",
    )
    scores: Path | None = option(
        None, role="input",
        help="A caption x image score matrix (.npy/.npz, canonical order) instead of a cache.",
    )
    ks: tuple[int, ...] = option((1, 2, 5, 10), parse=ints, check=_check_ks, metavar="K,K", help="k values.")

    def check(self) -> None:
        if (self.cache is None) == (self.scores is None):
            raise InputError("give exactly one of cache (a vlprobe cache) or scores (a caption x image .npy/.npz matrix)")


def _from_cache(path: Path) -> tuple[np.ndarray, str, dict[str, Any]]:
    """Caption x image matrix over the original captions of a cache, its model, its provenance."""
    from vlprobe.extract.cache.reader import ActivationCache

    with ActivationCache(path) as cache:
        matrix, done = cache.scores()
        images, texts = cache.table("images"), cache.table("texts")
        h = cache.header
        provenance = cache.provenance()
    originals = np.flatnonzero(texts["parent"] < 0)
    if len(originals) != len(images["id"]):
        raise InputError(
            f"cache: recall needs one caption per image (Winoground), got {len(images['id'])} images "
            f"and {len(originals)} captions"
        )
    sub, sub_done = matrix[:, originals], done[:, originals]
    if not sub_done.all():
        raise InputError(
            f"cache: {Path(path).name} scores only {int(sub_done.sum())} of {sub_done.size} "
            "image-caption pairs; recall needs the full matrix (extract with --pair-plan all)"
        )
    return np.ascontiguousarray(sub.T), h.model, provenance


def run_recall(config: RecallConfig) -> tuple[Path, Path, list[dict[str, Any]]]:
    """Compute I2T and T2I recall@k and write the CSV, the matrix used and the manifest (:meth:`Experiment.run`)."""
    return EXPERIMENT.run(config)


def compute_recall(config: RecallConfig, slot: RunSlot) -> RunRows:
    """I2T and T2I recall@k and ranks with intervals: tidy rows, the manifest's entries, the matrix used."""
    if config.cache is not None:
        m, _, provenance = _from_cache(config.cache)
        inputs = {"cache": provenance}
    elif config.scores is not None:  # RecallConfig.check: exactly one of the two
        m = read_score_matrix(config.scores)
        inputs = {"scores": {"path": str(config.scores), "sha256": sha256_file(config.scores)}}
    model = slot.label
    positives = np.arange(m.shape[0])
    say(config.progress, f"{EXPERIMENT.name}: ranks of a {m.shape[0]} x {m.shape[1]} caption x image matrix, k = "
                         f"{', '.join(str(int(k)) for k in config.ks)}, {config.bootstrap} bootstrap resamples; about "
                         f"{format_bytes(8 * config.bootstrap * len(positives) + 2 * m.nbytes)}")
    idx = bootstrap_indices(len(positives), config.bootstrap, config.bootstrap_seed)
    rows: list[dict[str, Any]] = []
    intervals: list[dict[str, Any]] = []
    # m is caption x image: T2I ranks images per caption (rows); I2T ranks captions per image.
    for direction, scores in (("i2t", m.T), ("t2i", m)):
        ranks = recall_ranks(scores, positives)
        base = {"experiment": EXPERIMENT.name, "model": model, "task": "target", "split": "all",
                "subset": direction, "n": len(positives)}
        for k in config.ks:
            hit = ranks <= int(k)
            rows.append({**base, "metric": f"recall@{int(k)}", "value": 100.0 * float(hit.mean()), "note": RECALL_NOTE})
            intervals += ci95_rows(base, f"recall@{int(k)}", 100.0 * hit[idx].mean(axis=1))
        resampled = ranks[idx].astype(np.float64)
        for metric, point, boot in (("median_rank", np.median(ranks), np.median(resampled, axis=1)),
                                    ("mean_rank", ranks.mean(), resampled.mean(axis=1))):
            rows.append({**base, "metric": metric, "value": float(point),
                         **({"note": MEAN_RANK_NOTE} if metric == "mean_rank" else {})})
            intervals += ci95_rows(base, metric, boot)
    rows += intervals
    return RunRows(
        rows, inputs, seeds=[config.bootstrap_seed], files={".scores.npy": lambda path: _save_matrix(path, m)},
        extra={"units": units_of(rows), "model": model,
               "bootstrap": {"resamples": config.bootstrap, "seed": config.bootstrap_seed, "level": 0.95},
               "item_scores": "<run>.scores.npy (caption x image, canonical order)"},
    )


def _save_matrix(path: Path, m: np.ndarray) -> None:
    with atomic_write(path, "wb", kind=RESULTS_KIND) as fh:
        np.save(fh, m)


def report(config: RecallConfig, result: tuple[Path, Path, list[dict[str, Any]]]) -> Sequence[str]:
    """Recall@k per direction with intervals, then the files written."""
    csv_path, _, rows = result
    return metric_lines(rows, ("i2t", "t2i"), csv_path)


EXPERIMENT = Experiment("recall", 2, RecallConfig, compute_recall, report, label=cache_label, swept=("ks",),
                        chart=Chart("bars", ("recall@1", "recall@2", "recall@5", "recall@10"), subsets=None))  # 2: median_rank and mean_rank per direction
