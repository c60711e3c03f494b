"""Region-feature formats: round trips through every reader/writer, validation, CLI."""

from __future__ import annotations

import base64
import csv
import json
from pathlib import Path

import h5py
import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from vlprobe.cli import app
from vlprobe.data.winoground import load_winoground
from vlprobe.extract.regions.formats import (
    export_regions,
    import_regions,
    read_butd_tsv,
    read_lxmert_tsv,
    read_uniter_npz,
    region_info,
    uniter_box_count,
    write_butd_tsv,
    write_lxmert_tsv,
    write_uniter_npz,
)
from vlprobe.extract.regions.store import RegionRecord, RegionStore
from vlprobe.fixtures.regions import random_regions

runner = CliRunner()


def _records(n: int = 4, d: int = 12, seed: int = 0, extras: bool = False) -> list[RegionRecord]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        k = int(rng.integers(1, 9))
        w, h = int(rng.integers(100, 900)), int(rng.integers(100, 900))
        xy = rng.uniform(0, 0.6, size=(k, 2))
        boxes = np.concatenate([xy, xy + rng.uniform(0.05, 0.4, size=(k, 2))], axis=1).astype(np.float32)
        ex = {}
        if extras:
            ex = {"objects_id": rng.integers(0, 1600, k), "objects_conf": rng.uniform(size=k).astype(np.float32),
                  "attrs_id": rng.integers(0, 400, k), "attrs_conf": rng.uniform(size=k).astype(np.float32)}
        feats = np.maximum(rng.standard_normal((k, d)), 0).astype(np.float32)
        out.append(RegionRecord(str(1000 + i), feats, boxes, w, h, ex))
    return out


def _same(a: list[RegionRecord], b: list[RegionRecord], *, atol: float = 1e-6, extras: bool = True) -> None:
    assert [r.image_id for r in a] == [r.image_id for r in b]
    for x, y in zip(a, b, strict=True):
        assert (x.image_w, x.image_h, x.num_boxes) == (y.image_w, y.image_h, y.num_boxes)
        np.testing.assert_allclose(y.features, x.features, atol=atol, rtol=atol)
        np.testing.assert_allclose(y.boxes, x.boxes, atol=max(atol, 1e-6))
        if extras:
            assert sorted(x.extras) == sorted(y.extras)
            for k in x.extras:
                np.testing.assert_allclose(y.extras[k], x.extras[k], atol=atol)


def test_butd_tsv_round_trip(tmp_path: Path) -> None:
    recs = _records()
    path = write_butd_tsv(tmp_path / "f.tsv", recs)
    _same(recs, list(read_butd_tsv(path)))
    row = next(csv.reader(path.open(), delimiter="\t"))
    assert len(row) == 6 and row[1] == str(recs[0].image_w) and row[2] == str(recs[0].image_h)  # w before h
    px = np.frombuffer(base64.b64decode(row[4]), np.float32).reshape(-1, 4)
    np.testing.assert_allclose(px[:, 0], recs[0].boxes[:, 0] * recs[0].image_w, rtol=1e-6)


def test_lxmert_tsv_round_trip(tmp_path: Path) -> None:
    recs = _records(extras=True)
    path = write_lxmert_tsv(tmp_path / "f.tsv", recs)
    back = list(read_lxmert_tsv(path))
    _same(recs, back)
    assert back[0].extras["objects_id"].dtype == np.int64
    row = next(csv.reader(path.open(), delimiter="\t"))
    assert len(row) == 10 and row[1] == str(recs[0].image_h) and row[2] == str(recs[0].image_w)  # h before w


def test_uniter_npz_round_trip_and_format(tmp_path: Path) -> None:
    recs = [RegionRecord(r.image_id, r.features, r.boxes, 0, 0, {"conf": np.linspace(1, 0, r.num_boxes)})
            for r in _records()]
    folder = write_uniter_npz(tmp_path / "npz", recs)
    assert sorted(p.name for p in folder.iterdir()) == [f"{r.image_id}.npz" for r in recs]
    with np.load(folder / "1000.npz") as z:
        assert sorted(z.files) == ["conf", "features", "norm_bb"]
        assert all(z[k].dtype == np.float16 for k in z.files) and z["norm_bb"].shape[1] == 6
    _same(recs, list(read_uniter_npz(folder)), atol=2e-3)


