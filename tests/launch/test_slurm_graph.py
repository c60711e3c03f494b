"""The whole graph of a run submitted to Slurm at once (the stand-in Slurm of
:mod:`tests.launch.fake_slurm`, driven by submitit's own Slurm executor): every step one job with
``--dependency=afterok`` on its inputs' jobs, nothing submitted again that is queued, running or
done, a failed job retried with the jobs after it, each step's time limit from its cost."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.launch import fake_slurm
from vlprobe.launch.records import Owned
from vlprobe.launch.slurm_graph import SlurmSubmitter, follow_graph, step_minutes, submit_graph
from vlprobe.launch.steps import Step, StepCrashed, StepFailed


def _steps() -> list[Step]:
    """A diamond of cheap steps (``probe --version``): a, then b and c (c without a GPU), then d."""
    return [Step("a", ("--version",), cost=1.0), Step("b", ("--version",), ("a",), cost=4.0),
            Step("c", ("--version",), ("a",), cost=0.5, gpu=False), Step("d", ("--version",), ("b", "c"), cost=2.0)]


def _submitter(root: Path, **kw: object) -> SlurmSubmitter:
    return SlurmSubmitter(root / "submitit", {"timeout_min": 60, "gpus_per_node": 1, "tasks_per_node": 1, "nodes": 1,
                                              "name": "t", "slurm_partition": "gpu"}, **kw)  # type: ignore[arg-type]


def _wait_for(what, timeout: float = 60) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_the_whole_graph_is_submitted_at_once_with_dependencies(stand_in_slurm: Path, tmp_path: Path) -> None:
    (stand_in_slurm / "HOLD").touch()  # a busy queue: nothing starts until it is gone
    root = tmp_path / "run"
    said: list[str] = []
    graph = submit_graph(_steps(), root, _submitter(root, cpu_partition="cpu"), timeout_min=60, echo=said.append)
    calls = fake_slurm.calls(stand_in_slurm)
    assert len(calls) == 4 and all(j["state"] == "PENDING" for j in fake_slurm.jobs(stand_in_slurm))
    job = {name: graph.alive[name] for name in "abcd"}
    deps = {c["job"]: c["options"].get("dependency", "") for c in calls}
    assert deps[job["a"]] == ""
    assert deps[job["b"]] == deps[job["c"]] == f"afterok:{job['a']}"
    assert deps[job["d"]] == f"afterok:{job['b']}:{job['c']}"
    assert all(c["options"]["kill-on-invalid-dep"] == "yes" for c in calls)
    opts = {c["job"]: c["options"] for c in calls}
    # time limits follow the cost (b is the costliest: 60 min; a and c get at least 10), c has no GPU
    assert [opts[job[n]]["time"] for n in "abcd"] == ["15", "60", "10", "30"]
    assert opts[job["c"]]["partition"] == "cpu" and opts[job["b"]]["partition"] == "gpu"
    assert opts[job["c"]]["gpus-per-node"] == "0" and opts[job["b"]]["gpus-per-node"] == "1"
    assert said[-1].startswith("4 steps to Slurm: 4 submitted, 0 queued or running before, 0 done before")

    # the driver is gone; run again: Slurm says every job is queued, nothing is submitted
    again = submit_graph(_steps(), root, _submitter(root), timeout_min=60, echo=said.append)
    assert len(fake_slurm.calls(stand_in_slurm)) == 4 and again.alive == graph.alive
    assert said[-1].startswith("4 steps to Slurm: 0 submitted, 4 queued or running before")

    (stand_in_slurm / "HOLD").unlink()
    result = follow_graph(again, poll_interval=0.1)
    assert set(result["steps"]) == set("abcd")
    log = (root / "logs" / "d.log").read_text()
    assert log.startswith("$ probe --version\n# Slurm job ") and "vlprobe " in log
    # done: a rerun submits nothing
    done = submit_graph(_steps(), root, _submitter(root), timeout_min=60, echo=said.append)
    assert len(fake_slurm.calls(stand_in_slurm)) == 4 and not done.alive and done.done == set("abcd")


@pytest.mark.slow  # jobs of the stand-in Slurm, each a submitit process: about 8 s
def test_a_job_that_is_running_is_followed_not_submitted_again(stand_in_slurm: Path, tmp_path: Path) -> None:
    (stand_in_slurm / "STALL").touch()  # jobs start, and stay at the start
    root = tmp_path / "run"
    graph = submit_graph(_steps(), root, _submitter(root), timeout_min=60, echo=lambda _: None)
    _wait_for(lambda: any(j["state"] == "RUNNING" for j in fake_slurm.jobs(stand_in_slurm)))
    states = {j["job_id"]: j["state"] for j in fake_slurm.jobs(stand_in_slurm)}
    assert states[graph.alive["a"]] == "RUNNING" and states[graph.alive["d"]] == "PENDING"
    again = submit_graph(_steps(), root, _submitter(root), timeout_min=60, echo=lambda _: None)
    assert len(fake_slurm.calls(stand_in_slurm)) == 4 and again.alive == graph.alive
    (stand_in_slurm / "STALL").unlink()
    assert set(follow_graph(again, poll_interval=0.1)["steps"]) == set("abcd")


@pytest.mark.slow  # jobs of the stand-in Slurm, each a submitit process: about 8 s
def test_a_changed_step_is_cancelled_and_submitted_again(stand_in_slurm: Path, tmp_path: Path) -> None:
    """A step whose command changed while its job was queued: that job and the jobs after it are
    cancelled and submitted afresh; the others are followed."""
    (stand_in_slurm / "HOLD").touch()
    root = tmp_path / "run"
    first = submit_graph(_steps(), root, _submitter(root), timeout_min=60, echo=lambda _: None)
    changed = [s if s.name != "b" else Step("b", ("--version", "--help"), ("a",), cost=4.0) for s in _steps()]
    said: list[str] = []
    again = submit_graph(changed, root, _submitter(root), timeout_min=60, echo=said.append)
    assert again.alive["a"] == first.alive["a"] and again.alive["c"] == first.alive["c"]
    assert again.alive["b"] != first.alive["b"] and again.alive["d"] != first.alive["d"]
    assert sorted(fake_slurm.calls(stand_in_slurm, "scancel")[0]["jobs"]) == sorted([first.alive["b"], first.alive["d"]])
    assert any(line.startswith("cancelling 2 job(s) of steps whose inputs or options changed") for line in said)
    (stand_in_slurm / "HOLD").unlink()
    assert set(follow_graph(again, poll_interval=0.1)["steps"]) == set("abcd")


@pytest.mark.slow  # jobs of the stand-in Slurm, each a submitit process: about 8 s
def test_a_failed_job_is_retried_with_the_jobs_after_it(stand_in_slurm: Path, tmp_path: Path) -> None:
    """A step that crashed (exit 1 here: its done check fails once) is submitted again with the
    steps after it, which Slurm cancelled (their dependency could no longer be met)."""
    root = tmp_path / "run"
    marker = tmp_path / "second-try"
    steps = [Step("a", ("--version",), done=_FailsOnce(str(marker))), Step("b", ("--version",), ("a",))]
    said: list[str] = []
    graph = submit_graph(steps, root, _submitter(root), timeout_min=60, echo=said.append)
    result = follow_graph(graph, retries=1, poll_interval=0.1)
    assert result["steps"]["a"]["tries"] == 2 and "b" in result["steps"]
    assert any(line.startswith("a: exit 0 but not yet (try 1 of 2); submitting it again and the 1 step(s) after it")
               for line in said), said
    assert len(fake_slurm.calls(stand_in_slurm)) == 4  # a, b, then a and b again


class _FailsOnce:
    """A done check that fails the first time (and makes ``marker``), then passes."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __call__(self) -> str:
        if Path(self.marker).exists():
            return ""
        Path(self.marker).touch()
        return "not yet"


