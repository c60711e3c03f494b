"""probe cache merge: shard files joined into the unsharded cache; everything else refused."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import h5py
import pytest

from vlprobe.extract import sharded_h5
from vlprobe.extract.cache.merge import merge_shards
from vlprobe.extract.cache.reader import ActivationCache
from vlprobe.extract.runner import ExtractConfig, extract


def test_merge_equals_the_unsharded_run(
    shard_files: list[Path], reference_cache: Path, assert_caches_equal: Callable[..., None], tmp_path: Path,
) -> None:
    out = tmp_path / "merged.h5"
    shuffled = [shard_files[2], shard_files[0], shard_files[1]]
    assert merge_shards(shuffled, out) == out
    assert_caches_equal(out, reference_cache)
    with ActivationCache(out) as m, ActivationCache(reference_cache) as r:
        assert m.complete
        assert m.header == r.header
        assert m.header.shard == "0/1"
        assert m.record.merged_from == [p.name for p in shard_files]
        assert m.record.git_revision == r.record.git_revision
        assert m.score_kind == "cosine"
        for s in ("text", "image"):
            g = m.f[f"streams/{s}"]
            assert (int(g.attrs["row_start"]), int(g.attrs["row_stop"])) == (0, int(g.attrs["n_rows"]))
        assert m.f["scores"].attrs["kind"] == "cosine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["merged.h5"]


def test_merge_copies_states_in_pieces(
    shard_files: list[Path], reference_cache: Path, assert_caches_equal: Callable[..., None],
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    """Shards are copied a bounded number of rows at a time (here: a few rows per piece)."""
    monkeypatch.setattr(sharded_h5, "MERGE_CHUNK_BYTES", 3 * 4 * 4 * 32 * 3)
    out = merge_shards(shard_files, tmp_path / "merged.h5")
    assert_caches_equal(out, reference_cache)


def _refused(paths: list[Path], out: Path, match: str) -> str:
    with pytest.raises(ValueError, match=match) as err:
        merge_shards(paths, out)
    assert not out.exists()
    if out.parent.exists():
        assert not [p for p in out.parent.iterdir() if p.name.startswith(".")], "temporary files left behind"
    return str(err.value)


def test_merge_refuses_a_missing_shard(shard_files: list[Path], tmp_path: Path) -> None:
    _refused([shard_files[0], shard_files[2]], tmp_path / "m.h5", r"missing shard\(s\) 1/3")
    _refused([shard_files[1]], tmp_path / "m.h5", r"missing shard\(s\) 0/3, 2/3")


def test_merge_refuses_a_duplicate_shard(
    shard_files: list[Path], copy_cache: Callable[[Path, Path], Path], tmp_path: Path
) -> None:
    again = copy_cache(shard_files[0], tmp_path / "again.h5")
    msg = _refused([shard_files[0], shard_files[1], again, shard_files[2]], tmp_path / "out" / "m.h5", "both shard 0/3")
    assert "again.h5" in msg


def test_merge_refuses_shards_of_another_run(
    shard_files: list[Path], other_clip: Path, make_config: Callable[..., ExtractConfig], tmp_path: Path
) -> None:
    foreign = tmp_path / "foreign-1.h5"
    extract(make_config(foreign, checkpoint=str(other_clip), shard="1/3"))
    msg = _refused([shard_files[0], foreign, shard_files[2]], tmp_path / "out" / "m.h5", "checkpoint_fingerprint")
    assert "foreign-1.h5" in msg


def test_merge_refuses_an_incomplete_shard(
    shard_files: list[Path], copy_cache: Callable[[Path, Path], Path], tmp_path: Path
) -> None:
    partial = copy_cache(shard_files[1], tmp_path / "partial.h5")
    with h5py.File(partial, "r+") as f:
        f["streams/image/done"][2] = False
    msg = _refused([shard_files[0], partial, shard_files[2]], tmp_path / "out" / "m.h5", "incomplete")
    assert "partial.h5" in msg and "'image'" in msg


def test_merge_refuses_mixed_shard_counts(
    shard_files: list[Path], copy_cache: Callable[[Path, Path], Path], tmp_path: Path
) -> None:
    odd = copy_cache(shard_files[1], tmp_path / "odd.h5")
    with h5py.File(odd, "r+") as f:
        f.attrs["shard"] = "1/4"
    _refused([shard_files[0], odd, shard_files[2]], tmp_path / "out" / "m.h5", "1/4")


def test_merge_refuses_an_existing_out(shard_files: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "exists.h5"
    out.write_bytes(b"keep me")
    with pytest.raises(ValueError, match="already exists"):
        merge_shards(shard_files, out)
    assert out.read_bytes() == b"keep me"


def test_merge_refuses_no_shards_and_foreign_files(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="shards"):
        merge_shards([], tmp_path / "m.h5")
    foreign = tmp_path / "foreign.h5"
    with h5py.File(foreign, "w") as f:
        f["x"] = 1
    with pytest.raises(ValueError, match="not a vlprobe cache"):
        merge_shards([foreign], tmp_path / "m.h5")
    assert not (tmp_path / "m.h5").exists()




def test_merge_refuses_shards_that_read_other_tags(
    shard_files: list[Path], synthetic_dir: Path, make_config: Callable[..., ExtractConfig], tmp_path: Path
) -> None:
    """The tag file is no header field (a cache records its fingerprint), yet it fills the items
    table the merged cache takes from shard 0: shards tagged from two files are two runs."""
    import json

    tags = json.loads((synthetic_dir / "new_tag_assignments.json").read_text())
    other = tmp_path / "other-tags.json"
    other.write_text(json.dumps({k: (["Visually Difficult"] if v != ["Visually Difficult"] else ["Unusual Text"])
                                 for k, v in tags.items()}))
    foreign = tmp_path / "tagged-1.h5"
    extract(make_config(foreign, tags=other, shard="1/3", batch_size=7))
    msg = _refused([shard_files[0], foreign, shard_files[2]], tmp_path / "out" / "m.h5", "tags_fingerprint")
    assert "tagged-1.h5" in msg and "--tags" in msg
