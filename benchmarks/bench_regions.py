"""Region-feature import and lookup, as ratios measured in one run (printed, never asserted).

1. streaming TSV import: peak traced Python memory while importing a BUTD TSV of real-size rows
   (36 x 2048 float32), against the file size and against a load-everything-then-write import;
2. ``RegionStore.get`` of a batch of 32 images in one call vs 32 single-image calls.

Usage: python benchmarks/bench_regions.py [--images 200] [--repeats 3]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
from _common import best_of, peak_traced

from vlprobe.extract.regions.formats import import_regions, read_butd_tsv, write_butd_tsv
from vlprobe.extract.regions.store import RegionRecord, RegionStore, write_regions


def records(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    for i in range(n):
        xy = rng.uniform(0, 300, size=(36, 2))
        boxes = np.concatenate([xy, xy + rng.uniform(1, 300, size=(36, 2))], axis=1)
        yield RegionRecord(str(i), np.maximum(rng.standard_normal((36, 2048), np.float32), 0), boxes / 640, 640, 640)


def load_all_then_write(src: Path, out: Path) -> None:
    recs = list(read_butd_tsv(src))  # everything in memory at once
    n = len(recs)
    feats = np.stack([r.features for r in recs])
    boxes = np.stack([r.boxes for r in recs])
    write_regions(out, [r.image_id for r in recs], feats, boxes, np.full(n, 36), np.full(n, 640), np.full(n, 640))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="vlprobe-bench-regions-") as tmp:
        root = Path(tmp)
        src = write_butd_tsv(root / "feats.tsv", records(args.images))
        size_mb = src.stat().st_size / 1e6
        stream_b, stream_s = peak_traced(lambda: import_regions("butd-tsv", src, root / "a.h5"))
        naive_b, naive_s = peak_traced(lambda: load_all_then_write(src, root / "b.h5"))
        stream_mb, naive_mb = stream_b / 1e6, naive_b / 1e6
        print(f"TSV import of {args.images} images x 36 x 2048 ({size_mb:.0f} MB of TSV):")
        print(f"  streaming     peak {stream_mb:7.1f} MB traced, {args.images / stream_s:6.0f} images/s")
        print(f"  load-all      peak {naive_mb:7.1f} MB traced, {args.images / naive_s:6.0f} images/s")
        print(f"  memory ratio load-all / streaming: {naive_mb / stream_mb:.1f}x; "
              f"streaming peak / file size: {stream_mb / size_mb:.3f}")

        with RegionStore(root / "a.h5") as store:
            k = min(32, args.images)
            names = [str(i) for i in np.random.default_rng(0).choice(args.images, k, replace=False)]
            batched = best_of(lambda: store.get(names), args.repeats)
            single = best_of(lambda: [store.get([n]) for n in names], args.repeats)
        print(f"RegionStore.get, {k} images: one call {batched * 1e3:.1f} ms, {k} calls {single * 1e3:.1f} ms "
              f"-> {single / batched:.1f}x")


if __name__ == "__main__":
    main()
