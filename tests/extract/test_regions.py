"""Region store core: schema, padding and masking, box conversions, random features."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vlprobe.extract.regions import (
    BOX_TOLERANCE,
    RegionBatch,
    RegionRecord,
    RegionStore,
    RegionWriter,
    boxes_to_4d,
    boxes_to_6d,
    boxes_to_7d,
    check_normalised_boxes,
    normalise_boxes,
    normalise_image_id,
    pixel_boxes,
    random_regions,
    write_regions,
)


def _arrays(n: int = 3, r: int = 5, d: int = 8, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0, 0.5, size=(n, r, 2))
    boxes = np.concatenate([xy, xy + rng.uniform(0.1, 0.5, size=(n, r, 2))], axis=-1).astype(np.float32)
    return dict(
        image_ids=[f"img_{i}" for i in range(n)],
        features=rng.uniform(0, 1, size=(n, r, d)).astype(np.float32),
        boxes=boxes,
        num_boxes=np.array([r, 2, 1][:n]),
        image_w=np.array([640, 500, 300][:n]),
        image_h=np.array([480, 375, 200][:n]),
    )


def test_schema_golden(tmp_path: Path, h5_tree) -> None:
    a = _arrays()
    path = write_regions(tmp_path / "r.h5", **a, meta={"source_format": "test"})
    assert h5_tree(path) == {
        "image_id": ("str", (3,)),
        "features": ("float32", (3, 5, 8)),
        "boxes": ("float32", (3, 5, 4)),
        "num_boxes": ("int32", (3,)),
        "image_w": ("int32", (3,)),
        "image_h": ("int32", (3,)),
    }
    with h5py.File(path, "r") as f:
        assert f.attrs["schema"] == "vlprobe-regions"
        assert int(f.attrs["schema_version"]) == 1
        meta = json.loads(f.attrs["meta"])
    assert meta["source_format"] == "test" and meta["converter"].startswith("vlprobe ")


def test_store_get_pads_masks_and_orders(tmp_path: Path) -> None:
    a = _arrays()
    a["features"][1, 2:] = 99.0  # junk beyond num_boxes must not leak into the store
    path = write_regions(tmp_path / "r.h5", **a)
    with RegionStore(path) as store:
        assert store.image_ids == ("img_0", "img_1", "img_2")
        assert (len(store), store.feature_dim, store.max_boxes) == (3, 8, 5)
        assert "img_1" in store and "img_1.png" in store and "nope" not in store
        assert store.missing(["img_1", "nope", "img_0.jpg", "x"]) == ["nope", "x"]
        batch = store.get(["img_2", "img_0", "img_2", "img_1"])
        assert isinstance(batch, RegionBatch)
        assert batch.features.dtype == np.float32 and batch.features.shape == (4, 5, 8)
        assert batch.boxes.shape == (4, 5, 4) and batch.mask.dtype == bool
        assert batch.image_w.dtype == np.int64 and batch.image_w.tolist() == [300, 640, 300, 500]
        assert batch.mask.sum(1).tolist() == [1, 5, 1, 2] == batch.num_boxes.tolist()
        np.testing.assert_array_equal(batch.features[1], a["features"][0])
        np.testing.assert_array_equal(batch.features[3, :2], a["features"][1, :2])
        assert not batch.features[~batch.mask].any() and not batch.boxes[~batch.mask].any()
        np.testing.assert_allclose(batch.boxes[3, :2], a["boxes"][1, :2])
        assert store.fingerprint.startswith("sha256:") and len(store.fingerprint) == 71


def test_store_missing_image_error(tmp_path: Path) -> None:
    path = write_regions(tmp_path / "regions.h5", **_arrays())
    with RegionStore(path) as store, pytest.raises(ValueError) as err:
        store.get(["img_0", "ex_3_img_1"])
    assert str(err.value) == "regions: no features for image 'ex_3_img_1' in regions.h5 (3 images)"


@pytest.mark.parametrize("make, needle", [
    (lambda p: None, "no such file"),
    (lambda p: p.write_text("hello"), "is not an HDF5 file"),
    (lambda p: h5py.File(p, "w").close(), "is not a vlprobe region file"),
])
def test_store_refuses_bad_files(tmp_path: Path, make, needle: str) -> None:
    path = tmp_path / "bad.h5"
    make(path)
    with pytest.raises(ValueError, match=needle):
        RegionStore(path)


def test_store_refuses_other_schema_version(tmp_path: Path) -> None:
    path = write_regions(tmp_path / "r.h5", **_arrays())
    with h5py.File(path, "a") as f:
        f.attrs["schema_version"] = 7
    with pytest.raises(ValueError, match="schema_version 7"):
        RegionStore(path)


def test_write_regions_float16_and_ids_normalised(tmp_path: Path) -> None:
    a = _arrays()
    a["features"] = a["features"].astype(np.float16)
    a["image_ids"] = ["images/img_0.jpg", "img_1.PNG", "img_2"]
    with RegionStore(write_regions(tmp_path / "r.h5", **a)) as store:
        assert store.feature_dtype == "float16"
        assert store.image_ids == ("img_0", "img_1", "img_2")
        assert store.get(["img_0"]).features.dtype == np.float32


@pytest.mark.parametrize("change, needle", [
    (lambda a: a["features"].__setitem__((0, 0, 0), np.nan), "NaN or inf"),
    (lambda a: a["features"].__setitem__((1, 0, 0), np.inf), "image 'img_1': features contain NaN or inf"),
    (lambda a: a["boxes"].__setitem__((0, 0, 2), 1.5), "must lie in [0, 1]"),
    (lambda a: a["boxes"].__setitem__((0, 0, 0), 0.9), "x1 <= x2"),
    (lambda a: a["image_ids"].__setitem__(2, "img_0.png"), "image 'img_0' appears twice"),
    (lambda a: a.__setitem__("num_boxes", np.array([0, 1, 1])), "num_boxes: expected values in [1, 5]"),
    (lambda a: a["image_ids"].pop(), "image_ids: expected 3 ids"),
])
def test_write_regions_validation(tmp_path: Path, change, needle: str) -> None:
    a = _arrays()
    change(a)
    with pytest.raises(ValueError) as err:
        write_regions(tmp_path / "r.h5", **a)
    assert needle in str(err.value)
    assert not (tmp_path / "r.h5").exists()
    assert not list(tmp_path.iterdir())  # no temporary file left behind


def test_boxes_inside_tolerance_are_clipped() -> None:
    b = np.array([[-BOX_TOLERANCE / 2, 0.1, 1 + BOX_TOLERANCE / 2, 0.5]])
    out = check_normalised_boxes(b)
    np.testing.assert_allclose(out, [[0.0, 0.1, 1.0, 0.5]])


def test_writer_variable_boxes_and_extras(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    counts = [3, 7, 1]
    with RegionWriter(tmp_path / "r.h5", dtype="float16") as w:
        for i, k in enumerate(counts):
            w.add(RegionRecord(f"i{i}", rng.uniform(size=(k, 4)), np.tile([0, 0, 1, 1], (k, 1)), 10, 20,
                               {"conf": rng.uniform(size=k).astype(np.float32)}))
    with RegionStore(tmp_path / "r.h5") as s:
        assert s.max_boxes == 7 and s.extras == ("conf",)
        assert s.num_boxes.tolist() == counts
        recs = list(s.records(batch_size=2))
        assert [r.num_boxes for r in recs] == counts and recs[1].extras["conf"].shape == (7,)


def test_writer_refuses_width_change_and_extras_change(tmp_path: Path) -> None:
    box = np.array([[0, 0, 1, 1]])
    with pytest.raises(ValueError, match="feature width 5, expected 4"), RegionWriter(tmp_path / "a.h5") as w:
        w.add(RegionRecord("a", np.ones((1, 4)), box, 1, 1))
        w.add(RegionRecord("b", np.ones((1, 5)), box, 1, 1))
    with pytest.raises(ValueError, match="side data"), RegionWriter(tmp_path / "b.h5") as w:
        w.add(RegionRecord("a", np.ones((1, 4)), box, 1, 1, {"conf": np.ones(1)}))
        w.add(RegionRecord("b", np.ones((1, 4)), box, 1, 1))
    assert not list(tmp_path.iterdir())


# -- boxes ----------------------------------------------------------------------------------

def _random_boxes(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    xy = rng.uniform(0, 0.8, size=(*shape, 2))
    return np.concatenate([xy, xy + rng.uniform(0, 0.2, size=(*shape, 2))], axis=-1)


_coord = st.floats(0.0, 1.0, allow_nan=False, width=32)


@st.composite
def _box_sets(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n_img, n_box = draw(st.integers(1, 4)), draw(st.integers(1, 6))
    flat = draw(st.lists(_coord, min_size=n_img * n_box * 4, max_size=n_img * n_box * 4))
    c = np.array(flat, dtype=np.float64).reshape(n_img, n_box, 2, 2)
    b = np.concatenate([c.min(axis=2), c.max(axis=2)], axis=-1)  # x1<=x2, y1<=y2
    w = np.array(draw(st.lists(st.integers(1, 5000), min_size=n_img, max_size=n_img)))[:, None]
    h = np.array(draw(st.lists(st.integers(1, 5000), min_size=n_img, max_size=n_img)))[:, None]
    return b, w, h


@settings(max_examples=60, deadline=None)
@given(_box_sets())
def test_box_conversions_properties(case: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
    b, w, h = case
    px = pixel_boxes(b, w, h)
    assert px.shape == b.shape and px.dtype == np.float32
    assert np.all(px[..., 0] <= w) and np.all(px[..., 3] <= h)
    np.testing.assert_allclose(normalise_boxes(px, w, h), b, atol=1e-6)
    b6, b7 = boxes_to_6d(b), boxes_to_7d(b)
    np.testing.assert_allclose(b6[..., 4], b[..., 2] - b[..., 0], atol=1e-6)
    np.testing.assert_allclose(b6[..., 5], b[..., 3] - b[..., 1], atol=1e-6)
    np.testing.assert_allclose(b7[..., :6], b6, atol=1e-7)
    np.testing.assert_allclose(b7[..., 6], b6[..., 4] * b6[..., 5], atol=1e-6)
    for form in (b, b6, b7):
        np.testing.assert_allclose(boxes_to_4d(form), b, atol=1e-6)
        np.testing.assert_allclose(boxes_to_7d(form), b7, atol=1e-6)
    assert np.all((b7 >= 0) & (b7 <= 1))
    assert not boxes_to_7d(np.zeros((2, 4))).any()


@settings(max_examples=40, deadline=None)
@given(st.floats(-0.5, 1.5, allow_nan=False), st.floats(0.0, 0.05))
def test_tolerance_clips_or_refuses(x: float, tol: float) -> None:
    box = np.array([[min(x, 1.0), 0.0, max(x, 1.0), 1.0]])
    if -tol <= x <= 1 + tol:
        out = check_normalised_boxes(box, tolerance=tol)
        assert out.min() >= 0 and out.max() <= 1
    else:
        with pytest.raises(ValueError, match="must lie in"):
            check_normalised_boxes(box, tolerance=tol)


def test_normalise_boxes_rejects_pixels_and_swapped_sizes() -> None:
    px = np.array([[10.0, 20.0, 600.0, 300.0]])
    with pytest.raises(ValueError, match="must lie in"):
        check_normalised_boxes(px)
    with pytest.raises(ValueError, match="swapped"):
        normalise_boxes(px, 400, 640)  # width 640 given as height
    np.testing.assert_allclose(normalise_boxes(px, 640, 400), [[10 / 640, 20 / 400, 600 / 640, 300 / 400]], rtol=1e-6)
    with pytest.raises(ValueError, match=r"shape \(\.\.\., 4\)"):
        normalise_boxes(np.zeros((2, 5)), 1, 1)


@pytest.mark.parametrize("raw, want", [
    ("images/ex_3_img_1.png", "ex_3_img_1"), ("ex_3_img_1", "ex_3_img_1"), (42, "42"),
    ("COCO_val2014_000000000042.jpg", "COCO_val2014_000000000042"), (b"x.npz", "x"),
    ("C:\\data\\a.JPEG", "a"), ("v1.5_img", "v1.5_img"), ("  7 ", "7"),
])
def test_normalise_image_id(raw: object, want: str) -> None:
    assert normalise_image_id(raw) == want


# -- random ---------------------------------------------------------------------------------

def test_random_regions_deterministic_and_valid(tmp_path: Path) -> None:
    names = [f"ex_{i}_img_{j}" for i in range(4) for j in (0, 1)]
    kw = dict(n_boxes=10, dim=16, min_boxes=3, sizes=[(64 + i, 48) for i in range(8)])
    a = random_regions(tmp_path / "a.h5", names, seed=3, **kw)
    b = random_regions(tmp_path / "b.h5", names, seed=3, **kw)
    c = random_regions(tmp_path / "c.h5", names, seed=4, **kw)
    with RegionStore(a) as sa, RegionStore(b) as sb, RegionStore(c) as sc:
        ba, bb, bc = sa.get(names), sb.get(names), sc.get(names)
        for field_ in ("features", "boxes", "mask", "image_w", "image_h"):
            np.testing.assert_array_equal(getattr(ba, field_), getattr(bb, field_))
        assert not np.array_equal(ba.features, bc.features)
        assert sa.fingerprint != sc.fingerprint
        assert ba.features.min() >= 0 and ba.features.shape == (8, sa.max_boxes, 16)
        assert sa.max_boxes <= 10 and ba.num_boxes.min() >= 3 and len(set(ba.num_boxes.tolist())) > 1
        real = ba.boxes[ba.mask]
        assert np.all(real[:, 2] > real[:, 0]) and np.all(real[:, 3] > real[:, 1]) and real.max() <= 1
        assert ba.image_w.tolist() == [64 + i for i in range(8)]
        assert sa.meta["seed"] == 3 and sa.meta["source_format"] == "random"


def test_random_regions_fixed_count_default(tmp_path: Path) -> None:
    with RegionStore(random_regions(tmp_path / "r.h5", ["a", "b"], dim=4)) as s:
        assert s.max_boxes == 36 and s.num_boxes.tolist() == [36, 36]
        assert s.get(["a"]).image_w.tolist() == [640]


@pytest.mark.parametrize("kw, needle", [
    (dict(n_boxes=0), "n_boxes"), (dict(min_boxes=40), "min_boxes"), (dict(dtype="int8"), "dtype"),
    (dict(sizes=[(1, 1)]), "sizes"),
])
def test_random_regions_bad_args(tmp_path: Path, kw: dict, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        random_regions(tmp_path / "r.h5", ["a", "b"], dim=4, **kw)


def test_float16_storage_refuses_features_it_cannot_hold(tmp_path: Path) -> None:
    """A float32 feature beyond float16's range would be stored as inf and fail only when read."""
    a = _arrays(n=1, r=2, d=4)
    a["features"][0, 0, 0] = 1e5
    with pytest.raises(ValueError, match=r"img_0.*float16's range.*float32"):
        write_regions(tmp_path / "r.h5", **a, dtype="float16")
    assert not (tmp_path / "r.h5").exists()
    write_regions(tmp_path / "r32.h5", **a, dtype="float32")


def test_get_ignores_padding_and_refuses_non_finite_real_boxes(tmp_path: Path) -> None:
    path = write_regions(tmp_path / "r.h5", **_arrays())  # image 1 has 2 of 5 boxes
    with h5py.File(path, "r+") as f:
        f["features"][1, 4, 0] = np.nan  # padding: never read
    with RegionStore(path) as store:
        batch = store.get(["img_1"])
        assert np.isfinite(batch.features).all() and not batch.mask[0, 4]
    with h5py.File(path, "r+") as f:
        f["boxes"][2, 0, 1] = np.nan  # a real box of image 2
    with RegionStore(path) as store, pytest.raises(ValueError, match=r"boxes of image 'img_2'.*NaN"):
        store.get(["img_0", "img_2"])
