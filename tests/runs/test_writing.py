"""Tidy CSVs and manifests (vlprobe.runs.writing)."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from vlprobe import __version__
from vlprobe.io.ownership import OUTPUTS_LIST
from vlprobe.runs.declare import Experiment, Options, names, option
from vlprobe.runs.writing import (
    TIDY_COLUMNS,
    build_manifest,
    check_run_slot,
    config_record,
    result_stem,
    setting_cell,
    write_results,
    write_tidy_csv,
)
from vlprobe.validation import InputError


def read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with open(path, encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames or []), list(reader)


def test_tidy_columns() -> None:
    assert TIDY_COLUMNS == (
        "experiment", "model", "stream", "layer", "kind", "pooling", "probe", "task", "seed", "split",
        "subset", "metric", "value", "unit", "n", "note",
    )


def test_write_tidy_csv_header_rows_and_empty_cells(tmp_path: Path) -> None:
    rows = [
        {"experiment": "e", "model": "m", "layer": 3, "metric": "accuracy", "value": 0.25, "n": 4},
        {"experiment": "e", "model": "m", "subset": "tag=a,b", "metric": "undeclared", "value": float("nan")},
        {"experiment": "e", "model": "m", "seed": None, "metric": "acc", "value": np.float64(0.1), "n": np.int64(7)},
    ]
    path = write_tidy_csv(tmp_path / "sub" / "out.csv", rows)
    assert path == tmp_path / "sub" / "out.csv"
    header, got = read_csv(path)
    assert header == list(TIDY_COLUMNS)
    assert len(got) == 3
    assert got[0] == {
        "experiment": "e", "model": "m", "stream": "", "layer": "3", "kind": "", "pooling": "", "probe": "",
        "task": "", "seed": "", "split": "", "subset": "", "metric": "accuracy", "value": "0.25", "unit": "percent",
        "n": "4", "note": "",
    }
    assert got[1]["unit"] == ""  # a name without a declared unit (vlprobe.runs.units) is left blank
    assert got[1]["subset"] == "tag=a,b"  # quoted by the csv module, read back whole
    assert got[1]["value"] == "nan"
    assert got[1]["n"] == ""
    assert got[2]["seed"] == ""
    assert got[2]["value"] == "0.1"  # a numpy float64 is written as a plain number
    assert got[2]["n"] == "7"
    # Floats round-trip exactly.
    assert float(got[0]["value"]) == 0.25
    text = path.read_text(encoding="utf-8")
    assert text.startswith(",".join(TIDY_COLUMNS) + "\n")
    assert "\r" not in text


def test_write_tidy_csv_no_rows(tmp_path: Path) -> None:
    path = write_tidy_csv(tmp_path / "empty.csv", [])
    assert path.read_text(encoding="utf-8") == ",".join(TIDY_COLUMNS) + "\n"


def test_write_tidy_csv_accepts_a_generator(tmp_path: Path) -> None:
    path = write_tidy_csv(tmp_path / "g.csv", ({"metric": "m", "value": i} for i in range(3)))
    _, got = read_csv(path)
    assert [r["value"] for r in got] == ["0", "1", "2"]


def test_write_tidy_csv_refuses_unknown_columns(tmp_path: Path) -> None:
    target = tmp_path / "out.csv"
    rows = [{"metric": "acc", "value": 1.0}, {"metric": "acc", "value": 2.0, "colour": "red"}]
    with pytest.raises(ValueError, match="colour"):
        write_tidy_csv(target, rows)
    assert not target.exists()
    assert list(tmp_path.iterdir()) == []  # no temporary file left behind


def test_write_tidy_csv_failure_keeps_the_old_file(tmp_path: Path) -> None:
    target = write_tidy_csv(tmp_path / "out.csv", [{"metric": "acc", "value": 1.0}])
    before = target.read_bytes()
    with pytest.raises(ValueError, match="unknown tidy column"):
        write_tidy_csv(target, [{"metric": "acc", "value": 2.0}, {"bogus": 1}])
    assert target.read_bytes() == before
    # no temporary file left; the folder's list of vlprobe's outputs still vouches for the old file
    assert sorted(p.name for p in tmp_path.iterdir()) == [OUTPUTS_LIST, "out.csv"]
    write_tidy_csv(target, [{"metric": "acc", "value": 3.0}])  # its own output: replaced


def test_build_manifest(tmp_path: Path) -> None:
    config = {"out": str(tmp_path), "ks": [1, 2]}
    inputs = {"cache": {"path": "c.h5", "sha256": "ab" * 32}}
    m = build_manifest("exp", 3, config, inputs, seeds=iter([0, 1, 2]), extra={"units": "percent"})
    assert m["experiment"] == "exp"
    assert m["experiment_version"] == 3
    assert m["config"] == config
    assert m["seeds"] == [0, 1, 2]
    assert m["inputs"] == inputs
    assert m["units"] == "percent"
    assert m["vlprobe_version"] == __version__
    assert isinstance(m["git_revision"], str) and m["git_revision"]
    versions = m["versions"]
    assert {"python", "numpy", "h5py", "vlprobe"} <= set(versions)
    assert isinstance(m["created"], str) and m["created"]
    json.dumps(m)  # JSON-serialisable
    # The config and inputs are copies, not the caller's objects.
    config["ks"] = [5]
    assert m["config"]["ks"] == [1, 2]


def test_build_manifest_defaults() -> None:
    m = build_manifest("exp", 1, {}, {})
    assert m["seeds"] == []
    assert m["inputs"] == {}
    assert m["config"] == {}


def _manifest(name: str) -> dict[str, object]:
    return build_manifest("exp", 1, {"model": name}, {"cache": {"path": f"{name}.h5"}}, seeds=[7])


def test_write_results_layout(tmp_path: Path) -> None:
    rows = [{"experiment": "exp", "model": "clip", "metric": "acc", "value": 0.5}]
    csv_path, manifest_path = write_results(tmp_path, "exp", "clip", rows, _manifest("clip"))
    assert csv_path == tmp_path / "exp" / "clip.csv"
    assert manifest_path == tmp_path / "exp" / "manifest.json"
    header, got = read_csv(csv_path)
    assert header == list(TIDY_COLUMNS)
    assert got[0]["value"] == "0.5"
    data = json.loads(manifest_path.read_text(encoding="utf-8"))
    assert set(data) == {"experiment", "runs"}
    assert data["experiment"] == "exp"
    assert list(data["runs"]) == ["clip"]
    assert data["runs"]["clip"]["config"] == {"model": "clip"}
    assert data["runs"]["clip"]["seeds"] == [7]


def test_write_results_second_model_adds_to_manifest(tmp_path: Path) -> None:
    write_results(tmp_path, "exp", "clip", [{"metric": "a", "value": 1}], _manifest("clip"))
    write_results(tmp_path, "exp", "lxmert", [{"metric": "a", "value": 2}], _manifest("lxmert"))
    folder = tmp_path / "exp"
    assert sorted(p.name for p in folder.iterdir()) == [OUTPUTS_LIST, "clip.csv", "lxmert.csv", "manifest.json"]
    runs = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))["runs"]
    assert sorted(runs) == ["clip", "lxmert"]
    assert runs["clip"]["inputs"] == {"cache": {"path": "clip.h5"}}
    assert runs["lxmert"]["inputs"] == {"cache": {"path": "lxmert.h5"}}
    # Rerunning one model with the same settings replaces its own entry and keeps the other.
    rerun = {**_manifest("clip"), "rerun": True}
    write_results(tmp_path, "exp", "clip", [{"metric": "a", "value": 3}], rerun)
    runs = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))["runs"]
    assert runs["clip"]["rerun"] is True
    assert runs["lxmert"]["inputs"] == {"cache": {"path": "lxmert.h5"}}
    _, got = read_csv(folder / "clip.csv")
    assert [r["value"] for r in got] == ["3"]


def test_write_results_experiments_are_separate(tmp_path: Path) -> None:
    write_results(tmp_path, "a", "clip", [], {"x": 1})
    write_results(tmp_path, "b", "clip", [], {"x": 2})
    assert json.loads((tmp_path / "a" / "manifest.json").read_text())["runs"] == {"clip": {"x": 1}}
    assert json.loads((tmp_path / "b" / "manifest.json").read_text())["runs"] == {"clip": {"x": 2}}


def test_write_results_model_name_is_a_safe_file_name(tmp_path: Path) -> None:
    csv_path, manifest_path = write_results(tmp_path, "exp", "org/model v1", [], {"x": 1})
    assert csv_path.parent == tmp_path / "exp"
    assert "/" not in csv_path.name and " " not in csv_path.name
    assert csv_path.is_file()
    # The manifest keeps the model's real name.
    assert list(json.loads(manifest_path.read_text())["runs"]) == ["org/model v1"]


def test_write_results_unknown_column_writes_nothing(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown tidy column"):
        write_results(tmp_path, "exp", "clip", [{"nope": 1}], {"x": 1})
    folder = tmp_path / "exp"
    assert not (folder / "clip.csv").exists()
    assert not (folder / "manifest.json").exists()


def test_a_run_with_other_settings_is_refused_not_clobbered(tmp_path: Path) -> None:
    first = build_manifest("exp", 1, {"cache": "c.h5", "pooling": "cls", "out": "a", "jobs": 1}, {})
    write_results(tmp_path, "exp", "clip", [{"metric": "a", "value": 1}], first)
    other = build_manifest("exp", 1, {"cache": "c.h5", "pooling": "mean", "out": "a", "jobs": 1}, {})
    with pytest.raises(ValueError, match=r"^out: .*clip\.csv already holds .*pooling='cls' there, 'mean' now"):
        check_run_slot(tmp_path, "exp", "clip", other["config"])
    with pytest.raises(ValueError, match="pooling='cls' there"):
        write_results(tmp_path, "exp", "clip", [{"metric": "a", "value": 2}], other)
    _, got = read_csv(tmp_path / "exp" / "clip.csv")
    assert [r["value"] for r in got] == ["1"]  # the first run is intact
    # Another model name keeps both; settings that do not change results (jobs, out, ...) are neutral.
    write_results(tmp_path, "exp", "clip-mean", [{"metric": "a", "value": 2}], other)
    neutral = build_manifest("exp", 1, {"cache": "c.h5", "pooling": "cls", "out": "b", "jobs": 4}, {})
    write_results(tmp_path, "exp", "clip", [{"metric": "a", "value": 3}], neutral)
    runs = json.loads((tmp_path / "exp" / "manifest.json").read_text(encoding="utf-8"))["runs"]
    assert sorted(runs) == ["clip", "clip-mean"]
    assert runs["clip-mean"]["config"]["pooling"] == "mean"


def test_model_names_sharing_a_file_name_are_refused(tmp_path: Path) -> None:
    write_results(tmp_path, "exp", "org/m", [], _manifest("org/m"))
    with pytest.raises(ValueError, match="shares its file name"):
        write_results(tmp_path, "exp", "org_m", [], _manifest("org_m"))


def test_an_unreadable_manifest_is_not_silently_replaced(tmp_path: Path) -> None:
    (tmp_path / "exp").mkdir()
    (tmp_path / "exp" / "manifest.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match=r"^out: .*manifest\.json. exists and was not written by vlprobe"):
        write_results(tmp_path, "exp", "clip", [], _manifest("clip"))
    assert (tmp_path / "exp" / "manifest.json").read_text(encoding="utf-8") == "{not json"


def test_config_record_is_json_ready() -> None:
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Cfg:
        cache: Path
        streams: tuple[str, ...] | None = ("a", "b")

    assert config_record(Cfg(Path("x/c.h5"))) == {"cache": "x/c.h5", "streams": ["a", "b"]}


# -- runs keyed by their settings ---------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class SweepConfig(Options):
    """An experiment config whose fields' roles decide which of them are settings."""

    cache: Path = option(role="input", help="A cache.")
    out: Path = option(role="output", help="Results folder.")
    layers: str = option("all", help="Layers (swept: the rows show them).")
    pooling: str = option("cls", help="Pooling (a tidy column of its own).")
    C: float = option(100.0, help="SVM C.")
    scale: str = option("none", help="Scaling.")
    stratify: tuple[str, ...] | None = option(None, parse=names, help="Tag families.")
    seeds: int = option(3, help="Seeds (swept).")
    bootstrap_seed: int = option(0, help="Bootstrap seed.")
    name: str | None = option(None, role="output", help="Results label.")
    jobs: int = option(1, role="runtime", help="Workers.")


