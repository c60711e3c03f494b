"""SugarCrepe (Hsieh et al. 2023) as vlprobe items.

The benchmark is seven JSON files, ``<data_dir>/<subset>.json`` (or ``<data_dir>/data/``: the
layout of the repository), each one object ``key -> {"filename": "<12 digits>.jpg",
"caption": positive, "negative_caption": negative}``. Images are COCO val2017 files, looked up
as ``<image_dir>/<filename>``.

Item ids keep the file's keys: ``sugarcrepe/<subset>/<key>``. Keys restart at "0" in every file
and are not contiguous (``swap_obj`` lacks "108", deleted upstream): never re-index. Each item
has one image (``.../i0``) and two texts, ``.../c0`` the positive and ``.../c1`` the negative;
tags ``subset`` and ``group`` (replace, swap, add). Captions are read as released, as the
authors' ``main_eval.py`` and ``text_model_eval.py`` score them: 1,074 items carry leading or
trailing whitespace (add_obj: 307 positives, 298 of them a trailing space, and no negative), which a
whitespace-sensitive blind scorer (a language model, caption length) sees. ``strip_captions``
strips both captions of every item; the choice is part of the fingerprint and the source text.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vlprobe.data.items import Dataset, ImageRef, Item, TextRef
from vlprobe.data.source_files import (
    find_json_dir,
    hash_image_files,
    read_json_object,
    read_subset_file,
)
from vlprobe.provenance import sha256_file
from vlprobe.validation import InputError, check_positive_int, unknown_name_message

__all__ = [
    "SUGARCREPE_COUNTS", "SUGARCREPE_SUBSETS", "SubsetReport", "load_sugarcrepe", "open_report", "parse_subsets",
    "sugarcrepe_report",
]

#: The seven subsets, in the paper's order.
SUGARCREPE_SUBSETS: tuple[str, ...] = (
    "replace_obj", "replace_att", "replace_rel", "swap_obj", "swap_att", "add_obj", "add_att",
)
#: Items per subset in the pinned release (RAIVNLab/sugar-crepe 0047054; swap_obj 245, the paper 246).
SUGARCREPE_COUNTS: dict[str, int] = {
    "replace_obj": 1652, "replace_att": 788, "replace_rel": 1406, "swap_obj": 245,
    "swap_att": 666, "add_obj": 2062, "add_att": 692,
}
_GROUP = {s: s.split("_")[0] for s in SUGARCREPE_SUBSETS}
_FIELDS = ("filename", "caption", "negative_caption")


def parse_subsets(subsets: str | list[str] | tuple[str, ...] | None, known: tuple[str, ...], param: str = "subsets") -> tuple[str, ...]:
    """A comma-separated string or list of subset names -> validated tuple (None: all, in order)."""
    if subsets is None:
        return known
    names = [s.strip() for s in (subsets.split(",") if isinstance(subsets, str) else subsets)]
    names = [n for n in names if n]
    if not names:
        raise InputError(f"{param}: give at least one of {', '.join(known)}")
    for n in names:
        if n not in known:
            raise InputError(f"{param}: {unknown_name_message('subset', n, known)}")
    return tuple(dict.fromkeys(names))


def load_sugarcrepe(
    data_dir: str | os.PathLike[str],
    *,
    image_dir: str | os.PathLike[str] | None = None,
    subsets: str | list[str] | tuple[str, ...] | None = None,
    limit: int | None = None,
    strip_captions: bool = False,
) -> Dataset:
    """Load SugarCrepe from its JSON files.

    Parameters
    ----------
    data_dir : path
        Folder with the seven ``<subset>.json`` files (or a checkout with them under ``data/``).
    image_dir : path, optional
        COCO val2017 folder. With it every selected item's image must exist (the first missing
        one is named); without it items carry no image paths (text-only models need none).
    subsets : str or sequence of str, optional
        Subsets to load (comma-separated or a list); default all seven.
    limit : int, optional
        Keep only the first ``limit`` items of each subset (file order), for quick runs.
    strip_captions : bool
        Strip leading/trailing whitespace from both captions (default: as released, as the
        authors' evaluation code reads them).

    Returns
    -------
    Dataset
        Items subset by subset in file order; ``fingerprint`` covers the JSON files read, whether
        the captions were stripped, and the image files when ``image_dir`` is given.
    """
    if limit is not None:
        check_positive_int(limit, "limit")
    chosen = parse_subsets(subsets, SUGARCREPE_SUBSETS)
    root = find_json_dir(Path(data_dir), SUGARCREPE_SUBSETS)
    images = Path(image_dir) if image_dir is not None else None
    if images is not None and not images.is_dir():
        raise FileNotFoundError(f"image_dir: no such directory {str(images)!r}")
    h = hashlib.sha256(f"captions {'stripped' if strip_captions else 'as released'}\n".encode())
    items: list[Item] = []
    image_files: dict[str, Path] = {}
    for subset in chosen:
        raw = read_subset_file(root, subset, h)
        for n, (key, rec) in enumerate(raw.items()):
            if limit is not None and n >= limit:
                break
            where = f"{subset}.json key {key!r}"
            if not isinstance(rec, dict) or any(not isinstance(rec.get(f), str) for f in _FIELDS):
                raise InputError(f"data_dir: {where} must have string fields {', '.join(_FIELDS)}")
            pos, neg = rec["caption"], rec["negative_caption"]
            if strip_captions:
                pos, neg = pos.strip(), neg.strip()
            item_id = f"sugarcrepe/{subset}/{key}"
            img_path = None
            if images is not None:
                img_path = images / rec["filename"]
                image_files[rec["filename"]] = img_path
            items.append(Item(
                item_id,
                (ImageRef(f"{item_id}/i0", rec["filename"], img_path),),
                (TextRef(f"{item_id}/c0", pos), TextRef(f"{item_id}/c1", neg)),
                {"subset": (subset,), "group": (_GROUP[subset],)},
                {"subset": subset, "key": key, "roles": ("positive", "negative")},
            ))
    if images is not None:
        hash_image_files(h, image_files.values(), "image_dir", "; expected COCO val2017 files")
    source = f"{Path(data_dir).resolve()} (captions {'stripped' if strip_captions else 'as released'}" + (
        f"; limit {limit} per subset)" if limit else ")"
    )
    return Dataset("sugarcrepe", tuple(items), h.hexdigest(), source)


@dataclass
class SubsetReport:
    """What ``probe data info`` says about one file."""

    name: str
    items: int = 0
    kept: int = 0
    images: int = 0
    first_id: str = ""
    last_id: str = ""
    problems: dict[str, int] = field(default_factory=dict)
    sha256: str = ""

    def add(self, problem: str, count: int = 1) -> None:
        if count:
            self.problems[problem] = self.problems.get(problem, 0) + count


def open_report(root: Path, name: str) -> tuple[SubsetReport, dict[str, Any] | None]:
    """A file's report with its checksum, and its records (None, reported, when the file is missing)."""
    rep = SubsetReport(name)
    path = root / f"{name}.json"
    if not path.is_file():
        rep.add("file missing")
        return rep, None
    rep.sha256 = sha256_file(path)
    raw = read_json_object(path)
    rep.items = len(raw)
    return rep, raw


def sugarcrepe_report(data_dir: str | os.PathLike[str], image_dir: str | os.PathLike[str] | None = None) -> list[SubsetReport]:
    """Validate and count the SugarCrepe files (``probe data info sugarcrepe``).

    Problems counted per subset: missing file, records lacking fields, captions with surrounding
    whitespace, positive equal to negative, key gaps (non-contiguous integer keys), and missing
    images when ``image_dir`` is given.
    """
    root = find_json_dir(Path(data_dir), SUGARCREPE_SUBSETS)
    out = []
    for subset in SUGARCREPE_SUBSETS:
        rep, raw = open_report(root, subset)
        out.append(rep)
        if raw is None:
            continue
        rep.kept = rep.items
        keys = list(raw)
        if keys:
            rep.first_id, rep.last_id = f"sugarcrepe/{subset}/{keys[0]}", f"sugarcrepe/{subset}/{keys[-1]}"
        names = set()
        for rec in raw.values():
            if not isinstance(rec, dict) or any(not isinstance(rec.get(f), str) for f in _FIELDS):
                rep.add("record lacks filename/caption/negative_caption")
                continue
            names.add(rec["filename"])
            pos, neg = rec["caption"], rec["negative_caption"]
            rep.add("caption with surrounding whitespace", int(pos != pos.strip() or neg != neg.strip()))
            rep.add("positive equals negative", int(pos.strip() == neg.strip()))
            if image_dir is not None and not (Path(image_dir) / rec["filename"]).is_file():
                rep.add("image missing")
        rep.images = len(names)
        ints = sorted(int(k) for k in keys if k.isdigit())
        if ints and len(ints) == len(keys):
            gaps = (ints[-1] - ints[0] + 1) - len(ints)
            rep.add("keys not contiguous (gaps)", gaps)
    return out
