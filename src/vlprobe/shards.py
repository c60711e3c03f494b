"""Which shard of a run this process is, read from the launcher's environment (``--shard auto``).

A sharded command (``probe extract``, ``probe regions extract``, ``probe eval``) runs block K of
N of its rows (eval: of its items) into its own file; the N files are independent (no
collectives, nothing shared while they run) and ``probe cache merge`` / ``probe regions merge``
/ ``probe eval ... --merge-shards`` join them. ``--shard K/N`` names the block;
``--shard auto`` reads it from the environment the job was started in, so that the same command
line runs under any launcher:

Slurm job arrays (``sbatch --array=0-7``)
    ``SLURM_ARRAY_TASK_ID`` with ``SLURM_ARRAY_TASK_MIN``, ``_MAX``, ``_STEP`` and ``_COUNT``:
    the array task's place in the range (``--array=1-8`` and ``--array=0-14:2`` are 8 shards
    too). An index list that is no range (``--array=1,4,9``, ``--array=0-3:2,5``) is refused by
    every task, before any shard runs.
Processes of one job, the innermost launcher first:
    * torchrun and ``accelerate launch`` on several GPUs: ``RANK`` / ``WORLD_SIZE`` (local rank
      ``LOCAL_RANK``);
    * MPI launchers (``mpirun``, ``accelerate launch`` on CPU nodes): ``OMPI_COMM_WORLD_RANK`` /
      ``_SIZE`` (Open MPI), ``PMI_RANK`` / ``PMI_SIZE`` (MPICH, Intel MPI, ``srun --mpi=pmi2``),
      ``MV2_COMM_WORLD_RANK`` / ``_SIZE`` (MVAPICH), ``PMIX_RANK`` of an ``srun --mpi=pmix``
      step. MPI's rank wins over Slurm's: ``mpirun`` inside an allocation (Open MPI >= 3, Intel
      MPI) starts its ranks through an ``srun`` step of one daemon per node, whose
      ``SLURM_PROCID`` numbers daemons, not ranks;
    * the tasks of an ``srun`` step: ``SLURM_PROCID`` / ``SLURM_STEP_NUM_TASKS`` (or
      ``SLURM_NTASKS``), local rank ``SLURM_LOCALID``;
    * one process: a Slurm batch script of one task, or ``accelerate launch`` of one process
      (``ACCELERATE_USE_CPU`` is set, no rank).

Slurm sets ``SLURM_STEP_ID`` in the batch script too: its special steps (the batch script,
extern and interactive steps) carry ids Slurm prints as negative numbers (``-5`` for the batch
script; older releases printed ``4294967291``), which are no ``srun`` step.

The two levels compose: task ``a`` of an array of ``A`` jobs whose process ``p`` is one of
``P`` is shard ``a * P + p`` of ``A * P`` (``sbatch --array=0-3`` of scripts that run
``torchrun --nproc-per-node 2`` makes 8 shards). Environments that contradict each other are
refused in one line rather than guessed at: a Slurm batch script of several tasks that did not
start them with ``srun`` or another launcher (every task would be shard 0), several ``srun`` or
MPI copies of a torchrun whose world is one copy's processes (each copy would run the same
shards), an ``srun`` step of more tasks than the MPI world each started (``srun -n 4 mpirun
-np 1``). ``--shard auto`` without any of these environments is refused too.

A run under a launcher also records the job ids it finds (``SLURM_JOB_ID``,
``SLURM_ARRAY_JOB_ID``, ``TORCHELASTIC_RUN_ID``, ...) in its output, and ``--device auto`` picks
the process's GPU from its local rank (:func:`auto_device`).

``--shard auto`` writes ``OUT`` as ``<stem>.shard-K-of-N<suffix>`` beside it
(:func:`shard_path`), so that every process of the run can be given the same ``--out``;
:func:`find_shard_files` lists a run's shard files for the merge (``probe cache merge --out
OUT`` without shard files). A run that is one process (N = 1) writes ``OUT`` itself.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from vlprobe.validation import InputError

__all__ = [
    "JOB_ID_VARIABLES",
    "LAUNCHER_PREFIXES",
    "LAUNCHER_VARIABLES",
    "Placement",
    "auto_device",
    "detect_placement",
    "files_to_merge",
    "find_shard_files",
    "job_entry",
    "launcher_free",
    "parse_shard",
    "resolve_shard",
    "shard_block",
    "shard_path",
]

#: Variables recorded as the job ids of a run (those that are set), in this order.
JOB_ID_VARIABLES = (
    "SLURM_CLUSTER_NAME", "SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_STEP_ID",
    "SLURM_PROCID", "SLURM_RESTART_COUNT", "TORCHELASTIC_RUN_ID", "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
    "PMIX_RANK",
)
# The process-level launchers: name, rank, size, local rank variables (first match wins).
_MPI = (
    ("Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ("MVAPICH", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_LOCAL_RANK"),
    ("PMI", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
)
# Step ids from here up are Slurm's special steps printed unsigned (batch script 0xfffffffb, ...).
_SLURM_SPECIAL_STEPS = 0xFFFFFFF0
#: What launchers set: variables of these names, or starting with these prefixes (a process
#: that starts others as shards of its own clears them first: :func:`launcher_free`).
LAUNCHER_VARIABLES = (
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "TORCHELASTIC_RUN_ID",
    "ACCELERATE_USE_CPU", "MPI_LOCALRANKID",
)
LAUNCHER_PREFIXES = ("SLURM_", "OMPI_COMM_WORLD_", "PMI_", "PMIX_", "MV2_COMM_WORLD_")
_SHARD_NAME = re.compile(r"^(?P<stem>.+)\.shard-(?P<k>\d+)-of-(?P<n>\d+)$")


def shard_block(rows: int, k: int, n: int) -> tuple[int, int]:
    """The rows ``[start, stop)`` shard K of N runs: the K-th of N contiguous blocks of ``rows``
    (sizes differ by one at most; a block is empty when N > rows)."""
    return k * rows // n, (k + 1) * rows // n


def parse_shard(spec: str) -> tuple[int, int]:
    """``"K/N"`` -> (K, N) with 0 <= K < N."""
    try:
        k_text, n_text = spec.split("/")
        k, n = int(k_text), int(n_text)
    except ValueError:
        raise InputError(f"shard must be K/N (e.g. 0/4) or auto, got {spec!r}") from None
    if n < 1 or not 0 <= k < n:
        raise InputError(f"shard must satisfy 0 <= K < N, got {spec!r}")
    return k, n


@dataclass(frozen=True)
class Placement:
    """Where this process stands in a launched run.

    Attributes
    ----------
    k, n : int
        The shard (0 <= k < n) the environment gives.
    source : str
        How it was read, for messages and records (``"Slurm array task 3 of 8 (SLURM_ARRAY_TASK_ID=3)"``).
    local_rank : int or None
        The process's rank on its machine (picks its GPU), None when the launcher gives none.
    cpu_only : bool
        The launcher asked for the CPU (``accelerate launch --cpu``).
    job_ids : dict of str to str
        The launcher's job ids that are set (:data:`JOB_ID_VARIABLES`).
    """

    k: int
    n: int
    source: str
    local_rank: int | None = None
    cpu_only: bool = False
    job_ids: dict[str, str] = field(default_factory=dict)

    @property
    def shard(self) -> str:
        return f"{self.k}/{self.n}"


def _int(env: Mapping[str, str], name: str) -> int | None:
    """The integer variable ``name`` (None when unset or empty); InputError when it is no integer."""
    raw = env.get(name, "").strip()
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        raise InputError(f"shard: the environment's {name}={env[name]!r} is no integer") from None


def _rank(env: Mapping[str, str], rank: str, size: str, who: str) -> tuple[int, int] | None:
    """(rank, size) from the pair of variables, both or neither set; InputError when they disagree."""
    r, s = _int(env, rank), _int(env, size)
    if r is None and s is None:
        return None
    if r is None or s is None:
        given, missing = (rank, size) if r is not None else (size, rank)
        raise InputError(f"shard: {who} sets {given} but not {missing}; both are needed for --shard auto")
    if s < 1 or not 0 <= r < s:
        raise InputError(f"shard: {who} gives rank {rank}={r} outside 0..{size}-1 ({size}={s})")
    return r, s


def _array(env: Mapping[str, str]) -> tuple[int, int, str] | None:
    """(index, count, description) of a Slurm array task; None outside an array.

    Slurm sets ``SLURM_ARRAY_TASK_MIN``, ``_MAX`` and ``_COUNT`` from the array's indices and
    ``_STEP`` from the number after the first ``:`` of ``--array`` (1 without one), so that every
    task of ``--array=0-3:2,5`` (indices 0, 2, 5) reads min 0, max 5, step 2, count 3. The indices
    are a range of shards only when min, max and step account for every one of them: ``(max - min)``
    a multiple of the step and ``count`` of its places. Every task sees the same four numbers, so a
    list that is no range is refused by every task, before any shard runs.
    """
    task = _int(env, "SLURM_ARRAY_TASK_ID")
    if task is None:
        return None
    lo = _int(env, "SLURM_ARRAY_TASK_MIN")
    hi = _int(env, "SLURM_ARRAY_TASK_MAX")
    step = _int(env, "SLURM_ARRAY_TASK_STEP") or 1
    count = _int(env, "SLURM_ARRAY_TASK_COUNT")
    if lo is None:
        raise InputError("shard: SLURM_ARRAY_TASK_ID is set without SLURM_ARRAY_TASK_MIN (not a Slurm array task?)")
    if count is None:
        if hi is None:
            raise InputError("shard: a Slurm array task needs SLURM_ARRAY_TASK_COUNT or SLURM_ARRAY_TASK_MAX")
        count = (hi - lo) // step + 1 if step > 0 else 0
    whole = step > 0 and (hi is None or ((hi - lo) % step == 0 and (hi - lo) // step + 1 == count))
    index, rest = divmod(task - lo, step) if step > 0 else (-1, 0)
    if not whole or rest or not 0 <= index < count:
        raise InputError(
            f"shard: Slurm array task {task} is no place in a range of tasks (min {lo}, max {hi}, step {step}, "
            f"count {count}); --shard auto needs --array=A-B or A-B:S, not a list (--array=1,4,9 or 0-3:2,5)"
        )
    return index, count, f"Slurm array task {index} of {count} (SLURM_ARRAY_TASK_ID={task})"


def _in_srun_step(env: Mapping[str, str]) -> bool:
    """Whether this process is a task of an ``srun`` step, not the batch script (nor the extern or
    interactive step) of its job.

    Slurm sets ``SLURM_STEP_ID`` (and the old ``SLURM_STEPID``) for every step's tasks, the batch
    script included: its special steps carry the ids ``SLURM_BATCH_SCRIPT`` (0xfffffffb),
    ``SLURM_EXTERN_CONT`` (0xfffffffc) and ``SLURM_INTERACTIVE_STEP`` (0xfffffffa), which it
    prints as signed numbers (``-5``, ``-4``, ``-6``); older releases printed them unsigned, or the
    words ``batch`` and ``extern``. Only a number from 0 up is an ``srun`` step.
    """
    raw = (env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID") or "").strip()
    if not raw or raw.lower() in ("batch", "extern", "interactive"):
        return False
    try:
        step = int(raw)
    except ValueError:
        raise InputError(f"shard: the environment's SLURM_STEP_ID={raw!r} is no step id") from None
    return 0 <= step < _SLURM_SPECIAL_STEPS


def _mpi(env: Mapping[str, str], step_tasks: int | None) -> tuple[str, int, int, str] | None:
    """(launcher, rank, size, local rank variable) of an MPI launcher's process; None without one.

    ``PMIX_RANK`` alone (``srun --mpi=pmix``; Open MPI 5 sets ``OMPI_COMM_WORLD_*`` besides it)
    carries no size: the ``srun`` step's task count is its world.
    """
    for who, r, s, local in _MPI:
        got = _rank(env, r, s, who)
        if got is not None:
            return who, got[0], got[1], local
    rank = _int(env, "PMIX_RANK")
    if rank is None:
        return None
    if step_tasks is None:
        raise InputError("shard: PMIX_RANK is set without OMPI_COMM_WORLD_SIZE or an srun step's task count; "
                         "give --shard K/N")
    if not 0 <= rank < step_tasks:
        raise InputError(f"shard: PMIx rank PMIX_RANK={rank} is outside the srun step's 0..{step_tasks - 1}")
    return "PMIx", rank, step_tasks, ""


def _processes(env: Mapping[str, str]) -> tuple[int, int, int | None, str] | None:
    """(rank, size, local rank, description) of this process among the job's; None when no
    launcher of processes is seen. The innermost launcher ranks the process: torchrun, then MPI,
    then the tasks of an ``srun`` step, then a Slurm job's batch script (one process)."""
    in_step = _in_srun_step(env)
    slurm_tasks = _int(env, "SLURM_STEP_NUM_TASKS") or _int(env, "SLURM_NTASKS")
    step_tasks = slurm_tasks if in_step else None
    mpi = _mpi(env, step_tasks)
    torch = _rank(env, "RANK", "WORLD_SIZE", "torchrun")
    if torch is not None:
        rank, size = torch
        local_size = _int(env, "LOCAL_WORLD_SIZE")
        # copies of torchrun started by an outer launcher must share one world
        copies, by = (mpi[2], mpi[0]) if mpi else ((step_tasks, "srun") if step_tasks else (1, ""))
        if copies > 1 and (local_size == size or size < copies):
            raise InputError(
                f"shard: {by} started {copies} copies of torchrun, but torchrun's world (WORLD_SIZE={size}) is one "
                "copy's processes: every copy would run the same shards. Give torchrun --nnodes and a "
                "rendezvous so that RANK spans the job, or start one copy"
            )
        return rank, size, _int(env, "LOCAL_RANK"), f"torchrun rank {rank} of {size} (RANK, WORLD_SIZE)"
    if mpi is not None:
        who, rank, size, local_var = mpi
        srun_ranked = step_tasks is not None and (rank, size) == (_int(env, "SLURM_PROCID"), step_tasks)
        if step_tasks is not None and size < step_tasks:
            # srun -n 4 mpirun -np 1 ...: each srun task started a world of its own
            raise InputError(
                f"shard: srun started {step_tasks} tasks, each an MPI world of {size} ({who} rank {rank}): every "
                "task would run the same shards. Start mpirun once (in the batch script), or give srun --mpi the ranks"
            )
        # mpirun inside an allocation (Open MPI >= 3, Intel MPI) starts its ranks through an srun step of
        # its daemons, one per node: there SLURM_PROCID numbers daemons, and MPI's own rank is the process's
        local = _int(env, local_var) if local_var else None
        if local is None and srun_ranked:
            local = _int(env, "SLURM_LOCALID")
        return rank, size, local, f"{who} rank {rank} of {size}"
    if in_step:
        rank_ = _int(env, "SLURM_PROCID")
        if rank_ is None or slurm_tasks is None:
            raise InputError("shard: an srun step (SLURM_STEP_ID is set) without SLURM_PROCID and SLURM_NTASKS")
        rank, size = rank_, slurm_tasks
        if size < 1 or not 0 <= rank < size:
            raise InputError(f"shard: srun gives SLURM_PROCID={rank} outside 0..{size - 1}")
        return rank, size, _int(env, "SLURM_LOCALID"), f"srun task {rank} of {size} (SLURM_PROCID)"
    if env.get("SLURM_JOB_ID", "").strip():
        batch_tasks = _int(env, "SLURM_NTASKS")
        if batch_tasks is not None and batch_tasks > 1:
            raise InputError(
                f"shard: this is the batch script of a Slurm job of SLURM_NTASKS={batch_tasks} tasks, which is one "
                "process: start the command with srun to run its tasks (or ask for one task)"
            )
        return 0, 1, _int(env, "SLURM_LOCALID") or 0, "a Slurm job of one task"
    if "ACCELERATE_USE_CPU" in env:
        return 0, 1, None, "accelerate launch, one process"
    return None


