"""Shard merges of both file kinds, as ratios measured in one run (printed, never asserted).

``probe cache merge`` (a cross-encoder cache with pair states: two pair streams, three poolings)
and ``probe regions merge`` (36 boxes x D features) join N shard files written here; each merge's
time is printed against a plain h5py copy of the same row datasets into one preallocated file
(the floor a merge cannot beat: same bytes read and written, no checks, no done masks).

Usage: python benchmarks/bench_merge.py [--rows 2000] [--images 1000] [--shards 4] [--repeats 1]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import h5py
import numpy as np
from _common import best_of

from vlprobe.extract.cache.merge import merge_shards
from vlprobe.extract.cache.schema import CacheHeader, CacheRecord, PairLayout, StreamLayout
from vlprobe.extract.cache.writer import CacheWriter
from vlprobe.extract.models.streams import StreamSpec
from vlprobe.extract.regions.chunked import EXTRAS, ChunkedRegionWriter, RegionRows, RegionRunHeader
from vlprobe.extract.regions.merge import merge_region_shards
from vlprobe.extract.regions.sources import ImageList
from vlprobe.fixtures.caches import winoground_tables

LAYERS, HIDDEN, POOLINGS = 13, 256, ("cls", "mean", "max")
BOXES, DIM = 36, 512


def cache_shards(root: Path, n_rows: int, n: int) -> list[Path]:
    """N shards of a cross-encoder cache of ``n_rows`` pairs with pair states."""
    tables = winoground_tables(max(1, n_rows // 4), 0)
    rng = np.random.default_rng(0)
    image = rng.integers(0, len(tables.image_id), n_rows).astype(np.int32)
    text = rng.integers(0, len(tables.text_id), n_rows).astype(np.int32)
    specs = [StreamSpec(s, "pair", ("embed",) + ("self",) * (LAYERS - 1), HIDDEN, "first", None) for s in ("lang", "vision")]
    paths = []
    for k in range(n):
        a, b = k * n_rows // n, (k + 1) * n_rows // n
        header = CacheHeader(
            model="lxmert", checkpoint="bench", checkpoint_fingerprint="sha256:bench", dataset="winoground",
            dataset_fingerprint="sha256:bench", variants_fingerprint="", pair_plan="all", pair_states=True,
            poolings=POOLINGS, dtype="float16", shard=f"{k}/{n}", layers={s.name: list(range(LAYERS)) for s in specs},
        )
        layouts = [StreamLayout(s, list(range(LAYERS)), image, text, a, b, POOLINGS) for s in specs]
        p = root / f"cache-{k}.h5"
        with CacheWriter.open(p, header, tables, layouts, CacheRecord(), with_scores=True,
                              pairs=PairLayout(image, text, a, b), score_kind="match_probability") as w:
            for c in range(a, b, 256):
                rows = np.arange(c - a, min(b, c + 256) - a)
                states = {s.name: {q: rng.normal(size=(len(rows), LAYERS, HIDDEN)).astype(np.float16) for q in POOLINGS}
                          for s in specs}
                w.write_pairs(rows, rng.uniform(size=len(rows)), states, {})
            w.scores_from_pairs("match_probability")
            w.update_record(complete=True)
        paths.append(p)
    return paths


def region_shards(root: Path, n_images: int, n: int) -> list[Path]:
    ids = [f"img{i}" for i in range(n_images)]
    fingerprint = ImageList(tuple(ids), (None,) * n_images).fingerprint
    preset = {"name": "bench", "max_boxes": BOXES, "min_boxes": BOXES, "min_score": 0.2}
    rng = np.random.default_rng(1)
    paths = []
    for k in range(n):
        a, b = k * n_images // n, (k + 1) * n_images // n
        header = RegionRunHeader("sha256:bench", preset, DIM, "float32", fingerprint, n_images, f"{k}/{n}")
        p = root / f"regions-{k}.h5"
        meta = {"detector": {"spec": "bench"}, "images": {"source": "bench"}, "row_start": a, "row_stop": b}
        with ChunkedRegionWriter.open(p, header, ids[a:b], meta, max_boxes=BOXES) as w:
            for c in range(a, b, 64):
                m = min(b, c + 64) - c
                w.write(c - a, RegionRows(
                    rng.normal(size=(m, BOXES, DIM)).astype(np.float32), rng.uniform(size=(m, BOXES, 4)).astype(np.float32),
                    np.full(m, BOXES), np.full(m, 640), np.full(m, 480),
                    {x: np.zeros((m, BOXES), dt) for x, dt in EXTRAS.items()}, ["0" * 64] * m,
                ))
            w.mark_complete()
        paths.append(p)
    return paths


def plain_copy(shards: list[Path], out: Path, groups: dict[str, list[str]]) -> None:
    """The row datasets of ``shards`` copied into one preallocated file with h5py, nothing else."""
    with h5py.File(out, "w") as dst:
        srcs = [h5py.File(p, "r") for p in shards]
        try:
            for group, names in groups.items():
                for name in names:
                    path = f"{group}/{name}" if group else name
                    parts = [s[path] for s in srcs]
                    total = sum(d.shape[0] for d in parts)
                    ds = dst.create_dataset(path, (total, *parts[0].shape[1:]), dtype=parts[0].dtype)
                    at = 0
                    for d in parts:
                        for a in range(0, d.shape[0], 1024):
                            piece = d[a : a + 1024]
                            ds[at + a : at + a + len(piece)] = piece
                        at += d.shape[0]
        finally:
            for s in srcs:
                s.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2000, help="pairs of the cache")
    ap.add_argument("--images", type=int, default=1000, help="images of the region file")
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="vlprobe-bench-merge-") as tmp:
        root = Path(tmp)
        cases = [
            ("cache", cache_shards(root, args.rows, args.shards), merge_shards,
             {"streams/lang": list(POOLINGS), "streams/vision": list(POOLINGS), "pairs": ["score"]}),
            ("regions", region_shards(root, args.images, args.shards), merge_region_shards,
             {"": ["features", "boxes", "num_boxes", "image_w", "image_h", "image_sha256",
                   *(f"extra/{x}" for x in EXTRAS)]}),
        ]
        for kind, shards, merge, groups in cases:
            mb = sum(p.stat().st_size for p in shards) / 1e6
            merged = best_of(lambda: merge(shards, root / f"{kind}-merged.h5"), args.repeats)  # noqa: B023
            floor = best_of(lambda: plain_copy(shards, root / f"{kind}-plain.h5", groups), args.repeats)  # noqa: B023
            (root / f"{kind}-plain.h5").unlink()
            (root / f"{kind}-merged.h5").unlink()
            print(f"{kind} merge of {args.shards} shards ({mb:.0f} MB): {merged:.2f} s ({mb / merged:.0f} MB/s); "
                  f"plain h5py copy {floor:.2f} s -> merge / copy {merged / floor:.2f}x")


if __name__ == "__main__":
    main()
