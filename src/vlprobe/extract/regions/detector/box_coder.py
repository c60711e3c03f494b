"""Box regression deltas, clipping and the empty-box filter of Faster R-CNN.

Deltas ``(dx, dy, dw, dh)`` are divided by the weights ``(wx, wy, ww, wh)`` (RPN: 1, 1, 1, 1;
box head: 10, 10, 5, 5), ``dw`` and ``dh`` are clamped at ``log(1000 / 16)`` (no box grows more
than a 16-pixel box would to 1000 pixels), and a box of width ``w = x2 - x1`` and centre
``x1 + w / 2`` moves to centre ``dx * w + cx`` with width ``exp(dw) * w``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["SCALE_CLAMP", "clip_boxes", "decode_boxes", "encode_boxes", "nonempty"]

SCALE_CLAMP = math.log(1000.0 / 16)


def decode_boxes(deltas: Tensor, boxes: Tensor, weights: Sequence[float], scale_clamp: float = SCALE_CLAMP) -> Tensor:
    """Apply ``(N, 4k)`` deltas (``k`` boxes per row, e.g. one per class) to ``(N, 4)`` boxes."""
    boxes = boxes.to(deltas.dtype)
    widths = boxes[:, 2] - boxes[:, 0]
    heights = boxes[:, 3] - boxes[:, 1]
    ctr_x = boxes[:, 0] + 0.5 * widths
    ctr_y = boxes[:, 1] + 0.5 * heights
    wx, wy, ww, wh = (float(w) for w in weights)
    dx = deltas[:, 0::4] / wx
    dy = deltas[:, 1::4] / wy
    dw = (deltas[:, 2::4] / ww).clamp(max=scale_clamp)
    dh = (deltas[:, 3::4] / wh).clamp(max=scale_clamp)
    cx = dx * widths[:, None] + ctr_x[:, None]
    cy = dy * heights[:, None] + ctr_y[:, None]
    w = torch.exp(dw) * widths[:, None]
    h = torch.exp(dh) * heights[:, None]
    out = torch.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h], dim=2)
    return out.reshape(deltas.shape)


def encode_boxes(boxes: Tensor, targets: Tensor, weights: Sequence[float]) -> Tensor:
    """The deltas that :func:`decode_boxes` turns ``boxes`` into ``targets`` with (both ``(N, 4)``)."""
    wx, wy, ww, wh = (float(w) for w in weights)
    bw, bh = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
    tw, th = targets[:, 2] - targets[:, 0], targets[:, 3] - targets[:, 1]
    dx = wx * ((targets[:, 0] + 0.5 * tw) - (boxes[:, 0] + 0.5 * bw)) / bw
    dy = wy * ((targets[:, 1] + 0.5 * th) - (boxes[:, 1] + 0.5 * bh)) / bh
    return torch.stack([dx, dy, ww * torch.log(tw / bw), wh * torch.log(th / bh)], dim=1)


def clip_boxes(boxes: Tensor, height: float, width: float) -> Tensor:
    """Clamp ``(..., 4)`` boxes into ``[0, width] x [0, height]``."""
    x = boxes[..., 0::2].clamp(min=0, max=width)
    y = boxes[..., 1::2].clamp(min=0, max=height)
    return torch.stack([x[..., 0], y[..., 0], x[..., 1], y[..., 1]], dim=-1)


def nonempty(boxes: Tensor, threshold: float = 0.0) -> Tensor:
    """``(N,)`` bool: width and height both greater than ``threshold``."""
    return ((boxes[:, 2] - boxes[:, 0]) > threshold) & ((boxes[:, 3] - boxes[:, 1]) > threshold)
