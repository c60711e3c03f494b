"""MMVP-VLM: the loader on a fixture in the authors' folder layout (categories by position, ids, the
script's "a photo of " texts), `probe data info mmvp-vlm`, and bad input (one line naming the file
and the field, exit 2)."""

from __future__ import annotations

import csv
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vlprobe.cli import app
from vlprobe.data.benchmark_fixtures import write_benchmark_fixture
from vlprobe.data.mmvp_vlm import (
    MMVP_CATEGORIES,
    MMVP_CSV,
    MMVP_IMAGES,
    MMVP_SUBSETS,
    MMVP_TYPES,
    load_mmvp_vlm,
    mmvp_vlm_report,
)
from vlprobe.registry import DATASETS
from vlprobe.validation import InputError


@pytest.fixture(scope="module")
def mmvp_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_benchmark_fixture(tmp_path_factory.mktemp("mmvp") / "mmvp", "mmvp-vlm", n_items=20, seed=2)


def copy_of(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_pairs_as_items_categories_by_position(mmvp_dir: Path) -> None:
    ds = DATASETS.get("mmvp-vlm")(mmvp_dir)
    with open(mmvp_dir / MMVP_CSV, encoding="utf-8", newline="") as fh:
        rows = list(csv.reader(fh))[1:]
    assert ds.name == "mmvp-vlm" and len(ds) == 20
    # pairs 0-14 are the first category, 15-19 the second, as evaluate_vlm.py's num_pairs // 15
    assert [it.meta["subset"] for it in ds] == [MMVP_SUBSETS[0]] * 15 + [MMVP_SUBSETS[1]] * 5
    item = ds.item(f"mmvp-vlm/{MMVP_SUBSETS[1]}/33")
    (q1, t1, s1), (q2, _, s2) = rows[32], rows[33]
    assert (q1, q2) == ("33", "34")
    assert [t.text for t in item.texts] == ["a photo of " + s1, "a photo of " + s2]
    assert [im.path for im in item.images] == [mmvp_dir / MMVP_IMAGES / t1 / "33.jpg", mmvp_dir / MMVP_IMAGES / t1 / "34.jpg"]
    assert [t.id for t in item.texts] == [f"{item.id}/c0", f"{item.id}/c1"]
    assert item.tags["category"] == (MMVP_CATEGORIES[1],)
    # subsets and limit select; the fingerprint follows the images
    assert len(load_mmvp_vlm(mmvp_dir, subsets=MMVP_SUBSETS[1])) == 5
    assert len(load_mmvp_vlm(mmvp_dir, limit=2)) == 4
    assert load_mmvp_vlm(mmvp_dir).fingerprint == ds.fingerprint


def test_fixture_is_deterministic_and_full_size(tmp_path: Path) -> None:
    a = write_benchmark_fixture(tmp_path / "a", "mmvp-vlm", n_items=500, seed=4, image_size=16)
    b = write_benchmark_fixture(tmp_path / "b", "mmvp-vlm", n_items=500, seed=4, image_size=16)
    assert (a / MMVP_CSV).read_bytes() == (b / MMVP_CSV).read_bytes()
    reports = mmvp_vlm_report(a)  # capped at the benchmark's 135 pairs: 15 in each of the 9 categories
    assert [(r.name, r.items, r.images) for r in reports] == [(s, 15, 30) for s in MMVP_SUBSETS]
    assert not any(r.problems for r in reports)


#: The dataset MMVP/MMVP_VLM's image folders (``MLLM_VLM Images/``), as its file listing shows them.
RELEASE_FOLDERS = {"Camera Perspective", "Color", "Orientation", "Presence", "Quantity", "Spatial", "State",
                   "Structural Character", "Text"}


def test_the_fixture_has_the_releases_header_types_and_folders(tmp_path: Path) -> None:
    """The release's Questions.csv header and Type values (its image folders' names), one type per
    category in the categories' order (pair 74, ids 149-150, is Spatial: the release's 149.jpg)."""
    out = write_benchmark_fixture(tmp_path / "full", "mmvp-vlm", n_items=135, image_size=16)
    with open(out / MMVP_CSV, encoding="utf-8", newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == ["Question ID", "Type", "Statement"]
    assert set(MMVP_TYPES) == RELEASE_FOLDERS == {p.name for p in (out / MMVP_IMAGES).iterdir()}
    assert all(len(list((out / MMVP_IMAGES / t).iterdir())) == 30 for t in MMVP_TYPES)
    assert rows[149][:2] == ["149", "Spatial"] and (out / MMVP_IMAGES / "Spatial" / "149.jpg").is_file()
    ds = load_mmvp_vlm(out)
    assert ds.item(f"mmvp-vlm/{MMVP_SUBSETS[4]}/149").tags["type"] == ("Spatial",)
    assert not any(r.problems for r in mmvp_vlm_report(out))
    # a pair whose type is not its category's is counted (the script would still read its images)
    rows[1][1] = rows[2][1] = "Color"
    with open(out / MMVP_CSV, "w", encoding="utf-8", newline="") as fh:
        csv.writer(fh, lineterminator="\n").writerows(rows)
    problems = {r.name: r.problems for r in mmvp_vlm_report(out)}[MMVP_SUBSETS[0]]
    assert problems["type not the category's (Orientation)"] == 1


def test_cli_data_info(mmvp_dir: Path) -> None:
    result = CliRunner().invoke(app, ["data", "info", "mmvp-vlm", "--data-dir", str(mmvp_dir)])
    assert result.exit_code == 0, result.output
    assert f"mmvp-vlm/{MMVP_SUBSETS[0]}/1 .. mmvp-vlm/{MMVP_SUBSETS[0]}/29" in result.output
    assert "no pairs (the file ends before this category)" in result.output


def test_bad_input(mmvp_dir: Path, tmp_path: Path, one_error_line: Callable[..., str]) -> None:
    runner = CliRunner()
    aro = write_benchmark_fixture(tmp_path / "aro", "aro", n_items=2)

    def info(folder: Path) -> object:
        return runner.invoke(app, ["data", "info", "mmvp-vlm", "--data-dir", str(folder)])

    one_error_line(info(aro), "data_dir", "holds no Questions.csv", "another benchmark's folder")
    with pytest.raises(InputError, match="another benchmark"):
        load_mmvp_vlm(aro)
    # a missing image: loading names it
    gone = copy_of(mmvp_dir, tmp_path / "gone")
    (gone / MMVP_IMAGES / MMVP_TYPES[0] / "3.jpg").unlink()
    result = runner.invoke(app, ["eval", "mmvp-vlm", "--model", "caption-length", "--data-dir", str(gone),
                                 "--out", str(tmp_path / "o")])
    one_error_line(result, "data_dir", "'3.jpg'", "1 of 40 images missing")
    assert mmvp_vlm_report(gone)[0].problems == {"image missing": 1}

    def edited(name: str, row: int, new: str) -> Path:
        folder = copy_of(mmvp_dir, tmp_path / name)
        lines = (folder / MMVP_CSV).read_text(encoding="utf-8").splitlines()
        lines[row - 1] = new
        (folder / MMVP_CSV).write_text("\n".join(lines) + "\n", encoding="utf-8")
        return folder

    one_error_line(info(edited("short", 4, "3,State")), "Questions.csv row 4", "field 'statement' is missing")
    one_error_line(info(edited("qid", 4, "x,State,a dog")), "Questions.csv row 4", "field 'question id' must be an integer")
    one_error_line(info(edited("even", 4, "4,State,a dog")), "Questions.csv row 4", "field 'question id' must be odd")
    one_error_line(info(edited("next", 5, "7,State,a dog")), "Questions.csv row 5", "field 'question id' must be 4")
    one_error_line(info(edited("empty", 3, "2,Orientation, ")), "row 3", "field 'statement' is empty")
    odd = copy_of(mmvp_dir, tmp_path / "odd")
    with open(odd / MMVP_CSV, "a", encoding="utf-8") as fh:
        fh.write("41,Text,a lone statement\n")
    one_error_line(info(odd), "Questions.csv row 42", "without its pair")
