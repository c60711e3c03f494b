"""A region file written in flushed chunks with a done mask: what ``probe regions extract`` writes.

The file is an ordinary vlprobe region file (schema version 2, see
:mod:`vlprobe.extract.regions.store`) whose every dataset is allocated in full when it is created:
``features`` (n, R, D) with R = the preset's largest box count, ``boxes``, ``num_boxes``, the
image sizes, ``extra/{objects_id, objects_conf, attrs_id, attrs_conf}``, ``image_sha256`` and
``done``. Nothing is compressed, so a write never moves data or touches HDF5 metadata. Each
batch writes its rows, flushes, marks them done and flushes again; a killed run loses at most the
batch in flight and never corrupts what is written. The root attribute ``complete`` turns True
once every row is done.

Rows are the images of one shard (``row_start:row_stop`` of the whole run's image list, in
order); batches follow a fixed grid (rows ``[b * B, (b + 1) * B)``), and a resumed run recomputes
every batch with a row not done, whole: with the same batch size every image is computed in the
same company as in an uninterrupted run, so the finished file holds the same bytes.

The metadata (the ``meta`` JSON attribute) records the run; :class:`RegionRunHeader` is the part
that identifies it (compared on resume and merge)::

    source_format   "detector"
    detector        {"spec": what the user passed, "fingerprint", ...: the detector's own description}
    preset          the box-selection preset: its name and every selection parameter
    colour_order    the channel order the detector was fed ("BGR" for the trained order)
    feature_dim, dtype
    images          {"source": "folder" | "dataset", "fingerprint": sha256 of the ordered image ids
                    of the whole run, "n_images", the folder or the dataset and its options}
    shard, row_start, row_stop
    run             {"created", "vlprobe_version", "versions", "git_revision", "device", "batch_size"}
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from vlprobe import __version__
from vlprobe.extract.regions.store import SCHEMA, SCHEMA_VERSION
from vlprobe.io.h5 import OpenH5, schema_attrs
from vlprobe.validation import InputError

__all__ = ["EXTRAS", "ChunkedRegionWriter", "RegionRows", "RegionRunHeader"]

_STR = h5py.string_dtype(encoding="utf-8")
_FEATURE_DTYPES = {"float32": np.float32, "float16": np.float16}
#: Per-box side data of a detector run, with their stored dtypes.
EXTRAS: dict[str, type] = {
    "objects_id": np.int64, "objects_conf": np.float32, "attrs_id": np.int64, "attrs_conf": np.float32,
}


@dataclass(frozen=True)
class RegionRunHeader:
    """What identifies a region extraction: every field must match to resume a file or merge shards.

    Attributes
    ----------
    detector_fingerprint : str
        ``"sha256:<hex>"`` of the detector checkpoint (config and weights).
    preset : dict
        The box-selection preset's name and every selection parameter.
    feature_dim : int
    dtype : str
        The detector's compute dtype, also the features' storage dtype.
    images_fingerprint : str
        sha256 over the ordered image ids of the whole run (every shard).
    n_images : int
        Images of the whole run.
    shard : str
        ``"K/N"``.
    """

    detector_fingerprint: str
    preset: Mapping[str, Any]
    feature_dim: int
    dtype: str
    images_fingerprint: str
    n_images: int
    shard: str

    def diff(self, other: RegionRunHeader, *, skip: Sequence[str] = ()) -> str | None:
        """The first field (``preset.<parameter>`` for a selection parameter) that differs, described."""
        mine, theirs = self._flat(), other._flat()
        for key in dict.fromkeys([*mine, *theirs]):
            if key in skip or key.split(".")[0] in skip:
                continue
            if mine.get(key) != theirs.get(key):
                return f"{key}: file has {mine.get(key)!r}, this run has {theirs.get(key)!r}"
        return None

    def _flat(self) -> dict[str, Any]:
        out: dict[str, Any] = {"detector fingerprint": self.detector_fingerprint}
        out.update({f"preset.{k}": _plain(v) for k, v in self.preset.items()})
        out.update(feature_dim=self.feature_dim, dtype=self.dtype, n_images=self.n_images,
                   images=self.images_fingerprint, shard=self.shard)
        return out

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any]) -> RegionRunHeader:
        """The header of a file's ``meta``; InputError if it was not made by ``probe regions extract``."""
        try:
            return cls(
                detector_fingerprint=str(meta["detector"]["fingerprint"]), preset=dict(meta["preset"]),
                feature_dim=int(meta["feature_dim"]), dtype=str(meta["dtype"]),
                images_fingerprint=str(meta["images"]["fingerprint"]), n_images=int(meta["images"]["n_images"]),
                shard=str(meta["shard"]),
            )
        except (KeyError, TypeError, ValueError):
            raise InputError("was not made by `probe regions extract`") from None