def detect_placement(env: Mapping[str, str] | None = None) -> Placement | None:
    """This process's shard from the launcher's environment (see the module docstring); None
    when no launcher is seen.

    Raises
    ------
    InputError
        The environment is contradictory or malformed (the message names the variables).
    """
    env = os.environ if env is None else env
    array = _array(env)
    procs = _processes(env)
    if array is None and procs is None:
        return None
    a, a_n, a_said = array if array is not None else (0, 1, "")
    p, p_n, local, p_said = procs if procs is not None else (0, 1, None, "")
    source = " x ".join(s for s in (a_said, p_said if p_n > 1 or not a_said else "") if s)
    cpu = env.get("ACCELERATE_USE_CPU", "").strip().lower() in ("1", "true", "yes")
    ids = {k: env[k].strip() for k in JOB_ID_VARIABLES if env.get(k, "").strip()}
    return Placement(a * p_n + p, a_n * p_n, source, local, cpu, ids)


def resolve_shard(spec: str, env: Mapping[str, str] | None = None) -> tuple[int, int, Placement | None]:
    """``--shard``: ``"K/N"`` or ``"auto"`` -> (K, N, the placement the environment gives).

    With ``K/N`` the placement (None without a launcher) only records job ids and picks the
    device; with ``auto`` it gives K and N, and its absence is an InputError.
    """
    text = str(spec).strip()
    if text.lower() != "auto":
        k, n = parse_shard(text)
        try:
            placement = detect_placement(env)
        except InputError:  # the shard is given: a launcher's odd environment is no reason to refuse
            placement = None
        return k, n, placement
    placement = detect_placement(env)
    if placement is None:
        raise InputError(
            "shard: auto reads the shard from a launcher (Slurm: SLURM_ARRAY_TASK_ID or SLURM_PROCID; torchrun "
            "and accelerate: RANK and WORLD_SIZE; MPI: OMPI_COMM_WORLD_RANK or PMI_RANK), and none is set here; "
            "give --shard K/N"
        )
    return placement.k, placement.n, placement


