"""Images to the detector's input: colour order, resize, pixel normalisation, batch canvas.

* Colour: PIL images are converted to RGB, then handed to the model in the preset's channel
  order (``bgr`` flips them; the Caffe model was trained on BGR).
* Resize (as the reference): the shorter side to ``input.min_size_test``, unless the longer
  side would exceed ``input.max_size_test``, which then sets the scale; sizes rounded with
  ``int(x + 0.5)``; bilinear interpolation of the 0-255 values (``align_corners=False``, no
  antialiasing, like OpenCV's ``INTER_LINEAR`` of the Caffe extractor).
* Normalisation: ``(x - model.pixel_mean) / model.pixel_std`` per channel, in the model's order.
* Batch: the images top-left on a zero canvas (rounded up to ``size_divisibility``); each
  image's own size travels with it, so nothing downstream sees the padding.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from .config import DetectorConfig
from .errors import DetectorInputError, ImageTooSmallError

__all__ = ["Prepared", "prepare_images", "resized_size"]


@dataclass
class Prepared:
    """A batch ready for the backbone."""

    images: Tensor  # (B, 3, H, W) normalised, zero beyond each image
    sizes: Tensor  # (B, 2) int64 resized (h, w)
    original: list[tuple[int, int]]  # (h, w) of each input image
    padded: bool  # some image is smaller than the canvas

    def scales(self) -> Tensor:
        """``(B, 2)`` original / resized ``(y, x)`` factors."""
        orig = torch.tensor(self.original, dtype=torch.float32)
        return orig / self.sizes.float().cpu()


def resized_size(h: int, w: int, min_size: int, max_size: int) -> tuple[int, int]:
    """``(h, w)`` after the shortest-edge resize."""
    scale = min_size / min(h, w)
    nh, nw = (min_size, scale * w) if h < w else (scale * h, min_size)
    if max(nh, nw) > max_size:
        s = max_size / max(nh, nw)
        nh, nw = nh * s, nw * s
    return int(nh + 0.5), int(nw + 0.5)


def _pixels(image: object, index: int) -> np.ndarray:
    from PIL import Image

    if not isinstance(image, Image.Image):
        raise DetectorInputError(f"images[{index}]: expected a PIL image, got {type(image).__name__}")
    if image.width < 1 or image.height < 1:
        raise ImageTooSmallError(index, f"the image is {image.width}x{image.height} pixels")
    rgb = image if image.mode == "RGB" else image.convert("RGB")
    return np.asarray(rgb, dtype=np.uint8)


def prepare_images(
    images: Sequence[object],
    cfg: DetectorConfig,
    channel_order: str,
    device: torch.device,
    dtype: torch.dtype,
    feature_sizes: Callable[[Tensor], Tensor],
) -> Prepared:
    """Resize, normalise and batch ``images``; ``feature_sizes`` maps ``(B, 2)`` input sizes to the
    backbone's output sizes (an image whose map would be empty is refused, naming it)."""
    if len(images) == 0:
        raise DetectorInputError("images: expected at least one image, got an empty sequence")
    mean = torch.tensor(cfg.pixel_mean, dtype=torch.float32, device=device).view(3, 1, 1)
    std = torch.tensor(cfg.pixel_std, dtype=torch.float32, device=device).view(3, 1, 1)
    tensors, sizes, original = [], [], []
    for i, image in enumerate(images):
        arr = _pixels(image, i)
        h, w = arr.shape[:2]
        nh, nw = resized_size(h, w, cfg.min_size, cfg.max_size)
        if nh < 1 or nw < 1:
            raise ImageTooSmallError(i, f"a {w}x{h} image resizes to {nw}x{nh} pixels")
        fh, fw = feature_sizes(torch.tensor([[nh, nw]])).tolist()[0]
        if fh < 1 or fw < 1:
            raise ImageTooSmallError(
                i, f"a {w}x{h} image resizes to {nw}x{nh} pixels, too small for the backbone (no feature map left)"
            )
        x = torch.from_numpy(arr.copy()).to(device).permute(2, 0, 1).float()
        if channel_order == "bgr":
            x = x.flip(0)
        x = F.interpolate(x[None], size=(nh, nw), mode="bilinear", align_corners=False)[0]
        tensors.append((x - mean) / std)
        sizes.append((nh, nw))
        original.append((h, w))
    ch = max(s[0] for s in sizes)
    cw = max(s[1] for s in sizes)
    if cfg.size_divisibility > 0:
        d = cfg.size_divisibility
        ch, cw = -(-ch // d) * d, -(-cw // d) * d
    canvas = torch.zeros((len(tensors), 3, ch, cw), dtype=dtype, device=device)
    for i, x in enumerate(tensors):
        canvas[i, :, : x.shape[1], : x.shape[2]] = x.to(dtype)
    size_t = torch.tensor(sizes, dtype=torch.int64, device=device)
    padded = any(s != (ch, cw) for s in sizes)
    return Prepared(canvas, size_t, original, padded)
