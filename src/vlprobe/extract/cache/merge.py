"""``probe cache merge``: join the N shard files of one run into one cache."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from vlprobe.extract.cache.reader import ActivationCache
from vlprobe.extract.cache.schema import (
    COMPARED_FIELDS,
    CacheHeader,
    CacheTables,
    PairLayout,
    StreamLayout,
    header_diff,
    parse_shard,
)
from vlprobe.extract.cache.writer import CacheWriter
from vlprobe.extract.models.base import DualEncoder
from vlprobe.extract.scoring import pooled_score_fn
from vlprobe.io.atomic import atomic_path
from vlprobe.io.paths import check_writable
from vlprobe.registry import MODELS
from vlprobe.validation import InputError

__all__ = ["MERGE_CHUNK_BYTES", "merge_shards"]

#: ``merge_shards`` copies states in pieces of about this many bytes (pair streams of an ``all``
#: plan can be far larger than memory).
MERGE_CHUNK_BYTES = 64 << 20


def merge_shards(paths: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str]) -> Path:
    """Join the N complete shard files of one run into one cache (written atomically).

    Raises
    ------
    InputError
        A shard is missing, repeated, incomplete, or was made with other settings.
    """
    if not paths:
        raise InputError("shards: give the shard files to merge")
    target = Path(out)
    check_writable(target)
    if os.path.lexists(target) and any(os.path.lexists(p) and os.path.samefile(target, p) for p in paths):
        raise InputError(f"out: {str(target)!r} is one of the shard files; choose a new file name")
    caches = [ActivationCache(p) for p in paths]
    try:
        first = caches[0].header
        _, n = parse_shard(first.shard)
        seen: dict[int, Path] = {}
        for c in caches:
            h = c.header
            for name in COMPARED_FIELDS:
                if name != "shard" and getattr(h, name) != getattr(first, name):
                    raise InputError(
                        f"shards: {c.path.name} differs from {caches[0].path.name} in {name} "
                        f"({getattr(h, name)!r} vs {getattr(first, name)!r})"
                    )
            k, n_k = parse_shard(h.shard)
            if n_k != n:
                raise InputError(f"shards: {c.path.name} is shard {h.shard}, others are of {n}")
            if k in seen:
                raise InputError(f"shards: {c.path.name} and {seen[k].name} are both shard {k}/{n}")
            seen[k] = c.path
            for s in c.streams:
                if not c.done(s).all():
                    raise InputError(f"shards: {c.path.name} is incomplete in stream {s!r}; resume it first")
            if c.has_pairs and not c.pairs()["done"].all():
                raise InputError(f"shards: {c.path.name} is incomplete in its pairs; resume it first")
        missing = sorted(set(range(n)) - set(seen))
        if missing:
            raise InputError(f"shards: missing shard(s) {', '.join(f'{m}/{n}' for m in missing)}")
        caches.sort(key=lambda c: parse_shard(c.header.shard)[0])
        if os.path.lexists(target) and not _earlier_merge(target, dataclasses.replace(first, shard="0/1")):
            raise InputError(
                f"out: {str(target)!r} already exists and is not an earlier merge of these shards; "
                "choose a new file name"
            )
        _write_merged(caches, target)
    finally:
        for c in caches:
            c.close()
    return target


def _earlier_merge(path: Path, header: CacheHeader) -> bool:
    """Whether ``path`` is a cache that ``probe cache merge`` made from shards of this run (the
    same command with the same settings may replace its own output)."""
    try:
        with ActivationCache(path) as c:
            return bool(c.record.merged_from) and header_diff(c.header, header) is None
    except (InputError, OSError):
        return False


def _write_merged(caches: list[ActivationCache], target: Path) -> None:
    first = caches[0]
    header = dataclasses.replace(first.header, shard="0/1")
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
    record = dataclasses.replace(first.record, merged_from=[c.path.name for c in caches], device=devices)
    pairs, parts = None, [c.pairs() for c in caches] if first.has_pairs else []
    if parts:
        pairs = PairLayout(np.concatenate([p["image"] for p in parts]), np.concatenate([p["text"] for p in parts]))
    with atomic_path(target) as tmp:
        tmp.unlink()
        with CacheWriter.open(
            tmp, header, tables, layouts, record, with_scores=True, pairs=pairs, score_kind=first.score_kind,
        ) as w:
            for lay in layouts:
                s, offset = lay.spec.name, 0
                token = [p for p in lay.poolings if p != "pooled"]
                row_bytes = max(1, len(token) * len(lay.layers) * lay.spec.hidden_size * np.dtype(header.dtype).itemsize)
                step = max(1, MERGE_CHUNK_BYTES // row_bytes)
                for c in caches:
                    n_rows = len(c.done(s))
                    for a in range(0, n_rows, step):  # a shard's rows in bounded pieces, never all at once
                        b = min(n_rows, a + step)
                        states = {p: c.stored_rows(s, p, a, b) for p in token}
                        pooled = c.stored_rows(s, "pooled", a, b) if "pooled" in lay.poolings else None
                        w.write(s, np.arange(offset + a, offset + b), states, pooled)
                    offset += n_rows
            if pairs is not None:
                w.write_pairs(np.arange(pairs.n_rows), np.concatenate([p["score"] for p in parts]), {}, {})
                w.scores_from_pairs(first.score_kind)
            else:  # a dual encoder (cross-encoders always keep /pairs)
                scorer = MODELS.get(header.model)
                if not (isinstance(scorer, type) and issubclass(scorer, DualEncoder)):
                    raise InputError(f"model: the shards' model {header.model!r} is no dual encoder, yet they have no /pairs")
                w.scores_from_pooled(pooled_score_fn(scorer, first.record.model_info), scorer.score_kind)
            w.update_record(complete=True)
