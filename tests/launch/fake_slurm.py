"""A stand-in Slurm for the tests: ``sbatch``, ``srun``, ``sacct``, ``squeue`` and ``scancel`` on one
machine, close enough to the real ones that submitit's own Slurm executor (its sbatch scripts,
job arrays, ``srun`` lines and ``sacct`` parsing) drives it unchanged.

:func:`install` writes the five commands into a folder for ``PATH``; each is this module run as
``python fake_slurm.py COMMAND ...``. The cluster's state is a folder (``FAKE_SLURM_DIR``): one
JSON record per job (an array task is a job ``A_T``), a job counter, and ``calls.jsonl``, every
``sbatch`` and ``scancel`` call (what the tests count). ``sbatch`` records the job(s) and starts
one detached runner per job, which waits for its dependencies (``afterok``, ``afterany``,
``afternotok``; a dependency that can no longer be met cancels the job with
``--kill-on-invalid-dep=yes``, else the job stays pending, as Slurm does), for its array's
``%N`` throttle, and while the file ``HOLD`` exists in the state folder (a queue that is busy),
then runs the batch script (after ``STALL`` is gone: a job that is running but has not got
to its script yet) with the environment Slurm gives a batch script: the job's and
array's variables (``SLURM_ARRAY_TASK_MIN``/``MAX``/``COUNT`` from the indices,
``SLURM_ARRAY_TASK_STEP`` from the number after ``--array``'s first ``:``) and the batch step's
``SLURM_STEP_ID=-5``. ``srun`` runs its command as step 0, 1, ... of the job with one task.
``scancel`` kills a running job's processes (SIGTERM) and marks the job ``CANCELLED``. As in
Slurm, a job whose ``--output`` folder does not exist fails (nothing makes it).

Supported options are what vlprobe, submitit and the documentation's examples use (``--array``,
``--dependency``, ``--kill-on-invalid-dep``, ``--wrap``, ``--parsable``, ``--output``,
``--error``, ``--job-name``, ``--ntasks``, ``--cpus-per-task``, and every other ``--key=value``
recorded as it is); one node, no time limits.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

COMMANDS = ("sbatch", "srun", "sacct", "squeue", "scancel")
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL"}
_SHORT = {"-a": "array", "-d": "dependency", "-o": "output", "-e": "error", "-J": "job-name", "-n": "ntasks",
          "-c": "cpus-per-task", "-p": "partition", "-t": "time", "-N": "nodes", "-A": "account", "-q": "qos"}
_FLAGS = {"parsable", "unbuffered", "exclusive", "requeue", "no-requeue", "wait", "overcommit"}


def install(bin_dir: Path, state: Path) -> dict[str, str]:
    """Write the five commands into ``bin_dir``; the environment variables that put them first
    on ``PATH`` with the cluster's state in ``state``."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    state.mkdir(parents=True, exist_ok=True)
    here = Path(__file__).resolve()
    for name in COMMANDS:
        script = bin_dir / name
        script.write_text(f"#!{sys.executable}\nimport runpy, sys\nsys.argv[0] = {name!r}\n"
                          f"sys.argv.insert(1, {name!r})\nrunpy.run_path({str(here)!r}, run_name='__main__')\n")
        script.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "FAKE_SLURM_DIR": str(state)}


# -- the state -----------------------------------------------------------------------------------


def _state() -> Path:
    return Path(os.environ["FAKE_SLURM_DIR"])


