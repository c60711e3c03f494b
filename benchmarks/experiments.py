"""Cost of the MLP experiments at their defaults on the 40-item synthetic dataset (``make demo``'s).

Builds the synthetic Winoground copy (40 items, templated variants) and a tiny random CLIP cache
(text 4 layers x 32-d, image 3 x 32-d, cls/mean/max/pooled), then runs ``probe run variant-probe``
and ``probe run task-adaptation`` through the CLI, each in its own process, and prints per run:
wall seconds, CPU seconds of the process, peak resident memory (``ru_maxrss`` of that process),
the number of probes, the floating-point work of their training (multiply-adds x 2 of the forward
and backward passes) and the rate it ran at. Beside it, this machine's own float32 rate on the same
matrix shapes (one ``bmm`` forward and its two backward products, measured in this process), so
"rate / machine rate" says how much of the arithmetic floor is spent elsewhere (Adam, copies,
Python).

``--epochs E`` (below the default 200) and ``--seeds S`` run a fraction; the full default run is
then extrapolated from two runs (1 and E epochs: fixed cost + per-epoch cost) and marked so.
``--compare-src DIR`` runs the same commands with another vlprobe source tree first on
``PYTHONPATH`` (e.g. ``git archive <rev> src | tar -x -C /tmp/old``; pass ``/tmp/old/src``) and prints
the time and memory ratios, and, per (subset, layer, task), the mean test accuracy over seeds of
both and the difference in units of its standard error: runs that differ only in rounding give
differences within seed noise, not equal numbers (training amplifies rounding).
``--quick`` adds the runs of the ``--quick`` preset. Timings on a shared machine are noisy: CPU
seconds and ratios from one run are the steadier figures.

Usage: python benchmarks/experiments.py [--epochs 200] [--seeds 11] [--compare-src DIR]
       [--experiments variant-probe,task-adaptation] [--work DIR] [--quick] [--threads N]
"""

from __future__ import annotations

import argparse
import csv
import itertools
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
SRC = Path(__file__).resolve().parents[1] / "src"
#: The defaults of each experiment's MLP (depth, width, batch size, epochs, seeds).
DEFAULTS = {"variant-probe": (3, 1024, 128, 200, 11), "task-adaptation": (4, 1024, 200, 200, 11)}


def build_inputs(work: Path) -> Path:
    """The synthetic dataset and the tiny CLIP cache with variants (made once per work folder)."""
    cache = work / "clip.h5"
    if cache.is_file():
        return cache
    from vlprobe.data.synthetic import make_synthetic_winoground
    from vlprobe.fixtures.model_fixture import write_model_fixture

    data = make_synthetic_winoground(work / "data", n_items=40, seed=0)
    write_model_fixture("clip", work / "tiny-clip", 0)
    _probe(SRC, ["extract", "--model", "clip", "--checkpoint", str(work / "tiny-clip"), "--dataset", "winoground",
                 "--data-dir", str(data), "--variants", str(data / "variants.jsonl"), "--layers", "all",
                 "--poolings", "cls,mean,max", "--device", "cpu", "--out", str(cache), "--quiet"])
    return cache


THREADS: dict[str, str] = {}


def _probe(src: Path, args: list[str]) -> dict[str, float]:
    """Run ``python -m vlprobe ARGS`` with ``src`` first on the path: wall and CPU seconds, peak RSS."""
    env = {**os.environ, "PYTHONPATH": str(src), **THREADS}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "vlprobe", *args], env=env, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        text_out, text_err = out.read(), err.read()
    if proc.returncode:
        raise SystemExit(f"probe {' '.join(args)} failed ({proc.returncode}):\n{text_err[-2000:]}")
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "rss_mb": usage.ru_maxrss / 1024,
            "out": text_out, "err": text_err}


def flops(experiment: str, n_features: int, n_train: int, n_models: int, epochs: int) -> float:
    """Multiply-adds x 2 of training: forward, weight gradients and (past the first layer) input gradients."""
    depth, width, *_ = DEFAULTS[experiment]
    dims = [n_features, *([width] * (depth - 1)), 1]
    per_row = sum(a * b * (2 if i == 0 else 3) for i, (a, b) in enumerate(itertools.pairwise(dims)))
    return 2.0 * per_row * n_train * epochs * n_models


