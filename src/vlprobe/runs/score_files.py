"""Per-item score files: vlprobe's own format, numpy matrices, and readers for each benchmark.

vlprobe's per-item score file (``OUT/<experiment>/<model>.scores.jsonl``, written by every run)
is JSON Lines, one line per scored image-text pair::

    {"item": "sugarcrepe/swap_obj/12", "image": "sugarcrepe/swap_obj/12/i0",
     "text": "sugarcrepe/swap_obj/12/c1", "score": 0.3125}

``item``, ``image`` and ``text`` are the namespaced ids of :mod:`vlprobe.data.items`; ``score``
is a float (higher = better match; its kind, e.g. cosine or P(match), is in the run's manifest).
A model whose score is the softmax of a binary matching head (LXMERT, UNITER's ITM head) also
writes the head's raw logits on every line, ``"logits": [no_match, match]`` (VALSE's own code
compares those); a file has them on every line or on none.
Text ``<item>/c0`` is the item's correct caption (SugarCrepe positive, VALSE caption) and
``<item>/c1`` the wrong one (negative, foil); Winoground items have four lines
(``c0``/``c1`` x ``i0``/``i1``). A text-only model still names the item's image. Each
(image, text) pair appears once; every metric can be recomputed from the file alone.

A shard of a run (``probe eval ... --shard K/N``) writes the lines of its block of items to
``<run>.shard-K-of-N.scores.jsonl`` after one first line ``{"vlprobe_shard": {...}}``, the
shard's record (:data:`SHARD_KEY`: its shard, block of items, the run it is part of, the
scorer's fingerprints, the launcher's job ids), which ``--merge-shards`` reads
(:func:`read_shard_scores`); :func:`read_item_scores` refuses such a file, whose metrics would be
those of part of the items.

Score matrices (``.npy``, or ``.npz`` holding one array or an array named ``scores``) are
caption x image in the canonical order: row ``r`` = caption r, column ``c`` = image c, and
caption r matches image r (Winoground: item i gives rows and columns 2i, 2i+1).
"""

from __future__ import annotations

import json
import math
import os
import zipfile
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vlprobe.data.source_files import iter_json_lines
from vlprobe.io.atomic import atomic_write
from vlprobe.io.text import text_lines
from vlprobe.runs.writing import RESULTS_KIND
from vlprobe.validation import InputError, check_file

__all__ = [
    "SHARD_KEY",
    "ItemScores",
    "caption_foil_logits",
    "caption_foil_scores",
    "is_item_scores_file",
    "item_score_matrices",
    "read_item_scores",
    "read_score_matrix",
    "read_shard_scores",
    "winoground_from_item_scores",
    "winoground_from_matrix",
    "write_item_scores",
]

_KEYS = ("item", "image", "text", "score")
#: The key of a shard file's first line, its record.
SHARD_KEY = "vlprobe_shard"


@dataclass(frozen=True)
class ItemScores:
    """The lines of a per-item score file, as parallel arrays of length P (pairs)."""

    item: np.ndarray
    image: np.ndarray
    text: np.ndarray
    score: np.ndarray
    source: str = ""
    #: (P, 2) raw (no match, match) logits of a binary matching head, or None.
    logits: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.score)


def write_item_scores(
    path: str | os.PathLike[str],
    items: Sequence[str], images: Sequence[str], texts: Sequence[str], scores: Iterable[float],
    logits: np.ndarray | None = None, *, shard: Mapping[str, Any] | None = None,
) -> Path:
    """Write a per-item score file atomically (see the module docstring).

    Parameters
    ----------
    items, images, texts : sequence of str, length P
    scores : iterable of float, length P
    logits : ndarray, shape (P, 2), optional
        Raw (no match, match) logits of a binary matching head.
    shard : mapping, optional
        A shard's record (JSON values): written as the first line, ``{"vlprobe_shard": shard}``.
    """
    values = np.asarray(list(scores), dtype=np.float64)
    if not len(items) == len(images) == len(texts) == len(values):
        raise InputError(
            f"scores: items, images, texts and scores must have one length, got "
            f"{len(items)}, {len(images)}, {len(texts)}, {len(values)}"
        )
    pairs = None if logits is None else np.asarray(logits, dtype=np.float64)
    if pairs is not None and pairs.shape != (len(values), 2):
        raise InputError(f"logits must have shape ({len(values)}, 2), got {pairs.shape}")
    target = Path(path)
    with atomic_write(target, kind=RESULTS_KIND) as fh:
        if shard is not None:
            fh.write(json.dumps({SHARD_KEY: dict(shard)}, allow_nan=False) + "\n")
        for p, (it, im, tx, sc) in enumerate(zip(items, images, texts, values.tolist(), strict=True)):
            record: dict[str, object] = {"item": it, "image": im, "text": tx, "score": sc}
            if pairs is not None:
                record["logits"] = pairs[p].tolist()
            fh.write(json.dumps(record, allow_nan=False) + "\n")
    return target


