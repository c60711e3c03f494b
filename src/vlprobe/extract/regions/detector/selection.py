"""The two box-selection rules of the presets, for one image at a time.

Both take the image's proposals and RoI-head outputs and return the indices of the chosen
proposals with their boxes, object and attribute ids and confidences (see
:mod:`.presets` for what each rule does and where it comes from). The background class and
the "no attribute" class are the last logit of their heads.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .box_coder import clip_boxes, decode_boxes
from .errors import TooFewBoxesError
from .ops import classwise_nms_keep, nms
from .presets import SelectionPreset

__all__ = ["Selection", "select_butd", "select_hf"]


@dataclass
class Selection:
    """Chosen boxes of one image, in resized-image pixels."""

    index: Tensor  # (K,) int64 into the image's proposals
    boxes: Tensor  # (K, 4)
    objects_id: Tensor
    objects_conf: Tensor
    attrs_id: Tensor
    attrs_conf: Tensor


def _bounds(index: int, proposals: Tensor, preset: SelectionPreset) -> tuple[int, int, int, tuple[float, ...]]:
    """(proposals, min_boxes, max_boxes, NMS thresholds); too few proposals is the image's error."""
    if preset.min_boxes is None or preset.max_boxes is None or preset.nms_threshold is None:
        raise ValueError(f"preset {preset.name!r} is not resolved: pass it through Detector.resolve first")
    n = proposals.shape[0]
    lo, hi = int(preset.min_boxes), int(preset.max_boxes)
    if n < lo:
        raise TooFewBoxesError(
            index,
            f"only {n} candidate boxes (proposals) exist, but preset {preset.name!r} needs at least "
            f"{lo}; lower min_boxes",
        )
    return n, lo, hi, preset.nms_threshold


def _attributes(attr_logits: Tensor | None, k: int, softmax_first: bool) -> tuple[Tensor, Tensor]:
    if attr_logits is None:
        return torch.zeros(k, dtype=torch.int64), torch.zeros(k)
    logits = attr_logits.float()
    probs = logits.softmax(-1)[:, :-1] if softmax_first else logits[:, :-1].softmax(-1)
    conf, ids = probs.max(-1)
    return ids, conf


def select_butd(
    index: int, proposals: Tensor, obj_logits: Tensor, attr_logits: Tensor | None, preset: SelectionPreset
) -> Selection:
    """BUTD selection: per-class NMS confidence, threshold, ``min_boxes``..``max_boxes``."""
    _, lo, hi, thresholds = _bounds(index, proposals, preset)
    if preset.min_score is None:
        raise ValueError(f"preset {preset.name!r}: the butd rule needs min_score")
    probs = obj_logits.float().softmax(-1)[:, :-1]
    survive = classwise_nms_keep(proposals, probs, thresholds[0])
    max_conf = torch.where(survive, probs, torch.zeros_like(probs)).max(-1).values
    above = torch.nonzero(max_conf >= preset.min_score).flatten()
    if lo <= len(above) <= hi:
        chosen = above  # proposal order, as the extractor writes them
    else:
        ranked = torch.sort(max_conf, descending=True, stable=True).indices
        chosen = ranked[: lo if len(above) < lo else hi]
    conf, ids = probs[chosen].max(-1)
    a_ids, a_conf = _attributes(None if attr_logits is None else attr_logits[chosen], len(chosen), softmax_first=True)
    return Selection(chosen, proposals[chosen], ids, conf, a_ids, a_conf)


def select_hf(
    index: int,
    proposals: Tensor,
    obj_logits: Tensor,
    attr_logits: Tensor | None,
    deltas: Tensor,
    image_hw: tuple[int, int],
    weights: tuple[float, float, float, float],
    preset: SelectionPreset,
) -> Selection:
    """The reference port's selection: best-class regressed boxes, class-agnostic NMS."""
    n, lo, hi, thresholds = _bounds(index, proposals, preset)
    scores = obj_logits.float().softmax(-1)[:, :-1]
    k = scores.shape[1]
    boxes = clip_boxes(decode_boxes(deltas.float(), proposals.float(), weights).view(n, k, 4), *image_hw)
    best, classes = scores.max(-1)
    best_boxes = boxes[torch.arange(n), classes]
    keep = torch.zeros(0, dtype=torch.int64)
    for thr in thresholds:
        keep = nms(best_boxes, best, thr, max_keep=hi)
        if len(keep) >= lo:
            break
    if len(keep) < lo:
        # Every threshold left too few: top up with the best proposals NMS removed.
        rest = torch.ones(n, dtype=torch.bool)
        rest[keep] = False
        extra = torch.nonzero(rest).flatten()
        extra = extra[torch.sort(best[extra], descending=True, stable=True).indices]
        keep = torch.cat([keep, extra[: lo - len(keep)]])
    a_ids, a_conf = _attributes(None if attr_logits is None else attr_logits[keep], len(keep), softmax_first=False)
    return Selection(keep, best_boxes[keep], classes[keep], best[keep], a_ids, a_conf)
