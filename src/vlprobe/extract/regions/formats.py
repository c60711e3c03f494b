"""Readers and writers of precomputed region-feature formats, and import into vlprobe's HDF5.

Formats (all from the Caffe bottom-up-attention Visual Genome Faster R-CNN):

``butd-tsv``
    peteanderson80/bottom-up-attention ``generate_tsv.py``: tab-separated, no header, fields
    ``image_id, image_w, image_h, num_boxes, boxes, features`` (**width before height**); boxes and
    features base64 float32, boxes (n, 4) pixel x1, y1, x2, y2.
``lxmert-tsv``
    airsplay/lxmert ``load_obj_tsv``: ``img_id, img_h, img_w, objects_id, objects_conf, attrs_id,
    attrs_conf, num_boxes, boxes, features`` (**height before width**); ids base64 int64, the rest
    base64 float32. The four object/attribute fields are kept as ``extra/`` datasets.
``uniter-npz``
    a directory of ``<image id>.npz``, one per image: ``features`` (n, 2048), ``norm_bb`` (n, 6)
    normalised ``x1, y1, x2, y2, w, h``, ``conf`` (n,), optional ``soft_labels`` (n, 1601), all
    float16. No image size is stored; ``image_dir`` supplies it (else 0 = unknown).
    ``box_rule="uniter"`` keeps the first clip(#(conf > 0.2), 10, 100) boxes, as UNITER's loader.
``h5``
    vlprobe's own region file (:mod:`vlprobe.extract.regions.store`), re-validated and rewritten.

Readers stream: one TSV row or one npz file in memory at a time; the HDF5 output is written
incrementally (:class:`~vlprobe.extract.regions.store.RegionWriter`). Every problem is a one-line
InputError naming the file, the line (TSV) and the field.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import csv
import os
import sys
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vlprobe.extract.regions.boxes import (
    BOX_TOLERANCE,
    boxes_to_4d,
    boxes_to_6d,
    check_normalised_boxes,
    normalise_boxes,
    normalise_image_id,
    pixel_boxes,
)
from vlprobe.extract.regions.store import (
    REGIONS_KIND,
    RegionRecord,
    RegionStore,
    RegionWriter,
    is_region_file,
)
from vlprobe.io.atomic import atomic_dir, atomic_write
from vlprobe.io.ownership import check_output
from vlprobe.provenance import fingerprint_files, sha256_file
from vlprobe.validation import InputError, check_file, check_positive_int

__all__ = [
    "ATTRIBUTE_THRESHOLD",
    "BUTD_FIELDS",
    "FORMATS",
    "LXMERT_FIELDS",
    "ImportSummary",
    "export_regions",
    "import_regions",
    "read_butd_tsv",
    "read_lxmert_tsv",
    "read_regions",
    "read_uniter_npz",
    "region_info",
    "top_detections",
    "uniter_box_count",
    "write_butd_tsv",
    "write_lxmert_tsv",
    "write_uniter_npz",
]

#: What exported region files are listed as among the files vlprobe wrote (:mod:`vlprobe.io`).
EXPORT_KIND = "region export"

BUTD_FIELDS = ("image_id", "image_w", "image_h", "num_boxes", "boxes", "features")
LXMERT_FIELDS = (
    "img_id", "img_h", "img_w", "objects_id", "objects_conf", "attrs_id", "attrs_conf", "num_boxes",
    "boxes", "features",
)
_LXMERT_EXTRAS = {"objects_id": np.int64, "objects_conf": np.float32, "attrs_id": np.int64, "attrs_conf": np.float32}
FORMATS = ("butd-tsv", "lxmert-tsv", "uniter-npz", "h5")
BOX_RULES = ("all", "uniter")


# ---------------------------------------------------------------------------------------------
# TSV plumbing


@contextlib.contextmanager
def _big_fields() -> Iterator[None]:
    """csv's default 128 KiB field limit is far below one image's base64 features (~390 KB)."""
    old = csv.field_size_limit()
    limit = sys.maxsize
    while True:
        try:
            csv.field_size_limit(limit)
            break
        except OverflowError:  # C long is 32-bit on some platforms
            limit //= 2
    try:
        yield
    finally:
        csv.field_size_limit(old)


def _tsv_rows(path: Path, fields: tuple[str, ...]) -> Iterator[tuple[str, dict[str, str]]]:
    """(location, row) for each non-empty line; one row in memory at a time."""
    check_file(path, "regions")
    with _big_fields(), open(path, newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh, delimiter="\t")
        try:
            for row in reader:
                where = f"{path.name} line {reader.line_num}"
                if not row or (len(row) == 1 and not row[0].strip()):
                    continue
                if len(row) != len(fields):
                    other = {len(BUTD_FIELDS): "butd-tsv", len(LXMERT_FIELDS): "lxmert-tsv"}.get(len(row))
                    hint = f" (a {other} file?)" if other else ""
                    raise InputError(
                        f"regions: {where}: expected {len(fields)} tab-separated fields "
                        f"({', '.join(fields)}), got {len(row)}{hint}"
                    )
                yield where, dict(zip(fields, row, strict=True))
        except (csv.Error, UnicodeDecodeError) as exc:
            raise InputError(f"regions: {path.name} line {reader.line_num}: not a readable TSV ({exc})") from None


def _int_field(row: dict[str, str], name: str, where: str) -> int:
    try:
        return int(row[name])
    except ValueError:
        raise InputError(f"regions: {where}: field {name!r} must be an integer, got {row[name][:40]!r}") from None


def _b64_array(row: dict[str, str], name: str, dtype: Any, shape: tuple[int, ...], where: str) -> np.ndarray:
    """Decode one base64 field into ``shape`` (-1 allowed once)."""
    text = row[name].strip()
    if text.startswith(("b'", 'b"')) and text[-1:] in ("'", '"'):  # str(bytes) written by a py3 port
        text = text[2:-1]
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InputError(f"regions: {where}: field {name!r} is not readable base64") from None
    dt = np.dtype(dtype)
    fixed = int(np.prod([s for s in shape if s != -1]))
    count, rest = divmod(len(raw), dt.itemsize)
    ok = not rest and (count == fixed if -1 not in shape else count > 0 and count % fixed == 0)
    if not ok:
        want = f"{fixed} {dt.name} values" if -1 not in shape else f"a non-zero multiple of {fixed} {dt.name} values"
        raise InputError(f"regions: {where}: field {name!r} holds {len(raw)} bytes, expected {want}")
    return np.frombuffer(raw, dtype=dt).reshape(shape)


def _b64(arr: np.ndarray, dtype: Any) -> str:
    return base64.b64encode(np.ascontiguousarray(arr, dtype=dtype).tobytes()).decode("ascii")


# ---------------------------------------------------------------------------------------------
# BUTD TSV


def read_butd_tsv(path: str | os.PathLike[str], *, tolerance: float = BOX_TOLERANCE) -> Iterator[RegionRecord]:
    """Stream a bottom-up-attention TSV (width before height) as records with normalised boxes."""
    return (rec for _, rec in _butd_tsv(Path(path), tolerance=tolerance))


def _butd_tsv(path: Path, *, tolerance: float = BOX_TOLERANCE) -> Iterator[tuple[str, RegionRecord]]:
    for where, row in _tsv_rows(path, BUTD_FIELDS):
        w, h = _int_field(row, "image_w", where), _int_field(row, "image_h", where)
        yield where, _tsv_record(row, row["image_id"], w, h, where, tolerance, {})


def write_butd_tsv(path: str | os.PathLike[str], records: Iterable[RegionRecord]) -> Path:
    """Write records as a bottom-up-attention TSV (pixel boxes, float32), atomically."""
    with atomic_write(path, kind=EXPORT_KIND) as fh:
        for rec in records:
            boxes = _pixel(rec, "butd-tsv")
            fh.write("\t".join([
                rec.image_id, str(rec.image_w), str(rec.image_h), str(rec.num_boxes),
                _b64(boxes, np.float32), _b64(rec.features, np.float32),
            ]) + "\n")
    return Path(path)


# ---------------------------------------------------------------------------------------------
# LXMERT TSV


def read_lxmert_tsv(path: str | os.PathLike[str], *, tolerance: float = BOX_TOLERANCE) -> Iterator[RegionRecord]:
    """Stream an LXMERT TSV (height before width); object/attribute fields become extras."""
    return (rec for _, rec in _lxmert_tsv(Path(path), tolerance=tolerance))


def _lxmert_tsv(path: Path, *, tolerance: float = BOX_TOLERANCE) -> Iterator[tuple[str, RegionRecord]]:
    for where, row in _tsv_rows(path, LXMERT_FIELDS):
        h, w = _int_field(row, "img_h", where), _int_field(row, "img_w", where)
        n = _int_field(row, "num_boxes", where)
        if n < 1:
            raise InputError(f"regions: {where}: num_boxes must be positive, got {n}")
        extras = {k: _b64_array(row, k, dt, (n,), where) for k, dt in _LXMERT_EXTRAS.items()}
        yield where, _tsv_record(row, row["img_id"], w, h, where, tolerance, extras)


def write_lxmert_tsv(path: str | os.PathLike[str], records: Iterable[RegionRecord]) -> Path:
    """Write records as an LXMERT TSV, atomically; missing object/attribute fields are zeros."""
    with atomic_write(path, kind=EXPORT_KIND) as fh:
        for rec in records:
            boxes = _pixel(rec, "lxmert-tsv")
            n = rec.num_boxes
            extras = [_b64(np.asarray(rec.extras.get(k, np.zeros(n))), dt) for k, dt in _LXMERT_EXTRAS.items()]
            fh.write("\t".join([
                rec.image_id, str(rec.image_h), str(rec.image_w), *extras, str(n),
                _b64(boxes, np.float32), _b64(rec.features, np.float32),
            ]) + "\n")
    return Path(path)


def _tsv_record(
    row: dict[str, str], image_id: str, w: int, h: int, where: str, tolerance: float,
    extras: dict[str, np.ndarray],
) -> RegionRecord:
    n = _int_field(row, "num_boxes", where)
    if n < 1:
        raise InputError(f"regions: {where}: num_boxes must be positive, got {n}")
    if w < 1 or h < 1:
        raise InputError(f"regions: {where}: image size must be positive, got width {w}, height {h}")
    boxes = _b64_array(row, "boxes", np.float32, (n, 4), where)
    features = _b64_array(row, "features", np.float32, (n, -1), where)
    try:
        norm = normalise_boxes(boxes, w, h, tolerance=tolerance)
    except ValueError as exc:
        raise InputError(f"regions: {where}: image {image_id!r}: {exc}") from None
    return RegionRecord(image_id, features, norm, w, h, extras)


def _pixel(rec: RegionRecord, fmt: str) -> np.ndarray:
    if rec.image_w < 1 or rec.image_h < 1:
        raise InputError(
            f"regions: image {rec.image_id!r} has no recorded image size; {fmt} stores pixel boxes "
            "(import the npz files with --image-dir)"
        )
    return pixel_boxes(rec.boxes, rec.image_w, rec.image_h)


# ---------------------------------------------------------------------------------------------
# UNITER npz


def uniter_box_count(conf: np.ndarray, *, threshold: float = 0.2, min_boxes: int = 10, max_boxes: int = 100) -> int:
    """UNITER's box count: clip(#(conf > threshold), min_boxes, max_boxes), at most len(conf)."""
    k = int(np.sum(np.asarray(conf, dtype=np.float32) > threshold))
    return min(max(min_boxes, k), max_boxes, len(conf))


