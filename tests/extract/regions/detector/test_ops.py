"""NMS, batched NMS, class-wise NMS and RoIPool against brute-force Python versions."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from vlprobe.extract.regions.detector.ops import (
    batched_nms,
    box_iou,
    classwise_nms_keep,
    nms,
    roi_pool,
    round_half_away,
)


def brute_iou(a, b) -> float:
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    area = lambda x: max(0.0, x[2] - x[0]) * max(0.0, x[3] - x[1])  # noqa: E731
    union = area(a) + area(b) - inter
    return inter / union if union > 0 else 0.0


def brute_nms(boxes, scores, thr) -> list[int]:
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    keep: list[int] = []
    for i in order:
        if all(brute_iou(boxes[i], boxes[j]) <= thr for j in keep):
            keep.append(i)
    return keep


def random_boxes(gen: torch.Generator, n: int, size: float = 50.0) -> torch.Tensor:
    xy = torch.rand((n, 2), generator=gen) * size
    wh = torch.rand((n, 2), generator=gen) * size / 2
    return torch.cat([xy, xy + wh], 1)


def test_box_iou_hand_computed_and_degenerate() -> None:
    a = torch.tensor([[0.0, 0, 2, 2], [0, 0, 0, 0], [5, 5, 4, 4]])
    b = torch.tensor([[1.0, 1, 3, 3], [0, 0, 0, 0]])
    iou = box_iou(a, b)
    assert iou[0, 0].item() == pytest.approx(1 / 7)
    # Zero-area and inverted boxes overlap nothing (no NaN).
    assert torch.equal(iou[1:], torch.zeros(2, 2))
    assert iou[0, 1].item() == 0.0


@pytest.mark.parametrize("thr", [0.0, 0.3, 0.5, 0.7, 1.0])
def test_nms_matches_brute_force_on_random_boxes(thr: float) -> None:
    gen = torch.Generator().manual_seed(int(thr * 10))
    for n in (1, 2, 17, 120):
        boxes = random_boxes(gen, n)
        scores = torch.rand(n, generator=gen)
        got = nms(boxes, scores, thr).tolist()
        assert got == brute_nms(boxes.tolist(), scores.tolist(), thr)


def test_nms_ties_keep_the_lower_index_and_max_keep_truncates() -> None:
    boxes = torch.tensor([[0.0, 0, 10, 10], [0, 0, 10, 10], [20, 20, 30, 30], [20, 20, 30, 31]])
    scores = torch.tensor([0.5, 0.5, 0.5, 0.9])
    # Box 0 and 1 tie: 0 is kept. Box 3 beats box 2.
    assert nms(boxes, scores, 0.5).tolist() == [3, 0]
    assert nms(boxes, scores, 0.5, max_keep=1).tolist() == [3]
    assert nms(boxes, scores, 1.0).tolist() == [3, 0, 1, 2]


def test_nms_empty_and_degenerate_input() -> None:
    empty = nms(torch.zeros((0, 4)), torch.zeros(0), 0.5)
    assert empty.dtype == torch.int64 and empty.numel() == 0
    # Zero-area boxes never suppress anything, not even identical ones.
    pts = torch.tensor([[1.0, 1, 1, 1], [1, 1, 1, 1]])
    assert nms(pts, torch.tensor([0.2, 0.1]), 0.0).tolist() == [0, 1]
    with pytest.raises(ValueError, match="boxes: expected shape"):
        nms(torch.zeros((3, 3)), torch.zeros(3), 0.5)


def test_batched_nms_matches_per_group_brute_force() -> None:
    gen = torch.Generator().manual_seed(3)
    boxes = random_boxes(gen, 90)
    scores = torch.rand(90, generator=gen)
    groups = torch.randint(0, 4, (90,), generator=gen)
    expect = []
    for g in range(4):
        idx = [i for i in range(90) if groups[i] == g]
        kept = brute_nms([boxes[i].tolist() for i in idx], [scores[i].item() for i in idx], 0.4)
        expect += [idx[k] for k in kept]
    expect.sort(key=lambda i: (-scores[i].item(), i))
    assert batched_nms(boxes, scores, groups, 0.4).tolist() == expect
    assert batched_nms(boxes, scores, groups, 0.4, max_keep=5).tolist() == expect[:5]
    # The same boxes in two groups do not suppress each other.
    two = torch.tensor([[0.0, 0, 10, 10], [0, 0, 10, 10]])
    assert batched_nms(two, torch.tensor([0.9, 0.8]), torch.tensor([0, 1]), 0.1).tolist() == [0, 1]


def test_classwise_nms_matches_one_nms_per_class() -> None:
    gen = torch.Generator().manual_seed(5)
    boxes = random_boxes(gen, 60)
    scores = torch.rand((60, 7), generator=gen)
    scores[:5, 2] = 0.5  # ties inside one class
    keep = classwise_nms_keep(boxes, scores, 0.3)
    assert keep.shape == (60, 7)
    for k in range(7):
        expect = set(brute_nms(boxes.tolist(), scores[:, k].tolist(), 0.3))
        assert set(torch.nonzero(keep[:, k]).flatten().tolist()) == expect


def test_round_half_away_from_zero() -> None:
    x = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, 2.4999])
    assert round_half_away(x).tolist() == [1.0, 2.0, 3.0, -1.0, -2.0, 2.0]


def brute_roi_pool(feat: np.ndarray, rois: np.ndarray, ph: int, pw: int, scale: float, valid=None) -> np.ndarray:
    """The legacy kernel, one bin at a time, with its float32 bin arithmetic."""
    f32 = np.float32
    _, c, h, w = feat.shape
    out = np.zeros((len(rois), c, ph, pw), dtype=feat.dtype)
    rnd = lambda v: math.floor(abs(v) + 0.5) * (1 if v >= 0 else -1)  # noqa: E731
    for r, (b, x1, y1, x2, y2) in enumerate(rois):
        b = int(b)
        hl, wl = (h, w) if valid is None else (min(valid[b][0], h), min(valid[b][1], w))
        sw, sh = rnd(f32(x1) * f32(scale)), rnd(f32(y1) * f32(scale))
        ew, eh = rnd(f32(x2) * f32(scale)), rnd(f32(y2) * f32(scale))
        rw, rh = max(ew - sw + 1, 1), max(eh - sh + 1, 1)
        bh, bw = f32(rh) / f32(ph), f32(rw) / f32(pw)
        for i in range(ph):
            for j in range(pw):
                h0 = min(max(math.floor(f32(i) * bh) + sh, 0), hl)
                h1 = min(max(math.ceil(f32(i + 1) * bh) + sh, 0), hl)
                w0 = min(max(math.floor(f32(j) * bw) + sw, 0), wl)
                w1 = min(max(math.ceil(f32(j + 1) * bw) + sw, 0), wl)
                if h1 <= h0 or w1 <= w0:
                    continue
                out[r, :, i, j] = feat[b, :, h0:h1, w0:w1].reshape(c, -1).max(axis=1)
    return out


def test_roi_pool_matches_brute_force_on_random_and_edge_boxes() -> None:
    gen = torch.Generator().manual_seed(0)
    feat = torch.randn((2, 5, 9, 13), generator=gen)
    rand = random_boxes(gen, 40, size=250.0)
    rois = torch.cat([torch.randint(0, 2, (40, 1), generator=gen).float(), rand], 1)
    edge = torch.tensor(
        [
            [0, 0.0, 0.0, 0.0, 0.0],  # a point: one cell
            [1, 10.0, 10.0, 5.0, 5.0],  # inverted
            [0, -100.0, -100.0, -40.0, -40.0],  # entirely outside (above-left): empty bins
            [1, 300.0, 300.0, 400.0, 400.0],  # entirely outside (below-right)
            [0, -50.0, -20.0, 500.0, 400.0],  # covers the map and more
            [1, 8.0, 8.0, 8.0, 200.0],  # zero width, tall
            [0, 24.0, 24.0, 40.0, 40.0],  # x.5 corners: 1.5 -> 2, 2.5 -> 3
        ]
    )
    rois = torch.cat([rois, edge])
    for size, scale in (((3, 3), 1 / 16), ((7, 7), 1 / 16), ((2, 4), 0.05)):
        got = roi_pool(feat, rois, size, scale)
        want = brute_roi_pool(feat.numpy(), rois.numpy(), *size, scale)
        np.testing.assert_array_equal(got.numpy(), want)  # max pooling moves values: exact


def test_roi_pool_clips_to_each_images_valid_size() -> None:
    gen = torch.Generator().manual_seed(1)
    feat = torch.randn((2, 3, 10, 10), generator=gen)
    rois = torch.tensor([[0, 0.0, 0.0, 200.0, 200.0], [1, 16.0, 16.0, 150.0, 90.0]])
    valid = torch.tensor([[4, 6], [10, 7]])
    got = roi_pool(feat, rois, 5, 1 / 16, valid_sizes=valid)
    np.testing.assert_array_equal(got.numpy(), brute_roi_pool(feat.numpy(), rois.numpy(), 5, 5, 1 / 16, valid.tolist()))
    # Values beyond the valid part never reach the output.
    feat2 = feat.clone()
    feat2[0, :, 4:, :] = 1e6
    feat2[0, :, :, 6:] = 1e6
    assert torch.equal(roi_pool(feat2, rois[:1], 5, 1 / 16, valid_sizes=valid), got[:1])


def test_roi_pool_empty_rois_and_bad_shapes() -> None:
    feat = torch.zeros((1, 4, 5, 5))
    assert roi_pool(feat, torch.zeros((0, 5)), 3, 1.0).shape == (0, 4, 3, 3)
    with pytest.raises(ValueError, match="rois: expected shape"):
        roi_pool(feat, torch.zeros((2, 4)), 3, 1.0)
