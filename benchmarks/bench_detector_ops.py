"""The region detector's ops and the tiny detector, as ratios measured in one run (printed).

1. RoIPool at the VG model's size (300 boxes, 1024 channels, a 38 x 63 stride-16 map, 14 x 14
   bins): the vectorised op against a one-bin-at-a-time loop with the same semantics;
2. RPN NMS (6000 boxes -> the best 300): time of the blocked greedy NMS;
3. class-wise NMS of the BUTD selection (300 proposals x 1600 classes): all classes at once
   against one NMS call per class;
4. the tiny fixture detector: images/s at batch 1 and batch 4, and its stage shares.

Usage: python benchmarks/bench_detector_ops.py [--repeats 3] [--classes 1600]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import torch
from _common import best_of

from vlprobe.extract.regions.detector import RegionDetector, StageTimer
from vlprobe.extract.regions.detector.ops import classwise_nms_keep, nms, roi_pool, round_half_away
from vlprobe.fixtures.frcnn import write_tiny_frcnn


def roi_pool_loop(features: torch.Tensor, rois: torch.Tensor, size: int, scale: float) -> torch.Tensor:
    """RoIPool one bin at a time (the reference kernel's loop, in Python)."""
    _, c, h, w = features.shape
    out = torch.zeros((len(rois), c, size, size))
    for r, (b, *xyxy) in enumerate(rois.tolist()):
        x1, y1, x2, y2 = (int(round_half_away(torch.tensor(v * scale))) for v in xyxy)
        bh = torch.tensor(max(y2 - y1 + 1, 1), dtype=torch.float32) / size
        bw = torch.tensor(max(x2 - x1 + 1, 1), dtype=torch.float32) / size
        for i in range(size):
            h0 = min(max(int(torch.floor(i * bh)) + y1, 0), h)
            h1 = min(max(int(torch.ceil((i + 1) * bh)) + y1, 0), h)
            for j in range(size):
                w0 = min(max(int(torch.floor(j * bw)) + x1, 0), w)
                w1 = min(max(int(torch.ceil((j + 1) * bw)) + x1, 0), w)
                if h1 > h0 and w1 > w0:
                    out[r, :, i, j] = features[int(b), :, h0:h1, w0:w1].amax(dim=(1, 2))
    return out


def random_boxes(gen: torch.Generator, n: int, w: float, h: float, max_side: float) -> torch.Tensor:
    xy = torch.rand((n, 2), generator=gen) * torch.tensor([w, h])
    wh = torch.rand((n, 2), generator=gen) * max_side + 4
    return torch.cat([xy, torch.minimum(xy + wh, torch.tensor([w, h]))], 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--classes", type=int, default=1600)
    args = ap.parse_args()
    gen = torch.Generator().manual_seed(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")

    feats = torch.relu(torch.randn((1, 1024, 38, 63), generator=gen))
    boxes = random_boxes(gen, 300, 1000, 600, 400)
    rois = torch.cat([torch.zeros(300, 1), boxes], 1)
    fast = best_of(lambda: roi_pool(feats, rois, 14, 1 / 16), args.repeats)
    slow = best_of(lambda: roi_pool_loop(feats, rois, 14, 1 / 16), 1)
    same = torch.equal(roi_pool(feats, rois, 14, 1 / 16), roi_pool_loop(feats, rois, 14, 1 / 16))
    print(f"roi_pool 300 x 1024 x 38x63 -> 14x14: vectorised {fast:.3f} s, bin loop {slow:.2f} s, "
          f"ratio {slow / fast:.0f}x, identical: {same}")

    rpn_boxes = random_boxes(gen, 6000, 1000, 600, 300)
    scores = torch.rand(6000, generator=gen)
    t = best_of(lambda: nms(rpn_boxes, scores, 0.7, max_keep=300), args.repeats)
    print(f"nms 6000 boxes -> best 300 at IoU 0.7: {t:.3f} s")

    probs = torch.rand((300, args.classes), generator=gen).softmax(-1)
    together = best_of(lambda: classwise_nms_keep(boxes, probs, 0.3), args.repeats)
    one_by_one = best_of(lambda: [nms(boxes, probs[:, k], 0.3) for k in range(args.classes)], 1)
    print(f"class-wise NMS 300 x {args.classes}: all classes at once {together:.3f} s, "
          f"one nms per class {one_by_one:.2f} s, ratio {one_by_one / together:.1f}x")

    with tempfile.TemporaryDirectory() as tmp:
        det = RegionDetector.load(write_tiny_frcnn(Path(tmp) / "tiny", seed=0), device="cpu")
    rng = np.random.default_rng(0)
    from PIL import Image

    images = [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for h, w in [(64, 64), (80, 120), (60, 150), (130, 90)]]
    det.detect(images[:1])  # warm-up
    one = best_of(lambda: [det.detect([im]) for im in images], args.repeats)
    timer = StageTimer()
    four = best_of(lambda: det.detect(images, timer=timer), args.repeats)
    shares = ", ".join(f"{k} {v:.0%}" for k, v in timer.shares().items())
    print(f"tiny detector (lxmert-36): {4 / one:.1f} images/s at batch 1, {4 / four:.1f} at batch 4; batch 4: {shares}")


if __name__ == "__main__":
    main()
