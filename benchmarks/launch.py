"""Local workers of the step runner: one sharded extraction with 1 vs 2 shard processes at once,
and the two ways a local step starts, spawn vs forkserver (printed, never asserted).

The same command (``probe extract`` of the tiny CLIP over a synthetic Winoground-format set
with its caption variants) runs three ways, each into a fresh folder:

1. one ``probe extract`` process, no shards (the reference);
2. ``probe launch local --shards 2 --jobs 1``: the two shards one after the other, then the merge;
3. ``probe launch local --shards 2 --jobs 2``: the two shards at once, then the merge.

Every process gets one CPU thread (``--threads 1``), so two workers can use two cores, and each
shard is a fresh ``python -m vlprobe`` (``--start-method spawn``, so that a shard's start is what
it was; the fork server's saving is the start-method part below). Printed: wall seconds of each
run, the CPU seconds of its shard processes (a process start, importing torch and loading the
model, is paid once per shard), the ratio of wall times 1 worker / 2
workers (at most 2; what a second core buys) and the largest difference between the merged
caches and the one-process cache (the merge must not change the numbers beyond float rounding of
other batch boundaries). The machine may be shared: the load average is printed with the figures.

Start methods (``--parts start``): the same steps with ``LocalExecutor(start_method="spawn")``
(each step a fresh ``python -m vlprobe``) and ``"forkserver"`` (each step a fork of one server
that imported torch, transformers, scikit-learn and the command line once), two at once, one
thread each: ``--steps`` trivial steps (``probe --version`` and ``probe ls models``: what a
step costs before it does anything) and a small sweep (a synthetic dataset, a tiny CLIP, two
extractions, winoground-scores and recall, the collect step: 8 steps of real work). CPU seconds
are all of this process's children (steps, and the fork server with its imports), read from
``os.times()`` once the server has exited; printed with the ratios spawn / forkserver.

Usage: python benchmarks/launch.py [--parts workers,start] [--items 200] [--batch-size 16] [--repeats 1]
       [--steps 20]
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
from vlprobe.launch.executors import LocalExecutor
from vlprobe.launch.sharded import launch_local
from vlprobe.launch.steps import Step, run_steps
from vlprobe.launch.sweep import run_sweep

START_METHODS = ("spawn", "forkserver")

SWEEP_PLAN = """
out = "out"

[[steps]]
name = "data"
args = ["fixtures", "dataset", "--n-items", "12", "--seed", "0", "--out", "{d}/data"]

[[steps]]
name = "clip"
args = ["fixtures", "model", "clip", "--seed", "0", "--out", "{d}/clip"]

[models.a]
model = "clip"
checkpoint = "{d}/clip"
extract = ["--device", "cpu"]
after = ["clip"]

[models.b]
model = "clip"
checkpoint = "{d}/clip"
extract = ["--device", "cpu", "--layers", "-1"]
after = ["clip"]

[datasets.wino]
dataset = "winoground"
data_dir = "{d}/data"
after = ["data"]

[experiments.winoground-scores]

[experiments.recall]
models = ["a"]
"""


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
    """``probe launch local --shards 2 --jobs JOBS --threads 1 --start-method spawn -- argv``."""
    t0 = time.perf_counter()
    result = launch_local(argv, shards=2, jobs=jobs, threads=1, retries=0, echo=lambda _: None, start_method="spawn")
    steps = {n: s for n, s in result["timings"]["steps"].items() if n.startswith("shard")}  # (the merge is a step too)
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


def _children_cpu() -> float:
    t = os.times()
    return t.children_user + t.children_system


def timed(run: Any) -> dict[str, float]:
    """Wall seconds of ``run()``, the CPU seconds of every child process it waited for, and the
    steps' own CPU seconds (without the fork server's imports)."""
    cpu, t0 = _children_cpu(), time.perf_counter()
    timings = run()
    steps = timings["steps"].values()
    return {"wall": time.perf_counter() - t0, "cpu": _children_cpu() - cpu,
            "steps": sum(s["cpu"] or 0.0 for s in steps), "n": len(steps)}


def trivial_steps(root: Path, method: str, n: int) -> dict[str, float]:
    """``n`` trivial steps (half ``probe --version``, half ``probe ls models``), 2 at once."""
    steps = [Step(f"step {i}", ("--version",) if i % 2 else ("ls", "models")) for i in range(n)]

    def run() -> dict[str, Any]:
        with LocalExecutor(jobs=2, threads=1, start_method=method) as executor:
            return run_steps(steps, executor, root, retries=0, echo=lambda _: None)

    return timed(run)


def small_sweep(root: Path, method: str) -> dict[str, float]:
    """The 8-step plan of :data:`SWEEP_PLAN`, 2 steps at once, one thread each."""
    root.mkdir(parents=True)
    plan = root / "plan.toml"
    plan.write_text(SWEEP_PLAN.replace("{d}", str(root)))
    return timed(lambda: run_sweep(plan, jobs=2, threads=1, retries=0, echo=lambda _: None, start_method=method))


def compare_start_methods(root: Path, n_steps: int, repeats: int) -> None:
    runs: dict[tuple[str, str], dict[str, float]] = {}
    for r in range(repeats):
        for method in START_METHODS:
            for what in (f"{n_steps} trivial steps", "small sweep (8 steps)"):
                if what == "small sweep (8 steps)":
                    got = small_sweep(root / f"s-{method}-{r}", method)
                else:
                    got = trivial_steps(root / f"t-{method}-{r}", method, n_steps)
                key = (what, method)
                if key not in runs or got["wall"] < runs[key]["wall"]:
                    runs[key] = got
    print(f"\nstart methods, 2 steps at once, one thread each; {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f} at the end")
    print(f"{'run':<24}{'method':<12}{'wall s':>9}{'CPU s':>9}{'steps CPU s':>13}{'per step':>10}")
    for (what, method), got in runs.items():
        print(f"{what:<24}{method:<12}{got['wall']:9.1f}{got['cpu']:9.1f}{got['steps']:13.1f}"
              f"{got['steps'] / got['n']:10.2f}")
    print("(CPU s: every process, the fork server's imports included; steps CPU s: the steps' own)")
    for what in dict.fromkeys(w for w, _ in runs):
        spawn, fork = runs[(what, "spawn")], runs[(what, "forkserver")]
        print(f"{what}: spawn / forkserver  wall {spawn['wall'] / fork['wall']:.2f}, CPU {spawn['cpu'] / fork['cpu']:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default="workers,start", help="workers (1 vs 2 workers), start (start methods).")
    parser.add_argument("--items", type=int, default=200, help="Synthetic items (4 image-caption pairs each).")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=1, help="Runs of each way; the fastest is printed.")
    parser.add_argument("--steps", type=int, default=20, help="Trivial steps of the start-method comparison.")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    if "start" in parts:
        with tempfile.TemporaryDirectory(prefix="vlprobe-bench-start-") as tmp:
            compare_start_methods(Path(tmp), args.steps, args.repeats)
    if "workers" not in parts:
        return
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
