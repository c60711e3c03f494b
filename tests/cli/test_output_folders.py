"""Every command that writes a file creates the missing folders above it (``--out caches/x.h5``
in an empty folder works), and a command that fails leaves no empty folder it made."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from vlprobe.cli import app


def _ok(*args: str | Path) -> Any:
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result


def test_every_writer_creates_missing_parent_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, synthetic_dir: Path, tiny_clip: Path, shard_files: list[Path]
) -> None:
    monkeypatch.chdir(tmp_path)  # relative paths, as a user types them in an empty folder
    _ok("fixtures", "dataset", "--out", "new/data", "--n-items", "4")
    _ok("fixtures", "regions", "--dataset", "winoground", "--data-dir", synthetic_dir, "--out", "r/a/regions.h5",
        "--boxes", "3", "--dim", "8")
    _ok("regions", "export", "r/a/regions.h5", "--format", "lxmert-tsv", "--out", "tsv/a/regions.tsv")
    _ok("extract", "--model", "clip", "--checkpoint", tiny_clip, "--data-dir", synthetic_dir, "--device", "cpu",
        "--quiet", "--out", "caches/clip-winoground.h5")
    _ok("cache", "merge", *shard_files, "--out", "merged/a/clip.h5")
    _ok("run", "winoground-scores", "--cache", "caches/clip-winoground.h5", "--out", "results/a")
    csv = Path("results/a/winoground-scores/clip.csv")
    _ok("plot", csv, "--out", "figures/a/scores.png")
    _ok("report", "results/a", "--out", "report/a/report.html")
    _ok("collect", "results/a", "--out", "tables/a/all.csv")
    _ok("compare", csv, csv, "--out", "compared/a")
    _ok("augment", "--dataset", "winoground", "--data-dir", synthetic_dir, "--strategies", "original",
        "--out", "variants/a/v.jsonl")
    for written in ["new/data/examples.jsonl", "r/a/regions.h5", "tsv/a/regions.tsv", "caches/clip-winoground.h5",
                    "merged/a/clip.h5", str(csv), "figures/a/scores.png", "report/a/report.html", "tables/a/all.csv",
                    "compared/a/compare", "variants/a/v.jsonl"]:
        assert Path(written).exists(), written


def test_a_failed_command_leaves_no_folder_it_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reference_cache: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    _ok("run", "winoground-scores", "--cache", reference_cache, "--out", "results")
    made: list[list[Path]] = []
    import vlprobe.io.paths as paths

    removing = paths.remove_empty_folders

    def record(folders: list[Path]) -> None:
        made.append(list(folders))
        removing(folders)

    monkeypatch.setattr(paths, "remove_empty_folders", record)

    def full_disk(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")  # the figure is drawn, its folder made: the disk fills

    monkeypatch.setattr(os, "fsync", full_disk)
    result = CliRunner().invoke(app, ["plot", "results/winoground-scores/clip.csv", "--out", "figures/a/b/scores.png"])
    assert result.exit_code == 2 and "no space left on device" in result.stderr, result.output
    assert made == [[Path("figures"), Path("figures/a"), Path("figures/a/b")]]  # made, then removed
    assert sorted(os.listdir(tmp_path)) == ["results"]
