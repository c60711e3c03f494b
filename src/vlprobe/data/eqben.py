"""EqBen (Wang et al. 2023, "Equivariant Similarity for Vision-Language Foundation Models") as
vlprobe items.

The benchmark is the labelled EqBen set as its authors distribute it (Wangt-CN/EqBen's README):
the 10% subset ``eqben_subset_10percent_final.json`` ("the format follows the winoground style")
with its images (``subset_image.tar.gz``), or the small subset for multimodal LLMs whose
annotation is ``all_select.json`` (images in ``images/``). Either file is a JSON list of records
``{"image0", "image1", "caption0", "caption1"}``; caption k describes image k. The image paths are
relative to the image folder and begin with the sub-dataset, which is how the authors' own code
tells the sub-datasets apart (``EqBenALL``: ``image.split('/')[0]``; ``evaluate_eqben_locally.py``
scores each one): ``eqbenag`` (Action Genome), ``eqbenyoucook2``, ``eqbengebc``,
``eqbenkubric_loc``, ``eqbenkubric_attr``, ``eqbenkubric_cnt`` and ``eqbensd`` (Stable
Diffusion). YouCook2 frames are NumPy arrays (``.npy``, BGR), which the authors' loader turns into
RGB (``np.load(path)[:, :, [2, 1, 0]]``); vlprobe does the same once and keeps the frame as a
lossless PNG in its cache (``$VLPROBE_CACHE/eqben/npy/``), so models read files.

The image folder is ``data_dir/image_subset`` or ``data_dir/images`` (the first that exists),
else ``data_dir``; ``image_root DIR`` names another. Item ``eqben/<sub-dataset>/<n>`` (``n``: the
record's position in the file; items go by sub-dataset in the script's order, file order within
each) has images ``.../i0``, ``.../i1`` and texts ``.../c0``,
``.../c1``; tag ``subset``.
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
    hash_image_files,
    parse_source_roots,
    read_json_list,
)
from vlprobe.data.sugarcrepe import SubsetReport, parse_subsets
from vlprobe.data.tags import cache_dir
from vlprobe.provenance import sha256_file
from vlprobe.validation import InputError, check_positive_int

__all__ = ["EQBEN_FILES", "EQBEN_IMAGE_FOLDERS", "EQBEN_SUBSETS", "eqben_report", "load_eqben"]

#: The sub-datasets, in the order of the authors' evaluate_eqben_locally.py.
EQBEN_SUBSETS: tuple[str, ...] = (
    "eqbenag", "eqbenyoucook2", "eqbengebc", "eqbenkubric_loc", "eqbenkubric_attr", "eqbenkubric_cnt", "eqbensd",
)
#: The annotation files looked for in ``data_dir``, in this order.
EQBEN_FILES: tuple[str, ...] = ("eqben_subset_10percent_final.json", "all_select.json")
#: The image folders looked for in ``data_dir`` (else ``data_dir`` itself).
EQBEN_IMAGE_FOLDERS: tuple[str, ...] = ("image_subset", "images")
_FIELDS = ("image0", "image1", "caption0", "caption1")


def _annotation(data_dir: str | os.PathLike[str]) -> Path:
    root = Path(data_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"data_dir: no such directory {str(root)!r}")
    for name in EQBEN_FILES:
        if (root / name).is_file():
            return root / name
    raise InputError(
        f"data_dir: {str(root)!r} holds no EqBen annotation ({' or '.join(EQBEN_FILES)}); "
        "is it another benchmark's folder?"
    )


def _image_root(data_dir: str | os.PathLike[str], image_root: Sequence[str] | None) -> Path:
    roots = parse_source_roots(image_root, ("eqben",))
    if roots:
        return next(iter(roots.values()))
    root = Path(data_dir)
    for name in EQBEN_IMAGE_FOLDERS:
        if (root / name).is_dir():
            return root / name
    return root


def _records(path: Path) -> list[dict[str, Any]]:
    """The checked records of the annotation file, each with its ``subset`` and position ``n``."""
    data = read_json_list(path)
    out = []
    for n, rec in enumerate(data):
        where = f"{path.name} record {n}"
        if not isinstance(rec, dict):
            raise InputError(f"data_dir: {where} must be an object with {', '.join(_FIELDS)}")
        check_text_fields(rec, _FIELDS, where)
        subset = rec["image0"].replace("\\", "/").split("/")[0]
        if subset not in EQBEN_SUBSETS:
            raise InputError(f"data_dir: {where}: field 'image0' must begin with a sub-dataset folder "
                             f"({', '.join(EQBEN_SUBSETS)}), got {rec['image0']!r}")
        out.append({**{k: rec[k] for k in _FIELDS}, "subset": subset, "n": n})
    return out


def _readable(path: Path) -> Path:
    """The file a model reads: the image itself, or a YouCook2 ``.npy`` frame as RGB PNG in the cache."""
    if path.suffix.lower() != ".npy":
        return path
    import numpy as np
    from PIL import Image

    from vlprobe.io.atomic import atomic_path

    target = cache_dir() / "eqben" / "npy" / f"{sha256_file(path)[:32]}.png"
    if target.is_file():
        return target
    try:
        frame = np.load(path, allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise InputError(f"image_root: {path.name} is not a NumPy image array ({exc})") from None
    if frame.ndim != 3 or frame.shape[2] != 3 or frame.dtype != np.uint8:
        raise InputError(f"image_root: {path.name} must be a (height, width, 3) uint8 BGR frame, got "
                         f"{frame.shape} {frame.dtype}")
    target.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(target) as tmp:
        Image.fromarray(np.ascontiguousarray(frame[:, :, [2, 1, 0]]), "RGB").save(tmp, format="PNG")
    return target


def load_eqben(
    data_dir: str | os.PathLike[str],
    *,
    subsets: str | Sequence[str] | None = None,
    limit: int | None = None,
    image_root: Sequence[str] | None = None,
) -> Dataset:
    """Load EqBen's labelled set (see the module docstring).

    Parameters
    ----------
    data_dir : path
        The folder holding ``eqben_subset_10percent_final.json`` (or ``all_select.json``).
    subsets : str or sequence of str, optional
        Sub-datasets to load (:data:`EQBEN_SUBSETS`); default all.
    limit : int, optional
        Keep only the first ``limit`` records of each sub-dataset (file order).
    image_root : list of str, optional
        ``["DIR"]`` (or ``["eqben=DIR"]``): the image folder, if not the default.

    Returns
    -------
    Dataset
        ``fingerprint`` covers the annotation file and every selected image file (each must exist).
        Items go by sub-dataset (:data:`EQBEN_SUBSETS` order), file order within each.
    """
    if limit is not None:
        check_positive_int(limit, "limit")
    path = _annotation(data_dir)
    images = _image_root(data_dir, image_root)
    chosen = set(parse_subsets(subsets if subsets is None or isinstance(subsets, str) else list(subsets),
                               EQBEN_SUBSETS))
    h = hashlib.sha256(f"{path.name}:{sha256_file(path)}\n".encode())
    kept: list[dict[str, Any]] = []
    taken: dict[str, int] = {}
    for rec in _records(path):
        if rec["subset"] not in chosen or (limit is not None and taken.get(rec["subset"], 0) >= limit):
            continue
        taken[rec["subset"]] = taken.get(rec["subset"], 0) + 1
        kept.append(rec)
    kept.sort(key=lambda rec: EQBEN_SUBSETS.index(rec["subset"]))  # the script's order; file order within
    files = [images / rec[f"image{j}"] for rec in kept for j in (0, 1)]
    hash_image_files(h, files, "image_root", f"; expected EqBen's images under {images}")
    items = [_item(rec, [_readable(images / rec["image0"]), _readable(images / rec["image1"])]) for rec in kept]
    source = f"{path.resolve()} (images {images.resolve()}" + (f"; limit {limit} per sub-dataset" if limit else "") + ")"
    return Dataset("eqben", tuple(items), h.hexdigest(), source)


def _item(rec: dict[str, Any], paths: list[Path]) -> Item:
    item_id = f"eqben/{rec['subset']}/{rec['n']}"
    images = tuple(ImageRef(f"{item_id}/i{j}", rec[f"image{j}"], paths[j]) for j in (0, 1))
    texts = tuple(TextRef(f"{item_id}/c{k}", rec[f"caption{k}"]) for k in (0, 1))
    return Item(item_id, images, texts, {"subset": (rec["subset"],)},
                {"subset": rec["subset"], "key": str(rec["n"]), "images": (rec["image0"], rec["image1"])})


def eqben_report(data_dir: str | os.PathLike[str], image_root: Sequence[str] | None = None) -> list[SubsetReport]:
    """Validate and count EqBen's annotation (``probe data info eqben``): records per sub-dataset,
    images, images missing."""
    path = _annotation(data_dir)
    images = _image_root(data_dir, image_root)
    sha = sha256_file(path)
    reports = {s: SubsetReport(s) for s in EQBEN_SUBSETS}
    for rec in _records(path):
        rep = reports[rec["subset"]]
        item_id = f"eqben/{rec['subset']}/{rec['n']}"
        rep.items += 1
        rep.kept += 1
        rep.images += 2
        rep.first_id = rep.first_id or item_id
        rep.last_id = item_id
        rep.add("image missing", sum(1 for j in (0, 1) if not (images / rec[f"image{j}"]).is_file()))
        if rec["image1"].replace("\\", "/").split("/")[0] != rec["subset"]:
            rep.add("image1 in another sub-dataset's folder")
    for rep in reports.values():
        rep.sha256 = sha
    return list(reports.values())