def test_a_refused_step_is_not_retried_and_nothing_after_it_runs(stand_in_slurm: Path, tmp_path: Path) -> None:
    root = tmp_path / "run"
    steps = [Step("bad", ("extract", "--model", "no-such-model", "--out", str(tmp_path / "x.h5"))),
             Step("after", ("--version",), ("bad",))]
    graph = submit_graph(steps, root, _submitter(root), timeout_min=60, echo=lambda _: None)
    with pytest.raises(StepFailed, match=r"step 'bad' did not finish: exit 2: error: .*no-such-model.*Slurm job"):
        follow_graph(graph, retries=3, poll_interval=0.1)
    assert len(fake_slurm.calls(stand_in_slurm)) == 2
    _wait_for(lambda: all(j["state"] in fake_slurm.TERMINAL for j in fake_slurm.jobs(stand_in_slurm)))
    assert [j["state"] for j in fake_slurm.jobs(stand_in_slurm)] == ["FAILED", "CANCELLED"]


@pytest.mark.slow  # jobs of the stand-in Slurm, each a submitit process: about 8 s
def test_a_job_killed_for_good_is_one_crash(stand_in_slurm: Path, tmp_path: Path) -> None:
    (stand_in_slurm / "STALL").touch()
    root = tmp_path / "run"
    graph = submit_graph([Step("a", ("--version",))], root, _submitter(root), timeout_min=60, echo=lambda _: None)
    _wait_for(lambda: fake_slurm.jobs(stand_in_slurm)[0]["state"] == "RUNNING")
    fake_slurm.scancel([graph.alive["a"]])  # (as an administrator, or a preemption, would)
    with pytest.raises(StepCrashed, match=r"step 'a' did not finish: Slurm job cancelled"):
        follow_graph(graph, retries=0, poll_interval=0.1)