def test_uniter_box_rule(tmp_path: Path) -> None:
    assert uniter_box_count(np.full(120, 0.9)) == 100
    assert uniter_box_count(np.r_[np.full(5, 0.9), np.zeros(40)]) == 10
    assert uniter_box_count(np.r_[np.full(25, 0.3), np.full(30, 0.1)]) == 25
    assert uniter_box_count(np.full(6, 0.1)) == 6  # fewer boxes than the minimum: all of them
    rng = np.random.default_rng(0)
    conf = np.r_[np.full(30, 0.5), np.full(20, 0.1)]
    rec = RegionRecord("a", rng.uniform(size=(50, 8)), np.tile([0.1, 0.1, 0.5, 0.5], (50, 1)), 0, 0,
                       {"conf": conf, "soft_labels": rng.uniform(size=(50, 5))})
    folder = write_uniter_npz(tmp_path / "npz", [rec])
    (all_,) = read_uniter_npz(folder)
    (kept,) = read_uniter_npz(folder, box_rule="uniter")
    assert all_.num_boxes == 50 and kept.num_boxes == 30 and kept.extras["soft_labels"].shape == (30, 5)


def test_uniter_npz_image_sizes_from_image_dir(tmp_path: Path) -> None:
    recs = [RegionRecord(r.image_id, r.features, r.boxes, 0, 0) for r in _records(n=2)]
    folder = write_uniter_npz(tmp_path / "npz", recs)
    images = tmp_path / "images"
    images.mkdir()
    Image.new("RGB", (30, 20)).save(images / "1000.png")
    Image.new("RGB", (50, 40)).save(images / "1001.jpg")
    s = import_regions("uniter-npz", folder, tmp_path / "r.h5", image_dir=images)
    assert s.dtype == "float16" and s.images == 2
    with RegionStore(s.path) as store:
        assert store.image_w.tolist() == [30, 50] and store.image_h.tolist() == [20, 40]
    (images / "1001.jpg").unlink()
    with pytest.raises(ValueError, match="no image named '1001'"):
        import_regions("uniter-npz", folder, tmp_path / "r2.h5", image_dir=images)


@pytest.mark.parametrize("fmt, write", [
    ("butd-tsv", write_butd_tsv), ("lxmert-tsv", write_lxmert_tsv), ("uniter-npz", write_uniter_npz),
])
def test_import_then_export_round_trip(tmp_path: Path, fmt: str, write) -> None:
    recs = _records(extras=fmt == "lxmert-tsv")
    src = write(tmp_path / ("src" if fmt == "uniter-npz" else "src.tsv"), recs)
    summary = import_regions(fmt, src, tmp_path / "r.h5")
    assert (summary.images, summary.feature_dim) == (4, 12)
    assert summary.boxes_max == max(r.num_boxes for r in recs)
    with RegionStore(summary.path) as store:
        assert store.meta["source_format"] == fmt and store.meta["source_fingerprint"].startswith("sha256:")
        back = list(store.records())
        batch = store.get([r.image_id for r in recs])
    atol = 2e-3 if fmt == "uniter-npz" else 1e-6
    if fmt == "uniter-npz":  # no pixel sizes in npz files
        recs = [RegionRecord(r.image_id, r.features, r.boxes, 0, 0, r.extras) for r in recs]
    _same(recs, back, atol=atol, extras=fmt == "lxmert-tsv")
    assert batch.mask.sum(1).tolist() == [r.num_boxes for r in recs]
    if fmt != "uniter-npz":
        assert export_regions(summary.path, fmt, tmp_path / "again.tsv") == 4
        assert (tmp_path / "again.tsv").read_bytes() == Path(src).read_bytes()


def test_h5_import_revalidates_and_converts_dtype(tmp_path: Path) -> None:
    src = random_regions(tmp_path / "a.h5", ["x", "y"], n_boxes=5, dim=8, seed=2, min_boxes=2)
    s = import_regions("h5", src, tmp_path / "b.h5", dtype="float16")
    with RegionStore(src) as a, RegionStore(s.path) as b:
        assert b.feature_dtype == "float16" and b.meta["seed"] == 2 and b.meta["imported_from"]["source_format"] == "h5"
        np.testing.assert_allclose(b.get(["x", "y"]).features, a.get(["x", "y"]).features, rtol=1e-3, atol=1e-3)
        np.testing.assert_array_equal(b.get(["y"]).mask, a.get(["y"]).mask)


