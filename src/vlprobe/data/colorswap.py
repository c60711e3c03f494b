"""ColorSwap (Burapacheep et al. 2024, "ColorSwap: A Color and Word Order Dataset for Multimodal
Evaluation") as vlprobe items.

The benchmark is the folder its authors distribute (Top34051/colorswap's README: the archive
extracted into ``data/``): ``train.json`` and ``test.json``, each a JSON list of records
``{"id", "caption_1", "caption_2", "image_1", "image_2", "image_source", "caption_source"}``, and
the images of ``images.zip`` extracted beside them (``image_k`` is a path relative to the folder,
``images/img_<id>_<k>.png``). Caption k describes image k; the two captions hold the same words,
the colour words swapped (the Winoground schema).

Each split file is a subset (``train``, ``test``). Item ``colorswap/<split>/<id>``: images
``.../i0`` (``image_1``), ``.../i1`` (``image_2``), texts ``.../c0`` (``caption_1``), ``.../c1``
(``caption_2``); tags ``subset``, ``image_source`` and ``caption_source``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vlprobe.data.items import Dataset, ImageRef, Item, TextRef
from vlprobe.data.source_files import check_text_fields, hash_image_files, read_json_list
from vlprobe.data.sugarcrepe import SubsetReport, parse_subsets
from vlprobe.provenance import sha256_file
from vlprobe.validation import InputError, check_positive_int

__all__ = ["COLORSWAP_SUBSETS", "colorswap_report", "load_colorswap"]

#: The split files (``<split>.json``), test first: the split the paper's scores are read on.
COLORSWAP_SUBSETS: tuple[str, ...] = ("test", "train")
_TEXT_FIELDS = ("caption_1", "caption_2", "image_1", "image_2", "image_source", "caption_source")


def _root(data_dir: str | os.PathLike[str]) -> tuple[Path, list[str]]:
    """The folder and the split files it holds."""
    root = Path(data_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"data_dir: no such directory {str(root)!r}")
    splits = [s for s in COLORSWAP_SUBSETS if (root / f"{s}.json").is_file()]
    if not splits:
        raise InputError(
            f"data_dir: {str(root)!r} holds neither test.json nor train.json (ColorSwap's data folder, "
            "with images/ extracted from images.zip); is it another benchmark's folder?"
        )
    return root, splits


def _records(path: Path) -> list[dict[str, Any]]:
    data = read_json_list(path)
    out = []
    seen: dict[int, int] = {}
    for n, rec in enumerate(data):
        where = f"{path.name} record {n}"
        if not isinstance(rec, dict):
            raise InputError(f"data_dir: {where} must be an object")
        if "id" not in rec:
            raise InputError(f"data_dir: {where}: field 'id' is missing")
        if isinstance(rec["id"], bool) or not isinstance(rec["id"], int):
            raise InputError(f"data_dir: {where}: field 'id' must be an integer, got {rec['id']!r}")
        if rec["id"] in seen:
            raise InputError(f"data_dir: {where}: field 'id' repeats {rec['id']} (record {seen[rec['id']]})")
        seen[rec["id"]] = n
        check_text_fields(rec, _TEXT_FIELDS, where)
        out.append({k: rec[k] for k in ("id", *_TEXT_FIELDS)})
    return out


def load_colorswap(
    data_dir: str | os.PathLike[str],
    *,
    subsets: str | Sequence[str] | None = None,
    limit: int | None = None,
) -> Dataset:
    """Load ColorSwap from its data folder (see the module docstring).

    Parameters
    ----------
    data_dir : path
        The folder holding ``test.json`` and/or ``train.json`` and ``images/``.
    subsets : str or sequence of str, optional
        Splits to load (``test``, ``train``); default both (each file must be there).
    limit : int, optional
        Keep only the first ``limit`` examples of each split.

    Returns
    -------
    Dataset
        ``fingerprint`` covers the split files read and every selected image file (each must exist).
    """
    if limit is not None:
        check_positive_int(limit, "limit")
    root, present = _root(data_dir)
    chosen = parse_subsets(subsets if subsets is None or isinstance(subsets, str) else list(subsets),
                           COLORSWAP_SUBSETS)
    splits = [s for s in COLORSWAP_SUBSETS if s in chosen]
    missing = [s for s in splits if s not in present]
    if missing:  # the release has both files: one gone is a folder half there, named, not half read
        also = "" if subsets is not None else (
            f" (ColorSwap's folder has {' and '.join(f'{s}.json' for s in COLORSWAP_SUBSETS)}; "
            f"--subsets {','.join(present)} reads {' and '.join(f'{s}.json' for s in present)} alone)")
        raise FileNotFoundError(f"data_dir: {missing[0]}.json is missing from {root}{also}")
    h = hashlib.sha256()
    items: list[Item] = []
    for split in (s for s in splits if s in present):
        path = root / f"{split}.json"
        h.update(f"{path.name}:{sha256_file(path)}\n".encode())
        for rec in _records(path)[:limit]:
            items.append(_item(root, split, rec))
    hash_image_files(h, [im.path for it in items for im in it.images if im.path is not None], "data_dir",
                     "; extract images.zip into the data folder")
    source = f"{root.resolve()} ({', '.join(s for s in splits if s in present)}" + (
        f"; limit {limit} per split" if limit else "") + ")"
    return Dataset("colorswap", tuple(items), h.hexdigest(), source)


def _item(root: Path, split: str, rec: dict[str, Any]) -> Item:
    item_id = f"colorswap/{split}/{rec['id']}"
    images = tuple(ImageRef(f"{item_id}/i{j}", rec[f"image_{j + 1}"], root / rec[f"image_{j + 1}"]) for j in (0, 1))
    texts = tuple(TextRef(f"{item_id}/c{k}", rec[f"caption_{k + 1}"]) for k in (0, 1))
    tags: dict[str, tuple[str, ...]] = {
        "subset": (split,), "image_source": (str(rec["image_source"]),), "caption_source": (str(rec["caption_source"]),)}
    return Item(item_id, images, texts, tags, {"subset": split, "key": str(rec["id"])})


def colorswap_report(data_dir: str | os.PathLike[str], image_root: Sequence[str] | None = None) -> list[SubsetReport]:
    """Validate and count ColorSwap's folder (``probe data info colorswap``): examples per split,
    images, images missing."""
    if image_root:
        raise InputError("image_root: ColorSwap's images are in its own folder (data_dir/images)")
    root, present = _root(data_dir)
    reports = []
    for split in COLORSWAP_SUBSETS:
        rep = SubsetReport(split)
        reports.append(rep)
        if split not in present:
            rep.add(f"{split}.json missing")
            continue
        rep.sha256 = sha256_file(root / f"{split}.json")
        for rec in _records(root / f"{split}.json"):
            item = _item(root, split, rec)
            rep.items += 1
            rep.kept += 1
            rep.images += 2
            rep.first_id = rep.first_id or item.id
            rep.last_id = item.id
            rep.add("image missing", sum(1 for im in item.images if im.path is None or not im.path.is_file()))
    return reports
