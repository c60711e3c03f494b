"""The res5 RoI head: RoIPool, res5, mean pooling, and the object, box and attribute predictors.

* RoIPool ``roi_box_head.pooler_resolution`` bins at scale 1/16 on the res4 map;
* ``res5``: three bottleneck blocks to ``8 * res2_out_channels`` (2048) channels. The VG
  model keeps the resolution (``roi_box_head.res5halve: false``): the first block's 1x1
  convolution and shortcut have stride 1 and every 3x3 convolution dilation 2 (padding 2);
* the region feature: the res5 output averaged over the bins (``(R, 2048)``);
* ``box_predictor.cls_score``: ``num_classes + 1`` logits, the background **last**;
  ``box_predictor.bbox_pred``: four deltas per class (box-regression weights
  ``roi_box_head.bbox_reg_weights``);
* attributes (``roi_box_head.attr``): ``cls_embedding`` of the arg-max class (background
  included), concatenated to the feature, ``fc_attr`` with ReLU, ``attr_score`` to
  ``num_attrs + 1`` logits (the "no attribute" class last).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .backbone import make_stage, stage_blocks
from .config import DetectorConfig
from .ops import roi_pool

__all__ = ["BoxPredictor", "Res5RoIHeads", "RoIHeadOutput"]

RoIHeadOutput = tuple[Tensor, Tensor | None, Tensor, Tensor]


class BoxPredictor(nn.Module):
    def __init__(self, dim: int, num_classes: int, attr: bool, num_attrs: int) -> None:
        super().__init__()
        self.cls_score = nn.Linear(dim, num_classes + 1)
        self.bbox_pred = nn.Linear(dim, num_classes * 4)
        self.attr = attr
        if attr:
            self.cls_embedding = nn.Embedding(num_classes + 1, dim // 8)
            self.fc_attr = nn.Linear(dim + dim // 8, dim // 4)
            self.attr_score = nn.Linear(dim // 4, num_attrs + 1)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor | None, Tensor]:
        scores = self.cls_score(x)
        deltas = self.bbox_pred(x)
        if not self.attr:
            return scores, None, deltas
        emb = self.cls_embedding(scores.argmax(-1))
        attr = self.attr_score(torch.relu(self.fc_attr(torch.cat([x, emb], -1))))
        return scores, attr, deltas


class Res5RoIHeads(nn.Module):
    def __init__(self, cfg: DetectorConfig, in_channels: int, chunk: int = 128) -> None:
        super().__init__()
        self.cfg = cfg
        out = cfg.feature_dim
        self.res5 = make_stage(3, 2, in_channels, out, cfg.num_groups * cfg.width_per_group * 8, cfg)
        if not cfg.res5_halve:
            blocks = stage_blocks(self.res5)
            blocks[0].conv1.stride = (1, 1)
            if blocks[0].shortcut is not None:  # always there: res5 widens its input
                blocks[0].shortcut.stride = (1, 1)
            for block in blocks:
                block.conv2.padding = (2, 2)
                block.conv2.dilation = (2, 2)
        self.box_predictor = BoxPredictor(out, cfg.num_classes, cfg.attr_head, cfg.num_attrs)
        self.chunk = chunk  # RoIs through res5 at a time: bounds memory, not results

    def forward(self, features: Tensor, proposals: list[Tensor], feature_sizes: Tensor) -> RoIHeadOutput:
        """Object logits, attribute logits, box deltas and ``(R, feature_dim)`` features of all
        proposals of the batch, image after image."""
        rois = torch.cat(
            [torch.cat([torch.full((len(p), 1), i, dtype=torch.float32, device=p.device), p.float()], 1) for i, p in enumerate(proposals)]
        )
        pooled = []
        for start in range(0, len(rois), self.chunk):
            x = roi_pool(features, rois[start : start + self.chunk], self.cfg.pooler_resolution, 1.0 / self.cfg.feature_stride, feature_sizes)
            pooled.append(self.res5(x).mean(dim=(2, 3)))
        feats = torch.cat(pooled) if pooled else features.new_zeros((0, self.cfg.feature_dim))
        obj, attr, deltas = self.box_predictor(feats)
        return obj, attr, deltas, feats
