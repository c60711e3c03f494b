"""`probe run bias-gap` as SugarCrepe's Figure 1 draws it: every benchmark's blind bars and VLM bars
measured with the benchmark's own metric and tie rule, grouped as the figure (CREPE Atomic / Swap /
Negate, ARO's four tasks, VL-CheckList Object / Attribute / Relation), from `probe eval` CSVs;
SugarCrepe++'s two positives; hyphenated scorer names in --checkpoint."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vlprobe.cli import app
from vlprobe.data.benchmark_fixtures import write_benchmark_fixture


@pytest.fixture(scope="module")
def aro_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_benchmark_fixture(tmp_path_factory.mktemp("fig1-aro") / "aro", "aro", n_items=6, seed=2)


def read_rows(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def test_a_hyphenated_scorer_takes_its_checkpoint(aro_dir: Path, tiny_gpt2: Path, tiny_bert_classifier: Path,
                                                   tmp_path: Path) -> None:
    """--checkpoint blind-lm=DIR names the scorer as registered (key_values turned `-` into `_` before)."""
    result = CliRunner().invoke(app, [
        "run", "bias-gap", "--dataset", "aro", "--data-dir", str(aro_dir), "--subsets", "vg_relation", "--scorers", "blind-lm,blind-grammar", "--checkpoint", f"blind-lm={tiny_gpt2}",
        "--checkpoint", f"blind-grammar={tiny_bert_classifier}", "--out", str(tmp_path), "--bootstrap", "0",
        "--device", "cpu", "--quiet"])
    assert result.exit_code == 0, result.output
    (csv_path,) = (tmp_path / "bias-gap").glob("*[!s].csv")
    assert {r["probe"] for r in read_rows(csv_path)} == {"blind-lm", "blind-grammar"}