SWEEP = Experiment("exp", 1, SweepConfig, lambda c: None, swept=("layers", "seeds"), presets={"quick": {"seeds": 1}})


def _sweep(tmp_path: Path, **changes: Any) -> SweepConfig:
    return SweepConfig(cache=changes.pop("cache", tmp_path / "c.h5"), out=changes.pop("out", tmp_path), **changes)


def test_run_settings_columns_and_names(tmp_path: Path) -> None:
    base = _sweep(tmp_path)
    s = SWEEP.run_settings(base)
    # Inputs, outputs and runtime fields are no settings; swept ones and tidy-column ones get no column.
    assert list(s.values) == ["layers", "pooling", "C", "scale", "stratify", "seeds", "bootstrap_seed"]
    assert s.columns == {"C": "C", "scale": "scale", "stratify": "stratify", "bootstrap_seed": "bootstrap_seed"}
    assert s.changed == {} and s.key("clip") == "clip"
    other = SWEEP.run_settings(base.replace(C=1.0, stratify=("a", "b"), seeds=5, jobs=4, out=tmp_path / "x"))
    assert other.key("clip") == "clip@C=1,stratify=a+b,seeds=5"
    assert other.cells() == {"C": "1", "scale": "none", "stratify": "a+b", "bootstrap_seed": "0"}
    assert setting_cell(1e-4) == "0.0001" and setting_cell(None) == "" and setting_cell(True) == "True"


