"""Detection ops in plain torch: box IoU, NMS, batched NMS, class-wise NMS, RoIPool.

torchvision's compiled ops do not load beside every torch build, so the detector carries its
own. Semantics follow the legacy Caffe/Detectron ops the VG Faster R-CNN was trained with:

* Boxes are ``(x1, y1, x2, y2)`` in continuous coordinates: width ``x2 - x1`` (no ``+ 1``), as in
  Detectron2 and torchvision. A box of zero area overlaps nothing (IoU 0).
* NMS keeps the highest-scoring box, removes every remaining box whose IoU with it is
  **greater than** the threshold, and repeats. Tie order: stable, by decreasing score, then by
  increasing index, so equal scores keep the box that came first. The kept indices come back
  in that order.
* RoIPool is the legacy max pooling of Fast R-CNN: box corners are scaled by ``spatial_scale``
  and rounded half away from zero, the box spans ``round(x2) - round(x1) + 1`` cells (at least
  one), bin ``p`` covers ``[floor(p * size / P), ceil((p + 1) * size / P))`` cells of it (bin
  arithmetic in float32), clipped to the feature map; an empty bin gives 0, any other bin the
  maximum over its cells.

All functions are vectorised: NMS loops over kept boxes only (and stops at ``max_keep``),
class-wise NMS runs every class at once, and RoIPool answers each bin with four look-ups in a
2-D sparse table of running maxima, so 300 boxes x 1024 channels pool in well under a second on
a CPU.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from vlprobe.validation import InputError

__all__ = [
    "batched_nms",
    "box_area",
    "box_iou",
    "classwise_nms_keep",
    "nms",
    "roi_pool",
    "round_half_away",
]

_ROW_CHUNK = 1024
_BIN_CHUNK = 4096
_NMS_BLOCK = 128


def box_area(boxes: Tensor) -> Tensor:
    """Area of ``(N, 4)`` boxes, ``(x2 - x1) * (y2 - y1)``, 0 for inverted boxes."""
    w = (boxes[:, 2] - boxes[:, 0]).clamp(min=0)
    h = (boxes[:, 3] - boxes[:, 1]).clamp(min=0)
    return w * h


def box_iou(a: Tensor, b: Tensor) -> Tensor:
    """Pairwise IoU of ``(N, 4)`` and ``(M, 4)`` boxes -> ``(N, M)``; 0 where the union is empty."""
    a = a.float()
    b = b.float()
    lt = torch.maximum(a[:, None, :2], b[None, :, :2])
    rb = torch.minimum(a[:, None, 2:], b[None, :, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    union = box_area(a)[:, None] + box_area(b)[None, :] - inter
    return torch.where(union > 0, inter / union.clamp(min=torch.finfo(torch.float32).tiny), torch.zeros_like(inter))


def _overlaps(boxes: Tensor, iou_threshold: float) -> Tensor:
    """``(N, N)`` bool: IoU above the threshold, computed in row chunks to bound memory."""
    rows = [box_iou(boxes[i : i + _ROW_CHUNK], boxes) > iou_threshold for i in range(0, len(boxes), _ROW_CHUNK)]
    return torch.cat(rows) if rows else torch.zeros((0, 0), dtype=torch.bool, device=boxes.device)


def _check_boxes(boxes: Tensor, scores: Tensor, name: str = "boxes") -> None:
    if boxes.ndim != 2 or boxes.shape[1] != 4:
        raise InputError(f"{name}: expected shape (N, 4), got {tuple(boxes.shape)}")
    if scores.shape[0] != boxes.shape[0]:
        raise InputError(f"scores: expected {boxes.shape[0]} rows (one per box), got {tuple(scores.shape)}")


def _descending(scores: Tensor) -> Tensor:
    """Indices by decreasing score, ties by increasing index (a stable sort)."""
    return torch.sort(scores, descending=True, stable=True).indices


def nms(boxes: Tensor, scores: Tensor, iou_threshold: float, max_keep: int | None = None) -> Tensor:
    """Greedy non-maximum suppression.

    Parameters
    ----------
    boxes : Tensor
        ``(N, 4)`` boxes ``x1, y1, x2, y2``.
    scores : Tensor
        ``(N,)`` finite scores.
    iou_threshold : float
        A box is removed when its IoU with a kept, higher-ranked box is greater than this.
    max_keep : int, optional
        Stop after this many kept boxes (the result equals the full NMS truncated).

    Returns
    -------
    Tensor
        ``(K,)`` int64 indices into ``boxes``, by decreasing score (ties: lower index first).
    """
    _check_boxes(boxes, scores)
    n = boxes.shape[0]
    if n == 0 or max_keep == 0:
        return torch.zeros(0, dtype=torch.int64, device=boxes.device)
    order = _descending(scores)
    ranked = boxes[order].float()
    limit = n if max_keep is None else max_keep
    removed = np.zeros(n, dtype=bool)
    keep: list[int] = []
    pos = 0
    # IoU rows are computed only for boxes still alive, a block at a time: the work is
    # (kept or blocked boxes) x N rather than N x N.
    while pos < n and len(keep) < limit:
        cand = np.flatnonzero(~removed[pos:])[:_NMS_BLOCK] + pos
        if cand.size == 0:
            break
        rows = (box_iou(ranked[torch.as_tensor(cand, device=boxes.device)], ranked[pos:]) > iou_threshold).cpu().numpy()
        for j, i in enumerate(cand):
            if removed[i]:
                continue
            keep.append(int(i))
            if len(keep) >= limit:
                break
            removed[pos:] |= rows[j]
        pos = int(cand[-1]) + 1
    return order[torch.as_tensor(keep, dtype=torch.int64, device=boxes.device)]


def batched_nms(
    boxes: Tensor, scores: Tensor, groups: Tensor, iou_threshold: float, max_keep: int | None = None
) -> Tensor:
    """NMS within each group (level or class) separately; boxes of different groups never suppress
    each other.

    Runs :func:`nms` per group (a loop over the groups present, not the coordinate-offset trick:
    large offsets cost float32 precision in the IoU). The kept indices of all groups come back
    merged by decreasing score, ties by increasing index; ``max_keep`` truncates that list.
    """
    _check_boxes(boxes, scores)
    if groups.shape != scores.shape[:1]:
        raise InputError(f"groups: expected shape ({boxes.shape[0]},), got {tuple(groups.shape)}")
    if boxes.shape[0] == 0:
        return torch.zeros(0, dtype=torch.int64, device=boxes.device)
    kept = []
    for g in torch.unique(groups):
        idx = torch.nonzero(groups == g).flatten()
        kept.append(idx[nms(boxes[idx], scores[idx], iou_threshold, max_keep)])
    keep = torch.cat(kept)
    # Stable sort of the kept indices in increasing order first, so equal scores keep index order.
    keep = torch.sort(keep).values
    keep = keep[_descending(scores[keep])]
    return keep if max_keep is None else keep[:max_keep]


def classwise_nms_keep(boxes: Tensor, scores: Tensor, iou_threshold: float) -> Tensor:
    """NMS of every class over the same boxes, all classes at once.

    The BUTD feature extractor runs NMS once per class over the (shared) proposals, each with
    that class's scores. Here the greedy pass over ranks runs for all classes together: step
    ``r`` looks at each class's ``r``-th best box and, where it survives, suppresses its
    overlaps, with the suppression sets held as bit masks (64 boxes per word).

    Parameters
    ----------
    boxes : Tensor
        ``(N, 4)`` boxes shared by all classes.
    scores : Tensor
        ``(N, K)`` scores of each box for each class.
    iou_threshold : float
        Suppression threshold (IoU greater than it is suppressed).

    Returns
    -------
    Tensor
        ``(N, K)`` bool: box ``i`` survives the NMS of class ``k``.
    """
    if scores.ndim != 2:
        raise InputError(f"scores: expected shape (N, K), got {tuple(scores.shape)}")
    _check_boxes(boxes, scores)
    n, k = scores.shape
    if n == 0 or k == 0:
        return torch.zeros((n, k), dtype=torch.bool, device=boxes.device)
    words = (n + 63) // 64
    over = np.zeros((n, words * 64), dtype=bool)
    over[:, :n] = _overlaps(boxes, iou_threshold).cpu().numpy()
    bits = np.packbits(over, axis=1, bitorder="little").view(np.uint64)  # (N, words)
    order = np.argsort(-scores.T.float().cpu().numpy(), axis=1, kind="stable")  # (K, N)
    suppressed = np.zeros((k, words), dtype=np.uint64)
    keep = np.zeros((k, n), dtype=bool)
    cls = np.arange(k)
    one = np.uint64(1)
    for r in range(n):
        cur = order[:, r]
        alive = ((suppressed[cls, cur >> 6] >> (cur & 63).astype(np.uint64)) & one) == 0
        keep[cls, cur] = alive
        suppressed[alive] |= bits[cur[alive]]
    return torch.from_numpy(np.ascontiguousarray(keep.T)).to(boxes.device)


def round_half_away(x: Tensor) -> Tensor:
    """Round half away from zero (C's ``round``; ``torch.round`` rounds half to even)."""
    return torch.sign(x) * torch.floor(x.abs() + 0.5)


def _floor_log2_table(n: int, device: torch.device) -> Tensor:
    """``t[i] = floor(log2(i))`` for ``1 <= i <= n`` (``t[0] = 0``), exact integer arithmetic."""
    return torch.tensor([max(i, 1).bit_length() - 1 for i in range(n + 1)], dtype=torch.int64, device=device)


def _pow2(k: Tensor) -> Tensor:
    return torch.bitwise_left_shift(torch.ones_like(k), k)


def roi_pool(
    features: Tensor,
    rois: Tensor,
    output_size: int | tuple[int, int],
    spatial_scale: float,
    valid_sizes: Tensor | None = None,
) -> Tensor:
    """Legacy (Caffe/Detectron) RoI max pooling.

    Parameters
    ----------
    features : Tensor
        ``(B, C, H, W)`` feature maps.
    rois : Tensor
        ``(R, 5)`` rows ``(batch_index, x1, y1, x2, y2)`` in input-image pixels.
    output_size : int or (int, int)
        ``P`` or ``(PH, PW)`` bins.
    spatial_scale : float
        Feature cells per input pixel (1/16 for a stride-16 map).
    valid_sizes : Tensor, optional
        ``(B, 2)`` int ``(h, w)``: the part of each map that belongs to its image (the rest is
        batch padding). Bins are clipped to it instead of to ``H, W``, so an image pools the same
        values whatever it was padded to.

    Returns
    -------
    Tensor
        ``(R, C, PH, PW)``, the dtype of ``features``.
    """
    if features.ndim != 4:
        raise InputError(f"features: expected shape (B, C, H, W), got {tuple(features.shape)}")
    if rois.ndim != 2 or rois.shape[1] != 5:
        raise InputError(f"rois: expected shape (R, 5), got {tuple(rois.shape)}")
    ph, pw = (output_size, output_size) if isinstance(output_size, int) else output_size
    _, c, h, w = features.shape
    r = rois.shape[0]
    device = features.device
    if r == 0:
        return features.new_zeros((0, c, ph, pw))
    rois = rois.to(device=device, dtype=torch.float32)
    bidx = rois[:, 0].long()
    if valid_sizes is None:
        lim_h = torch.full((r,), h, dtype=torch.int64, device=device)
        lim_w = torch.full((r,), w, dtype=torch.int64, device=device)
    else:
        vs = valid_sizes.to(device=device, dtype=torch.int64)
        lim_h, lim_w = vs[bidx, 0].clamp(max=h), vs[bidx, 1].clamp(max=w)
    scale = torch.tensor(spatial_scale, dtype=torch.float32, device=device)
    start_w = round_half_away(rois[:, 1] * scale).long()
    start_h = round_half_away(rois[:, 2] * scale).long()
    end_w = round_half_away(rois[:, 3] * scale).long()
    end_h = round_half_away(rois[:, 4] * scale).long()
    roi_w = (end_w - start_w + 1).clamp(min=1).float()
    roi_h = (end_h - start_h + 1).clamp(min=1).float()
    bin_h = roi_h / torch.tensor(float(ph), device=device)  # float32, as the reference kernel
    bin_w = roi_w / torch.tensor(float(pw), device=device)
    p_h = torch.arange(ph, device=device, dtype=torch.float32)
    p_w = torch.arange(pw, device=device, dtype=torch.float32)
    hs = torch.floor(p_h[None] * bin_h[:, None]).long() + start_h[:, None]  # (R, PH)
    he = torch.ceil((p_h[None] + 1) * bin_h[:, None]).long() + start_h[:, None]
    ws = torch.floor(p_w[None] * bin_w[:, None]).long() + start_w[:, None]  # (R, PW)
    we = torch.ceil((p_w[None] + 1) * bin_w[:, None]).long() + start_w[:, None]
    zero = torch.zeros((), dtype=torch.int64, device=device)
    hs = torch.minimum(torch.maximum(hs, zero), lim_h[:, None])
    he = torch.minimum(torch.maximum(he, zero), lim_h[:, None])
    ws = torch.minimum(torch.maximum(ws, zero), lim_w[:, None])
    we = torch.minimum(torch.maximum(we, zero), lim_w[:, None])
    # One row per bin: (R, PH, PW) flattened.
    hs_b = hs[:, :, None].expand(r, ph, pw).reshape(-1)
    he_b = he[:, :, None].expand(r, ph, pw).reshape(-1)
    ws_b = ws[:, None, :].expand(r, ph, pw).reshape(-1)
    we_b = we[:, None, :].expand(r, ph, pw).reshape(-1)
    bb = bidx[:, None, None].expand(r, ph, pw).reshape(-1)
    hlen, wlen = he_b - hs_b, we_b - ws_b
    filled = (hlen > 0) & (wlen > 0)
    log2 = _floor_log2_table(max(h, w), device)
    kk = torch.where(filled, log2[hlen.clamp(min=0)], 0)
    ll = torch.where(filled, log2[wlen.clamp(min=0)], 0)
    # All (k, l) tables one after another in one flat (rows, C) table, then a zero row that
    # empty bins point at. Table (k, l) holds the maximum over 2^k x 2^l cells at each corner.
    codes = torch.unique(kk[filled] * 64 + ll[filled]).tolist()
    levels = {(q // 64, q % 64) for q in codes}
    need = {k_: max(l_ for kq, l_ in levels if kq == k_) for k_ in {k_ for k_, _ in levels}}
    tables: list[Tensor] = []
    offset = torch.zeros((int(kk.max()) + 1, int(ll.max()) + 1), dtype=torch.int64, device=device)
    widths = torch.zeros_like(offset)
    rows = 0
    table_h = features.permute(0, 2, 3, 1)  # (B, H, W, C): a bin's channels are contiguous
    for k in range(max(need, default=-1) + 1):
        if k > 0:
            step = 1 << (k - 1)
            table_h = torch.maximum(table_h[:, :-step], table_h[:, step:])
        if k not in need:
            continue
        table = table_h
        for lv in range(need[k] + 1):
            if lv > 0:
                step = 1 << (lv - 1)
                table = torch.maximum(table[:, :, :-step], table[:, :, step:])
            if (k, lv) in levels:
                offset[k, lv], widths[k, lv] = rows, table.shape[2]
                tables.append(table.reshape(-1, c))
                rows += tables[-1].shape[0]
    tables.append(features.new_zeros((1, c)))
    flat = torch.cat(tables)
    heights = h - _pow2(kk) + 1  # rows of table k per image
    base = offset[kk, ll] + bb * heights * widths[kk, ll]
    wid = widths[kk, ll]
    h1, w1 = he_b - _pow2(kk), we_b - _pow2(ll)
    corners = [base + y * wid + x for y, x in ((hs_b, ws_b), (h1, ws_b), (hs_b, w1), (h1, w1))]
    corners = [torch.where(filled, q, rows) for q in corners]
    out = features.new_empty((r * ph * pw, c))
    for i in range(0, r * ph * pw, _BIN_CHUNK):
        part = [flat.index_select(0, q[i : i + _BIN_CHUNK]) for q in corners]
        torch.maximum(torch.maximum(part[0], part[1]), torch.maximum(part[2], part[3]), out=out[i : i + _BIN_CHUNK])
    # (R, C, PH, PW) in channels-last memory, which the convolutions that follow take as is.
    return out.view(r, ph, pw, c).permute(0, 3, 1, 2)