@contextlib.contextmanager
def _locked() -> Iterator[Path]:
    root = _state()
    with open(root / ".lock", "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield root
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _job_file(root: Path, job: str) -> Path:
    return root / "jobs" / f"{job}.json"


def _load(root: Path, job: str) -> dict[str, Any] | None:
    try:
        return json.loads(_job_file(root, job).read_text())
    except (OSError, ValueError):
        return None


def _save(root: Path, rec: dict[str, Any]) -> None:
    path = _job_file(root, rec["job_id"])
    path.parent.mkdir(exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(rec))
    os.replace(tmp, path)


def _all(root: Path) -> list[dict[str, Any]]:
    out = []
    for p in sorted((root / "jobs").glob("*.json")) if (root / "jobs").is_dir() else []:
        with contextlib.suppress(OSError, ValueError):
            out.append(json.loads(p.read_text()))
    return out


def _log_call(root: Path, what: dict[str, Any]) -> None:
    with open(root / "calls.jsonl", "a") as fh:
        fh.write(json.dumps(what) + "\n")


def _units(root: Path, job: str) -> list[dict[str, Any]]:
    """The records ``job`` names: one job, one array task, or every task of an array."""
    rec = _load(root, job)
    if rec is not None:
        return [rec]
    return [r for r in _all(root) if r.get("array_job_id") == job]


# -- sbatch --------------------------------------------------------------------------------------


def _options(args: list[str], *, stop_at_positional: bool) -> tuple[dict[str, str], list[str]]:
    """``--key=value``, ``--key value``, ``-k value`` and flags up to the first positional."""
    opts: dict[str, str] = {}
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            return opts, args[i + 1:]
        if a.startswith("--"):
            key, eq, value = a[2:].partition("=")
            if not eq:
                if key in _FLAGS or i + 1 >= len(args):
                    value = "yes"
                else:
                    i += 1
                    value = args[i]
            opts[key] = value
        elif a.startswith("-") and len(a) >= 2 and a[:2] in _SHORT:
            key = _SHORT[a[:2]]
            if len(a) > 2:
                opts[key] = a[2:]
            else:
                i += 1
                opts[key] = args[i]
        elif stop_at_positional:
            return opts, args[i:]
        i += 1
    return opts, []


def _directives(script: str) -> dict[str, str]:
    """The ``#SBATCH`` lines before the first command."""
    lines = []
    for line in script.splitlines()[1:]:
        s = line.strip()
        if s.startswith("#SBATCH"):
            lines += shlex.split(s[len("#SBATCH"):])
        elif s and not s.startswith("#"):
            break
    return _options(lines, stop_at_positional=False)[0]


def _indices(spec: str) -> tuple[list[int], int | None, int]:
    """``0-7%2``, ``1,4,9``, ``0-3:2,5`` -> (indices, throttle, step as Slurm reports it)."""
    spec, _, throttle = spec.partition("%")
    out: set[int] = set()
    for part in spec.split(","):
        rng, _, step = part.partition(":")
        a, _, b = rng.partition("-")
        out.update(range(int(a), int(b or a) + 1, int(step or 1)))
    m = re.search(r":(\d+)", spec)  # Slurm's SLURM_ARRAY_TASK_STEP: atoi of what follows the first ':'
    return sorted(out), int(throttle) if throttle else None, int(m.group(1)) if m else 1


def _dependencies(spec: str) -> list[tuple[str, list[str]]]:
    out = []
    for part in filter(None, spec.replace("?", ",").split(",")):
        kind, *ids = part.split(":")
        out.append((kind, ids))
    return out


def sbatch(args: list[str]) -> int:
    opts, rest = _options(args, stop_at_positional=True)
    if "wrap" in opts:
        script = f"#!/bin/bash\n{opts['wrap']}\n"
    elif rest:
        script = Path(rest[0]).read_text()
    else:
        script = sys.stdin.read()
    merged = {**_directives(script), **opts}
    with _locked() as root:
        counter = root / "counter"
        main = int(counter.read_text()) + 1 if counter.exists() else 1000
        counter.write_text(str(main))
        scripts = root / "scripts"
        scripts.mkdir(exist_ok=True)
        (scripts / f"{main}.sh").write_text(script)
        base = {"array_job_id": None, "state": "PENDING", "script": str(scripts / f"{main}.sh"), "options": merged,
                "deps": _dependencies(merged.get("dependency", "")), "cwd": os.getcwd(),
                "env": {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")},
                "submitted": time.time(), "rc": None, "steps": 0}
        if "array" in merged:
            indices, throttle, step = _indices(merged["array"])
            units = [{**base, "job_id": f"{main}_{t}", "array_job_id": str(main), "task": t, "task_job": main + 1 + i,
                      "array": {"min": min(indices), "max": max(indices), "count": len(indices), "step": step,
                                "throttle": throttle}} for i, t in enumerate(indices)]
            counter.write_text(str(main + len(indices)))
        else:
            units = [{**base, "job_id": str(main)}]
        for u in units:
            _save(root, u)
        _log_call(root, {"call": "sbatch", "job": str(main), "options": merged, "tasks": len(units)})
    for u in units:
        runner = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "run", u["job_id"]],
                                  start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, env={**os.environ})
        with _locked() as root:
            rec = _load(root, u["job_id"])
            if rec is not None:
                rec["runner"] = runner.pid
                _save(root, rec)
    print(str(main) if "parsable" in opts else f"Submitted batch job {main}")
    return 0