def test_one_folder_holds_a_sweep_of_one_model(tmp_path: Path) -> None:
    rows = [{"experiment": "exp", "model": "clip", "layer": 1, "kind": "self", "metric": "a", "value": 1.0}]
    paths = {}
    for c in (100.0, 1.0, 0.01):
        config = _sweep(tmp_path, C=c)
        run = SWEEP.claim(config, "clip")
        csv_path, manifest_path = SWEEP.write(config, "clip", rows, SWEEP.manifest(config, {}))
        assert csv_path.name == f"{result_stem(run)}.csv"
        paths[c] = csv_path
    assert [p.name for p in paths.values()] == ["clip.csv", "clip@C=1.csv", "clip@C=0.01.csv"]
    runs = json.loads(manifest_path.read_text(encoding="utf-8"))["runs"]
    assert sorted(runs) == ["clip", "clip@C=0.01", "clip@C=1"]
    assert runs["clip@C=1"]["run"] == "clip@C=1"
    assert runs["clip@C=1"]["settings_changed"] == {"C": 1.0}
    assert runs["clip@C=1"]["settings"]["C"] == 1.0
    header, got = read_csv(paths[1.0])
    assert header == [*TIDY_COLUMNS, "C", "scale", "stratify", "bootstrap_seed"]
    # The model column stays the model: a sweep needs no invented model names.
    assert got[0]["model"] == "clip" and got[0]["C"] == "1" and got[0]["kind"] == "self"
    # The same settings from another cache under the same name are refused, naming the field.
    moved = _sweep(tmp_path, cache=tmp_path / "other.h5", C=1.0)
    with pytest.raises(ValueError, match=r"clip@C=1\.csv already holds .*other settings or inputs \(cache="):
        SWEEP.claim(moved, "clip")
    # Runtime and output options do not count: the same run.
    assert SWEEP.claim(_sweep(tmp_path, C=1.0, jobs=4, name="ignored"), "clip") == "clip@C=1"
    # A preset sets settings: its run is named by the values it set, as the same values given one by one.
    quick = SWEEP.make_config({"cache": tmp_path / "c.h5", "out": tmp_path, "C": 1.0}, preset="quick")
    assert SWEEP.claim(quick, "clip") == SWEEP.claim(_sweep(tmp_path, C=1.0, seeds=1), "clip") == "clip@C=1,seeds=1"


