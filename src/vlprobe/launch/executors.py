"""Where a step runs: a ``probe`` command as a process on this machine, or as a Slurm job.

Both executors run a step as its own process, so a step that dies (killed, out of memory) takes
nothing else with it, and the scheduler (:mod:`vlprobe.launch.steps`) sees only an exit code and
a log:

:class:`LocalExecutor`
    Up to ``jobs`` processes at once on this machine, each with ``threads`` CPU threads and,
    when there are GPUs, its own GPU (``CUDA_VISIBLE_DEVICES``, so that ``--device auto`` is
    ``cuda`` in it). The launcher's own variables (Slurm, torchrun) are removed from a step's
    environment: the step is placed by the scheduler, not by the job that runs the scheduler.
    How a step's process starts (``start_method``; ``probe sweep`` and ``probe launch local``
    take ``--start-method``):

    ``forkserver`` (the default on Linux)
        A fork of one server process that imported torch, transformers, scikit-learn and
        vlprobe's command line once (:mod:`vlprobe.launch.forkserver`): a step starts in
        milliseconds instead of paying those imports (about 4 CPU seconds) again. The child
        gets the step's log as its stdout and stderr (file descriptors, so C output too), its
        environment, threads and GPU, and ends with the command's exit code; the server reports
        its exit code (negative: the signal that killed it) and CPU seconds.
    ``spawn``
        The command ``python -m vlprobe ARGS`` in a fresh interpreter (the default elsewhere;
        ``python`` changes the command).
:class:`SubmititExecutor`
    Each step a job submitted with submitit (``pip install vlprobe[slurm]``) once its inputs are
    done: what ``--cluster local`` runs (submitit's local processes, the same jobs without
    Slurm). On Slurm itself a run's whole graph goes at once instead, each job waiting for its
    inputs' jobs (:mod:`vlprobe.launch.slurm_graph`). The job runs ``python -m vlprobe ARGS``
    (keeping the job's Slurm variables: outputs record the job ids).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from vlprobe.launch.forkserver import GRACE, PRELOAD, ForkServer, ServerEnded
from vlprobe.shards import launcher_free
from vlprobe.validation import InputError, check_positive_int

__all__ = ["START_METHODS", "Executor", "Finished", "LocalExecutor", "SubmititExecutor", "default_start_method",
           "local_executor", "run_probe", "slurm_parameters"]

#: How the local executor starts a step's process (module docstring).
START_METHODS = ("forkserver", "spawn")


def default_start_method() -> str:
    """``forkserver`` on Linux, else ``spawn``."""
    return "forkserver" if sys.platform.startswith("linux") else "spawn"


@dataclass(frozen=True)
class Finished:
    """A step's end: its exit code (negative: killed by that signal) and CPU seconds (None when
    the executor cannot tell)."""

    rc: int
    cpu: float | None = None


class Executor(Protocol):
    """What the scheduler needs of an executor."""

    @property
    def slots(self) -> int:
        """Steps running at once at most."""
        ...

    #: Seconds between two looks at the running steps.
    poll_interval: float

    def start(self, batch: Sequence[tuple[Sequence[str], Path]], gpus: Sequence[bool] | None = None) -> list[Any]:
        """Start every ``(probe args, log file)`` of ``batch``; a handle for each. ``gpus[i]``
        False: step i uses no GPU (none is given to it); default: every step may."""
        ...

    def poll(self, handle: Any) -> Finished | None:
        """The step's end, or None while it runs."""
        ...

    def cancel(self, handle: Any) -> None:
        """Stop the step (a best effort)."""
        ...

    def describe(self) -> str:
        """One line for messages: where the steps run."""
        ...

    def close(self) -> None:
        """Let go of what the executor holds: local steps still running are stopped (with the
        fork server); Slurm jobs go on (they are Slurm's)."""
        ...


