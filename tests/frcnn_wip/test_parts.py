"""Anchors, box coding, config reading, presets, selection rules, labels and the fixture writer."""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

import pytest
import torch
import yaml
from _frcnn_helpers import drawn_image

from vlprobe.frcnn_wip import DetectorInputError, RegionDetector, get_preset, load_labels
from vlprobe.frcnn_wip.anchors import cell_anchors, grid_anchors
from vlprobe.frcnn_wip.backbone import ResNetC4
from vlprobe.frcnn_wip.box_coder import (
    SCALE_CLAMP,
    clip_boxes,
    decode_boxes,
    encode_boxes,
    nonempty,
)
from vlprobe.frcnn_wip.config import config_from_dict, default_config_dict, read_config
from vlprobe.frcnn_wip.fixture import (
    TINY_ATTRIBUTES,
    TINY_OBJECTS,
    tiny_config_dict,
    write_tiny_frcnn,
)
from vlprobe.frcnn_wip.preprocess import resized_size
from vlprobe.frcnn_wip.presets import PRESETS
from vlprobe.frcnn_wip.selection import select_butd, select_hf

# --- anchors and boxes -------------------------------------------------------------------------


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


# --- config ------------------------------------------------------------------------------------


def test_default_config_is_the_published_model() -> None:
    cfg = config_from_dict(default_config_dict())
    assert (cfg.depth, cfg.num_classes, cfg.num_attrs, cfg.feature_dim) == (101, 1600, 400, 2048)
    assert cfg.num_anchors == 12 and cfg.pooler_resolution == 14 and cfg.roi_bbox_weights == (10, 10, 5, 5)
    assert cfg.input_format == "BGR" and cfg.caffe_max_pool and not cfg.res5_halve


def test_config_keys_are_read_case_insensitively_and_in_the_detectron2_layout(tmp_path: Path) -> None:
    def upper(d):
        return {k.upper(): upper(v) for k, v in d.items()} if isinstance(d, dict) else d

    data = tiny_config_dict()
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(upper(data)))
    assert read_config(tmp_path) == config_from_dict(data)
    nested = {"model": {**data.pop("model"), **{k: data.pop(k) for k in ("resnets", "rpn", "roi_heads")}}, **data}
    assert config_from_dict(nested) == config_from_dict(tiny_config_dict())


def test_config_errors_name_the_key(tmp_path: Path) -> None:
    data = tiny_config_dict()
    del data["rpn"]["post_nms_topk_test"]
    with pytest.raises(DetectorInputError, match=r"missing key 'rpn\.post_nms_topk_test'"):
        config_from_dict(data)
    data = tiny_config_dict()
    data["resnets"]["depth"] = 34
    with pytest.raises(DetectorInputError, match=r"resnets\.depth must be one of \[50, 101, 152\], got 34"):
        config_from_dict(data)
    data = tiny_config_dict()
    data["rpn"]["in_features"] = ["p2", "p3"]
    with pytest.raises(DetectorInputError, match="the C4 detector"):
        config_from_dict(data)
    (tmp_path / "config.yaml").write_text("model: [unclosed")
    with pytest.raises(DetectorInputError, match="not a readable YAML file"):
        read_config(tmp_path)


# --- presets -----------------------------------------------------------------------------------


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
    with pytest.raises(DetectorInputError, match="max_boxes must be an integer >= 1, got 0"):
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


# --- selection rules ---------------------------------------------------------------------------


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


# --- labels ------------------------------------------------------------------------------------


def test_labels_from_a_folder_two_files_or_a_pair(tiny_frcnn_dir: Path) -> None:
    objects, attributes = load_labels(tiny_frcnn_dir, num_objects=24, num_attributes=12)
    assert objects == TINY_OBJECTS and attributes == TINY_ATTRIBUTES
    pair = (tiny_frcnn_dir / "objects_vocab.txt", tiny_frcnn_dir / "attributes_vocab.txt")
    assert load_labels(pair) == (objects, attributes)
    assert load_labels(f"{pair[0]},{pair[1]}") == (objects, attributes)
    with pytest.raises(DetectorInputError, match="the detector has 1600 classes, but the file lists 24"):
        load_labels(tiny_frcnn_dir, num_objects=1600)


def test_label_files_take_the_first_synonym_in_lower_case(tmp_path: Path) -> None:
    (tmp_path / "objects_vocab.txt").write_text("Man,Person\ntree\n\n")
    (tmp_path / "attributes_vocab.txt").write_text("White\n")
    assert load_labels(tmp_path) == (["man", "tree"], ["white"])
    (tmp_path / "attributes_vocab.txt").unlink()
    with pytest.raises(DetectorInputError, match=r"no attributes_vocab\.txt in"):
        load_labels(tmp_path)


def test_labels_from_an_uncached_hub_id_fail_fast_offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    t0 = time.monotonic()
    with pytest.raises(DetectorInputError, match=r"not in the local hub cache.*objects_vocab\.txt"):
        load_labels("someone/vg-vocab")
    assert time.monotonic() - t0 < 15
    with pytest.raises(DetectorInputError, match="is not a folder"):
        load_labels(str(tmp_path / "missing"))


# --- the fixture writer ------------------------------------------------------------------------


def test_fixture_is_byte_identical_for_a_seed(tmp_path: Path, tiny_frcnn_dir: Path) -> None:
    again = write_tiny_frcnn(tmp_path / "again", seed=0)
    other = write_tiny_frcnn(tmp_path / "other", seed=1)
    for name in sorted(os.listdir(tiny_frcnn_dir)):
        assert (again / name).read_bytes() == (tiny_frcnn_dir / name).read_bytes(), name
    assert (other / "pytorch_model.bin").read_bytes() != (again / "pytorch_model.bin").read_bytes()
    # Writing over a previous tiny-frcnn fixture is allowed; over anything else it is not.
    write_tiny_frcnn(again, seed=2)
    stranger = tmp_path / "stranger"
    stranger.mkdir()
    (stranger / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="not empty"):
        write_tiny_frcnn(stranger)
    assert (stranger / "notes.txt").read_text() == "mine"


def test_fixture_images_give_detections_on_a_real_drawing(tiny_detector: RegionDetector) -> None:
    (det,) = tiny_detector.detect([drawn_image(90, 90, seed=5)], "uniter-10-100")
    assert 10 <= det.num_boxes <= 48
