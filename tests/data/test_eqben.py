"""EqBen: the loader on a fixture in the authors' subset format (sub-dataset from the image path, as
their EqBenALL reads it; YouCook2's BGR .npy frames turned into RGB as their loader does),
`probe data info eqben`, and bad input (one line naming the file and the field, exit 2)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from vlprobe.cli import app
from vlprobe.data.benchmark_fixtures import write_benchmark_fixture
from vlprobe.data.eqben import EQBEN_SUBSETS, eqben_report, load_eqben
from vlprobe.registry import DATASETS

ANN = "eqben_subset_10percent_final.json"


@pytest.fixture(scope="module")
def eq_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_benchmark_fixture(tmp_path_factory.mktemp("eqben") / "eq", "eqben", n_items=3, seed=2)


def edited(src: Path, dst: Path, change: Callable[[list[dict[str, str]]], object]) -> Path:
    shutil.copytree(src, dst)
    records = json.loads((dst / ANN).read_text(encoding="utf-8"))
    change(records)
    (dst / ANN).write_text(json.dumps(records), encoding="utf-8")
    return dst


def test_records_as_items(eq_dir: Path) -> None:
    records = json.loads((eq_dir / ANN).read_text(encoding="utf-8"))
    ds = DATASETS.get("eqben")(eq_dir)
    assert ds.name == "eqben" and len(ds) == len(records) == 3 * len(EQBEN_SUBSETS)
    order = sorted(range(len(records)), key=lambda n: EQBEN_SUBSETS.index(records[n]["image0"].split("/")[0]))
    for n, item in zip(order, ds, strict=True):  # by sub-dataset in the script's order, file order within
        rec = records[n]
        subset = rec["image0"].split("/")[0]
        assert item.id == f"eqben/{subset}/{n}" and item.meta["subset"] == subset
        assert [t.text for t in item.texts] == [rec["caption0"], rec["caption1"]]
        assert [im.name for im in item.images] == [rec["image0"], rec["image1"]]
        assert item.tags == {"subset": (subset,)}
    plain = next(it for it in ds if it.meta["subset"] == "eqbenag")
    assert plain.images[0].path == eq_dir / "image_subset" / plain.images[0].name
    # a YouCook2 frame: the authors' loader reads np.load(path)[:, :, [2, 1, 0]] as RGB; the cached PNG is it
    cook = next(it for it in ds if it.meta["subset"] == "eqbenyoucook2")
    frame = np.load(eq_dir / "image_subset" / cook.images[1].name)
    png = cook.images[1].path
    assert png is not None and png.suffix == ".png"
    np.testing.assert_array_equal(np.asarray(Image.open(png).convert("RGB")), frame[:, :, [2, 1, 0]])
    few = load_eqben(eq_dir, subsets="eqbensd,eqbenag", limit=2)
    assert [it.meta["subset"] for it in few].count("eqbensd") == 2 and len(few) == 4
    assert few.fingerprint != ds.fingerprint  # the images selected are part of it


def test_the_fixture_has_the_releases_files_and_paths(eq_dir: Path) -> None:
    """The release's sub-test set: eqben_subset_10percent_final.json beside image_subset/ (what
    subset_image.tar.gz unpacks), records {image0, image1, caption0, caption1}, image paths
    <sub-dataset>/<clip>/<frame>.png (users key items by the first three parts and strip .png),
    YouCook2's frames .npy as the authors' loader reads them."""
    assert sorted(p.name for p in eq_dir.iterdir()) == ["PROVENANCE.txt", ANN, "image_subset"]
    records = json.loads((eq_dir / ANN).read_text(encoding="utf-8"))
    assert all(sorted(r) == ["caption0", "caption1", "image0", "image1"] for r in records)
    for rec in records:
        for key in ("image0", "image1"):
            parts = rec[key].split("/")
            assert len(parts) == 3 and parts[0] in EQBEN_SUBSETS
            assert parts[-1].endswith(".npy" if parts[0] == "eqbenyoucook2" else ".png")
            assert (eq_dir / "image_subset" / rec[key]).is_file()


def test_image_root_and_data_info(eq_dir: Path, tmp_path: Path) -> None:
    moved = tmp_path / "eq"
    shutil.copytree(eq_dir, moved)
    (moved / "image_subset").rename(tmp_path / "frames")
    runner = CliRunner()
    result = runner.invoke(app, ["data", "info", "eqben", "--data-dir", str(moved)])
    assert result.exit_code == 0, result.output
    assert "image missing: 6" in result.output  # every image of each sub-dataset's 3 records
    result = runner.invoke(app, ["data", "info", "eqben", "--data-dir", str(moved), "--image-root",
                                 str(tmp_path / "frames")])
    assert result.exit_code == 0, result.output
    assert "problems" in result.output and "image missing" not in result.output
    assert len(load_eqben(moved, image_root=[str(tmp_path / "frames")])) == 21
    reports = {r.name: r for r in eqben_report(eq_dir)}
    assert all(reports[s].items == 3 and reports[s].images == 6 for s in EQBEN_SUBSETS)


def test_bad_input(eq_dir: Path, tmp_path: Path, one_error_line: Callable[..., str]) -> None:
    runner = CliRunner()

    def evaluate(folder: Path) -> object:
        return runner.invoke(app, ["eval", "eqben", "--model", "caption-length", "--data-dir", str(folder),
                                   "--out", str(tmp_path / "o")])

    other = write_benchmark_fixture(tmp_path / "mmvp", "mmvp-vlm", n_items=2)
    one_error_line(evaluate(other), "data_dir", "no EqBen annotation", "another benchmark's folder")
    one_error_line(runner.invoke(app, ["data", "info", "eqben", "--data-dir", str(other)]), "another benchmark's folder")
    no_field = edited(eq_dir, tmp_path / "no-field", lambda r: r[4].pop("caption1"))
    one_error_line(evaluate(no_field), "data_dir", ANN, "record 4", "field 'caption1' is missing")
    odd = edited(eq_dir, tmp_path / "odd", lambda r: r[2].update(image0="winoground/ex_1_img_0.png"))
    one_error_line(evaluate(odd), "record 2", "field 'image0' must begin with a sub-dataset folder")
    gone = tmp_path / "gone"
    shutil.copytree(eq_dir, gone)
    first = json.loads((gone / ANN).read_text(encoding="utf-8"))[0]["image1"]
    (gone / "image_subset" / first).unlink()
    one_error_line(evaluate(gone), "image_root", Path(first).name, "1 of 42 images missing")
