"""A run's whole graph of steps submitted to Slurm at once, each job waiting for its inputs' jobs.

Slurm runs dependency graphs itself: :func:`submit_graph` submits every step not done before as
a job (through submitit's Slurm executor) with ``--dependency=afterok:<the jobs of the steps it
waits for>`` (and ``afterany`` on the previous step of its ``exclusive`` group, which must not
run at once) and ``--kill-on-invalid-dep=yes``, so that no level of the graph queues again
behind the one before, and the login node's driver may go away once it has submitted. Steps
that can be submitted together with the same needs (a model's 8 shards) go as one job array.
Each step's job records its end itself (``state/<step>.json`` when it is done, under the key
the driver gave it; ``state/<step>.exit.json`` with its exit code when its command failed, and
the job then fails, so that no job waiting on it runs), and the driver records each job it
submits (``state/<step>.try.json``: key and job id).

A rerun asks Slurm (``sacct``, then ``squeue`` for a job ``sacct`` does not list yet) about the
jobs recorded before submitting anything: a step whose job is pending or running under the
same key is followed, not submitted again; one whose key changed meanwhile is cancelled and
submitted afresh; a finished step is skipped as any other. A sweep rerun after it finished
submits nothing.

:func:`follow_graph` then follows the jobs (unless told not to wait): a job that failed is
submitted again up to ``retries`` times (with the jobs after it, which Slurm cancelled), one
whose command refused its input (exit 2) is not, and the driver stops in one line naming the
step, its Slurm state or exit, and its log.

Each job's resources: one task with ``gpus_per_task`` GPUs (none for a step without a GPU, which
may go to ``cpu_partition``), and a time limit that follows the step's cost: its own
``timeout_min`` when the plan gives one, else the run's ``timeout_min`` times its cost over the
costliest step's, at least :data:`MIN_MINUTES` minutes (or the run's limit when that is less).
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vlprobe.io.paths import ensure_folder
from vlprobe.launch.identity import ContentMemo, read_contents
from vlprobe.launch.records import (
    read_exit,
    read_try,
    replace_earlier,
    safe_name,
    write_exit,
    write_record,
    write_try,
)
from vlprobe.launch.steps import (
    Step,
    StepCrashed,
    StepFailed,
    content_memo,
    done_before,
    finished_before,
    last_line,
    ordered_steps,
    plan_keys,
)
from vlprobe.validation import InputError

__all__ = ["ALIVE", "MIN_MINUTES", "SlurmQueue", "SlurmSubmitter", "StepJob", "follow_graph", "poll_interval", "step_minutes",
           "submit_graph"]

#: Slurm job states of a job that may still run (``sacct``'s and ``squeue``'s long names).
ALIVE = frozenset({"PENDING", "RUNNING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING", "COMPLETING",
                   "SUSPENDED", "RESIZING", "STAGE_OUT", "SIGNALING", "RESV_DEL_HOLD", "SPECIAL_EXIT"})
#: The shortest time limit a step gets from its cost, minutes.
MIN_MINUTES = 10
#: Seconds the driver waits for cancelled jobs to stop before it submits their steps again.
CANCEL_WAIT = 120.0
#: Seconds a job may be missing from both ``sacct`` and ``squeue`` before it counts as lost.
LOST_AFTER = 300.0


class StepExit(RuntimeError):
    """Raised in a step's job when its command failed, so that Slurm marks the job failed."""


