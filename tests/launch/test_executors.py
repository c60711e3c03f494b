"""The local executor's two start methods: a fork of the fork server and a fresh interpreter
give a step the same log (Python and C-level output), exit codes, signals, environment and
threads; a killed step is retried; a crash, even of the server, takes nothing else down.

The stand-in step (``step_entry.py``) loads no vlprobe command line, and the servers here preload
only torch, so that each test starts in a few seconds."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from vlprobe.launch.executors import Finished, LocalExecutor, wait_all
from vlprobe.launch.forkserver import PRELOAD, ServerEnded
from vlprobe.launch.steps import Step, StepCrashed, run_steps
from vlprobe.validation import InputError

HERE = Path(__file__).resolve().parent
ENTRY = "tests.launch.step_entry:main"


def _executor(start_method: str, **kw: object) -> LocalExecutor:
    return LocalExecutor(start_method=start_method, entry=ENTRY, preload=("torch",),
                         python=(sys.executable, str(HERE / "step_entry.py")), **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def forked() -> Iterator[LocalExecutor]:
    """One fork server for the tests that need nothing special of it."""
    ex = _executor("forkserver", jobs=4, threads=1, gpus=[])
    yield ex
    ex.close()


def _run(ex: LocalExecutor, tmp_path: Path, *commands: list[str]) -> tuple[list[Finished], list[str]]:
    logs = [tmp_path / f"step{i}.log" for i in range(len(commands))]
    ends = wait_all(ex, ex.start(list(zip(commands, logs, strict=True))))
    return ends, [log.read_text() if log.exists() else "" for log in logs]


COMMANDS = [["say"], ["exit", "0"], ["exit", "1"], ["exit", "2"], ["raise"], ["kill"]]


@pytest.mark.parametrize("start_method", ["forkserver", "spawn"])
def test_logs_and_exit_codes_are_the_same_either_way(start_method: str, forked: LocalExecutor,
                                                      tmp_path: Path) -> None:
    ex = forked if start_method == "forkserver" else _executor("spawn", jobs=4, threads=1, gpus=[])
    ends, logs = _run(ex, tmp_path, *COMMANDS)
    assert [e.rc for e in ends] == [0, 0, 1, 2, 1, -signal.SIGKILL]
    said = logs[0].splitlines()
    # every write reaches the log, whichever layer made it (the order of Python's buffers aside)
    assert sorted(said) == sorted(["python stdout", "python stderr", "fd 1", "fd 2", "libc printf"]), logs[0]
    assert "RuntimeError: a bug in the step" in logs[4] and "Traceback" in logs[4]
    assert logs[1] == logs[2] == logs[3] == logs[5] == ""
    assert all(e.cpu is not None and e.cpu >= 0 for e in ends)  # the killed one's too


def test_cpu_seconds_are_the_steps_own(forked: LocalExecutor, tmp_path: Path) -> None:
    ends, _ = _run(forked, tmp_path, ["burn", "0.5"], ["sleep", "0.5"])
    burnt, slept = ends
    assert burnt.rc == slept.rc == 0
    assert burnt.cpu is not None and slept.cpu is not None
    # the fork inherits no CPU time of its server (which spent seconds importing torch)
    assert 0.45 <= burnt.cpu < 1.5 and slept.cpu < 0.3, (burnt, slept)


@pytest.mark.parametrize("threads", [1, 2])
def test_each_step_has_its_threads(threads: int, tmp_path: Path) -> None:
    ex = _executor("forkserver", jobs=1, threads=threads, gpus=[])
    try:
        ends, logs = _run(ex, tmp_path, ["threads"])
    finally:
        ex.close()
    assert ends[0].rc == 0 and logs[0].split() == [str(threads), str(threads)]


def test_environment_gpus_and_launcher_variables(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SLURM_PROCID", "3")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("VLPROBE_TEST_KEPT", "yes")
    ex = _executor("forkserver", jobs=2, gpus=["3", "5"], env={"VLPROBE_TEST_GIVEN": "given"})
    try:
        names = ["CUDA_VISIBLE_DEVICES", "SLURM_PROCID", "RANK", "VLPROBE_TEST_KEPT", "VLPROBE_TEST_GIVEN"]
        ends, logs = _run(ex, tmp_path, ["env", *names], ["env", *names])
        assert [e.rc for e in ends] == [0, 0]
        assert {log.split()[0] for log in logs} == {"CUDA_VISIBLE_DEVICES=3", "CUDA_VISIBLE_DEVICES=5"}
        for log in logs:
            assert log.split()[1:] == ["SLURM_PROCID=None", "RANK=None", "VLPROBE_TEST_KEPT=yes",
                                       "VLPROBE_TEST_GIVEN=given"]
        # the GPUs came back: two more steps get them again
        (tmp_path / "again").mkdir()
        _, again = _run(ex, tmp_path / "again", ["env", "CUDA_VISIBLE_DEVICES"], ["env", "CUDA_VISIBLE_DEVICES"])
        assert sorted(again) == ["CUDA_VISIBLE_DEVICES=3\n", "CUDA_VISIBLE_DEVICES=5\n"]
    finally:
        ex.close()


def test_a_step_that_uses_no_gpu_sees_none_and_leaves_them_to_others(tmp_path: Path) -> None:
    ex = _executor("forkserver", jobs=2, gpus=["3"])
    try:
        logs = [tmp_path / "cpu.log", tmp_path / "gpu.log"]
        ends = wait_all(ex, ex.start([(["env", "CUDA_VISIBLE_DEVICES"], logs[0]),
                                      (["env", "CUDA_VISIBLE_DEVICES"], logs[1])], [False, True]))
        assert [e.rc for e in ends] == [0, 0]
        assert [log.read_text() for log in logs] == ["CUDA_VISIBLE_DEVICES=\n", "CUDA_VISIBLE_DEVICES=3\n"]
    finally:
        ex.close()


@pytest.mark.slow  # two submitit jobs on its local cluster (a few seconds each)
def test_submitit_jobs_that_use_no_gpu_ask_for_none(tmp_path: Path) -> None:
    pytest.importorskip("submitit", reason="submitit is the optional extra vlprobe[slurm]")
    from vlprobe.launch.executors import SubmititExecutor, slurm_parameters

    ex = SubmititExecutor(tmp_path / "submitit", cluster="local",
                          parameters=slurm_parameters(name="t", cluster="local", gpus_per_task=1, timeout_min=5))
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    jobs = ex.start([(["--version"], logs[0]), (["--version"], logs[1])], [True, False])
    assert [e.rc for e in wait_all(ex, jobs)] == [0, 0]
    assert ex._executor._executor.parameters["gpus_per_node"] == 1  # (submitit's own record of the job options)
    assert ex._cpu._executor.parameters["gpus_per_node"] == 0


def test_a_step_killed_on_purpose_is_retried(forked: LocalExecutor, tmp_path: Path) -> None:
    said: list[str] = []
    marker = tmp_path / "killed-once"
    result = run_steps([Step("victim", ("kill-once", str(marker))), Step("after", ("exit", "0"), ("victim",))],
                       forked, tmp_path, retries=1, echo=said.append)
    assert result["steps"]["victim"]["tries"] == 2 and "after" in result["steps"]
    assert any(line.startswith("victim: killed by signal 9 (try 1 of 2); running it again") for line in said), said
    log = (tmp_path / "logs" / "victim.log").read_text()
    assert "# try 2" in log and "(exit -9" in log and "second try" in log and "(exit 0" in log


def test_a_crash_takes_nothing_else_down(forked: LocalExecutor, tmp_path: Path) -> None:
    # a segfault of one step, beside steps that run to their end
    ends, _ = _run(forked, tmp_path, ["burn", "0.3"], ["segv"], ["say"])
    assert [e.rc for e in ends] == [0, -signal.SIGSEGV, 0]
    with pytest.raises(StepCrashed, match=r"step 'bad' did not finish: exit 1 after 2 tries.*RuntimeError"):
        run_steps([Step("bad", ("raise",))], forked, tmp_path / "run", retries=1, echo=lambda _: None)
    # this process and its server go on
    ends, _ = _run(forked, tmp_path, ["exit", "0"])
    assert ends[0].rc == 0


def test_a_server_killed_from_outside_takes_its_steps_and_is_started_again(tmp_path: Path) -> None:
    ex = _executor("forkserver", jobs=2, threads=1, gpus=[])
    try:
        handles = ex.start([(["sleep", "60"], tmp_path / "a.log"), (["sleep", "60"], tmp_path / "b.log")])
        server = ex._server
        assert server is not None
        os.kill(server.pid, signal.SIGKILL)
        ends = wait_all(ex, handles)
        assert [e.rc for e in ends] == [-signal.SIGKILL] * 2
        for h in handles:  # the steps died with their server (no orphan goes on writing)
            assert _dead(h.pid)
        ends, _ = _run(ex, tmp_path, ["exit", "0"])
        assert ends[0].rc == 0 and ex._server is not server
    finally:
        ex.close()


def _dead(pid: int, within: float = 5) -> bool:
    """Whether ``pid`` is gone or a zombie, within ``within`` seconds (an orphan is reaped when init gets to it)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def test_cancel_stops_a_step(forked: LocalExecutor, tmp_path: Path) -> None:
    (handle,) = forked.start([(["sleep", "60"], tmp_path / "s.log")])
    forked.cancel(handle)
    assert wait_all(forked, [handle])[0].rc == -signal.SIGTERM