def launcher_free(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without the variables launchers set (:data:`LAUNCHER_VARIABLES`), for a process
    placed by its caller rather than by the launcher that started the caller."""
    return {k: v for k, v in env.items() if k not in LAUNCHER_VARIABLES and not k.startswith(LAUNCHER_PREFIXES)}


def job_entry(k: int, n: int, placement: Placement) -> dict[str, str]:
    """What an output records of a run under a launcher (its ``job_ids`` entry): the shard, how
    it was placed and the launcher's job ids."""
    return {"shard": f"{k}/{n}", "source": placement.source, **placement.job_ids}


def _stem_suffix(p: Path, suffix: str | None) -> tuple[str, str]:
    """``p``'s name split into stem and suffix: ``suffix`` when given (``.scores.jsonl``, which
    ``Path.suffix`` would cut at its last dot), else ``Path``'s own."""
    if suffix is None:
        return p.stem, p.suffix
    if not p.name.endswith(suffix) or p.name == suffix:
        raise ValueError(f"{p.name!r} does not end in {suffix!r}")
    return p.name[: -len(suffix)], suffix


def shard_path(out: str | os.PathLike[str], k: int, n: int, *, suffix: str | None = None) -> Path:
    """The file shard K of N writes for ``--out OUT`` under ``--shard auto``:
    ``<stem>.shard-K-of-N<suffix>`` beside OUT (OUT itself when N = 1). ``suffix``: OUT's
    suffix when it has more than one dot (``.scores.jsonl``); default ``Path(OUT).suffix``."""
    p = Path(out)
    if n == 1:
        return p
    stem, ext = _stem_suffix(p, suffix)
    return p.with_name(f"{stem}.shard-{k}-of-{n}{ext}")


def find_shard_files(out: str | os.PathLike[str], *, suffix: str | None = None) -> list[Path]:
    """The shard files :func:`shard_path` names for ``out`` (and ``suffix``) that exist, in shard order.

    Raises
    ------
    InputError
        None exist, or they are of different shard counts (two runs' files side by side).
    """
    p = Path(out)
    stem, ext = _stem_suffix(p, suffix)
    found: dict[int, dict[int, Path]] = {}
    for q, k, n in _shard_names(p, suffix):
        found.setdefault(n, {})[k] = q
    pattern = f"{stem}.shard-K-of-N{ext}"
    if not found:
        raise InputError(f"shards: no shard files {pattern} beside {str(p)!r}; give the shard files to merge")
    if len(found) > 1:
        counts = ", ".join(f"{n} ({len(v)} files)" for n, v in sorted(found.items()))
        raise InputError(f"shards: files {pattern} of different shard counts N beside {str(p)!r}: {counts}; "
                         "give the shard files to merge")
    ((_n, files),) = found.items()
    return [files[k] for k in sorted(files)]


def files_to_merge(
    out: str | os.PathLike[str], given: Sequence[str | os.PathLike[str]] | None,
    state: Callable[[Path, str], str], *, suffix: str | None = None,
) -> list[Path] | None:
    """What ``probe cache merge`` / ``probe regions merge`` join into ``out``: the ``given`` shard
    files, else those :func:`find_shard_files` finds; None when there are none because ``out`` is a
    complete run of one process already (``--shard auto`` under one process writes OUT itself),
    which ``state(out, "0/1")`` (``""``: complete) tells.

    Raises
    ------
    InputError
        From :func:`find_shard_files`, when ``out`` is no complete run either.
    """
    if given:
        return [Path(g) for g in given]
    try:
        return find_shard_files(out, suffix=suffix)
    except InputError:
        if not any(_shard_names(Path(out), suffix)) and os.path.isfile(out) and not state(Path(out), "0/1"):
            return None
        raise


def _shard_names(p: Path, suffix: str | None) -> Iterator[tuple[Path, int, int]]:
    """``(file, K, N)`` of each shard file ``<stem>.shard-K-of-N<suffix>`` beside ``p``."""
    stem, ext = _stem_suffix(p, suffix)
    if p.parent.is_dir():
        for q in p.parent.iterdir():
            m = _SHARD_NAME.match(q.name[: len(q.name) - len(ext)] if ext and q.name.endswith(ext) else "")
            if m and m["stem"] == stem:
                yield q, int(m["k"]), int(m["n"])


def auto_device(device: str, placement: Placement | None) -> str:
    """``--device`` for a launched process: ``auto`` becomes ``cpu`` when the launcher asked for
    the CPU, else the GPU of the process's local rank when CUDA is there (``cuda:<local rank>``;
    ``cuda:0`` when the process sees one GPU, as under Slurm's per-task GPU binding). Anything
    else, or no placement or local rank, is returned as given.

    Raises
    ------
    InputError
        The local rank has no GPU of its own (more processes on the machine than visible GPUs).
    """
    if str(device).strip().lower() != "auto" or placement is None:
        return device
    if placement.cpu_only:
        return "cpu"
    if placement.local_rank is None:
        return device
    import torch

    if not torch.cuda.is_available():
        return "cpu"
    count = torch.cuda.device_count()
    if count == 1:
        return "cuda:0"
    if placement.local_rank >= count:
        raise InputError(
            f"device: auto under {placement.source} is local rank {placement.local_rank}, but this process sees "
            f"{count} GPUs; start at most {count} processes per machine or give --device"
        )
    return f"cuda:{placement.local_rank}"
