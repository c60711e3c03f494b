"""Winoground (Thrush et al. 2022) as vlprobe items.

Two sources, one on-disk layout:

* a local directory holding ``examples.jsonl`` and ``images/<image name>.png`` (the layout
  of the hub repository's ``data/`` folder once ``images.zip`` is unpacked; a directory whose
  ``data/`` subfolder has this layout works too). ``probe fixtures dataset`` writes a synthetic
  dataset in exactly this layout;
* the gated hub dataset ``facebook/winoground`` (accept its licence on the hub and set
  ``HF_TOKEN``). It is downloaded once through ``huggingface_hub`` and unpacked into vlprobe's
  cache in the local layout. Winoground's licence forbids redistribution: never commit it.

Item ``i`` (file order) gives images 2i, 2i+1 and captions 2i, 2i+1: caption k matches image k.
Tags per item: ``tag``, ``secondary_tag`` (split on commas), ``collapsed_tag``,
``num_main_preds`` and ``wwh`` (the six "Why is Winoground Hard?" tags, see
:mod:`vlprobe.data.tags`; empty tuple = NoTag).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from vlprobe.data.items import Dataset, ImageRef, Item, TextRef
from vlprobe.data.source_files import iter_json_lines
from vlprobe.data.tags import TAG_FILE_NAME, TagTable, cache_dir, load_tag_file, shipped_tag_file
from vlprobe.provenance import sha256_file
from vlprobe.validation import InputError

__all__ = ["HUB_ID", "WINOGROUND_FIELDS", "load_winoground"]

HUB_ID = "facebook/winoground"
WINOGROUND_FIELDS: dict[str, type] = {
    "id": int,
    "caption_0": str,
    "caption_1": str,
    "image_0": str,
    "image_1": str,
    "tag": str,
    "secondary_tag": str,
    "num_main_preds": int,
    "collapsed_tag": str,
}
_IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")


def load_winoground(
    data_dir: str | os.PathLike[str] | None = None,
    *,
    tags: str | os.PathLike[str] | bool | None = None,
    revision: str | None = None,
    token: str | None = None,
    images: bool = True,
) -> Dataset:
    """Load Winoground from a local directory or the hub.

    Parameters
    ----------
    data_dir : path, optional
        Directory with ``examples.jsonl`` and ``images/``. Without it the dataset comes from
        the hub (``facebook/winoground``), which needs a token with access to the gated repo.
    tags : path, bool or None
        The "Why is Winoground Hard?" tag file. None: ``data_dir/new_tag_assignments.json`` if
        present, else the copy vlprobe ships (:func:`vlprobe.data.tags.shipped_tag_file`; a
        warning and no ``wwh`` tags when the dataset's ids are not Winoground's 0..399); True: the
        same, refusing instead of warning; a path: that file; False: no ``wwh`` tags.
    revision, token : str, optional
        Hub revision and token (default: the ``HF_TOKEN`` environment / login).
    images : bool
        False: read only ``examples.jsonl`` and the tags (a local ``data_dir`` needs no
        ``images/``; image paths are None and ``fingerprint`` covers ``examples.jsonl`` only), for
        uses that read captions and tags alone.

    Returns
    -------
    Dataset
        400 items for the real dataset; ``fingerprint`` covers examples.jsonl and every image.
    """
    if data_dir is None:
        root = _materialize_hub(revision=revision, token=token)
        source = f"hub:{HUB_ID}@{root.name}"
    else:
        root = _local_root(Path(data_dir), images)
        source = str(Path(data_dir).resolve())
    rows = _read_examples(root / "examples.jsonl")
    table = _resolve_tags(tags, root, Path(data_dir) if data_dir is not None else None, [r["id"] for r in rows])
    items, image_paths = [], []
    for row in rows:
        wid = row["id"]
        refs = []
        for j in (0, 1):
            name = row[f"image_{j}"]
            path = _find_image(root / "images", name) if images else None
            if path is not None:
                image_paths.append(path)
            refs.append(ImageRef(f"winoground/{wid}/i{j}", name, path))
        texts = tuple(TextRef(f"winoground/{wid}/c{k}", row[f"caption_{k}"]) for k in (0, 1))
        item_tags: dict[str, tuple[str, ...]] = {
            "tag": (row["tag"],),
            "secondary_tag": tuple(s.strip() for s in row["secondary_tag"].split(",") if s.strip()),
            "collapsed_tag": (row["collapsed_tag"],),
            "num_main_preds": (str(row["num_main_preds"]),),
        }
        if table is not None:
            if wid not in table.tags:
                raise InputError(f"tags: Winoground id {wid} is missing from {table.source}")
            item_tags["wwh"] = table.tags[wid]
        items.append(
            Item(
                f"winoground/{wid}", tuple(refs), texts, item_tags,
                {"winoground_id": wid, "num_main_preds": row["num_main_preds"]},
            )
        )
    extra = {"tags": table.sha256} if table is not None else {}
    return Dataset(
        "winoground", tuple(items), _fingerprint(root / "examples.jsonl", image_paths), source, extra
    )


def _local_root(data_dir: Path, images: bool = True) -> Path:
    if not data_dir.is_dir():
        raise FileNotFoundError(f"data_dir: no such directory {str(data_dir)!r}")
    for cand in (data_dir, data_dir / "data"):
        if (cand / "examples.jsonl").is_file():
            if images and not (cand / "images").is_dir():
                if (cand / "images.zip").is_file():
                    raise InputError(
                        f"data_dir: unpack {cand / 'images.zip'} into {cand / 'images'} first"
                    )
                raise InputError(f"data_dir: {cand} has examples.jsonl but no images/ folder")
            return cand
    raise InputError(
        f"data_dir: {str(data_dir)!r} holds no examples.jsonl (expected Winoground's layout: "
        "examples.jsonl + images/<name>.png)"
    )


def _read_examples(path: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    seen: set[int] = set()
    for _, where, row in iter_json_lines(path, "data_dir"):
        if not isinstance(row, dict):
            raise InputError(f"data_dir: {where} is not a JSON object")
        for name, typ in WINOGROUND_FIELDS.items():
            if name not in row:
                raise InputError(f"data_dir: {where} lacks Winoground field {name!r}")
            if not isinstance(row[name], typ) or isinstance(row[name], bool):
                raise InputError(
                    f"data_dir: {where} field {name!r} must be {typ.__name__}, "
                    f"got {type(row[name]).__name__}"
                )
        if row["id"] in seen:
            raise InputError(f"data_dir: {where} repeats id {row['id']}")
        seen.add(row["id"])
        rows.append(row)
    if not rows:
        raise InputError(f"data_dir: {path} holds no examples")
    return rows


def _find_image(folder: Path, name: str) -> Path:
    for suffix in ("", *_IMAGE_SUFFIXES):
        p = folder / f"{name}{suffix}"
        if p.is_file():
            return p
    raise InputError(f"data_dir: image {name!r} not found in {folder} (tried .png, .jpg, .jpeg)")


def _fingerprint(examples: Path, images: list[Path]) -> str:
    h = hashlib.sha256()
    h.update(sha256_file(examples).encode())
    for p in images:
        h.update(f"\n{p.name}:{sha256_file(p)}".encode())
    return h.hexdigest()


def _resolve_tags(
    tags: str | os.PathLike[str] | bool | None, root: Path, data_dir: Path | None, ids: list[int],
) -> TagTable | None:
    if tags is False:
        return None
    if tags is True or tags is None:
        for cand in (root / TAG_FILE_NAME, *(() if data_dir is None else (data_dir / TAG_FILE_NAME,))):
            if cand.is_file():
                return load_tag_file(cand)
        table = load_tag_file(shipped_tag_file())
        missing = [i for i in ids if i not in table.tags]
        if missing:  # not the real Winoground (its ids are 0..399): its tags would be another item's
            message = (f"tags: ids {missing[:3]} are not in the shipped tag file (Winoground's ids 0..399); "
                       f"pass --tags PATH (a {TAG_FILE_NAME} for this dataset)")
            if tags is True:
                raise InputError(message)
            print(f"warning: no 'Why is Winoground Hard?' tags ({message})", file=sys.stderr)
            return None
        return table
    return load_tag_file(tags)


def _materialize_hub(revision: str | None, token: str | None) -> Path:
    """Download the gated hub dataset once and unpack it into the local layout."""
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import GatedRepoError, LocalEntryNotFoundError
    except ImportError:  # pragma: no cover - huggingface_hub is a dependency
        raise InputError("data_dir: huggingface_hub is needed to load Winoground from the hub") from None
    how = (
        f"accept the licence at https://huggingface.co/datasets/{HUB_ID}, set HF_TOKEN and run once "
        "online, or pass --data-dir DIR (or set VLPROBE_WINOGROUND=DIR) with a local copy (examples.jsonl + images/)"
    )
    try:
        snap = Path(
            snapshot_download(
                HUB_ID, repo_type="dataset", revision=revision, token=token,
                allow_patterns=["data/*", "*.json", "*.jsonl"],
            )
        )
    except GatedRepoError:
        raise InputError(f"dataset: no access to gated {HUB_ID}; {how}") from None
    except LocalEntryNotFoundError:
        raise InputError(f"dataset: {HUB_ID} is not in the local hub cache and the hub is offline; {how}") from None
    except OSError as exc:
        raise InputError(f"dataset: could not download {HUB_ID} ({exc}); {how}") from None
    target = cache_dir() / "winoground" / snap.name
    if (target / "examples.jsonl").is_file() and (target / "images").is_dir():
        return target
    tmp = Path(tempfile.mkdtemp(prefix=".winoground-", dir=_mkdir(target.parent)))
    try:
        if (snap / "data" / "examples.jsonl").is_file() and (snap / "data" / "images.zip").is_file():
            shutil.copyfile(snap / "data" / "examples.jsonl", tmp / "examples.jsonl")
            _unzip_images(snap / "data" / "images.zip", tmp / "images")
        else:
            parquet = sorted((snap / "data").glob("*.parquet"))
            if not parquet:
                raise InputError(f"dataset: {HUB_ID} snapshot {snap} has neither images.zip nor parquet files")
            _parquet_to_local(parquet, tmp)
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return target


def _mkdir(p: Path) -> Path:
    p.mkdir(parents=True, exist_ok=True)
    return p


def _unzip_images(archive: Path, out: Path) -> None:
    out.mkdir(parents=True)
    with zipfile.ZipFile(archive) as zf:
        for info in zf.infolist():
            name = Path(info.filename).name
            if info.is_dir() or Path(name).suffix.lower() not in _IMAGE_SUFFIXES:
                continue
            with zf.open(info) as src, open(out / name, "wb") as dst:
                shutil.copyfileobj(src, dst)


def _parquet_to_local(files: list[Path], out: Path) -> None:
    """Convert the hub's parquet shards (images embedded as bytes) to examples.jsonl + images/."""
    import pyarrow.parquet as pq

    (out / "images").mkdir(parents=True)
    rows = []
    for f in files:
        rows.extend(pq.read_table(f).to_pylist())
    rows.sort(key=lambda r: r["id"])
    with open(out / "examples.jsonl", "w", encoding="utf-8") as fh:
        for row in rows:
            record = {k: row[k] for k in WINOGROUND_FIELDS if not k.startswith("image_")}
            for j in (0, 1):
                cell = row[f"image_{j}"]
                name = f"ex_{row['id']}_img_{j}"
                data = cell["bytes"] if isinstance(cell, dict) else cell
                (out / "images" / f"{name}{_sniff_suffix(data)}").write_bytes(data)
                record[f"image_{j}"] = name
            ordered = {k: record[k] for k in WINOGROUND_FIELDS}
            fh.write(json.dumps(ordered, ensure_ascii=False) + "\n")


def _sniff_suffix(data: bytes) -> str:
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return ".png"
    if data[:3] == b"\xff\xd8\xff":
        return ".jpg"
    raise InputError("dataset: an embedded Winoground image is neither PNG nor JPEG")
