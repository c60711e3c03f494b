"""Region features (Faster R-CNN boxes + 2048-d features) for LXMERT and UNITER.

vlprobe keeps region features in one HDF5 file per detector run; readers for the common
precomputed formats (BUTD TSV, LXMERT TSV, UNITER npz) live in
:mod:`vlprobe.extract.regions.formats` and convert into it; seeded random features for tests
come from :mod:`vlprobe.fixtures.regions`.

Schema (``schema_version`` 2; version 1 files are still read)
--------------------------------------------------------------
Root attributes::

    schema          "vlprobe-regions"
    schema_version  2
    complete        bool: every image is written (version 1 files: always; a killed
                    ``probe regions extract`` leaves False until it is resumed)
    meta            JSON: source format, source path and fingerprint, converter; files made by
                    ``probe regions extract`` add the detector, the box-selection preset with every
                    parameter, the colour order, ``image_orientation`` (``"exif"``: the EXIF
                    Orientation tag applied when the images were decoded), the image source and
                    the run (see :mod:`vlprobe.extract.regions.chunked`)

Datasets (N images, R = the largest box count, D = feature width)::

    image_id    (N,)        str      normalised image id (see below), unique
    features    (N, R, D)   float16 | float32   zeros at padded boxes
    boxes       (N, R, 4)   float32  normalised x1, y1, x2, y2 in [0, 1]; zeros at padded boxes
    num_boxes   (N,)        int32    real boxes of each image, 1 <= num_boxes <= R
    image_w     (N,)        int32    image width in pixels (0 with image_h 0: unknown, e.g. UNITER
                                     npz files, which store normalised boxes only)
    image_h     (N,)        int32    image height in pixels
    extra/<k>   (N, R, ...) optional per-box side data of the source format (``conf``,
                            ``objects_id``, ``objects_conf``, ``attrs_id``, ``attrs_conf``,
                            ``soft_labels``), zeros at padded boxes
    done        (N,)        bool     version 2: the image's row is written (rows not done are
                                     zeros and are never read)
    image_sha256 (N,)       ascii    ``probe regions extract`` only: sha256 of each image file

Image ids are normalised by dropping a directory part and a known image/feature extension
(``images/ex_3_img_1.png`` -> ``ex_3_img_1``, ``COCO_val2014_000000000042.jpg`` ->
``COCO_val2014_000000000042``, ``42`` stays ``42``); lookups normalise the same way, so a store is
keyed by the benchmark's image names (``ImageRef.name``).

Boxes: everything inside vlprobe is normalised ``x1, y1, x2, y2`` (pixel coordinates divided by
the image width and height). Pixel <-> normalised and 4-/6-/7-d conversions live in
:mod:`vlprobe.extract.regions.boxes` only (:func:`~.boxes.normalise_boxes`,
:func:`~.boxes.pixel_boxes`, :func:`~.boxes.boxes_to_6d`, :func:`~.boxes.boxes_to_7d`,
:func:`~.boxes.boxes_to_4d`). Normalised coordinates within :data:`~.boxes.BOX_TOLERANCE` outside
[0, 1] (detectors clip to ``w - 1`` or round, fp16 storage rounds) are clipped into [0, 1]; anything further out is an
error, as is ``x2 < x1`` or ``y2 < y1``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import h5py
import numpy as np

from vlprobe import __version__
from vlprobe.extract.regions.boxes import BOX_TOLERANCE, check_normalised_boxes, normalise_image_id
from vlprobe.io.atomic import atomic_path
from vlprobe.io.errors import is_disk_full, no_space_error
from vlprobe.io.h5 import (
    ClosesOnExit,
    discard_h5,
    h5_open_failure,
    schema_attrs,
    schema_version_of,
    stop_h5_writes,
)
from vlprobe.provenance import sha256_file
from vlprobe.validation import InputError, check_file

__all__ = [
    "REGIONS_KIND",
    "SCHEMA",
    "SCHEMA_VERSION",
    "RegionBatch",
    "RegionRecord",
    "RegionStore",
    "RegionWriter",
    "is_region_file",
    "write_regions",
]

SCHEMA = "vlprobe-regions"
#: Version 2 added ``done`` and ``complete``; version 1 files (always complete) are still read.
SCHEMA_VERSION = 2
#: What region files are listed as among the files vlprobe wrote (:mod:`vlprobe.io`).
REGIONS_KIND = "regions"
_STR = h5py.string_dtype(encoding="utf-8")
_FEATURE_DTYPES = {"float32": np.float32, "float16": np.float16}


# ---------------------------------------------------------------------------------------------
# reading


@dataclass(frozen=True)
class RegionBatch:
    """Region inputs of B images, padded to the store's R boxes.

    Attributes
    ----------
    features : ndarray, float32 (B, R, D)
        Zeros at padded boxes.
    boxes : ndarray, float32 (B, R, 4)
        Normalised x1, y1, x2, y2 in [0, 1]; zeros at padded boxes.
    mask : ndarray, bool (B, R)
        True for a real box.
    image_w, image_h : ndarray, int64 (B,)
        Image size in pixels; 0 where the source did not record it (boxes are normalised anyway).
    """

    features: np.ndarray
    boxes: np.ndarray
    mask: np.ndarray
    image_w: np.ndarray
    image_h: np.ndarray

    @property
    def num_boxes(self) -> np.ndarray:
        """Real boxes per image, int64 (B,)."""
        return self.mask.sum(axis=1).astype(np.int64)

    def __len__(self) -> int:
        return int(self.features.shape[0])


class RegionStore(ClosesOnExit):
    """Read-only view of a vlprobe region file (see the module docstring for the schema).

    Parameters
    ----------
    path : path
        A file written by :func:`write_regions` / ``probe regions import`` / ``probe fixtures regions``
        / ``probe regions extract``.
    allow_incomplete : bool
        Open a file that an interrupted ``probe regions extract`` left incomplete (to inspect it);
        its images not yet written count as missing. Without it such a file is refused.

    Attributes
    ----------
    image_ids : tuple[str, ...]
        Normalised image ids in file order (written or not).
    num_boxes, image_w, image_h : ndarray, int64 (N,)
        Real boxes and pixel size (0 = unknown) of each image, in file order.
    done : ndarray, bool (N,)
        Whether each image's row is written (all True but in an incomplete file).
    complete : bool
    schema_version : int
    meta : dict
        Source format, source path and fingerprint, converter, detector if known.
    """

    def __init__(self, path: str | os.PathLike[str], *, allow_incomplete: bool = False) -> None:
        self.path = Path(path)
        self._file: h5py.File | None = None
        self._fingerprint: str | None = None
        check_file(self.path, "regions", missing=InputError)
        try:
            f = h5py.File(self.path, "r")
        except OSError as exc:
            kind, detail = h5_open_failure(exc)
            if kind == "locked":
                raise InputError(
                    f"regions: {str(self.path)!r} is open for writing in another process "
                    "(a `probe regions extract` still running?)"
                ) from None
            if kind == "truncated":
                raise InputError(
                    f"regions: {str(self.path)!r} is truncated ({detail}): the file was cut short (an "
                    "interrupted copy or download, a full disk); make it again or copy it again"
                ) from None
            raise InputError(f"regions: {str(self.path)!r} is not an HDF5 file ({detail})") from None
        self._file = f
        try:
            self.schema_version = self._check_schema(f)
            self.done: np.ndarray = f["done"][()].astype(bool) if "done" in f else np.ones(len(f["image_id"]), bool)
            self.complete = bool(f.attrs.get("complete", True)) and bool(self.done.all())
            if not self.complete and not allow_incomplete:
                raise InputError(
                    f"regions: {str(self.path)!r} is incomplete ({int(self.done.sum())} of {len(self.done)} images "
                    "written); rerun the `probe regions extract` command that made it to finish it"
                )
            self._check_box_counts(f)
            self.image_ids: tuple[str, ...] = tuple(s.decode("utf-8") for s in f["image_id"][()])
            self._rows = {name: i for i, name in enumerate(self.image_ids) if self.done[i]}
            if len(set(self.image_ids)) != len(self.image_ids):
                raise InputError(f"regions: {str(self.path)!r} lists an image id twice")
            self.num_boxes = f["num_boxes"][()].astype(np.int64)
            self.image_w = f["image_w"][()].astype(np.int64)
            self.image_h = f["image_h"][()].astype(np.int64)
            self.meta: dict[str, Any] = json.loads(_attr_str(f.attrs.get("meta", "{}")))
        except Exception:
            self.close()
            raise

    def _check_schema(self, f: h5py.File) -> int:
        where = repr(str(self.path))
        version = schema_version_of(f.attrs, SCHEMA, SCHEMA_VERSION, f"regions: {where}", "a vlprobe region file")
        for name in ("image_id", "features", "boxes", "num_boxes", "image_w", "image_h"):
            if name not in f:
                raise InputError(f"regions: {where} lacks the dataset {name!r}")
        n, r, _ = _shape3(f["features"], "features", where)
        expect = {"image_id": (n,), "boxes": (n, r, 4), "num_boxes": (n,), "image_w": (n,), "image_h": (n,)}
        if "done" in f:
            expect["done"] = (n,)
        for name, shape in expect.items():
            if f[name].shape != shape:
                raise InputError(f"regions: {where}: {name} has shape {f[name].shape}, expected {shape}")
        return version

    def _check_box_counts(self, f: h5py.File) -> None:
        r = f["features"].shape[1]
        nb = f["num_boxes"][()][self.done]
        if len(nb) and (nb.min() < 1 or nb.max() > r):
            raise InputError(
                f"regions: {str(self.path)!r}: num_boxes must lie in [1, {r}], got [{nb.min()}, {nb.max()}]"
            )

    # -- properties ------------------------------------------------------------------------
    @property
    def _f(self) -> h5py.File:
        if self._file is None:
            raise InputError(f"regions: the store {str(self.path)!r} is closed")
        return self._file

    @property
    def feature_dim(self) -> int:
        return int(self._f["features"].shape[2])

    @property
    def max_boxes(self) -> int:
        return int(self._f["features"].shape[1])

    @property
    def feature_dtype(self) -> str:
        return str(self._f["features"].dtype)

    @property
    def extras(self) -> tuple[str, ...]:
        """Names of the per-box side datasets under ``extra/``."""
        return tuple(sorted(self._f["extra"])) if "extra" in self._f else ()

    @property
    def fingerprint(self) -> str:
        """``"sha256:<hex>"`` of the file's bytes."""
        if self._fingerprint is None:
            self._fingerprint = "sha256:" + sha256_file(self.path)
        return self._fingerprint

    def __contains__(self, name: object) -> bool:
        try:
            return normalise_image_id(name) in self._rows
        except ValueError:
            return False

    def __len__(self) -> int:
        return len(self.image_ids)

    def __repr__(self) -> str:
        return f"RegionStore({str(self.path)!r}, images={len(self)}, max_boxes={self.max_boxes}, dim={self.feature_dim})"

    # -- access ----------------------------------------------------------------------------
    def rows(self, names: Sequence[str]) -> np.ndarray:
        """Row of each image name, int64 (B,); InputError naming the first missing one."""
        out = np.empty(len(names), dtype=np.int64)
        for i, name in enumerate(names):
            row = self._rows.get(normalise_image_id(name))
            if row is None:
                raise InputError(
                    f"regions: no features for image {name!r} in {self.path.name} ({len(self)} images)"
                )
            out[i] = row
        return out

    def missing(self, names: Iterable[str]) -> list[str]:
        """The names (as given, in order) that have no features in this store."""
        return [name for name in names if name not in self]

    def require(self, names: Sequence[str], whose: str) -> None:
        """One-line ``InputError`` unless every name has features (``whose``: "the dataset's", ...)."""
        missing = self.missing(names)
        if missing:
            raise InputError(
                f"regions: no features for image {missing[0]!r} in {self.path.name} "
                f"({len(missing)} of {whose} {len(names)} images missing)"
            )

    def get(self, names: Sequence[str]) -> RegionBatch:
        """Padded features, boxes and mask of the named images, in the order given.

        Parameters
        ----------
        names : sequence of str
            Image names (``ImageRef.name``); repeats allowed.

        Returns
        -------
        RegionBatch
            features (B, R, D) float32, boxes (B, R, 4), mask (B, R), image_w/h (B,).
        """
        if isinstance(names, str):
            raise InputError("names: expected a sequence of image names, got a single str")
        rows = self.rows(names)
        f = self._f
        uniq, inverse = np.unique(rows, return_inverse=True)
        features = _read_rows(f["features"], uniq)[inverse]
        boxes = _read_rows(f["boxes"], uniq)[inverse]
        nb = self.num_boxes[rows]
        mask = np.arange(self.max_boxes)[None, :] < nb[:, None]
        features[~mask] = 0.0  # padding is never read: whatever a foreign writer left there
        boxes[~mask] = 0.0
        for what, arr in (("features", features), ("boxes", boxes)):
            if not np.all(np.isfinite(arr)):
                bad = names[int(np.flatnonzero(~np.isfinite(arr).all(axis=(1, 2)))[0])]
                raise InputError(f"regions: {what} of image {bad!r} in {self.path.name} contain NaN or inf")
        return RegionBatch(
            features=features, boxes=boxes, mask=mask, image_w=self.image_w[rows], image_h=self.image_h[rows],
        )

    def records(self, batch_size: int = 64) -> Iterable[RegionRecord]:
        """Every written image as a :class:`RegionRecord` (unpadded, extras included), in file order."""
        f = self._f
        extras = self.extras
        for start in range(0, len(self), batch_size):
            stop = min(start + batch_size, len(self))
            feats = f["features"][start:stop]
            boxes = f["boxes"][start:stop]
            ex = {k: f["extra"][k][start:stop] for k in extras}
            for j in range(stop - start):
                if not self.done[start + j]:
                    continue
                n = int(self.num_boxes[start + j])
                yield RegionRecord(
                    image_id=self.image_ids[start + j], features=feats[j, :n], boxes=boxes[j, :n],
                    image_w=int(self.image_w[start + j]), image_h=int(self.image_h[start + j]), extras={k: v[j, :n] for k, v in ex.items()},
                )

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _read_rows(ds: h5py.Dataset, rows: np.ndarray) -> np.ndarray:
    """float32 rows (sorted, unique) of ``ds``, read as contiguous slices.

    h5py's list indexing builds one selection per element and is several times slower than
    one slice read per row (benchmarks/bench_regions.py).
    """
    out = np.empty((len(rows), *ds.shape[1:]), dtype=np.float32)
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    start = 0
    for run in np.split(rows, breaks):
        if len(run):
            out[start:start + len(run)] = ds[int(run[0]):int(run[-1]) + 1]
            start += len(run)
    return out


