"""Region store core: schema, padding and masking, writing and validation."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest

from vlprobe.extract.regions.boxes import (
    BOX_TOLERANCE,
    check_normalised_boxes,
)
from vlprobe.extract.regions.store import (
    RegionBatch,
    RegionRecord,
    RegionStore,
    RegionWriter,
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
        "done": ("bool", (3,)),
    }
    with h5py.File(path, "r") as f:
        assert f.attrs["schema"] == "vlprobe-regions"
        assert int(f.attrs["schema_version"]) == 2
        assert bool(f.attrs["complete"]) and f["done"][()].all()
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


def test_version_1_files_are_still_read(tmp_path: Path) -> None:
    path = write_regions(tmp_path / "r.h5", **_arrays())
    with h5py.File(path, "r+") as f:  # what vlprobe wrote before the done mask
        del f["done"]
        del f.attrs["complete"]
        f.attrs["schema_version"] = 1
    with RegionStore(path) as store:
        assert store.schema_version == 1 and store.complete and store.done.all()
        assert store.get(["img_1"]).num_boxes.tolist() == [2]


def test_incomplete_files_are_refused_unless_asked(tmp_path: Path) -> None:
    path = write_regions(tmp_path / "r.h5", **_arrays())
    with h5py.File(path, "r+") as f:  # as an interrupted `probe regions extract` leaves it
        f["done"][1] = False
        f["num_boxes"][1] = 0
        f.attrs["complete"] = False
    with pytest.raises(ValueError, match=r"incomplete \(2 of 3 images written\); rerun"):
        RegionStore(path)
    with RegionStore(path, allow_incomplete=True) as store:
        assert not store.complete and store.done.tolist() == [True, False, True]
        assert "img_1" not in store and store.missing(["img_0", "img_1"]) == ["img_1"]
        assert [r.image_id for r in store.records()] == ["img_0", "img_2"]
        with pytest.raises(ValueError, match="no features for image 'img_1'"):
            store.get(["img_1"])