def test_tsv_streams_large_fields(tmp_path: Path) -> None:
    """A real row (36 x 2048 float32, ~390 KB of base64) exceeds csv's default field limit."""
    rec = RegionRecord("big", np.ones((36, 2048), np.float32), np.tile([0, 0, 0.5, 0.5], (36, 1)), 600, 400)
    path = write_butd_tsv(tmp_path / "big.tsv", [rec])
    assert csv.field_size_limit() < path.stat().st_size
    (back,) = read_butd_tsv(path)
    assert back.features.shape == (36, 2048)
    assert csv.field_size_limit() == 131072  # restored


# -- bad files through the CLI --------------------------------------------------------------

def _tsv(path: Path, rows: list[list[str]]) -> Path:
    path.write_text("".join("\t".join(r) + "\n" for r in rows))
    return path


def _good_row(image_id: str = "7", w: int = 100, h: int = 50, n: int = 2, d: int = 4) -> list[str]:
    boxes = np.array([[0, 0, 50, 25], [10, 10, 99, 49]][:n], np.float32)
    return [image_id, str(w), str(h), str(n), base64.b64encode(boxes.tobytes()).decode(),
            base64.b64encode(np.ones((n, d), np.float32).tobytes()).decode()]


def _row_with(**changes: str) -> list[str]:
    row = _good_row()
    names = ["image_id", "image_w", "image_h", "num_boxes", "boxes", "features"]
    for k, v in changes.items():
        row[names.index(k)] = v
    return row


@pytest.mark.parametrize("rows, needles", [
    ([_good_row()[:5]], ["line 1", "expected 6 tab-separated fields", "got 5"]),
    ([_row_with(boxes="@@not base64@@")], ["line 1", "'boxes' is not readable base64"]),
    ([_row_with(num_boxes="3")], ["'boxes' holds 32 bytes, expected 12 float32 values"]),
    ([_row_with(num_boxes="x")], ["'num_boxes' must be an integer"]),
    ([_good_row(), _good_row("7")], ["line 2", "image '7' appears twice"]),
    ([_good_row(), _good_row("8", d=5)], ["line 2", "feature width 5, expected 4"]),
    ([_good_row(w=50, h=100)], ["must lie in [0, 1]", "swapped?"]),
    ([_row_with(features=base64.b64encode(np.array([np.nan] * 8, np.float32).tobytes()).decode())],
     ["image '7': features contain NaN or inf"]),
    ([], ["no images to write"]),
    ([_row_with(image_id="")], ["line 1", "image_id: expected a non-empty image name"]),
    ([_row_with(num_boxes="0")], ["num_boxes must be positive"]),
])
def test_bad_butd_tsv_one_error_line(tmp_path: Path, one_error_line, rows, needles) -> None:
    src = _tsv(tmp_path / "bad.tsv", rows)
    result = runner.invoke(app, ["regions", "import", "--format", "butd-tsv", str(src), "--out", str(tmp_path / "o.h5")])
    one_error_line(result, *needles)
    assert not (tmp_path / "o.h5").exists()


def test_lxmert_file_read_as_butd_gets_a_hint(tmp_path: Path, one_error_line) -> None:
    src = write_lxmert_tsv(tmp_path / "l.tsv", _records(n=1))
    result = runner.invoke(app, ["regions", "import", "--format", "butd-tsv", str(src), "--out", str(tmp_path / "o.h5")])
    one_error_line(result, "got 10 (a lxmert-tsv file?)")


@pytest.mark.parametrize("make, needles", [
    (lambda d: np.savez(d / "a.npz", norm_bb=np.zeros((2, 6))), ["a.npz", "lacks the array 'features'"]),
    (lambda d: np.savez(d / "a.npz", features=np.ones((2, 4)), norm_bb=np.zeros((3, 6))), ["norm_bb must have shape (2, 6)"]),
    (lambda d: np.savez(d / "a.npz", features=np.ones((1, 4)), norm_bb=np.array([[0, 0, 2, 2, 2, 2]])), ["norm_bb", "[0, 1]"]),
    (lambda d: (d / "a.npz").write_text("junk"), ["a.npz: not a readable npz file"]),
    (lambda d: None, ["no .npz files"]),
])
def test_bad_uniter_npz_one_error_line(tmp_path: Path, one_error_line, make, needles) -> None:
    folder = tmp_path / "npz"
    folder.mkdir()
    make(folder)
    result = runner.invoke(app, ["regions", "import", "--format", "uniter-npz", str(folder), "--out", str(tmp_path / "o.h5")])
    one_error_line(result, *needles)


