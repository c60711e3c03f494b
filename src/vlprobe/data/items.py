"""The one item model every benchmark is loaded into.

An :class:`Item` holds images and texts plus tags. Ids are namespaced
(``winoground/17``, ``winoground/17/i0``, ``winoground/17/c1``,
``winoground/17/c1/v3``). A :class:`Dataset` is an ordered tuple of items with
a content fingerprint; its canonical image and text orders are the orders every
matrix and cache uses (Winoground: item i gives images 2i, 2i+1 and captions
2i, 2i+1; caption variants come after all originals).
"""

from __future__ import annotations

import contextlib
import io
import os
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image, ImageOps, UnidentifiedImageError

from vlprobe.progress import warn
from vlprobe.validation import InputError, check_choice

__all__ = ["IMAGE_ORIENTATIONS", "Dataset", "ImageRef", "Item", "TextRef", "decode_rgb", "oriented_size",
           "pillow_size_limits", "read_rgb"]

#: How an image file's EXIF ``Orientation`` tag (0x0112) is treated when it is decoded:
#: ``"stored"`` ignores it (the pixels as stored: ``PIL.Image.open(...).convert("RGB")``, what the
#: CLIP-style reference code and transformers' processors are fed); ``"exif"`` applies it
#: (``PIL.ImageOps.exif_transpose``, the same transposition as OpenCV's ``cv2.imread`` default, with
#: which the bottom-up-attention detector pipeline read its images).
IMAGE_ORIENTATIONS: tuple[str, ...] = ("stored", "exif")
#: The EXIF tag that holds the orientation (values 1-8; 5-8 swap width and height).
EXIF_ORIENTATION_TAG = 0x0112


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
    crop : (x, y, width, height) or None
        The part of the file the benchmark shows (ARO's VG-Relation and VG-Attribution, CREPE: a
        box around the objects named), in pixels of the decoded image; None for the whole image.
        :meth:`load` returns the crop, as ``PIL.Image.crop((x, y, x + width, y + height))`` (a
        box reaching past the border is padded with black, as PIL does; a box entirely outside the
        image, which would show nothing of it, is refused).
    """

    id: str
    name: str
    path: Path | None = None
    crop: tuple[float, float, float, float] | None = None

    def load(self, orientation: str = "stored", *, rgb: bool = True) -> Image.Image:
        """Open the image (decoded eagerly, file closed), cropped to :attr:`crop` when it has one;
        ``orientation`` as in :func:`decode_rgb`. ``rgb``: converted to RGB (PIL's
        ``convert("RGB")``); False: in the mode the file stores (RGBA, L, P, ...), for a model
        whose preprocessing converts where its reference code converts."""
        if self.path is None:
            raise InputError(f"image {self.id!r} has no file path; pixels are not available")
        img = read_rgb(self.path, orientation=orientation, rgb=rgb)
        if self.crop is None:
            return img
        x, y, w, h = self.crop
        if x >= img.width or y >= img.height or x + w <= 0 or y + h <= 0:
            raise InputError(f"images: {self.id}: the crop box (x {x:g}, y {y:g}, width {w:g}, height {h:g}) lies "
                             f"outside its image {self.path.name} ({img.width} x {img.height}): nothing of the "
                             "image would be seen (the box's record is wrong, or the image is another one)")
        return img.crop((x, y, x + w, y + h))


def read_rgb(path: str | os.PathLike[str], *, orientation: str = "stored", rgb: bool = True) -> Image.Image:
    """The image file ``path`` read and decoded eagerly as RGB (:func:`decode_rgb`; ``rgb=False``:
    in its stored mode).

    Raises
    ------
    InputError
        The file cannot be read, or is empty, truncated or not an image (the message names it).
    """
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise InputError(f"images: cannot read {str(path)!r} ({exc.strerror or exc})") from None
    return decode_rgb(data, path, orientation=orientation, rgb=rgb)


def decode_rgb(data: bytes, path: str | os.PathLike[str], *, orientation: str = "stored", rgb: bool = True) -> Image.Image:
    """The image file ``path`` (its bytes ``data``) decoded eagerly as RGB.

    Parameters
    ----------
    data : bytes
    path : path
        Named in errors only.
    orientation : {"stored", "exif"}
        ``"stored"``: the pixels as stored, the EXIF Orientation tag ignored; ``"exif"``: the tag
        applied (a photo with Orientation 6 comes out rotated 90 degrees clockwise, width and
        height swapped). See :data:`IMAGE_ORIENTATIONS`.
    rgb : bool
        False: the image in the mode the file stores it (RGBA, L, P, ...), not converted.

    Raises
    ------
    InputError
        The file is empty, truncated or not an image (the message names it).
    """
    check_choice(orientation, "orientation", IMAGE_ORIENTATIONS)
    if not data:
        raise InputError(f"images: {str(path)!r} is an empty file (0 bytes), not an image")
    try:
        with pillow_size_limits(path) as check_size, Image.open(io.BytesIO(data)) as opened:
            check_size(opened)
            opened.load()
            img: Image.Image = ImageOps.exif_transpose(opened) if orientation == "exif" else opened
            # convert() and copy() give an image that outlives the closed file
            return img.convert("RGB") if rgb else img.copy()
    except InputError:
        raise
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise InputError(f"images: {str(path)!r} is not a readable image ({exc})") from None


# Pillow's DecompressionBombWarning (a warnings block on stderr) is replaced by the one line of
# pillow_size_limits, which checks the size itself: catching the warning instead would take
# warnings.catch_warnings, which is not thread-safe, and images are decoded in a reader thread
# beside the model.
warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)


@contextlib.contextmanager
def pillow_size_limits(path: str | os.PathLike[str]) -> Iterator[Callable[[Image.Image], None]]:
    """Pillow's decompression-bomb limits for an image opened in the block, as vlprobe's lines.

    Yields a check to call on the opened image: one over ``PIL.Image.MAX_IMAGE_PIXELS`` is decoded
    all the same (as Pillow does) with one ``warning:`` line naming it. One over twice the limit
    (Pillow's ``DecompressionBombError`` in ``Image.open``) is refused with an :class:`InputError`.
    Thread-safe: no warnings filter is changed here.
    """
    def check(img: Image.Image) -> None:
        limit = Image.MAX_IMAGE_PIXELS
        pixels = img.width * img.height
        if limit and pixels > limit:
            warn(f"warning: images: {str(path)!r}: {pixels} pixels, over Pillow's limit of {int(limit)} "
                 "(PIL.Image.MAX_IMAGE_PIXELS). Decoded all the same (Pillow refuses only above twice its "
                 "limit).")

    try:
        yield check
    except Image.DecompressionBombError as exc:
        raise InputError(f"images: {str(path)!r}: {exc} Refused: Pillow decodes none above twice its limit "
                         "(PIL.Image.MAX_IMAGE_PIXELS).") from None


def oriented_size(img: Image.Image, orientation: str = "stored") -> tuple[int, int]:
    """``(width, height)`` of an opened image as :func:`decode_rgb` with ``orientation`` would
    return it, read from the header (nothing decoded): swapped for EXIF orientations 5-8 under
    ``"exif"``."""
    check_choice(orientation, "orientation", IMAGE_ORIENTATIONS)
    w, h = img.size
    if orientation == "exif" and _exif_orientation(img) in (5, 6, 7, 8):
        return h, w
    return w, h


def _exif_orientation(img: Image.Image) -> int:
    try:
        value = img.getexif().get(EXIF_ORIENTATION_TAG, 1)
        return int(value)
    except (OSError, SyntaxError, ValueError, TypeError):
        return 1


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