def _visible_gpus() -> list[str]:
    """The GPUs this process may use, as ``CUDA_VISIBLE_DEVICES`` entries (none without CUDA).

    Counted without importing torch (about a second and 270 MB in the scheduler's process): by
    NVIDIA's management library, as ``torch.cuda.device_count()`` counts them; torch is asked only
    where that library is missing but a GPU device file exists (ROCm, a broken NVIDIA setup) or
    on Windows.
    """
    given = os.environ.get("CUDA_VISIBLE_DEVICES")
    if given is not None:
        return [g.strip() for g in given.split(",") if g.strip() and g.strip() != "-1"]
    count = _nvml_device_count()
    if count is not None:
        return [str(i) for i in range(count)]
    if sys.platform != "win32" and not any(Path(p).exists() for p in ("/dev/nvidiactl", "/dev/kfd")):
        return []  # no GPU driver on this machine: nothing torch could use
    try:
        import torch

        return [str(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
    except Exception:  # torch without a working CUDA runtime: no GPUs
        return []


def _nvml_device_count(library: str = "libnvidia-ml.so.1") -> int | None:
    """NVML's device count; None where the library cannot be loaded or initialised."""
    import ctypes

    try:
        nvml = ctypes.CDLL(library)
        if nvml.nvmlInit_v2() != 0:  # 0 = NVML_SUCCESS
            return None
    except (OSError, AttributeError):
        return None
    try:
        count = ctypes.c_uint(0)
        return int(count.value) if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0 else None
    finally:
        nvml.nvmlShutdown()


def _die_with_parent() -> None:
    """In a spawned step, before it runs: SIGTERM it when its parent (the driver) dies (Linux)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass(eq=False)
class _Process:
    proc: subprocess.Popen[bytes]
    log: Any
    gpu: str | None


@dataclass
class _Forked:
    server: ForkServer
    pid: int
    gpu: str | None


@dataclass
class LocalExecutor:
    """Steps as processes on this machine (module docstring).

    Parameters
    ----------
    jobs : int, optional
        Steps at once (default: one per GPU, else 1).
    threads : int, optional
        CPU threads of each step (``OMP_NUM_THREADS`` and ``torch.set_num_threads``; default:
        torch's own choice).
    python : sequence of str
        The command that runs ``probe`` (its arguments follow), with ``start_method="spawn"``.
    gpus : sequence of str, optional
        GPU ids to hand out, one per running step (default: the visible ones).
    start_method : str
        ``"forkserver"`` or ``"spawn"`` (module docstring; default: forkserver on Linux).
    entry : str
        ``"module:function"`` a forked step calls (``sys.argv`` is ``["probe", *args]``).
    preload : sequence of str
        Modules the fork server imports once (default: :data:`vlprobe.launch.forkserver.PRELOAD`).
    """

    jobs: int | None = None
    threads: int | None = None
    python: Sequence[str] = (sys.executable, "-m", "vlprobe")
    gpus: Sequence[str] | None = None
    poll_interval: float = 0.05
    env: Mapping[str, str] = field(default_factory=dict)
    start_method: str = field(default_factory=default_start_method)
    entry: str = "vlprobe.cli:main"
    preload: Sequence[str] = PRELOAD

    def __post_init__(self) -> None:
        if self.start_method not in START_METHODS:
            raise InputError(f"start-method must be {' or '.join(START_METHODS)}, got {self.start_method!r}")
        self._gpus = list(self.gpus) if self.gpus is not None else _visible_gpus()
        if self.jobs is None:
            self.jobs = max(1, len(self._gpus))
        check_positive_int(self.jobs, "jobs")
        if self.threads is not None:
            check_positive_int(self.threads, "threads")
        self._free = list(self._gpus)
        self._server: ForkServer | None = None
        self._spawned: set[_Process] = set()

    @property
    def slots(self) -> int:
        assert self.jobs is not None
        return self.jobs

    def describe(self) -> str:
        gpus = f", GPUs {','.join(self._gpus)}" if self._gpus else ""
        how = "forks of a fork server" if self.start_method == "forkserver" else "processes"
        return f"local {how} ({self.jobs} at once{gpus})"

    def start(self, batch: Sequence[tuple[Sequence[str], Path]], gpus: Sequence[bool] | None = None) -> list[Any]:
        wants = list(gpus) if gpus is not None else [True] * len(batch)
        return [self._start(args, log, want) for (args, log), want in zip(batch, wants, strict=True)]

    def _env(self) -> dict[str, str]:
        """A step's environment, less its GPU."""
        env = launcher_free(os.environ)
        env.update(self.env)
        if self.threads is not None:
            env["OMP_NUM_THREADS"] = str(self.threads)
        return env

    def _start(self, args: Sequence[str], log: Path, wants_gpu: bool = True) -> _Process | _Forked:
        env = self._env()
        gpu = self._free.pop(0) if self._free and wants_gpu else None
        if gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = gpu
        elif not wants_gpu and self._gpus:
            env["CUDA_VISIBLE_DEVICES"] = ""  # a step that uses none sees none
        try:
            if self.start_method == "forkserver":
                return self._fork(args, log, env, gpu)
            fh = open(log, "ab")  # closed when the step ends (poll)
            try:
                proc = subprocess.Popen([*self.python, *args], stdout=fh, stderr=subprocess.STDOUT, env=env,
                                        stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
            except BaseException:
                fh.close()
                raise
            handle = _Process(proc, fh, gpu)
            self._spawned.add(handle)
            return handle
        except BaseException:
            if gpu is not None:
                self._free.append(gpu)
            raise

    def _fork(self, args: Sequence[str], log: Path, env: dict[str, str], gpu: str | None) -> _Forked:
        for attempt in (1, 2):  # a server that is gone (killed from outside) is started again, once
            if self._server is None or not self._server.alive:
                self._server = ForkServer(self._env(), entry=self.entry, preload=self.preload)
            try:
                return _Forked(self._server, self._server.start(args, log, env, self.threads), gpu)
            except ServerEnded:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def poll(self, handle: _Process | _Forked) -> Finished | None:
        if isinstance(handle, _Forked):
            ended = handle.server.ended(handle.pid)
            if ended is None:
                return None
            finished = Finished(ended.rc, ended.cpu)
        else:
            pid, status, usage = os.wait4(handle.proc.pid, os.WNOHANG)
            if pid == 0:
                return None
            rc = os.waitstatus_to_exitcode(status)
            handle.proc.returncode = rc  # reaped here: Popen must not wait for it again
            handle.log.close()
            self._spawned.discard(handle)
            finished = Finished(rc, usage.ru_utime + usage.ru_stime)
        if handle.gpu is not None:
            self._free.append(handle.gpu)
        return finished

    def cancel(self, handle: _Process | _Forked) -> None:
        if isinstance(handle, _Forked):
            handle.server.kill(handle.pid, signal.SIGTERM)
            return
        with contextlib.suppress(ProcessLookupError):
            handle.proc.terminate()

    def close(self) -> None:
        """Stop the steps still running (SIGTERM, SIGKILL after
        :data:`~vlprobe.launch.forkserver.GRACE` seconds; they resume on the next run) and the
        fork server. A driver that dies without closing (SIGKILL) takes them along all the same: the
        server sees its connection close, a spawned step gets SIGTERM when its parent dies."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for handle in list(self._spawned):
            with contextlib.suppress(ProcessLookupError):
                handle.proc.terminate()
        deadline = time.monotonic() + GRACE
        for handle in list(self._spawned):
            try:
                handle.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                handle.proc.kill()
                handle.proc.wait()
            handle.log.close()
            self._spawned.discard(handle)

    def __enter__(self) -> LocalExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def local_executor(*, start_method: str | None = None, **kwargs: Any) -> LocalExecutor:
    """A :class:`LocalExecutor` of ``kwargs``, started by ``start_method`` (None: its default)."""
    return LocalExecutor(**kwargs) if start_method is None else LocalExecutor(start_method=start_method, **kwargs)


def run_probe(args: Sequence[str]) -> int:
    """Run ``python -m vlprobe ARGS`` in a child process of this one and return its exit code (the
    function a submitit job runs; the job's environment, Slurm's variables included, is kept)."""
    env = dict(os.environ)
    return subprocess.run([sys.executable, "-m", "vlprobe", *args], env=env, check=False).returncode


@dataclass
class SubmititExecutor:
    """Steps as submitit jobs (module docstring).

    Parameters
    ----------
    folder : Path
        submitit's folder (job scripts, pickles, the jobs' logs).
    cluster : str
        ``"slurm"``, or ``"local"`` (submitit's local processes: the same jobs without Slurm).
    parameters : dict
        submitit's ``update_parameters`` (``slurm_partition``, ``gpus_per_node``, ``timeout_min``,
        ``mem_gb``, ``cpus_per_task``, ``slurm_array_parallelism``, ...).
    max_jobs : int
        Jobs queued or running at once.
    """

    folder: Path
    cluster: str = "slurm"
    parameters: Mapping[str, Any] = field(default_factory=dict)
    max_jobs: int = 256
    poll_interval: float = 5.0

    def __post_init__(self) -> None:
        if self.cluster not in ("slurm", "local"):
            raise InputError(f"cluster must be slurm or local, got {self.cluster!r}")
        self._executor = submitit_executor(self.folder, self.cluster, self.parameters)
        if self.cluster == "local":
            self.poll_interval = min(self.poll_interval, 0.2)
        self._cpu: Any = None

    @property
    def slots(self) -> int:
        return self.max_jobs

    def describe(self) -> str:
        return f"submitit {self.cluster} jobs (logs in {self.folder})"

    def start(self, batch: Sequence[tuple[Sequence[str], Path]], gpus: Sequence[bool] | None = None) -> list[Any]:
        wants = list(gpus) if gpus is not None else [True] * len(batch)
        jobs: list[Any] = [None] * len(batch)
        for want in (True, False):  # one sbatch --array for the steps that start together and want the same
            mine = [i for i, w in enumerate(wants) if w == want]
            if not mine:
                continue
            executor = self._executor if want else self._cpu_executor()
            with executor.batch():
                submitted = [executor.submit(run_probe, list(batch[i][0])) for i in mine]
            for i, job in zip(mine, submitted, strict=True):
                jobs[i] = job
        for job, (_, log) in zip(jobs, batch, strict=True):
            with open(log, "a", encoding="utf-8") as fh:
                fh.write(f"submitit job {job.job_id}; its output: {job.paths.stdout} and {job.paths.stderr}\n")
        return jobs

    def _cpu_executor(self) -> Any:
        """An executor of the same jobs with no GPU (for the steps that use none: merges,
        collect, reports), made once."""
        if self._cpu is None:
            self._cpu = submitit_executor(self.folder, self.cluster, {**dict(self.parameters), "gpus_per_node": 0})
        return self._cpu

    def poll(self, handle: Any) -> Finished | None:
        if not handle.done():
            return None
        try:
            rc = handle.result()
        except Exception:  # the job died before run_probe returned (killed, preempted, timed out)
            return Finished(-9)
        return Finished(int(rc))

    def cancel(self, handle: Any) -> None:
        with contextlib.suppress(Exception):
            handle.cancel(check=False)

    def close(self) -> None:
        """Nothing to let go of (the jobs are Slurm's)."""


def submitit_executor(folder: Path, cluster: str, parameters: Mapping[str, Any]) -> Any:
    """submitit's executor of ``folder`` on ``cluster`` (``slurm`` or ``local``) with the job
    ``parameters``; InputError in one line without submitit, without Slurm, or for parameters
    submitit refuses."""
    try:
        import submitit
    except ImportError:
        raise InputError(
            "launcher: the Slurm launcher needs submitit; install it with `pip install 'vlprobe[slurm]'`"
        ) from None
    try:
        executor = submitit.AutoExecutor(folder=str(folder), cluster=cluster)
    except RuntimeError as exc:  # submitit's "Could not detect srun": not on a Slurm machine
        raise InputError(
            f"launcher: no Slurm here ({exc}); run it where sbatch and srun are, or try the same jobs here "
            "with --cluster local"
        ) from None
    try:
        executor.update_parameters(**dict(parameters))
    except (TypeError, ValueError, NameError) as exc:
        raise InputError(f"launcher: submitit refused the job parameters ({' '.join(str(exc).split())[:300]})") from None
    return executor


def slurm_parameters(
    *, name: str, cluster: str = "slurm", partition: str | None = None, gpus_per_task: int = 1,
    cpus_per_task: int | None = None, mem_gb: int | None = None, timeout_min: int = 240, parallel: int | None = None,
    account: str | None = None, qos: str | None = None,
) -> dict[str, Any]:
    """submitit's parameters of one job per step (one task on one node with ``gpus_per_task``
    GPUs), as ``probe launch slurm`` and ``probe sweep --launcher slurm`` take them; on submitit's
    ``local`` cluster the Slurm-only ones (partition, array parallelism, account, QOS) are left out."""
    if gpus_per_task < 0:
        raise InputError(f"gpus-per-task must be 0 or more, got {gpus_per_task}")
    check_positive_int(timeout_min, "timeout-min")
    params: dict[str, Any] = {"timeout_min": timeout_min, "gpus_per_node": gpus_per_task, "tasks_per_node": 1,
                              "nodes": 1, "name": name}
    for key, value in (("cpus_per_task", cpus_per_task), ("mem_gb", mem_gb), ("parallel", parallel)):
        if value is not None:
            check_positive_int(value, key.replace("_", "-"))
    if cpus_per_task is not None:
        params["cpus_per_task"] = cpus_per_task
    if mem_gb is not None:
        params["mem_gb"] = mem_gb
    if cluster != "local":  # submitit's local cluster takes no Slurm parameters
        optional = {"slurm_partition": partition, "slurm_array_parallelism": parallel, "slurm_account": account,
                    "slurm_qos": qos}
        params.update({k: v for k, v in optional.items() if v is not None})
    return params


def wait_all(executor: Executor, handles: Sequence[Any]) -> list[Finished]:
    """Every handle's end, waiting as long as it takes (for tests and simple callers)."""
    out: list[Finished | None] = [None] * len(handles)
    while any(o is None for o in out):
        for i, h in enumerate(handles):
            if out[i] is None:
                out[i] = executor.poll(h)
        time.sleep(executor.poll_interval)
    return [o for o in out if o is not None]
