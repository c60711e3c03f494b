"""Region features from pixels: images -> Visual Genome Faster R-CNN -> a resumable region file.

:func:`extract_regions` takes the images of a folder or of a registered dataset (each distinct
image once), runs the detector over them in batches (the next batch's files are read and
decoded in a background thread while the detector runs), and writes each batch as one flushed
chunk of a :class:`~vlprobe.extract.regions.chunked.ChunkedRegionWriter` file: boxes normalised
by the original image size, 2048-d features, object and attribute ids and confidences, the image
size and the sha256 of each image file. Images are decoded with their EXIF orientation applied, as
OpenCV's ``cv2.imread`` in the reference bottom-up-attention pipeline decodes them (the file's
``meta`` records ``image_orientation = "exif"``; a file without it decoded them as stored and is
not resumed). A rerun resumes where a killed run stopped; settings that
differ from the file's are refused, naming the field. ``shard="K/N"`` runs the K-th of N
contiguous blocks of the image list into its own file; :func:`merge_region_shards` joins them.
``shard="auto"`` reads K and N from the launcher's environment and writes
``<out stem>.shard-K-of-N.h5`` (:mod:`vlprobe.shards`).

The result is read by :class:`~vlprobe.extract.regions.store.RegionStore`, so ``probe extract --model
lxmert|uniter --regions FILE`` runs on it unchanged.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vlprobe import __version__
from vlprobe.devices import device_name
from vlprobe.extract.regions.boxes import normalise_boxes
from vlprobe.extract.regions.chunked import EXTRAS, ChunkedRegionWriter, RegionRows, RegionRunHeader
from vlprobe.extract.regions.sources import (
    DETECTOR_ORIENTATION,
    ImageList,
    dataset_images,
    folder_images,
    read_image,
)
from vlprobe.provenance import git_revision, package_versions, sha256_file
from vlprobe.shards import auto_device, job_entry, resolve_shard, shard_block, shard_path
from vlprobe.validation import InputError, check_choice, check_positive_int

__all__ = [
    "DEFAULT_PRESET",
    "RegionExtractConfig",
    "RegionExtractResult",
    "extract_regions",
    "parse_boxes",
    "selection_preset",
]

#: The preset ``probe regions extract`` uses without ``--preset``.
DEFAULT_PRESET = "lxmert-36"


@dataclass(frozen=True)
class RegionExtractConfig:
    """One region extraction (the CLI builds this, then calls :func:`extract_regions`).

    Exactly one of ``images`` (a folder) and ``dataset`` (a registered dataset, with ``data_dir``
    and the loader's ``dataset_options``) names the images.
    """

    detector: str
    out: Path
    images: Path | None = None
    dataset: str | None = None
    data_dir: Path | None = None
    dataset_options: Mapping[str, Any] = field(default_factory=dict)
    preset: str = DEFAULT_PRESET
    #: ``"36"`` (exactly 36 boxes) or ``"10:100"`` (from 10 to 100); None: the preset's.
    boxes: str | None = None
    #: Confidence a box needs beyond the preset's minimum count; None: the preset's.
    min_score: float | None = None
    batch_size: int = 4
    device: str = "auto"
    dtype: str = "float32"
    shard: str = "0/1"
    progress: bool = True


@dataclass(frozen=True)
class RegionExtractResult:
    """What a run did: images computed now, images of this file, seconds, and the file."""

    path: Path
    images_written: int
    images_total: int
    seconds: float
    complete: bool


def parse_boxes(spec: str | int) -> tuple[int, int]:
    """``"36"`` -> (36, 36); ``"10:100"`` -> (10, 100): the least and most boxes per image.

    Only the form is checked here; the preset checks the counts (:func:`selection_preset`).
    """
    text = str(spec).strip()
    parts = text.split(":")
    if len(parts) in (1, 2) and all(re.fullmatch(r"[+-]?\d+", part.strip()) for part in parts):
        return int(parts[0]), int(parts[-1])
    raise InputError(f"boxes: expected a count (36) or a range MIN:MAX (10:100), got {text!r}")


def selection_preset(name: str, boxes: str | None = None, min_score: float | None = None) -> Any:
    """The named preset with ``--boxes``/``--min-score`` applied (and checked by the preset)."""
    from vlprobe.extract.regions.detector import get_preset

    lo, hi = parse_boxes(boxes) if boxes is not None else (None, None)
    return get_preset(name).with_overrides(min_boxes=lo, max_boxes=hi, min_score=min_score)


def _preset_dict(preset: Any) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in preset.to_dict().items()}


def _validate(config: RegionExtractConfig) -> None:
    check_positive_int(config.batch_size, "batch_size")
    if Path(config.out).suffix.lower() not in (".h5", ".hdf5"):
        raise InputError(f"out: expected an HDF5 file name ending in .h5, got {str(config.out)!r}")
    if (config.images is None) == (config.dataset is None):
        raise InputError(
            "images: give either --images DIR (an image folder) or --dataset NAME --data-dir DIR, "
            f"got {'both' if config.images is not None else 'neither'}"
        )
    if config.images is not None and (config.data_dir is not None or config.dataset_options):
        raise InputError("images: --data-dir and the dataset options go with --dataset, not with --images")
    check_choice(config.dtype, "dtype", ("float32", "float16"))


def _image_list(config: RegionExtractConfig) -> ImageList:
    if config.images is not None:
        return folder_images(config.images)
    assert config.dataset is not None
    return dataset_images(config.dataset, config.data_dir, config.dataset_options)


def extract_regions(config: RegionExtractConfig, *, detector: Any = None) -> RegionExtractResult:
    """Run (or resume) one region extraction; see the module docstring.

    Parameters
    ----------
    config : RegionExtractConfig
    detector : RegionDetector, optional
        An already loaded detector (benchmarks); default: ``RegionDetector.load(config.detector)``.

    Returns
    -------
    RegionExtractResult
    """
    t0 = time.perf_counter()
    _validate(config)
    k, n_shards, placement = resolve_shard(config.shard)
    out = shard_path(config.out, k, n_shards) if str(config.shard).strip().lower() == "auto" else Path(config.out)
    config = dataclasses.replace(config, out=out, shard=f"{k}/{n_shards}",
                                 device=auto_device(config.device, placement))
    if placement is not None:
        _say(config, f"shard {k}/{n_shards} under {placement.source}: {out}")
    preset = selection_preset(config.preset, config.boxes, config.min_score)
    if ChunkedRegionWriter.check_out(config.out) is not None:
        _check_orientation(Path(config.out))
    images = _image_list(config)
    start, stop = shard_block(len(images), k, n_shards)
    images.require_files(start, stop)
    if detector is None:
        from vlprobe.extract.regions.detector import RegionDetector

        detector = RegionDetector.load(config.detector, device=config.device, dtype=config.dtype)
    preset = detector.resolve(preset)  # the checkpoint's values filled in: what the file records
    preset_d = _preset_dict(preset)
    header = RegionRunHeader(
        detector_fingerprint=str(detector.fingerprint), preset=preset_d, feature_dim=int(detector.feature_dim),
        dtype=config.dtype, images_fingerprint=images.fingerprint, n_images=len(images), shard=f"{k}/{n_shards}",
    )
    described = dict(detector.describe())
    meta = {
        "detector": {**described, "spec": str(config.detector)},
        "colour_order": preset_d.get("channel_order", described.get("channel_order")),
        "image_orientation": DETECTOR_ORIENTATION,
        "images": dict(images.source),
        "row_start": start, "row_stop": stop,
        "job_ids": [job_entry(k, n_shards, placement)] if placement is not None else [],
        "run": {
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "vlprobe_version": __version__,
            "versions": package_versions(), "git_revision": git_revision(),
            "device": device_name(getattr(detector, "device", None)), "batch_size": config.batch_size,
        },
    }
    names, paths = images.names[start:stop], images.paths[start:stop]
    with ChunkedRegionWriter.open(config.out, header, names, meta, max_boxes=int(preset_d["max_boxes"])) as writer:
        done = writer.done
        _check_unchanged(writer, paths, done)
        batches = writer.todo_batches(config.batch_size)
        if batches and done.any():
            _say(config, f"regions: resuming {Path(config.out).name}, {int(done.sum())} of {len(done)} images already done")
        _run(writer, detector, preset, names, paths, batches, done, config)
        if batches or not writer.complete:
            writer.mark_complete()
        written = sum(b - a for a, b in batches)
    return RegionExtractResult(Path(config.out), written, len(names), time.perf_counter() - t0, True)


def _say(config: RegionExtractConfig, msg: str) -> None:
    if config.progress:
        print(msg, file=sys.stderr)


def _check_orientation(path: Path) -> None:
    """The existing region file ``path`` must have decoded its images as this run does (files
    written before ``image_orientation`` was recorded decoded them as stored)."""
    import h5py

    try:
        with h5py.File(path, "r") as f:
            raw = f.attrs.get("meta", "{}")
            meta = json.loads(raw.decode("utf-8") if isinstance(raw, bytes) else str(raw))
    except (OSError, ValueError):
        return  # check_existing has read it; a file that went away or changed is its writer's to report
    stored = meta.get("image_orientation", "stored") if isinstance(meta, dict) else "stored"
    if stored != DETECTOR_ORIENTATION:
        raise InputError(
            f"out: {str(path)!r} was made with other settings (image_orientation: file has {stored!r}, "
            f"this run has {DETECTOR_ORIENTATION!r}); use another --out or delete the file"
        )


def _check_unchanged(writer: ChunkedRegionWriter, paths: Sequence[Path | None], done: np.ndarray) -> None:
    """Every image already written must still have the bytes it had (its sha256 is stored)."""
    if not done.any():
        return
    stored = writer.stored_sha256()
    for i in np.flatnonzero(done):
        path = paths[int(i)]
        assert path is not None  # require_files checked every row
        if sha256_file(path) != stored[int(i)]:
            raise InputError(
                f"images: {str(path)!r} changed since it was extracted into {writer.path.name}; "
                "use another --out (or delete the file) to extract the images as they are now"
            )


def _run(
    writer: ChunkedRegionWriter, detector: Any, preset: Any, names: Sequence[str], paths: Sequence[Path | None],
    batches: Sequence[tuple[int, int]], done: np.ndarray, config: RegionExtractConfig,
) -> None:
    if not batches:
        return
    from tqdm import tqdm

    def load(batch: tuple[int, int]) -> tuple[list[Any], list[str]]:
        pils, hashes = [], []
        for path in paths[batch[0] : batch[1]]:
            assert path is not None
            img, digest = read_image(path)
            pils.append(img)
            hashes.append(digest)
        return pils, hashes

    bar = tqdm(
        total=len(done), initial=int(done.sum()), desc="regions", unit="img", disable=not config.progress,
        file=sys.stderr, dynamic_ncols=True,
    )
    try:
        with ThreadPoolExecutor(max_workers=1) as pool:
            pending = pool.submit(load, batches[0])
            for i, (a, b) in enumerate(batches):
                pils, hashes = pending.result()
                if i + 1 < len(batches):
                    pending = pool.submit(load, batches[i + 1])
                try:
                    dets = detector.detect(pils, preset)
                except ValueError as exc:
                    index = getattr(exc, "index", None)
                    if index is None:
                        raise
                    path, reason = paths[a + int(index)], getattr(exc, "reason", str(exc))
                    raise InputError(f"images: {str(path)!r} ({names[a + int(index)]}): {reason}") from None
                rows = _region_rows(dets, pils, hashes, names[a:b], writer, config.dtype)
                writer.write(a, rows)
                bar.update(int((~done[a:b]).sum()))
    finally:
        bar.close()


def _region_rows(
    dets: Sequence[Any], pils: Sequence[Any], hashes: Sequence[str], names: Sequence[str],
    writer: ChunkedRegionWriter, dtype: str,
) -> RegionRows:
    """Detections of a batch, padded to the file's R boxes, boxes normalised by each image's size."""
    b, r, d = len(pils), writer.max_boxes, writer.header.feature_dim
    if len(dets) != b:
        raise RuntimeError(f"detector returned {len(dets)} results for {b} images")
    features = np.zeros((b, r, d), dtype=np.float16 if dtype == "float16" else np.float32)
    boxes = np.zeros((b, r, 4), dtype=np.float32)
    num_boxes = np.zeros(b, dtype=np.int32)
    sizes = np.zeros((2, b), dtype=np.int32)
    extras: dict[str, np.ndarray] = {name: np.zeros((b, r), dtype=dt) for name, dt in EXTRAS.items()}
    for j, (det, img) in enumerate(zip(dets, pils, strict=True)):
        n = len(det.boxes)
        if (int(det.image_w), int(det.image_h)) != tuple(img.size):
            raise RuntimeError(f"detector reports size {det.image_w}x{det.image_h} for a {img.size} image")
        if not 1 <= n <= r:
            raise RuntimeError(f"detector returned {n} boxes for image {names[j]!r}, outside [1, {r}]")
        feats = np.asarray(det.features)
        if not np.all(np.isfinite(feats)):
            raise InputError(
                f"regions: features of image {names[j]!r} contain NaN or inf"
                + (" (float16 overflow: use --dtype float32)" if dtype == "float16" else "")
            )
        features[j, :n] = feats
        boxes[j, :n] = normalise_boxes(det.boxes, det.image_w, det.image_h, name=f"boxes of image {names[j]!r}")
        num_boxes[j] = n
        sizes[:, j] = det.image_w, det.image_h
        for name in EXTRAS:
            extras[name][j, :n] = np.asarray(getattr(det, name))
    return RegionRows(features, boxes, num_boxes, sizes[0], sizes[1], extras, list(hashes))
