"""Planning figures for a cluster user: this machine's GEMM peak, the rate MLP probe training
reaches against it, the CPU hours of the paper's probes, and the GPU time each step should take
(printed, never asserted).

1. Peak: the best of ``--repeats`` float32 ``torch.matmul`` of n x n by n x n at a few n, with
   the threads torch uses (``torch.get_num_threads()``, printed).
2. Achieved: task-adaptation and variant-probe at their defaults (depth, width, batch, epochs,
   seeds read from the experiments' configs, not restated here) on synthetic features of
   CLIP ViT-B/32's widths for a 400-item Winoground (300/100 item split):

   * task-adaptation: pooled text + image (512 + 512) of both options -> 2048 inputs, 4 examples
     per item, 2 groups (text and image score);
   * variant-probe: the text stream (hidden 512) of reference and both options -> 1536 inputs,
     16 examples per item (2 captions x 2 orders x 4 draws), 13 groups (embedding + 12 layers);

   each group trains a target and a control probe per seed. Training runs through
   :func:`vlprobe.experiments.mlp_runs.train_target_control`, the function both experiments call,
   on one group and one seed (two probes) for 1 and ``--epochs`` epochs (after a warm-up run, the
   least of ``--timings`` runs each); the difference gives
   the CPU seconds per probe-epoch, extrapolated to the full run (probes x epochs), and so marked.
   Floating-point work is counted analytically: 2 FLOPs per multiply-add of the forward pass, the
   weight gradients and the input gradients of every layer but the first (the features need
   none), i.e. about 6 x parameters per training row and epoch. Adam and the loss are left out.
3. Where the time goes: ``torch.profiler`` over one epoch of one probe (self CPU time per op),
   and the rate of the step's own matrix products alone at their shapes.
4. GPU estimate: the same FLOPs (and the forward FLOPs of extracting ViT-B/32 states for
   Winoground, 2 x parameters x tokens) at an ASSUMED H100 SXM throughput; nothing here ran on a
   GPU, so these are arithmetic lower bounds, not measurements.

The machine may be shared: the load average is printed; CPU seconds (``time.process_time``) are
the steadier figure, wall seconds are printed beside them.

Usage: python benchmarks/planning.py [--epochs 3] [--repeats 5] [--timings 2] [--no-profile]
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import os
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch

from vlprobe.experiments.mlp_runs import train_target_control
from vlprobe.experiments.task_adaptation import TaskAdaptationConfig
from vlprobe.experiments.variant_probe import VariantProbeConfig
from vlprobe.probes.ensemble import mlp_dims, models_per_chunk
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
            t0 = time.perf_counter()
            for _ in range(reps):
                torch.matmul(a, b)
            best = min(best, (time.perf_counter() - t0) / reps)
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


def timed_training(data: tuple, settings: MLPOptions, repeats: int = 1) -> tuple[float, float]:
    """(CPU seconds, wall seconds), the least of ``repeats`` runs, of training and scoring one
    group's target and control probe."""
    X, labels, example_items, split = data
    cpu, wall = float("inf"), float("inf")
    for _ in range(repeats):
        c0, t0 = time.process_time(), time.perf_counter()
        train_target_control(X, labels, example_items, split, [0], settings)
        cpu, wall = min(cpu, time.process_time() - c0), min(wall, time.perf_counter() - t0)
    return cpu, wall


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
        t0 = time.perf_counter()
        for _ in range(10):
            step()
        best = min(best, (time.perf_counter() - t0) / 10)
    return train_flops_per_row(dims) * rows / best


def profile_epoch(data: tuple, settings: MLPOptions, top: int = 8) -> list[tuple[str, float, int]]:
    """(op, share of self CPU time, calls) of the ``top`` ops of one epoch of two probes."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        timed_training(data, dataclasses.replace(settings, epochs=1))
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    ranked = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:top]
    return [(e.key, e.self_cpu_time_total / total, e.count) for e in ranked]


def hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h" if seconds >= 360 else f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.1f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3, help="Epochs of the timed run (the 1-epoch run is subtracted).")
    parser.add_argument("--repeats", type=int, default=5, help="Best of N for the GEMM timings.")
    parser.add_argument("--timings", type=int, default=2, help="Least of N runs for each timed training.")
    parser.add_argument("--no-profile", action="store_true", help="Skip the profile of where the time goes.")
    args = parser.parse_args()
    if args.epochs < 2:
        parser.error("--epochs: at least 2 (the 1-epoch run is subtracted)")

    threads = torch.get_num_threads()
    print(f"torch {torch.__version__}, {threads} thread(s), {os.cpu_count()} CPU(s), "
          f"load average {os.getloadavg()[0]:.2f} (a shared machine makes these figures noisy)")
    peaks = gemm_peak((256, 512, 1024, 2048), args.repeats)
    peak = max(peaks.values())
    print(f"GEMM peak (float32 matmul n x n, best of {args.repeats}): "
          + ", ".join(f"n={n} {r / 1e9:.1f}" for n, r in peaks.items()) + f" GFLOP/s -> peak {peak / 1e9:.1f} GFLOP/s")

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
        timed_training(data, dataclasses.replace(settings, epochs=1))  # warm-up
        cpu1, wall1 = timed_training(data, dataclasses.replace(settings, epochs=1), args.timings)
        cpuE, wallE = timed_training(data, settings, args.timings)
        cpu_pe = (cpuE - cpu1) / (2 * (args.epochs - 1))
        wall_pe = (wallE - wall1) / (2 * (args.epochs - 1))
        achieved = per_probe_epoch / wall_pe
        print(f"\n{name} (defaults: depth {d['depth']}, width {d['width']}, batch {d['batch_size']}, {epochs} epochs, "
              f"{d['seeds']} seeds, lr {d['lr']}): MLP {dims}, {rows} train rows, {probes} probes "
              f"({groups} groups x target/control x {d['seeds']} seeds), "
              f"{models_per_chunk(dims, min(int(d['batch_size']), rows), 'cpu')} per chunk on the CPU")
        print(f"  FLOPs: {per_probe_epoch / 1e9:.1f} GFLOP per probe-epoch, full run {full_flops / 1e12:.0f} TFLOP")
        print(f"  timed 2 probes x (1 and {args.epochs} epochs, least of {args.timings}): {wall_pe:.2f} s wall, {cpu_pe:.2f} CPU s per probe-epoch "
              f"-> achieved {achieved / 1e9:.1f} GFLOP/s = {100 * achieved / peak:.0f}% of the GEMM peak")
        shape_rate = step_gemm_rate(dims, min(int(d["batch_size"]), rows), args.repeats)
        print(f"  the step's matrix products alone (batch {d['batch_size']}): {shape_rate / 1e9:.1f} GFLOP/s "
              f"= {100 * shape_rate / peak:.0f}% of the peak")
        print(f"  full run EXTRAPOLATED ({probes} probes x {epochs} epochs from the timed epochs): "
              f"{hours(wall_pe * probes * epochs)} wall, {cpu_pe * probes * epochs / 3600:.2f} CPU-hours here; "
              f"at the GEMM peak {hours(full_flops / peak)}")
        if not args.no_profile:
            print("  where one epoch's CPU time goes (torch.profiler, self time):")
            for op, share, calls in profile_epoch(data, settings):
                print(f"    {100 * share:5.1f}%  {op} ({calls} calls)")
        gpu_rows.append((f"{name} ({probes} probes x {epochs} epochs)", full_flops))

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
