"""Recall@k over a large score matrix: block-wise rank counting vs a Python loop over rows.

Printed, never asserted. The matrix is N x N random float32 (default 10,000 x 10,000, 400 MB),
caption r matching image r. Three measurements:

1. vectorised: ``recall_ranks`` (rows in blocks of ~4M comparisons, counting, no sort) for T2I
   (rows) and I2T (the transpose, a strided view), then R@1,2,5,10;
2. a Python loop over rows, two per-query implementations, both with ties against the model:
   (a) argsort the row and find the positive with ``np.where`` (the usual per-query code, as in
   AVLnet/WWH ``compute_metrics`` but per row and tie-correct), (b) sort the row and
   ``searchsorted`` (the fastest loop we know); timed on ``--loop-rows`` rows and scaled to N
   (said in the output);
3. peak extra memory (tracemalloc) of (1), against that of sorting the whole matrix at once,
   measured on a slice of rows and scaled (a full N x N argsort would need N*N*8 bytes).

Usage: python benchmarks/metrics.py [--n 10000] [--loop-rows 500] [--seed 0]
"""

from __future__ import annotations

import argparse

import numpy as np
from _common import best_of, peak_traced

from vlprobe.stats.metrics import recall_at_k, recall_ranks

KS = (1, 2, 5, 10)


def loop_ranks_sort(scores: np.ndarray, positives: np.ndarray) -> np.ndarray:
    """Rank of each row's positive (ties against the model): sort each row, searchsorted."""
    out = np.empty(len(scores), dtype=np.int64)
    for r in range(len(scores)):
        row = np.sort(scores[r])
        # Ties against the model: the positive goes after every candidate scoring as high.
        out[r] = len(row) - np.searchsorted(row, scores[r, positives[r]], side="left")
    return out


def loop_ranks_argsort(scores: np.ndarray, positives: np.ndarray) -> np.ndarray:
    """Rank of each row's positive (ties against the model): argsort each row, np.where."""
    out = np.empty(len(scores), dtype=np.int64)
    for r in range(len(scores)):
        row = scores[r]
        ranked = row[np.argsort(-row)]
        out[r] = np.where(ranked >= row[positives[r]])[0][-1] + 1  # last of the tied block
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--loop-rows", type=int, default=500)
    ap.add_argument("--sort-rows", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    n = args.n
    rng = np.random.default_rng(args.seed)
    m = rng.standard_normal((n, n), dtype=np.float32)
    m[np.arange(n), np.arange(n)] += 2.0  # a plausible model: positives usually near the top
    pos = np.arange(n)
    print(f"score matrix {n} x {n} float32 ({m.nbytes / 1e6:.0f} MB), seed {args.seed}")

    # 1. vectorised, both directions (best of 3: the machine is shared)
    t2i, i2t = recall_ranks(m, pos), recall_ranks(m.T, pos)
    t_t2i = best_of(lambda: recall_ranks(m, pos))
    t_i2t = best_of(lambda: recall_ranks(m.T, pos))
    for name, ranks in (("T2I", t2i), ("I2T", i2t)):
        print(f"  {name}: " + ", ".join(f"R@{k} {100 * (ranks <= k).mean():.2f}" for k in KS))
    print(f"vectorised recall_ranks (block-wise counting): T2I {t_t2i:.3f} s, I2T (transposed view) {t_i2t:.3f} s")

    # 2. Python loops over rows, on a subset, scaled
    rows = min(args.loop_rows, n)
    for label, fn in (("argsort + np.where per row", loop_ranks_argsort), ("sort + searchsorted per row", loop_ranks_sort)):
        if not np.array_equal(fn(m[:rows], pos[:rows]), t2i[:rows]):
            raise SystemExit(f"{label}: loop and vectorised ranks differ")
        part = best_of(lambda fn=fn: fn(m[:rows], pos[:rows]))
        full = part * n / rows
        print(f"python loop, {label}: {part:.3f} s for {rows} rows -> {full:.2f} s for {n} rows "
              f"(timed on {rows} rows, scaled linearly); vectorised is {full / t_t2i:.1f}x faster (target >= 20x)")
    assert recall_at_k(m[:200, :200], pos[:200]) == recall_at_k(m[:200, :200].astype(np.float64), pos[:200])

    # 3. peak memory beyond the input
    peak_vec, _ = peak_traced(lambda: recall_ranks(m, pos))
    srows = min(args.sort_rows, n)
    peak_sort_part, _ = peak_traced(lambda: np.argsort(-m[:srows], axis=1))
    peak_sort = peak_sort_part * n / srows
    print(f"peak extra memory, block-wise counting over all {n} rows: {peak_vec / 1e6:.1f} MB")
    print(f"peak extra memory, whole-matrix argsort: {peak_sort_part / 1e6:.1f} MB for {srows} rows -> "
          f"{peak_sort / 1e6:.0f} MB for {n} rows (scaled); ratio {peak_sort / peak_vec:.0f}x")


if __name__ == "__main__":
    main()
