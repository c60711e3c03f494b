"""OpenCLIP's evaluation image transform in PIL and numpy (no torchvision).

OpenCLIP's ``image_transform(size, is_train=False)`` is torchvision's ``Resize(size,
interpolation=BICUBIC)``, ``CenterCrop(size)``, a conversion to RGB, ``ToTensor()`` and
``Normalize(mean, std)``. On a PIL image torchvision's ``Resize`` computes the output size
(shorter side = ``size``, longer side = ``int(size * long / short)``) and calls PIL's own
``Image.resize`` with that filter, and ``CenterCrop`` crops at ``int(round((h - size) / 2))``,
``int(round((w - size) / 2))``; :func:`preprocess` does the same with PIL directly, so the pixels
are the ones OpenCLIP computes from a PIL image, not an approximation (both run PIL's resampling
code). The conversion to RGB comes after the crop, where OpenCLIP's ``transform.py`` puts it
(``MaybeConvertMode`` after ``CenterCrop``; ``_convert_to_rgb`` in the open_clip 2.x that
SugarCrepe ran): the adapter receives each image in the mode its file stores
(``rgb_on_load = False``), so an RGBA image is resized with its alpha (PIL resizes RGBA with
premultiplied alpha, which changes the colour of edge pixels next to transparent ones) and a
palette image with nearest-neighbour (PIL's rule for mode P), then converted, as in OpenCLIP.
Measured beside open_clip 4.2.0.dev0's ``image_transform`` (torchvision's PIL code paths) on RGB,
RGBA, L, LA and P images of several sizes: equal pixels.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from PIL import Image

from vlprobe.extract.models.openclip.archs import PreprocessConfig

__all__ = ["center_crop", "preprocess", "resize_shorter_side"]

_FILTERS = {"bicubic": Image.Resampling.BICUBIC, "bilinear": Image.Resampling.BILINEAR}


def resize_shorter_side(image: Image.Image, size: int, interpolation: str = "bicubic") -> Image.Image:
    """Resize so that the shorter side is ``size``, the longer ``int(size * long / short)``
    (torchvision's rule for an int size); an image already that size is returned as is."""
    w, h = image.size
    short, long = (w, h) if w <= h else (h, w)
    new_short, new_long = size, int(size * long / short)
    new_w, new_h = (new_short, new_long) if w <= h else (new_long, new_short)
    if (new_w, new_h) == (w, h):
        return image
    return image.resize((new_w, new_h), _FILTERS[interpolation])


def center_crop(image: Image.Image, size: int) -> Image.Image:
    """The central ``size`` x ``size`` crop, its corner at ``int(round((side - size) / 2))``
    (Python's rounding, as torchvision's ``center_crop``); smaller images are padded with black
    around the centre first, as torchvision pads them."""
    w, h = image.size
    if w < size or h < size:
        padded = Image.new(image.mode, (max(w, size), max(h, size)))
        padded.paste(image, ((max(w, size) - w) // 2, (max(h, size) - h) // 2))
        image, (w, h) = padded, padded.size
    top = round((h - size) / 2.0)
    left = round((w - size) / 2.0)
    return image.crop((left, top, left + size, top + size))


def preprocess(images: Sequence[Any], cfg: PreprocessConfig) -> torch.Tensor:
    """OpenCLIP's evaluation transform of a batch of PIL images.

    Parameters
    ----------
    images : sequence of PIL.Image
    cfg : PreprocessConfig

    Returns
    -------
    Tensor of float32, shape (B, 3, size, size)
    """
    out = np.empty((len(images), 3, cfg.size, cfg.size), dtype=np.float32)
    mean = np.asarray(cfg.mean, dtype=np.float32)[:, None, None]
    std = np.asarray(cfg.std, dtype=np.float32)[:, None, None]
    for i, image in enumerate(images):
        if cfg.resize_mode == "squash":
            image = image.resize((cfg.size, cfg.size), _FILTERS[cfg.interpolation])
        else:
            image = center_crop(resize_shorter_side(image, cfg.size, cfg.interpolation), cfg.size)
        pixels = np.asarray(image.convert("RGB"), dtype=np.float32).transpose(2, 0, 1) / 255.0
        out[i] = (pixels - mean) / std
    return torch.from_numpy(out)