def is_item_scores_file(path: str | os.PathLike[str]) -> bool:
    """True when the first non-blank line of ``path`` is a vlprobe per-item score record."""
    for _, line in text_lines(path, "scores"):
        if line.strip():
            try:
                obj = json.loads(line)
            except ValueError:
                return False
            return isinstance(obj, dict) and "item" in obj and "label" not in obj
    return False


def read_item_scores(path: str | os.PathLike[str], *, param: str = "scores") -> ItemScores:
    """Read and validate a per-item score file.

    Raises
    ------
    InputError
        A line is not a record with item, image, text and a finite score; a pair repeats; the
        file is one shard's (module docstring).
    """
    shard, scores = _read_scores(path, param)
    if shard is not None:
        which = shard.get("shard", "?") if isinstance(shard, dict) else "?"
        raise InputError(
            f"{param}: {Path(path).name} holds shard {which} of a run's scores, not the whole run's; merge the "
            "shards first (the run's probe eval command with --merge-shards instead of --shard)"
        )
    if not len(scores):
        raise InputError(f"{param}: {Path(path).name} holds no scores")
    return scores


def read_shard_scores(path: str | os.PathLike[str], *, param: str = "shards") -> tuple[dict[str, Any], ItemScores]:
    """A shard file's record (its first line's :data:`SHARD_KEY`) and its scores (none when the
    shard's block of items is empty).

    Raises
    ------
    InputError
        The file is no shard file, or a line is not a score record (as :func:`read_item_scores`).
    """
    shard, scores = _read_scores(path, param)
    if not isinstance(shard, dict):
        raise InputError(f"{param}: {Path(path).name} is no shard of a probe eval run (its first line is no "
                         f'{{"{SHARD_KEY}": ...}} record)')
    return shard, scores


def _read_scores(path: str | os.PathLike[str], param: str) -> tuple[Any, ItemScores]:
    """The shard record of the first line (None when there is none) and the score records."""
    p = check_file(path, param)
    cols: dict[str, list[object]] = {k: [] for k in _KEYS}
    logits: list[list[float]] = []
    seen: dict[tuple[str, str], int] = {}
    shard: Any = None
    for n, (lineno, where, obj) in enumerate(iter_json_lines(p, param)):
        if n == 0 and isinstance(obj, dict) and SHARD_KEY in obj:
            shard = obj[SHARD_KEY]
            continue
        if not isinstance(obj, dict) or any(k not in obj for k in _KEYS):
            raise InputError(
                f"{param}: {where} is not a vlprobe score record "
                '({"item": ..., "image": ..., "text": ..., "score": x})'
            )
        score = obj["score"]
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
            raise InputError(f"{param}: {where} has score {score!r}, expected a finite number")
        key = (str(obj["image"]), str(obj["text"]))
        if key in seen:
            raise InputError(
                f"{param}: {where} repeats the pair image {key[0]!r}, text {key[1]!r} (first on line {seen[key]})"
            )
        seen[key] = lineno
        earlier = len(cols["score"])
        if earlier and ("logits" in obj) != (len(logits) == earlier):
            raise InputError(f"{param}: {where} {'has' if 'logits' in obj else 'lacks'} logits; "
                             "a file has them on every line or on none")
        if "logits" in obj:
            pair = obj["logits"]
            if (not isinstance(pair, list) or len(pair) != 2
                    or any(isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) for v in pair)):
                raise InputError(f"{param}: {where} has logits {pair!r}, expected [no_match, match], two finite numbers")
            logits.append([float(v) for v in pair])
        for k in _KEYS:
            cols[k].append(obj[k] if k == "score" else str(obj[k]))
    return shard, ItemScores(
        np.asarray(cols["item"], dtype=object), np.asarray(cols["image"], dtype=object),
        np.asarray(cols["text"], dtype=object), np.asarray(cols["score"], dtype=np.float64), str(p),
        np.asarray(logits, dtype=np.float64) if logits else None,
    )


