"""SugarCrepe++ (Dumpala et al. 2024, "SUGARCREPE++ Dataset: Vision-Language Model Sensitivity to
Semantic and Lexical Alterations") as vlprobe items.

The benchmark is five JSON files as its authors distribute them (Sri-Harsha/scpp, ``data/``):
``swap_obj.json``, ``swap_att.json``, ``replace_obj.json``, ``replace_att.json``,
``replace_rel.json`` in ``data_dir`` (or ``data_dir/data``), each a JSON list of records
``{"id", "filename", "caption", "caption2", "negative_caption"}``: SugarCrepe's positive caption
(P1), a second positive with other words (P2) and SugarCrepe's hard negative. Images are COCO
val2017 files, looked up as ``<image_dir>/<filename>`` (as the authors' scripts open
``images/<filename>``). A SugarCrepe folder has the same file names, but its files hold one object
of key -> record and no ``caption2``: it is refused, naming the file.

Item ``sugarcrepe-pp/<subset>/<id>``: image ``.../i0``; texts ``.../c0`` (P1), ``.../c1`` (P2),
``.../c2`` (the negative), as the files hold them (the authors' scripts do not strip them); tags
``subset`` and ``group`` (swap, replace); ``meta["positives"]`` 2 (P1 and P2 are both right, as
``probe run bias-gap`` reads them).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vlprobe.data.items import Dataset, ImageRef, Item, TextRef
from vlprobe.data.source_files import (
    check_text_fields,
    find_json_dir,
    hash_image_files,
    read_json_list,
)
from vlprobe.data.sugarcrepe import SubsetReport, parse_subsets
from vlprobe.provenance import sha256_file
from vlprobe.validation import InputError, check_positive_int

__all__ = ["SUGARCREPE_PP_COUNTS", "SUGARCREPE_PP_SUBSETS", "load_sugarcrepe_pp", "sugarcrepe_pp_report"]

#: The five subsets, in the paper's table order.
SUGARCREPE_PP_SUBSETS: tuple[str, ...] = ("swap_obj", "swap_att", "replace_obj", "replace_att", "replace_rel")
#: Records per file, as the authors' evaluate_ulms.py asserts them (DATA_SIZE).
SUGARCREPE_PP_COUNTS: dict[str, int] = {
    "swap_obj": 245, "swap_att": 666, "replace_obj": 1652, "replace_att": 788, "replace_rel": 1406,
}
_FIELDS = ("filename", "caption", "caption2", "negative_caption")


def _records(path: Path) -> list[dict[str, Any]]:
    data = read_json_list(path, holds="records with caption2 (one object of key -> record is what SugarCrepe's "
                                      "files do: is it another benchmark's folder?)")
    out = []
    seen: dict[str, int] = {}
    for n, rec in enumerate(data):
        where = f"{path.name} record {n}"
        if not isinstance(rec, dict):
            raise InputError(f"data_dir: {where} must be an object with id, {', '.join(_FIELDS)}")
        if "id" not in rec:
            raise InputError(f"data_dir: {where}: field 'id' is missing")
        if isinstance(rec["id"], bool) or not isinstance(rec["id"], (int, str)) or not str(rec["id"]).strip():
            raise InputError(f"data_dir: {where}: field 'id' must be an integer or a string, got {rec['id']!r}")
        key = str(rec["id"])
        if key in seen:
            raise InputError(f"data_dir: {where}: field 'id' repeats {key} (record {seen[key]})")
        seen[key] = n
        check_text_fields(rec, _FIELDS, where)
        out.append({"key": key, **{k: rec[k] for k in _FIELDS}})
    return out


def load_sugarcrepe_pp(
    data_dir: str | os.PathLike[str],
    *,
    image_dir: str | os.PathLike[str] | None = None,
    subsets: str | Sequence[str] | None = None,
    limit: int | None = None,
) -> Dataset:
    """Load SugarCrepe++ from its five JSON files (see the module docstring).

    Parameters
    ----------
    data_dir : path
        The folder holding the files (or its ``data/`` folder).
    image_dir : path, optional
        The COCO val2017 images (needed to score with a model reading pixels).
    subsets : str or sequence of str, optional
        Files to load (:data:`SUGARCREPE_PP_SUBSETS`); default all.
    limit : int, optional
        Keep only the first ``limit`` records of each file.

    Returns
    -------
    Dataset
        ``fingerprint`` covers the files read and, with ``image_dir``, every selected image file.
    """
    if limit is not None:
        check_positive_int(limit, "limit")
    chosen = parse_subsets(subsets if subsets is None or isinstance(subsets, str) else list(subsets),
                           SUGARCREPE_PP_SUBSETS)
    root = find_json_dir(Path(data_dir), SUGARCREPE_PP_SUBSETS)
    images = Path(image_dir) if image_dir is not None else None
    if images is not None and not images.is_dir():
        raise FileNotFoundError(f"image_dir: no such directory {str(images)!r}")
    h = hashlib.sha256()
    items: list[Item] = []
    for subset in chosen:
        path = root / f"{subset}.json"
        if not path.is_file():
            raise FileNotFoundError(f"data_dir: {subset}.json is missing from {root}")
        h.update(f"{path.name}:{sha256_file(path)}\n".encode())
        for rec in _records(path)[:limit]:
            items.append(_item(subset, rec, images))
    if images is not None:
        hash_image_files(h, [im.path for it in items for im in it.images if im.path is not None], "image_dir",
                         "; expected COCO val2017 files")
    source = f"{root.resolve()}" + (f" (limit {limit} per subset)" if limit else "")
    return Dataset("sugarcrepe-pp", tuple(items), h.hexdigest(), source)


def _item(subset: str, rec: dict[str, Any], images: Path | None) -> Item:
    item_id = f"sugarcrepe-pp/{subset}/{rec['key']}"
    image = ImageRef(f"{item_id}/i0", rec["filename"], images / rec["filename"] if images is not None else None)
    texts = tuple(TextRef(f"{item_id}/c{k}", rec[f]) for k, f in enumerate(("caption", "caption2", "negative_caption")))
    return Item(item_id, (image,), texts, {"subset": (subset,), "group": (subset.split("_")[0],)},
                {"subset": subset, "key": rec["key"], "roles": ("positive", "positive2", "negative"), "positives": 2})


def sugarcrepe_pp_report(
    data_dir: str | os.PathLike[str], image_root: Sequence[str] | None = None, image_dir: str | os.PathLike[str] | None = None,
) -> list[SubsetReport]:
    """Validate and count SugarCrepe++'s files (``probe data info sugarcrepe-pp``): records per
    file (and whether that is the count the authors' code asserts), images missing when
    ``image_dir`` is given."""
    if image_root:
        raise InputError("image_root: SugarCrepe++'s images are COCO val2017 files: give --image-dir")
    root = find_json_dir(Path(data_dir), SUGARCREPE_PP_SUBSETS)
    reports = []
    for subset in SUGARCREPE_PP_SUBSETS:
        rep = SubsetReport(subset)
        reports.append(rep)
        path = root / f"{subset}.json"
        if not path.is_file():
            rep.add("file missing")
            continue
        rep.sha256 = sha256_file(path)
        for rec in _records(path):
            item_id = f"sugarcrepe-pp/{subset}/{rec['key']}"
            rep.items += 1
            rep.kept += 1
            rep.images += 1
            rep.first_id = rep.first_id or item_id
            rep.last_id = item_id
            if image_dir is not None and not (Path(image_dir) / rec["filename"]).is_file():
                rep.add("image missing")
        if rep.items != SUGARCREPE_PP_COUNTS[subset]:
            rep.add(f"records: {rep.items}, the authors' code asserts {SUGARCREPE_PP_COUNTS[subset]}")
    return reports
