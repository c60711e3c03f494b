"""The caption-variants file: JSONL, one line per (item, caption).

Format (version 1). Each line is a JSON object::

    {"item": "winoground/17",          # namespaced item id
     "caption": 0,                     # caption index within the item (0 or 1 for Winoground)
     "original": "a red circle ...",   # optional; when present it must equal the dataset caption
     "variants": [                     # in order; variant j gets text id winoground/17/c0/v<j>
        {"text": "there is a red circle ...", "strategy": "template/there-is",
         "params": {...}},             # "params" optional: whatever the strategy records
        ...]}

Optional, and only as the first line: a header ``{"vlprobe_variants": 1, "provenance": {...}}``
saying how the file was made (``probe augment`` writes the strategies and their versions, the
WordNet source, the spaCy model, the seed). Optional per line: ``"errors": [{"strategy": ...,
"error": ...}]``, failures of a strategy on that caption (recorded, never hidden).

Rules: an (item, caption) pair appears at most once; every variant has a non-empty
``text`` and a non-empty ``strategy``; items and captions not listed have no variants.
The synthetic fixture (``probe fixtures dataset``) and the augmentation strategies both
write this format; ``probe extract --variants FILE`` adds one text row per variant, after
all original captions.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from vlprobe.data.items import Dataset, TextRef
from vlprobe.io.atomic import atomic_write
from vlprobe.io.text import text_lines
from vlprobe.provenance import sha256_file
from vlprobe.validation import InputError, check_file, check_int

__all__ = [
    "VARIANTS_KIND", "Variant", "VariantSet", "attach_variants", "read_variants", "read_variants_header",
    "write_variants",
]


@dataclass(frozen=True)
class Variant:
    """One variant text of a caption and the strategy that made it."""

    text: str
    strategy: str
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class VariantSet:
    """The variants of one caption (one line of the file)."""

    item: str
    caption: int
    variants: tuple[Variant, ...]
    original: str | None = None
    errors: tuple[Mapping[str, Any], ...] = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"item": self.item, "caption": self.caption}
        if self.original is not None:
            out["original"] = self.original
        out["variants"] = [
            {"text": v.text, "strategy": v.strategy, **({"params": dict(v.params)} if v.params else {})}
            for v in self.variants
        ]
        if self.errors:
            out["errors"] = [dict(e) for e in self.errors]
        return out


#: What variants files are listed as among the files vlprobe wrote (:mod:`vlprobe.io`).
VARIANTS_KIND = "variants"


def write_variants(
    path: str | os.PathLike[str], sets: Iterable[VariantSet], provenance: Mapping[str, Any] | None = None,
    *, kind: str | None = VARIANTS_KIND,
) -> Path:
    """Write variant sets as JSONL, atomically; ``provenance`` becomes the header line.

    ``kind``: what the file is listed as among the files vlprobe wrote (:mod:`vlprobe.io`; an
    existing file is replaced only when listed so); None for a file inside a folder its writer
    guards as a whole (the synthetic dataset).
    """
    target = Path(path)
    with atomic_write(target, kind=kind) as fh:
        if provenance is not None:
            fh.write(json.dumps({"vlprobe_variants": 1, "provenance": dict(provenance)},
                                ensure_ascii=False, sort_keys=True) + "\n")
        for vs in sets:
            fh.write(json.dumps(vs.to_json(), ensure_ascii=False, sort_keys=False) + "\n")
    return target


def read_variants(path: str | os.PathLike[str]) -> list[VariantSet]:
    """Read and validate a variants file; errors name the file, line and field."""
    return [vs for _, vs in _read_numbered(path)]


def read_variants_header(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The provenance block of a variants file's header line, or None without one."""
    p = check_file(path, "variants")
    first = next((line for _, line in text_lines(p, "variants")), "")
    try:
        obj = json.loads(first) if first.strip() else None
    except json.JSONDecodeError:
        return None
    if isinstance(obj, dict) and "vlprobe_variants" in obj and "item" not in obj:
        return dict(obj.get("provenance") or {})
    return None


def _where(path: Path, lineno: int) -> str:
    return f"variants file {path.name} line {lineno}"


def _read_numbered(path: str | os.PathLike[str]) -> list[tuple[int, VariantSet]]:
    """Like :func:`read_variants`, with the line number of each set (for later errors)."""
    p = check_file(path, "variants")
    out: list[tuple[int, VariantSet]] = []
    seen: set[tuple[str, int]] = set()
    for lineno, line in text_lines(p, "variants"):
        if not line.strip():
            continue
        where = _where(p, lineno)
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{where}: not valid JSON ({exc.msg})") from None
        if lineno == 1 and isinstance(obj, dict) and "vlprobe_variants" in obj and "item" not in obj:
            continue  # the header
        vs = _parse_line(obj, where)
        key = (vs.item, vs.caption)
        if key in seen:
            raise InputError(f"{where}: item {vs.item!r} caption {vs.caption} appears twice")
        seen.add(key)
        out.append((lineno, vs))
    return out


