"""CREPE (Ma et al. 2023, "CREPE: Can Vision-Language Foundation Models Reason Compositionally?")
as vlprobe items.

CREPE is image-to-text retrieval over hard negatives: each row of its CSV files is one Visual
Genome region (an image cropped to a box) with its caption and a list of hard-negative captions.
The files are read as the authors' evaluation code (RAIVNLab/CREPE: ``crepe_eval_utils.py``,
``crepe_compo_eval_open_clip.py``, ``crepe_prod_eval_*.py``) reads them, from the folder holding
the two folders of the release (``data_dir``):

==============================  ===================================================================
subset                          file (in ``data_dir``) and the column of its hard negatives
==============================  ===================================================================
``syst_<train>_<split>_<neg>``  ``syst_hard_negatives/syst_vg_hard_negs_<split>_compounds_in_<train>.csv``,
                                column ``valid_hard_negs_<neg>``; ``train`` one of ``cc12m``,
                                ``yfcc``, ``laion`` (the pretraining set the split is for),
                                ``split`` ``seen`` or ``unseen``, ``neg`` ``atom``, ``comp`` or
                                ``combined`` (the authors' ``--hard-neg-types``: atom + comp)
``prod_<neg>_<complexity>``     ``prod_hard_negatives/<neg>/prod_vg_hard_negs_<neg>_complexity_<c>.csv``,
                                column ``hard_negs``; ``neg`` one of ``atom``, ``negate``, ``swap``,
                                complexity 4 to 12
==============================  ===================================================================

Every file is a CSV with a header; the columns read are ``image_id``, ``caption``, the box ``x``,
``y``, ``width``, ``height`` and the negatives' column, a Python literal (the authors read it with
``ast.literal_eval``): a list, or in 3,768 of the 39,715 rows of the released productivity files
(every atom and negate file, no swap file) a **set** ``{...}``. vlprobe parses the cell without
evaluating it (a list, tuple or set of string literals, nothing else) and keeps the negatives in
the order the cell writes them (a set's repeated string once, as a set holds it). The authors'
code iterates the set (``list(self.hard_negs[idx])``), whose order follows the strings' hashes:
it changes from run to run unless ``PYTHONHASHSEED`` is fixed. Their metric does not see it on
these rows: each has a caption and five negatives, and ``torch.argsort`` on the CPU sorts up to 16
values stably, so a negative tying the caption ranks after it whatever the order (checked by
running ``get_one2many_rank`` unchanged under every order of planted ties; with 17 or more texts
torch's sort is not stable and the authors' rank of a tie depends on the order). A systematicity
file holds the three negative types, so each of its rows is one item of ``..._atom``, one of
``..._comp`` and one of ``..._combined``.

Item ``crepe/<subset>/<n>`` (n = the data row's position in the file): one image ``.../i0``, the
Visual Genome image ``<image_id>.jpg`` **cropped to the box** as the authors' code crops it
(``TF.crop(image, y, x, height, width)``), searched in ``VG_100K/`` then ``VG_100K_2/`` under the
``vg`` image root, as the authors' ``get_image_by_id``; texts ``.../c0`` the caption (``str`` of
the cell, as the code) and ``.../c1``... the hard negatives in the file's order. Tags ``subset``,
``compositionality`` (``systematicity``/``productivity``), ``hard_negative`` (the type), and
``complexity`` (productivity) or ``train_dataset`` and ``compounds`` (``seen``/``unseen``,
systematicity). A row whose negatives list is empty is kept with its caption alone (the
authors' code ranks it first, trivially right).

Counts, as the paper's abstract states them (per-file counts are not given there, and the files
are not shipped here, so they are not checked): systematicity over 370K image-text pairs (three
seen/unseen splits, for CC-12M, YFCC-15M and LAION-400M) with 325K, 316K and 309K hard negatives
for a subset of them; productivity 17K image-text pairs over the nine complexities with 278K
hard negatives (atomic, swap, negate).
"""

from __future__ import annotations