# -- the runner of one job -----------------------------------------------------------------------


def _dep_state(root: Path, deps: list[tuple[str, list[str]]]) -> str:
    """``"ok"``, ``"wait"`` or ``"never"`` (a dependency that can no longer be met)."""
    for kind, ids in deps:
        for job in ids:
            states = [u["state"] for u in _units(root, job)] or ["COMPLETED"]  # (unknown: long gone)
            if kind == "afterok":
                if any(s in TERMINAL and s != "COMPLETED" for s in states):
                    return "never"
                if not all(s == "COMPLETED" for s in states):
                    return "wait"
            elif kind == "afternotok":
                if all(s == "COMPLETED" for s in states):
                    return "never"
                if not all(s in TERMINAL for s in states):
                    return "wait"
            elif kind in ("afterany", "after"):
                if not all(s in TERMINAL for s in states):
                    return "wait"
    return "ok"


def _pattern(pattern: str, rec: dict[str, Any], job_id: str) -> str:
    return (pattern.replace("%%", "\0").replace("%A", str(rec.get("array_job_id") or job_id))
            .replace("%a", str(rec.get("task", ""))).replace("%j", job_id)
            .replace("%x", rec["options"].get("job-name", "sbatch")).replace("%t", "0").replace("\0", "%"))


def _batch_env(rec: dict[str, Any]) -> dict[str, str]:
    """What Slurm gives a batch script (the batch step: SLURM_STEP_ID is SLURM_BATCH_SCRIPT as %d)."""
    job_id = str(rec.get("task_job") or rec["job_id"])
    opts = rec["options"]
    env = {**rec["env"], "SLURM_JOB_ID": job_id, "SLURM_JOBID": job_id,
           "SLURM_JOB_NAME": opts.get("job-name", "wrap" if "wrap" in opts else "sbatch"),
           "SLURM_CLUSTER_NAME": "fake", "SLURM_JOB_NODELIST": "fakenode", "SLURM_NODELIST": "fakenode",
           "SLURM_JOB_NUM_NODES": "1", "SLURM_NNODES": "1", "SLURM_NODEID": "0", "SLURM_PROCID": "0",
           "SLURM_LOCALID": "0", "SLURM_STEP_ID": "-5", "SLURM_STEPID": "-5", "SLURM_SUBMIT_DIR": rec["cwd"],
           "SLURM_SUBMIT_HOST": "login", "SLURMD_NODENAME": "fakenode", "ENVIRONMENT": "BATCH",
           "SLURM_JOB_PARTITION": opts.get("partition", "debug"), "SLURM_CPUS_ON_NODE": opts.get("cpus-per-task", "1"),
           "SLURM_TASKS_PER_NODE": "1", "SLURM_TASK_PID": str(os.getpid())}
    if "ntasks" in opts:
        env["SLURM_NTASKS"] = env["SLURM_NPROCS"] = opts["ntasks"]
    if "cpus-per-task" in opts:
        env["SLURM_CPUS_PER_TASK"] = opts["cpus-per-task"]
    if rec.get("array"):
        a = rec["array"]
        env.update({"SLURM_ARRAY_JOB_ID": rec["array_job_id"], "SLURM_ARRAY_TASK_ID": str(rec["task"]),
                    "SLURM_ARRAY_TASK_MIN": str(a["min"]), "SLURM_ARRAY_TASK_MAX": str(a["max"]),
                    "SLURM_ARRAY_TASK_COUNT": str(a["count"]), "SLURM_ARRAY_TASK_STEP": str(a["step"])})
    return env