def _parse_line(obj: Any, where: str) -> VariantSet:
    if not isinstance(obj, dict):
        raise InputError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    item = obj.get("item")
    if not isinstance(item, str) or not item:
        raise InputError(f"{where}: 'item' must be a namespaced item id string, got {item!r}")
    caption = check_int(obj.get("caption"), f"{where}: 'caption'", low=0, meaning=" (a caption index)")
    original = obj.get("original")
    if original is not None and not isinstance(original, str):
        raise InputError(f"{where}: 'original' must be a string, got {original!r}")
    raw = obj.get("variants")
    if not isinstance(raw, list):
        raise InputError(f"{where}: 'variants' must be a list, got {type(raw).__name__}")
    variants = []
    for j, v in enumerate(raw):
        if not isinstance(v, dict):
            raise InputError(f"{where}: variants[{j}] must be an object")
        text, strategy, params = v.get("text"), v.get("strategy"), v.get("params", {})
        if not isinstance(text, str) or not text.strip():
            raise InputError(f"{where}: variants[{j}].text must be a non-empty string")
        if not isinstance(strategy, str) or not strategy.strip():
            raise InputError(f"{where}: variants[{j}].strategy must be a non-empty string")
        if not isinstance(params, dict):
            raise InputError(f"{where}: variants[{j}].params must be an object")
        variants.append(Variant(text, strategy, params))
    errors = obj.get("errors", [])
    if not isinstance(errors, list) or not all(isinstance(e, dict) for e in errors):
        raise InputError(f"{where}: 'errors' must be a list of objects")
    return VariantSet(item, caption, tuple(variants), original, tuple(errors))


def attach_variants(dataset: Dataset, path: str | os.PathLike[str]) -> Dataset:
    """Return ``dataset`` with each listed caption's variants added as texts.

    Within an item, variants follow the original captions, ordered by caption index.

    Variant j of caption k of item ``X`` gets the id ``X/c<k>/v<j>``; its ``parent`` is
    ``X/c<k>``. The variants file's sha256 is recorded under ``extra_fingerprints["variants"]``.

    A file may cover more items than the dataset holds (made for all of SugarCrepe, used with
    ``--subsets`` or ``--limit``): lines of items of the same dataset that were not loaded are
    left out. A line of another dataset's item, or a file none of whose items were loaded, is
    an error.
    """
    sets = _read_numbered(path)
    by_item = {it.id: it for it in dataset.items}
    extra: dict[str, dict[int, list[TextRef]]] = {}
    namespace = f"{dataset.name}/"
    outside = 0
    for lineno, vs in sets:
        where = _where(Path(path), lineno)
        item = by_item.get(vs.item)
        if item is None and vs.item.startswith(namespace):
            outside += 1
            continue
        if item is None:
            example = f" (its ids look like {dataset.items[0].id!r})" if dataset.items else ""
            raise InputError(
                f"{where}: 'item' {vs.item!r} is not an item of dataset {dataset.name!r}{example}; "
                "was the file made for another dataset?"
            )
        captions = item.captions
        if vs.caption >= len(captions):
            raise InputError(
                f"{where}: 'caption' {vs.caption} is out of range: item {vs.item!r} has "
                f"{len(captions)} captions"
            )
        parent = captions[vs.caption]
        if vs.original is not None and vs.original != parent.text:
            raise InputError(
                f"{where}: 'original' of item {vs.item!r} caption {vs.caption} does not match "
                "the dataset's caption (was the file made for another dataset?)"
            )
        extra.setdefault(vs.item, {})[vs.caption] = [
            TextRef(f"{parent.id}/v{j}", v.text, parent=parent.id, strategy=v.strategy)
            for j, v in enumerate(vs.variants)
        ]
    if sets and outside == len(sets):
        raise InputError(
            f"variants: none of the {len(sets)} captions in {Path(path).name} belongs to the {len(dataset.items)} "
            f"loaded {dataset.name} item(s) (file items look like {sets[0][1].item!r}, loaded ones like "
            f"{dataset.items[0].id if dataset.items else 'none'!r}); check the selection (--subsets, --limit, --items)"
        )
    items = tuple(
        replace(it, texts=it.texts + tuple(
            t for _, refs in sorted(extra.get(it.id, {}).items()) for t in refs
        ))
        for it in dataset.items
    )
    fps = dict(dataset.extra_fingerprints, variants=sha256_file(path))
    return replace(dataset, items=items, extra_fingerprints=fps)