def caption_foil_scores(
    scores: ItemScores, *, param: str = "scores", items: Sequence[str] | None = None,
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Per item, the score of its correct caption (``c0``) and of its wrong one (``c1``).

    Parameters
    ----------
    scores : ItemScores
    items : sequence of str, optional
        Expected item ids, in the order wanted; each must have both scores and no other item may
        appear. Without it, the file's items in first-seen order.

    Returns
    -------
    ids : list of str
    positive, negative : ndarray, shape (N,)
    """
    found: dict[str, dict[str, float]] = {}
    for it, im, tx, sc in zip(scores.item, scores.image, scores.text, scores.score, strict=True):
        if tx not in (f"{it}/c0", f"{it}/c1") or im != f"{it}/i0":
            raise InputError(
                f"{param}: {Path(scores.source).name} pairs image {im!r} with text {tx!r} for item {it!r}; "
                f"expected image {it}/i0 with texts {it}/c0 (correct) and {it}/c1 (wrong)"
            )
        found.setdefault(it, {})[tx.rsplit("/", 1)[1]] = sc
    order = list(found) if items is None else list(items)
    if items is not None:
        wanted = set(order)  # once: a set per found item made this quadratic (7,702 VALSE items)
        extra = [i for i in found if i not in wanted]
        if extra:
            raise InputError(f"{param}: {len(extra)} item(s) are not in the dataset, e.g. {extra[0]!r}")
    pos, neg = np.empty(len(order)), np.empty(len(order))
    for n, it in enumerate(order):
        pair = found.get(it, {})
        for role, arr in (("c0", pos), ("c1", neg)):
            if role not in pair:
                raise InputError(f"{param}: missing the score of text {it}/{role} (item {it!r})")
            arr[n] = pair[role]
    return order, pos, neg


def caption_foil_logits(scores: ItemScores, ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray] | None:
    """Per item, the matching head's (no match, match) logits of its caption and of its foil.

    ``ids`` are the items :func:`caption_foil_scores` returned (it has checked them).

    Returns
    -------
    (caption, foil) : two ndarrays of shape (N, 2), or None when the file holds no logits
    """
    if scores.logits is None:
        return None
    row = {(str(it), str(tx)): p for p, (it, tx) in enumerate(zip(scores.item, scores.text, strict=True))}
    caption = scores.logits[[row[(i, f"{i}/c0")] for i in ids]]
    foil = scores.logits[[row[(i, f"{i}/c1")] for i in ids]]
    return caption, foil


def item_score_matrices(
    scores: ItemScores, items: Sequence[tuple[str, Sequence[str], Sequence[str]]], *, param: str = "scores",
) -> list[np.ndarray]:
    """Per item, the scores of its every text with its every image, from a per-item score file.

    Parameters
    ----------
    items : sequence of (item id, text ids, image ids)
        The dataset's items, in the order wanted.

    Returns
    -------
    list of ndarray, shape (texts, images) each
        ``m[k, j]`` = score of text k with image j.

    Raises
    ------
    InputError
        The file scores an item that is not listed, or lacks a pair of a listed item (naming it).
    """
    where: dict[tuple[str, str], float] = {}
    seen_items: set[str] = set()
    for it, im, tx, sc in zip(scores.item, scores.image, scores.text, scores.score, strict=True):
        where[(str(tx), str(im))] = float(sc)
        seen_items.add(str(it))
    wanted = {item_id for item_id, _, _ in items}
    extra = sorted(seen_items - wanted)
    if extra:
        raise InputError(f"{param}: {len(extra)} scored item(s) are not in the dataset, e.g. {extra[0]!r}")
    out = []
    for item_id, texts, images in items:
        m = np.empty((len(texts), len(images)))
        for k, tx in enumerate(texts):
            for j, im in enumerate(images):
                value = where.get((tx, im))
                if value is None:
                    raise InputError(f"{param}: missing the score of text {tx} with image {im} (item {item_id!r})")
                m[k, j] = value
        out.append(m)
    return out


def winoground_from_item_scores(scores: ItemScores, *, param: str = "scores") -> tuple[list[int], np.ndarray]:
    """Winoground's (N, 2, 2) scores from a per-item score file.

    Returns
    -------
    ids : list of int
        Winoground ids, ascending.
    s : ndarray, shape (N, 2, 2)
        ``s[n, k, j]`` = score of caption k with image j.
    """
    found: dict[int, dict[tuple[int, int], float]] = {}
    for it, im, tx, sc in zip(scores.item, scores.image, scores.text, scores.score, strict=True):
        try:
            prefix, wid = it.rsplit("/", 1)
            k, j = int(tx.rsplit("/c", 1)[1]), int(im.rsplit("/i", 1)[1])
            if prefix != "winoground" or not tx.startswith(it + "/c") or not im.startswith(it + "/i") or {k, j} - {0, 1}:
                raise ValueError
            found.setdefault(int(wid), {})[(k, j)] = sc
        except (ValueError, IndexError):
            raise InputError(
                f"{param}: {Path(scores.source).name} has item {it!r} / text {tx!r} / image {im!r}, "
                "expected winoground/<id> with texts .../c0|c1 and images .../i0|i1"
            ) from None
    ids = sorted(found)
    for wid in ids:
        if len(found[wid]) != 4:
            missing = sorted({(k, j) for k in (0, 1) for j in (0, 1)} - set(found[wid]))
            raise InputError(
                f"{param}: item winoground/{wid} lacks {len(missing)} of its 4 scores "
                f"(e.g. caption {missing[0][0]} with image {missing[0][1]})"
            )
    s = np.array([[[found[w][(k, j)] for j in (0, 1)] for k in (0, 1)] for w in ids])
    return ids, s


def read_score_matrix(
    path: str | os.PathLike[str], *, shape: tuple[int, int] | None = None, param: str = "scores",
) -> np.ndarray:
    """Read a caption x image score matrix from ``.npy`` or ``.npz``.

    Parameters
    ----------
    shape : (captions, images), optional
        Expected shape; without it the matrix must be square (caption r matches image r).

    Returns
    -------
    ndarray, shape (captions, images)
        Floating point (float32 kept as float32).
    """
    p = check_file(path, param)
    suffix = p.suffix.lower()
    try:
        if suffix == ".npy":
            m = np.load(p, allow_pickle=False)
        elif suffix == ".npz":
            with np.load(p, allow_pickle=False) as z:
                names = list(z.files)
                if "scores" in names:
                    m = z["scores"]
                elif len(names) == 1:
                    m = z[names[0]]
                else:
                    raise InputError(
                        f"{param}: {p.name} holds arrays {names}; name the score matrix 'scores' or keep one array"
                    )
        else:
            raise InputError(f"{param}: {p.name} is not a .npy or .npz matrix")
    except InputError:
        raise
    except (OSError, EOFError, ValueError, zipfile.BadZipFile, zlib.error) as exc:  # truncated: BadZipFile, ValueError
        raise InputError(f"{param}: cannot read {p.name} as a numpy array ({exc})") from None
    if m.dtype.kind not in "fiu":
        raise InputError(f"{param}: {p.name} has dtype {m.dtype}, expected numbers")
    if m.dtype.kind != "f":
        m = m.astype(np.float64)
    expected = shape if shape is not None else None
    if m.ndim != 2 or (expected is None and m.shape[0] != m.shape[1]) or (expected is not None and m.shape != tuple(expected)):
        want = f"{expected[0]} x {expected[1]}" if expected is not None else "square (caption r matches image r)"
        raise InputError(f"{param}: {p.name} has shape {m.shape}, expected a caption x image matrix, {want}")
    if np.isnan(m).any():
        raise InputError(f"{param}: {p.name} has missing entries (NaN)")
    return m


def winoground_from_matrix(matrix: np.ndarray, *, param: str = "scores") -> np.ndarray:
    """Winoground's (N, 2, 2) scores from a 2N x 2N caption x image matrix in canonical order.

    Returns
    -------
    ndarray, shape (N, 2, 2)
        ``s[n, k, j] = matrix[2n + k, 2n + j]``.
    """
    m = np.asarray(matrix)
    if m.ndim != 2 or m.shape[0] != m.shape[1] or m.shape[0] % 2:
        raise InputError(f"{param}: Winoground needs a 2N x 2N caption x image matrix, got shape {m.shape}")
    n = m.shape[0] // 2
    rows = 2 * np.arange(n)[:, None, None] + np.arange(2)[None, :, None]
    cols = 2 * np.arange(n)[:, None, None] + np.arange(2)[None, None, :]
    return m[rows, cols].astype(np.float64)
