"""Timing and memory helpers shared by the benchmark scripts (run as ``python benchmarks/X.py``,
which puts this folder on ``sys.path``)."""

from __future__ import annotations

import multiprocessing as mp
import queue as queue_module
import time
import tracemalloc
from collections.abc import Callable
from typing import Any


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


def in_fresh_process(target: Callable[..., None], *args: Any) -> Any:
    """Run ``target(*args, queue)`` in a spawned process and return what it puts on ``queue``.

    A fresh process per case gives each its own peak resident memory (``ru_maxrss``) and no
    state left over from another case.
    """
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=target, args=(*args, queue))
    proc.start()
    while True:
        try:
            result = queue.get(timeout=5)
            break
        except queue_module.Empty:
            if not proc.is_alive():
                raise RuntimeError(f"the benchmark process for {target.__name__} died (exit code {proc.exitcode})") from None
    proc.join()
    return result
