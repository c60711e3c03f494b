"""The six "Why is Winoground Hard?" tags (Diwan et al. 2022), joined by Winoground id.

The tag file ``new_tag_assignments.json`` (MIT) is one JSON object: keys ``"0"``..``"399"``
(strings) -> list of tag strings spelled as below ("Non Minimal" is the paper's
NonCompositional). vlprobe ships it, unchanged, as package data (``vlprobe/data/why_winoground_hard/``,
with the MIT notice of the paper's repository beside it: :func:`shipped_tag_file`); ``--tags PATH``
or a ``new_tag_assignments.json`` inside the data directory takes its place.

Two "untagged" sets exist: the paper code's hard-coded ``None`` list of 171 ids, which leaves out
id 313 (:data:`WWH_CODE_NONE_EXCLUDED`), and the ids whose list is empty in the file (172 items).
The experiments report the first as ``wwh=NoTag`` (the paper's set, with its ``Easier`` and
``Harder``) and the second as ``wwh=NoTag-corrected``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from vlprobe.data.source_files import read_json_object
from vlprobe.provenance import sha256_file
from vlprobe.validation import InputError, check_file

__all__ = [
    "WWH_SOURCE",
    "WWH_TAGS",
    "WWH_TAGS_SHA256",
    "TagTable",
    "cache_dir",
    "load_tag_file",
    "missing_wwh_warning",
    "shipped_tag_file",
    "winoground_number",
    "wwh_masks",
]

WWH_COMMIT = "7069ff68709b493c7b32cdd7e3f5d65178cd9273"
#: Where the shipped tag file comes from (the file at this commit of the paper's repository).
WWH_SOURCE = f"github.com/ajd12342/why-winoground-hard@{WWH_COMMIT[:7]}"
WWH_TAGS_SHA256 = "8a635dac806bb63484dbe9b0763ee3df6525a2ffbbab6b9c0a77a0fc3c41fc86"
WWH_TAGS: tuple[str, ...] = (
    "Non Minimal",
    "Ambiguously Correct",
    "Visually Difficult",
    "Unusual Image",
    "Unusual Text",
    "Complex Reasoning",
)
#: Id untagged in the JSON but missing from the paper code's 171-id ``None`` list.
WWH_CODE_NONE_EXCLUDED: tuple[int, ...] = (313,)
TAG_FILE_NAME = "new_tag_assignments.json"


def winoground_number(item_id: str) -> int | None:
    """The Winoground id ``n`` of an item id ``winoground/<n>`` (what :func:`wwh_masks` and the
    tag file key by); None for any other id."""
    prefix, _, number = str(item_id).rpartition("/")
    return int(number) if prefix == "winoground" and number.isdecimal() else None


def wwh_masks(ids: Sequence[int], wwh: Sequence[Iterable[str]]) -> dict[str, np.ndarray]:
    """Item masks of the "Why is Winoground Hard?" subsets, as the experiments report them.

    ``wwh=<tag>`` per tag; the paper's sets as its code builds them: ``wwh=NoTag`` (its
    hard-coded 171-id list, the untagged ids less :data:`WWH_CODE_NONE_EXCLUDED`),
    ``wwh=Easier`` (NoTag plus Non Minimal) and ``wwh=Harder`` (the rest); and the corrected
    sets from the file itself: ``wwh=NoTag-corrected`` (every untagged id),
    ``wwh=Easier-corrected`` and ``wwh=Harder-corrected``.

    Parameters
    ----------
    ids : sequence of int, length n
        Winoground ids of the items (or of each case's item).
    wwh : sequence of iterables of str, length n
        Their tags (empty: untagged).

    Returns
    -------
    dict of str to bool ndarray, shape (n,)
    """
    tags = [set(w) for w in wwh]
    out = {f"wwh={tag}": np.array([tag in w for w in tags], dtype=bool) for tag in WWH_TAGS}
    notag = np.array([not w for w in tags], dtype=bool)
    code_none = notag & ~np.isin(np.asarray(ids, dtype=int), WWH_CODE_NONE_EXCLUDED)
    non_minimal = out["wwh=Non Minimal"]
    out["wwh=NoTag"] = code_none
    out["wwh=Easier"] = code_none | non_minimal
    out["wwh=Harder"] = ~out["wwh=Easier"]
    out["wwh=NoTag-corrected"] = notag
    out["wwh=Easier-corrected"] = notag | non_minimal
    out["wwh=Harder-corrected"] = ~out["wwh=Easier-corrected"]
    return out


@dataclass(frozen=True)
class TagTable:
    """Tags per Winoground id, with where they came from."""

    tags: dict[int, tuple[str, ...]]
    source: str
    sha256: str


def cache_dir() -> Path:
    """vlprobe's download cache: ``$VLPROBE_CACHE`` or ``~/.cache/vlprobe``."""
    root = os.environ.get("VLPROBE_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "vlprobe"


def load_tag_file(path: str | os.PathLike[str]) -> TagTable:
    """Read and validate a tag file (see the module docstring for the format)."""
    p = check_file(path, "tags")
    raw = read_json_object(p, "tags", "id -> list of tags")
    out: dict[int, tuple[str, ...]] = {}
    for key, value in raw.items():
        try:
            item_id = int(key)
        except ValueError:
            raise InputError(f"tags: key {key!r} in {p.name} is not a Winoground id") from None
        if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
            raise InputError(f"tags: value of id {key!r} in {p.name} must be a list of strings")
        unknown = sorted(set(value) - set(WWH_TAGS))
        if unknown:
            raise InputError(
                f"tags: id {key!r} in {p.name} has unknown tag {unknown[0]!r} "
                f"(expected one of {', '.join(WWH_TAGS)})"
            )
        out[item_id] = tuple(value)
    return TagTable(out, str(p), sha256_file(p))


def shipped_tag_file() -> Path:
    """The tag file vlprobe ships (package data), checked against its pinned sha256.

    Raises
    ------
    RuntimeError
        The installed copy is missing or altered (a broken installation, not an input error).
    """
    path = Path(str(resources.files("vlprobe.data") / "why_winoground_hard" / TAG_FILE_NAME))
    if not path.is_file() or sha256_file(path) != WWH_TAGS_SHA256:
        raise RuntimeError(f"vlprobe's shipped tag file {path} is missing or altered (expected sha256 "
                           f"{WWH_TAGS_SHA256}); reinstall vlprobe")
    return path


def missing_wwh_warning(dataset: str, item_tags: Sequence[Mapping[str, object]], source: str, how: str) -> str | None:
    """The warning a Winoground run prints when its items carry no "Why is Winoground Hard?"
    tags (so it writes no ``wwh=`` subsets); None when they do or the dataset is another.

    Parameters
    ----------
    dataset : str
        The run's dataset (only ``winoground`` has these tags).
    item_tags : sequence of mapping
        Tag families per item.
    source : str
        What the items came from (``"cache clip.h5"``), named in the line.
    how : str
        How to give the tags to this command (``"pass --tags FILE"``).
    """
    if dataset != "winoground" or any("wwh" in t for t in item_tags):
        return None
    return (f"warning: {source} carries no 'Why is Winoground Hard?' tags, so no wwh= subsets are written; "
            f"{how} (vlprobe ships the tag file: {shipped_tag_file()})")
