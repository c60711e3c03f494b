"""RPN anchors: the cell anchors of one feature-map position, tiled over the map.

A cell anchor of size ``s`` and aspect ratio ``a`` (height / width) has width ``sqrt(s^2 / a)``
and height ``a * width``, centred on the origin; anchors are ordered size-major, then by ratio.
Tiled over an ``H x W`` map of stride ``t``, the anchors of position ``(y, x)`` are shifted by
``((x + offset) * t, (y + offset) * t)`` and flattened as ``(y, x, anchor)``, the order of the
RPN head's ``(A, H, W)`` outputs permuted to ``(H, W, A)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["cell_anchors", "grid_anchors"]


def cell_anchors(sizes: Sequence[float], aspect_ratios: Sequence[float]) -> Tensor:
    """``(len(sizes) * len(aspect_ratios), 4)`` float32 anchors ``x1, y1, x2, y2`` around 0."""
    rows = []
    for size in sizes:
        area = float(size) ** 2
        for ratio in aspect_ratios:
            w = math.sqrt(area / float(ratio))
            h = float(ratio) * w
            rows.append([-w / 2, -h / 2, w / 2, h / 2])
    return torch.tensor(rows, dtype=torch.float32)


def grid_anchors(cells: Tensor, height: int, width: int, stride: int, offset: float) -> Tensor:
    """``(height * width * A, 4)`` anchors of a feature map, ordered ``(y, x, anchor)``."""
    dev = cells.device
    xs = torch.arange(width, device=dev, dtype=torch.float32) * stride + offset * stride
    ys = torch.arange(height, device=dev, dtype=torch.float32) * stride + offset * stride
    sy, sx = torch.meshgrid(ys, xs, indexing="ij")
    shifts = torch.stack([sx.reshape(-1), sy.reshape(-1), sx.reshape(-1), sy.reshape(-1)], dim=1)
    return (shifts[:, None, :] + cells[None, :, :].float()).reshape(-1, 4)
