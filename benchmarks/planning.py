"""Planning figures for a cluster user: this machine's GEMM peak, the rate MLP probe training
reaches against it, the CPU hours of the paper's probes, and the GPU time each step should take
(printed, never asserted).

1. Peak: the best of ``--repeats`` float32 ``torch.matmul`` of n x n by n x n at a few n, on
   ``--threads`` threads (default 1: the figures are per core, see below), measured again after
   each experiment's timings (the best of all is the peak: a peak measured in a busy moment would
   flatter the rates).
2. Achieved: task-adaptation and variant-probe at their defaults (depth, width, batch, epochs,
   seeds read from the experiments' configs, not restated here) on synthetic features of
   CLIP ViT-B/32's widths for a 400-item Winoground (300/100 item split):

   * task-adaptation: pooled text + image (512 + 512) of both options -> 2048 inputs, 4 examples
     per item, 2 groups (text and image score);
   * variant-probe: the text stream (hidden 512) of reference and both options -> 1536 inputs,
     16 examples per item (2 captions x 2 orders x 4 draws), 13 groups (embedding + 12 layers);

   each group trains a target and a control probe per seed. Training runs through
   :func:`vlprobe.probes.ensemble.iter_mlp_ensemble` with the arguments
   :func:`vlprobe.experiments.mlp_runs.train_target_control` (what both experiments call) gives it
   for one group and one seed (two probes, chunked by the default CPU memory budget), for
   ``--epochs`` epochs; every epoch is timed on its own (the first of each chunk, which holds the
   initialisation, is left out), and the median and the best epoch are printed, extrapolated to
   the full run (probes x epochs) and so marked. Floating-point work is counted analytically: 2 FLOPs per multiply-add of the forward
   pass, the weight gradients and the input gradients of every layer but the first (the features
   need none), i.e. about 6 x parameters per training row and epoch. Adam and the loss are left out.
3. The limit of a step: its matrix products alone at their shapes (the trainer's ``bmm`` calls,
   best of ``--repeats``) plus one fused Adam step over its parameters alone (memory-bound: every
   parameter, gradient and moment read and written); the best epoch's rate against that limit;
   and where the time goes: ``torch.profiler`` over one epoch of two probes through
   ``train_target_control`` (self CPU time per op).
4. GPU estimate: the same FLOPs (and the forward FLOPs of extracting ViT-B/32 states for
   Winoground, 2 x parameters x tokens) at an ASSUMED H100 SXM throughput; nothing here ran on a
   GPU, so these are arithmetic lower bounds, not measurements.

Every figure is timed on the same clock: with one thread (the default) CPU seconds
(``time.process_time``), which other jobs on a shared machine barely move, so the rates are per
core and the CPU hours are core hours, what a cluster charges; with ``--threads N`` (0: torch's
own count) wall seconds, which on a shared machine also measure the load (two torch threads that
wait on each other at every product lose far more than their share when another job holds a
core). The load average is printed.

Usage: python benchmarks/planning.py [--threads 1] [--epochs 4] [--repeats 5] [--no-profile]
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import os
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch

from vlprobe.experiments.mlp_runs import train_target_control
from vlprobe.experiments.task_adaptation import TaskAdaptationConfig
from vlprobe.experiments.variant_probe import VariantProbeConfig
from vlprobe.probes.ensemble import iter_mlp_ensemble, mlp_dims, models_per_chunk
from vlprobe.probes.splits import ItemSplit
from vlprobe.runs.option_groups import MLPOptions

ITEMS, TRAIN_ITEMS = 400, 300
#: (config class, input features, examples per item, feature groups) for CLIP ViT-B/32 on Winoground.
SETUPS = {
    "task-adaptation": (TaskAdaptationConfig, 2 * (512 + 512), 4, 2),
    "variant-probe": (VariantProbeConfig, 3 * 512, 16, 13),
}
#: ASSUMED H100 SXM dense throughputs (FLOP/s, the vendor's datasheet figures, not measured):
#: float32 on the CUDA cores, and TF32 on the tensor cores (torch uses TF32 for float32 matmuls
#: only with ``torch.backends.cuda.matmul.allow_tf32 = True``; vlprobe leaves it at False).
H100_FP32 = 67e12
H100_TF32 = 495e12
#: CLIP ViT-B/32 encoders: parameters and tokens per input (image: 7 x 7 patches + CLS at 224 px;
#: text: at most 77 tokens), and the Winoground inputs (800 images; 800 captions x 23 texts each
#: with the why-winoground-hard variants).
VIT_B32 = {"image": (87.8e6, 50, 800), "text": (63.2e6, 77, 800 * 23)}
#: The clock every rate is timed on: CPU seconds with one thread, wall seconds with more (``main`` sets it).
clock: Callable[[], float] = time.process_time


def defaults(config_cls: type) -> dict[str, Any]:
    """The MLP defaults (and seeds) an experiment's config declares."""
    fields = {f.name: f.default for f in dataclasses.fields(config_cls)}
    return {k: fields[k] for k in ("depth", "width", "lr", "epochs", "batch_size", "seeds")}


