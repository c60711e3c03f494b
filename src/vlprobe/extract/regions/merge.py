"""Join the shard files of a ``probe regions extract --shard K/N`` run into one region file.

The checks and the copying are :func:`vlprobe.extract.sharded_h5.merge_files`; this module says
what a region shard is and checks that the shards' images make up the run's image list.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import h5py

from vlprobe.extract.regions.chunked import ROW_DATASETS, ChunkedRegionWriter, RegionRunHeader
from vlprobe.extract.regions.sources import ImageList
from vlprobe.extract.regions.store import RegionStore
from vlprobe.extract.sharded_h5 import Shard, merge_files
from vlprobe.validation import InputError

__all__ = ["merge_region_shards", "region_shard_state"]


def merge_region_shards(paths: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str]) -> Path:
    """Join the N complete shard files of one region extraction into ``out`` (written atomically).

    The merged file is what one unsharded run writes: the same image order, datasets and
    metadata (shard ``0/1``, plus ``merged_from``).

    Raises
    ------
    InputError
        No shards, ``out`` exists and is not an earlier merge of these shards, a shard is missing,
        repeated, incomplete, not made by ``probe regions extract``, or made with other settings
        (the message names the field).
    """
    return merge_files(paths, out, open_shard=_open_shard, read_merged=_read_merged, write=_write_merged,
                       check=_check_images)


def region_shard_state(path: str | os.PathLike[str], shard: str) -> str:
    """``""`` when ``path`` is a complete region file of shard ``shard`` ("K/N"), else what it lacks."""
    p = Path(path)
    if not p.exists():
        return "no file yet"
    try:
        s = _open_shard(p)
    except (InputError, OSError) as exc:
        return str(exc)
    try:
        if s.header.shard != shard:
            return f"is shard {s.header.shard}, not {shard}"
        return f"incomplete {s.incomplete}" if s.incomplete else ""
    finally:
        s.close()


def _open_shard(path: Path) -> Shard[RegionRunHeader]:
    with RegionStore(path, allow_incomplete=True) as store:
        meta, done = store.meta, store.done
        incomplete = "" if store.complete else f"({int(done.sum())} of {len(done)} images written)"
    try:
        header = RegionRunHeader.from_meta(meta)
    except ValueError as exc:
        raise InputError(f"shards: {str(path)!r} {exc}") from None
    return Shard(path, header, h5py.File(path, "r"), incomplete)


def _read_merged(path: Path) -> tuple[RegionRunHeader, list[str]]:
    with RegionStore(path) as store:
        meta = store.meta
    return RegionRunHeader.from_meta(meta), list(meta.get("merged_from") or [])


def _ids(shards: list[Shard[RegionRunHeader]]) -> list[str]:
    return [x.decode("utf-8") for s in shards for x in s.f["image_id"][()]]


def _check_images(shards: list[Shard[RegionRunHeader]], header: RegionRunHeader) -> None:
    ids = _ids(shards)
    if len(ids) != header.n_images or ImageList(tuple(ids), (None,) * len(ids)).fingerprint != header.images_fingerprint:
        raise InputError("shards: their images do not make up the run's image list (shard files of different runs?)")


def _write_merged(target: Path, header: RegionRunHeader, shards: list[Shard[RegionRunHeader]]) -> None:
    ids = _ids(shards)
    meta0 = _meta(shards[0].f)
    meta = {k: v for k, v in meta0.items() if k not in ("shard", "row_start", "row_stop")}
    jobs = [j for s in shards for j in (_meta(s.f).get("job_ids") or [])]
    meta.update(row_start=0, row_stop=len(ids), merged_from=[s.path.name for s in shards], job_ids=jobs,
                merged=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    with ChunkedRegionWriter.open(target, header, ids, meta, max_boxes=int(header.preset["max_boxes"])) as w:
        offset = 0
        for s in shards:
            offset = w.copy_rows(s.f, "", ROW_DATASETS, offset)
        w.mark_complete()


def _meta(f: h5py.File) -> dict[str, Any]:
    raw = f.attrs.get("meta", "{}")
    return dict(json.loads(raw.decode("utf-8") if isinstance(raw, bytes) else raw))
