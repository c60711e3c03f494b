"""Anchors, box coding, the resize rule and the backbone's valid sizes under batch padding."""

from __future__ import annotations

import math

import pytest
import torch

from vlprobe.extract.regions.detector import (
    RegionDetector,
)
from vlprobe.extract.regions.detector.anchors import cell_anchors, grid_anchors
from vlprobe.extract.regions.detector.backbone import ResNetC4
from vlprobe.extract.regions.detector.box_coder import (
    SCALE_CLAMP,
    clip_boxes,
    decode_boxes,
    encode_boxes,
    nonempty,
)
from vlprobe.extract.regions.detector.config import (
    config_from_dict,
)
from vlprobe.extract.regions.detector.preprocess import resized_size
from vlprobe.fixtures.frcnn import (
    tiny_config_dict,
)


def test_cell_anchors_hand_computed() -> None:
    cells = cell_anchors([32, 64], [0.5, 1.0, 2.0])
    assert cells.shape == (6, 4) and cells.dtype == torch.float32
    w = math.sqrt(32 * 32 / 0.5)
    assert cells[0].tolist() == pytest.approx([-w / 2, -0.25 * w, w / 2, 0.25 * w])
    assert cells[1].tolist() == [-16.0, -16.0, 16.0, 16.0]
    assert cells[4].tolist() == [-32.0, -32.0, 32.0, 32.0]  # size-major, then ratio
    h = cells[:, 3] - cells[:, 1]
    wd = cells[:, 2] - cells[:, 0]
    assert (h / wd).tolist() == pytest.approx([0.5, 1.0, 2.0, 0.5, 1.0, 2.0])


def test_grid_anchors_order_is_row_column_anchor() -> None:
    cells = torch.tensor([[-1.0, -1, 1, 1], [-2, -2, 2, 2]])
    grid = grid_anchors(cells, height=2, width=3, stride=16, offset=0.5)
    assert grid.shape == (2 * 3 * 2, 4)
    # (y=1, x=2, anchor=1): centre (2.5 * 16, 1.5 * 16).
    assert grid[(1 * 3 + 2) * 2 + 1].tolist() == [40 - 2, 24 - 2, 40 + 2, 24 + 2]
    assert grid[0].tolist() == [7.0, 7.0, 9.0, 9.0]


def test_decode_hand_computed_and_clamped() -> None:
    box = torch.tensor([[10.0, 20.0, 30.0, 60.0]])  # w 20, h 40, centre (20, 40)
    assert decode_boxes(torch.zeros(1, 4), box, (1, 1, 1, 1)).tolist() == box.tolist()
    d = torch.tensor([[1.0, -0.5, math.log(2), 0.0]])  # weights 10, 10, 5, 5
    out = decode_boxes(d, box, (10, 10, 5, 5))[0].tolist()
    cx, cy = 20 + 0.1 * 20, 40 - 0.05 * 40
    w = math.exp(math.log(2) / 5) * 20
    assert out == pytest.approx([cx - w / 2, cy - 20, cx + w / 2, cy + 20], rel=1e-6)
    huge = decode_boxes(torch.tensor([[0.0, 0, 50, 50]]), box, (1, 1, 1, 1))[0]
    assert (huge[2] - huge[0]).item() == pytest.approx(20 * math.exp(SCALE_CLAMP), rel=1e-5)  # 62.5 x
    # Several boxes per row (one per class).
    two = decode_boxes(torch.zeros(1, 8), box, (1, 1, 1, 1))
    assert two.shape == (1, 8) and two[0, 4:].tolist() == box[0].tolist()


def test_encode_inverts_decode() -> None:
    gen = torch.Generator().manual_seed(0)
    src = torch.rand(20, 2, generator=gen) * 50
    boxes = torch.cat([src, src + 5 + torch.rand(20, 2, generator=gen) * 40], 1)
    tgt = boxes + torch.randn(20, 4, generator=gen)
    tgt[:, 2:] = torch.maximum(tgt[:, 2:], tgt[:, :2] + 1)
    back = decode_boxes(encode_boxes(boxes, tgt, (10, 10, 5, 5)), boxes, (10, 10, 5, 5))
    torch.testing.assert_close(back, tgt, rtol=1e-4, atol=1e-3)


def test_clip_and_nonempty() -> None:
    b = torch.tensor([[-5.0, -5, 50, 50], [10, 10, 10, 20], [3, 4, 5, 6]])
    c = clip_boxes(b, height=30, width=40)
    assert c[0].tolist() == [0, 0, 40, 30]
    assert nonempty(c).tolist() == [True, False, True]
    assert nonempty(c, threshold=2.0).tolist() == [True, False, False]


def test_resize_rule() -> None:
    assert resized_size(480, 640, 600, 1000) == (600, 800)
    assert resized_size(640, 480, 600, 1000) == (800, 600)
    assert resized_size(100, 1000, 600, 1000) == (100, 1000)  # the long side caps the scale
    assert resized_size(333, 333, 600, 1000) == (600, 600)


def test_backbone_valid_sizes_follow_the_layers() -> None:
    cfg = config_from_dict(tiny_config_dict())
    net = ResNetC4(cfg).eval()
    sizes = torch.tensor([[64, 112], [37, 50]])
    with torch.no_grad():
        for h, w in sizes.tolist():
            out = net(torch.zeros(1, 3, h, w))
            assert list(out.shape[-2:]) == net.out_sizes(torch.tensor([[h, w]])).tolist()[0]


def test_padded_batch_backbone_features_equal_single_image_features() -> None:
    cfg = config_from_dict(tiny_config_dict())
    det = RegionDetector.random(cfg, seed=1)
    net = det.model.backbone
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(1, 3, 64, 112, generator=gen) * 50, torch.randn(1, 3, 45, 64, generator=gen) * 50
    canvas = torch.zeros(2, 3, 64, 112)
    canvas[0], canvas[1, :, :45, :64] = a[0], b[0]
    with torch.no_grad():
        batch = net(canvas, torch.tensor([[64, 112], [45, 64]]))
        alone = net(b)
    h, w = alone.shape[-2:]
    # Float tolerance: other shapes, other summation order.
    torch.testing.assert_close(batch[1, :, :h, :w], alone[0], rtol=1e-4, atol=1e-5)
    assert batch[1, :, h:, :].abs().max() == 0 and batch[1, :, :, w:].abs().max() == 0
