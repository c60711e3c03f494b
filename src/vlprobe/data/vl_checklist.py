"""VL-CheckList (Zhao et al. 2022, "VL-CheckList: Evaluating Pre-trained Vision-Language Models
with Objects, Attributes and Relations") as vlprobe items.

VL-CheckList's annotations are JSON files, one per (type, image corpus), laid out as the
``ANNO_PATH`` of the authors' corpus configs (om-ai-lab/VL-CheckList, ``corpus/v1/<type>/
<corpus>.yaml``) name them under the release's ``data/`` folder; ``data_dir`` is that folder (or
the folder holding it). Each file is one JSON array of records ``[image path, {"POS": [texts],
"NEG": [texts]}]``; the image is ``<IMG_ROOT>/<image path>`` with ``IMG_ROOT`` the corpus's image
folder (``vg/``, ``hake/``, ``swig/``; VAW's images are Visual Genome's), given here as
``image_root SOURCE=DIR`` (or a bare ``DIR`` holding ``vg/``, ``hake/`` and ``swig/``, as the
authors' ``$DATASET``).

The subsets are the authors' output names ``<type>_<corpus>`` (their ``file_name`` of each result
JSON): ``Attribute_<action|color|material|size|state>_<vg|vaw>`` (``Attribute/<vg|vaw>/<attr>.json``),
``Object_Location_<center|mid|margin>_<corpus>`` and ``Object_Size_<large|medium|small>_<corpus>``
with corpus ``hake``, ``swig_agent``, ``swig_destination``, ``swig_item``, ``swig_tool``,
``vg_obj``, ``vg_subj`` (``Object/<Location|Size>/hake_<location|size>/hake_obj_<x>.json``,
``.../swig_<location|size>/swig_<role>/swig_<role>_<x>.json``,
``.../vg_<location|size>/vg_<obj|subj>_<x>.json``), ``Relation_action_<vg|hake|swig>``
(``Relation/vg/action.json``, ``Relation/hake_action.json``, ``Relation/swig_action.json``) and
``Relation_spatial_vg`` (``Relation/vg/spatial.json``): 56 files, the 13 aspects of the authors'
``corpus.json`` (read by their ``radar.py``) over their corpora.

Item ``vl-checklist/<subset>/<n>`` (n = the record's position in the file): one image ``.../i0``,
texts ``.../c0`` = ``POS[0]`` and ``.../c1`` = ``NEG[0]``, the two texts the authors' ITC
evaluation scores (``texts_pos[0]``, ``texts_neg[0]``; the other texts of the lists are kept in
``meta``); tags ``subset``, ``category`` (Object, Attribute, Relation), ``aspect`` (the radar's
spoke, e.g. ``Object_Size_large``) and ``corpus``.

The authors' ITC run keeps the records whose image exists, then the first ``MAX_NUM / 2`` of
them (their configs: ``MAX_NUM: 2000``, so 1,000 per file): ``limit`` defaults to that 1,000.
With an image folder for a subset's corpus vlprobe refuses a missing image (naming the file,
record and field) instead of skipping it, so a run's items are the file's first ones.

The paper's counts are not checked here (the files are not shipped): the release's files are
listed by the authors' configs, and ``probe data info vl-checklist`` counts what a copy holds.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from vlprobe.data.items import Dataset, ImageRef, Item, TextRef
from vlprobe.data.source_files import hash_image_files, parse_source_roots, read_json_list
from vlprobe.data.sugarcrepe import SubsetReport, parse_subsets
from vlprobe.provenance import sha256_file
from vlprobe.validation import InputError, check_positive_int

__all__ = [
    "VLC_ASPECTS",
    "VLC_FILES",
    "VLC_ITC_ITEMS",
    "VLC_SOURCES",
    "VLC_SUBSETS",
    "load_vl_checklist",
    "vl_checklist_report",
]

#: Records the authors' ITC evaluation takes per file: their configs' ``MAX_NUM`` (2000) halved.
VLC_ITC_ITEMS = 1000
_OBJECT_CORPORA = ("hake", "swig_agent", "swig_destination", "swig_item", "swig_tool", "vg_obj", "vg_subj")
_ATTRIBUTES = ("action", "color", "material", "size", "state")


def _object_file(kind: str, value: str, corpus: str) -> str:
    folder = f"Object/{kind}/{corpus.split('_')[0]}_{kind.lower()}"
    if corpus == "hake":
        return f"{folder}/hake_obj_{value}.json"
    if corpus.startswith("swig"):
        return f"{folder}/{corpus}/{corpus}_{value}.json"
    return f"{folder}/{corpus}_{value}.json"


def _files() -> dict[str, str]:
    out: dict[str, str] = {}
    for kind, values in (("Size", ("large", "medium", "small")), ("Location", ("center", "mid", "margin"))):
        for value in values:
            for corpus in _OBJECT_CORPORA:
                out[f"Object_{kind}_{value}_{corpus}"] = _object_file(kind, value, corpus)
    for attr in _ATTRIBUTES:
        for corpus in ("vg", "vaw"):
            out[f"Attribute_{attr}_{corpus}"] = f"Attribute/{corpus}/{attr}.json"
    out["Relation_action_vg"] = "Relation/vg/action.json"
    out["Relation_action_swig"] = "Relation/swig_action.json"
    out["Relation_action_hake"] = "Relation/hake_action.json"
    out["Relation_spatial_vg"] = "Relation/vg/spatial.json"
    return out


#: Subset -> its annotation file, relative to ``data_dir`` (the release's ``data/``).
VLC_FILES: dict[str, str] = _files()
VLC_SUBSETS: tuple[str, ...] = tuple(VLC_FILES)
_SOURCE_NAMES = ("vg", "hake", "swig")


def _corpus(subset: str) -> str:
    """The corpus part of a subset name (``swig_agent``, ``vg_obj``, ``vaw``, ``hake``)."""
    parts = subset.split("_")
    return "_".join(parts[3:]) if parts[0] == "Object" else parts[2]


def _aspect(subset: str) -> str:
    """The radar's spoke of a subset: its name without the corpus (``Object_Size_large``)."""
    parts = subset.split("_")
    return "_".join(parts[:3] if parts[0] == "Object" else parts[:2])


