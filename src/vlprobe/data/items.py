"""The one item model every benchmark is loaded into.

An :class:`Item` holds images and texts plus tags. Ids are namespaced
(``winoground/17``, ``winoground/17/i0``, ``winoground/17/c1``,
``winoground/17/c1/v3``). A :class:`Dataset` is an ordered tuple of items with
a content fingerprint; its canonical image and text orders are the orders every
matrix and cache uses (Winoground: item i gives images 2i, 2i+1 and captions
2i, 2i+1; caption variants come after all originals).
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image, UnidentifiedImageError

from vlprobe.validation import InputError

__all__ = ["Dataset", "ImageRef", "Item", "TextRef"]


@dataclass(frozen=True)
class ImageRef:
    """One image of an item.

    Attributes
    ----------
    id : str
        Namespaced id, e.g. ``winoground/17/i0``.
    name : str
        The benchmark's own image name (``ex_17_img_0``); region-feature files key on it.
    path : Path or None
        Image file on disk, if the pixels are available.
    """

    id: str
    name: str
    path: Path | None = None

    def load(self) -> Image.Image:
        """Open the image as RGB (decoded eagerly, file closed)."""
        if self.path is None:
            raise InputError(f"image {self.id!r} has no file path; pixels are not available")
        try:
            data = self.path.read_bytes()
        except OSError as exc:
            raise InputError(f"images: cannot read {str(self.path)!r} ({exc.strerror or exc})") from None
        return decode_rgb(data, self.path)


def decode_rgb(data: bytes, path: str | os.PathLike[str]) -> Image.Image:
    """The image file ``path`` (its bytes ``data``) decoded eagerly as RGB.

    Raises
    ------
    InputError
        The file is empty, truncated or not an image (the message names it).
    """
    if not data:
        raise InputError(f"images: {str(path)!r} is an empty file (0 bytes), not an image")
    try:
        with Image.open(io.BytesIO(data)) as img:
            img.load()
            return img.convert("RGB")
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        raise InputError(f"images: {str(path)!r} is not a readable image ({exc})") from None


@dataclass(frozen=True)
class TextRef:
    """One caption of an item, or a variant of one.

    Attributes
    ----------
    id : str
        ``winoground/17/c0`` for an original, ``winoground/17/c0/v3`` for its variant 3.
    text : str
        The caption text.
    parent : str or None
        Id of the original caption for a variant, else None.
    strategy : str or None
        Name of the augmentation strategy that made a variant, else None.
    """

    id: str
    text: str
    parent: str | None = None
    strategy: str | None = None

    @property
    def is_variant(self) -> bool:
        return self.parent is not None


@dataclass(frozen=True)
class Item:
    """One benchmark example: images, texts (text k matches image k where that applies), tags."""

    id: str
    images: tuple[ImageRef, ...]
    texts: tuple[TextRef, ...]
    tags: dict[str, tuple[str, ...]] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def captions(self) -> tuple[TextRef, ...]:
        """The original captions (no variants)."""
        return tuple(t for t in self.texts if not t.is_variant)

    @property
    def variants(self) -> tuple[TextRef, ...]:
        return tuple(t for t in self.texts if t.is_variant)


@dataclass(frozen=True)
class Dataset:
    """An ordered collection of items with provenance.

    Attributes
    ----------
    name : str
        Registry name (``winoground``).
    items : tuple[Item, ...]
    fingerprint : str
        sha256 over the dataset's content (captions, fields and image bytes).
    source : str
        Where it was loaded from (directory or hub id and revision).
    extra_fingerprints : dict[str, str]
        Fingerprints of side inputs (tags, variants file), recorded but not part of `fingerprint`.
    """

    name: str
    items: tuple[Item, ...]
    fingerprint: str
    source: str = ""
    extra_fingerprints: dict[str, str] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[Item]:
        return iter(self.items)

    def images(self) -> list[ImageRef]:
        """All images in canonical order."""
        return [img for item in self.items for img in item.images]

    def texts(self) -> list[TextRef]:
        """All texts in canonical order: every original caption first, then every variant."""
        originals = [t for item in self.items for t in item.captions]
        variants = [t for item in self.items for t in item.variants]
        return originals + variants

    def item(self, item_id: str) -> Item:
        for it in self.items:
            if it.id == item_id:
                return it
        raise InputError(f"item id {item_id!r} is not in dataset {self.name!r}")
