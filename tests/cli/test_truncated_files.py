"""A truncated cache or region file is reported as truncated, naming it (one line, exit 2), never
as "open for writing in another process": HDF5's truncation error mentions its ``sblock``
(superblock), which a lock check matching "lock" took for a lock."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import pytest
from typer.testing import CliRunner

from vlprobe.cli import app
from vlprobe.io.h5 import h5_open_failure


def _cut(src: Path, dst: Path, keep: float | int) -> Path:
    data = src.read_bytes()
    n = int(len(data) * keep) if isinstance(keep, float) else keep
    dst.write_bytes(data[:n])
    return dst


def _run(*args: Any) -> Any:
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture
def cut_cache(reference_cache: Path, tmp_path: Path) -> Path:
    return _cut(reference_cache, tmp_path / "cut.h5", 0.5)


@pytest.fixture
def cut_regions(synthetic_regions: Path, tmp_path: Path) -> Path:
    return _cut(synthetic_regions, tmp_path / "cut-regions.h5", 0.5)


def test_hdf5_says_truncated_and_mentions_sblock(cut_cache: Path) -> None:
    """The message the old check misread, as this HDF5 words it."""
    with pytest.raises(OSError) as info:
        h5py.File(cut_cache, "r")
    assert "truncated file" in str(info.value) and "sblock" in str(info.value)
    kind, detail = h5_open_failure(info.value)
    assert kind == "truncated" and detail.startswith(f"{cut_cache.stat().st_size} of its ")


def test_cache_info(cut_cache: Path, one_error_line: Callable[..., str]) -> None:
    line = one_error_line(_run("cache", "info", cut_cache), repr(str(cut_cache)), "is truncated", "bytes are there")
    assert "another process" not in line


def test_regions_info(cut_regions: Path, one_error_line: Callable[..., str]) -> None:
    line = one_error_line(_run("regions", "info", cut_regions), repr(str(cut_regions)), "is truncated")
    assert "another process" not in line


@pytest.mark.parametrize("command", ["run winoground-scores", "cache merge", "extract (resume)"])
def test_other_commands_reading_a_cache(
    command: str, cut_cache: Path, shard_files: list[Path], make_config: Any, tmp_path: Path,
    one_error_line: Callable[..., str],
) -> None:
    if command == "run winoground-scores":
        args = ["run", "winoground-scores", "--cache", cut_cache, "--out", tmp_path / "res"]
    elif command == "cache merge":
        args = ["cache", "merge", _cut(shard_files[0], tmp_path / "s0.h5", 0.5), *shard_files[1:],
                "--out", tmp_path / "m.h5"]
    else:
        c = make_config(cut_cache)
        args = ["extract", "--model", "clip", "--checkpoint", c.checkpoint, "--dataset", "winoground", "--data-dir",
                c.data_dir, "--variants", c.variants, "--out", cut_cache, "--device", "cpu", "--quiet"]
    line = one_error_line(_run(*args), "is truncated")
    assert "another process" not in line


def test_extract_with_truncated_regions(
    cut_regions: Path, tiny_lxmert: Path, synthetic_dir: Path, tmp_path: Path, one_error_line: Callable[..., str],
) -> None:
    line = one_error_line(_run("extract", "--model", "lxmert", "--checkpoint", tiny_lxmert, "--regions", cut_regions,
                               "--dataset", "winoground", "--data-dir", synthetic_dir, "--out", tmp_path / "c.h5",
                               "--device", "cpu", "--quiet"), repr(str(cut_regions)), "is truncated")
    assert "another process" not in line and not (tmp_path / "c.h5").exists()


def test_a_file_cut_inside_its_superblock_is_unreadable_not_locked(
    reference_cache: Path, tmp_path: Path, one_error_line: Callable[..., str],
) -> None:
    cut = _cut(reference_cache, tmp_path / "stub.h5", 10)
    line = one_error_line(_run("cache", "info", cut), "not a readable HDF5 file")
    assert "another process" not in line


def test_a_locked_file_is_still_reported_as_locked(reference_cache: Path, tmp_path: Path,
                                                    one_error_line: Callable[..., str]) -> None:
    path = Path(shutil.copy(reference_cache, tmp_path / "held.h5"))
    path.chmod(0o644)
    holder = subprocess.Popen(
        [sys.executable, "-c", f"import h5py, sys; f = h5py.File({str(path)!r}, 'r+'); print('held', flush=True); "
                               "sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        one_error_line(_run("cache", "info", path), "open for writing in another process")
    finally:
        holder.communicate(input="", timeout=30)
