"""EXIF orientation: the detector reads images as OpenCV's ``cv2.imread`` does (the Orientation tag
applied), pixel models as ``Image.open(...).convert("RGB")`` does (the pixels as stored); region
files and caches record which.

Every test uses JPEGs carrying each EXIF orientation 1-8 of one asymmetric picture. The expected
layout is OpenCV's own rule (``ExifTransform`` in ``imgcodecs/src/loadsave.cpp``), written out
here with numpy transposes and flips, applied to the same file decoded without its tag.
"""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from vlprobe.cli import app
from vlprobe.data.items import EXIF_ORIENTATION_TAG, ImageRef, decode_rgb, oriented_size
from vlprobe.extract.regions.sources import DETECTOR_ORIENTATION, read_image
from vlprobe.extract.regions.store import RegionStore
from vlprobe.validation import InputError

ORIENTATIONS = range(1, 9)
W, H = 96, 64  # stored width and height: landscape, so orientations 5-8 come out portrait


def _picture() -> np.ndarray:
    """(H, W, 3) uint8 with no symmetry: four differently coloured quadrants plus a gradient."""
    y, x = np.mgrid[0:H, 0:W]
    img = np.zeros((H, W, 3), np.uint8)
    img[..., 0] = np.where(x < W // 3, 220, 30)
    img[..., 1] = np.where(y < H // 4, 200, 40)
    img[..., 2] = (x * 255 // W).astype(np.uint8)
    return img


def _jpeg(path: Path, orientation: int) -> Path:
    exif = Image.Exif()
    exif[EXIF_ORIENTATION_TAG] = orientation
    Image.fromarray(_picture()).save(path, format="JPEG", quality=95, exif=exif.tobytes())
    return path


def _opencv_layout(stored: np.ndarray, orientation: int) -> np.ndarray:
    """What ``cv2.imread(path)`` (IMREAD_COLOR, which honours EXIF) gives for a file whose stored
    pixels are ``stored`` (H, W, C): OpenCV's ExifTransform, case by case."""
    t = stored.transpose(1, 0, 2)  # cv::transpose
    return {
        1: stored,
        2: stored[:, ::-1],  # flip(img, img, 1): horizontally
        3: stored[::-1, ::-1],  # flip(img, img, -1): both
        4: stored[::-1],  # flip(img, img, 0): vertically
        5: t,
        6: t[:, ::-1],
        7: t[::-1, ::-1],
        8: t[::-1],
    }[orientation]


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    folder = tmp_path_factory.mktemp("exif")
    return {o: _jpeg(folder / f"photo_{o}.jpg", o) for o in ORIENTATIONS}


def _stored_pixels(path: Path) -> np.ndarray:
    with Image.open(path) as img:  # PIL never applies the tag by itself
        return np.asarray(img.convert("RGB"))


@pytest.mark.parametrize("orientation", ORIENTATIONS)
def test_the_detector_reads_images_as_opencv_does(orientation: int, jpegs: dict[int, Path]) -> None:
    path = jpegs[orientation]
    img, digest = read_image(path)
    expected = _opencv_layout(_stored_pixels(path), orientation)
    # the same decoded pixels, permuted: the layout must match exactly
    assert np.array_equal(np.asarray(img), expected)
    assert img.size == ((H, W) if orientation >= 5 else (W, H))
    assert DETECTOR_ORIENTATION == "exif" and len(digest) == 64
    with Image.open(path) as header_only:
        assert oriented_size(header_only, "exif") == img.size
        assert oriented_size(header_only, "stored") == (W, H)


@pytest.mark.parametrize("orientation", ORIENTATIONS)
def test_pixel_models_get_the_stored_layout(orientation: int, jpegs: dict[int, Path]) -> None:
    """What CLIP, SigLIP and BLIP are fed (``ImageRef.load``): the tag ignored, as their reference
    code's ``Image.open(path).convert("RGB")`` ignores it."""
    path = jpegs[orientation]
    img = ImageRef("x/0/i0", "photo", path).load()
    assert img.size == (W, H)
    assert np.array_equal(np.asarray(img), _stored_pixels(path))
    assert np.array_equal(np.asarray(decode_rgb(path.read_bytes(), path)), _stored_pixels(path))


def test_an_unknown_orientation_rule_is_refused(jpegs: dict[int, Path]) -> None:
    with pytest.raises(InputError, match="orientation: unknown orientation 'exiff'"):
        decode_rgb(jpegs[6].read_bytes(), jpegs[6], orientation="exiff")


def test_a_jpeg_without_exif_is_the_same_either_way(tmp_path: Path) -> None:
    path = tmp_path / "plain.jpg"
    Image.fromarray(_picture()).save(path, format="JPEG", quality=95)
    a, b = decode_rgb(path.read_bytes(), path), decode_rgb(path.read_bytes(), path, orientation="exif")
    assert a.size == b.size == (W, H) and np.array_equal(np.asarray(a), np.asarray(b))


# -- end to end: probe regions extract ---------------------------------------------------------------


@pytest.fixture(scope="module")
def detector_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from vlprobe.fixtures.frcnn import write_tiny_frcnn

    return write_tiny_frcnn(tmp_path_factory.mktemp("det") / "tiny-frcnn", seed=0)


def _extract(detector: Path, images: Path, out: Path) -> None:
    r = CliRunner().invoke(app, ["regions", "extract", "--detector", str(detector), "--images", str(images),
                                 "--out", str(out), "--batch-size", "1", "--device", "cpu", "--quiet"])
    assert r.exit_code == 0, r.output


def test_region_extract_sees_the_rotated_image_and_records_it(
    jpegs: dict[int, Path], detector_dir: Path, tmp_path: Path
) -> None:
    """The region file of the eight tagged JPEGs equals that of PNGs holding OpenCV's layout of
    each: the same sizes, boxes and features (float tolerance: JPEG-decoded pixels are identical,
    but the two runs are separate forward passes whose order of summation may differ)."""
    tagged = jpegs[1].parent
    upright = tmp_path / "upright"
    upright.mkdir()
    for o, path in jpegs.items():
        Image.fromarray(np.ascontiguousarray(_opencv_layout(_stored_pixels(path), o))).save(upright / f"photo_{o}.png")
    _extract(detector_dir, tagged, tmp_path / "tagged.h5")
    _extract(detector_dir, upright, tmp_path / "upright.h5")
    with RegionStore(tmp_path / "tagged.h5") as a, RegionStore(tmp_path / "upright.h5") as b:
        assert a.image_ids == b.image_ids == tuple(f"photo_{o}" for o in ORIENTATIONS)
        assert a.image_w.tolist() == [H if o >= 5 else W for o in ORIENTATIONS]
        assert a.image_h.tolist() == [W if o >= 5 else H for o in ORIENTATIONS]
        assert a.image_w.tolist() == b.image_w.tolist() and a.image_h.tolist() == b.image_h.tolist()
        assert a.meta["image_orientation"] == "exif"
        ids = list(a.image_ids)
        ba, bb = a.get(ids), b.get(ids)
        assert np.array_equal(ba.mask, bb.mask)
        np.testing.assert_allclose(ba.boxes, bb.boxes, atol=1e-5)
        np.testing.assert_allclose(ba.features, bb.features, rtol=1e-4, atol=1e-4)


def test_resuming_a_file_decoded_as_stored_is_refused(
    jpegs: dict[int, Path], detector_dir: Path, tmp_path: Path, one_error_line
) -> None:
    """A region file made before the orientation was recorded (its meta lacks the field: its
    images were decoded as stored) is not resumed with rotated images."""
    folder = tmp_path / "two"
    folder.mkdir()
    for o in (1, 6):
        (folder / jpegs[o].name).write_bytes(jpegs[o].read_bytes())
    out = tmp_path / "r.h5"
    _extract(detector_dir, folder, out)
    with h5py.File(out, "r+") as f:
        meta = json.loads(f.attrs["meta"])
        del meta["image_orientation"]
        f.attrs["meta"] = json.dumps(meta)
        f.attrs["complete"] = False
        f["done"][1] = False
    before = out.read_bytes()
    result = CliRunner().invoke(app, ["regions", "extract", "--detector", str(detector_dir), "--images", str(folder),
                                      "--out", str(out), "--batch-size", "1", "--device", "cpu", "--quiet"])
    one_error_line(result, "other settings", "image_orientation: file has 'stored', this run has 'exif'")
    assert out.read_bytes() == before


def test_uniter_npz_sizes_from_tagged_images_are_oriented(jpegs: dict[int, Path], tmp_path: Path) -> None:
    """UNITER npz files carry no image size; read from the images, it is the size the detector saw."""
    from vlprobe.extract.regions.formats import RegionRecord, import_regions, write_uniter_npz

    rng = np.random.default_rng(0)
    boxes = np.tile([0.1, 0.1, 0.5, 0.5], (3, 1)).astype(np.float32)
    npz = write_uniter_npz(tmp_path / "npz", [RegionRecord(f"photo_{o}", rng.uniform(size=(3, 8)), boxes, 0, 0)
                                              for o in (1, 6)])
    images = tmp_path / "images"
    images.mkdir()
    for o in (1, 6):
        (images / jpegs[o].name).write_bytes(jpegs[o].read_bytes())
    s = import_regions("uniter-npz", npz, tmp_path / "r.h5", image_dir=images)
    with RegionStore(s.path) as store:
        assert store.image_w.tolist() == [W, H] and store.image_h.tolist() == [H, W]
        assert store.meta["image_orientation"] == "exif"
