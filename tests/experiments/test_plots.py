"""Plots of tidy CSVs, and the per-layer summary they draw from."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vlprobe.cli import app
from vlprobe.experiments.outputs import write_tidy_csv
from vlprobe.experiments.plots import plot_results
from vlprobe.experiments.summary import read_tidy_csv, summarize


def tidy(stream: str, layer: object, task: str, seed: object, value: float, split: str = "test",
         metric: str = "accuracy", subset: str = "all") -> dict:
    return {"experiment": "x", "model": "m", "stream": stream, "layer": layer, "pooling": "cls", "probe": "mlp",
            "task": task, "seed": seed, "split": split, "subset": subset, "metric": metric, "value": value, "n": 4}


ROWS = [
    tidy(s, layer, task, seed, v)
    for s in ("lang", "vision")
    for layer in (0, 1, 2)
    for task, seed, v in (("target", 0, 80.0 + layer), ("target", 1, 90.0), ("control", 0, 50.0), ("control", 1, 0.0))
] + [tidy("lang", 0, "target", 0, 1.0, split="train")]


def test_summary_mean_min_max_and_selectivity(tmp_path: Path) -> None:
    path = write_tidy_csv(tmp_path / "m.csv", ROWS)
    for rows in (ROWS, read_tidy_csv(path)):  # in memory and read back as strings: the same summary
        summary = {(r["stream"], r["layer"], r["split"]): r for r in summarize(rows)}
        rec = summary[("lang", "2", "test")]
        assert (rec["target_mean"], rec["target_min"], rec["target_max"], rec["target_seeds"]) == (86.0, 82.0, 90.0, 2)
        assert (rec["control_mean"], rec["control_min"], rec["control_max"]) == (25.0, 0.0, 50.0)
        assert rec["selectivity"] == pytest.approx(61.0)
        assert summary[("lang", "0", "train")]["control_seeds"] == 0


def test_plot_writes_png_and_pdf_one_panel_per_stream(tmp_path: Path) -> None:
    csv_path = write_tidy_csv(tmp_path / "m.csv", ROWS)
    paths = plot_results(csv_path, tmp_path / "figs" / "m.png")
    assert [p.name for p in paths] == ["m.png", "m.pdf"]
    assert all(p.stat().st_size > 1000 for p in paths)
    assert (tmp_path / "figs" / "m.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "figs" / "m.pdf").read_bytes()[:4] == b"%PDF"


def test_pooled_rows_without_a_layer_plot_as_one_category(tmp_path: Path) -> None:
    rows = [tidy("image+text", None, t, s, v) for t, s, v in (("target", 0, 90.0), ("control", 0, 50.0))]
    csv_path = write_tidy_csv(tmp_path / "p.csv", rows)
    assert plot_results(csv_path, tmp_path / "p.png")[0].stat().st_size > 0


def test_cli_plot_and_bad_csv_is_one_error_line(tmp_path: Path, one_error_line: Callable[..., str]) -> None:
    runner = CliRunner()
    csv_path = write_tidy_csv(tmp_path / "m.csv", ROWS)
    ok = runner.invoke(app, ["plot", str(csv_path), "--out", str(tmp_path / "f.png"), "--split", "train"])
    assert ok.exit_code == 0, ok.output
    assert (tmp_path / "f.pdf").stat().st_size > 0
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n", encoding="utf-8")
    one_error_line(runner.invoke(app, ["plot", str(bad), "--out", str(tmp_path / "g.png")]),
                   "not a vlprobe tidy results CSV")
    empty = write_tidy_csv(tmp_path / "empty.csv", [])
    one_error_line(runner.invoke(app, ["plot", str(empty), "--out", str(tmp_path / "g.png")]), "holds no result rows")
    binary = tmp_path / "bin.csv"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    one_error_line(runner.invoke(app, ["plot", str(binary), "--out", str(tmp_path / "g.png")]), "csv:")
    one_error_line(runner.invoke(app, ["plot", str(csv_path), "--out", str(tmp_path / "g.svg")]), "must be a .png")
    one_error_line(runner.invoke(app, ["plot", str(csv_path), "--out", str(tmp_path / "g.png"), "--metric", "f1"]),
                   "metric 'f1' is not in the CSV")
    one_error_line(runner.invoke(app, ["plot", str(tmp_path / "nope.csv"), "--out", str(tmp_path / "g.png")]),
                   "no such file")
    assert not (tmp_path / "g.png").exists()