def _attr_str(v: Any) -> str:
    return v.decode("utf-8") if isinstance(v, bytes) else str(v)


def _shape3(ds: h5py.Dataset, name: str, where: str) -> tuple[int, int, int]:
    if ds.ndim != 3:
        raise InputError(f"regions: {where}: {name} must be 3-d (N, R, D), got shape {ds.shape}")
    n, r, d = ds.shape
    return int(n), int(r), int(d)


# ---------------------------------------------------------------------------------------------
# writing


@dataclass(frozen=True)
class RegionRecord:
    """One image's regions, unpadded: what readers yield and :class:`RegionWriter` takes.

    Attributes
    ----------
    image_id : str
    features : ndarray (n, D)
    boxes : ndarray (n, 4)
        Normalised x1, y1, x2, y2.
    image_w, image_h : int
        Pixels.
    extras : dict[str, ndarray]
        Per-box side data, each (n, ...): ``conf``, ``objects_id``, ``soft_labels``, ...
    """

    image_id: str
    features: np.ndarray
    boxes: np.ndarray
    image_w: int
    image_h: int
    extras: Mapping[str, np.ndarray] = field(default_factory=dict)

    @property
    def num_boxes(self) -> int:
        return int(self.features.shape[0])


class RegionWriter(ClosesOnExit):
    """Write a region file one image at a time, atomically (the file appears on :meth:`close`).

    Memory stays at one growth block: datasets are resizable (N and R grow as images arrive).
    Every record is validated (:meth:`add`); on an exception inside a ``with`` block nothing is
    written.

    Parameters
    ----------
    path : path
        Output ``.h5`` file.
    feature_dim : int or None
        Expected feature width D (None: taken from the first record).
    dtype : {"float32", "float16"}
        Storage dtype of ``features``.
    meta : dict, optional
        Stored as JSON in the ``meta`` attribute (``converter`` is added).
    tolerance : float
        Box tolerance, see :func:`check_normalised_boxes`.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        feature_dim: int | None = None,
        dtype: str = "float32",
        meta: Mapping[str, Any] | None = None,
        tolerance: float = BOX_TOLERANCE,
    ) -> None:
        if dtype not in _FEATURE_DTYPES:
            raise InputError(f"dtype: expected one of {', '.join(_FEATURE_DTYPES)}, got {dtype!r}")
        if feature_dim is not None and (not isinstance(feature_dim, int) or feature_dim < 1):
            raise InputError(f"feature_dim: expected a positive int, got {feature_dim!r}")
        self.path = Path(path)
        self.dtype = dtype
        self.feature_dim = feature_dim
        self.tolerance = tolerance
        self.meta = dict(meta or {})
        self.meta.setdefault("converter", f"vlprobe {__version__}")
        self.meta.setdefault("feature_dtype", dtype)
        self._seen: dict[str, int] = {}
        self._n = 0
        self._r = 0
        self._extras: dict[str, tuple[tuple[int, ...], np.dtype]] | None = None
        # Dataset handles are kept open: a handle dropped after each write closes and flushes its
        # chunks then, and an error of that flush (a full disk) is only printed, never raised.
        self._dsets: dict[str, h5py.Dataset] = {}
        self._ctx = atomic_path(self.path, kind=REGIONS_KIND, recognise=is_region_file)
        self._tmp = self._ctx.__enter__()
        try:
            self._file: h5py.File | None = h5py.File(self._tmp, "w")
        except BaseException as exc:
            self._ctx.__exit__(type(exc), exc, exc.__traceback__)
            raise

    @property
    def count(self) -> int:
        """Images written so far."""
        return self._n

    def add(self, record: RegionRecord, *, where: str = "") -> None:
        """Validate and append one image. ``where`` prefixes errors (e.g. ``"x.tsv line 7"``)."""
        f = self._f
        at = f"{where}: " if where else ""
        try:
            image_id = normalise_image_id(record.image_id)
        except ValueError as exc:
            raise InputError(f"regions: {at}{exc}") from None
        who = f"{at}image {image_id!r}"
        if image_id in self._seen:
            raise InputError(f"regions: {who} appears twice (first as image {self._seen[image_id] + 1})")
        feats = np.asarray(record.features)
        if feats.ndim != 2:
            raise InputError(f"regions: {who}: features must be 2-d (boxes, dim), got shape {feats.shape}")
        n, d = feats.shape
        if self.feature_dim is None:
            self.feature_dim = d
        if d != self.feature_dim:
            raise InputError(f"regions: {who}: feature width {d}, expected {self.feature_dim}")
        if n < 1:
            raise InputError(f"regions: {who} has no boxes")
        if not np.all(np.isfinite(feats)):
            raise InputError(f"regions: {who}: features contain NaN or inf")
        stored = _FEATURE_DTYPES[self.dtype]
        if stored is np.float16 and feats.dtype != np.float16 and np.abs(feats).max() > np.finfo(np.float16).max:
            raise InputError(
                f"regions: {who}: features reach {float(np.abs(feats).max()):.6g}, beyond float16's range "
                f"(±{float(np.finfo(np.float16).max):.0f}); store them as float32 (dtype='float32', --dtype float32)"
            )
        boxes = np.asarray(record.boxes)
        if boxes.shape != (n, 4):
            raise InputError(f"regions: {who}: boxes must have shape ({n}, 4), got {boxes.shape}")
        try:
            boxes = check_normalised_boxes(boxes, tolerance=self.tolerance, name="boxes")
        except ValueError as exc:
            raise InputError(f"regions: {who}: {exc}") from None
        w, h = int(record.image_w), int(record.image_h)
        if (w, h) != (0, 0) and (w < 1 or h < 1):
            raise InputError(f"regions: {who}: image size must be positive (or 0x0: unknown), got {w}x{h}")
        extras = {k: np.asarray(v) for k, v in record.extras.items()}
        self._check_extras(extras, n, who)
        i = self._n
        try:
            self._grow(self._n + 1, max(self._r, n))
            ds = self._ds
            ds("image_id")[i] = image_id
            ds("features")[i, :n] = feats.astype(stored)
            ds("boxes")[i, :n] = boxes
            ds("num_boxes")[i] = n
            ds("image_w")[i] = w
            ds("image_h")[i] = h
            for k, v in extras.items():
                ds(f"extra/{k}")[i, :n] = v
        except (OSError, RuntimeError, ValueError) as exc:
            if is_disk_full(exc):
                stop_h5_writes(f)  # before the datasets above close and flush into the full disk
                raise no_space_error(exc, self.path) from exc
            raise
        self._seen[image_id] = i
        self._n += 1

    def _check_extras(self, extras: dict[str, np.ndarray], n: int, who: str) -> None:
        spec = {k: (v.shape[1:], v.dtype) for k, v in extras.items()}
        for k, v in extras.items():
            if v.ndim < 1 or v.shape[0] != n:
                raise InputError(f"regions: {who}: {k} must have one entry per box ({n}), got shape {v.shape}")
            if v.dtype.kind == "f" and not np.all(np.isfinite(v)):
                raise InputError(f"regions: {who}: {k} contains NaN or inf")
        if self._extras is None:
            self._extras = spec
            return
        if sorted(spec) != sorted(self._extras) or any(spec[k][0] != self._extras[k][0] for k in spec):
            raise InputError(
                f"regions: {who}: side data {sorted(spec)} differs from the first image's {sorted(self._extras)}"
            )

    @property
    def _f(self) -> h5py.File:
        if self._file is None:
            raise InputError(f"regions: the writer for {str(self.path)!r} is closed")
        return self._file

    def _ds(self, name: str) -> h5py.Dataset:
        ds = self._dsets.get(name)
        if ds is None:
            ds = self._dsets[name] = self._f[name]
        return ds

    def _grow(self, n: int, r: int) -> None:
        f = self._f
        if "features" not in f:
            cap_r = max(r, 1)
            d = int(self.feature_dim or 1)
            box_chunk = min(cap_r, 128)
            f.create_dataset("image_id", (0,), dtype=_STR, maxshape=(None,), chunks=(256,))
            f.create_dataset(
                "features", (0, cap_r, d), dtype=_FEATURE_DTYPES[self.dtype], maxshape=(None, None, d),
                chunks=(1, box_chunk, d), fillvalue=0,
            )
            f.create_dataset("boxes", (0, cap_r, 4), dtype=np.float32, maxshape=(None, None, 4),
                             chunks=(64, box_chunk, 4), fillvalue=0)
            for name in ("num_boxes", "image_w", "image_h"):
                f.create_dataset(name, (0,), dtype=np.int32, maxshape=(None,), chunks=(1024,))
            for k, (tail, dt) in (self._extras or {}).items():
                f.require_group("extra").create_dataset(
                    k, (0, cap_r, *tail), dtype=dt, maxshape=(None, None, *tail),
                    chunks=(1, box_chunk, *tail), fillvalue=0,
                )
        cur_n, cur_r = self._ds("features").shape[:2]
        if n <= cur_n and r <= cur_r:
            return
        self._resize(max(cur_n, n if n <= cur_n else max(n, 2 * cur_n, 16)), max(cur_r, r))

    def _resize(self, n: int, r: int) -> None:
        """Every dataset to ``n`` images and ``r`` boxes."""
        f = self._f
        self._ds("features").resize((n, r, self._ds("features").shape[2]))
        self._ds("boxes").resize((n, r, 4))
        for name in ("image_id", "num_boxes", "image_w", "image_h"):
            self._ds(name).resize((n,))
        for k in f["extra"] if "extra" in f else ():
            ds = self._ds(f"extra/{k}")
            ds.resize((n, r, *ds.shape[2:]))

    def close(self) -> Path:
        """Trim, write the attributes and move the file into place; returns the path."""
        f = self._f
        if self._n == 0:
            self.abort()
            raise InputError(f"regions: no images to write to {str(self.path)!r}")
        try:
            self._resize(self._n, int(self.num_boxes_max))
            f.create_dataset("done", data=np.ones(self._n, dtype=bool))
            f.attrs.update(schema_attrs(SCHEMA, SCHEMA_VERSION))
            f.attrs["complete"] = True
            f.attrs["meta"] = json.dumps(self.meta, sort_keys=True, default=str)
            f.flush()
            f.close()
            self._dsets.clear()
        except BaseException as exc:
            self.abort()
            if is_disk_full(exc):
                raise no_space_error(exc, self.path) from exc
            raise
        self._file = None
        self._ctx.__exit__(None, None, None)
        return self.path

    @property
    def num_boxes_max(self) -> int:
        return int(self._f["num_boxes"][: self._n].max()) if self._n else 0

    def abort(self) -> None:
        """Discard everything written (no file appears)."""
        if self._file is not None:
            discard_h5(self._file, self._tmp)
            self._dsets.clear()
            self._file = None
            err = RuntimeError("aborted")
            try:
                self._ctx.__exit__(RuntimeError, err, None)
            except RuntimeError:
                pass

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if et is None:
            self.close()
            return
        self.abort()
        if e is not None and is_disk_full(e):
            raise no_space_error(e, self.path) from e


def write_regions(
    path: str | os.PathLike[str],
    image_ids: Sequence[str],
    features: Any,
    boxes: Any,
    num_boxes: Any,
    image_w: Any,
    image_h: Any,
    *,
    meta: Mapping[str, Any] | None = None,
    dtype: str | None = None,
    extras: Mapping[str, Any] | None = None,
) -> Path:
    """Write a region file from padded arrays, atomically.

    Parameters
    ----------
    path : path
    image_ids : sequence of str, length N
        Normalised on write (see the module docstring); must stay unique.
    features : array (N, R, D)
    boxes : array (N, R, 4)
        Normalised x1, y1, x2, y2.
    num_boxes : array (N,)
        Real boxes per image; entries past it are padding (ignored, stored as zeros).
    image_w, image_h : array (N,)
        Pixels.
    meta : dict, optional
    dtype : {"float32", "float16"}, optional
        Feature storage dtype; default float16 for float16 input, else float32.
    extras : dict of arrays (N, R, ...), optional
        Per-box side data (``conf``, ...).

    Returns
    -------
    Path
    """
    feats = np.asarray(features)
    if feats.ndim != 3:
        raise InputError(f"features: expected shape (N, R, D), got {feats.shape}")
    n, r, d = feats.shape
    ids = list(image_ids)
    arrays = {"boxes": np.asarray(boxes), "num_boxes": np.asarray(num_boxes),
              "image_w": np.asarray(image_w), "image_h": np.asarray(image_h)}
    expect = {"boxes": (n, r, 4), "num_boxes": (n,), "image_w": (n,), "image_h": (n,)}
    if len(ids) != n:
        raise InputError(f"image_ids: expected {n} ids (one per features row), got {len(ids)}")
    for name, shape in expect.items():
        if arrays[name].shape != shape:
            raise InputError(f"{name}: expected shape {shape}, got {arrays[name].shape}")
    nb = arrays["num_boxes"].astype(np.int64)
    if n and (nb.min() < 1 or nb.max() > r):
        raise InputError(f"num_boxes: expected values in [1, {r}], got [{nb.min()}, {nb.max()}]")
    ex = {k: np.asarray(v) for k, v in (extras or {}).items()}
    for k, v in ex.items():
        if v.shape[:2] != (n, r):
            raise InputError(f"extras[{k!r}]: expected shape ({n}, {r}, ...), got {v.shape}")
    store_dtype = dtype or ("float16" if feats.dtype == np.float16 else "float32")
    with RegionWriter(path, feature_dim=d, dtype=store_dtype, meta=meta) as w:
        for i in range(n):
            kept = int(nb[i])
            w.add(RegionRecord(
                ids[i], feats[i, :kept], arrays["boxes"][i, :kept], int(arrays["image_w"][i]),
                int(arrays["image_h"][i]), {name: v[i, :kept] for name, v in ex.items()},
            ))
    return Path(path)


def is_region_file(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a vlprobe region file (by its ``schema`` attribute; nothing else is read)."""
    try:
        if not h5py.is_hdf5(path):
            return False
        with h5py.File(path, "r", locking=False) as f:
            return _attr_str(f.attrs.get("schema", "")) == SCHEMA
    except OSError:
        return False