import ast
import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from vlprobe.data.items import Dataset, ImageRef, Item, TextRef
from vlprobe.data.source_files import hash_image_files, parse_source_roots, read_csv_rows
from vlprobe.data.sugarcrepe import SubsetReport, parse_subsets
from vlprobe.provenance import sha256_file
from vlprobe.validation import InputError, check_positive_int

__all__ = [
    "CREPE_COMPLEXITIES",
    "CREPE_PROD_NEGATIVES",
    "CREPE_SUBSETS",
    "CREPE_SYST_NEGATIVES",
    "CREPE_TRAIN_DATASETS",
    "CREPE_VG_FOLDERS",
    "crepe_file",
    "crepe_report",
    "load_crepe",
    "parse_negatives",
]

CREPE_TRAIN_DATASETS: tuple[str, ...] = ("cc12m", "yfcc", "laion")
CREPE_SYST_SPLITS: tuple[str, ...] = ("seen", "unseen")
CREPE_SYST_NEGATIVES: tuple[str, ...] = ("atom", "comp", "combined")
CREPE_PROD_NEGATIVES: tuple[str, ...] = ("atom", "negate", "swap")
CREPE_COMPLEXITIES: tuple[int, ...] = tuple(range(4, 13))
#: Where the authors' ``get_image_by_id`` looks for ``<image_id>.jpg``, in this order.
CREPE_VG_FOLDERS: tuple[str, ...] = ("VG_100K", "VG_100K_2")
_SOURCES = ("vg",)
_BOX = ("x", "y", "width", "height")
_SYST = "syst_hard_negatives"
_PROD = "prod_hard_negatives"


def _syst_subsets() -> list[str]:
    return [f"syst_{t}_{s}_{n}" for t in CREPE_TRAIN_DATASETS for s in CREPE_SYST_SPLITS for n in CREPE_SYST_NEGATIVES]


def _prod_subsets() -> list[str]:
    return [f"prod_{n}_{c}" for n in CREPE_PROD_NEGATIVES for c in CREPE_COMPLEXITIES]


#: Every subset: systematicity (train set x seen/unseen x negative type), then productivity
#: (negative type x complexity).
CREPE_SUBSETS: tuple[str, ...] = (*_syst_subsets(), *_prod_subsets())


def crepe_file(subset: str) -> tuple[str, str]:
    """The file (relative to ``data_dir``) of a subset and the column of its hard negatives."""
    parts = subset.split("_")
    if parts[0] == "syst":
        train, split, neg = parts[1:]
        return f"{_SYST}/syst_vg_hard_negs_{split}_compounds_in_{train}.csv", f"valid_hard_negs_{neg}"
    neg, complexity = parts[1:]
    return f"{_PROD}/{neg}/prod_vg_hard_negs_{neg}_complexity_{complexity}.csv", "hard_negs"


def _tags(subset: str) -> dict[str, tuple[str, ...]]:
    parts = subset.split("_")
    if parts[0] == "syst":
        return {"subset": (subset,), "compositionality": ("systematicity",), "train_dataset": (parts[1],),
                "compounds": (parts[2],), "hard_negative": (parts[3],)}
    return {"subset": (subset,), "compositionality": ("productivity",), "hard_negative": (parts[1],),
            "complexity": (parts[2],)}


def _root(data_dir: str | os.PathLike[str]) -> Path:
    root = Path(data_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"data_dir: no such directory {str(root)!r}")
    if not ((root / _SYST).is_dir() or (root / _PROD).is_dir()):
        raise InputError(
            f"data_dir: {str(root)!r} holds neither {_SYST}/ nor {_PROD}/ (CREPE's two folders); "
            "is it another benchmark's folder?"
        )
    return root


def _present(root: Path) -> tuple[str, ...]:
    return tuple(s for s in CREPE_SUBSETS if (root / crepe_file(s)[0]).is_file())


def _number(value: str, where: str, field: str) -> float:
    try:
        out = float(value)
    except ValueError:
        raise InputError(f"data_dir: {where}: field {field!r} must be a number (pixels), got {value!r}") from None
    return out


