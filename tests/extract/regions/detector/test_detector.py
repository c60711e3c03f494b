"""The whole detector on the tiny checkpoint: loading, batching, presets, per-image errors."""

from __future__ import annotations

import json
import pickle
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from tests.extract.regions.detector.helpers import drawn_image
from vlprobe.extract.regions.detector import (
    DetectorInputError,
    ImageTooSmallError,
    RegionDetector,
    StageTimer,
    TooFewBoxesError,
    get_preset,
)
from vlprobe.extract.regions.detector.checkpoint import WEIGHTS_NAME, normalize_keys
from vlprobe.extract.regions.detector.config import read_config
from vlprobe.extract.regions.detector.model import VGFasterRCNN

PRESET_NAMES = ("lxmert-36", "uniter-10-100", "hf-frcnn")


def _copy_checkpoint(src: Path, dst: Path, state: dict | None = None) -> Path:
    dst.mkdir()
    (dst / "config.yaml").write_bytes((src / "config.yaml").read_bytes())
    if state is None:
        (dst / WEIGHTS_NAME).write_bytes((src / WEIGHTS_NAME).read_bytes())
    else:
        torch.save(state, dst / WEIGHTS_NAME)
    return dst


def test_tiny_checkpoint_has_exactly_the_models_keys(tiny_frcnn_dir: Path) -> None:
    state = torch.load(tiny_frcnn_dir / WEIGHTS_NAME, weights_only=True)
    model = VGFasterRCNN(read_config(tiny_frcnn_dir))
    assert set(normalize_keys(state)) == set(model.state_dict())
    # The hub file's extras: batch-norm counters and the stored cell anchors.
    assert any(k.endswith("norm.num_batches_tracked") for k in state)
    assert "proposal_generator.anchor_generator.cell_anchors.0" in state
    for key in ("backbone.stem.conv1.norm.running_var", "backbone.res4.5.conv3.weight", "roi_heads.res5.0.shortcut.weight",
                "roi_heads.box_predictor.cls_embedding.weight", "roi_heads.box_predictor.attr_score.bias",
                "proposal_generator.rpn_head.anchor_deltas.weight"):
        assert key in state


def test_detect_returns_the_interface_per_image(tiny_detector: RegionDetector, mixed_images) -> None:
    dets = tiny_detector.detect(mixed_images[:2], "lxmert-36")
    assert len(dets) == 2
    for det, img in zip(dets, mixed_images[:2], strict=True):
        assert (det.image_w, det.image_h) == img.size
        assert det.boxes.shape == (36, 4) and det.boxes.dtype == np.float32
        assert det.features.shape == (36, 2048) and det.features.dtype == np.float32
        assert det.objects_id.dtype == np.int64 and det.attrs_id.dtype == np.int64
        assert det.objects_conf.dtype == np.float32 and det.attrs_conf.dtype == np.float32
        assert det.objects_id.min() >= 0 and det.objects_id.max() < 24
        assert det.attrs_id.min() >= 0 and det.attrs_id.max() < 12
        assert np.all((det.objects_conf > 0) & (det.objects_conf <= 1))
        # Boxes lie in the original image.
        assert np.all(det.boxes[:, [0, 2]] >= 0) and np.all(det.boxes[:, [0, 2]] <= img.width)
        assert np.all(det.boxes[:, [1, 3]] >= 0) and np.all(det.boxes[:, [1, 3]] <= img.height)
        assert np.all(det.boxes[:, 2] >= det.boxes[:, 0]) and np.all(det.boxes[:, 3] >= det.boxes[:, 1])
    assert tiny_detector.feature_dim == 2048
    assert tiny_detector.fingerprint.startswith("sha256:")