def read_uniter_npz(
    folder: str | os.PathLike[str],
    *,
    box_rule: str = "all",
    image_dir: str | os.PathLike[str] | None = None,
    tolerance: float = BOX_TOLERANCE,
) -> Iterator[RegionRecord]:
    """Stream a directory of UNITER npz files (sorted by name), one record per file.

    Parameters
    ----------
    folder : path
    box_rule : {"all", "uniter"}
        ``uniter``: keep the first :func:`uniter_box_count` boxes, as UNITER's loader does.
    image_dir : path, optional
        Folder with the images (same stem as the npz) for their pixel size, EXIF orientation
        applied as the detector read them (width and height swapped for orientations 5-8); else
        size 0 (unknown).
    """
    root = Path(folder)
    if box_rule not in BOX_RULES:
        raise InputError(f"box_rule: expected one of {', '.join(BOX_RULES)}, got {box_rule!r}")
    if not root.is_dir():
        raise NotADirectoryError(f"regions: uniter-npz expects a directory of .npz files, got {str(root)!r}")
    files = sorted(root.glob("*.npz"))
    if not files:
        raise InputError(f"regions: no .npz files in {str(root)!r}")
    sizes = _image_sizes(Path(image_dir)) if image_dir is not None else {}
    for path in files:
        yield _npz_record(path, box_rule, sizes, image_dir is not None, tolerance)