def train_flops_per_row(dims: list[int]) -> float:
    """FLOPs of one training row through one MLP: forward + weight grads + input grads (not layer 1)."""
    return 2.0 * sum(a * b * (2 if i == 0 else 3) for i, (a, b) in enumerate(itertools.pairwise(dims)))


def gemm_peak(sizes: tuple[int, ...], repeats: int) -> dict[int, float]:
    """Best float32 matmul rate (FLOP/s) per square size n."""
    out = {}
    for n in sizes:
        a, b = torch.randn(n, n), torch.randn(n, n)
        torch.matmul(a, b)
        reps = max(1, int(2e9 / (2 * n**3)))  # about 2 GFLOP per timing
        best = float("inf")
        for _ in range(repeats):
            t0 = clock()
            for _ in range(reps):
                torch.matmul(a, b)
            best = min(best, (clock() - t0) / reps)
        out[n] = 2.0 * n**3 / best
    return out


def synthetic(features: int, per_item: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, ItemSplit]:
    """One group of random features, random labels, the examples' items and a 300/100 item split."""
    rng = np.random.default_rng(seed)
    n = ITEMS * per_item
    X = rng.standard_normal((1, n, features), dtype=np.float32)
    labels = rng.integers(0, 2, size=(1, n))
    example_items = np.repeat(np.arange(ITEMS), per_item)
    split = ItemSplit(train=np.arange(TRAIN_ITEMS), test=np.arange(TRAIN_ITEMS, ITEMS), seed=0, strata={})
    return X, labels, example_items, split


def train_once(data: tuple, settings: MLPOptions) -> None:
    """Train and score one group's target and control probe through ``train_target_control``."""
    X, labels, example_items, split = data
    train_target_control(X, labels, example_items, split, [0], settings)


def epoch_times(data: tuple, settings: MLPOptions) -> tuple[np.ndarray, np.ndarray]:
    """(wall, CPU) seconds per probe-epoch of every timed epoch of one group's target and control probe.

    The call ``train_target_control`` makes for one group and one seed (target and control labels,
    seed 0 twice, group 0 twice, the default memory budget); the first epoch of each chunk (which
    holds the initialisation) is left out.
    """
    X, labels, example_items, split = data
    train = np.flatnonzero(np.isin(example_items, split.train))
    y = np.stack([labels[0], 1 - labels[0]])[:, train]
    stamps = [(0, time.perf_counter(), time.process_time())]
    for _ in iter_mlp_ensemble(X[:, train], y, [0, 0], groups=[0, 0], depth=settings.depth, width=settings.width,
                               lr=settings.lr, epochs=settings.epochs, batch_size=settings.batch_size,
                               device=settings.device,
                               progress=lambda m: stamps.append((m, time.perf_counter(), time.process_time()))):
        stamps.append((0, time.perf_counter(), time.process_time()))  # scoring between chunks is not timed
    wall, cpu, since_chunk = [], [], 0
    for (_, w0, c0), (m, w1, c1) in itertools.pairwise(stamps):
        if not m:  # a chunk ended
            since_chunk = 0
            continue
        since_chunk += 1
        if since_chunk > 1:
            wall.append((w1 - w0) / m)
            cpu.append((c1 - c0) / m)
    return np.array(wall), np.array(cpu)


