"""A region file written in flushed chunks with a done mask: what ``probe regions extract`` writes.

The file is an ordinary vlprobe region file (schema version 2, see
:mod:`vlprobe.extract.regions.store`) whose every dataset is allocated in full when it is created:
``features`` (n, R, D) with R = the preset's largest box count, ``boxes``, ``num_boxes``, the
image sizes, ``extra/{objects_id, objects_conf, attrs_id, attrs_conf}``, ``image_sha256`` and
``done``. :class:`ChunkedRegionWriter` is the region kind of
:class:`vlprobe.extract.sharded_h5.ShardedH5Writer`, which creates, locks, resumes and writes
the file: nothing is compressed, so a write never moves data or touches HDF5 metadata; each
batch writes its rows, flushes, marks them done and flushes again, so a killed run loses at most
the batch in flight and never corrupts what is written. The root attribute ``complete`` turns
True once every row is done.

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
from vlprobe.extract.sharded_h5 import ShardedH5Writer, allocate
from vlprobe.io.h5 import schema_attrs
from vlprobe.validation import InputError

__all__ = ["EXTRAS", "ROW_DATASETS", "ChunkedRegionWriter", "RegionRows", "RegionRunHeader"]

_STR = h5py.string_dtype(encoding="utf-8")
_FEATURE_DTYPES = {"float32": np.float32, "float16": np.float16}
#: Per-box side data of a detector run, with their stored dtypes.
EXTRAS: dict[str, type] = {
    "objects_id": np.int64, "objects_conf": np.float32, "attrs_id": np.int64, "attrs_conf": np.float32,
}
#: The datasets that hold the rows (``done`` marks them written; ``image_id`` is set at creation).
ROW_DATASETS: tuple[str, ...] = (
    "features", "boxes", "num_boxes", "image_w", "image_h", *(f"extra/{k}" for k in EXTRAS), "image_sha256",
)


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

    def compared(self) -> dict[str, Any]:
        """Every field, the preset's parameters one by one (``preset.<parameter>``)."""
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


class ChunkedRegionWriter(ShardedH5Writer[RegionRunHeader]):
    """Create or resume a region file of one run (see the module docstring) and write batches into it.

    Use :meth:`open`; close with :meth:`close` or a ``with`` block.
    """

    noun = "region file"
    kind = "a vlprobe region file"

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
            for other images, or another process is writing it.
        OSError
            The disk has no room for the file (it names ``path``; nothing is left behind).
        """
        def same_images(f: h5py.File) -> None:
            stored = [_s(x) for x in f["image_id"][()]]
            if stored != list(image_ids):
                at = next((i for i, (a, b) in enumerate(zip(stored, image_ids, strict=False)) if a != b),
                          min(len(stored), len(image_ids)))
                raise InputError(
                    f"{cls.where(Path(path))} was made for other images (row {at}: file has "
                    f"{stored[at] if at < len(stored) else 'no image'!r}, this run has "
                    f"{image_ids[at] if at < len(image_ids) else 'no image'!r}); use another --out"
                )

        writer = cls._open(path, header, lambda f: _create(f, header, image_ids, meta, max_boxes), check=same_images)
        try:
            writer._add_jobs(meta.get("job_ids") or [])
        except BaseException:
            writer.close()
            raise
        return writer

    def _add_jobs(self, jobs: Sequence[Mapping[str, str]]) -> None:
        """Append this run's ``job_ids`` entries to a resumed file's ``meta`` (a new file has them)."""
        if not jobs:
            return
        try:
            meta = json.loads(_s(self.f.attrs.get("meta", "{}")))
        except ValueError:
            return
        have = meta.get("job_ids") if isinstance(meta.get("job_ids"), list) else []
        new = [dict(j) for j in jobs]
        if have[len(have) - len(new):] != new:
            meta["job_ids"] = [*have, *new]
            self.set_attrs({"meta": json.dumps(meta, sort_keys=True, default=str)})

    @classmethod
    def _read_header(cls, f: h5py.File, p: Path) -> tuple[int, RegionRunHeader]:
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
        version = int(f.attrs.get("schema_version", -1))
        if version != SCHEMA_VERSION or "done" not in f:
            raise InputError(f"{where} was written by another vlprobe version; use another --out")
        return version, header

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
        data: dict[str, np.ndarray] = {
            "features": rows.features, "boxes": rows.boxes, "num_boxes": rows.num_boxes,
            "image_w": rows.image_w, "image_h": rows.image_h,
            "image_sha256": np.array([h.encode("ascii") for h in rows.image_sha256], dtype="S64"),
        }
        data.update({f"extra/{name}": rows.extras[name] for name in EXTRAS})
        self.commit(data, ["done"], slice(start, start + len(rows.num_boxes)))

    def mark_complete(self) -> None:
        """Set ``complete`` once every row is done (RuntimeError otherwise: a caller's bug)."""
        done = self.done
        if not done.all():
            raise RuntimeError(f"regions: {self.path.name}: {int((~done).sum())} rows are not written yet")
        self.set_attrs({"complete": np.True_})


def _s(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


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
    allocate(f, "features", (n, r, d), _FEATURE_DTYPES[header.dtype], chunks=(1, r, d))
    allocate(f, "boxes", (n, r, 4), np.float32)
    for name in ("num_boxes", "image_w", "image_h"):
        allocate(f, name, (n,), np.int32)
    extra = f.create_group("extra")
    for name, dtype in EXTRAS.items():
        allocate(extra, name, (n, r), dtype)
    allocate(f, "image_sha256", (n,), np.dtype("S64"))
    allocate(f, "done", (n,), np.bool_)
