"""Box-selection presets, their overrides, and the two selection rules on hand-made cases."""

from __future__ import annotations

import pytest
import torch

from vlprobe.extract.regions.detector import (
    DetectorInputError,
    get_preset,
)
from vlprobe.extract.regions.detector.presets import PRESETS
from vlprobe.extract.regions.detector.selection import select_butd, select_hf


def test_presets_and_their_sources() -> None:
    assert set(PRESETS) == {"lxmert-36", "uniter-10-100", "hf-frcnn"}
    lx, un, hf = get_preset("lxmert-36"), get_preset("UNITER-10-100"), get_preset("hf-frcnn")
    assert (lx.min_boxes, lx.max_boxes, lx.rule, lx.channel_order) == (36, 36, "butd", "bgr")
    assert (un.min_boxes, un.max_boxes, un.min_score) == (10, 100, 0.2)
    assert (hf.rule, hf.channel_order, hf.min_boxes) == ("hf-frcnn", "rgb", None)
    assert all(p.source for p in PRESETS.values())
    with pytest.raises(DetectorInputError, match="did you mean 'uniter-10-100'"):
        get_preset("uniter-10-10")


def test_overrides_are_checked_naming_the_field() -> None:
    un = get_preset("uniter-10-100")
    assert un.with_overrides(min_boxes=5, max_boxes=50, min_score=0.3).to_dict()["max_boxes"] == 50
    assert un.with_overrides(min_boxes=None) == un
    with pytest.raises(DetectorInputError, match=r"min_boxes must be <= max_boxes \(10\), got 50"):
        un.with_overrides(min_boxes=50, max_boxes=10)
    with pytest.raises(DetectorInputError, match="max_boxes must be a positive integer, got 0"):
        un.with_overrides(max_boxes=0)
    with pytest.raises(DetectorInputError, match=r"min_score must be a number in \[0, 1\], got 1.5"):
        un.with_overrides(min_score=1.5)
    with pytest.raises(DetectorInputError, match="min_score: preset 'hf-frcnn' selects by NMS only"):
        get_preset("hf-frcnn").with_overrides(min_score=0.2)
    with pytest.raises(DetectorInputError, match="unknown preset field 'boxes'"):
        un.with_overrides(boxes=3)
    with pytest.raises(DetectorInputError, match="unknown channel_order 'rbg'"):
        un.with_overrides(channel_order="rbg")


def test_hf_preset_takes_its_counts_from_the_checkpoint() -> None:
    hf = get_preset("hf-frcnn")
    assert hf.resolved(10, 36, [0.5]).to_dict() | {} == hf.resolved(10, 36, (0.5,)).to_dict()
    r = hf.with_overrides(max_boxes=5).resolved(10, 36, [0.5])
    assert (r.min_boxes, r.max_boxes, r.nms_threshold) == (5, 5, (0.5,))

def _logits(probs: list[list[float]]) -> torch.Tensor:
    return torch.tensor(probs).log()


def test_butd_selection_hand_computed() -> None:
    boxes = torch.tensor([[0.0, 0, 10, 10], [1, 1, 11, 11], [50, 50, 60, 60], [0, 0, 10, 9]])
    # classes a, b, background (last)
    probs = [[0.7, 0.2, 0.1], [0.6, 0.3, 0.1], [0.1, 0.3, 0.6], [0.2, 0.75, 0.05]]
    preset = get_preset("uniter-10-100").with_overrides(min_boxes=1, max_boxes=3, min_score=0.5)
    sel = select_butd(0, boxes, _logits(probs), None, preset)
    # Box 1 loses class a to box 0 and class b to box 3: its confidence is 0; box 2 has 0.3.
    # Boxes 0 and 3 pass 0.5: kept in proposal order.
    assert sel.index.tolist() == [0, 3]
    assert sel.objects_id.tolist() == [0, 1]
    assert sel.objects_conf.tolist() == pytest.approx([0.7, 0.75])
    low = select_butd(0, boxes, _logits(probs), None, preset.with_overrides(min_boxes=3))
    assert low.index.tolist() == [3, 0, 2]  # too few above: the most confident (0.75, 0.7, 0.3)
    with pytest.raises(DetectorInputError, match="image 4 of the batch: only 4 candidate boxes"):
        select_butd(4, boxes, _logits(probs), None, preset.with_overrides(min_boxes=5, max_boxes=5))


def test_hf_selection_tops_up_when_every_threshold_leaves_too_few() -> None:
    boxes = torch.tensor([[0.0, 0, 10, 10], [0, 0, 10, 10.5], [0, 0, 10.2, 10], [30, 30, 40, 40]])
    probs = [[0.8, 0.1, 0.1], [0.7, 0.2, 0.1], [0.6, 0.3, 0.1], [0.2, 0.5, 0.3]]
    deltas = torch.zeros(4, 8)
    preset = get_preset("hf-frcnn").resolved(2, 3, [0.5])
    sel = select_hf(0, boxes, _logits(probs), None, deltas, (50, 50), (10, 10, 5, 5), preset)
    assert sel.index.tolist() == [0, 3]
    topped = select_hf(0, boxes, _logits(probs), None, deltas, (50, 50), (10, 10, 5, 5), get_preset("hf-frcnn").resolved(3, 3, [0.5]))
    assert topped.index.tolist() == [0, 3, 1]  # NMS leaves 2; the best removed box fills the third
