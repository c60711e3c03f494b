"""``probe run NAME`` without ``--cache``: one run per cache under ``caches/`` (or a folder given),
results in ``results/`` by default, a summary line per model; ``probe plot`` of a results folder
(``vlprobe.runs.each_cache``, :func:`vlprobe.results.plots.plot_folder`)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import h5py
import pytest
from typer.testing import CliRunner

from vlprobe.cli import app
from vlprobe.extract.runner import ExtractConfig, extract
from vlprobe.registry import EXPERIMENTS
from vlprobe.runs.each_cache import cache_files, run_on_caches
from vlprobe.validation import InputError

FAST = ["--layers", "all"]  # the default: runs named by their labels alone


@pytest.fixture(scope="module")
def no_variants_cache(tmp_path_factory: pytest.TempPathFactory, make_config: Callable[..., ExtractConfig]) -> Path:
    """A finished cache without caption variants (separability refuses it)."""
    out = tmp_path_factory.mktemp("novariants") / "c.h5"
    extract(make_config(out, variants=None, layers="0,-1"))
    return out


@pytest.fixture
def caches(tmp_path: Path, reference_cache: Path, shard_files: list[Path], no_variants_cache: Path) -> Path:
    """``caches/`` as a user's working folder holds it: two caches of one model (one in a subfolder),
    one the experiment refuses, a shard of an unmerged extraction and a region file."""
    root = tmp_path / "caches"
    (root / "old").mkdir(parents=True)
    shutil.copyfile(reference_cache, root / "clip-winoground.h5")
    shutil.copyfile(reference_cache, root / "old" / "clip-other.h5")
    shutil.copyfile(no_variants_cache, root / "clip-plain.h5")
    shutil.copyfile(shard_files[0], root / "clip-winoground.shard-0-of-3.h5")
    with h5py.File(root / "winoground-lxmert-36-regions.h5", "w") as f:  # not an activation cache: passed over
        f.attrs["schema"] = "vlprobe-regions"
    for p in root.rglob("*.h5"):
        p.chmod(0o644)
    return root


def test_cache_files_finds_caches_and_skips_shards(caches: Path) -> None:
    found, skipped = cache_files(caches)
    assert [(p.relative_to(caches).as_posix(), m) for p, m in found] == [
        ("clip-plain.h5", "clip"), ("clip-winoground.h5", "clip"), ("old/clip-other.h5", "clip")]
    assert [(r.cache.name, r.skipped) for r in skipped] == [("clip-winoground.shard-0-of-3.h5", True)]
    assert "probe cache merge" in skipped[0].error


def test_run_without_cache_runs_on_every_cache_under_caches(
    caches: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    result = runner.invoke(app, ["run", "separability", *FAST])
    # clip-plain.h5 has no variants: refused in one line, the others still run; exit code 2 at the end
    assert result.exit_code == 2, result.output
    out = result.stdout
    assert "== separability on caches/clip-winoground.h5 (clip-winoground)" in out
    assert "separability: 3 of 4 caches run" not in out and "separability: 2 of 4 caches run" in out
    lines = out.splitlines()
    summary = lines[lines.index("separability: 2 of 4 caches run") + 1:]
    assert summary[0].split(maxsplit=1) == ["clip", "skipped (caches/clip-winoground.shard-0-of-3.h5): shard 0/3 of an "
                                            "extraction (merge the shards with `probe cache merge`)"]
    assert summary[1].startswith("clip-plain       failed (caches/clip-plain.h5): ") and "variants" in summary[1]
    assert summary[2].startswith("clip-winoground  separable (train) highest at text layer ")
    assert "target " in summary[2] and summary[2].endswith("-> results/separability/clip-winoground.csv")
    assert summary[3].endswith("-> results/separability/clip-other.csv")
    assert "failed on 1 of 4 caches" in result.stderr and "clip-plain.h5" in result.stderr
    folder = tmp_path / "results" / "separability"  # --out defaults to results/
    assert sorted(p.name for p in folder.glob("*.csv") if p.name.count(".") == 1) == [
        "clip-other.csv", "clip-winoground.csv"]

    # probe plot of the results folder: one figure per run, beside its CSV
    plot = runner.invoke(app, ["plot", "results/separability/"])
    assert plot.exit_code == 0, plot.output
    for name in ("clip-other", "clip-winoground"):
        assert (folder / f"{name}.png").stat().st_size > 0 and (folder / f"{name}.pdf").stat().st_size > 0
        assert f"wrote results/separability/{name}.png and results/separability/{name}.pdf" in plot.stdout
    # the results root, into another folder laid out as the results are
    again = runner.invoke(app, ["plot", "results", "--out", "figures"])
    assert again.exit_code == 0, again.output
    assert (tmp_path / "figures" / "separability" / "clip-winoground.png").is_file()
    bad = runner.invoke(app, ["plot", "results", "--out", "fig.png"])
    assert bad.exit_code == 2 and "out: for a results folder" in bad.stderr


def test_a_folder_given_as_the_cache(caches: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["run", "separability", "--cache", str(caches / "old"), "--out",
                                      str(tmp_path / "res"), *FAST])
    assert result.exit_code == 0, result.output
    # one cache of its model in that folder: named by the model, as a run on one cache is
    assert (tmp_path / "res" / "separability" / "clip.csv").is_file()
    assert result.stdout.splitlines()[-1].startswith("clip  separable (train) highest at")


def test_refusals_before_any_run(caches: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exp = EXPERIMENTS.get("separability")
    with pytest.raises(InputError, match=r"^name: one results label for 3 caches"):
        run_on_caches(exp, {"name": "mine", "out": tmp_path / "res"}, caches)
    with pytest.raises(InputError, match=r"^seeds "):
        run_on_caches(exp, {"seeds": 0, "out": tmp_path / "res"}, caches)
    assert not (tmp_path / "res").exists()
    monkeypatch.chdir(tmp_path / "caches" / "old")  # no caches/ here
    result = CliRunner().invoke(app, ["run", "separability"])
    assert result.exit_code == 2
    assert result.stderr.strip() == ("error: cache: not given, and 'caches' is not a folder of caches; `probe extract "
                                     "--model MODEL` writes caches/<model>-<dataset>.h5; or pass --cache FILE")