@dataclass(frozen=True)
class RegionRows:
    """A batch of B consecutive rows, padded to the file's R boxes.

    Attributes
    ----------
    features : ndarray (B, R, D)
    boxes : ndarray, float32 (B, R, 4)
        Normalised x1, y1, x2, y2.
    num_boxes, image_w, image_h : ndarray, int (B,)
    extras : dict of ndarray (B, R)
        Every entry of :data:`EXTRAS`.
    image_sha256 : sequence of str, length B
    """

    features: np.ndarray
    boxes: np.ndarray
    num_boxes: np.ndarray
    image_w: np.ndarray
    image_h: np.ndarray
    extras: Mapping[str, np.ndarray]
    image_sha256: Sequence[str]


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _open_h5(path: Path, mode: str) -> h5py.File:
    try:
        return h5py.File(path, mode)
    except OSError as exc:
        if "lock" in str(exc).lower():
            raise InputError(
                f"out: {str(path)!r} is open in another process (another `probe regions extract` on it?)"
            ) from None
        raise InputError(f"out: {str(path)!r} exists and is not a readable HDF5 file; refusing to touch it") from None


class ChunkedRegionWriter(OpenH5):
    """Create or resume a region file of one run (see the module docstring) and write batches into it.

    Use :meth:`open`; close with :meth:`close` or a ``with`` block.
    """

    def __init__(self, f: h5py.File, path: Path, header: RegionRunHeader) -> None:
        self.f = f
        self.path = path
        self.header = header

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        header: RegionRunHeader,
        image_ids: Sequence[str],
        meta: Mapping[str, Any],
        *,
        max_boxes: int,
    ) -> ChunkedRegionWriter:
        """Open ``path`` for this run: create it, or resume it if it was made with the same settings.

        Parameters
        ----------
        path : path
        header : RegionRunHeader
        image_ids : sequence of str, length n
            Normalised ids of this file's rows.
        meta : dict
            Recorded in the ``meta`` attribute (the header fields are merged in).
        max_boxes : int
            R: boxes per image at most.

        Raises
        ------
        InputError
            ``path`` exists and is not a file of ``probe regions extract`` (it is never replaced), or
            it was made with other settings (the message names the first field that differs) or
            for other images.
        """
        p = Path(path)
        if p.exists():
            return cls._resume(p, header, image_ids)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(f".{p.name}.creating")
        f = h5py.File(tmp, "w")
        try:
            _create(f, header, image_ids, meta, max_boxes)
            f.flush()
            f.close()
            os.replace(tmp, p)
        finally:
            if f.id.valid:
                f.close()
            if tmp.exists():
                tmp.unlink()
        return cls(_open_h5(p, "r+"), p, header)

    @staticmethod
    def check_existing(path: str | os.PathLike[str]) -> RegionRunHeader | None:
        """The header of an existing ``path`` (None if there is none); InputError if ``path`` is
        something a run must not touch: not a file of ``probe regions extract`` (never replaced),
        or of another schema version."""
        p = Path(path)
        if not p.exists():
            return None
        if not p.is_file():
            raise InputError(f"out: {str(p)!r} exists and is not a file")
        with _open_h5(p, "r") as f:
            return _existing_header(f, p)

    @classmethod
    def _resume(cls, p: Path, header: RegionRunHeader, image_ids: Sequence[str]) -> ChunkedRegionWriter:
        cls.check_existing(p)
        f = _open_h5(p, "r+")
        try:
            where = f"out: {str(p)!r}"
            diff = _existing_header(f, p).diff(header)
            if diff:
                raise InputError(f"{where} was made with other settings ({diff}); use another --out or delete the file")
            stored = [_s(x) for x in f["image_id"][()]]
            if stored != list(image_ids):
                at = next((i for i, (a, b) in enumerate(zip(stored, image_ids, strict=False)) if a != b),
                          min(len(stored), len(image_ids)))
                raise InputError(
                    f"{where} was made for other images (row {at}: file has "
                    f"{stored[at] if at < len(stored) else 'no image'!r}, this run has "
                    f"{image_ids[at] if at < len(image_ids) else 'no image'!r}); use another --out"
                )
        except BaseException:
            f.close()
            raise
        return cls(f, p, header)

    # -- state ----------------------------------------------------------------------------------
    @property
    def n_rows(self) -> int:
        return int(self.f["done"].shape[0])

    @property
    def max_boxes(self) -> int:
        return int(self.f["features"].shape[1])

    @property
    def done(self) -> np.ndarray:
        """bool (n,): rows written."""
        return self.f["done"][()]

    @property
    def complete(self) -> bool:
        return bool(self.f.attrs.get("complete", False))

    def stored_sha256(self) -> list[str]:
        """sha256 of each row's image as written ("" for rows not done)."""
        return [x.decode("ascii") for x in self.f["image_sha256"][()]]

    def todo_batches(self, batch_size: int) -> list[tuple[int, int]]:
        """``(start, stop)`` of every batch of the grid ``[b * batch_size, (b + 1) * batch_size)``
        with a row not done, ascending."""
        done = self.done
        return [
            (a, min(a + batch_size, len(done)))
            for a in range(0, len(done), batch_size)
            if not done[a : a + batch_size].all()
        ]

    # -- writing --------------------------------------------------------------------------------
    def write(self, start: int, rows: RegionRows) -> None:
        """Write rows ``start:start + B``, flush, then mark them done and flush again."""
        f = self.f
        stop = start + len(rows.num_boxes)
        f["features"][start:stop] = rows.features.astype(f["features"].dtype, copy=False)
        f["boxes"][start:stop] = rows.boxes.astype(np.float32, copy=False)
        f["num_boxes"][start:stop] = rows.num_boxes
        f["image_w"][start:stop] = rows.image_w
        f["image_h"][start:stop] = rows.image_h
        for name, dtype in EXTRAS.items():
            f["extra"][name][start:stop] = rows.extras[name].astype(dtype, copy=False)
        f["image_sha256"][start:stop] = np.array([h.encode("ascii") for h in rows.image_sha256], dtype="S64")
        f.flush()
        self._mark_done(start, stop)

    def _mark_done(self, start: int, stop: int) -> None:
        self.f["done"][start:stop] = True
        self.f.flush()

    def mark_complete(self) -> None:
        """Set ``complete`` once every row is done (RuntimeError otherwise: a caller's bug)."""
        done = self.done
        if not done.all():
            raise RuntimeError(f"regions: {self.path.name}: {int((~done).sum())} rows are not written yet")
        self.f.attrs["complete"] = True
        self.f.flush()