def test_the_default_server_imports_without_threads(tmp_path: Path) -> None:
    ex = LocalExecutor(jobs=1, threads=1, gpus=[])
    assert ex.start_method == "forkserver" and ex.preload == PRELOAD
    try:
        ends, logs = _run(ex, tmp_path, ["--version"])
        assert ends[0].rc == 0 and logs[0].startswith("vlprobe ")
        assert ex._server is not None and ex._server.threads == 1  # torch, sklearn, ... imported, no pool started
    finally:
        ex.close()


def test_refusals() -> None:
    with pytest.raises(InputError, match="start-method must be forkserver or spawn, got 'fork'"):
        LocalExecutor(start_method="fork")


def test_a_server_whose_imports_initialised_cuda_is_refused(tmp_path: Path) -> None:
    ex = LocalExecutor(jobs=1, gpus=[], entry=ENTRY, preload=("tests.launch.cuda_claimed",))
    with pytest.raises(ServerEnded, match="initialised CUDA, which a fork cannot use"):
        ex.start([(["exit", "0"], tmp_path / "x.log")])
    ex.close()


@pytest.mark.parametrize("start_method", ["forkserver", "spawn"])
@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGKILL])
def test_a_driver_stopped_leaves_no_server_and_no_step(start_method: str, how: signal.Signals, tmp_path: Path) -> None:
    """Ctrl-C (SIGINT to the driver alone) or SIGKILL of a driver: its running steps and its fork
    server end within the grace period (they resume on the next run), none goes on writing."""
    import subprocess

    driver = subprocess.Popen([sys.executable, str(HERE / "drive_steps.py"), start_method, str(tmp_path)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    pids = [tmp_path / f"{name}.pid" for name in ("a", "b")]
    deadline = time.monotonic() + 60
    while not all(p.exists() for p in pids):
        assert driver.poll() is None and time.monotonic() < deadline, driver.stderr.read() if driver.stderr else ""
        time.sleep(0.05)
    steps = [int(p.read_text().split()[0]) for p in pids]
    parents = {int(p.read_text().split()[1]) for p in pids}
    assert parents == ({driver.pid} if start_method == "spawn" else parents - {driver.pid})
    driver.send_signal(how)
    driver.wait(timeout=30)
    for pid in [*steps, *(parents - {driver.pid})]:  # the steps, and the fork server they were forked from
        assert _dead(pid, within=15), (pid, how, start_method)
