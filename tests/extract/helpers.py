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