def test_time_limits_follow_the_cost() -> None:
    steps = [Step("x", (), cost=3.0), Step("y", (), cost=0.5), Step("z", (), cost=1.0, timeout_min=7),
             Step("w", (), cost=1.5)]
    assert step_minutes(steps, 240) == {"x": 240, "y": 40, "z": 7, "w": 120}
    assert step_minutes(steps, 5) == {"x": 5, "y": 5, "z": 7, "w": 5}  # at least 10, or the limit when less


@pytest.mark.slow  # jobs of the stand-in Slurm, each a submitit process: about 8 s
def test_owned_files_of_another_key_are_replaced_before_submission(stand_in_slurm: Path, tmp_path: Path) -> None:
    """A step submitted under another key than its earlier finished run first removes what that run
    made (here a vlprobe-listed file), before its job is queued."""
    from vlprobe.io.atomic import write_json

    root = tmp_path / "run"
    made = tmp_path / "made.json"
    write_json(made, {"x": 1}, kind="test-output")
    steps = [Step("a", ("--version",), owns=Owned((str(made),)))]
    follow_graph(submit_graph(steps, root, _submitter(root), timeout_min=60, echo=lambda _: None), poll_interval=0.1)
    assert made.exists()
    said: list[str] = []
    submit_graph([Step("a", ("--version", "--help"), owns=Owned((str(made),)))], root, _submitter(root),
                 timeout_min=60, echo=said.append)
    assert not made.exists() and any(f"removed what its earlier run made: {made}" in line for line in said)


@pytest.mark.slow  # seven probe steps as jobs of the stand-in Slurm, and three drivers: about 2 minutes
def test_a_sweep_on_slurm_survives_its_driver(stand_in_slurm: Path, tmp_path: Path) -> None:
    """``probe sweep --launcher slurm``: the whole plan submitted once with its dependencies; the
    driver SIGKILLed, then run again while the jobs are queued, then while some run: nothing is
    submitted again; followed to the end; a finished sweep run again submits nothing."""
    import os
    import signal
    import subprocess
    import sys

    from typer.testing import CliRunner

    from tests.launch.test_sweep import PLAN
    from vlprobe.cli import app

    text = PLAN.replace("{d}", str(tmp_path))
    plan = tmp_path / "plan.toml"
    plan.write_text(text[:text.index("[models.b]")] + text[text.index("[datasets.wino]"):])  # model a only
    argv = ["sweep", str(plan), "--launcher", "slurm", "--gpus-per-task", "0", "--timeout-min", "10"]
    (stand_in_slurm / "HOLD").touch()
    driver = subprocess.Popen([sys.executable, "-m", "vlprobe", *argv], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, env=dict(os.environ))
    state = tmp_path / "out" / "state"
    _wait_for(lambda: len(list(state.glob("*.try.json"))) == 7 or driver.poll() is not None)
    assert driver.poll() is None, driver.stderr.read() if driver.stderr else ""
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    submitted = fake_slurm.calls(stand_in_slurm)
    deps = {c["job"]: c["options"].get("dependency", "") for c in submitted}
    assert sum(c["tasks"] for c in submitted) == 7 and sum(1 for d in deps.values() if d.startswith("afterok:")) >= 4

    r = CliRunner().invoke(app, [*argv, "--no-wait"])  # the jobs are queued: nothing is submitted again
    assert r.exit_code == 0, r.output
    assert "0 submitted, 7 queued or running before" in r.stderr and fake_slurm.calls(stand_in_slurm) == submitted

    (stand_in_slurm / "STALL").touch()
    (stand_in_slurm / "HOLD").unlink()
    _wait_for(lambda: any(j["state"] == "RUNNING" for j in fake_slurm.jobs(stand_in_slurm)))
    r = CliRunner().invoke(app, [*argv, "--no-wait"])  # some run, the rest wait for them
    assert r.exit_code == 0 and fake_slurm.calls(stand_in_slurm) == submitted, r.output

    (stand_in_slurm / "STALL").unlink()
    r = CliRunner().invoke(app, argv)  # follow them to the end
    assert r.exit_code == 0, r.output
    assert r.stdout.strip().splitlines()[-1] == str(tmp_path / "out" / "results.csv")
    assert (tmp_path / "out" / "report" / "wino.html").stat().st_size > 0
    assert fake_slurm.calls(stand_in_slurm) == submitted

    r = CliRunner().invoke(app, argv)  # done: a rerun submits nothing
    assert r.exit_code == 0 and "0 submitted, 0 queued or running before, 7 done before" in r.stderr, r.output
    assert fake_slurm.calls(stand_in_slurm) == submitted