@pytest.mark.parametrize("preset", PRESET_NAMES)
def test_a_batch_of_four_equals_each_image_alone(tiny_detector: RegionDetector, mixed_images, preset: str) -> None:
    batch = tiny_detector.detect(mixed_images, preset)
    for img, got in zip(mixed_images, batch, strict=True):
        (alone,) = tiny_detector.detect([img], preset)
        # Same boxes chosen; floats within tolerance: a padded batch runs other convolution
        # shapes than a single image, so BLAS may sum in another order.
        np.testing.assert_array_equal(got.objects_id, alone.objects_id)
        np.testing.assert_array_equal(got.attrs_id, alone.attrs_id)
        np.testing.assert_allclose(got.boxes, alone.boxes, rtol=1e-4, atol=1e-3)
        np.testing.assert_allclose(got.features, alone.features, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(got.objects_conf, alone.objects_conf, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(got.attrs_conf, alone.attrs_conf, rtol=1e-4, atol=1e-5)


def test_detect_is_deterministic(tiny_detector: RegionDetector, mixed_images, tiny_frcnn_dir: Path) -> None:
    a = tiny_detector.detect(mixed_images[1:3], "uniter-10-100")
    b = RegionDetector.load(tiny_frcnn_dir, device="cpu").detect(mixed_images[1:3], "uniter-10-100")
    for x, y in zip(a, b, strict=True):
        # The same computation twice (same shapes, same thread count): identical results.
        np.testing.assert_array_equal(x.boxes, y.boxes)
        np.testing.assert_array_equal(x.features, y.features)


def test_nms_removes_boxes_and_the_presets_pick_different_counts(tiny_detector: RegionDetector, mixed_images) -> None:
    counts = {p: [d.num_boxes for d in tiny_detector.detect(mixed_images, p)] for p in PRESET_NAMES}
    assert counts["lxmert-36"] == [36] * 4
    assert all(10 <= n <= 100 for n in counts["uniter-10-100"])
    assert counts["uniter-10-100"] != counts["lxmert-36"]
    assert all(10 <= n <= 36 for n in counts["hf-frcnn"])  # the tiny config's min/max_detections
    # The random weights give confident detections: the threshold 0.2 keeps some boxes, not all.
    dets = tiny_detector.detect(mixed_images[:1], "uniter-10-100")
    assert dets[0].objects_conf.max() > 0.5
    # NMS does remove proposals: the RPN keeps fewer than the image's anchors.
    cfg = tiny_detector.config
    batch_boxes = tiny_detector.model.proposal_generator
    assert batch_boxes is not None and cfg.post_nms_topk < 4 * 4 * cfg.num_anchors


def test_hf_frcnn_feeds_rgb_and_the_others_bgr(tiny_detector: RegionDetector) -> None:
    assert get_preset("hf-frcnn").channel_order == "rgb"
    assert get_preset("lxmert-36").channel_order == "bgr"
    img = drawn_image(70, 90, seed=11)
    rgb = tiny_detector.detect([img], get_preset("lxmert-36").with_overrides(channel_order="rgb"))[0]
    bgr = tiny_detector.detect([img], "lxmert-36")[0]
    assert not np.allclose(rgb.features, bgr.features)


def test_an_image_too_small_for_the_backbone_is_named(tiny_detector: RegionDetector, mixed_images) -> None:
    sliver = Image.new("RGB", (400, 3), (255, 0, 0))  # resizes to 112 x 1 pixels: no feature map
    with pytest.raises(ImageTooSmallError, match=r"^image 1 of the batch: a 400x3 image resizes to 112x1 pixels, too small") as exc:
        tiny_detector.detect([mixed_images[0], sliver], "lxmert-36")
    assert exc.value.index == 1 and "\n" not in str(exc.value)
    with pytest.raises(ImageTooSmallError, match="image 0 of the batch: the image is 0x5 pixels"):
        tiny_detector.detect([Image.new("RGB", (0, 5))])


def test_too_few_boxes_is_a_per_image_error(tiny_detector: RegionDetector, mixed_images) -> None:
    greedy = get_preset("lxmert-36").with_overrides(min_boxes=60, max_boxes=60)
    with pytest.raises(TooFewBoxesError, match=r"^image 0 of the batch: only \d+ candidate boxes") as exc:
        tiny_detector.detect(mixed_images[:2], greedy)
    assert exc.value.index == 0


def test_images_must_be_pil(tiny_detector: RegionDetector) -> None:
    with pytest.raises(DetectorInputError, match=r"images\[0\]: expected a PIL image, got ndarray"):
        tiny_detector.detect([np.zeros((8, 8, 3), np.uint8)])
    with pytest.raises(DetectorInputError, match="at least one image"):
        tiny_detector.detect([])


def test_describe_is_json_and_states_the_config(tiny_detector: RegionDetector) -> None:
    d = tiny_detector.describe()
    json.dumps(d)
    assert d["depth"] == 50 and d["num_classes"] == 24 and d["num_attributes"] == 12
    assert d["feature_dim"] == 2048 and d["input_format"] == "BGR" and d["min_size"] == 64
    assert d["pixel_mean"] == [102.9801, 115.9465, 122.7717]
    resolved = tiny_detector.resolve("hf-frcnn")
    assert (resolved.min_boxes, resolved.max_boxes, resolved.nms_threshold) == (10, 36, (0.3, 0.5, 0.7))
    json.dumps(resolved.to_dict())


def test_stage_timer_accounts_every_stage(tiny_detector: RegionDetector, mixed_images) -> None:
    timer = StageTimer()
    tiny_detector.detect(mixed_images[:2], "lxmert-36", timer=timer)
    assert timer.calls == 1
    assert set(timer.seconds) == {"preprocess", "backbone", "rpn", "roi_heads", "selection"}
    assert all(v > 0 for v in timer.seconds.values())
    assert sum(timer.shares().values()) == pytest.approx(1.0)


def test_legacy_gamma_beta_names_load(tiny_frcnn_dir: Path, tmp_path: Path, mixed_images) -> None:
    state = torch.load(tiny_frcnn_dir / WEIGHTS_NAME, weights_only=True)
    legacy = {}
    for k, v in state.items():
        if ".norm." in k and k.endswith((".weight", ".bias")):
            k = k.rsplit(".", 1)[0] + (".gamma" if k.endswith(".weight") else ".beta")
        legacy[k] = v
    assert any(k.endswith(".gamma") for k in legacy)
    d = _copy_checkpoint(tiny_frcnn_dir, tmp_path / "legacy", legacy)
    new = RegionDetector.load(d, device="cpu").detect(mixed_images[:1])[0]
    old = RegionDetector.load(tiny_frcnn_dir, device="cpu").detect(mixed_images[:1])[0]
    np.testing.assert_array_equal(new.features, old.features)


def test_a_state_dict_of_the_wrong_shapes_is_refused_naming_the_key(tiny_frcnn_dir: Path, tmp_path: Path) -> None:
    state = torch.load(tiny_frcnn_dir / WEIGHTS_NAME, weights_only=True)
    state["roi_heads.box_predictor.cls_score.weight"] = torch.zeros(7, 2048)
    d = _copy_checkpoint(tiny_frcnn_dir, tmp_path / "bad", state)
    with pytest.raises(DetectorInputError, match=r"key 'roi_heads.box_predictor.cls_score.weight' has shape \(7, 2048\)") as exc:
        RegionDetector.load(d, device="cpu")
    assert "\n" not in str(exc.value)
    state.pop("roi_heads.box_predictor.cls_score.weight")
    d2 = _copy_checkpoint(tiny_frcnn_dir, tmp_path / "missing", state)
    with pytest.raises(DetectorInputError, match=r"missing key 'roi_heads\.box_predictor\.cls_score\.weight'"):
        RegionDetector.load(d2, device="cpu")
    state["roi_heads.box_predictor.cls_score.weight"] = torch.zeros(25, 2048)
    state["extra.weight"] = torch.zeros(1)
    d3 = _copy_checkpoint(tiny_frcnn_dir, tmp_path / "extra", state)
    with pytest.raises(DetectorInputError, match=r"unexpected key 'extra\.weight'"):
        RegionDetector.load(d3, device="cpu")


def test_a_folder_without_config_or_weights_is_refused(tiny_frcnn_dir: Path, tmp_path: Path) -> None:
    no_cfg = tmp_path / "no-config"
    no_cfg.mkdir()
    (no_cfg / WEIGHTS_NAME).write_bytes((tiny_frcnn_dir / WEIGHTS_NAME).read_bytes())
    with pytest.raises(DetectorInputError, match=r"no config\.yaml in"):
        RegionDetector.load(no_cfg)
    no_w = tmp_path / "no-weights"
    no_w.mkdir()
    (no_w / "config.yaml").write_bytes((tiny_frcnn_dir / "config.yaml").read_bytes())
    with pytest.raises(DetectorInputError, match=r"no pytorch_model\.bin in"):
        RegionDetector.load(no_w)
    with pytest.raises(ValueError, match="is not a directory"):
        RegionDetector.load(tmp_path / "nowhere" / "x")


class _Evil:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_a_malicious_pickle_is_refused_by_weights_only(tiny_frcnn_dir: Path, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    d = tmp_path / "evil"
    d.mkdir()
    (d / "config.yaml").write_bytes((tiny_frcnn_dir / "config.yaml").read_bytes())
    torch.save({"backbone.stem.conv1.weight": _Evil(marker)}, d / WEIGHTS_NAME)
    with pytest.raises(DetectorInputError, match="cannot read as a torch state dict with weights_only=True") as exc:
        RegionDetector.load(d, device="cpu")
    assert not marker.exists() and "\n" not in str(exc.value)
    # A bare pickle (not a torch file) too.
    with open(d / WEIGHTS_NAME, "wb") as fh:
        pickle.dump(_Evil(marker), fh, protocol=2)
    with pytest.raises(DetectorInputError, match="weights_only=True"):
        RegionDetector.load(d, device="cpu")
    assert not marker.exists()


def test_an_uncached_hub_id_fails_fast_offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    t0 = time.monotonic()
    with pytest.raises(DetectorInputError, match="not in the local hub cache") as exc:
        RegionDetector.load("unc-nlp/frcnn-vg-finetuned", device="cpu")
    assert time.monotonic() - t0 < 15
    assert "hf download unc-nlp/frcnn-vg-finetuned" in str(exc.value)


def test_device_and_dtype_are_checked(tiny_frcnn_dir: Path) -> None:
    with pytest.raises(ValueError, match="device must be"):
        RegionDetector.load(tiny_frcnn_dir, device="tpu")
    with pytest.raises(ValueError, match="dtype must be one of"):
        RegionDetector.load(tiny_frcnn_dir, device="cpu", dtype="bfloat16")


def test_float16_runs_and_stays_close_to_float32(tiny_frcnn_dir: Path, mixed_images) -> None:
    half = RegionDetector.load(tiny_frcnn_dir, device="cpu", dtype="float16")
    full = RegionDetector.load(tiny_frcnn_dir, device="cpu")
    fh = half.detect(mixed_images[:1], "lxmert-36")[0]
    ff = full.detect(mixed_images[:1], "lxmert-36")[0]
    assert fh.features.dtype == np.float32 and fh.features.shape == ff.features.shape
    # float16 rounds every layer: only the scale of the features is compared.
    assert abs(float(fh.features.mean()) - float(ff.features.mean())) < 0.05 * float(np.abs(ff.features).mean()) + 1e-3


def test_the_full_size_detector_builds_from_the_default_config() -> None:
    det = RegionDetector.random(seed=0)
    d = det.describe()
    assert (d["depth"], d["num_classes"], d["num_attributes"], d["feature_dim"]) == (101, 1600, 400, 2048)
    assert (d["min_size"], d["max_size"], d["pooler_resolution"], d["rpn_post_nms_topk"]) == (600, 1000, 14, 300)
    n = sum(p.numel() for p in det.model.parameters()) + sum(b.numel() for b in det.model.buffers())
    assert n > 50_000_000
    assert det.fingerprint.startswith("random:seed=0:")
    with pytest.raises(DetectorInputError, match="seed must be"):
        RegionDetector.random(seed=-1)
def test_fixture_images_give_detections_on_a_real_drawing(tiny_detector: RegionDetector) -> None:
    (det,) = tiny_detector.detect([drawn_image(90, 90, seed=5)], "uniter-10-100")
    assert 10 <= det.num_boxes <= 48
