"""VALSE (Parcalabescu et al. 2022) as vlprobe items.

The benchmark is eleven JSON files, ``<data_dir>/<stem>.json`` (or ``<data_dir>/data/``), each one
object ``key -> record`` with ``image_file``, ``caption``, ``foil``, ``linguistic_phenomena``,
``mturk = {"caption", "foil", "other"}`` (votes of 3 annotators) and per-file extras.

Valid items (the default, as VALSE's README and scripts): ``mturk["caption"] >= 2`` and the
caption differs from the foil; ``all_items=True`` keeps every record (``meta["valid"]`` says
which are valid). Ids keep the file's keys, which repeat across files:
``valse/<stem>/<key>``; texts ``.../c0`` the caption, ``.../c1`` the foil; one image ``.../i0``.

Images: the records' ``dataset`` labels are unreliable (``coco2017`` and ``coco_2017`` both
occur), so each file is mapped to its image source here, and ``image_file`` is resolved against
one root folder per source (``image_root={"visual7w": DIR, ...}``; key ``"*"`` for every source):

=========  ==========================================================  =========================
source     files                                                       image_file looks like
=========  ==========================================================  =========================
visual7w   existence, counting-hard, counting-small-quant,             ``v7w_<id>.jpg``
           counting-adversarial
coco2017   plurals, relations (COCO 2017 val)                          ``000000291619.jpg``
coco2014   foil-it (COCO 2014 val)                                     ``COCO_val2014_*.jpg``
swig       action-replacement, actant-swap (SWiG ``images_512/``)      ``<verb>_<n>.jpg``
visdial    coreference-standard, coreference-hard (VisDial v1.0)       ``COCO_train2014_*``,
                                                                       ``VisualDialog_val2018_*``
=========  ==========================================================  =========================
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vlprobe.data.items import Dataset, ImageRef, Item, TextRef
from vlprobe.data.source_files import (
    find_json_dir,
    hash_image_files,
    read_subset_file,
)
from vlprobe.data.sugarcrepe import SubsetReport, open_report, parse_subsets
from vlprobe.validation import InputError, check_positive_int

__all__ = [
    "VALSE_FILES",
    "VALSE_SOURCES",
    "VALSE_VALID_COUNTS",
    "is_valid",
    "load_valse",
    "parse_image_roots",
    "valse_report",
]

#: File stem -> (image source, the paper's name for the piece).
VALSE_FILES: dict[str, tuple[str, str]] = {
    "existence": ("visual7w", "existence"),
    "plurals": ("coco2017", "plurality"),
    "counting-hard": ("visual7w", "counting balanced"),
    "counting-small-quant": ("visual7w", "counting small numbers"),
    "counting-adversarial": ("visual7w", "counting adversarial"),
    "relations": ("coco2017", "relations"),
    "action-replacement": ("swig", "actions: replacement"),
    "actant-swap": ("swig", "actions: actant swap"),
    "coreference-standard": ("visdial", "coreference standard"),
    "coreference-hard": ("visdial", "coreference clean"),
    "foil-it": ("coco2014", "FOIL it!"),
}
VALSE_SOURCES: tuple[str, ...] = ("visual7w", "coco2017", "coco2014", "swig", "visdial")
#: Valid items per file in the pinned release (Heidelberg-NLP/VALSE 2152d90); 7,702 in all.
VALSE_VALID_COUNTS: dict[str, int] = {
    "existence": 505, "plurals": 851, "counting-hard": 868, "counting-small-quant": 900,
    "counting-adversarial": 691, "relations": 535, "action-replacement": 648, "actant-swap": 949,
    "coreference-standard": 708, "coreference-hard": 104, "foil-it": 943,
}


def is_valid(rec: Mapping[str, Any]) -> bool:
    """VALSE's validity rule: at least 2 of 3 annotators accept the caption, and caption != foil."""
    return int(rec["mturk"]["caption"]) >= 2 and rec["caption"] != rec["foil"]


def parse_image_roots(specs: list[str] | tuple[str, ...] | Mapping[str, Any] | None) -> dict[str, Path]:
    """``["visual7w=DIR", "swig=DIR"]`` (or ``["DIR"]`` for every source) -> {source: Path}."""
    if specs is None:
        return {}
    if isinstance(specs, Mapping):
        items = [(str(k), Path(v)) for k, v in specs.items()]
    else:
        items = []
        for spec in specs:
            name, sep, text = str(spec).partition("=")
            if not sep:
                name, text = "*", str(spec)
            items.append((name.strip(), Path(text)))
    out: dict[str, Path] = {}
    for source, folder in items:
        if source != "*" and source not in VALSE_SOURCES:
            raise InputError(
                f"image_root: unknown source {source!r} (expected SOURCE=DIR with SOURCE one of "
                f"{', '.join(VALSE_SOURCES)}, or a bare DIR for all)"
            )
        if not folder.is_dir():
            raise FileNotFoundError(f"image_root: no such directory {str(folder)!r} (for source {source!r})")
        out[source] = folder
    return out


