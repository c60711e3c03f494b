"""probe collect: every run of results folders in one table, settings as columns, one version per experiment."""

from __future__ import annotations

import csv
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vlprobe.cli import app
from vlprobe.results.collect import collect_rows
from vlprobe.results.reading import find_runs
from vlprobe.runs.summary import read_tidy_csv
from vlprobe.runs.writing import TIDY_COLUMNS
from vlprobe.validation import InputError


def test_every_run_with_its_settings_columns(every_experiment: Path) -> None:
    columns, rows = collect_rows([every_experiment])
    assert columns[: len(TIDY_COLUMNS)] == list(TIDY_COLUMNS)
    assert {"experiment_version", "results_dir", "C", "scale", "bootstrap", "epochs"} <= set(columns)
    csvs = [r.csv for r in find_runs([every_experiment])]  # run names may hold dots (lr=0.01)
    assert len(rows) == sum(len(read_tidy_csv(p)) for p in csvs)
    sep = [r for r in rows if r["experiment"] == "separability"]
    assert {r["C"] for r in sep} == {"100"} and {r["experiment_version"] for r in sep} == {"6"}
    assert {r["C"] for r in rows if r["experiment"] == "recall"} == {""}  # recall has no C
    assert {r["results_dir"] for r in rows} == {str(every_experiment)}


def test_two_versions_of_one_experiment_are_refused(every_experiment: Path, tmp_path: Path) -> None:
    old = tmp_path / "old"
    shutil.copytree(every_experiment / "recall", old / "recall")
    manifest_path = old / "recall" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    for run in manifest["runs"].values():
        run["experiment_version"] = 1
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(InputError, match=r"recall runs of two versions .*version 2 .*version 1"):
        collect_rows([every_experiment, old])


def test_cli_collect_writes_one_table_and_refuses_foreign_files(every_experiment: Path, tmp_path: Path,
                                                                one_error_line: Callable[..., str]) -> None:
    runner = CliRunner()
    out = tmp_path / "all.csv"
    for _ in range(2):  # its own table is replaced
        ok = runner.invoke(app, ["collect", str(every_experiment), str(every_experiment / "recall"), "--out", str(out)])
        assert ok.exit_code == 0, ok.output
    with open(out, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    n_runs = sum(1 for d in every_experiment.iterdir() if (d / "manifest.json").is_file())
    assert f"({n_runs} runs, {len(rows)} rows)" in ok.stdout  # recall, reached twice, is collected once
    assert len({(r["experiment"], r["model"]) for r in rows}) == n_runs
    foreign = tmp_path / "mine.csv"
    foreign.write_text("a,b\n1,2\n")
    one_error_line(runner.invoke(app, ["collect", str(every_experiment), "--out", str(foreign)]), "not written by vlprobe")
    one_error_line(runner.invoke(app, ["collect", str(tmp_path / "none"), "--out", str(tmp_path / "x.csv")]), "no such folder")
    one_error_line(runner.invoke(app, ["plot", str(out), "--out", str(tmp_path / "x.png")]), "expected one run")
