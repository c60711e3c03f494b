"""The six "Why is Winoground Hard?" tags (Diwan et al. 2022), joined by Winoground id.

The tag file ``new_tag_assignments.json`` (MIT) is one JSON object: keys ``"0"``..``"399"``
(strings) -> list of tag strings spelled as below ("Non Minimal" is the paper's
NonCompositional). It is taken from ``--tags PATH``, from ``new_tag_assignments.json`` inside
the data directory, from vlprobe's cache, or downloaded once from the paper's repository at a
pinned commit and checked against its sha256.

Two "untagged" sets exist: the paper code's hard-coded ``None`` list of 171 ids, which leaves out
id 313 (:data:`WWH_CODE_NONE_EXCLUDED`), and the ids whose list is empty in the file (172 items).
The experiments report the first as ``wwh=NoTag`` (the paper's set, with its ``Easier`` and
``Harder``) and the second as ``wwh=NoTag-corrected``.
"""

from __future__ import annotations

import hashlib
import os
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vlprobe.data.source_files import read_json_object
from vlprobe.io.atomic import atomic_write
from vlprobe.provenance import sha256_file
from vlprobe.validation import InputError, check_file

__all__ = [
    "WWH_TAGS",
    "WWH_TAGS_SHA256",
    "WWH_TAGS_URL",
    "TagTable",
    "cache_dir",
    "fetch_wwh_tags",
    "load_tag_file",
    "wwh_masks",
]

WWH_COMMIT = "7069ff68709b493c7b32cdd7e3f5d65178cd9273"
WWH_TAGS_URL = (
    f"https://raw.githubusercontent.com/ajd12342/why-winoground-hard/{WWH_COMMIT}/"
    "new_tag_assignments.json"
)
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


def offline() -> bool:
    """True when the user asked for no network (``HF_HUB_OFFLINE`` or ``VLPROBE_OFFLINE``)."""
    return any(
        os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
        for v in ("HF_HUB_OFFLINE", "VLPROBE_OFFLINE")
    )


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


def fetch_wwh_tags(timeout: float = 30.0) -> Path:
    """Path of the pinned tag file in vlprobe's cache, downloading it once if needed.

    Raises
    ------
    InputError
        Offline, or the download failed or did not match the pinned sha256.
    """
    target = cache_dir() / "why-winoground-hard" / WWH_COMMIT / TAG_FILE_NAME
    if target.is_file() and sha256_file(target) == WWH_TAGS_SHA256:
        return target
    how = f"pass --tags PATH to a copy of {TAG_FILE_NAME} (from {WWH_TAGS_URL})"
    if offline():
        raise InputError(f"tags: offline (HF_HUB_OFFLINE/VLPROBE_OFFLINE set) and not cached; {how}")
    try:
        with urllib.request.urlopen(WWH_TAGS_URL, timeout=timeout) as resp:
            data = resp.read()
    except (urllib.error.URLError, OSError) as exc:
        raise InputError(f"tags: download failed ({exc}); {how}") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != WWH_TAGS_SHA256:
        raise InputError(f"tags: downloaded file has sha256 {digest}, expected {WWH_TAGS_SHA256}; {how}")
    with atomic_write(target, "wb") as fh:
        fh.write(data)
    return target