@dataclass(frozen=True)
class StepJob:
    """What a step's Slurm job runs (pickled by submitit): the command, then its own record.

    Attributes
    ----------
    name, args, key : str, tuple of str, str
        The step, its ``probe`` arguments and the key the driver computed for it.
    root : str
        The run's folder (``logs/``, ``state/``).
    done : callable, optional
        The step's done check.
    """

    name: str
    args: tuple[str, ...]
    key: str
    root: str
    done: Callable[[], str] | None = None

    def __call__(self) -> int:
        root = Path(self.root)
        job = os.environ.get("SLURM_ARRAY_JOB_ID", "") and (
            f"{os.environ['SLURM_ARRAY_JOB_ID']}_{os.environ.get('SLURM_ARRAY_TASK_ID', '')}")
        job = job or os.environ.get("SLURM_JOB_ID", "")
        log = root / "logs" / f"{safe_name(self.name)}.log"
        ensure_folder(log.parent)
        t0 = time.perf_counter()
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(f"$ probe {' '.join(self.args)}\n# Slurm job {job}\n")
            fh.flush()
            rc = subprocess.run([sys.executable, "-m", "vlprobe", *self.args], stdout=fh, stderr=subprocess.STDOUT,
                                env=dict(os.environ), check=False).returncode
            wall = time.perf_counter() - t0
            missing = self.done() if rc == 0 and self.done is not None else ""
            fh.write(f"(exit {rc}, {wall:.1f} s)\n" + (f"(but {missing})\n" if missing else ""))
        if rc == 0 and not missing:
            memo = ContentMemo(root / "state")
            write_record(root, self.name, self.key, self.args, wall=wall, job_id=job,
                         read=read_contents(self.args, root, memo))
            memo.save()
            return 0
        write_exit(root, self.name, job_id=job, rc=rc, missing=missing)
        raise StepExit(f"step {self.name!r}: `probe {' '.join(self.args)}` "
                       + (f"exited {rc}" if rc else f"exited 0 but {missing}") + f" (log {log})")


class SlurmQueue:
    """What Slurm says of jobs (``sacct``, ``squeue``) and cancelling them (``scancel``)."""

    def states(self, jobs: Sequence[str]) -> dict[str, str]:
        """Each job's state (``PENDING``, ``RUNNING``, ``COMPLETED``, ``FAILED``, ...); a job
        neither command lists is left out."""
        jobs = [j for j in dict.fromkeys(jobs) if j]
        if not jobs:
            return {}
        got: dict[str, str] = {}
        out = _command(["sacct", "-X", "-n", "-P", "-o", "JobID,State", "-j", ",".join(jobs)])
        for line in out.splitlines():
            parts = line.strip().split("|")
            if len(parts) >= 2 and parts[0]:
                for job in _expand(parts[0]):
                    got[job] = parts[1].split()[0] if parts[1].split() else "UNKNOWN"
        missing = [j for j in jobs if j not in got]
        if missing:
            out = _command(["squeue", "-h", "-r", "-o", "%i|%T", "-j", ",".join(missing)], check=False)
            for line in out.splitlines():
                parts = line.strip().split("|")
                if len(parts) >= 2:
                    for job in _expand(parts[0]):
                        got.setdefault(job, parts[1].strip())
        return {j: got[j] for j in jobs if j in got}

    def cancel(self, jobs: Sequence[str]) -> None:
        if jobs:
            _command(["scancel", *jobs], check=False)


def _expand(job_id: str) -> list[str]:
    """``123_[0-2,5]`` -> ``123_0``, ``123_1``, ``123_2``, ``123_5``; anything else as it is."""
    if "_[" not in job_id:
        return [job_id]
    main, _, spec = job_id.partition("_[")
    out: list[str] = []
    for part in spec.rstrip("]").split("%")[0].split(","):
        a, _, b = part.partition("-")
        if a.isdigit() and (not b or b.isdigit()):
            out += [f"{main}_{i}" for i in range(int(a), int(b or a) + 1)]
    return out


def _command(argv: list[str], check: bool = True) -> str:
    if shutil.which(argv[0]) is None:
        raise InputError(f"launcher: no {argv[0]} here: run it where Slurm's commands are")
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0 and check:
        raise InputError(f"launcher: `{' '.join(argv[:2])} ...` failed (exit {done.returncode}): "
                         f"{' '.join(done.stderr.split())[:300]}")
    return done.stdout