def parse_negatives(value: str, where: str, field: str) -> tuple[list[str], bool]:
    """The captions of a negatives cell in the order it writes them, and whether it is a set literal.

    The cell is parsed, never evaluated: a list, tuple or set of string literals (a set's repeated
    string kept once, as the set the authors' ``ast.literal_eval`` builds holds it).
    """
    try:
        body = ast.parse(value.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        body = None
    if isinstance(body, ast.Call) and isinstance(body.func, ast.Name) and body.func.id == "set" and not (
            body.args or body.keywords):
        return [], True  # set(): how Python writes an empty set, which literal_eval reads
    if not isinstance(body, ast.List | ast.Tuple | ast.Set):
        raise InputError(f"data_dir: {where}: field {field!r} must be a list of captions (a Python list or set "
                         f"literal), got {value[:40]!r}")
    if not all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in body.elts):
        raise InputError(f"data_dir: {where}: field {field!r} must be a list of captions (strings)")
    texts = [str(e.value) for e in body.elts]  # type: ignore[attr-defined]  # Constant, checked above
    is_set = isinstance(body, ast.Set)
    return (list(dict.fromkeys(texts)) if is_set else texts), is_set


Record = tuple[str, str, tuple[float, float, float, float], list[str], bool]


def _records(path: Path, column: str) -> list[Record]:
    """``(image_id, caption, (x, y, w, h), negatives, written as a set)`` per data row of a CREPE file."""
    header, rows = read_csv_rows(path, "a header and one row per region", whole_lines=True)  # (every released file ends so)
    need = ("image_id", "caption", *_BOX, column)
    missing = [c for c in need if c not in header]
    if missing:
        raise InputError(f"data_dir: {path.name}: field {missing[0]!r} is missing (its header has "
                         f"{', '.join(header[:12])}); is it another benchmark's file?")
    at = {c: header.index(c) for c in need}
    out = []
    for n, row in enumerate(rows):
        where = f"{path.name} row {n + 2}"
        if len(row) < len(header):
            raise InputError(f"data_dir: {where}: {len(row)} fields, the header has {len(header)}")
        image_id = row[at["image_id"]].strip()
        if not image_id:
            raise InputError(f"data_dir: {where}: field 'image_id' is empty")
        x, y, w, h = (_number(row[at[c]], where, c) for c in _BOX)
        if w <= 0 or h <= 0:
            raise InputError(f"data_dir: {where}: field {'width' if w <= 0 else 'height'!r} must be positive")
        negatives, is_set = parse_negatives(row[at[column]], where, column)
        out.append((image_id, row[at["caption"]], (x, y, w, h), negatives, is_set))
    return out


def _image_path(folder: Path, image_id: str) -> Path:
    """The first of ``VG_100K/<id>.jpg``, ``VG_100K_2/<id>.jpg`` that exists (else the first)."""
    candidates = [folder / sub / f"{image_id}.jpg" for sub in CREPE_VG_FOLDERS]
    return next((p for p in candidates if p.is_file()), candidates[0])


def _item(subset: str, n: int, rec: Record, folder: Path | None, file: str) -> Item:
    image_id, caption, box, negatives, is_set = rec
    item_id = f"crepe/{subset}/{n}"
    x, y, w, h = box
    name = f"{image_id}_crop{x:g}_{y:g}_{w:g}_{h:g}"
    path = None if folder is None else _image_path(folder, image_id)
    texts = (TextRef(f"{item_id}/c0", caption),
             *(TextRef(f"{item_id}/c{k + 1}", t) for k, t in enumerate(negatives)))
    return Item(item_id, (ImageRef(f"{item_id}/i0", name, path, crop=box),), texts, _tags(subset),
                {"subset": subset, "key": str(n), "image_id": image_id, "file": file,
                 "roles": ("caption", *(["hard_negative"] * len(negatives))),
                 **({"negatives_written_as": "set"} if is_set else {})})