def run(job: str) -> int:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # scancel's SIGTERM is for the job's processes
    while True:
        with _locked() as root:
            rec = _load(root, job)
            if rec is None or rec["state"] != "PENDING":
                return 0
            held = (root / "HOLD").exists()
            deps = _dep_state(root, rec["deps"])
            throttle = (rec.get("array") or {}).get("throttle")
            busy = throttle is not None and sum(
                u["state"] == "RUNNING" for u in _units(root, rec["array_job_id"])) >= throttle
            if deps == "never":
                if rec["options"].get("kill-on-invalid-dep") == "yes":
                    rec.update(state="CANCELLED", reason="DependencyNeverSatisfied")
                    _save(root, rec)
                    return 0
            elif deps == "ok" and not held and not busy:
                rec.update(state="RUNNING", started=time.time())
                _save(root, rec)
                break
        time.sleep(0.05)
    while (_state() / "STALL").exists():  # running, as far as anyone can see, but not yet at its script
        time.sleep(0.05)
    job_id = str(rec.get("task_job") or rec["job_id"])
    default = "slurm-%A_%a.out" if rec.get("array") else "slurm-%j.out"
    out = Path(rec["cwd"]) / _pattern(rec["options"].get("output", default), rec, job_id)
    err = Path(rec["cwd"]) / _pattern(rec["options"]["error"], rec, job_id) if "error" in rec["options"] else out
    if not out.parent.is_dir() or not err.parent.is_dir():  # Slurm opens them, it makes no folder
        with _locked() as root:
            rec = _load(root, job) or rec
            rec.update(state="FAILED", rc=1, reason="no folder for the job's output", ended=time.time())
            _save(root, rec)
        return 0
    env = _batch_env(rec)
    with open(out, "a") as o, open(err, "a") as e:
        rc = subprocess.call(["bash", rec["script"]], cwd=rec["cwd"], env=env, stdout=o, stderr=e if err != out else o,
                             stdin=subprocess.DEVNULL)
    with _locked() as root:
        rec = _load(root, job) or rec
        if rec["state"] == "RUNNING":
            rec.update(state="COMPLETED" if rc == 0 else "FAILED", rc=rc, ended=time.time())
            _save(root, rec)
    return 0


# -- srun, sacct, squeue, scancel ------------------------------------------------------------------


def srun(args: list[str]) -> int:
    opts, command = _options(args, stop_at_positional=True)
    env = dict(os.environ)
    job = env.get("SLURM_ARRAY_JOB_ID") and f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
    job = job or env.get("SLURM_JOB_ID", "")
    with _locked() as root:
        rec = _load(root, job)
        step = rec["steps"] if rec else 0
        if rec:
            rec["steps"] = step + 1
            _save(root, rec)
    env.update({"SLURM_STEP_ID": str(step), "SLURM_STEPID": str(step), "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
                "SLURM_NTASKS": "1", "SLURM_NPROCS": "1", "SLURM_STEP_NUM_TASKS": "1", "SLURM_STEP_NUM_NODES": "1",
                "SLURM_STEP_NODELIST": "fakenode", "SLURM_STEP_TASKS_PER_NODE": "1"})
    names = {"%j": env.get("SLURM_JOB_ID", ""), "%A": env.get("SLURM_ARRAY_JOB_ID", env.get("SLURM_JOB_ID", "")),
             "%a": env.get("SLURM_ARRAY_TASK_ID", ""), "%t": "0"}

    def name(pattern: str) -> str:
        for k, v in names.items():
            pattern = pattern.replace(k, v)
        return pattern

    stdout = open(name(opts["output"]), "a") if "output" in opts else None
    stderr = open(name(opts["error"]), "a") if "error" in opts else stdout
    try:
        return subprocess.call(command, env=env, stdout=stdout, stderr=stderr)
    finally:
        for fh in {stdout, stderr} - {None}:
            fh.close()  # type: ignore[union-attr]