def _s(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _existing_header(f: h5py.File, p: Path) -> RegionRunHeader:
    where = f"out: {str(p)!r}"
    if _s(f.attrs.get("schema", "")) != SCHEMA:
        raise InputError(f"{where} exists and is not a vlprobe region file; refusing to touch it")
    try:
        meta = json.loads(_s(f.attrs.get("meta", "{}")))
    except ValueError:
        meta = {}
    try:
        header = RegionRunHeader.from_meta(meta)
    except ValueError as exc:
        raise InputError(f"{where} exists and {exc}; refusing to replace it") from None
    if int(f.attrs.get("schema_version", -1)) != SCHEMA_VERSION or "done" not in f:
        raise InputError(f"{where} was written by another vlprobe version; use another --out")
    return header


def _create(
    f: h5py.File, header: RegionRunHeader, image_ids: Sequence[str], meta: Mapping[str, Any], max_boxes: int,
) -> None:
    n, r, d = len(image_ids), int(max_boxes), int(header.feature_dim)
    full = dict(meta)
    full.update(
        source_format="detector", converter=f"vlprobe {__version__}", feature_dtype=header.dtype,
        feature_dim=d, dtype=header.dtype, preset=dict(header.preset), shard=header.shard,
    )
    full["detector"] = {**dict(meta.get("detector", {})), "fingerprint": header.detector_fingerprint}
    full["images"] = {**dict(meta.get("images", {})), "fingerprint": header.images_fingerprint,
                      "n_images": header.n_images}
    f.attrs.update(schema_attrs(SCHEMA, SCHEMA_VERSION))
    f.attrs["complete"] = False
    f.attrs["meta"] = json.dumps(full, sort_keys=True, default=str)
    f.create_dataset("image_id", data=np.array(list(image_ids), dtype=object), dtype=_STR)
    _preallocate(f, "features", (n, r, d), _FEATURE_DTYPES[header.dtype], chunk_rows=1)
    _preallocate(f, "boxes", (n, r, 4), np.float32)
    for name in ("num_boxes", "image_w", "image_h"):
        _preallocate(f, name, (n,), np.int32)
    extra = f.create_group("extra")
    for name, dtype in EXTRAS.items():
        _preallocate(extra, name, (n, r), dtype)
    _preallocate(f, "image_sha256", (n,), np.dtype("S64"))
    _preallocate(f, "done", (n,), np.bool_)


def _preallocate(
    g: h5py.Group, name: str, shape: tuple[int, ...], dtype: Any, *, chunk_rows: int | None = None,
) -> None:
    """A chunked, uncompressed dataset of zeros, every chunk allocated now (writes never touch metadata)."""
    dt = np.dtype(dtype)
    row_bytes = max(1, int(np.prod(shape[1:], dtype=np.int64)) * dt.itemsize)
    rows = chunk_rows or max(1, min(shape[0], (1 << 20) // row_bytes))
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    chunks = (max(1, min(rows, shape[0])), *shape[1:]) if shape[0] else None
    g.create_dataset(name, shape=shape, dtype=dt, chunks=chunks, fillvalue=np.zeros((), dt)[()], dcpl=dcpl)