def _source(subset: str) -> str:
    """The image folder of a subset's corpus: ``vg`` (VG and VAW), ``hake`` or ``swig``."""
    corpus = _corpus(subset)
    return "vg" if corpus in ("vaw",) or corpus.startswith("vg") else corpus.split("_")[0]


#: The radar's 13 spokes (``radar.py``'s order), each with its subsets grouped by image corpus:
#: a spoke's value is the mean over its corpora of each corpus's mean over its files.
VLC_ASPECTS: dict[str, dict[str, tuple[str, ...]]] = {}
for _name in ("Object_Size_large", "Object_Size_medium", "Object_Size_small", "Object_Location_center",
              "Object_Location_mid", "Object_Location_margin", "Attribute_color", "Attribute_material",
              "Attribute_size", "Attribute_state", "Attribute_action", "Relation_action", "Relation_spatial"):
    groups: dict[str, tuple[str, ...]] = {}
    for _s in VLC_SUBSETS:
        if _aspect(_s) == _name:
            key = _corpus(_s).split("_")[0]
            groups[key] = (*groups.get(key, ()), _s)
    VLC_ASPECTS[_name] = groups
VLC_SOURCES: dict[str, str] = {s: _source(s) for s in VLC_SUBSETS}


def _root(data_dir: str | os.PathLike[str]) -> Path:
    root = Path(data_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"data_dir: no such directory {str(root)!r}")
    for candidate in (root, root / "data"):
        if any((candidate / VLC_FILES[s]).is_file() for s in VLC_SUBSETS):
            return candidate
    raise InputError(
        f"data_dir: {str(root)!r} holds none of VL-CheckList's annotation files (e.g. {VLC_FILES['Attribute_color_vg']}, "
        "under the release's data/ folder); is it another benchmark's folder?"
    )


def _record(rec: Any, where: str) -> tuple[str, list[str], list[str]]:
    if not (isinstance(rec, list) and len(rec) == 2):
        raise InputError(f"data_dir: {where} must be [image path, {{\"POS\": [...], \"NEG\": [...]}}]")
    path, texts = rec
    if not isinstance(path, str) or not path:
        raise InputError(f"data_dir: {where}: field 'path' (its first element) must be the image's relative path")
    if not isinstance(texts, dict):
        raise InputError(f"data_dir: {where}: its second element must be an object with POS and NEG")
    out = []
    for key in ("POS", "NEG"):
        value = texts.get(key)
        if not (isinstance(value, list) and value and all(isinstance(t, str) for t in value)):
            raise InputError(f"data_dir: {where}: field {key!r} must be a non-empty list of texts")
        out.append(value)
    return path, out[0], out[1]


def _item(subset: str, n: int, rec: tuple[str, list[str], list[str]], folder: Path | None, file: str) -> Item:
    path, pos, neg = rec
    item_id = f"vl-checklist/{subset}/{n}"
    name = str(Path(path).with_suffix("")).replace("/", "__")
    return Item(
        item_id,
        (ImageRef(f"{item_id}/i0", name, None if folder is None else folder / path),),
        (TextRef(f"{item_id}/c0", pos[0]), TextRef(f"{item_id}/c1", neg[0])),
        {"subset": (subset,), "category": (subset.split("_")[0],), "aspect": (_aspect(subset),),
         "corpus": (_corpus(subset),)},
        {"subset": subset, "key": str(n), "file": file, "image_file": path, "pos": tuple(pos), "neg": tuple(neg),
         "roles": ("pos", "neg")},
    )


