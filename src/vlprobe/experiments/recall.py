"""Recall@k over the full image x caption matrix (``probe run recall``; paper §3.1).

Image-to-text (I2T): each image ranks all original captions; text-to-image (T2I): each caption
ranks all images. The positive of image 2i+k is caption 2i+k, so the other image or caption of
the same item is a hard negative. Ties count against the model (metrics module). Values are
percentages; k = 1, 2, 5, 10 by default.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vlprobe.experiments.metrics import recall_at_k
from vlprobe.experiments.outputs import build_manifest, write_results

__all__ = ["RecallConfig", "run_recall"]

NAME = "recall"
VERSION = 1


@dataclass(frozen=True)
class RecallConfig:
    """One cache in, one CSV out."""

    cache: Path
    out: Path
    ks: tuple[int, ...] = (1, 2, 5, 10)
    model: str | None = None


def run_recall(config: RecallConfig) -> tuple[Path, Path, list[dict[str, Any]]]:
    """Compute I2T and T2I recall@k and write the CSV and manifest."""
    from vlprobe.extract.cache import ActivationCache

    if not config.ks or any(int(k) < 1 for k in config.ks):
        raise ValueError(f"ks must be positive integers, got {config.ks!r}")
    with ActivationCache(config.cache) as cache:
        matrix, done = cache.scores()
        images, texts = cache.table("images"), cache.table("texts")
        h = cache.header
        provenance = cache.provenance()
    originals = np.flatnonzero(texts["parent"] < 0)
    if len(originals) != len(images["id"]):
        raise ValueError(
            f"cache: recall needs one caption per image (Winoground), got {len(images['id'])} images "
            f"and {len(originals)} captions"
        )
    sub, sub_done = matrix[:, originals], done[:, originals]
    if not sub_done.all():
        raise ValueError(
            f"cache: {Path(config.cache).name} scores only {int(sub_done.sum())} of {sub_done.size} "
            "image-caption pairs; recall needs the full matrix (extract with --pairs all)"
        )
    positives = np.arange(len(originals))
    model = config.model or h.model
    rows: list[dict[str, Any]] = []
    for direction, scores in (("i2t", sub), ("t2i", sub.T)):
        for k, value in recall_at_k(scores, positives, config.ks).items():
            rows.append({
                "experiment": NAME, "model": model, "task": "target", "split": "all",
                "subset": direction, "metric": f"recall@{k}", "value": 100.0 * value, "n": len(positives),
            })
    cfg = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(config).items()}
    inputs = {"cache": provenance}
    manifest = build_manifest(NAME, VERSION, cfg, inputs, extra={"units": "percent of queries", "model": model})
    csv_path, manifest_path = write_results(config.out, NAME, model, rows, manifest)
    return csv_path, manifest_path, rows

