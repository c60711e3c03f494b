"""MMVP-VLM (Tong et al. 2024, "Eyes Wide Shut? Exploring the Visual Shortcomings of Multimodal
LLMs") as vlprobe items.

The benchmark is one folder as its authors distribute it (the dataset ``MMVP/MMVP_VLM``), read as
their evaluation script (``scripts/evaluate_vlm.py`` of tsb0601/MMVP) reads it:

* ``Questions.csv``: a header row, then one row per statement with three columns, read by
  position: question id (an integer), type (the image folder's name), statement. A header of
  fewer columns is refused, naming the one it lacks. Rows go in
  pairs: rows 1-2 are pair 0, rows 3-4 pair 1, ...; the first id of a pair is odd and the second
  is the next integer (the script's ground truth reads the parity: statement ``qid`` matches
  image ``qid``).
* ``MLLM_VLM Images/<type>/<qid>.jpg``: the image of each statement (the pair's folder is its
  first row's type, as the script opens both). The release's header is ``Question ID,Type,Statement``
  and its types, one image folder each, are the short names of :data:`MMVP_TYPES`
  (``Orientation``, ``Presence``, ... ``Camera Perspective``), one per category in the categories'
  order; ``probe data info`` counts pairs whose type is not their category's.

The category of a pair is its position, as the script assigns it: pairs 0-14 are
"Orientation and Direction", 15-29 "Presence of Specific Features", and so on through the nine
categories of :data:`MMVP_CATEGORIES`, 15 pairs each (135 pairs, 270 statements, 270 images, as
the paper states). A file with more than 135 pairs is refused; one with fewer fills the first
categories.

Item ``mmvp-vlm/<category>/<qid1>``: images ``.../i0`` (``<qid1>.jpg``) and ``.../i1``
(``<qid2>.jpg``), texts ``.../c0`` and ``.../c1``: ``"a photo of "`` + the statements, the text
the script scores (text k matches image k); tags ``subset``, ``category`` and ``type`` (the CSV's column).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

from vlprobe.data.items import Dataset, ImageRef, Item, TextRef
from vlprobe.data.source_files import hash_image_files, read_csv_rows
from vlprobe.data.sugarcrepe import SubsetReport, parse_subsets
from vlprobe.provenance import sha256_file
from vlprobe.validation import InputError, check_positive_int

__all__ = [
    "MMVP_CATEGORIES",
    "MMVP_CSV",
    "MMVP_IMAGES",
    "MMVP_PAIRS_PER_CATEGORY",
    "MMVP_SUBSETS",
    "MMVP_TEXT_PREFIX",
    "MMVP_TYPES",
    "load_mmvp_vlm",
    "mmvp_vlm_report",
]

#: The nine visual patterns, in the script's order (a pair's category is its position // 15).
MMVP_CATEGORIES: tuple[str, ...] = (
    "Orientation and Direction", "Presence of Specific Features", "State and Condition", "Quantity and Count",
    "Positional and Relational Context", "Color and Appearance", "Structural Characteristics", "Texts",
    "Viewpoint and Perspective",
)
#: The release's ``Type`` column and image folder of each category, in :data:`MMVP_CATEGORIES` order
#: (the dataset MMVP/MMVP_VLM: ``MLLM_VLM Images/<type>/``, 30 images each).
MMVP_TYPES: tuple[str, ...] = (
    "Orientation", "Presence", "State", "Quantity", "Spatial", "Color", "Structural Character", "Text",
    "Camera Perspective",
)
#: The categories as subset names (lowercase, underscores).
MMVP_SUBSETS: tuple[str, ...] = tuple(c.lower().replace(" ", "_") for c in MMVP_CATEGORIES)
MMVP_PAIRS_PER_CATEGORY = 15
MMVP_CSV = "Questions.csv"
MMVP_IMAGES = "MLLM_VLM Images"
#: What the script puts before every statement.
MMVP_TEXT_PREFIX = "a photo of "
_COLUMNS = ("question id", "type", "statement")
#: The release's header row.
_HEADER = ("Question ID", "Type", "Statement")


def _root(data_dir: str | os.PathLike[str]) -> Path:
    root = Path(data_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"data_dir: no such directory {str(root)!r}")
    if not (root / MMVP_CSV).is_file():
        raise InputError(
            f"data_dir: {str(root)!r} holds no {MMVP_CSV} (MMVP-VLM's statements, beside its "
            f"{MMVP_IMAGES!r} folder); is it another benchmark's folder?"
        )
    return root


def _read_rows(path: Path) -> list[tuple[int, int, str, str]]:
    """``(row number, question id, type, statement)`` per data row (row 1 is the header)."""
    header, rows = read_csv_rows(path, "a header and statement rows")
    if len(header) < len(_COLUMNS):  # a column missing, header and rows alike (the rows are read by position)
        named = [h.strip().lower() for h in header]
        gone = next((c for c in _COLUMNS if c not in named), _COLUMNS[len(header)])
        raise InputError(f"data_dir: {path.name}: column {_HEADER[_COLUMNS.index(gone)]!r} is missing (its header "
                         f"has {', '.join(header) or 'nothing'}; MMVP-VLM's has {', '.join(_HEADER)})")
    out = []
    for n, row in enumerate(rows, start=2):
        if not any(cell.strip() for cell in row):
            continue
        where = f"{path.name} row {n}"
        if len(row) < 3:
            raise InputError(f"data_dir: {where}: field {_COLUMNS[len(row)]!r} is missing "
                             "(expected question id, type, statement)")
        if len(row) > 3:
            raise InputError(f"data_dir: {where}: {len(row)} fields, expected 3 (question id, type, statement)")
        qid, qtype, statement = row
        try:
            q = int(qid)
        except ValueError:
            raise InputError(f"data_dir: {where}: field 'question id' must be an integer, got {qid!r}") from None
        for name, value in (("type", qtype), ("statement", statement)):
            if not value.strip():
                raise InputError(f"data_dir: {where}: field {name!r} is empty")
        out.append((n, q, qtype, statement))
    return out


def _pairs(path: Path) -> list[tuple[tuple[int, int, str, str], tuple[int, int, str, str]]]:
    rows = _read_rows(path)
    if len(rows) % 2:
        raise InputError(f"data_dir: {path.name} row {rows[-1][0]}: a statement without its pair "
                         f"({len(rows)} statements; they go in pairs)")
    pairs = list(zip(rows[0::2], rows[1::2], strict=True))
    limit = len(MMVP_CATEGORIES) * MMVP_PAIRS_PER_CATEGORY
    if len(pairs) > limit:
        raise InputError(f"data_dir: {path.name} holds {len(pairs)} pairs; MMVP-VLM has {limit} "
                         f"({MMVP_PAIRS_PER_CATEGORY} per category, by position)")
    for first, second in pairs:
        if first[1] % 2 != 1:
            raise InputError(f"data_dir: {path.name} row {first[0]}: field 'question id' must be odd (the first "
                             f"statement of a pair), got {first[1]}")
        if second[1] != first[1] + 1:
            raise InputError(f"data_dir: {path.name} row {second[0]}: field 'question id' must be {first[1] + 1} "
                             f"(its pair's first id + 1), got {second[1]}")
    return pairs


def load_mmvp_vlm(
    data_dir: str | os.PathLike[str],
    *,
    subsets: str | Sequence[str] | None = None,
    limit: int | None = None,
) -> Dataset:
    """Load MMVP-VLM from its folder (see the module docstring).

    Parameters
    ----------
    data_dir : path
        The folder holding ``Questions.csv`` and ``MLLM_VLM Images/``.
    subsets : str or sequence of str, optional
        Categories to load (:data:`MMVP_SUBSETS`; comma-separated or a list); default all.
    limit : int, optional
        Keep only the first ``limit`` pairs of each category.

    Returns
    -------
    Dataset
        ``fingerprint`` covers ``Questions.csv`` and every selected image file (each must exist).
    """
    if limit is not None:
        check_positive_int(limit, "limit")
    root = _root(data_dir)
    chosen = set(parse_subsets(subsets if subsets is None or isinstance(subsets, str) else list(subsets),
                               MMVP_SUBSETS))
    path = root / MMVP_CSV
    h = hashlib.sha256(f"{MMVP_CSV}:{sha256_file(path)}\n".encode())
    items: list[Item] = []
    taken: dict[str, int] = {}
    for n, (first, second) in enumerate(_pairs(path)):
        subset = MMVP_SUBSETS[n // MMVP_PAIRS_PER_CATEGORY]
        if subset not in chosen or (limit is not None and taken.get(subset, 0) >= limit):
            continue
        taken[subset] = taken.get(subset, 0) + 1
        items.append(_item(root, subset, first, second))
    hash_image_files(h, [im.path for it in items for im in it.images if im.path is not None], "data_dir")
    source = f"{root.resolve()} ({len(items)} pairs" + (f"; limit {limit} per category" if limit else "") + ")"
    return Dataset("mmvp-vlm", tuple(items), h.hexdigest(), source)


def _item(root: Path, subset: str, first: tuple[int, int, str, str], second: tuple[int, int, str, str]) -> Item:
    folder = root / MMVP_IMAGES / first[2]  # the script opens both images in the first row's folder
    item_id = f"mmvp-vlm/{subset}/{first[1]}"
    images = tuple(ImageRef(f"{item_id}/i{k}", f"{row[1]}", folder / f"{row[1]}.jpg") for k, row in enumerate((first, second)))
    texts = tuple(TextRef(f"{item_id}/c{k}", MMVP_TEXT_PREFIX + row[3]) for k, row in enumerate((first, second)))
    category = MMVP_CATEGORIES[MMVP_SUBSETS.index(subset)]
    return Item(item_id, images, texts, {"subset": (subset,), "category": (category,), "type": (first[2],)},
                {"subset": subset, "key": str(first[1]), "question_ids": (first[1], second[1]),
                 "statements": (first[3], second[3])})


def mmvp_vlm_report(data_dir: str | os.PathLike[str], image_root: Sequence[str] | None = None) -> list[SubsetReport]:
    """Validate and count MMVP-VLM's folder (``probe data info mmvp-vlm``): pairs per category,
    images, images missing."""
    if image_root:
        raise InputError("image_root: MMVP-VLM's images are in its own folder (data_dir/MLLM_VLM Images)")
    root = _root(data_dir)
    reports = {s: SubsetReport(s) for s in MMVP_SUBSETS}
    sha = sha256_file(root / MMVP_CSV)
    for n, (first, second) in enumerate(_pairs(root / MMVP_CSV)):
        subset = MMVP_SUBSETS[n // MMVP_PAIRS_PER_CATEGORY]
        rep = reports[subset]
        item = _item(root, subset, first, second)
        rep.items += 1
        rep.kept += 1
        rep.images += 2
        rep.first_id = rep.first_id or item.id
        rep.last_id = item.id
        rep.add("image missing", sum(1 for im in item.images if im.path is None or not im.path.is_file()))
        category = MMVP_SUBSETS.index(subset)
        rep.add(f"type not the category's ({MMVP_TYPES[category]})", int(first[2] != MMVP_TYPES[category]))
    for rep in reports.values():
        rep.sha256 = sha
        if not rep.items:
            rep.add("no pairs (the file ends before this category)")
    return list(reports.values())