def load_vl_checklist(
    data_dir: str | os.PathLike[str],
    *,
    image_root: Sequence[str] | Mapping[str, Any] | None = None,
    subsets: str | Sequence[str] | None = None,
    limit: int | None = VLC_ITC_ITEMS,
) -> Dataset:
    """Load VL-CheckList from its annotation files (see the module docstring).

    Parameters
    ----------
    data_dir : path
        The release's ``data/`` folder (or the folder holding it).
    image_root : list of "SOURCE=DIR" or mapping, optional
        Image folder per source (``vg``, ``hake``, ``swig``; a bare DIR holding the three).
        With a folder for a subset's source every selected item's image must exist (the first
        missing one is named); a subset without one carries no image paths.
    subsets : str or sequence of str, optional
        Subsets to load (:data:`VLC_SUBSETS`); default every subset whose file is present.
    limit : int or None
        The first ``limit`` records of each file; default 1,000, as the authors' ITC runs
        (:data:`VLC_ITC_ITEMS`); None for every record.

    Returns
    -------
    Dataset
        ``fingerprint`` covers the files read, the limit, and the image files where folders are given.
    """
    if limit is not None:
        check_positive_int(limit, "limit")
    root = _root(data_dir)
    present = tuple(s for s in VLC_SUBSETS if (root / VLC_FILES[s]).is_file())
    chosen = present if subsets is None else parse_subsets(
        subsets if isinstance(subsets, str) else list(subsets), VLC_SUBSETS)
    for subset in chosen:
        if subset not in present:
            raise FileNotFoundError(f"data_dir: {VLC_FILES[subset]} (subset {subset}) is missing from {root}")
    roots = parse_source_roots(image_root, _SOURCE_NAMES)
    h = hashlib.sha256(f"limit:{limit}\n".encode())
    items: list[Item] = []
    for subset in chosen:
        rel = VLC_FILES[subset]
        path = root / rel
        h.update(f"{subset}:{sha256_file(path)}\n".encode())
        raw = read_json_list(path)
        folder = roots.get(VLC_SOURCES[subset], roots.get("*"))
        if folder is not None and "*" in roots and VLC_SOURCES[subset] not in roots:
            folder = folder / VLC_SOURCES[subset]  # a bare DIR is the authors' $DATASET: DIR/<source>/
        for n, rec in enumerate(raw[:limit] if limit else raw):
            where = f"{Path(rel).name} record {n}"
            item = _item(subset, n, _record(rec, where), folder, rel)
            p = item.images[0].path
            if p is not None and not p.is_file():
                raise FileNotFoundError(f"image_root: {rel} record {n}: field 'path' {item.meta['image_file']!r}: "
                                        f"no such image in {folder}")
            items.append(item)
    hash_image_files(h, {it.images[0].path for it in items if it.images[0].path is not None}, "image_root")
    source = f"{root.resolve()} ({len(chosen)} files" + (f"; first {limit} records each" if limit else "") + ")"
    return Dataset("vl-checklist", tuple(items), h.hexdigest(), source)


def vl_checklist_report(
    data_dir: str | os.PathLike[str], image_root: Sequence[str] | Mapping[str, Any] | None = None,
) -> list[SubsetReport]:
    """Validate and count VL-CheckList's files (``probe data info vl-checklist``): records per
    file (``kept``: the first 1,000 the authors' ITC run takes), distinct images, malformed
    records, images missing where a folder is given."""
    root = _root(data_dir)
    roots = parse_source_roots(image_root, _SOURCE_NAMES)
    out = []
    for subset in VLC_SUBSETS:
        rel = VLC_FILES[subset]
        path = root / rel
        if not path.is_file():
            continue
        rep = SubsetReport(subset)
        out.append(rep)
        rep.sha256 = sha256_file(path)
        raw = read_json_list(path)
        folder = roots.get(VLC_SOURCES[subset], roots.get("*"))
        if folder is not None and "*" in roots and VLC_SOURCES[subset] not in roots:
            folder = folder / VLC_SOURCES[subset]
        names: set[str] = set()
        for n, rec in enumerate(raw):
            try:
                image, _, _ = _record(rec, f"record {n}")
            except InputError:
                rep.add("malformed record")
                continue
            rep.items += 1
            names.add(image)
            if folder is not None and not (folder / image).is_file():
                rep.add("image missing (the authors' loader skips these records)")
        rep.kept = min(rep.items, VLC_ITC_ITEMS)
        rep.images = len(names)
        if rep.items:
            rep.first_id, rep.last_id = f"vl-checklist/{subset}/0", f"vl-checklist/{subset}/{rep.items - 1}"
    return out