def step_minutes(steps: Sequence[Step], timeout_min: int) -> dict[str, int]:
    """Each step's Slurm time limit in minutes (module docstring)."""
    costs = [s.cost for s in steps if s.timeout_min is None]
    top = max(costs, default=0.0)
    floor = min(MIN_MINUTES, timeout_min)
    out: dict[str, int] = {}
    for s in steps:
        if s.timeout_min is not None:
            out[s.name] = max(1, math.ceil(s.timeout_min))
        else:
            out[s.name] = max(floor, math.ceil(timeout_min * s.cost / top)) if top > 0 else timeout_min
    return out


@dataclass
class SlurmSubmitter:
    """Submits steps as Slurm jobs through submitit (a fresh executor per group of jobs that share
    their parameters, so that nothing of one group's sticks to the next).

    Parameters
    ----------
    folder : Path
        submitit's folder (job scripts, pickles, the jobs' own logs: ``%j_0_log.out``).
    parameters : mapping
        submitit's parameters common to every job (:func:`vlprobe.launch.executors.slurm_parameters`).
    cpu_partition : str, optional
        The partition of the steps that use no GPU (default: the others').
    """

    folder: Path
    parameters: Mapping[str, Any] = field(default_factory=dict)
    cpu_partition: str | None = None

    def check(self) -> None:
        """Refuse now, in one line, a machine without Slurm or parameters submitit does not take."""
        from vlprobe.launch.executors import submitit_executor

        submitit_executor(self.folder, "slurm", self.parameters)

    def submit(self, jobs: Sequence[StepJob], *, dependency: str, gpu: bool, minutes: int) -> list[str]:
        """Submit ``jobs`` together (one array when several) with these needs; their job ids."""
        from vlprobe.launch.executors import submitit_executor

        params = dict(self.parameters)
        params["timeout_min"] = int(minutes)
        if not gpu:
            params["gpus_per_node"] = 0
            if self.cpu_partition:
                params["slurm_partition"] = self.cpu_partition
        extra = dict(params.pop("slurm_additional_parameters", {}) or {})
        extra["kill-on-invalid-dep"] = "yes"
        if dependency:
            extra["dependency"] = dependency
        params["slurm_additional_parameters"] = extra
        executor = submitit_executor(self.folder, "slurm", params)
        with executor.batch():
            submitted = [executor.submit(job) for job in jobs]
        return [str(j.job_id) for j in submitted]


def poll_interval() -> float:
    """Seconds between two looks at Slurm's jobs: ``VLPROBE_SLURM_POLL``, default 30 (a login
    node's ``sacct`` is shared by every user)."""
    raw = os.environ.get("VLPROBE_SLURM_POLL", "")
    try:
        return max(0.05, float(raw)) if raw else 30.0
    except ValueError:
        raise InputError(f"VLPROBE_SLURM_POLL must be a number of seconds, got {raw!r}") from None


def _descendants(steps: Sequence[Step], names: set[str]) -> set[str]:
    """The steps that wait, directly or not, for any of ``names``."""
    out: set[str] = set()
    for s in steps:  # (in dependency order: a step comes after what it waits for)
        if any(a in names or a in out for a in s.after):
            out.add(s.name)
    return out