def load_crepe(
    data_dir: str | os.PathLike[str],
    *,
    image_root: Sequence[str] | Mapping[str, Any] | None = None,
    subsets: str | Sequence[str] | None = None,
    limit: int | None = None,
) -> Dataset:
    """Load CREPE from its authors' CSV files (see the module docstring).

    Parameters
    ----------
    data_dir : path
        The folder holding ``syst_hard_negatives/`` and/or ``prod_hard_negatives/``.
    image_root : list of "vg=DIR" (or a bare DIR) or mapping, optional
        The Visual Genome folder holding ``VG_100K/`` and ``VG_100K_2/``. With it every selected
        item's image must exist (the first missing one is named); without it items carry no
        image paths (text-only models need none).
    subsets : str or sequence of str, optional
        Subsets to load (:data:`CREPE_SUBSETS`; comma-separated or a list); default every subset
        whose file is in ``data_dir``.
    limit : int, optional
        Keep only the first ``limit`` rows of each subset (file order).

    Returns
    -------
    Dataset
        ``fingerprint`` covers the files read (and the image files where a folder is given).
    """
    if limit is not None:
        check_positive_int(limit, "limit")
    root = _root(data_dir)
    present = _present(root)
    if subsets is None:
        chosen = present
        if not chosen:
            raise InputError(f"data_dir: {root} holds none of CREPE's CSV files (e.g. {crepe_file(CREPE_SUBSETS[0])[0]})")
    else:
        chosen = tuple(parse_subsets(subsets if isinstance(subsets, str) else list(subsets), CREPE_SUBSETS))
    for subset in chosen:
        if subset not in present:
            raise FileNotFoundError(f"data_dir: {crepe_file(subset)[0]} (subset {subset}) is missing from {root}")
    roots = parse_source_roots(image_root, _SOURCES)
    folder = roots.get("vg", roots.get("*"))
    h = hashlib.sha256()
    items: list[Item] = []
    for subset in chosen:
        rel, column = crepe_file(subset)
        path = root / rel
        h.update(f"{subset}:{sha256_file(path)}\n".encode())
        records = _records(path, column)
        for n, rec in enumerate(records[:limit] if limit else records):
            items.append(_item(subset, n, rec, folder, rel))
    if folder is not None:
        for it in items:
            p = it.images[0].path
            if p is not None and not p.is_file():
                raise FileNotFoundError(
                    f"image_root: {it.meta['file']} row {int(it.meta['key']) + 2}: field 'image_id' "
                    f"{it.meta['image_id']!r}: no {it.meta['image_id']}.jpg in {folder}/VG_100K or VG_100K_2")
        hash_image_files(h, {it.images[0].path for it in items if it.images[0].path is not None}, "image_root")
    source = f"{root.resolve()} ({', '.join(chosen)}" + (f"; limit {limit} per subset" if limit else "") + ")"
    return Dataset("crepe", tuple(items), h.hexdigest(), source)


def crepe_report(
    data_dir: str | os.PathLike[str], image_root: Sequence[str] | Mapping[str, Any] | None = None,
) -> list[SubsetReport]:
    """Validate and count CREPE's files (``probe data info crepe``): items per subset, distinct
    images, rows without hard negatives, images missing where a folder is given."""
    root = _root(data_dir)
    roots = parse_source_roots(image_root, _SOURCES)
    folder = roots.get("vg", roots.get("*"))
    out = []
    for subset in CREPE_SUBSETS:
        rep = SubsetReport(subset)
        rel, column = crepe_file(subset)
        path = root / rel
        if not path.is_file():
            continue  # the release ships the files for some pretraining sets only: list what is there
        out.append(rep)
        rep.sha256 = sha256_file(path)
        records = _records(path, column)
        rep.items = rep.kept = len(records)
        rep.images = len({r[0] for r in records})
        rep.add("no hard negatives (ranked first, trivially right)", sum(1 for r in records if not r[3]))
        rep.add("hard negatives written as a set (read in the order written)", sum(1 for r in records if r[4]))
        if folder is not None:
            rep.add("image missing (items)", sum(1 for r in records if not _image_path(folder, r[0]).is_file()))
        if records:
            rep.first_id, rep.last_id = f"crepe/{subset}/0", f"crepe/{subset}/{len(records) - 1}"
    if not out:
        raise InputError(f"data_dir: {root} holds none of CREPE's CSV files (e.g. {crepe_file(CREPE_SUBSETS[0])[0]})")
    return out