def adam_step_time(dims: list[int], repeats: int) -> float:
    """Seconds of one fused Adam step over the parameters of one MLP of layer widths ``dims`` (best of ``repeats``)."""
    params = [torch.zeros(a, b, requires_grad=True) for a, b in itertools.pairwise(dims)]
    params += [torch.zeros(b, requires_grad=True) for b in dims[1:]]
    for q in params:
        q.grad = torch.randn_like(q) * 1e-3
    opt = torch.optim.Adam(params, lr=1e-4, fused=True)
    opt.step()
    best = float("inf")
    for _ in range(repeats):
        t0 = clock()
        for _ in range(10):
            opt.step()
        best = min(best, (clock() - t0) / 10)
    return best


def step_gemm_rate(dims: list[int], rows: int, repeats: int) -> float:
    """FLOP/s of one training step's matrix products alone (one model, ``rows`` rows, as the trainer's bmm)."""
    mats = []
    for i, (a, b) in enumerate(itertools.pairwise(dims)):
        mats.append((torch.randn(1, rows, a), torch.randn(1, a, b), torch.randn(1, rows, b), i))

    def step() -> None:
        for x, w, g, i in mats:
            torch.bmm(x, w)
            torch.bmm(x.transpose(1, 2), g)  # weight gradient
            if i:
                torch.bmm(g, w.transpose(1, 2))  # input gradient
    step()
    best = float("inf")
    for _ in range(repeats):
        t0 = clock()
        for _ in range(10):
            step()
        best = min(best, (clock() - t0) / 10)
    return train_flops_per_row(dims) * rows / best


