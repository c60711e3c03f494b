"""Helpers shared by the extraction tests (`from tests.extract.helpers import ...`)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import numpy as np

from vlprobe.extract.regions.store import RegionBatch

T = TypeVar("T")


def random_region_arrays(
    n: int, r: int, counts: Sequence[int], seed: int = 0, dim: int = 2048
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Seeded region inputs of ``n`` images padded to ``r`` boxes, ``counts[i]`` real ones each.

    Returns
    -------
    features : ndarray, float32 (n, r, dim), non-negative, zeros at padded boxes
    boxes : ndarray, float32 (n, r, 4), normalised x1, y1, x2, y2, zeros at padded boxes
    mask : ndarray, bool (n, r)
    """
    rng = np.random.default_rng(seed)
    feats = np.maximum(rng.standard_normal((n, r, dim)), 0).astype(np.float32)
    xy = rng.uniform(0, 0.5, (n, r, 2))
    boxes = np.concatenate([xy, xy + rng.uniform(0.1, 0.5, (n, r, 2))], axis=-1).astype(np.float32)
    mask = np.arange(r)[None, :] < np.asarray(counts)[:, None]
    feats[~mask], boxes[~mask] = 0, 0
    return feats, boxes, mask


def region_batch(features: np.ndarray, boxes: np.ndarray, mask: np.ndarray) -> RegionBatch:
    """Region arrays as the ``RegionBatch`` a region store returns (image sizes unknown: 0)."""
    zeros = np.zeros(len(features), dtype=np.int64)
    return RegionBatch(features=features, boxes=boxes, mask=mask, image_w=zeros, image_h=zeros)


def random_region_batch(n: int, r: int, counts: Sequence[int], seed: int = 0, dim: int = 2048) -> RegionBatch:
    """:func:`random_region_arrays` as a ``RegionBatch`` (what ``prepare_images`` reads)."""
    return region_batch(*random_region_arrays(n, r, counts, seed=seed, dim=dim))


#: A quick SugarCrepe selection for runs on the real JSON files (6 items, 6 images).
SC_SELECTION = {"subsets": "swap_obj,add_att", "limit": 3}


def sugarcrepe_pictures(sugarcrepe_dir: Path, folder: Path, selection: dict[str, object] = SC_SELECTION) -> Path:
    """A distinct synthetic picture under each selected SugarCrepe item's COCO file name (pixel models)."""
    from PIL import Image

    from vlprobe.data.sugarcrepe import load_sugarcrepe

    folder.mkdir(parents=True, exist_ok=True)
    for n, name in enumerate(sorted({it.images[0].name for it in load_sugarcrepe(sugarcrepe_dir, **selection)})):
        rng = np.random.default_rng(n)
        Image.fromarray(rng.integers(0, 256, size=(40, 48, 3), dtype=np.uint8)).save(folder / name)
    return folder


def kill_when(
    cmd: Sequence[str], out: Path, progress: Callable[[Path], T | None], ready: Callable[[T], bool],
    timeout: float = 90,
) -> tuple[T | None, int, str]:
    """Start ``cmd``; SIGKILL it as soon as ``ready(progress(out))`` holds.

    Returns
    -------
    seen : the progress value it was killed at, or None if it ended first (or timed out)
    returncode : int
    stderr : str
    """
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen(list(cmd), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    seen = None
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.poll() is None:
            value = progress(out) if out.exists() else None
            if value is not None and ready(value):
                proc.send_signal(signal.SIGKILL)
                seen = value
                break
            time.sleep(0.005)
    finally:
        if proc.poll() is None and seen is None:
            proc.kill()
        _, stderr = proc.communicate(timeout=30)
    return seen, proc.returncode, stderr.decode(errors="replace")


def winoground_percentages(matrix: np.ndarray) -> dict[str, float]:
    """Text, image and group scores (percent) of a (2N images, 2N texts) Winoground score matrix
    in canonical order, by a plain loop over the items (strict inequalities)."""
    wins = {"text": 0, "image": 0, "group": 0}
    n = matrix.shape[0] // 2
    for i in range(n):
        s = matrix[2 * i : 2 * i + 2, 2 * i : 2 * i + 2]  # s[image j, caption k]
        text = s[0, 0] > s[0, 1] and s[1, 1] > s[1, 0]
        image = s[0, 0] > s[1, 0] and s[1, 1] > s[0, 1]
        wins["text"] += text
        wins["image"] += image
        wins["group"] += text and image
    return {k: 100.0 * v / n for k, v in wins.items()}


def recall_i2t_at_1(matrix: np.ndarray) -> float:
    """Image-to-text recall@1 (percent) of a full (images, texts) matrix whose image r matches
    text r; a tie with another text counts against the model."""
    hits = [all(matrix[r, r] > matrix[r, t] for t in range(matrix.shape[1]) if t != r) for r in range(matrix.shape[0])]
    return 100.0 * sum(hits) / len(hits)


def assert_winoground_item_scores(path: Path, matrix: np.ndarray, rtol: float = 1e-4, atol: float = 1e-7) -> None:
    """The per-item score file ``probe run winoground-scores`` writes holds, for every item i, the
    four scores of ``matrix`` (image 2i + j, caption 2i + k)."""
    import json

    seen = 0
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            i = int(rec["item"].rsplit("/", 1)[1])
            j, k = int(rec["image"][-1]), int(rec["text"][-1])
            np.testing.assert_allclose(rec["score"], matrix[2 * i + j, 2 * i + k], rtol=rtol, atol=atol, err_msg=line)
            seen += 1
    assert seen == matrix.shape[0] * 2