def _requested(args: list[str]) -> list[str]:
    jobs: list[str] = []
    for i, a in enumerate(args):
        if a in ("-j", "--jobs") and i + 1 < len(args):
            jobs += args[i + 1].split(",")
        elif a.startswith("--jobs="):
            jobs += a.split("=", 1)[1].split(",")
    return jobs


def sacct(args: list[str]) -> int:
    fields = "JobID,State,NodeList"
    for i, a in enumerate(args):
        if a in ("-o", "--format") and i + 1 < len(args):
            fields = args[i + 1]
        elif a.startswith("--format="):
            fields = a.split("=", 1)[1]
    names = fields.split(",")
    header = not ({"-n", "--noheader"} & set(args))
    only_jobs = bool({"-X", "--allocations"} & set(args))
    root = _state()
    rows: list[list[str]] = []
    for job in _requested(args):
        for u in _units(root, job):
            state = u["state"] + (" by 1000" if u["state"] == "CANCELLED" and not u.get("reason") else "")
            values = {"JobID": u["job_id"], "State": state, "NodeList": "fakenode",
                      "ExitCode": f"{u['rc'] if u['rc'] is not None else 0}:0", "JobName": u["options"].get(
                          "job-name", "sbatch")}
            rows.append([values.get(n, "") for n in names])
            if not only_jobs and u["state"] not in ("PENDING",):
                rows.append([{**values, "JobID": u["job_id"] + ".batch"}.get(n, "") for n in names])
    if header:
        print("|".join(names))
    for r in rows:
        print("|".join(r))
    return 0


def squeue(args: list[str]) -> int:
    fmt = "%i %T"
    for i, a in enumerate(args):
        if a in ("-o", "--format") and i + 1 < len(args):
            fmt = args[i + 1]
    root = _state()
    wanted = _requested(args)
    units = [u for j in wanted for u in _units(root, j)] if wanted else _all(root)
    if not ({"-h", "--noheader"} & set(args)):
        print(fmt.replace("%i", "JOBID").replace("%T", "STATE").replace("%j", "NAME"))
    for u in units:
        if u["state"] in ("PENDING", "RUNNING"):
            print(fmt.replace("%i", u["job_id"]).replace("%T", u["state"]).replace(
                "%j", u["options"].get("job-name", "sbatch")))
    return 0


def scancel(args: list[str]) -> int:
    opts, jobs = _options(args, stop_at_positional=True)
    root = _state()
    _log_call(root, {"call": "scancel", "jobs": jobs, "options": opts})
    for job in jobs:
        with _locked():
            units = _units(root, job)
            for u in units:
                if "signal" in opts or u["state"] in TERMINAL:
                    continue
                running = u["state"] == "RUNNING"
                u.update(state="CANCELLED", ended=time.time())
                _save(root, u)
                if running and u.get("runner"):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(u["runner"], signal.SIGTERM)
    return 0


def kill_all(state: Path) -> None:
    """End every job of the stand-in cluster (a test's teardown)."""
    os.environ["FAKE_SLURM_DIR"] = str(state)
    jobs = [u["job_id"] for u in _all(state) if u["state"] not in TERMINAL]
    if jobs:
        scancel(jobs)
    for u in _all(state):
        if u.get("runner"):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(u["runner"], signal.SIGKILL)


def calls(state: Path, kind: str = "sbatch") -> list[dict[str, Any]]:
    """The recorded ``sbatch`` (or ``scancel``) calls, in order."""
    path = state / "calls.jsonl"
    if not path.exists():
        return []
    return [c for c in map(json.loads, path.read_text().splitlines()) if c["call"] == kind]


def jobs(state: Path) -> list[dict[str, Any]]:
    """Every job record (array tasks each), in job order."""
    return _all(state)


if __name__ == "__main__":
    command, *rest = sys.argv[1:]
    if command == "run":
        sys.exit(run(rest[0]))
    sys.exit({"sbatch": sbatch, "srun": srun, "sacct": sacct, "squeue": squeue, "scancel": scancel}[command](rest))