def test_row_setting_columns_and_long_names(tmp_path: Path) -> None:
    config = _sweep(tmp_path, layers="0,1,2,3,4,5,6,7,8,9,10,11,12," * 8)
    settings = replace(SWEEP, row_columns=("agg", "lambda")).run_settings(config)
    rows = [{"metric": "text", "value": 1.0, "agg": "mean", "lambda": 0.5}]
    csv_path, _ = write_results(tmp_path, "exp", "clip", rows, {"config": config_record(config)}, settings=settings)
    assert len(csv_path.stem) <= 120 and csv_path.stem.startswith("clip@")
    header, got = read_csv(csv_path)
    assert header[-2:] == ["agg", "lambda"] and got[0]["agg"] == "mean" and got[0]["lambda"] == "0.5"
    with pytest.raises(ValueError, match="unknown tidy column"):
        write_tidy_csv(tmp_path / "x.csv", [{"metric": "a", "colour": 1}], settings)


def test_the_run_guard_compares_inputs_by_content_not_by_path_spelling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same cache under another spelling of its path is the same run; another cache copied
    over the recorded path is not."""
    from vlprobe.provenance import sha256_file
    from vlprobe.runs.writing import check_run_slot

    monkeypatch.chdir(tmp_path)
    cache = tmp_path / "c.h5"
    cache.write_bytes(b"cache one")
    config = {"cache": "c.h5", "seeds": 2}
    manifest = {**_manifest("clip"), "config": config, "inputs": {"cache": {"path": "c.h5", "sha256": sha256_file(cache)}}}
    write_results(tmp_path / "res", "exp", "clip", [{"metric": "acc", "value": 1.0}], manifest)
    check_run_slot(tmp_path / "res", "exp", "clip", {**config, "cache": str(cache)})  # absolute spelling: same run
    cache.write_bytes(b"another cache, copied over the same path")
    with pytest.raises(InputError, match=r"made from another cache file \('c\.h5' had sha256 "):
        check_run_slot(tmp_path / "res", "exp", "clip", config)


# -- two writers of one manifest at once --------------------------------------------------------

_SLOW_CSV = (  # the run's CSV takes 0.3 s: both writers are between reading and rewriting the manifest
    "import sys, time\n"
    "import vlprobe.runs.writing as w\n"
    "_write = w.write_tidy_csv\n"
    "def slow(*a, **k):\n"
    "    time.sleep(0.3)\n"
    "    return _write(*a, **k)\n"
    "w.write_tidy_csv = slow\n"
    "from vlprobe.cli import app\n"
    "sys.argv[0] = 'probe'\n"
    "app()\n"
)


def test_runs_written_at_once_from_threads_keep_every_manifest_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    import threading
    import time

    import vlprobe.runs.writing as writing

    write = writing.write_tidy_csv

    def slow(*args: Any, **kwargs: Any) -> Path:
        time.sleep(0.2)  # every thread has read the manifest by now, unless the manifest is locked
        return write(*args, **kwargs)

    monkeypatch.setattr(writing, "write_tidy_csv", slow)
    names = [f"model{k}" for k in range(4)]
    start = threading.Barrier(len(names))
    errors: list[BaseException] = []

    def one(name: str) -> None:
        try:
            start.wait()
            write_results(tmp_path, "exp", name, [{"metric": "a", "value": 1}], _manifest(name))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    runs = json.loads((tmp_path / "exp" / "manifest.json").read_text(encoding="utf-8"))["runs"]
    assert sorted(runs) == names
    assert not [p for p in (tmp_path / "exp").iterdir() if "vlprobe-lock" in p.name or "vlprobe-tmp" in p.name]


def test_two_probe_runs_into_one_out_at_once_keep_both_manifest_entries(reference_cache: Path, tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    out = tmp_path / "res"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _SLOW_CSV, "run", "winoground-scores", "--cache", str(reference_cache), "--out",
             str(out), "--bootstrap", "0", "--name", name],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )
        for name in ("first", "second")
    ]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    runs = json.loads((out / "winoground-scores" / "manifest.json").read_text(encoding="utf-8"))["runs"]
    assert sorted(runs) == ["first@bootstrap=0", "second@bootstrap=0"]
    assert len(list((out / "winoground-scores").glob("*.csv"))) == 2
