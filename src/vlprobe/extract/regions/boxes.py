"""Image ids and boxes: the one place where region boxes change form.

Inside vlprobe a box is normalised ``x1, y1, x2, y2`` (pixels divided by the image width and
height). Conversions: pixel <-> normalised (:func:`normalise_boxes`, :func:`pixel_boxes`), 4-d <->
6-d UNITER ``norm_bb`` (:func:`boxes_to_6d`, :func:`boxes_to_4d`) and 7-d UNITER pos7
(:func:`boxes_to_7d`). :func:`check_normalised_boxes` clips coordinates within
:data:`BOX_TOLERANCE` of [0, 1] and refuses the rest. :func:`normalise_image_id` turns file names
and ids into region-store keys.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePosixPath, PureWindowsPath
from typing import Any

import numpy as np

from vlprobe.validation import InputError

__all__ = [
    "BOX_TOLERANCE",
    "IMAGE_SUFFIXES",
    "boxes_to_4d",
    "boxes_to_6d",
    "boxes_to_7d",
    "check_normalised_boxes",
    "normalise_boxes",
    "normalise_image_id",
    "pixel_boxes",
]

BOX_TOLERANCE = 0.01
#: Image file extensions (lower case): dropped from ids, and what an image folder is scanned for.
IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp", ".tif", ".tiff"})
_ID_SUFFIXES = IMAGE_SUFFIXES | {".npz", ".npy"}




def normalise_image_id(image_id: object) -> str:
    """Image id as a store key: no directory part, no image/feature file extension.

    ``"images/ex_3_img_1.png"`` -> ``"ex_3_img_1"``; ``42`` -> ``"42"``; ``b"a.jpg"`` -> ``"a"``.
    """
    s = image_id.decode("utf-8") if isinstance(image_id, bytes) else str(image_id)
    s = s.strip()
    name = PureWindowsPath(s).name if "\\" in s else PurePosixPath(s).name
    stem, dot, ext = name.rpartition(".")
    if dot and stem and ("." + ext.lower()) in _ID_SUFFIXES:
        name = stem
    if not name:
        raise InputError(f"image_id: expected a non-empty image name, got {image_id!r}")
    return name


def _as_boxes(boxes: Any, width: int | Sequence[int], name: str = "boxes") -> np.ndarray:
    arr = np.asarray(boxes, dtype=np.float64)
    widths = (width,) if isinstance(width, int) else tuple(width)
    if arr.ndim < 1 or arr.shape[-1] not in widths:
        want = " or ".join(str(w) for w in widths)
        raise InputError(f"{name}: expected shape (..., {want}), got {arr.shape}")
    return arr


def boxes_to_4d(boxes: Any) -> np.ndarray:
    """``(x1, y1, x2, y2)`` from 4-, 6- or 7-d boxes (the first four columns), float32 (..., 4)."""
    return _as_boxes(boxes, (4, 6, 7))[..., :4].astype(np.float32)


def boxes_to_6d(boxes: Any) -> np.ndarray:
    """UNITER ``norm_bb``: ``(x1, y1, x2, y2, w, h)`` from normalised xyxy (..., 4|6|7) -> (..., 6)."""
    b = _as_boxes(boxes, (4, 6, 7))[..., :4]
    wh = b[..., 2:4] - b[..., 0:2]
    return np.concatenate([b, wh], axis=-1).astype(np.float32)


def boxes_to_7d(boxes: Any) -> np.ndarray:
    """UNITER pos7: ``(x1, y1, x2, y2, w, h, w*h)`` from normalised xyxy (..., 4|6|7) -> (..., 7).

    Zero (padded) boxes map to zeros.
    """
    b6 = boxes_to_6d(boxes).astype(np.float64)
    return np.concatenate([b6, b6[..., 4:5] * b6[..., 5:6]], axis=-1).astype(np.float32)


def normalise_boxes(
    boxes_px: Any, image_w: Any, image_h: Any, *, tolerance: float = BOX_TOLERANCE, name: str = "boxes"
) -> np.ndarray:
    """Pixel ``x1, y1, x2, y2`` (..., 4) -> normalised (..., 4) float32, validated.

    ``image_w``/``image_h`` broadcast against the leading dimensions (a scalar, or one per image
    with a trailing box axis: shape (N, 1)). See :func:`check_normalised_boxes` for the rules.
    """
    b = _as_boxes(boxes_px, 4, name)
    w = np.asarray(image_w, dtype=np.float64)
    h = np.asarray(image_h, dtype=np.float64)
    if np.any(w <= 0) or np.any(h <= 0):
        raise InputError(f"{name}: image width and height must be positive, got w={w.min()}, h={h.min()}")
    scale = np.stack(np.broadcast_arrays(w, h, w, h), axis=-1)
    return check_normalised_boxes(b / scale, tolerance=tolerance, name=name)


def pixel_boxes(boxes: Any, image_w: Any, image_h: Any) -> np.ndarray:
    """Normalised ``x1, y1, x2, y2`` (..., 4) -> pixel coordinates (..., 4) float32."""
    b = _as_boxes(boxes, 4)
    w = np.asarray(image_w, dtype=np.float64)
    h = np.asarray(image_h, dtype=np.float64)
    scale = np.stack(np.broadcast_arrays(w, h, w, h), axis=-1)
    return (b * scale).astype(np.float32)


def check_normalised_boxes(boxes: Any, *, tolerance: float = BOX_TOLERANCE, name: str = "boxes") -> np.ndarray:
    """Validate normalised xyxy boxes (..., 4); clip values within ``tolerance`` of [0, 1].

    Raises InputError for NaN/inf, a coordinate further than ``tolerance`` outside [0, 1] (the usual
    sign of pixel boxes, or of width and height swapped), or ``x2 < x1`` / ``y2 < y1``.
    """
    b = _as_boxes(boxes, 4, name)
    if not np.all(np.isfinite(b)):
        raise InputError(f"{name}: contains NaN or inf")
    lo, hi = float(b.min(initial=0.0)), float(b.max(initial=0.0))
    if lo < -tolerance or hi > 1 + tolerance:
        raise InputError(
            f"{name}: normalised coordinates must lie in [0, 1] (tolerance {tolerance}), got range "
            f"[{lo:.4g}, {hi:.4g}] (pixel boxes, or image width and height swapped?)"
        )
    b = np.clip(b, 0.0, 1.0)
    if np.any(b[..., 2] < b[..., 0]) or np.any(b[..., 3] < b[..., 1]):
        raise InputError(f"{name}: expected x1 <= x2 and y1 <= y2 in every box")
    return b.astype(np.float32)
