"""The images a region extraction runs over: a folder, or a registered dataset's distinct images.

Both give an :class:`ImageList`: normalised image ids (the keys :class:`RegionStore` looks up,
equal to the benchmark's ``ImageRef.name`` normalised), one file per id, and a JSON-able
description of the source. A dataset's images come in its canonical order, each once (SugarCrepe
and VALSE repeat images across items; the first occurrence fixes the position).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vlprobe.extract.regions.boxes import IMAGE_SUFFIXES, normalise_image_id
from vlprobe.validation import InputError

__all__ = ["DETECTOR_ORIENTATION", "ImageList", "dataset_images", "folder_images", "read_image"]

#: How the detector's images are decoded (see :data:`vlprobe.data.items.IMAGE_ORIENTATIONS`): the
#: EXIF Orientation tag applied, as OpenCV's ``cv2.imread`` (the bottom-up-attention pipeline's
#: reader, whose features LXMERT and UNITER were trained on) applies it. Recorded in each region
#: file's ``meta`` as ``image_orientation``.
DETECTOR_ORIENTATION = "exif"


@dataclass(frozen=True)
class ImageList:
    """Distinct images, in order.

    Attributes
    ----------
    names : tuple of str
        Normalised image ids, unique.
    paths : tuple of (Path or None)
        The file of each image (None: the dataset was loaded without pixels).
    source : dict
        JSON-able: ``{"source": "folder", "folder": ...}`` or ``{"source": "dataset", "dataset",
        "data_dir", "options", "dataset_fingerprint", "dataset_source"}``.
    missing_hint : str
        How to give the files when ``paths`` holds None (a dataset's image-folder flags).
    """

    names: tuple[str, ...]
    paths: tuple[Path | None, ...]
    source: Mapping[str, Any] = field(default_factory=dict)
    missing_hint: str = ""

    def __len__(self) -> int:
        return len(self.names)

    @property
    def fingerprint(self) -> str:
        """``"sha256:<hex>"`` over the ordered ids (what a resumed run or a merged shard must share)."""
        h = hashlib.sha256()
        for name in self.names:
            h.update(name.encode("utf-8") + b"\n")
        return "sha256:" + h.hexdigest()

    def require_files(self, start: int = 0, stop: int | None = None) -> None:
        """InputError naming the first image of rows ``start:stop`` without a readable file."""
        for name, path in zip(self.names[start:stop], self.paths[start:stop], strict=True):
            if path is None:
                raise InputError(f"images: image {name!r} has no file ({self.missing_hint or 'no image folder given'})")
            if not path.is_file():
                raise InputError(f"images: image file {str(path)!r} ({name}) does not exist")


def folder_images(folder: str | os.PathLike[str]) -> ImageList:
    """Every image file directly in ``folder`` (by extension, hidden files left out), sorted by name.

    Raises
    ------
    InputError
        Not a folder, no image files, or two files with the same id (``a.png`` and ``a.jpg``).
    """
    root = Path(folder)
    if not root.is_dir():
        raise InputError(f"images: {str(root)!r} is not a folder")
    files = sorted(
        p for p in root.iterdir()
        if p.suffix.lower() in IMAGE_SUFFIXES and not p.name.startswith(".") and p.is_file()
    )
    if not files:
        raise InputError(
            f"images: no image files in {str(root)!r} (looked for {', '.join(sorted(IMAGE_SUFFIXES))})"
        )
    seen: dict[str, Path] = {}
    for p in files:
        name = normalise_image_id(p.name)
        if name in seen:
            raise InputError(f"images: {seen[name].name!r} and {p.name!r} in {str(root)!r} have the same id {name!r}")
        seen[name] = p
    return ImageList(tuple(seen), tuple(seen.values()), {"source": "folder", "folder": str(root.resolve())})


def dataset_images(
    name: str, data_dir: str | os.PathLike[str] | None, options: Mapping[str, Any] | None = None,
) -> ImageList:
    """The distinct images of a registered dataset, loaded through :func:`load_dataset`.

    A loader that reads tag files gets ``tags=False`` (images need no tags). Two different files
    under the same normalised id are refused.
    """
    from vlprobe.data.loading import load_dataset
    from vlprobe.registry import DATASETS

    loader = DATASETS.get(name)
    params = inspect.signature(loader).parameters
    opts = dict(options or {})
    if "tags" in params:
        opts.setdefault("tags", False)
    ds = load_dataset(name, Path(data_dir) if data_dir is not None else None, options=opts)
    paths: dict[str, Path | None] = {}
    for ref in ds.images():
        key = normalise_image_id(ref.name)
        if key not in paths:
            paths[key] = ref.path
            continue
        seen = paths[key]
        if ref.path is not None and seen is not None and Path(ref.path) != Path(seen):
            raise InputError(
                f"images: {name} has two different files under the image id {key!r} ({seen} and {ref.path})"
            )
    hint = " or ".join(
        flag for opt, flag in (("image_dir", "pass --image-dir DIR"), ("image_root", "pass --image-root SOURCE=DIR"))
        if opt in params
    )
    source = {
        "source": "dataset", "dataset": ds.name, "data_dir": str(Path(data_dir).resolve()) if data_dir else None,
        "options": json.loads(json.dumps({k: v for k, v in (options or {}).items() if v is not None}, default=str)),
        "dataset_fingerprint": ds.fingerprint, "dataset_source": ds.source,
    }
    return ImageList(tuple(paths), tuple(paths.values()), source, hint)


def read_image(path: Path, orientation: str = DETECTOR_ORIENTATION) -> tuple[Any, str]:
    """Decode an image file eagerly as RGB, its EXIF orientation applied (``orientation`` as in
    :func:`vlprobe.data.items.decode_rgb`); returns ``(PIL image, sha256 hex of its bytes)``.

    Raises
    ------
    InputError
        The file is missing, empty, truncated or not an image (the message names it).
    """
    from vlprobe.data.items import decode_rgb

    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"images: cannot read {str(path)!r} ({exc.strerror or exc})") from None
    rgb = decode_rgb(data, path, orientation=orientation)
    return rgb, hashlib.sha256(data).hexdigest()

