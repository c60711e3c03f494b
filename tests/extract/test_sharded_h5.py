"""The shared sharded, resumable HDF5 core: a file kind of its own (a test kind), killed before
every write call and resumed; header refusals; and the one merge used by caches and region files."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from vlprobe.extract import sharded_h5
from vlprobe.extract.cache.merge import merge_shards
from vlprobe.extract.regions.chunked import EXTRAS, ChunkedRegionWriter, RegionRows, RegionRunHeader
from vlprobe.extract.regions.merge import merge_region_shards
from vlprobe.extract.regions.sources import ImageList
from vlprobe.extract.sharded_h5 import (
    ShardedH5Writer,
    allocate,
    header_diff,
    parse_shard,
    planned_bytes,
)
from vlprobe.validation import InputError

# -- a file kind of its own ---------------------------------------------------------------------


@dataclass(frozen=True)
class ToyHeader:
    width: int
    seed: int
    shard: str = "0/1"

    def compared(self) -> dict[str, Any]:
        return {"width": self.width, "seed": self.seed, "shard": self.shard}


class ToyWriter(ShardedH5Writer[ToyHeader]):
    noun = "toy file"
    kind = "a toy file"

    @classmethod
    def open(cls, path: Path, header: ToyHeader, n: int) -> ToyWriter:
        def create(f: h5py.File) -> None:
            f.attrs.update(schema="toy", width=header.width, seed=header.seed, shard=header.shard)
            allocate(f, "x", (n, header.width), np.float32, fill=np.nan)
            allocate(f, "y", (n,), np.int64)
            allocate(f, "done", (n,), bool, chunks=None)

        return cls._open(path, header, create)

    @classmethod
    def _read_header(cls, f: h5py.File, p: Path) -> tuple[int, ToyHeader]:
        if f.attrs.get("schema") != "toy":
            raise InputError(f"out: {str(p)!r} exists and is not a toy file; refusing to touch it")
        return 1, ToyHeader(int(f.attrs["width"]), int(f.attrs["seed"]), str(f.attrs["shard"]))


N_ROWS, CHUNK, WIDTH = 10, 3, 5
HEADER = ToyHeader(WIDTH, 7)


def _rows(a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng([HEADER.seed, a])
    return rng.normal(size=(b - a, WIDTH)).astype(np.float32), np.arange(a, b) * 10


def _run(path: Path) -> int:
    """Write (or finish) a toy file in chunks of the fixed grid; returns the rows written."""
    with ToyWriter.open(path, HEADER, N_ROWS) as w:
        done = w.f["done"][()]
        todo = [(a, min(a + CHUNK, N_ROWS)) for a in range(0, N_ROWS, CHUNK) if not done[a : a + CHUNK].all()]
        for a, b in todo:
            x, y = _rows(a, b)
            w.commit({"x": x, "y": y}, ["done"], slice(a, b))
        return sum(b - a for a, b in todo)


def _child(path: str, at: int, labels_out: str) -> None:
    """Run :func:`_run`, counting every write call (dataset writes, flushes, the rename); SIGKILL
    before call number ``at`` (0: never)."""
    labels: list[str] = []

    def hook(label: str) -> None:
        labels.append(label)
        if len(labels) == at:
            os.kill(os.getpid(), signal.SIGKILL)

    def wrap(owner: Any, name: str, label: Callable[..., str]) -> None:
        real = getattr(owner, name)

        def patched(*args: Any, **kwargs: Any) -> Any:
            hook(label(*args))
            return real(*args, **kwargs)

        setattr(owner, name, patched)

    wrap(h5py.Dataset, "__setitem__", lambda ds, *a: f"write {ds.name}")
    wrap(h5py.File, "flush", lambda f, *a: "flush")
    wrap(os, "replace", lambda src, dst, *a: "rename")
    _run(Path(path))
    Path(labels_out).write_text(json.dumps(labels))
    os._exit(0)


def _fork(path: Path, at: int, tmp: Path) -> tuple[int | None, list[str] | None]:
    out = tmp / f"labels-{at}.json"
    proc = multiprocessing.get_context("fork").Process(target=_child, args=(str(path), at, str(out)))
    proc.start()
    proc.join(120)
    return proc.exitcode, json.loads(out.read_text()) if out.exists() else None


def _content(path: Path) -> dict[str, np.ndarray]:
    with h5py.File(path, "r") as f:
        return {k: f[k][()] for k in ("x", "y", "done")}


@pytest.fixture(scope="module")
def toy_reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """An uninterrupted run and its write calls, in order."""
    tmp = tmp_path_factory.mktemp("toy")
    code, labels = _fork(tmp / "ref.h5", 0, tmp)
    assert code == 0 and labels
    return tmp / "ref.h5", labels


def test_the_write_cycle_of_a_chunk(toy_reference: tuple[Path, list[str]]) -> None:
    """The file is built whole and renamed into place; then each chunk: its rows, a flush, the
    done mask, a flush."""
    _, labels = toy_reference
    start = labels.index("rename")
    assert "write /x" not in labels[:start]
    cycle = ["write /x", "write /y", "flush", "write /done", "flush"]
    assert labels[start + 1 :] == cycle * -(-N_ROWS // CHUNK)


def test_a_kill_before_any_write_call_loses_at_most_the_chunk_in_flight_and_resumes_identical(
    toy_reference: tuple[Path, list[str]], tmp_path: Path,
) -> None:
    ref, labels = toy_reference
    expected = _content(ref)
    rename = labels.index("rename") + 1  # 1-based, as the kill points
    for at in range(1, len(labels) + 1):
        folder = tmp_path / f"kill-{at}"
        folder.mkdir()
        out = folder / "t.h5"
        code, _ = _fork(out, at, tmp_path)
        assert code == -signal.SIGKILL, at
        assert out.exists() == (at > rename), "the file appears whole at the rename or not at all"
        if out.exists():  # it opens, and holds whole chunks only: at most the chunk in flight is lost
            got = _content(out)
            before = labels[: at - 1]
            marked = before.count("write /done")
            flushed = marked - (before[-1] == "write /done")
            assert flushed * CHUNK <= int(got["done"].sum()) <= marked * CHUNK, at
            for a in np.flatnonzero(got["done"]):
                np.testing.assert_array_equal(got["x"][a], expected["x"][a])
        _run(out)  # resume
        got = _content(out)
        for k in expected:  # the same rows stored again: equal bytes, not a second computation
            np.testing.assert_array_equal(got[k], expected[k], err_msg=f"{k} after a kill at {at}")
        assert sorted(p.name for p in folder.iterdir()) == ["t.h5"], at  # no temporary or lock file left


def test_resume_refuses_another_header_naming_the_field_and_leaves_the_file(tmp_path: Path) -> None:
    out = tmp_path / "t.h5"
    _run(out)
    before = out.read_bytes()
    with pytest.raises(InputError, match=r"toy file .* was made with other settings \(seed: file has 7, this run has 8\)"):
        ToyWriter.open(out, ToyHeader(WIDTH, 8), N_ROWS)
    with pytest.raises(InputError, match=r"\(shard: file has '0/1', this run has '1/2'\); use another --out"):
        ToyWriter.open(out, ToyHeader(WIDTH, 7, "1/2"), N_ROWS)
    assert out.read_bytes() == before
    assert ToyWriter.check_out(out) == HEADER


@pytest.mark.parametrize("what", ["text", "hdf5"])
def test_a_file_of_another_kind_is_never_opened_for_writing(what: str, tmp_path: Path) -> None:
    out = tmp_path / "mine.h5"
    if what == "text":
        out.write_text("notes")
    else:
        with h5py.File(out, "w") as f:
            f["x"] = [1, 2]
    before = out.read_bytes()
    for attempt in (lambda: ToyWriter.open(out, HEADER, N_ROWS), lambda: ToyWriter.check_out(out)):
        with pytest.raises(InputError, match="not a toy file; refusing to touch it"):
            attempt()
    assert out.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["mine.h5"]


def test_a_second_writer_is_refused_while_the_first_holds_the_file(tmp_path: Path) -> None:
    out = tmp_path / "t.h5"
    code = 0

    def second() -> None:
        nonlocal code
        pid = os.fork()
        if pid == 0:  # another process: the lock is per process
            import vlprobe.io.locks

            vlprobe.io.locks._HELD.clear()  # a fresh process holds no lock (the fork copied the parent's record)
            try:
                ToyWriter.open(out, HEADER, N_ROWS)
                os._exit(3)
            except InputError as exc:
                os._exit(0 if "being written by another vlprobe process" in str(exc) else 4)
            except BaseException:
                os._exit(5)
        code = os.waitpid(pid, 0)[1]

    with ToyWriter.open(out, HEADER, N_ROWS):
        second()
    assert os.waitstatus_to_exitcode(code) == 0
    assert _run(out) == N_ROWS  # the first writer's file, untouched by the second


def test_planned_bytes_cover_the_allocated_datasets(tmp_path: Path) -> None:
    def create(f: h5py.File) -> None:
        allocate(f, "a", (1000, 7, 3), np.float16, fill=np.nan)
        allocate(f, "b", (1000,), np.dtype("S64"))
        allocate(f, "c", (0, 4), np.float32)

    with h5py.File(tmp_path / "p.h5", "w") as f:
        create(f)
    stored = 1000 * 7 * 3 * 2 + 1000 * 64
    assert stored <= planned_bytes(create) <= (tmp_path / "p.h5").stat().st_size
    with h5py.File(tmp_path / "p.h5", "r") as f:
        assert f["b"][0] == b"" and np.isnan(f["a"][0]).all() and f["a"].compression is None


def test_header_diff_and_parse_shard() -> None:
    a = RegionRunHeader("sha256:d", {"name": "p", "max_boxes": 5, "min_score": 0.2}, 8, "float32", "f", 4, "0/2")
    b = RegionRunHeader("sha256:d", {"name": "p", "max_boxes": 5}, 8, "float32", "f", 4, "1/2")
    assert header_diff(a, b) == "preset.min_score: file has 0.2, this run has None"
    assert header_diff(a, a) is None
    assert header_diff(b, a, skip=("preset",)) == "shard: file has '1/2', this run has '0/2'"
    assert parse_shard("2/3") == (2, 3)
    for bad in ("3/3", "x", "1/0"):
        with pytest.raises(InputError, match="shard"):
            parse_shard(bad)


# -- the one merge, for both file kinds --------------------------------------------------------

IDS = [f"img{i}" for i in range(7)]
MAX_BOXES, DIM = 4, 6


def _region_header(shard: str, min_score: float = 0.2) -> RegionRunHeader:
    fingerprint = ImageList(tuple(IDS), (None,) * len(IDS)).fingerprint
    preset = {"name": "test", "max_boxes": MAX_BOXES, "min_boxes": 1, "min_score": min_score}
    return RegionRunHeader("sha256:det", preset, DIM, "float32", fingerprint, len(IDS), shard)


def _region_rows(a: int, b: int) -> RegionRows:
    rng = np.random.default_rng(a)
    n = b - a
    return RegionRows(
        rng.normal(size=(n, MAX_BOXES, DIM)).astype(np.float32), rng.uniform(size=(n, MAX_BOXES, 4)).astype(np.float32),
        np.full(n, 2), np.full(n, 64), np.full(n, 48),
        {k: rng.integers(0, 5, size=(n, MAX_BOXES)).astype(dt) for k, dt in EXTRAS.items()},
        [f"{i:064x}" for i in range(a, b)],
    )


def _region_file(path: Path, k: int, n: int, **kw: Any) -> Path:
    """Shard k/n of the test run, written row by row (one row per commit) as an extraction does."""
    start, stop = k * len(IDS) // n, (k + 1) * len(IDS) // n
    meta = {"detector": {"spec": "test"}, "images": {"source": "test"}, "row_start": start, "row_stop": stop}
    with ChunkedRegionWriter.open(path, _region_header(f"{k}/{n}", **kw), IDS[start:stop], meta,
                                  max_boxes=MAX_BOXES) as w:
        for a in range(start, stop):
            one = _region_rows(a, a + 1)
            w.write(a - start, one)
        w.mark_complete()
    return path


@pytest.fixture
def region_shards(tmp_path: Path) -> list[Path]:
    return [_region_file(tmp_path / f"r{k}.h5", k, 3) for k in range(3)]


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Any]]:
    """Records the calls of the shared merge and of its row copy."""
    calls: dict[str, list[Any]] = {"merge_files": [], "copy_rows": [], "commit": []}
    real_merge, real_copy, real_commit = sharded_h5.merge_files, ShardedH5Writer.copy_rows, ShardedH5Writer.commit

    def merge_files(*args: Any, **kwargs: Any) -> Any:
        calls["merge_files"].append(args[1])
        return real_merge(*args, **kwargs)

    def copy_rows(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls["copy_rows"].append(type(self).__name__)
        return real_copy(self, *args, **kwargs)

    def commit(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls["commit"].append(type(self).__name__)
        return real_commit(self, *args, **kwargs)

    import vlprobe.extract.cache.merge as cache_merge
    import vlprobe.extract.regions.merge as regions_merge

    for module in (cache_merge, regions_merge):
        monkeypatch.setattr(module, "merge_files", merge_files)
    monkeypatch.setattr(ShardedH5Writer, "copy_rows", copy_rows)
    monkeypatch.setattr(ShardedH5Writer, "commit", commit)
    return calls


def _datasets(path: Path) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda n, o: out.__setitem__(n, o[()]) if isinstance(o, h5py.Dataset) else None)
    return out


def test_both_kinds_merge_through_the_one_code_path_in_bounded_pieces(
    shard_files: list[Path], reference_cache: Path, assert_caches_equal: Callable[..., None],
    region_shards: list[Path], spy: dict[str, list[Any]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    monkeypatch.setattr(sharded_h5, "MERGE_CHUNK_BYTES", 2 * MAX_BOXES * DIM * 4)  # about 2 rows per piece
    whole = _region_file(tmp_path / "whole.h5", 0, 1)
    merged = merge_region_shards(region_shards[::-1], tmp_path / "rm.h5")
    cache = merge_shards(shard_files[::-1], tmp_path / "cm.h5")
    assert spy["merge_files"] == [merged, cache]
    assert set(spy["copy_rows"]) == {"ChunkedRegionWriter", "CacheWriter"}
    # the region rows came over in pieces: more commits than shards
    assert spy["commit"].count("ChunkedRegionWriter") > len(IDS) + len(region_shards)
    got, want = _datasets(merged), _datasets(whole)
    assert got.keys() == want.keys()
    for name in want:  # the same stored rows copied: equal values
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    with h5py.File(merged, "r") as f:
        meta = json.loads(f.attrs["meta"])
        assert meta["shard"] == "0/1" and meta["merged_from"] == ["r0.h5", "r1.h5", "r2.h5"] and f.attrs["complete"]
    assert_caches_equal(cache, reference_cache)


def _cache_variant(src: Path, dst: Path, change: str) -> Path:
    shutil.copy(src, dst)
    dst.chmod(0o644)
    with h5py.File(dst, "r+") as f:
        if change == "settings":
            f.attrs["variants_fingerprint"] = "sha256:other"
        elif change == "count":
            f.attrs["shard"] = "1/4"
        else:
            f["streams/image/done"][0] = False
    return dst


def _region_variant(src: Path, dst: Path, change: str) -> Path:
    if change == "settings":
        return _region_file(dst, 1, 3, min_score=0.5)
    shutil.copy(src, dst)
    with h5py.File(dst, "r+") as f:
        meta = json.loads(f.attrs["meta"])
        if change == "count":
            meta["shard"] = "1/4"
            f.attrs["meta"] = json.dumps(meta)
        else:
            f["done"][0] = False
            f.attrs["complete"] = False
    return dst


@pytest.fixture(params=["cache", "regions"])
def kind(request: pytest.FixtureRequest, shard_files: list[Path], region_shards: list[Path]) -> Iterator[Any]:
    if request.param == "cache":
        yield shard_files, merge_shards, _cache_variant, "variants_fingerprint"
    else:
        yield region_shards, merge_region_shards, _region_variant, "preset.min_score"


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("missing", r"^shards: missing shard\(s\) 1/3$"),
        ("duplicate", r"^shards: {0} and {0} are both shard 0/3$"),
        ("settings", r"^shards: odd\.h5 differs from {0} in {field} \({0} has .*, odd\.h5 has .*\)$"),
        ("count", r"^shards: odd\.h5 is shard 1/4, {0} one of 3$"),
        ("incomplete", r"^shards: odd\.h5 is incomplete .*; resume it first$"),
    ],
)
def test_both_kinds_refuse_a_bad_set_of_shards_in_the_same_words(
    kind: Any, case: str, message: str, tmp_path: Path,
) -> None:
    shards, merge, variant, field = kind
    if case == "missing":
        paths = [shards[0], shards[2]]
    elif case == "duplicate":
        paths = [shards[0], shards[0], shards[1], shards[2]]
    else:
        paths = [shards[0], variant(shards[1], tmp_path / "odd.h5", case), shards[2]]
    out = tmp_path / "out" / "m.h5"
    pattern = message.format(shards[0].name.replace(".", r"\."), field=field)
    with pytest.raises(InputError, match=pattern):
        merge(paths, out)
    assert not out.exists()
    assert not [p for p in tmp_path.rglob(".*") if "vlprobe" in p.name], "temporary or lock files left behind"


def test_both_kinds_replace_only_an_earlier_merge_of_the_same_run(kind: Any, tmp_path: Path) -> None:
    shards, merge, _, _ = kind
    out = merge(shards, tmp_path / "m.h5")
    again = merge(shards[::-1], out)  # the same command again: its own output is replaced
    assert again == out
    with pytest.raises(InputError, match="already exists and is not an earlier merge"):
        merge(shards, _foreign(tmp_path))
    with pytest.raises(InputError, match="is one of the shard files"):
        merge(shards, shards[1])


def _foreign(tmp_path: Path) -> Path:
    p = tmp_path / "foreign.h5"
    p.write_bytes(b"keep me")
    return p