def machine_rate(n_rows: int, width: int = 1024, models: int = 2, repeats: int = 3) -> float:
    """float32 multiply-add rate (FLOP/s) of ``bmm`` on (models, n_rows, width) x (models, width, width)."""
    import torch

    a = torch.randn(models, n_rows, width)
    w = torch.randn(models, width, width)
    g = torch.randn(models, n_rows, width)
    torch.bmm(a, w)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.bmm(a, w)
        torch.bmm(a.transpose(1, 2), g)
        torch.bmm(g, w.transpose(1, 2))
        best = min(best, time.perf_counter() - t0)
    return 3 * 2.0 * models * n_rows * width * width / best


def _test_accuracy(csv_path: Path) -> dict[tuple[str, str, str], list[float]]:
    """(subset, layer, task) -> test accuracies over seeds."""
    out: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    with csv_path.open(encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            if row["metric"] == "accuracy" and row["split"] == "test":
                out[(row["subset"], row["layer"], row["task"])].append(float(row["value"]))
    return out


def compare_tables(old: Path, new: Path) -> None:
    """Mean test accuracy over seeds, old vs new, with the difference in standard errors."""
    a, b = _test_accuracy(old), _test_accuracy(new)
    print(f"    {'subset':<12} {'layer':>5} {'task':<8} {'old mean':>9} {'new mean':>9} {'seed sd':>8} {'diff/se':>8}")
    worst = 0.0
    for key in sorted(a):
        x, y = np.array(a[key]), np.array(b.get(key, []))
        if not len(y):
            continue
        sd = float(np.sqrt((x.var(ddof=1) + y.var(ddof=1)) / 2)) if len(x) > 1 and len(y) > 1 else float("nan")
        se = sd * np.sqrt(1 / len(x) + 1 / len(y))
        z = (y.mean() - x.mean()) / se if se > 0 else 0.0
        worst = max(worst, abs(z))
        print(f"    {key[0]:<12} {key[1] or '-':>5} {key[2]:<8} {x.mean():9.2f} {y.mean():9.2f} {sd:8.2f} {z:8.2f}")
    print(f"    largest |difference| / standard error: {worst:.2f} (|z| < 2: within seed noise)")


def run_one(src: Path, experiment: str, cache: Path, out: Path, epochs: int | None, seeds: int | None,
            extra: list[str]) -> dict[str, float]:
    args = ["run", experiment, "--cache", str(cache), "--out", str(out), *extra]
    if epochs is not None:
        args += ["--epochs", str(epochs)]
    if seeds is not None:
        args += ["--seeds", str(seeds)]
    return _probe(src, args)


def bench(args: argparse.Namespace, cache: Path, work: Path) -> None:
    trees = [("new", SRC)] + ([("old", Path(args.compare_src))] if args.compare_src else [])
    shapes = _shapes(cache)
    for experiment in args.experiments.split(","):
        depth, width, batch, full_epochs, full_seeds = DEFAULTS[experiment]
        epochs = args.epochs or full_epochs
        seeds = args.seeds or full_seeds
        n_feat, n_train, n_groups = shapes[experiment]
        n_models = n_groups * 2 * seeds
        full_flops = flops(experiment, n_feat, n_train, n_groups * 2 * full_seeds, full_epochs)
        rate = machine_rate(min(batch, n_train), width)
        part = f"{seeds} seeds x {epochs} epochs" + (" (a fraction; full run extrapolated)" if epochs < full_epochs or seeds < full_seeds else "")
        print(f"\n{experiment}: {n_models} probes ({n_groups} groups x target/control x {seeds} seeds), "
              f"depth {depth}, width {width}, {n_train} training rows x {n_feat} features, batch {batch}; {part}")
        print(f"  training work of the default run ({full_seeds} seeds, {full_epochs} epochs): "
              f"{full_flops / 1e12:.1f} TFLOP; this machine's bmm rate on these shapes now: {rate / 1e9:.1f} "
              f"GFLOP/s, so the arithmetic alone takes {full_flops / rate:.0f} s")
        results = {}
        for name, src in trees:
            res = run_one(src, experiment, cache, work / f"out-{name}", epochs, seeds, [])
            full = dict(res)
            if epochs < full_epochs:
                base = run_one(src, experiment, cache, work / f"out-{name}-1", 1, seeds, [])
                per_epoch = {k: (res[k] - base[k]) / max(1, epochs - 1) for k in ("wall", "cpu")}
                full = {k: base[k] + per_epoch[k] * (full_epochs - 1) for k in ("wall", "cpu")}
                full["rss_mb"] = res["rss_mb"]
            scale = full_seeds / seeds
            full = {k: (v * scale if k in ("wall", "cpu") else v) for k, v in full.items() if k in ("wall", "cpu", "rss_mb")}
            results[name] = (res, full)
            done = flops(experiment, n_feat, n_train, n_models, epochs)
            print(f"  {name}: {res['wall']:7.1f} s wall, {res['cpu']:7.1f} s CPU, peak RSS {res['rss_mb']:6.0f} MB; "
                  f"{done / res['wall'] / 1e9:5.1f} GFLOP/s; default run "
                  f"{'(extrapolated) ' if (epochs, seeds) != (full_epochs, full_seeds) else ''}"
                  f"~{full['wall'] / 60:.1f} min wall, {full['cpu'] / 60:.1f} min CPU")
        if "old" in results:
            old, new = results["old"][0], results["new"][0]
            print(f"  old / new: wall {old['wall'] / new['wall']:.2f}x, CPU {old['cpu'] / new['cpu']:.2f}x, "
                  f"peak RSS {old['rss_mb'] / new['rss_mb']:.2f}x")
            compare_tables(_run_csv(work / "out-old" / experiment), _run_csv(work / "out-new" / experiment))
        if args.quick:
            res = run_one(SRC, experiment, cache, work / "out-quick", None, None, ["--quick"])
            print(f"  --quick preset: {res['wall']:7.1f} s wall, {res['cpu']:7.1f} s CPU, peak RSS {res['rss_mb']:6.0f} MB")
        for name, _ in trees:
            for folder in (work / f"out-{name}", work / f"out-{name}-1"):
                _clear(folder / experiment)
        _clear(work / "out-quick" / experiment)


def _run_csv(folder: Path) -> Path:
    """The one run's tidy CSV in an experiment folder (its name carries the changed settings)."""
    found = [p for p in folder.glob("clip*.csv") if not p.name.endswith((".summary.csv", ".items.csv"))]
    if len(found) != 1:
        raise SystemExit(f"expected one run's CSV in {folder}, found {[p.name for p in found]}")
    return found[0]


def _clear(folder: Path) -> None:
    if folder.is_dir():
        for f in folder.iterdir():
            f.unlink()


def _shapes(cache: Path) -> dict[str, tuple[int, int, int]]:
    """(features, training rows, feature groups) each experiment trains on, from one run's manifest."""
    from vlprobe.experiments.cache_features import load_index, read_stream
    from vlprobe.extract.cache.reader import ActivationCache

    with ActivationCache(cache) as c:
        index = load_index(c)
        text = read_stream(c, "text", ("text",), "cls", "all")
        pooled = sum(read_stream(c, s, ("text", "image"), None, "all", preferred="pooled").states.shape[2] for s in c.streams)
    items = [i for i, f in enumerate(index.families) if len(f) >= 2 and len(f[0]) >= 2 and len(f[1]) >= 2]
    n_train = round(len(items) * 0.75)
    return {
        "variant-probe": (3 * text.states.shape[2], n_train * 16, len(text.layers)),
        "task-adaptation": (2 * pooled, n_train * 4, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=None, help="run a fraction: this many epochs (default: 200)")
    ap.add_argument("--seeds", type=int, default=None, help="run a fraction: this many seeds (default: 11)")
    ap.add_argument("--experiments", default="variant-probe,task-adaptation")
    ap.add_argument("--compare-src", default=None, help="another vlprobe src/ to compare against")
    ap.add_argument("--work", default=None, help="folder for the inputs (kept; default: a temporary one)")
    ap.add_argument("--quick", action="store_true", help="also run the --quick preset")
    ap.add_argument("--threads", type=int, default=None,
                    help="OMP/MKL threads of the runs (1: CPU seconds that hardly depend on what else runs)")
    args = ap.parse_args()
    if args.threads:
        THREADS.update({k: str(args.threads) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")})
        import torch

        torch.set_num_threads(args.threads)  # the machine-rate measurement in this process too
    print(f"cpu cores: {os.cpu_count()}, threads per run: {args.threads or 'default'}, load average "
          f"{os.getloadavg()[0]:.1f} (a shared machine's timings are noisy)")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.work) if args.work else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        cache = build_inputs(work)
        bench(args, cache, work)


if __name__ == "__main__":
    main()
