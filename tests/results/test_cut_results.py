"""A results CSV cut short (a copy interrupted, a full disk elsewhere): ``probe report``, ``probe plot``
and ``probe collect`` refuse it with one line naming the file and the line, and write nothing."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vlprobe.cli import app


def _cut_copy(every_experiment: Path, tmp_path: Path, where: str) -> Path:
    """A results folder holding the recall runs, the first tidy CSV cut ``where``."""
    root = tmp_path / "results"
    shutil.copytree(every_experiment / "recall", root / "recall")
    csv_path = sorted((root / "recall").glob("*.csv"))[0]
    data = csv_path.read_bytes()
    assert data.endswith(b"\n")
    if where == "mid-row":  # half-way through the file, after the first two fields of a row
        lines = data.split(b"\n")
        half = len(lines) // 2
        cut = b"\n".join([*lines[:half], b",".join(lines[half].split(b",")[:2])])
    else:  # inside the last field of the last row: every field there, the last one shortened
        cut = data[:-2]
    csv_path.write_bytes(cut)
    return csv_path


@pytest.mark.parametrize("where", ["mid-row", "last field"])
@pytest.mark.parametrize("command", ["report", "plot", "collect"])
def test_a_cut_results_csv_is_one_line_naming_it(
    command: str, where: str, every_experiment: Path, tmp_path: Path, one_error_line: Callable[..., str],
) -> None:
    csv_path = _cut_copy(every_experiment, tmp_path, where)
    out = tmp_path / {"report": "r.html", "plot": "p.png", "collect": "all.csv"}[command]
    given = csv_path if command == "plot" else csv_path.parent.parent
    line = one_error_line(CliRunner().invoke(app, [command, str(given), "--out", str(out)]), csv_path.name)
    assert ("fields where the header has" if where == "mid-row" else "ends in the middle of a row") in line
    assert "cut short" in line
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name != "results"]
