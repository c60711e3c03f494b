"""Region proposal network: head, anchors and test-time proposal selection.

Parameter names are those of the hub checkpoint: ``anchor_generator.cell_anchors.0`` (the
cell anchors, stored with the weights) and ``rpn_head.{conv, objectness_logits,
anchor_deltas}``. The head is a 3x3 convolution to ``proposal_generator.hidden_channels`` with
ReLU, then 1x1 convolutions to one objectness logit and four deltas per anchor.

Per image (never across the batch): the anchors of the image's own part of the feature map
only (batch padding proposes nothing), the ``rpn.pre_nms_topk_test`` best by objectness, decoded
(weights ``rpn.bbox_reg_weights``), clipped to the resized image, boxes not wider and taller
than ``proposal_generator.min_size`` dropped, NMS at ``rpn.nms_thresh``, and the best
``rpn.post_nms_topk_test`` kept, by decreasing objectness.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .anchors import cell_anchors, grid_anchors
from .box_coder import clip_boxes, decode_boxes, nonempty
from .config import DetectorConfig
from .ops import nms

__all__ = ["RPN", "RPNHead"]


class _AnchorGenerator(nn.Module):
    def __init__(self, cfg: DetectorConfig) -> None:
        super().__init__()
        cells = cell_anchors(cfg.anchor_sizes, cfg.aspect_ratios)
        self.cell_anchors = nn.ParameterList([nn.Parameter(cells, requires_grad=False)])
        self.stride = cfg.feature_stride
        self.offset = cfg.anchor_offset


class RPNHead(nn.Module):
    def __init__(self, in_channels: int, hidden: int, num_anchors: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, hidden, 3, padding=1)
        self.objectness_logits = nn.Conv2d(hidden, num_anchors, 1)
        self.anchor_deltas = nn.Conv2d(hidden, num_anchors * 4, 1)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        t = torch.relu(self.conv(x))
        return self.objectness_logits(t), self.anchor_deltas(t)


class RPN(nn.Module):
    """Proposals for each image from the res4 features."""

    def __init__(self, cfg: DetectorConfig, in_channels: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.anchor_generator = _AnchorGenerator(cfg)
        self.rpn_head = RPNHead(in_channels, cfg.rpn_hidden_channels, cfg.num_anchors)

    def forward(self, features: Tensor, feature_sizes: Tensor, image_sizes: Tensor) -> list[tuple[Tensor, Tensor]]:
        """Proposals ``(N_i, 4)`` (resized-image pixels) and their objectness ``(N_i,)`` per image.

        ``feature_sizes`` and ``image_sizes`` are ``(B, 2)`` valid ``(h, w)`` of each image's
        res4 map and resized image.
        """
        cfg = self.cfg
        logits, deltas = self.rpn_head(features)
        cells = self.anchor_generator.cell_anchors[0]
        a = cells.shape[0]
        out = []
        for i, ((fh, fw), (ih, iw)) in enumerate(zip(feature_sizes.tolist(), image_sizes.tolist(), strict=True)):
            obj = logits[i, :, :fh, :fw].permute(1, 2, 0).reshape(-1).float()
            dlt = deltas[i, :, :fh, :fw].reshape(a, 4, fh, fw).permute(2, 3, 0, 1).reshape(-1, 4).float()
            anchors = grid_anchors(cells, fh, fw, self.anchor_generator.stride, self.anchor_generator.offset)
            top = torch.sort(obj, descending=True, stable=True).indices[: cfg.pre_nms_topk]
            boxes = clip_boxes(decode_boxes(dlt[top], anchors[top], cfg.rpn_bbox_weights), ih, iw)
            scores = obj[top]
            ok = nonempty(boxes, cfg.rpn_min_size)
            boxes, scores = boxes[ok], scores[ok]
            keep = nms(boxes, scores, cfg.rpn_nms_thresh, max_keep=cfg.post_nms_topk)
            out.append((boxes[keep], scores[keep]))
        return out
