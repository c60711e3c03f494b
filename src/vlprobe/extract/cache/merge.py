"""``probe cache merge``: join the N shard files of one run into one cache.

The checks and the copying are :func:`vlprobe.extract.sharded_h5.merge_files`; this module says
what a cache shard is and how the merged cache is laid out (and its scores filled).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from vlprobe.extract.cache.reader import ActivationCache
from vlprobe.extract.cache.schema import CacheHeader, CacheTables, PairLayout, StreamLayout
from vlprobe.extract.cache.writer import CacheWriter
from vlprobe.extract.models.base import DualEncoder
from vlprobe.extract.scoring import pooled_score_fn
from vlprobe.extract.sharded_h5 import Shard, merge_files
from vlprobe.registry import MODELS
from vlprobe.validation import InputError

__all__ = ["merge_shards", "shard_state"]

#: The datasets of a stream that hold its rows (the ones of its poolings that the file stores).
_ROW_DATASETS = ("cls", "mean", "max", "pooled")


def merge_shards(paths: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str]) -> Path:
    """Join the N complete shard files of one run into one cache (written atomically).

    Raises
    ------
    InputError
        A shard is missing, repeated, incomplete, or was made with other settings: a header
        field, the tag file (``tags_fingerprint``) or the index tables (items, images, texts and
        their tags) differ.
    """
    return merge_files(paths, out, open_shard=_open_shard, read_merged=_read_merged, write=_write_merged,
                       check=_same_run)


def shard_state(path: str | os.PathLike[str], shard: str) -> str:
    """``""`` when ``path`` is a complete cache of shard ``shard`` ("K/N"), else what it lacks
    (``"no file yet"``, ``"incomplete in stream 'image'"``, ``"is shard 0/2"``, an unreadable file's error)."""
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


def _open_shard(path: Path) -> Shard[CacheHeader]:
    c = ActivationCache(path)
    incomplete = next((f"in stream {s!r}" for s in c.streams if not c.done(s).all()), "")
    if not incomplete and c.has_pairs and not c.pairs()["done"].all():
        incomplete = "in its pairs"
    return Shard(c.path, c.header, c.f, incomplete, owner=c)


def _same_run(shards: list[Shard[CacheHeader]], header: CacheHeader) -> None:
    """Beyond the headers: every shard read the same tag file and holds the same index tables (the
    merged cache takes them from shard 0)."""
    first: ActivationCache = shards[0].owner
    tables = {name: first.table(name) for name in ("items", "images", "texts")}
    for s in shards[1:]:
        c: ActivationCache = s.owner
        differs = f"shards: {s.path.name} differs from {shards[0].path.name} in"
        if c.record.tags_fingerprint != first.record.tags_fingerprint:
            raise InputError(f"{differs} tags_fingerprint ({shards[0].path.name} has "
                             f"{first.record.tags_fingerprint!r}, {s.path.name} has {c.record.tags_fingerprint!r}): "
                             "they read other --tags files")
        for name, mine in tables.items():
            theirs = c.table(name)
            if mine.keys() != theirs.keys() or any(not np.array_equal(mine[k], theirs[k]) for k in mine):
                raise InputError(f"{differs} its {name} table (other items, texts or tags): shards of another run")


def _read_merged(path: Path) -> tuple[CacheHeader, list[str]]:
    with ActivationCache(path) as c:
        return c.header, c.record.merged_from


def _write_merged(target: Path, header: CacheHeader, shards: list[Shard[CacheHeader]]) -> None:
    caches: list[ActivationCache] = [s.owner for s in shards]
    first = caches[0]
    tabs = {name: first.table(name) for name in ("items", "images", "texts")}
    tables = CacheTables(
        item_id=list(tabs["items"]["id"]), item_tags=list(tabs["items"]["tags"]),
        image_id=list(tabs["images"]["id"]), image_name=list(tabs["images"]["name"]),
        image_item=list(tabs["images"]["item"]), text_id=list(tabs["texts"]["id"]),
        text=list(tabs["texts"]["text"]), text_item=list(tabs["texts"]["item"]),
        text_parent=list(tabs["texts"]["parent"]), text_strategy=list(tabs["texts"]["strategy"]),
    )
    layouts = []
    for s in first.streams:
        spec = first.stream_spec(s)
        image = np.concatenate([c.rows(s)["image"] for c in caches])
        text = np.concatenate([c.rows(s)["text"] for c in caches])
        layouts.append(StreamLayout(spec, first.layers(s), image, text, 0, None, tuple(first.poolings(s))))
    devices = ", ".join(dict.fromkeys(c.record.device for c in caches))  # where each shard ran
    record = dataclasses.replace(first.record, merged_from=[c.path.name for c in caches], device=devices,
                                 job_ids=[j for c in caches for j in c.record.job_ids])
    pairs = None
    if first.has_pairs:
        parts = [c.pairs() for c in caches]
        pairs = PairLayout(np.concatenate([p["image"] for p in parts]), np.concatenate([p["text"] for p in parts]),
                           position_columns=first.position_columns())
    with CacheWriter.open(
        target, header, tables, layouts, record, with_scores=True, pairs=pairs, score_kind=first.score_kind,
    ) as w:
        for lay in layouts:
            at = f"streams/{lay.spec.name}"
            names = [k for k in _ROW_DATASETS if k in w.f[at]]
            offset = 0
            for c in caches:
                offset = w.copy_rows(c.f[at], at, names, offset)
        if pairs is not None:
            offset = 0
            for c in caches:
                offset = w.copy_rows(c.f["pairs"], "pairs", ["score", *(["positions"] if pairs.position_columns else [])],
                                     offset)
            w.scores_from_pairs(first.score_kind)
        else:  # a dual encoder (cross-encoders always keep /pairs)
            scorer = MODELS.get(header.model)
            if not (isinstance(scorer, type) and issubclass(scorer, DualEncoder)):
                raise InputError(f"model: the shards' model {header.model!r} is no dual encoder, yet they have no /pairs")
            w.scores_from_pooled(pooled_score_fn(scorer, first.record.model_info), scorer.score_kind)
        w.update_record(complete=True)
