"""Region extraction from pixels with the full-size VG Faster R-CNN (ResNet-101, random weights), CPU.

Figures measured in one run (printed, never asserted):

1. images per second through ``extract_regions`` (decode, detector, chunked writes) at batch 1
   and batch 4, wall clock and process CPU time (with one thread the CPU time hardly depends on
   what else the machine runs);
2. peak resident memory (``ru_maxrss``) for N and 4N images, each run in a fresh process: the
   output streams to disk batch by batch, so the peak should not grow with the image count;
3. the share of the detector's time in preprocessing, backbone, RPN, RoI head and box selection
   (``RegionDetector.detect(..., timer=StageTimer())``);
4. FLOPs per image (``torch.utils.flop_counter``) and, from them, estimates for Winoground's 800
   images on this CPU (measured rate) and on one GPU (an assumed sustained rate, printed with
   the estimate; the CPU-side stages are added as measured here).

Images are seeded synthetic 640 x 480 pictures (COCO's typical size; resized to 600 x 800 by the
detector's shortest-side-600 rule). ``--threads`` sets torch's intra-op threads.

Usage: python benchmarks/regions_extract.py [--images 4] [--threads 1] [--gpu-tflops 10]
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import in_fresh_process

WINOGROUND_IMAGES = 800


def _write_images(folder: Path, n: int, seed: int = 0, size: tuple[int, int] = (640, 480)) -> Path:
    from PIL import Image, ImageDraw

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i in range(n):
        base = rng.integers(0, 256, size=3)
        img = Image.new("RGB", size, tuple(int(c) for c in base))
        draw = ImageDraw.Draw(img)
        for _ in range(12):
            x0, y0 = rng.integers(0, size[0] - 40), rng.integers(0, size[1] - 40)
            w, h = rng.integers(20, 260, size=2)
            colour = tuple(int(c) for c in rng.integers(0, 256, size=3))
            (draw.ellipse if rng.random() < 0.5 else draw.rectangle)(
                [int(x0), int(y0), int(min(size[0] - 1, x0 + w)), int(min(size[1] - 1, y0 + h))], fill=colour
            )
        img.save(folder / f"img_{i:04d}.jpg", quality=90)
    return folder


def _detector(threads: int) -> Any:
    import torch

    from vlprobe.extract.regions.detector import RegionDetector

    torch.set_num_threads(threads)
    return RegionDetector.random(seed=0, device="cpu")


def _extract_case(args: argparse.Namespace, n_images: int, batch: int, queue: Any) -> None:
    """One run of ``extract_regions`` in this (fresh) process; reports speed and peak memory."""
    from vlprobe.extract.regions.extraction import RegionExtractConfig, extract_regions

    det = _detector(args.threads)
    with tempfile.TemporaryDirectory(prefix="vlprobe-bench-rx-") as tmp:
        folder = _write_images(Path(tmp) / "images", n_images)
        config = RegionExtractConfig(
            detector="random", out=Path(tmp) / "regions.h5", images=folder, batch_size=batch, device="cpu",
            progress=False,
        )
        w0, c0 = time.perf_counter(), time.process_time()
        result = extract_regions(config, detector=det)
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    queue.put({"images": result.images_written, "seconds": wall, "cpu_seconds": cpu, "peak_mb": peak})


def _profile_case(args: argparse.Namespace, queue: Any) -> None:
    """Stage shares over a few batch-1 calls, and the FLOPs of one image."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from vlprobe.extract.regions.detector import StageTimer
    from vlprobe.extract.regions.sources import read_image

    det = _detector(args.threads)
    with tempfile.TemporaryDirectory(prefix="vlprobe-bench-rx-") as tmp:
        folder = _write_images(Path(tmp) / "images", args.images, seed=1)
        images = [read_image(p)[0] for p in sorted(folder.iterdir())]
    det.detect(images[:1])  # warm-up
    timer = StageTimer()
    for img in images:
        det.detect([img], timer=timer)
    counter = FlopCounterMode(display=False)
    with counter, torch.inference_mode():
        det.detect(images[:1])
    queue.put({"seconds": dict(timer.seconds), "shares": timer.shares(), "calls": timer.calls,
               "flops": int(counter.get_total_flops())})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=4, help="N: images per speed run (the memory runs use N and 4N)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--gpu-tflops", type=float, default=10.0,
                    help="sustained float32 TFLOP/s assumed for the GPU estimate")
    args = ap.parse_args()
    n = args.images
    print(f"full-size VG Faster R-CNN (ResNet-101 C4, 1600 objects, 400 attributes), random weights, CPU, "
          f"{args.threads} thread(s); {n} synthetic 640x480 JPEGs per run, preset lxmert-36")

    speed = {b: in_fresh_process(_extract_case, args, n, b) for b in (1, 4)}
    for b, r in speed.items():
        print(f"  batch {b}: {r['images'] / r['seconds']:6.3f} images/s wall ({r['seconds']:6.1f} s), "
              f"{r['images'] / r['cpu_seconds']:6.3f} images/s CPU time; peak RSS {r['peak_mb']:6.0f} MB")
    print(f"  batch 4 / batch 1: {speed[1]['seconds'] / speed[4]['seconds']:.2f}x wall, "
          f"{speed[1]['cpu_seconds'] / speed[4]['cpu_seconds']:.2f}x CPU time")

    big = in_fresh_process(_extract_case, args, 4 * n, 4)
    print(f"  peak RSS at batch 4: {n} images {speed[4]['peak_mb']:6.0f} MB, {4 * n} images {big['peak_mb']:6.0f} MB "
          f"(ratio {big['peak_mb'] / speed[4]['peak_mb']:.2f}; the output streams to disk)")

    prof = in_fresh_process(_profile_case, args)
    order = ("preprocess", "backbone", "rpn", "roi_heads", "selection")
    shares = prof["shares"]
    print("  time share per stage (batch 1, " + f"{prof['calls']} images): "
          + ", ".join(f"{k} {100 * shares.get(k, 0.0):4.1f} %" for k in order))
    gflops = prof["flops"] / 1e9
    per_image = sum(prof["seconds"].values()) / prof["calls"]
    print(f"  {gflops:.0f} GFLOP per image (multiply-adds x 2); this CPU sustains {gflops / per_image:.1f} GFLOP/s")

    best = max(speed.values(), key=lambda r: r["images"] / r["seconds"])
    cpu_s = WINOGROUND_IMAGES / (best["images"] / best["seconds"])
    host = sum(prof["seconds"].get(k, 0.0) for k in ("preprocess", "selection")) / prof["calls"]
    gpu_s = WINOGROUND_IMAGES * (gflops / (args.gpu_tflops * 1e3) + host)
    print(f"  Winoground's {WINOGROUND_IMAGES} images: about {cpu_s / 3600:.1f} h on this CPU at the best rate above; "
          f"about {gpu_s / 60:.1f} min on one GPU, estimated as {gflops:.0f} GFLOP / {args.gpu_tflops:g} TFLOP/s "
          f"sustained + {host:.2f} s of preprocessing and selection per image as measured here (they run on the host)")


if __name__ == "__main__":
    main()