def _uniter_npz(path: Path, **kwargs: Any) -> Iterator[tuple[str, RegionRecord]]:
    for rec in read_uniter_npz(path, **kwargs):
        yield f"{rec.image_id}.npz", rec


def _npz_record(path: Path, box_rule: str, sizes: dict[str, tuple[int, int]], need_size: bool,
                tolerance: float) -> RegionRecord:
    where = path.name
    try:
        with np.load(path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as exc:  # truncated: BadZipFile
        raise InputError(f"regions: {where}: not a readable npz file ({exc})") from None
    for key in ("features", "norm_bb"):
        if key not in data:
            raise InputError(f"regions: {where}: lacks the array {key!r} (has {', '.join(sorted(data)) or 'none'})")
    feats, bb = data["features"], data["norm_bb"]
    n = feats.shape[0] if feats.ndim == 2 else -1
    if feats.ndim != 2 or n < 1:
        raise InputError(f"regions: {where}: features must have shape (boxes, dim), got {feats.shape}")
    if bb.ndim != 2 or bb.shape[0] != n or bb.shape[1] not in (4, 6, 7):
        raise InputError(f"regions: {where}: norm_bb must have shape ({n}, 6) (or 4 or 7 columns), got {bb.shape}")
    extras = {k: data[k] for k in ("conf", "soft_labels") if k in data}
    if box_rule == "uniter":
        if "conf" not in data:
            raise InputError(f"regions: {where}: box_rule 'uniter' needs the array 'conf'")
        k = uniter_box_count(data["conf"])
        feats, bb, extras = feats[:k], bb[:k], {name: v[:k] for name, v in extras.items()}
    image_id = normalise_image_id(path.name)
    w, h = sizes.get(image_id, (0, 0))
    if need_size and (w, h) == (0, 0):
        raise InputError(f"regions: {where}: no image named {image_id!r} (any extension) in the image directory")
    try:
        boxes = boxes_to_4d(bb.astype(np.float32))
    except ValueError as exc:
        raise InputError(f"regions: {where}: {exc}") from None
    return RegionRecord(image_id, feats, _clip(boxes, where, tolerance), w, h, extras)


def _clip(boxes: np.ndarray, where: str, tolerance: float) -> np.ndarray:
    try:
        return check_normalised_boxes(boxes, tolerance=tolerance, name="norm_bb")
    except ValueError as exc:
        raise InputError(f"regions: {where}: {exc}") from None


def _image_sizes(folder: Path) -> dict[str, tuple[int, int]]:
    from PIL import Image, UnidentifiedImageError

    from vlprobe.data.items import oriented_size, pillow_size_limits
    from vlprobe.extract.regions.sources import DETECTOR_ORIENTATION

    if not folder.is_dir():
        raise NotADirectoryError(f"image_dir: no such directory {str(folder)!r}")
    out: dict[str, tuple[int, int]] = {}
    for p in sorted(folder.iterdir()):
        if p.is_file():
            try:
                with pillow_size_limits(p) as check_size, Image.open(p) as img:  # reads the header only
                    check_size(img)
                    # the size the detector saw: EXIF orientation applied, as it read the image
                    out[normalise_image_id(p.name)] = oriented_size(img, DETECTOR_ORIENTATION)
            except (UnidentifiedImageError, OSError):
                continue
    return out


def write_uniter_npz(folder: str | os.PathLike[str], records: Iterable[RegionRecord]) -> Path:
    """Write one ``<image id>.npz`` per record (float16 ``features``, ``norm_bb`` 6-d, ``conf``)
    into ``folder``, as a whole: ``folder`` appears complete or not at all. It may be new, empty,
    or an earlier export of vlprobe's (replaced); anything else is refused."""
    with atomic_dir(folder, kind=EXPORT_KIND) as staging:
        _write_uniter_npz(staging, records)
    return Path(folder)


def _write_uniter_npz(root: Path, records: Iterable[RegionRecord]) -> None:
    for rec in records:
        arrays = {
            "features": np.asarray(rec.features, dtype=np.float16),
            "norm_bb": boxes_to_6d(rec.boxes).astype(np.float16),
            "conf": np.asarray(rec.extras.get("conf", np.ones(rec.num_boxes)), dtype=np.float16),
        }
        if "soft_labels" in rec.extras:
            arrays["soft_labels"] = np.asarray(rec.extras["soft_labels"], dtype=np.float16)
        with open(root / f"{normalise_image_id(rec.image_id)}.npz", "wb") as fh:
            np.savez_compressed(fh, allow_pickle=False, **arrays)


# ---------------------------------------------------------------------------------------------
# dispatch, import, info


def read_regions(fmt: str, path: str | os.PathLike[str], **kwargs: Any) -> Iterator[RegionRecord]:
    """Records of a region file in any of :data:`FORMATS`."""
    return (rec for _, rec in _located(fmt, Path(path), **kwargs))


def _located(fmt: str, path: Path, **kwargs: Any) -> Iterator[tuple[str, RegionRecord]]:
    readers: dict[str, Callable[..., Iterator[tuple[str, RegionRecord]]]] = {
        "butd-tsv": _butd_tsv, "lxmert-tsv": _lxmert_tsv, "uniter-npz": _uniter_npz, "h5": _h5,
    }
    if fmt not in readers:
        raise InputError(f"format: expected one of {', '.join(FORMATS)}, got {fmt!r}")
    return readers[fmt](path, **kwargs)


def _h5(path: Path, **_: Any) -> Iterator[tuple[str, RegionRecord]]:
    with RegionStore(path) as store:
        for i, rec in enumerate(store.records()):
            yield f"{path.name} image {i + 1}", rec


@dataclass(frozen=True)
class ImportSummary:
    """What :func:`import_regions` wrote."""

    path: Path
    images: int
    boxes_min: int
    boxes_mean: float
    boxes_max: int
    feature_dim: int
    dtype: str


def import_regions(
    fmt: str,
    source: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    dtype: str | None = None,
    feature_dim: int | None = None,
    box_rule: str = "all",
    image_dir: str | os.PathLike[str] | None = None,
    tolerance: float = BOX_TOLERANCE,
) -> ImportSummary:
    """Convert a region-feature file (or npz directory) into vlprobe's HDF5, streaming.

    Parameters
    ----------
    fmt : {"butd-tsv", "lxmert-tsv", "uniter-npz", "h5"}
    source, out : path
    dtype : {"float32", "float16"}, optional
        Feature storage; default float16 for uniter-npz (its native precision), else float32.
    feature_dim : int, optional
        Required feature width (2048 for LXMERT and UNITER); default: the first image's.
    box_rule : {"all", "uniter"}
        uniter-npz only, see :func:`read_uniter_npz`.
    image_dir : path, optional
        uniter-npz only: images for their pixel sizes.
    tolerance : float
        Box tolerance outside [0, 1] that is clipped rather than refused.
    """
    if fmt not in FORMATS:
        raise InputError(f"format: expected one of {', '.join(FORMATS)}, got {fmt!r}")
    if fmt != "uniter-npz" and (box_rule != "all" or image_dir is not None):
        raise InputError(f"box_rule and image_dir apply to the uniter-npz format only, not {fmt!r}")
    src = Path(source)
    if not src.exists():
        raise FileNotFoundError(f"regions: no such {'directory' if fmt == 'uniter-npz' else 'file'} {str(src)!r}")
    if fmt == "uniter-npz" and not src.is_dir():
        raise InputError(f"regions: --format uniter-npz reads a folder of .npz files; {str(src)!r} is a file")
    if fmt != "uniter-npz" and src.is_dir():
        raise InputError(f"regions: --format {fmt} reads one file; {str(src)!r} is a folder")
    if Path(out).resolve() == src.resolve():
        raise InputError("out: must differ from the source file")
    check_output(out, REGIONS_KIND, recognise=is_region_file)  # before any work
    kwargs: dict[str, Any] = {"tolerance": tolerance}
    if fmt == "uniter-npz":
        kwargs.update(box_rule=box_rule, image_dir=image_dir)
    store_dtype = dtype or ("float16" if fmt == "uniter-npz" else "float32")
    meta: dict[str, Any] = {
        "source_format": fmt, "source": str(src.resolve()), "source_fingerprint": _fingerprint(fmt, src),
        "box_rule": box_rule, "box_tolerance": tolerance,
        "detector": "bottom-up-attention Faster R-CNN (Visual Genome), as the source format implies",
    }
    if fmt == "uniter-npz" and image_dir is not None:
        from vlprobe.extract.regions.sources import DETECTOR_ORIENTATION

        meta["image_orientation"] = DETECTOR_ORIENTATION  # how the image sizes were read
    if fmt == "h5":
        with RegionStore(src) as store:
            meta = {**store.meta, "imported_from": meta}
    counts: list[int] = []
    with RegionWriter(out, feature_dim=feature_dim, dtype=store_dtype, meta=meta, tolerance=tolerance) as w:
        for where, rec in _located(fmt, src, **kwargs):
            w.add(rec, where=where)
            counts.append(rec.num_boxes)
        dim = int(w.feature_dim or 0)
    c = np.asarray(counts)
    return ImportSummary(Path(out), len(c), int(c.min()), float(c.mean()), int(c.max()), dim, store_dtype)


def _fingerprint(fmt: str, src: Path) -> str:
    if fmt == "uniter-npz":
        return "sha256:" + fingerprint_files(sorted(src.glob("*.npz")), src)
    return "sha256:" + sha256_file(src)


def region_info(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Summary of a region file: counts, box statistics, feature width and dtype, meta, fingerprint.

    An incomplete file (an interrupted ``probe regions extract``) is described too: ``complete``
    False, ``done`` images written; the box statistics cover the images written.
    """
    with RegionStore(path, allow_incomplete=True) as store:
        nb = store.num_boxes[store.done]
        return {
            "path": str(store.path),
            "size_bytes": store.path.stat().st_size,
            "schema_version": store.schema_version,
            "complete": store.complete,
            "images": len(store.image_ids),
            "done": int(store.done.sum()),
            "boxes": {"min": int(nb.min()), "mean": float(nb.mean()), "max": int(nb.max())} if len(nb)
            else {"min": 0, "mean": 0.0, "max": 0},
            "max_boxes": store.max_boxes,
            "feature_dim": store.feature_dim,
            "dtype": store.feature_dtype,
            "extras": list(store.extras),
            "images_without_size": int(np.sum(store.image_w[store.done] == 0)),
            "meta": store.meta,
            "fingerprint": store.fingerprint,
        }


#: An attribute is named beside its object when its confidence exceeds this (as the
#: bottom-up-attention demo does).
ATTRIBUTE_THRESHOLD = 0.1


def top_detections(
    path: str | os.PathLike[str], objects: Sequence[str], attributes: Sequence[str], *, top: int = 5,
    attribute_threshold: float = ATTRIBUTE_THRESHOLD,
) -> dict[str, list[dict[str, Any]]]:
    """The ``top`` most confident detections of every written image, by name.

    Parameters
    ----------
    path : path
        A region file with ``objects_id``/``objects_conf`` (and ``attrs_id``/``attrs_conf``) extras.
    objects, attributes : sequence of str
        Names indexed by the stored ids (the detector's label files).
    top : int
    attribute_threshold : float
        An attribute is named only above this confidence.

    Returns
    -------
    dict
        image id -> ``[{"name": "red car", "object", "object_conf", "attribute", "attribute_conf",
        "box": normalised x1, y1, x2, y2}, ...]``, most confident first.
    """
    check_positive_int(top, "top")
    out: dict[str, list[dict[str, Any]]] = {}
    with RegionStore(path, allow_incomplete=True) as store:
        if "objects_id" not in store.extras or "objects_conf" not in store.extras:
            raise InputError(f"labels: {store.path.name} holds no object ids (extras: {', '.join(store.extras) or 'none'})")
        with_attrs = "attrs_id" in store.extras and "attrs_conf" in store.extras
        for rec in store.records():
            ex = rec.extras
            order = np.argsort(-ex["objects_conf"], kind="stable")[:top]
            dets = []
            for j in order:
                obj = _label(objects, int(ex["objects_id"][j]), "object")
                det: dict[str, Any] = {"object": obj, "object_conf": float(ex["objects_conf"][j]), "attribute": None,
                                       "attribute_conf": None, "box": [float(v) for v in rec.boxes[j]]}
                name = obj
                if with_attrs:
                    attr_conf = float(ex["attrs_conf"][j])
                    det["attribute"] = _label(attributes, int(ex["attrs_id"][j]), "attribute")
                    det["attribute_conf"] = attr_conf
                    if attr_conf > attribute_threshold:
                        name = f"{det['attribute']} {obj}"
                det["name"] = name
                dets.append(det)
            out[rec.image_id] = dets
    return out


def _label(names: Sequence[str], i: int, what: str) -> str:
    if not 0 <= i < len(names):
        raise InputError(f"labels: {what} id {i} is outside the {len(names)} {what} names given")
    return names[i]


def export_regions(path: str | os.PathLike[str], fmt: str, out: str | os.PathLike[str]) -> int:
    """Write a vlprobe region file as ``butd-tsv``, ``lxmert-tsv`` or ``uniter-npz``; returns the image count."""
    writers: dict[str, Callable[[Path, Iterable[RegionRecord]], Path]] = {
        "butd-tsv": write_butd_tsv, "lxmert-tsv": write_lxmert_tsv, "uniter-npz": write_uniter_npz,
    }
    if fmt not in writers:
        raise InputError(f"format: expected one of {', '.join(writers)}, got {fmt!r}")
    if fmt != "uniter-npz":
        check_output(out, EXPORT_KIND)  # before any work (a folder is checked as it is staged)
    count = 0

    def counted(records: Iterable[RegionRecord]) -> Iterator[RegionRecord]:
        nonlocal count
        for rec in records:
            count += 1
            yield rec

    with RegionStore(path) as store:
        writers[fmt](Path(out), counted(store.records()))
    return count
