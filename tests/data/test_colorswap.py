"""ColorSwap: the loader on a fixture in the authors' folder format (test.json/train.json and
images/), `probe data info colorswap`, and bad input (one line naming the file and the field)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vlprobe.cli import app
from vlprobe.data.benchmark_fixtures import write_benchmark_fixture
from vlprobe.data.colorswap import colorswap_report, load_colorswap
from vlprobe.registry import DATASETS


@pytest.fixture(scope="module")
def cs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_benchmark_fixture(tmp_path_factory.mktemp("colorswap") / "cs", "colorswap", n_items=4, seed=3)


def edited(src: Path, dst: Path, name: str, change: Callable[[list[dict[str, object]]], object]) -> Path:
    shutil.copytree(src, dst)
    records = json.loads((dst / name).read_text(encoding="utf-8"))
    change(records)
    (dst / name).write_text(json.dumps(records), encoding="utf-8")
    return dst


def test_examples_as_items(cs_dir: Path) -> None:
    test = json.loads((cs_dir / "test.json").read_text(encoding="utf-8"))
    ds = DATASETS.get("colorswap")(cs_dir)
    assert len(ds) == 8 and [it.meta["subset"] for it in ds] == ["test"] * 4 + ["train"] * 4
    rec, item = test[2], ds.items[2]
    assert item.id == f"colorswap/test/{rec['id']}"
    assert [t.text for t in item.texts] == [rec["caption_1"], rec["caption_2"]]
    assert [im.path for im in item.images] == [cs_dir / rec["image_1"], cs_dir / rec["image_2"]]
    assert item.tags == {"subset": ("test",), "image_source": (rec["image_source"],),
                         "caption_source": (rec["caption_source"],)}
    assert sorted(item.texts[0].text.split()) == sorted(item.texts[1].text.split())  # the same words
    only = load_colorswap(cs_dir, subsets="train", limit=3)
    assert [it.id for it in only] == [f"colorswap/train/{k}" for k in (4, 5, 6)]


def test_data_info_and_one_split(cs_dir: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["data", "info", "colorswap", "--data-dir", str(cs_dir)])
    assert result.exit_code == 0, result.output
    assert "colorswap/test/0 .. colorswap/test/3" in result.output
    only_test = tmp_path / "only-test"
    shutil.copytree(cs_dir, only_test)
    (only_test / "train.json").unlink()
    assert {it.meta["subset"] for it in load_colorswap(only_test, subsets="test")} == {"test"}
    assert {r.name: r.problems for r in colorswap_report(only_test)}["train"] == {"train.json missing": 1}
    with pytest.raises(FileNotFoundError, match=r"train\.json is missing"):
        load_colorswap(only_test, subsets="train")
    # without --subsets both files are read: one missing is named, not skipped
    with pytest.raises(FileNotFoundError, match=r"train\.json is missing .*--subsets test reads test\.json alone"):
        load_colorswap(only_test)


def test_bad_input(cs_dir: Path, tmp_path: Path, one_error_line: Callable[..., str]) -> None:
    runner = CliRunner()

    def evaluate(folder: Path) -> object:
        return runner.invoke(app, ["eval", "colorswap", "--model", "caption-length", "--data-dir", str(folder),
                                   "--out", str(tmp_path / "o")])

    other = write_benchmark_fixture(tmp_path / "eq", "eqben", n_items=1)
    one_error_line(evaluate(other), "data_dir", "neither test.json nor train.json", "another benchmark's folder")
    no_field = edited(cs_dir, tmp_path / "no-field", "train.json", lambda r: r[1].pop("caption_2"))
    one_error_line(evaluate(no_field), "data_dir", "train.json record 1", "field 'caption_2' is missing")
    twice = edited(cs_dir, tmp_path / "twice", "test.json", lambda r: r[3].update(id=r[0]["id"]))
    one_error_line(evaluate(twice), "test.json record 3", "field 'id' repeats")
    gone = tmp_path / "gone"
    shutil.copytree(cs_dir, gone)
    (gone / "images" / "img_5_2.png").unlink()
    one_error_line(evaluate(gone), "data_dir", "img_5_2.png", "1 of 16 images missing", "extract images.zip")
