"""Join the shard files of a ``probe regions extract --shard K/N`` run into one region file."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Sequence
from pathlib import Path

import h5py
import numpy as np

from vlprobe.extract.regions.chunked import EXTRAS, ChunkedRegionWriter, RegionRows, RegionRunHeader
from vlprobe.extract.regions.sources import ImageList
from vlprobe.extract.regions.store import RegionStore
from vlprobe.io.atomic import atomic_path
from vlprobe.io.paths import check_writable
from vlprobe.validation import InputError

__all__ = ["MERGE_CHUNK_BYTES", "merge_region_shards"]

#: Rows are copied in pieces of about this many bytes of features (shards can outgrow memory).
MERGE_CHUNK_BYTES = 64 << 20


def merge_region_shards(paths: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str]) -> Path:
    """Join the N complete shard files of one region extraction into ``out`` (written atomically).

    The merged file is what one unsharded run writes: the same image order, datasets and
    metadata (shard ``0/1``, plus ``merged_from``).

    Raises
    ------
    InputError
        No shards, ``out`` exists and is not an earlier merge of these shards, a shard is missing, repeated, incomplete, not made by
        ``probe regions extract``, or made with other settings (the message names the field).
    """
    from vlprobe.extract.cache.schema import parse_shard

    if not paths:
        raise InputError("shards: give the shard files to merge")
    target = Path(out)
    check_writable(target)
    if os.path.lexists(target) and any(os.path.lexists(p) and os.path.samefile(target, p) for p in paths):
        raise InputError(f"out: {str(target)!r} is one of the shard files; choose a new file name")
    shards: list[tuple[int, Path, RegionRunHeader, dict]] = []
    for p in map(Path, paths):
        with RegionStore(p) as store:  # refuses files that are not complete
            meta = store.meta
        try:
            header = RegionRunHeader.from_meta(meta)
        except ValueError as exc:
            raise InputError(f"shards: {str(p)!r} {exc}") from None
        shards.append((parse_shard(header.shard)[0], p, header, meta))
    _, first, head, meta0 = shards[0]
    n = parse_shard(head.shard)[1]
    seen: dict[int, Path] = {}
    for k, p, header, _ in shards:
        diff = head.diff(header, skip=("shard",))
        if diff:
            raise InputError(f"shards: {p.name} differs from {first.name} ({diff.replace('this run', p.name)})")
        if parse_shard(header.shard)[1] != n:
            raise InputError(f"shards: {p.name} is shard {header.shard}, {first.name} one of {n}")
        if k in seen:
            raise InputError(f"shards: {p.name} and {seen[k].name} are both shard {k}/{n}")
        seen[k] = p
    missing = sorted(set(range(n)) - set(seen))
    if missing:
        raise InputError(f"shards: missing shard(s) {', '.join(f'{m}/{n}' for m in missing)}")
    shards.sort(key=lambda s: s[0])
    ids: list[str] = []
    for _, p, _, _ in shards:
        with h5py.File(p, "r") as f:
            ids.extend(x.decode("utf-8") for x in f["image_id"][()])
    if len(ids) != head.n_images or ImageList(tuple(ids), (None,) * len(ids)).fingerprint != head.images_fingerprint:
        raise InputError("shards: their images do not make up the run's image list (shard files of different runs?)")
    merged = dataclasses.replace(head, shard="0/1")
    if os.path.lexists(target) and not _earlier_merge(target, merged):
        raise InputError(
            f"out: {str(target)!r} already exists and is not an earlier merge of these shards; choose a new file name"
        )
    meta = {k: v for k, v in meta0.items() if k not in ("shard", "row_start", "row_stop")}
    meta.update(row_start=0, row_stop=len(ids), merged_from=[p.name for _, p, _, _ in shards],
                merged=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    max_boxes = int(merged.preset["max_boxes"])
    with atomic_path(target) as tmp:
        tmp.unlink()
        with ChunkedRegionWriter.open(tmp, merged, ids, meta, max_boxes=max_boxes) as w:
            offset = 0
            for _, p, _, _ in shards:
                with h5py.File(p, "r") as f:
                    offset = _copy_rows(f, w, offset)
            w.mark_complete()
    return target


def _earlier_merge(path: Path, header: RegionRunHeader) -> bool:
    """Whether ``path`` is a region file this merge made before (the same command with the same
    settings may replace its own output)."""
    try:
        with RegionStore(path) as store:
            meta = store.meta
        return bool(meta.get("merged_from")) and not RegionRunHeader.from_meta(meta).diff(header)
    except (InputError, OSError, ValueError):
        return False


def _copy_rows(f: h5py.File, w: ChunkedRegionWriter, offset: int) -> int:
    """Copy every row of shard ``f`` into ``w`` from row ``offset``, in bounded pieces; returns the next row."""
    n, r, d = f["features"].shape
    step = max(1, MERGE_CHUNK_BYTES // max(1, r * d * f["features"].dtype.itemsize))
    for a in range(0, n, step):
        b = min(n, a + step)
        w.write(offset + a, RegionRows(
            features=f["features"][a:b], boxes=f["boxes"][a:b], num_boxes=f["num_boxes"][a:b],
            image_w=f["image_w"][a:b], image_h=f["image_h"][a:b],
            extras={name: f["extra"][name][a:b] for name in EXTRAS},
            image_sha256=[x.decode("ascii") for x in np.asarray(f["image_sha256"][a:b])],
        ))
    return offset + n
