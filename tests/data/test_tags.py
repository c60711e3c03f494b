"""The "Why is Winoground Hard?" tag file: the real file's facts, validation, the shipped copy."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from vlprobe.data.tags import (
    TAG_FILE_NAME,
    WWH_COMMIT,
    WWH_SOURCE,
    WWH_TAGS,
    WWH_TAGS_SHA256,
    cache_dir,
    load_tag_file,
    shipped_tag_file,
    winoground_number,
)
from vlprobe.provenance import sha256_file


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to download fails the test."""
    import urllib.request

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("network access attempted")

    monkeypatch.setattr(urllib.request, "urlopen", refuse)


def test_real_file_facts(wwh_tags: Path) -> None:
    table = load_tag_file(wwh_tags)
    assert sorted(table.tags) == list(range(400))
    assert table.sha256 == WWH_TAGS_SHA256 == sha256_file(wwh_tags)
    assert table.source == str(wwh_tags)
    untagged = [i for i, t in table.tags.items() if not t]
    assert len(untagged) == 172
    assert table.tags[313] == ()
    counts = Counter(t for tags in table.tags.values() for t in tags)
    assert counts == {
        "Complex Reasoning": 78,
        "Unusual Image": 56,
        "Unusual Text": 50,
        "Ambiguously Correct": 46,
        "Visually Difficult": 38,
        "Non Minimal": 30,
    }
    per_item = Counter(len(t) for t in table.tags.values())
    assert per_item == {0: 172, 1: 173, 2: 41, 3: 13, 4: 1}
    assert all(isinstance(t, tuple) for t in table.tags.values())
    assert set(WWH_TAGS) == set(counts)


def write(tmp_path: Path, content: str, name: str = "tags.json") -> Path:
    p = tmp_path / name
    p.write_text(content, encoding="utf-8")
    return p


def test_small_file(tmp_path: Path) -> None:
    p = write(tmp_path, json.dumps({"0": [], "1": ["Non Minimal", "Unusual Text"], "7": ["Complex Reasoning"]}))
    table = load_tag_file(p)
    assert table.tags == {0: (), 1: ("Non Minimal", "Unusual Text"), 7: ("Complex Reasoning",)}
    assert table.sha256 == sha256_file(p)


@pytest.mark.parametrize(
    ("content", "pattern"),
    [
        ("{not json", r"^tags: .*tags\.json is not valid JSON"),
        ("[[], []]", r"^tags: .* must hold one JSON object of id -> list of tags"),
        ('"x"', r"must hold one JSON object"),
        ('{"zero": []}', r"^tags: key 'zero' in tags\.json is not a Winoground id"),
        ('{"1": "Non Minimal"}', r"^tags: value of id '1' in tags\.json must be a list of strings"),
        ('{"1": [3]}', r"must be a list of strings"),
        ('{"1": ["NonCompositional"]}', r"^tags: id '1' in tags\.json has unknown tag 'NonCompositional' \(expected one of Non Minimal, "),
        ('{"1": ["non minimal"]}', r"unknown tag 'non minimal'"),
        ('{"1": ["NonMinimal", "Non Minimal"]}', r"unknown tag 'NonMinimal'"),
    ],
)
def test_validation_errors(tmp_path: Path, content: str, pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        load_tag_file(write(tmp_path, content))


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"^tags: no such file"):
        load_tag_file(tmp_path / "nope.json")


def test_cache_dir_follows_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLPROBE_CACHE", str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c"
    monkeypatch.delenv("VLPROBE_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache_dir() == tmp_path / ".cache" / "vlprobe"


def test_the_shipped_tag_file_is_the_papers_with_its_licence(no_network: None) -> None:
    """vlprobe ships the MIT tag file unchanged (the pinned sha256 of the paper's repository at
    WWH_COMMIT) with the repository's licence notice beside it; reading it needs no network."""
    path = shipped_tag_file()
    assert path.name == TAG_FILE_NAME
    assert sha256_file(path) == WWH_TAGS_SHA256
    table = load_tag_file(path)
    assert sorted(table.tags) == list(range(400)) and sum(not t for t in table.tags.values()) == 172
    notice = (path.parent / "LICENSE").read_text(encoding="utf-8")
    assert notice.startswith("MIT License") and "Copyright (c) 2022 Anuj Diwan" in notice
    assert WWH_COMMIT[:7] in WWH_SOURCE and WWH_COMMIT in (path.parent / "README.md").read_text(encoding="utf-8")


def test_the_shipped_tag_file_is_package_data() -> None:
    """pyproject.toml names the folder as package data, so a wheel holds the file and its notice."""
    from vlprobe.io.toml import loads

    root = Path(__file__).resolve().parents[2]
    data = loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    assert "why_winoground_hard/*" in data["tool"]["setuptools"]["package-data"]["vlprobe.data"]


def test_an_altered_shipped_copy_is_a_broken_installation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from importlib import resources

    folder = tmp_path / "why_winoground_hard"
    folder.mkdir()
    (folder / TAG_FILE_NAME).write_text('{"0": []}', encoding="utf-8")
    monkeypatch.setattr(resources, "files", lambda package: tmp_path)
    with pytest.raises(RuntimeError, match=r"missing or altered.*reinstall vlprobe"):
        shipped_tag_file()


@pytest.mark.parametrize(("item_id", "number"), [
    ("winoground/17", 17), ("winoground/0", 0),
    ("winoground/17/c0", None), ("sugarcrepe/swap_obj/108", None), ("valse/3", None), ("17", None),
])
def test_winoground_number_reads_winoground_item_ids_only(item_id: str, number: int | None) -> None:
    assert winoground_number(item_id) == number
