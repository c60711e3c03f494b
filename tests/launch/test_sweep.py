"""``probe sweep``: a plan of data, two tiny CLIPs x one dataset x two experiments, stopped by a
refused step, then resumed: the finished steps are skipped by their fingerprints."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from vlprobe.launch.steps import StepFailed
from vlprobe.launch.sweep import load_plan, plan_steps, run_sweep
from vlprobe.validation import InputError

PLAN = """
out = "out"

[[steps]]
name = "data"
args = ["fixtures", "dataset", "--n-items", "6", "--seed", "0", "--out", "{d}/data"]

[[steps]]
name = "clip"
args = ["fixtures", "model", "clip", "--seed", "0", "--out", "{d}/clip"]

[models.a]
model = "clip"
checkpoint = "{d}/clip"
extract = ["--device", "cpu"]
after = ["clip"]

[models.b]
model = "clip"
checkpoint = "{d}/clip"
extract = ["--device", "cpu", "--layers", "{layers}"]
after = ["clip"]

[datasets.wino]
dataset = "winoground"
data_dir = "{d}/data"
after = ["data"]

[experiments.winoground-scores]

[experiments.recall]
models = ["a"]
"""


def _write(tmp_path: Path, layers: str) -> Path:
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN.replace("{d}", str(tmp_path)).replace("{layers}", layers))
    return plan


@pytest.mark.slow  # nine probe processes: about a minute on two shared cores
def test_sweep_stopped_then_resumed(tmp_path: Path) -> None:
    said: list[str] = []
    with pytest.raises(StepFailed, match=r"step 'extract b-wino' did not finish: exit 2"):
        run_sweep(_write(tmp_path, "99"), jobs=2, threads=1, echo=said.append)
    state = tmp_path / "out" / "state"
    finished = {p.stem for p in state.glob("*.json")}
    assert {"data", "clip", "extract.a-wino"} <= finished
    said.clear()
    result = run_sweep(_write(tmp_path, "all"), jobs=2, threads=1, echo=said.append)
    assert {"data", "clip", "extract a-wino"} <= set(result["skipped"])
    assert "extract b-wino" in result["steps"] and "collect" in result["steps"]
    with open(result["results"], newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert {(r["experiment"], r["model"]) for r in rows} >= {("winoground-scores", "a"), ("winoground-scores", "b"),
                                                             ("recall", "a")}
    again = run_sweep(_write(tmp_path, "all"), jobs=2, echo=said.append)  # everything done: nothing runs
    assert not again["steps"] and len(again["skipped"]) == len(plan_steps(load_plan(_write(tmp_path, "all"))))


def test_plan_steps_and_refusals(tmp_path: Path) -> None:
    steps = {s.name: s for s in plan_steps(load_plan(_write(tmp_path, "all")))}
    assert set(steps) == {"data", "clip", "extract a-wino", "extract b-wino", "winoground-scores a-wino",
                          "winoground-scores b-wino", "recall a-wino", "collect"}
    assert steps["extract b-wino"].after == ("clip", "data")
    assert steps["winoground-scores b-wino"].exclusive == "winoground-scores wino"
    assert steps["recall a-wino"].args[:3] == ("run", "recall", "--cache")
    bad = tmp_path / "bad.toml"
    for text, match in [("[models.a]\nmodel='clip'\n", "at least one"), ("foo = 1\n", "unknown key"),
                        ("[models.a]\n[datasets.b]\n", "needs model"), ("x = [", "not valid TOML")]:
        bad.write_text(text)
        with pytest.raises(InputError, match=match):
            load_plan(bad)
