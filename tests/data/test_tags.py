"""The "Why is Winoground Hard?" tag file: the real file's facts, validation, the pinned fetch."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from vlprobe.data.tags import (
    TAG_FILE_NAME,
    WWH_COMMIT,
    WWH_TAGS,
    WWH_TAGS_SHA256,
    WWH_TAGS_URL,
    cache_dir,
    fetch_wwh_tags,
    load_tag_file,
    offline,
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


@pytest.mark.parametrize(("var", "value", "expected"), [
    ("HF_HUB_OFFLINE", "1", True), ("VLPROBE_OFFLINE", "yes", True), ("HF_HUB_OFFLINE", "0", False),
    ("HF_HUB_OFFLINE", "", False),
])
def test_offline(var: str, value: str, expected: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("VLPROBE_OFFLINE", raising=False)
    monkeypatch.setenv(var, value)
    assert offline() is expected


def test_fetch_offline_without_cache_says_use_tags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_network: None
) -> None:
    monkeypatch.setenv("VLPROBE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError) as exc:
        fetch_wwh_tags()
    msg = str(exc.value)
    assert msg.startswith("tags: offline")
    assert "--tags PATH" in msg and WWH_TAGS_URL in msg


def test_fetch_returns_the_cached_copy_without_network(wwh_tags: Path,
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_network: None
) -> None:
    monkeypatch.setenv("VLPROBE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    target = tmp_path / "cache" / "why-winoground-hard" / WWH_COMMIT / TAG_FILE_NAME
    target.parent.mkdir(parents=True)
    shutil.copyfile(wwh_tags, target)
    assert fetch_wwh_tags() == target
    assert load_tag_file(fetch_wwh_tags()).sha256 == WWH_TAGS_SHA256


def test_fetch_ignores_a_corrupt_cached_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_network: None
) -> None:
    monkeypatch.setenv("VLPROBE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    target = tmp_path / "cache" / "why-winoground-hard" / WWH_COMMIT / TAG_FILE_NAME
    target.parent.mkdir(parents=True)
    target.write_text('{"0": []}', encoding="utf-8")
    with pytest.raises(ValueError, match="offline"):
        fetch_wwh_tags()


class _FakeResponse:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def read(self) -> bytes:
        return self.data

    def __enter__(self) -> _FakeResponse:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def test_fetch_downloads_once_and_checks_sha256(wwh_tags: Path,
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import urllib.request

    monkeypatch.setenv("VLPROBE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("VLPROBE_OFFLINE", raising=False)
    calls: list[str] = []
    payload = {"data": wwh_tags.read_bytes()}

    def fake_urlopen(url: str, timeout: float) -> _FakeResponse:
        calls.append(url)
        return _FakeResponse(payload["data"])

    monkeypatch.setattr(urllib.request, "urlopen", fake_urlopen)
    path = fetch_wwh_tags()
    assert calls == [WWH_TAGS_URL]
    assert sha256_file(path) == WWH_TAGS_SHA256
    assert fetch_wwh_tags() == path
    assert calls == [WWH_TAGS_URL]  # cached now

    path.unlink()
    payload["data"] = b'{"0": []}'
    with pytest.raises(ValueError, match=r"^tags: downloaded file has sha256 .*expected " + WWH_TAGS_SHA256):
        fetch_wwh_tags()
    assert not path.exists()