def load_valse(
    data_dir: str | os.PathLike[str],
    *,
    image_root: list[str] | tuple[str, ...] | Mapping[str, Any] | None = None,
    subsets: str | list[str] | tuple[str, ...] | None = None,
    all_items: bool = False,
    limit: int | None = None,
) -> Dataset:
    """Load VALSE from its JSON files.

    Parameters
    ----------
    data_dir : path
        Folder with the eleven ``<stem>.json`` files (or a checkout with them under ``data/``).
    image_root : list of "SOURCE=DIR" or mapping, optional
        Image folder per source (see the module docstring). With it every selected item's image
        must exist (the first missing one is named); without it items carry no image paths.
    subsets : str or sequence of str, optional
        File stems to load; default all eleven.
    all_items : bool
        Keep invalid items too (default: valid items only).
    limit : int, optional
        Keep only the first ``limit`` kept items of each file, for quick runs.

    Returns
    -------
    Dataset
    """
    if limit is not None:
        check_positive_int(limit, "limit")
    chosen = parse_subsets(subsets, tuple(VALSE_FILES))
    root = find_json_dir(Path(data_dir), tuple(VALSE_FILES))
    roots = parse_image_roots(image_root)
    if roots:
        lacking: dict[str, list[str]] = {}
        for stem in chosen:
            source = VALSE_FILES[stem][0]
            if source not in roots and "*" not in roots:
                lacking.setdefault(source, []).append(stem)
        if lacking:  # every source at once, so one run of the command finds them all
            needs = "; ".join(f"{source!r} (needed by {', '.join(stems)})" for source, stems in lacking.items())
            flags = " ".join(f"--image-root {source}=DIR" for source in lacking)
            raise InputError(
                f"image_root: no folder for {len(lacking)} source(s): {needs}; pass {flags} "
                "(docs: Where to get the data)"
            )
    h = hashlib.sha256()
    items: list[Item] = []
    image_files: dict[Path, str] = {}
    for stem in chosen:
        source = VALSE_FILES[stem][0]
        raw = read_subset_file(root, stem, h)
        kept = 0
        for key, rec in raw.items():
            where = f"{stem}.json key {key!r}"
            if not _well_formed(rec):
                raise InputError(
                    f"data_dir: {where} must have string image_file, caption, foil and an mturk "
                    "object with an integer 'caption' count"
                )
            valid = is_valid(rec)
            if not valid and not all_items:
                continue
            if limit is not None and kept >= limit:
                break
            kept += 1
            item_id = f"valse/{stem}/{key}"
            img_path = None
            if roots:
                img_path = (roots[source] if source in roots else roots["*"]) / rec["image_file"]
                image_files[img_path] = rec["image_file"]
            items.append(Item(
                item_id,
                (ImageRef(f"{item_id}/i0", rec["image_file"], img_path),),
                (TextRef(f"{item_id}/c0", rec["caption"]), TextRef(f"{item_id}/c1", rec["foil"])),
                {"subset": (stem,), "phenomenon": (str(rec.get("linguistic_phenomena", "")),), "source": (source,)},
                {"subset": stem, "key": key, "valid": valid, "mturk": dict(rec["mturk"]),
                 "roles": ("caption", "foil")},
            ))
    if roots:
        hash_image_files(h, image_files, "image_root")
    source_text = f"{Path(data_dir).resolve()} ({'all items' if all_items else 'valid items'}" + (
        f"; limit {limit} per file)" if limit else ")"
    )
    return Dataset("valse", tuple(items), h.hexdigest(), source_text)


def _well_formed(rec: Any) -> bool:
    return (
        isinstance(rec, dict)
        and all(isinstance(rec.get(f), str) for f in ("image_file", "caption", "foil"))
        and isinstance(rec.get("mturk"), dict)
        and isinstance(rec["mturk"].get("caption"), int)
    )


def valse_report(
    data_dir: str | os.PathLike[str], image_root: list[str] | tuple[str, ...] | Mapping[str, Any] | None = None,
) -> list[SubsetReport]:
    """Validate and count the VALSE files (``probe data info valse``); ``kept`` = valid items.

    Problems counted per file: missing file, malformed records, invalid items (mturk caption < 2),
    caption equal to foil, ``dataset`` labels that differ from the file's usual one, and missing
    images when ``image_root`` is given; then every source without a folder at once ("images not
    checked: no --image-root for source S"), on each file that needs it.
    """
    root = find_json_dir(Path(data_dir), tuple(VALSE_FILES))
    roots = parse_image_roots(image_root)
    out = []
    for stem, (source, _) in VALSE_FILES.items():
        rep, raw = open_report(root, stem)
        out.append(rep)
        if raw is None:
            continue
        keys = list(raw)
        labels: dict[str, int] = {}
        names = set()
        for rec in raw.values():
            if not _well_formed(rec):
                rep.add("malformed record")
                continue
            names.add(rec["image_file"])
            labels[str(rec.get("dataset"))] = labels.get(str(rec.get("dataset")), 0) + 1
            valid = is_valid(rec)
            rep.kept += int(valid)
            rep.add("invalid (mturk caption < 2)", int(int(rec["mturk"]["caption"]) < 2))
            rep.add("caption equals foil", int(rec["caption"] == rec["foil"]))
            folder = roots.get(source, roots.get("*"))
            if folder is not None and valid and not (folder / rec["image_file"]).is_file():
                rep.add("image missing (valid items)")
        if roots and source not in roots and "*" not in roots:
            rep.add(f"images not checked: no --image-root for source {source!r}", rep.kept)
        if len(labels) > 1:
            usual = max(labels, key=lambda k: labels[k])
            rep.add(f"dataset label other than {usual!r}", sum(v for k, v in labels.items() if k != usual))
        rep.images = len(names)
        if keys:
            rep.first_id, rep.last_id = f"valse/{stem}/{keys[0]}", f"valse/{stem}/{keys[-1]}"
    return out
