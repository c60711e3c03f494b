"""Timing and memory helpers shared by the benchmark scripts (run as ``python benchmarks/X.py``,
which puts this folder on ``sys.path``)."""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Callable


def best_of(fn: Callable[[], object], repeats: int = 3) -> float:
    """Fastest wall-clock seconds of ``repeats`` calls of ``fn``."""
    times = []
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def peak_traced(fn: Callable[[], object]) -> tuple[int, float]:
    """(peak bytes allocated by Python while ``fn`` ran, as tracemalloc sees them; seconds)."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    t0 = time.perf_counter()
    try:
        fn()
        seconds = time.perf_counter() - t0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, seconds
