"""Bag-of-words slices: items whose two captions hold the same multiset of words.

A caption's *bag of words* is the multiset of its lowercased ``[a-z0-9']+`` tokens
(punctuation and spacing ignored). When an item's two original captions have the same bag (a
Winoground word swap, SugarCrepe's swap subsets, a VALSE actant swap), a model that reads its
text as a bag of words cannot tell them apart: on that slice it is at chance by construction, so
every benchmark metric is reported on the slice (``bow=same``) and on its complement
(``bow=different``).

Counts in the pinned data: SugarCrepe 572 of its 7,511 pairs (swap_obj 164 of 245, swap_att
408 of 666, none in replace or add); the synthetic Winoground-format dataset: every item.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["BOW_FAMILY", "BOW_VALUES", "bag_of_words", "bow_masks", "bow_tag", "same_bag", "table_tags"]

#: The tag family the slices are reported under (``subset`` = ``bow=same`` / ``bow=different``).
BOW_FAMILY = "bow"
BOW_VALUES = ("same", "different")
_WORD = re.compile(r"[a-z0-9']+")


def bag_of_words(text: str) -> Counter[str]:
    """The multiset of a text's lowercased ``[a-z0-9']+`` tokens."""
    return Counter(_WORD.findall(text.lower()))


def same_bag(a: str, b: str) -> bool:
    """Whether two texts hold the same multiset of words."""
    return bag_of_words(a) == bag_of_words(b)


def bow_tag(captions: Sequence[str]) -> list[str]:
    """An item's ``bow`` tag from its original captions: ``["same"]`` when every caption has the
    first one's bag of words, else ``["different"]``; ``[]`` for fewer than two captions."""
    if len(captions) < 2:
        return []
    first = bag_of_words(captions[0])
    return ["same" if all(bag_of_words(c) == first for c in captions[1:]) else "different"]


def bow_masks(tags: Sequence[Mapping[str, Iterable[str]]]) -> dict[str, np.ndarray]:
    """Item masks ``bow=same`` and ``bow=different`` from items' ``bow`` tags (both present, possibly
    empty, when any item has the tag; none otherwise)."""
    if not any(BOW_FAMILY in t for t in tags):
        return {}
    return {f"{BOW_FAMILY}={v}": np.array([v in t.get(BOW_FAMILY, ()) for t in tags], dtype=bool)
            for v in BOW_VALUES}


def table_tags(items: Mapping[str, Any], texts: Mapping[str, Any]) -> list[dict[str, list[str]]]:
    """Items' tag families from a cache's ``items`` and ``texts`` tables, plus the ``bow`` tag of
    each item's original captions (variants, ``parent >= 0``, left out).

    Parameters
    ----------
    items : mapping
        ``tags``, shape (n_items,): JSON objects.
    texts : mapping
        ``item``, ``parent`` and ``text``, shape (n_texts,).
    """
    originals: list[list[str]] = [[] for _ in range(len(items["tags"]))]
    for i, parent, text in zip(texts["item"], texts["parent"], texts["text"], strict=True):
        if int(parent) < 0:
            originals[int(i)].append(str(text))
    return [{**json.loads(str(t)), BOW_FAMILY: bow_tag(c)} for t, c in zip(items["tags"], originals, strict=True)]