def profile_epoch(data: tuple, settings: MLPOptions, top: int = 8) -> list[tuple[str, float, int]]:
    """(op, share of self CPU time, calls) of the ``top`` ops of one epoch of two probes."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        train_once(data, dataclasses.replace(settings, epochs=1))
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    ranked = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:top]
    return [(e.key, e.self_cpu_time_total / total, e.count) for e in ranked]


def hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h" if seconds >= 360 else f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.1f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (0: torch's own count); 1 times CPU seconds, more wall seconds.")
    parser.add_argument("--epochs", type=int, default=4, help="Epochs of the timed run (the first of each chunk is left out).")
    parser.add_argument("--repeats", type=int, default=5, help="Best of N for the GEMM and Adam timings.")
    parser.add_argument("--no-profile", action="store_true", help="Skip the profile of where the time goes.")
    args = parser.parse_args()
    if args.epochs < 2:
        parser.error("--epochs: at least 2 (the first of each chunk is left out)")
    if args.threads < 0:
        parser.error("--threads: 0 (torch's own count) or more")
    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    global clock
    clock = time.process_time if threads == 1 else time.perf_counter
    on = "CPU seconds: rates per core" if threads == 1 else "wall seconds (a shared machine makes them noisy)"
    print(f"torch {torch.__version__}, {threads} thread(s), {os.cpu_count()} CPU(s), "
          f"load average {os.getloadavg()[0]:.2f}; timed in {on}")
    sizes = (256, 512, 1024, 2048)
    peaks = gemm_peak(sizes, args.repeats)
    print(f"GEMM peak (float32 matmul n x n, best of {args.repeats}): "
          + ", ".join(f"n={n} {r / 1e9:.1f}" for n, r in peaks.items()) + " GFLOP/s")
    timings = []

    gpu_rows = []
    for name, (config_cls, features, per_item, groups) in SETUPS.items():
        d = defaults(config_cls)
        dims = mlp_dims(features, int(d["depth"]), int(d["width"]))
        settings = MLPOptions(depth=int(d["depth"]), width=int(d["width"]), lr=float(d["lr"]),
                              epochs=args.epochs, batch_size=int(d["batch_size"]), device="cpu")
        data = synthetic(features, per_item)
        rows = TRAIN_ITEMS * per_item
        probes = groups * 2 * int(d["seeds"])
        epochs = int(d["epochs"])
        per_probe_epoch = train_flops_per_row(dims) * rows
        full_flops = per_probe_epoch * probes * epochs
        train_once(data, dataclasses.replace(settings, epochs=1))  # warm-up
        wall, cpu = epoch_times(data, settings)
        timed = cpu if threads == 1 else wall
        best, median, cpu_median = float(timed.min()), float(np.median(timed)), float(np.median(cpu))
        batch = min(int(d["batch_size"]), rows)
        print(f"\n{name} (defaults: depth {d['depth']}, width {d['width']}, batch {d['batch_size']}, {epochs} epochs, "
              f"{d['seeds']} seeds, lr {d['lr']}): MLP {dims}, {rows} train rows, {probes} probes "
              f"({groups} groups x target/control x {d['seeds']} seeds), "
              f"{models_per_chunk(dims, batch, 'cpu')} per chunk on the CPU")
        print(f"  FLOPs: {per_probe_epoch / 1e9:.1f} GFLOP per probe-epoch, full run {full_flops / 1e12:.0f} TFLOP")
        print(f"  timed 2 probes x {args.epochs} epochs ({len(wall)} probe-epochs timed, load average "
              f"{os.getloadavg()[0]:.2f}): median {median:.2f} s ({float(np.median(wall)):.2f} s wall, "
              f"{cpu_median:.2f} CPU s), best {best:.2f} s per probe-epoch -> {per_probe_epoch / median / 1e9:.1f} "
              f"GFLOP/s at the median epoch, {per_probe_epoch / best / 1e9:.1f} at the best")
        gemm_rate = step_gemm_rate(dims, batch, args.repeats)
        adam = adam_step_time(dims, args.repeats)
        limit = per_probe_epoch / (per_probe_epoch / gemm_rate + -(-rows // batch) * adam)
        print(f"  the limit of a step (batch {batch}): its matrix products alone {gemm_rate / 1e9:.1f} GFLOP/s; "
              f"with a fused Adam step alone ({1e3 * adam:.1f} ms) {limit / 1e9:.1f} GFLOP/s; the best epoch reaches "
              f"{100 * per_probe_epoch / best / limit:.0f}% of that limit")
        print(f"  full run EXTRAPOLATED ({probes} probes x {epochs} epochs from the timed epochs): "
              f"{cpu_median * probes * epochs / 3600:.2f} CPU-hours at the median epoch "
              f"({hours(float(np.median(wall)) * probes * epochs)} wall on {threads} thread(s) here), "
              f"{hours(best * probes * epochs)} at the best epoch's rate")
        if not args.no_profile:
            print("  where the CPU time of one epoch of two probes goes, their initialisation included (torch.profiler, self time):")
            for op, share, calls in profile_epoch(data, settings):
                print(f"    {100 * share:5.1f}%  {op} ({calls} calls)")
        timings.append((name, per_probe_epoch / median, per_probe_epoch / best, gemm_rate, limit, full_flops))
        gpu_rows.append((f"{name} ({probes} probes x {epochs} epochs)", full_flops))
        again = gemm_peak(sizes, args.repeats)
        peaks = {n: max(peaks[n], again[n]) for n in sizes}

    peak = max(peaks.values())
    print(f"\nAgainst the GEMM peak, the best of {len(timings) + 1} measurements: "
          + ", ".join(f"n={n} {r / 1e9:.1f}" for n, r in peaks.items()) + f" GFLOP/s -> peak {peak / 1e9:.1f} GFLOP/s")
    for name, med, bst, gemm_rate, limit, full_flops in timings:
        print(f"  {name}: achieved {med / 1e9:.1f} GFLOP/s = {100 * med / peak:.0f}% of the peak at the median epoch, "
              f"{100 * bst / peak:.0f}% at the best; the step's products alone {100 * gemm_rate / peak:.0f}%, with Adam "
              f"{100 * limit / peak:.0f}%; the full run at the peak {hours(full_flops / peak)}")

    for stream, (params, tokens, inputs) in VIT_B32.items():
        gpu_rows.insert(0, (f"extract ViT-B/32 {stream} ({inputs} inputs x {tokens} tokens, forward)",
                            2.0 * params * tokens * inputs))
    print(f"\nGPU time per step, ESTIMATED from FLOPs at an ASSUMED H100 SXM throughput (not measured): "
          f"float32 {H100_FP32 / 1e12:.0f} TFLOP/s (what vlprobe runs), TF32 {H100_TF32 / 1e12:.0f} TFLOP/s; "
          "arithmetic only: lower bounds (small batches, data loading and Python add to them)")
    for label, flops in gpu_rows:
        print(f"  {label}: {flops / 1e12:.1f} TFLOP -> {hours(flops / H100_FP32)} fp32, {hours(flops / H100_TF32)} tf32")


if __name__ == "__main__":
    main()
