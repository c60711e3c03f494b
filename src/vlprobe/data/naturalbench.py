"""NaturalBench (Li et al. 2024, "NaturalBench: Evaluating Vision-Language Models on Natural
Adversarial Samples") as vlprobe items.

The benchmark is the dataset ``BaiqiL/NaturalBench`` as its authors distribute it: parquet shards
``data/train-NNNNN-of-NNNNN.parquet`` (three in the release, 1,900 samples; or the shards
themselves in ``data_dir``), one row per
sample with the columns ``Index``, ``Image_0`` and ``Image_1`` (the images, embedded as
``{"bytes", "path"}``), ``Question_0``, ``Question_1``, the answers ``Image_0_Question_0``,
``Image_1_Question_0``, ``Image_0_Question_1``, ``Image_1_Question_1``, ``Question Type``
(``yes_no`` or ``multiple_choice``; older revisions spell the column ``Question_Type``) and
``Source``. The images are unpacked once into vlprobe's cache (``$VLPROBE_CACHE/naturalbench/``,
one folder per set of shards, keyed by their checksums) so that models read them as files.

NaturalBench is VQA; a scoring model answers it here by comparing texts. A sample becomes item
``naturalbench/<question type>/<Index>`` with images ``.../i0``, ``.../i1`` and four texts: the
prompt of each question (the question + the authors' suffix, as their ``example.py`` builds it:
``"Please answer Yes or No."`` or ``"Please output the letter corresponding to the correct
option."``, appended without a space) followed by a space and each answer, ``c0`` = question 0 +
``Yes`` (``A``), ``c1`` = question 0 + ``No`` (``B``), ``c2``, ``c3`` the same for question 1. The
model's answer to question q on image i is ``Yes``/``A`` (1) when ``c{2q}`` outscores ``c{2q+1}``
on that image, ``No``/``B`` (0) when it scores lower, and none (-1, what the authors'
``extract_answer`` returns when it finds no answer) on a tie.

The authors' scoring (``get_scores``) does not read the answer columns: it takes question 0 to be
answered Yes/A on image 0 and No/B on image 1, question 1 the reverse, as the dataset is built.
The loader keeps the answers (``meta["answers"]``) and ``probe data info`` counts the samples
whose answers differ from that pattern. Tags: ``subset`` (the question type) and ``source``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vlprobe.data.items import Dataset, ImageRef, Item, TextRef
from vlprobe.data.sugarcrepe import SubsetReport, parse_subsets
from vlprobe.data.tags import cache_dir
from vlprobe.provenance import sha256_file
from vlprobe.validation import InputError, check_positive_int

__all__ = [
    "NATURALBENCH_ANSWERS",
    "NATURALBENCH_COLUMNS",
    "NATURALBENCH_PATTERN",
    "NATURALBENCH_SHARDS",
    "NATURALBENCH_SUBSETS",
    "NATURALBENCH_SUFFIX",
    "load_naturalbench",
    "naturalbench_report",
]

#: The question types, as the ``Question Type`` column spells them.
NATURALBENCH_SUBSETS: tuple[str, ...] = ("yes_no", "multiple_choice")
#: The authors' prompt suffix per question type (``SUFFIX_FOR_VQA`` of their example.py).
NATURALBENCH_SUFFIX: dict[str, str] = {
    "yes_no": "Please answer Yes or No.",
    "multiple_choice": "Please output the letter corresponding to the correct option.",
}
#: The two answers per question type: (the one scored 1, the one scored 0).
NATURALBENCH_ANSWERS: dict[str, tuple[str, str]] = {"yes_no": ("Yes", "No"), "multiple_choice": ("A", "B")}
#: The answers the authors' get_scores takes as right: [question][image] -> 1 (Yes/A) or 0 (No/B).
NATURALBENCH_PATTERN: tuple[tuple[int, int], tuple[int, int]] = ((1, 0), (0, 1))
NATURALBENCH_COLUMNS: tuple[str, ...] = (
    "Index", "Image_0", "Image_1", "Question_0", "Image_0_Question_0", "Image_1_Question_0", "Question_1",
    "Image_0_Question_1", "Image_1_Question_1", "Question Type", "Source",
)
_TYPE_COLUMNS = ("Question Type", "Question_Type")
#: Shards of the release (``data/train-0000{0,1,2}-of-00003.parquet``).
NATURALBENCH_SHARDS = 3


def _shards(data_dir: str | os.PathLike[str]) -> list[Path]:
    root = Path(data_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"data_dir: no such directory {str(root)!r}")
    for cand in (root / "data", root):
        found = sorted(cand.glob("train-*.parquet"))
        if found:
            return found
    raise InputError(
        f"data_dir: {str(root)!r} holds no NaturalBench parquet shards (data/train-*-of-*.parquet, as the "
        "dataset BaiqiL/NaturalBench is distributed); is it another benchmark's folder?"
    )


def _rows(path: Path, images: bool = True) -> list[dict[str, Any]]:
    """The rows of a shard (without the image columns unless ``images``), its columns checked first."""
    import pyarrow.parquet as pq

    try:
        names = set(pq.read_schema(path).names)
    except Exception as exc:  # pyarrow raises several types for a file that is not parquet
        raise InputError(f"data_dir: {path.name} is not a readable parquet file ({exc})") from None
    for column in NATURALBENCH_COLUMNS:
        if column == "Question Type":
            if not names & set(_TYPE_COLUMNS):
                raise InputError(f"data_dir: {path.name}: field 'Question Type' is missing (no such column)")
        elif column not in names:
            raise InputError(f"data_dir: {path.name}: field {column!r} is missing (no such column)")
    columns = [c for c in pq.read_schema(path).names if images or c not in ("Image_0", "Image_1")]
    return pq.read_table(path, columns=columns).to_pylist()


def _image_bytes(row: dict[str, Any], column: str, where: str) -> bytes:
    cell = row.get(column)
    data = cell.get("bytes") if isinstance(cell, dict) else cell
    if not isinstance(data, bytes) or not data:
        raise InputError(f"data_dir: {where}: field {column!r} must be an image (embedded bytes), got none")
    return data


def _record(row: dict[str, Any], where: str) -> dict[str, Any]:
    """The checked fields of one row (images left as they are)."""
    index = row.get("Index")
    if isinstance(index, bool) or not isinstance(index, int):
        raise InputError(f"data_dir: {where}: field 'Index' must be an integer")
    qtype = row.get("Question Type", row.get("Question_Type"))
    if qtype not in NATURALBENCH_SUBSETS:
        raise InputError(f"data_dir: {where}: field 'Question Type' must be one of {', '.join(NATURALBENCH_SUBSETS)}, "
                         f"got {qtype!r}")
    out: dict[str, Any] = {"index": index, "type": qtype}
    for name in ("Question_0", "Question_1", "Source"):
        if not isinstance(row.get(name), str) or not row[name].strip():
            raise InputError(f"data_dir: {where}: field {name!r} must be a non-empty string")
    answers = []
    for q in (0, 1):
        per_image = []
        for i in (0, 1):
            name = f"Image_{i}_Question_{q}"
            value = row.get(name)
            options = NATURALBENCH_ANSWERS[qtype]
            if not isinstance(value, str) or value.strip().lower() not in (o.lower() for o in options):
                raise InputError(f"data_dir: {where}: field {name!r} must be {options[0]!r} or {options[1]!r}, "
                                 f"got {value!r}")
            per_image.append(1 if value.strip().lower() == options[0].lower() else 0)
        answers.append(tuple(per_image))
    out.update(questions=(row["Question_0"], row["Question_1"]), source=row["Source"], answers=tuple(answers))
    return out


def _sniff_suffix(data: bytes) -> str:
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return ".png"
    if data[:3] == b"\xff\xd8\xff":
        return ".jpg"
    return ".img"  # decoded by content; a file that is no image fails when a model reads it, naming it


def _unpack(shards: list[Path], key: str) -> Path:
    """The folder of the shards' images (``<Index>_<j><suffix>``), unpacked once into vlprobe's cache."""
    target = cache_dir() / "naturalbench" / key
    if (target / "DONE").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".naturalbench-", dir=target.parent))
    try:
        for shard in shards:
            for n, row in enumerate(_rows(shard)):
                where = f"{shard.name} row {n}"
                index = _record(row, where)["index"]
                for j in (0, 1):
                    data = _image_bytes(row, f"Image_{j}", where)
                    (tmp / f"{index}_{j}{_sniff_suffix(data)}").write_bytes(data)
        (tmp / "DONE").write_text("".join(f"{s.name}\n" for s in shards), encoding="utf-8")
        if (target / "DONE").is_file():  # another process finished the same unpack meanwhile
            return target
        if target.exists():  # an unfinished earlier unpack (no DONE): vlprobe's own cache folder
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return target


def load_naturalbench(
    data_dir: str | os.PathLike[str],
    *,
    subsets: str | Sequence[str] | None = None,
    limit: int | None = None,
) -> Dataset:
    """Load NaturalBench from its parquet shards (see the module docstring).

    Parameters
    ----------
    data_dir : path
        The dataset folder (holding ``data/train-*.parquet``) or the shards' folder.
    subsets : str or sequence of str, optional
        Question types to load (``yes_no``, ``multiple_choice``); default both.
    limit : int, optional
        Keep only the first ``limit`` samples of each question type (file order).

    Returns
    -------
    Dataset
        ``fingerprint`` covers the shards (images included: they are embedded).
    """
    if limit is not None:
        check_positive_int(limit, "limit")
    shards = _shards(data_dir)
    chosen = set(parse_subsets(subsets if subsets is None or isinstance(subsets, str) else list(subsets),
                               NATURALBENCH_SUBSETS))
    h = hashlib.sha256()
    for shard in shards:
        h.update(f"{shard.name}:{sha256_file(shard)}\n".encode())
    fingerprint = h.hexdigest()
    folder = _unpack(shards, fingerprint[:16])  # every image read and checked, once per set of shards
    files = {Path(name).stem: folder / name for name in os.listdir(folder)}
    records: list[tuple[dict[str, Any], list[Path]]] = []
    seen: dict[int, str] = {}
    for shard in shards:
        for n, row in enumerate(_rows(shard, images=False)):
            where = f"{shard.name} row {n}"
            rec = _record(row, where)
            if rec["index"] in seen:
                raise InputError(f"data_dir: {where}: field 'Index' repeats {rec['index']} (first in {seen[rec['index']]})")
            seen[rec["index"]] = where
            found = [files.get(f"{rec['index']}_{j}") for j in (0, 1)]
            pair = [p for p in found if p is not None]
            if len(pair) != 2:  # the cache folder was changed by hand since it was unpacked
                raise FileNotFoundError(f"data_dir: the image of {where} is missing from {folder}; delete that folder "
                                        "to unpack the shards again")
            records.append((rec, pair))
    items: list[Item] = []
    taken: dict[str, int] = {}
    for rec, paths in records:
        subset = rec["type"]
        if subset not in chosen or (limit is not None and taken.get(subset, 0) >= limit):
            continue
        taken[subset] = taken.get(subset, 0) + 1
        items.append(_item(rec, paths))
    source = f"{Path(data_dir).resolve()} ({', '.join(s.name for s in shards)}" + (
        f"; limit {limit} per question type" if limit else "") + f"; images unpacked in {folder})"
    return Dataset("naturalbench", tuple(items), fingerprint, source)


def _item(rec: dict[str, Any], paths: list[Path]) -> Item:
    subset, index = rec["type"], rec["index"]
    item_id = f"naturalbench/{subset}/{index}"
    images = tuple(ImageRef(f"{item_id}/i{j}", f"{index}_{j}", paths[j]) for j in (0, 1))
    texts = []
    for q, question in enumerate(rec["questions"]):
        prompt = question + NATURALBENCH_SUFFIX[subset]
        for a, answer in enumerate(NATURALBENCH_ANSWERS[subset]):
            texts.append(TextRef(f"{item_id}/c{2 * q + a}", f"{prompt} {answer}"))
    return Item(item_id, images, tuple(texts), {"subset": (subset,), "source": (rec["source"],)},
                {"subset": subset, "key": str(index), "questions": rec["questions"], "answers": rec["answers"]})


def naturalbench_report(
    data_dir: str | os.PathLike[str], image_root: Sequence[str] | None = None,
) -> list[SubsetReport]:
    """Validate and count NaturalBench's shards (``probe data info naturalbench``): samples per
    question type, images, malformed rows, and samples whose answers are not the pattern the
    authors' scoring assumes."""
    if image_root:
        raise InputError("image_root: NaturalBench's images are embedded in its parquet shards")
    shards = _shards(data_dir)
    reports = {s: SubsetReport(s) for s in NATURALBENCH_SUBSETS}
    h = hashlib.sha256()
    bad = 0
    for shard in shards:
        h.update(f"{shard.name}:{sha256_file(shard)}\n".encode())
        for n, row in enumerate(_rows(shard)):
            where = f"{shard.name} row {n}"
            try:
                rec = _record(row, where)
                for j in (0, 1):
                    _image_bytes(row, f"Image_{j}", where)
            except InputError:
                bad += 1
                continue
            rep = reports[rec["type"]]
            rep.items += 1
            rep.kept += 1
            rep.images += 2
            item_id = f"naturalbench/{rec['type']}/{rec['index']}"
            rep.first_id = rep.first_id or item_id
            rep.last_id = item_id
            if rec["answers"] != NATURALBENCH_PATTERN:
                rep.add("answers off the scored pattern (q0: Yes/A on i0, No/B on i1; q1 the reverse)")
    for rep in reports.values():
        rep.sha256 = h.hexdigest()
    if bad:
        reports[NATURALBENCH_SUBSETS[0]].add("malformed row (any question type)", bad)
    return list(reports.values())
