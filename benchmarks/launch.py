"""Local workers of the step runner: one sharded extraction with 1 vs 2 shard processes at once
(printed, never asserted).

The same command (``probe extract`` of the tiny CLIP over a synthetic Winoground-format set
with its caption variants) runs three ways, each into a fresh folder:

1. one ``probe extract`` process, no shards (the reference);
2. ``probe launch local --shards 2 --jobs 1``: the two shards one after the other, then the merge;
3. ``probe launch local --shards 2 --jobs 2``: the two shards at once, then the merge.

Every process gets one CPU thread (``--threads 1``), so two workers can use two cores. Printed:
wall seconds of each run, the CPU seconds of its shard processes (a process start, importing
torch and loading the model, is paid once per shard), the ratio of wall times 1 worker / 2
workers (at most 2; what a second core buys) and the largest difference between the merged
caches and the one-process cache (the merge must not change the numbers beyond float rounding of
other batch boundaries). The machine may be shared: the load average is printed with the figures.

Usage: python benchmarks/launch.py [--items 200] [--batch-size 16] [--repeats 1]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import h5py
import numpy as np

from vlprobe.data.synthetic import make_synthetic_winoground
from vlprobe.fixtures.clip import write_tiny_clip
from vlprobe.launch.sharded import launch_local


def _command(data: Path, clip: Path, out: Path, batch: int) -> list[str]:
    return ["probe", "extract", "--model", "clip", "--checkpoint", str(clip), "--dataset", "winoground",
            "--data-dir", str(data), "--variants", str(data / "variants.jsonl"), "--poolings", "cls,mean,max",
            "--batch-size", str(batch), "--device", "cpu", "--quiet", "--out", str(out)]


def one_process(argv: list[str]) -> dict[str, Any]:
    """``probe extract`` (``argv`` without the leading ``probe``) as one process of one thread."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    t0 = time.perf_counter()
    before = os.times()
    subprocess.run([sys.executable, "-m", "vlprobe", *argv[1:]], env=env, check=True, stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL)
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return {"wall": time.perf_counter() - t0, "cpu": cpu}


def launched(argv: list[str], jobs: int) -> dict[str, Any]:
    """``probe launch local --shards 2 --jobs JOBS --threads 1 -- argv``."""
    t0 = time.perf_counter()
    result = launch_local(argv, shards=2, jobs=jobs, threads=1, retries=0, echo=lambda _: None)
    steps = result["timings"]["steps"]
    return {"wall": time.perf_counter() - t0, "cpu": sum(s["cpu"] or 0.0 for s in steps.values()),
            "shards": {n: (s["wall"], s["cpu"]) for n, s in steps.items()}, "out": result["out"]}


def largest_difference(a: Path, b: Path) -> float:
    """Largest absolute difference over the float datasets the two caches share."""
    worst = 0.0

    def visit(name: str, obj: Any) -> None:
        nonlocal worst
        if isinstance(obj, h5py.Dataset) and obj.dtype.kind == "f" and name in fb:
            other = fb[name]
            if isinstance(other, h5py.Dataset) and other.shape == obj.shape and obj.size:
                worst = max(worst, float(np.nanmax(np.abs(obj[()].astype(np.float64) - other[()]))))

    with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
        fa.visititems(visit)
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=200, help="Synthetic items (4 image-caption pairs each).")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=1, help="Runs of each way; the fastest is printed.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="vlprobe-bench-launch-") as tmp:
        root = Path(tmp)
        data = make_synthetic_winoground(root / "data", n_items=args.items, seed=0)
        clip = write_tiny_clip(root / "clip", seed=0)
        runs: dict[str, dict[str, Any]] = {}
        outs: dict[str, Path] = {}
        for r in range(args.repeats):
            for name, jobs in (("one process, no shards", 0), ("2 shards, 1 worker", 1), ("2 shards, 2 workers", 2)):
                out = root / f"run-{r}-{jobs}" / "cache.h5"
                out.parent.mkdir()
                argv = _command(data, clip, out, args.batch_size)
                got = one_process(argv) if jobs == 0 else launched(argv, jobs)
                if name not in runs or got["wall"] < runs[name]["wall"]:
                    runs[name], outs[name] = got, out
        print(f"tiny CLIP over {args.items} synthetic items with variants, batch {args.batch_size}, "
              f"one CPU thread per process; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at the end")
        print(f"{'run':<26}{'wall s':>9}{'CPU s':>9}   shards (wall s, CPU s)")
        for name, got in runs.items():
            shards = "  ".join(f"{n}: {w:.1f}, {c or 0:.1f}" for n, (w, c) in got.get("shards", {}).items())
            print(f"{name:<26}{got['wall']:9.1f}{got['cpu']:9.1f}   {shards}")
        one, two = runs["2 shards, 1 worker"], runs["2 shards, 2 workers"]
        print(f"\nratio wall 1 worker / 2 workers: {one['wall'] / two['wall']:.2f} (ideal 2.00 on 2 idle cores)")
        print(f"ratio wall 2 workers / one process without shards: {two['wall'] / runs['one process, no shards']['wall']:.2f}")
        single = runs["one process, no shards"]["cpu"]
        print(f"CPU of the two shards / CPU of one process: {two['cpu'] / single:.2f} "
              "(each shard pays its own start: imports, model load)")
        start = two["cpu"] - single  # two shards: 2 starts + the work; one process: 1 start + the work
        print(f"so one process's start costs ~{start:.1f} CPU s and the work itself ~{single - start:.1f} CPU s "
              "(a shard is worth its start when its work is many times that)")
        reference = outs["one process, no shards"]
        for name in ("2 shards, 1 worker", "2 shards, 2 workers"):
            print(f"largest difference, merged cache of '{name}' vs one process: "
                  f"{largest_difference(outs[name], reference):.2e}")


if __name__ == "__main__":
    main()
