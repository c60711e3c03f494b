"""The VG object and attribute names: folder, two files, hub cache offline."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from vlprobe.extract.regions.detector import (
    DetectorInputError,
    load_labels,
)
from vlprobe.fixtures.frcnn import (
    TINY_ATTRIBUTES,
    TINY_OBJECTS,
    write_tiny_labels,
)


def test_labels_from_a_folder_two_files_or_a_pair(tmp_path: Path) -> None:
    folder = write_tiny_labels(tmp_path / "vg-vocab")
    objects, attributes = load_labels(folder, num_objects=24, num_attributes=12)
    assert objects == TINY_OBJECTS and attributes == TINY_ATTRIBUTES
    pair = (folder / "objects_vocab.txt", folder / "attributes_vocab.txt")
    assert load_labels(pair) == (objects, attributes)
    assert load_labels(f"{pair[0]},{pair[1]}") == (objects, attributes)
    with pytest.raises(DetectorInputError, match="the detector has 1600 classes, but the file lists 24"):
        load_labels(folder, num_objects=1600)


def test_label_files_take_the_first_synonym_in_lower_case(tmp_path: Path) -> None:
    (tmp_path / "objects_vocab.txt").write_text("Man,Person\ntree\n\n")
    (tmp_path / "attributes_vocab.txt").write_text("White\n")
    assert load_labels(tmp_path) == (["man", "tree"], ["white"])
    (tmp_path / "attributes_vocab.txt").unlink()
    with pytest.raises(DetectorInputError, match=r"no attributes_vocab\.txt in"):
        load_labels(tmp_path)


def test_labels_from_an_uncached_hub_id_fail_fast_offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    t0 = time.monotonic()
    with pytest.raises(DetectorInputError, match=r"not in the local hub cache.*objects_vocab\.txt"):
        load_labels("someone/vg-vocab")
    assert time.monotonic() - t0 < 15
    with pytest.raises(DetectorInputError, match="is not a folder"):
        load_labels(str(tmp_path / "missing"))