@dataclass
class _Graph:
    """The driver's view of a run's jobs (module docstring)."""

    steps: list[Step]
    root: Path
    keys: dict[str, str]
    submitter: SlurmSubmitter
    queue: SlurmQueue
    minutes: dict[str, int]
    echo: Callable[[str], Any]
    done: set[str] = field(default_factory=set)
    alive: dict[str, str] = field(default_factory=dict)  # step -> its job, pending or running
    tries: dict[str, int] = field(default_factory=dict)
    failed: set[str] = field(default_factory=set)

    def attach(self) -> list[str]:
        """Follow the jobs recorded before that still run under this run's keys; cancel those of
        another key. Returns the steps followed."""
        recorded = {s.name: t for s in self.steps if s.name not in self.done
                    and (t := read_try(self.root, s.name)) is not None and t.get("job_id")}
        states = self.queue.states([str(t["job_id"]) for t in recorded.values()])
        stale: list[str] = []
        for name, t in recorded.items():
            job = str(t["job_id"])
            if states.get(job) not in ALIVE:
                continue
            if t.get("key") == self.keys[name]:
                self.alive[name] = job
                self.tries[name] = 1
            else:
                stale.append(job)
        if stale:
            self.echo(f"cancelling {len(stale)} job(s) of steps whose inputs or options changed: {', '.join(stale)}")
            self.queue.cancel(stale)
            deadline = time.monotonic() + CANCEL_WAIT  # their files are replaced next: let them stop writing
            while any(self.queue.states(stale).get(j) in ALIVE for j in stale) and time.monotonic() < deadline:
                time.sleep(1.0)
        return list(self.alive)

    def submit_missing(self) -> list[str]:
        """Submit every step neither done, nor followed, nor failed for good, after the jobs of
        the steps it waits for (consecutive steps of the same needs as one array); returns the
        steps submitted."""
        submitted: list[str] = []
        batch: list[Step] = []
        needs: tuple[str, bool, int] = ("", True, 0)

        def flush() -> None:
            if not batch:
                return
            jobs = []
            for s in batch:
                replace_earlier(self.root, s.name, self.keys[s.name], s.owns, self.echo)
                jobs.append(StepJob(s.name, s.args, self.keys[s.name], str(self.root), s.done))
            ids = self.submitter.submit(jobs, dependency=needs[0], gpu=needs[1], minutes=needs[2])
            for s, job in zip(batch, ids, strict=True):
                write_try(self.root, s.name, self.keys[s.name], s.owns, job_id=job, dependency=needs[0],
                          minutes=needs[2])
                self.alive[s.name] = job
                self.tries[s.name] = self.tries.get(s.name, 0) + 1
                submitted.append(s.name)
            batch.clear()

        last_of: dict[str, str] = {}  # exclusive group -> the job of its latest step
        for s in self.steps:
            if s.name in self.done or s.name in self.failed:
                continue
            if s.name in self.alive:
                if s.exclusive:
                    last_of[s.exclusive] = self.alive[s.name]
                continue
            waits = [a for a in s.after if a not in self.done]
            if any(a in (b.name for b in batch) for a in waits):
                flush()
            if any(a not in self.alive for a in waits):
                continue  # an input failed for good (its failure is reported)
            dependency = ",".join(filter(None, [
                "afterok:" + ":".join(self.alive[a] for a in waits) if waits else "",
                f"afterany:{last_of[s.exclusive]}" if s.exclusive in last_of else ""]))
            mine = (dependency, s.gpu, self.minutes[s.name])
            if batch and (mine != needs or s.exclusive):
                flush()
            batch.append(s)
            needs = mine
            if s.exclusive:
                flush()
                last_of[s.exclusive] = self.alive[s.name]
        flush()
        return submitted


def submit_graph(
    steps: Sequence[Step], root: Path, submitter: SlurmSubmitter, *, timeout_min: int = 240,
    queue: SlurmQueue | None = None, echo: Callable[[str], Any] = print,
) -> _Graph:
    """Submit the steps of a run not done before, all at once (module docstring); returns the
    graph :func:`follow_graph` follows."""
    ordered = ordered_steps(steps)
    submitter.check()
    ensure_folder(Path(root) / "state")
    ensure_folder(Path(root) / "logs")
    memo = content_memo(root)
    keys = plan_keys(ordered, root, memo)
    graph = _Graph(ordered, Path(root), keys, submitter, queue or SlurmQueue(), step_minutes(ordered, timeout_min),
                   echo)
    graph.done = set(done_before(ordered, root, keys, memo))
    followed = graph.attach()
    submitted = graph.submit_missing()
    parts = [f"{len(submitted)} submitted", f"{len(followed)} queued or running before",
             f"{len(graph.done)} done before"]
    echo(f"{len(ordered)} steps to Slurm: {', '.join(parts)}" + (
        "; jobs " + ", ".join(f"{n}={graph.alive[n]}" for n in submitted[:8]) + (" ..." if len(submitted) > 8 else "")
        if submitted else ""))
    return graph


