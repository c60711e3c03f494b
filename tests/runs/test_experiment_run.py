"""Experiment.run: the run is named and its results slot claimed before the compute function runs;
then the manifest, the tidy CSV and the side files RunRows asks for are written."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from vlprobe.provenance import sha256_file
from vlprobe.runs.declare import Experiment, option
from vlprobe.runs.option_groups import ResultsOptions
from vlprobe.runs.writing import RunRows, RunSlot
from vlprobe.validation import InputError


@dataclass(frozen=True, kw_only=True)
class CountConfig(ResultsOptions):
    """One input file, one setting."""

    data: Path = option(role="input", help="A text file; its lines are counted.")
    scale: float = option(1.0, help="Multiplies the count.")


CALLS: list[RunSlot] = []


def _label(config: CountConfig) -> str:
    if not config.data.is_file():
        raise InputError(f"data: no such file {str(config.data)!r}")
    return config.name or config.data.stem


def _compute(config: CountConfig, slot: RunSlot) -> RunRows:
    CALLS.append(slot)
    lines = config.data.read_text(encoding="utf-8").splitlines()
    base = {"experiment": "count", "model": slot.label, "task": "target", "split": "all", "seed": 0}
    rows = [{**base, "layer": layer, "subset": "all", "metric": "lines", "value": config.scale * len(lines) * (layer + 1),
             "n": len(lines)} for layer in (0, 1)]
    item_rows = [{**base, "subset": f"line{k}", "metric": "chars", "value": float(len(t)), "n": 1}
                 for k, t in enumerate(lines)]
    return RunRows(
        rows, {"data": {"path": str(config.data), "sha256": sha256_file(config.data)}},
        extra={"model": slot.label, "outputs": [slot.file(".csv"), slot.file(".items.csv"), slot.file(".summary.csv")]},
        seeds=[0], item_rows=item_rows, summary=True,
        files={".lines.txt": lambda path: path.write_text("\n".join(lines) + "\n", encoding="utf-8")},
    )


COUNT = Experiment("count", 3, CountConfig, _compute, label=_label)


@pytest.fixture(autouse=True)
def _no_calls() -> None:
    CALLS.clear()


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def test_run_writes_what_the_compute_function_returns(tmp_path: Path) -> None:
    data = tmp_path / "words.txt"
    data.write_text("a\nbb\nccc\n", encoding="utf-8")
    csv_path, manifest_path, rows = COUNT.run(CountConfig(data=data, out=tmp_path / "o", scale=2.0))
    run = "words@scale=2"
    assert CALLS == [RunSlot("words", run)] and CALLS[0].stem == run
    assert csv_path == tmp_path / "o" / "count" / f"{run}.csv"
    assert [r["value"] for r in rows] == [6.0, 12.0]
    tidy = _csv(csv_path)
    assert [(r["layer"], r["value"], r["scale"]) for r in tidy] == [("0", "6.0", "2"), ("1", "12.0", "2")]
    items = _csv(csv_path.with_name(f"{run}.items.csv"))
    assert [(r["subset"], r["value"], r["scale"]) for r in items] == [("line0", "1.0", "2"), ("line1", "2.0", "2"),
                                                                     ("line2", "3.0", "2")]
    summary = _csv(csv_path.with_name(f"{run}.summary.csv"))
    assert [(r["layer"], r["target_mean"]) for r in summary] == [("0", "6.0"), ("1", "12.0")]
    assert csv_path.with_name(f"{run}.lines.txt").read_text(encoding="utf-8") == "a\nbb\nccc\n"
    entry = json.loads(manifest_path.read_text(encoding="utf-8"))["runs"][run]
    assert entry["experiment"] == "count" and entry["experiment_version"] == 3
    assert entry["seeds"] == [0] and entry["inputs"]["data"]["sha256"] == sha256_file(data)
    assert entry["model"] == "words" and entry["outputs"] == [f"{run}.csv", f"{run}.items.csv", f"{run}.summary.csv"]
    assert entry["run"] == run and entry["settings_changed"] == {"scale": 2.0}
    assert COUNT(CountConfig(data=data, out=tmp_path / "o", scale=2.0))[0] == csv_path  # a rerun replaces it


def test_a_clashing_run_is_refused_before_the_compute_function_runs(tmp_path: Path) -> None:
    data = tmp_path / "words.txt"
    data.write_text("a\n", encoding="utf-8")
    COUNT.run(CountConfig(data=data, out=tmp_path / "o"))
    other = tmp_path / "other" / "words.txt"  # same label, other input
    other.parent.mkdir()
    other.write_text("b\nc\n", encoding="utf-8")
    with pytest.raises(InputError, match="already holds the count run 'words'"):
        COUNT.run(CountConfig(data=other, out=tmp_path / "o"))
    assert len(CALLS) == 1  # the second run never computed
    COUNT.run(CountConfig(data=other, out=tmp_path / "o", name="other"))  # another label: another slot
    assert [c.name for c in CALLS] == ["words", "other"]


def test_the_label_is_read_before_any_work(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="data: no such file"):
        COUNT.run(CountConfig(data=tmp_path / "absent.txt", out=tmp_path / "o"))
    assert CALLS == [] and not (tmp_path / "o").exists()


def test_without_a_label_the_function_writes_its_own_outputs(tmp_path: Path) -> None:
    def own(config: CountConfig) -> dict[str, Any]:
        return {"ran": config.data}

    exp = Experiment("own", 1, CountConfig, own)
    assert exp.run(CountConfig(data=tmp_path / "x", out=tmp_path / "o")) == {"ran": tmp_path / "x"}
    assert not (tmp_path / "o").exists()
