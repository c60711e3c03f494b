"""SugarCrepe++: the loader on a fixture in the authors' format (five JSON lists with caption2,
COCO images by file name), `probe data info sugarcrepe-pp`, and bad input: SugarCrepe's own folder
(the same file names), a missing field, a missing image."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vlprobe.cli import app
from vlprobe.data.benchmark_fixtures import write_benchmark_fixture
from vlprobe.data.sugarcrepe_pp import (
    SUGARCREPE_PP_SUBSETS,
    load_sugarcrepe_pp,
    sugarcrepe_pp_report,
)
from vlprobe.registry import DATASETS


@pytest.fixture(scope="module")
def pp_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_benchmark_fixture(tmp_path_factory.mktemp("scpp") / "scpp", "sugarcrepe-pp", n_items=3, seed=6)


def test_records_as_items(pp_dir: Path) -> None:
    ds = DATASETS.get("sugarcrepe-pp")(pp_dir, image_dir=pp_dir / "val2017")
    assert len(ds) == 15 and [it.meta["subset"] for it in ds][::3] == list(SUGARCREPE_PP_SUBSETS)
    rec = json.loads((pp_dir / "replace_att.json").read_text(encoding="utf-8"))[1]
    item = ds.item("sugarcrepe-pp/replace_att/1")
    assert [t.text for t in item.texts] == [rec["caption"], rec["caption2"], rec["negative_caption"]]
    assert [t.id for t in item.texts] == [f"{item.id}/c{k}" for k in range(3)]
    assert item.images[0].path == pp_dir / "val2017" / rec["filename"]
    assert item.tags == {"subset": ("replace_att",), "group": ("replace",)}
    blind = load_sugarcrepe_pp(pp_dir, subsets="swap_obj", limit=2)  # no image_dir: the images are not read
    assert [it.id for it in blind] == ["sugarcrepe-pp/swap_obj/0", "sugarcrepe-pp/swap_obj/1"]
    assert blind.items[0].images[0].path is None
    reports = {r.name: r for r in sugarcrepe_pp_report(pp_dir)}
    assert reports["swap_obj"].problems == {"records: 3, the authors' code asserts 245": 1}


def test_bad_input(pp_dir: Path, tmp_path: Path, sugarcrepe_dir: Path, tiny_clip: Path,
                   one_error_line: Callable[..., str]) -> None:
    runner = CliRunner()

    def evaluate(folder: Path, *extra: str) -> object:
        return runner.invoke(app, ["eval", "sugarcrepe-pp", "--model", "caption-length", "--data-dir", str(folder),
                                   "--out", str(tmp_path / "o"), *extra])

    one_error_line(evaluate(sugarcrepe_dir), "data_dir", "swap_obj.json", "SugarCrepe's files do",
                   "another benchmark's folder")
    one_error_line(runner.invoke(app, ["data", "info", "sugarcrepe-pp", "--data-dir", str(sugarcrepe_dir)]),
                   "another benchmark's folder")
    broken = tmp_path / "no-field"
    shutil.copytree(pp_dir, broken)
    records = json.loads((broken / "swap_att.json").read_text(encoding="utf-8"))
    del records[2]["caption2"]
    (broken / "swap_att.json").write_text(json.dumps(records), encoding="utf-8")
    one_error_line(evaluate(broken), "data_dir", "swap_att.json record 2", "field 'caption2' is missing")
    gone = tmp_path / "gone"
    shutil.copytree(pp_dir, gone)
    first = json.loads((gone / "replace_rel.json").read_text(encoding="utf-8"))[0]["filename"]
    (gone / "val2017" / first).unlink()
    with_clip = runner.invoke(app, ["eval", "sugarcrepe-pp", "--model", "clip", "--checkpoint", str(tiny_clip),
                                    "--data-dir", str(gone), "--image-dir", str(gone / "val2017"),
                                    "--out", str(tmp_path / "o")])
    one_error_line(with_clip, "image_dir", first, "1 of 15 images missing", "COCO val2017")
    result = runner.invoke(app, ["data", "info", "sugarcrepe-pp", "--data-dir", str(gone), "--image-dir",
                                 str(gone / "val2017")])
    assert result.exit_code == 0 and "image missing: 1" in result.output
