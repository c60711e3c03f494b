"""``probe sweep`` running the known-answer testbed's plan (``make demo``'s run), at tiny settings:
``probe fixtures testbed --plan-only`` writes the plan, ``probe sweep`` runs it to the known-answer
report, and a second ``probe sweep`` skips every step.

Marked ``slow``: 52 ``probe`` steps, forks of one fork server, about 35 s on two cores (a fresh
process per step took 220 s). The plan's steps themselves are checked in
tests/results/test_known_answers.py (fast); the known answers at the testbed's real settings in
tests/experiments/test_known_answer_floors.py (``make test-testbed``).
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vlprobe.cli import app
from vlprobe.results.known_answers import CLIP_MODELS, LXMERT_MODELS

pytestmark = pytest.mark.slow

TINY = ["--train-items", "40", "--eval-items", "12", "--clip-steps", "2", "--lxmert-steps", "2", "--objects-steps", "2"]


def test_probe_sweep_runs_the_testbeds_plan(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    r = CliRunner().invoke(app, ["fixtures", "testbed", "--out", str(out), *TINY, "--plan-only"])
    assert r.exit_code == 0, r.output
    plan = out / "plan.toml"
    assert f"probe sweep {plan} --jobs 2 --threads 1" in r.output and not (out / "logs").exists()  # nothing ran

    r = CliRunner().invoke(app, ["sweep", str(plan), "--jobs", "2", "--threads", "1"])
    assert r.exit_code == 0, r.output
    assert "[52/52]" in r.output
    with open(out / "report" / "known_answers.csv", newline="", encoding="utf-8") as fh:
        table = list(csv.DictReader(fh))
    assert {row["model"] for row in table} == {*CLIP_MODELS, *LXMERT_MODELS} - {"clip-shuffle"}  # only on request
    assert "Known answers of the testbed" in (out / "report" / "summary.txt").read_text(encoding="utf-8")
    assert (out / "report" / "comparison.png").is_file()
    page = (out / "report" / "report.html").read_text(encoding="utf-8")
    assert page.index('<h2 id="known-answers">') < page.index('<h2 id="separability">')  # the verdicts first
    with open(out / "results.csv", newline="", encoding="utf-8") as fh:
        runs = {(row["experiment"], row["model"]) for row in csv.DictReader(fh)}
    assert ("recall", "clip-trained") in runs and ("separability", "lxmert-random") in runs
    assert ("recall", "lxmert-trained") not in runs  # recall: the CLIPs only

    again = CliRunner().invoke(app, ["sweep", str(plan), "--jobs", "2"])
    assert again.exit_code == 0 and "52 of 52 steps done before (skipped)" in again.output, again.output
