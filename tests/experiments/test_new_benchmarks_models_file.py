"""`probe eval NAME --models FILE` on EqBen, ColorSwap, SugarCrepe++, CREPE and VL-CheckList fixtures: a CLIP and a blind
scorer in one table (the blind one is given no image folder), each model's own run beside it."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vlprobe.cli import app
from vlprobe.data.benchmark_fixtures import write_benchmark_fixture

#: benchmark -> (its subsets, extra options given from its fixture folder)
CASES = {
    "eqben": (("eqbenag", "eqbenyoucook2", "eqbensd"), ()),
    "colorswap": (("test", "train"), ()),
    "sugarcrepe-pp": (("swap_obj", "replace_rel"), ("--image-dir", "val2017")),
    "crepe": (("prod_swap_4", "syst_laion_unseen_comp"), ("--image-root", "vg")),
    "vl-checklist": (("Attribute_color_vg", "Relation_spatial_vg"), ("--image-root", ".")),
}


@pytest.mark.parametrize("benchmark", sorted(CASES))
def test_models_file_table(benchmark: str, tiny_clip: Path, tmp_path: Path) -> None:
    subsets, extra = CASES[benchmark]
    data = write_benchmark_fixture(tmp_path / "data", benchmark, n_items=2, seed=9, image_size=16)
    models = tmp_path / "models.toml"
    models.write_text(f'[models.tiny]\nmodel = "clip"\ncheckpoint = "{tiny_clip}"\n\n'
                      '[models.length]\nmodel = "caption-length"\n', encoding="utf-8")
    options = [extra[0], str(data / extra[1])] if extra else []
    result = CliRunner().invoke(app, [
        "eval", benchmark, "--models", str(models), "--data-dir", str(data), "--subsets", ",".join(subsets),
        *options, "--out", str(tmp_path / "out"), "--bootstrap", "0", "--device", "cpu", "--quiet"])
    assert result.exit_code == 0, result.output
    folder = tmp_path / "out" / benchmark
    with open(folder / "models.table.csv", encoding="utf-8", newline="") as fh:
        table = list(csv.DictReader(fh))
    assert [r["name"] for r in table][::len(table) // 2] == ["tiny", "length"]
    assert set(subsets) <= set(table[0])
    assert (folder / "tiny@bootstrap=0.csv").is_file() and (folder / "length@bootstrap=0.csv").is_file()
