"""The Visual Genome object and attribute names of the detector's classes.

The VG model's 1600 objects and 400 attributes are listed in ``objects_vocab.txt`` and
``attributes_vocab.txt`` (one class per line, synonyms after commas: the first name is used, in
lower case), published with the bottom-up-attention code
(https://github.com/peteanderson80/bottom-up-attention, ``data/genome/1600-400-20/``). Line
``i`` names class ``i`` (background excluded), the index in ``Detections.objects_id`` /
``attrs_id``.

:func:`load_labels` takes a folder holding both files, the two files as ``OBJECTS,ATTRIBUTES``
(or a pair), or a hub repository id whose snapshot holds them (read from the local cache
offline, failing at once when it is not there).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from .errors import DetectorInputError

__all__ = ["ATTRIBUTES_FILE", "LABELS_HOW", "OBJECTS_FILE", "load_labels", "read_vocab"]

OBJECTS_FILE = "objects_vocab.txt"
ATTRIBUTES_FILE = "attributes_vocab.txt"
LABELS_HOW = (
    "download objects_vocab.txt and attributes_vocab.txt from "
    "https://github.com/peteanderson80/bottom-up-attention/tree/master/data/genome/1600-400-20 "
    "and pass their folder"
)


def read_vocab(path: str | os.PathLike[str], what: str = "labels") -> list[str]:
    """Names from a vocabulary file: the first comma-separated name of each line, lower case."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DetectorInputError(f"{what}: no file {str(p)!r}; {LABELS_HOW}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DetectorInputError(f"{what}: cannot read {str(p)!r} ({exc})") from None
    names = [line.split(",")[0].strip().lower() for line in text.splitlines() if line.strip()]
    if not names:
        raise DetectorInputError(f"{what}: {str(p)!r} lists no names")
    return names


def _hub_folder(repo_id: str) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
    )

    try:
        return Path(snapshot_download(repo_id, allow_patterns=[f"*{OBJECTS_FILE}", f"*{ATTRIBUTES_FILE}"]))
    except HFValidationError:
        raise DetectorInputError(f"labels: {repo_id!r} is neither a folder, two files nor a valid hub id") from None
    except LocalEntryNotFoundError:
        raise DetectorInputError(
            f"labels: {repo_id!r} is not in the local hub cache and the hub is unreachable or offline (HF_HUB_OFFLINE=1); {LABELS_HOW}"
        ) from None
    except RepositoryNotFoundError:
        raise DetectorInputError(f"labels: no hub repository {repo_id!r} (nor a local folder); {LABELS_HOW}") from None
    except OSError as exc:
        raise DetectorInputError(f"labels: could not fetch {repo_id!r} ({exc}); {LABELS_HOW}") from None


def _find(folder: Path, name: str) -> Path:
    direct = folder / name
    if direct.is_file():
        return direct
    found = sorted(folder.rglob(name))
    if not found:
        raise DetectorInputError(f"labels: no {name} in {str(folder)!r}; {LABELS_HOW}")
    return found[0]


def load_labels(
    spec: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    num_objects: int | None = None,
    num_attributes: int | None = None,
) -> tuple[list[str], list[str]]:
    """Object and attribute names.

    Parameters
    ----------
    spec : str, path or (path, path)
        A folder with ``objects_vocab.txt`` and ``attributes_vocab.txt``; the two files (a pair,
        or ``"OBJECTS,ATTRIBUTES"``); or a hub repository id holding them.
    num_objects, num_attributes : int, optional
        Expected lengths (the detector's class counts); a file of another length is refused.

    Returns
    -------
    (list of str, list of str)
        Object names, attribute names.
    """
    if isinstance(spec, Sequence) and not isinstance(spec, str | bytes):
        if len(spec) != 2:
            raise DetectorInputError(f"labels: expected a folder or two files (objects, attributes), got {len(spec)} paths")
        obj_path, attr_path = Path(spec[0]), Path(spec[1])
    else:
        text = os.fspath(spec)
        if "," in text:
            a, b = (part.strip() for part in text.split(",", 1))
            obj_path, attr_path = Path(a).expanduser(), Path(b).expanduser()
        else:
            p = Path(text).expanduser()
            if p.is_dir():
                folder = p
            elif p.exists() or text.startswith((".", "/", "~")) or text.count("/") != 1:
                raise DetectorInputError(f"labels: {text!r} is not a folder (expected a folder, two files or a hub id); {LABELS_HOW}")
            else:
                folder = _hub_folder(text)
            obj_path, attr_path = _find(folder, OBJECTS_FILE), _find(folder, ATTRIBUTES_FILE)
    objects = read_vocab(obj_path, "labels (objects)")
    attributes = read_vocab(attr_path, "labels (attributes)")
    for what, names, want in (("objects", objects, num_objects), ("attributes", attributes, num_attributes)):
        if want is not None and len(names) != want:
            raise DetectorInputError(f"labels ({what}): the detector has {want} classes, but the file lists {len(names)} names")
    return objects, attributes