@pytest.mark.parametrize("args, needles", [
    (["regions", "import", "--format", "csv", "x", "--out", "o.h5"], ["format: expected one of butd-tsv"]),
    (["regions", "import", "--format", "butd-tsv", "missing.tsv", "--out", "o.h5"], ["no such file"]),
    (["regions", "info", "missing.h5"], ["regions: no such file"]),
    (["regions", "import", "--format", "butd-tsv", "x", "--out", "o.h5", "--box-rule", "uniter"], ["uniter-npz format only"]),
])
def test_cli_argument_errors(tmp_path: Path, one_error_line, monkeypatch, args, needles) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x").write_text("")
    one_error_line(runner.invoke(app, args), *needles)


def test_info_refuses_non_region_h5(tmp_path: Path, one_error_line) -> None:
    with h5py.File(tmp_path / "cache.h5", "w") as f:
        f.attrs["vlprobe_schema"] = 1  # an activation cache, say
        f["features"] = np.zeros((2, 3, 4))
    r = runner.invoke(app, ["regions", "info", str(tmp_path / "cache.h5")])
    one_error_line(r, "is not a vlprobe region file")
    (tmp_path / "text.h5").write_text("not hdf5")
    one_error_line(runner.invoke(app, ["regions", "info", str(tmp_path / "text.h5")]), "is not an HDF5 file")


# -- CLI happy paths ------------------------------------------------------------------------

def test_cli_import_info_export(tmp_path: Path) -> None:
    src = write_lxmert_tsv(tmp_path / "l.tsv", _records(extras=True))
    out = tmp_path / "r.h5"
    r = runner.invoke(app, ["regions", "import", "--format", "lxmert-tsv", str(src), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "4 images" in r.stdout and "feature dim 12 (float32)" in r.stdout
    r = runner.invoke(app, ["regions", "info", str(out), "--json"])
    info = json.loads(r.stdout)
    assert info["images"] == 4 and info["feature_dim"] == 12 and info["dtype"] == "float32"
    assert info["fingerprint"] == region_info(out)["fingerprint"] and info["meta"]["source_format"] == "lxmert-tsv"
    r = runner.invoke(app, ["regions", "info", str(out)])
    assert r.exit_code == 0 and "images     4" in r.stdout and "objects_id" in r.stdout
    r = runner.invoke(app, ["regions", "export", str(out), "--format", "lxmert-tsv", "--out", str(tmp_path / "b.tsv")])
    assert r.exit_code == 0 and (tmp_path / "b.tsv").read_bytes() == src.read_bytes()


def test_fixtures_regions_on_synthetic_dataset(tmp_path: Path, synthetic_dir: Path) -> None:
    args = ["fixtures", "regions", "--data-dir", str(synthetic_dir), "--boxes", "4:12", "--dim", "32",
            "--seed", "5"]
    r1 = runner.invoke(app, [*args, "--out", str(tmp_path / "a.h5")])
    r2 = runner.invoke(app, [*args, "--out", str(tmp_path / "b.h5")])
    assert r1.exit_code == 0 and r2.exit_code == 0, r1.output
    dataset = load_winoground(synthetic_dir, tags=False)
    names = [ref.name for ref in dataset.images()]
    assert f"for {len(names)} images" in r1.stdout
    with RegionStore(tmp_path / "a.h5") as a, RegionStore(tmp_path / "b.h5") as b:
        assert a.image_ids == tuple(names)
        ba, bb = a.get(names), b.get(names)
        for field in ("features", "boxes", "mask", "image_w", "image_h"):
            np.testing.assert_array_equal(getattr(ba, field), getattr(bb, field))
        with Image.open(dataset.images()[0].path) as img:
            assert (ba.image_w[0], ba.image_h[0]) == img.size
        assert ba.features.shape == (len(names), a.max_boxes, 32) and ba.num_boxes.min() >= 4
        assert a.meta["dataset_fingerprint"] == dataset.fingerprint and a.meta["seed"] == 5


def test_fixtures_regions_bad_data_dir(tmp_path: Path, one_error_line) -> None:
    r = runner.invoke(app, ["fixtures", "regions", "--data-dir", str(tmp_path / "nope"), "--out", str(tmp_path / "r.h5")])
    one_error_line(r, "nope")