def follow_graph(graph: _Graph, *, retries: int = 1, poll_interval: float = 30.0) -> dict[str, Any]:
    """Follow the graph's jobs to their end (module docstring).

    Returns
    -------
    dict
        ``steps``: name -> {job, tries} of the steps that ran now; ``skipped``: the steps done
        before; ``wall``: seconds.

    Raises
    ------
    StepFailed
        A step's command refused its input (exit 2).
    StepCrashed
        A step's job failed (killed, out of time or memory, exit 1) after its retries.
    """
    t0 = time.perf_counter()
    skipped = sorted(graph.done, key=[s.name for s in graph.steps].index)
    ran: dict[str, dict[str, Any]] = {}
    failure: InputError | StepCrashed | None = None
    unseen: dict[str, float] = {}  # job -> when sacct and squeue first did not list it
    while graph.alive and failure is None:
        time.sleep(poll_interval)
        states = graph.queue.states(list(graph.alive.values()))
        for s in graph.steps:
            job = graph.alive.get(s.name)
            if job is None:
                continue
            state = states.get(job)
            if state is None:  # too new for sacct and squeue yet, or gone from both for good
                first = unseen.setdefault(job, time.monotonic())
                if time.monotonic() - first < max(LOST_AFTER, 10 * poll_interval):
                    continue
                state = "LOST"
            if state in ALIVE:
                continue
            del graph.alive[s.name]
            # what the step read, hashed through the memo its job just updated (not read again in full)
            if state == "COMPLETED" and finished_before(s, graph.root, graph.keys[s.name],
                                                        content_memo(graph.root)):
                graph.done.add(s.name)
                ran[s.name] = {"job": job, "tries": graph.tries.get(s.name, 1)}
                graph.echo(f"[{len(graph.done)}/{len(graph.steps)}] {s.name} (job {job})")
                continue
            why, rc = _why(graph.root, s.name, job, state)
            after = _descendants(graph.steps, {s.name})
            cancel = [graph.alive.pop(d) for d in list(graph.alive) if d in after]
            graph.queue.cancel(cancel)
            log = graph.root / "logs" / f"{safe_name(s.name)}.log"
            if rc != 2 and graph.tries.get(s.name, 1) <= retries:
                graph.echo(f"{s.name}: {why} (try {graph.tries.get(s.name, 1)} of {retries + 1}); submitting it again"
                           + (f" and the {len(after)} step(s) after it" if after else ""))
                continue
            graph.failed.add(s.name)
            failure = (StepFailed if rc == 2 else StepCrashed)(
                f"step {s.name!r} did not finish: {why}" + (f" after {graph.tries[s.name]} tries"
                                                            if graph.tries.get(s.name, 1) > 1 else "")
                + f" (log {log}; Slurm job {job})")
            break
        if failure is None:
            graph.submit_missing()
    if failure is not None:
        raise failure
    missing = [s.name for s in graph.steps if s.name not in graph.done]
    if missing:  # (a step whose input failed for good: failure was raised above)
        raise StepCrashed(f"steps {', '.join(missing[:4])} did not run")
    return {"steps": ran, "skipped": skipped, "wall": time.perf_counter() - t0}


def _why(root: Path, name: str, job: str, state: str) -> tuple[str, int | None]:
    """What ended a step's job that is not done: its command's exit (the job's own record) or
    Slurm's state (killed, out of time or memory, cancelled), and the exit code when known."""
    ended = read_exit(root, name)
    if ended is not None and str(ended.get("job_id")) == job and isinstance(ended.get("rc"), int):
        rc = int(ended["rc"])
        said = last_line(root / "logs" / f"{safe_name(name)}.log")
        if rc == 0:
            return f"exit 0 but {ended.get('missing')}", 0
        return f"exit {rc}" + (f": {said}" if said else ""), rc
    return f"Slurm job {state.lower().replace('_', ' ')}", None


