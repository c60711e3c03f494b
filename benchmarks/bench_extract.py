"""Extraction performance, as ratios measured in one run (printed, never asserted).

1. batched vs one-row-at-a-time extraction (the whole `extract` path: data, model, pooling,
   HDF5 writes), on the synthetic dataset with its variants and the tiny CLIP;
2. vectorised pooling (`pool_states`, all layers at once) vs a per-row, per-layer loop;
3. score matrix by one matrix product vs a loop over pairs.

Usage: python benchmarks/bench_extract.py [--items 40] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import numpy as np
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from _common import best_of

from vlprobe.data.synthetic import make_synthetic_winoground
from vlprobe.extract.models.clip import CLIPAdapter
from vlprobe.extract.models.pooling import pool_states
from vlprobe.extract.runner import ExtractConfig, extract
from vlprobe.fixtures.clip import write_tiny_clip


def bench_extract(root: Path, items: int, repeats: int) -> None:
    data, clip = root / "data", root / "clip"
    make_synthetic_winoground(data, n_items=items, seed=0)
    write_tiny_clip(clip, seed=0)
    runs = iter(range(10_000))

    def run(batch: int) -> None:
        out = root / f"cache-{next(runs)}.h5"
        extract(ExtractConfig(
            model="clip", checkpoint=str(clip), out=out, data_dir=data,
            variants=data / "variants.jsonl", batch_size=batch, device="cpu", progress=False,
        ))
        out.unlink()

    run(32)  # warm-up: imports, first model load
    batched = best_of(lambda: run(32), repeats)
    naive = best_of(lambda: run(1), repeats)
    print(f"extract, {items} items + variants, tiny CLIP, CPU:")
    print(f"  batch 32: {batched:7.3f} s   batch 1: {naive:7.3f} s   ratio {naive / batched:5.1f}x")


def bench_pooling(repeats: int) -> None:
    gen = torch.Generator().manual_seed(0)
    b, n_layers, t, h = 64, 13, 77, 512
    hidden = torch.randn(b, n_layers, t, h, generator=gen)
    lengths = torch.randint(3, t + 1, (b,), generator=gen)
    mask = (torch.arange(t)[None, :] < lengths[:, None]).long()
    cls_index = lengths - 1

    def vectorised() -> None:
        pool_states(hidden, mask, cls_index, ("cls", "mean", "max"))

    def loop() -> None:
        for i in range(b):
            n = int(lengths[i])
            for layer in range(n_layers):
                x = hidden[i, layer, :n]
                _ = (hidden[i, layer, n - 1], x.mean(0), x.max(0).values)

    fast, slow = best_of(vectorised, repeats), best_of(loop, repeats)
    print(f"pooling cls+mean+max, ({b}, {n_layers}, {t}, {h}) (CLIP-base text shape):")
    print(f"  vectorised: {fast * 1e3:7.1f} ms   loop: {slow * 1e3:7.1f} ms   ratio {slow / fast:5.1f}x")


def bench_scores(repeats: int) -> None:
    rng = np.random.default_rng(0)
    img, txt = rng.standard_normal((800, 512)), rng.standard_normal((800, 512))

    def matrix() -> None:
        CLIPAdapter.scores_from_pooled(img, txt)

    def loop() -> None:
        out = np.empty((len(img), len(txt)))
        for i in range(len(img)):
            a = img[i] / np.linalg.norm(img[i])
            for j in range(len(txt)):
                out[i, j] = a @ (txt[j] / np.linalg.norm(txt[j]))

    fast, slow = best_of(matrix, repeats), best_of(loop, 1)
    print("score matrix 800 x 800 (Winoground's recall@k matrix), 512-d:")
    print(f"  matrix product: {fast * 1e3:7.1f} ms   pair loop: {slow * 1e3:7.1f} ms   ratio {slow / fast:5.0f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    with tempfile.TemporaryDirectory() as tmp:
        bench_extract(Path(tmp), args.items, args.repeats)
    bench_pooling(args.repeats)
    bench_scores(args.repeats)


if __name__ == "__main__":
    main()
