"""``probe launch local|slurm -- probe extract ... --out all.h5``: one sharded run, start to merge.

The command (``probe extract``, ``probe regions extract`` or ``probe eval BENCHMARK --model
...``, without ``--shard``) runs as N shards, each a step of :mod:`vlprobe.launch.steps` with
``--shard K/N`` (extract: ``--out <stem>.shard-K-of-N.h5``, the names ``--shard auto`` gives, so
``probe cache merge --out`` finds them too; eval: the same ``--out`` folder, each shard writing
``OUT/<benchmark>/<run>.shard-K-of-N.scores.jsonl``), on an executor
(:mod:`vlprobe.launch.executors`: local processes, or a Slurm job array through submitit). A
shard is done when its file is complete: a cache's or region file's done masks full, an eval
shard's score file there (it is written whole at the shard's end). A shard that died (killed,
preempted, out of memory) is started again up to ``retries`` times (an extraction resumes from
its done mask, an eval shard scores its block again); a rerun of the whole launch skips the
shards already complete. Once every shard is complete they are merged (``probe cache merge``,
``probe regions merge``, ``probe eval ... --merge-shards``). The logs and the record of finished
shards are in ``<out stem>.launch/`` beside ``--out`` (eval: ``OUT/<benchmark>/<run>.launch/``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlprobe.launch.executors import Executor
from vlprobe.launch.steps import Step, run_steps
from vlprobe.shards import shard_path
from vlprobe.validation import InputError, check_positive_int

__all__ = ["ShardedCommand", "launch_local", "launch_shards", "launch_slurm"]


@dataclass(frozen=True)
class ShardedCommand:
    """A ``probe`` command that runs in shards.

    Attributes
    ----------
    kind : str
        ``"cache"`` (``probe extract``), ``"regions"`` (``probe regions extract``) or ``"eval"``
        (``probe eval BENCHMARK``).
    args : tuple of str
        Its arguments after ``probe``, without ``--out``.
    out : Path
        Its ``--out``: the merged file (eval: the results folder).
    run : tuple of (Any, str), optional
        Eval: the command's :class:`~vlprobe.experiments.benchmark_eval.EvalConfig` and the
        run's name (which names its files).
    """

    kind: str
    args: tuple[str, ...]
    out: Path
    run: tuple[Any, str] | None = None

    @classmethod
    def parse(cls, argv: Sequence[str]) -> ShardedCommand:
        """``probe extract ...`` (also ``vlprobe ...``, ``python -m vlprobe ...``) -> the command.

        Raises
        ------
        InputError
            Not a sharded command, no ``--out``, or a ``--shard`` of its own.
        """
        args = list(argv)
        if args and Path(args[0]).name in ("probe", "vlprobe"):
            args = args[1:]
        elif len(args) >= 3 and Path(args[0]).name.startswith("python") and args[1:3] == ["-m", "vlprobe"]:
            args = args[3:]
        if args[:1] == ["extract"]:
            kind = "cache"
        elif args[:2] == ["regions", "extract"]:
            kind = "regions"
        elif args[:1] == ["eval"]:
            kind = "eval"
        else:
            raise InputError(
                "command: probe launch runs `probe extract ...`, `probe regions extract ...` or `probe eval "
                f"BENCHMARK ...` in shards, got {' '.join(argv)!r}" if argv
                else "command: give the command to run after --, e.g. -- probe extract ..."
            )
        out: str | None = None
        kept: list[str] = []
        i = 0
        while i < len(args):
            a = args[i]
            if a == "--shard" or a.startswith("--shard="):
                raise InputError("command: leave --shard out; the launcher gives each shard its own")
            if a == "--merge-shards":
                raise InputError("command: leave --merge-shards out; the launcher merges the shards at the end")
            if a == "--out":
                if i + 1 >= len(args):
                    raise InputError("command: --out needs a file name")
                out, i = args[i + 1], i + 2
                continue
            if a.startswith("--out="):
                out, i = a.split("=", 1)[1], i + 1
                continue
            kept.append(a)
            i += 1
        if kind == "eval":
            return cls._eval(tuple(kept), out)
        if out is None:
            raise InputError("command: give the merged file with --out (its shards are written beside it)")
        if Path(out).suffix.lower() not in (".h5", ".hdf5"):
            raise InputError(f"out must be an HDF5 file name ending in .h5, got {out!r}")
        return cls(kind, tuple(kept), Path(out))

    @classmethod
    def _eval(cls, args: tuple[str, ...], out: str | None) -> ShardedCommand:
        """``probe eval BENCHMARK ...``: its config read as the command line reads it, checked and
        its run claimed (a clash with a recorded run is refused before any shard starts)."""
        from vlprobe.cli.benchmarks import EVAL_COMMANDS
        from vlprobe.cli.declared import config_from_args
        from vlprobe.experiments.benchmark_eval import eval_run_name

        bench = args[1] if len(args) > 1 else ""
        if bench not in EVAL_COMMANDS:
            raise InputError(f"command: probe eval takes a benchmark ({', '.join(EVAL_COMMANDS)}), got {bench!r}")
        config = config_from_args(EVAL_COMMANDS[bench], [*args[2:], *(("--out", out) if out is not None else ())])
        if config.model is None:
            raise InputError("command: probe launch shards the scoring of one model (--model); "
                             "a score file or a models file is no such run")
        return cls("eval", args, Path(config.out), (config, eval_run_name(config)))

    @property
    def merged(self) -> Path:
        """The file the whole run ends in: ``out`` (eval: the run's CSV, ``OUT/<benchmark>/<run>.csv``)."""
        if self.run is not None:
            from vlprobe.runs.writing import result_stem

            return self.out / self.run[0].benchmark / f"{result_stem(self.run[1])}.csv"
        return self.out

    @property
    def launch_folder(self) -> Path:
        """Where the logs and the record of finished shards go: ``<stem>.launch/`` beside the
        merged file (eval: ``OUT/<benchmark>/<run>.launch/``)."""
        return self.merged.with_name(f"{self.merged.stem}.launch")

    def shard_file(self, k: int, n: int) -> Path:
        if self.run is not None:
            from vlprobe.experiments.benchmark_eval import eval_shard_file

            return eval_shard_file(self.run[0], self.run[1], k, n)
        return shard_path(self.out, k, n)

    def shard_args(self, k: int, n: int) -> tuple[str, ...]:
        """The arguments of shard K of N."""
        out = self.out if self.kind == "eval" else self.shard_file(k, n)
        return (*self.args, "--shard", f"{k}/{n}", "--out", str(out))

    def state(self, k: int, n: int) -> str:
        """``""`` when shard K of N is complete, else what it lacks."""
        if self.kind == "eval":  # written whole at the shard's end (N = 1: the run's score file, written last)
            return "" if self.shard_file(k, n).is_file() else f"no {self.shard_file(k, n).name} yet"
        if self.kind == "cache":
            from vlprobe.extract.cache.merge import shard_state

            return shard_state(self.shard_file(k, n), f"{k}/{n}")
        from vlprobe.extract.regions.merge import region_shard_state

        return region_shard_state(self.shard_file(k, n), f"{k}/{n}")

    def merge(self, n: int) -> Path:
        """The shards joined: the merged file (eval: the run's CSV, as one process's run writes it)."""
        if self.run is not None:
            from vlprobe.experiments.benchmark_eval import EXPERIMENTS

            config = self.run[0]
            csv_path, _, _ = EXPERIMENTS[config.benchmark].run(config.replace(merge_shards=True))
            return Path(csv_path)
        files = [self.shard_file(k, n) for k in range(n)]
        if self.kind == "cache":
            from vlprobe.extract.cache.merge import merge_shards

            return merge_shards(files, self.out)
        from vlprobe.extract.regions.merge import merge_region_shards

        return merge_region_shards(files, self.out)

    def steps(self, n: int) -> list[Step]:
        """One step per shard, done when its file is complete."""
        return [
            Step(f"shard {k}/{n}", self.shard_args(k, n), group="shards",
                 done=functools.partial(self.state, k, n))
            for k in range(n)
        ]


def launch_shards(
    command: ShardedCommand, shards: int, executor: Executor, *, retries: int = 2, merge: bool = True,
    echo: Callable[[str], Any] = print,
) -> dict[str, Any]:
    """Run ``command`` as ``shards`` shards on ``executor`` and merge them (module docstring).

    Returns
    -------
    dict
        ``out`` (the merged file, None without ``merge``), ``shards`` (their files), ``timings``
        (:func:`vlprobe.launch.steps.run_steps`).

    Raises
    ------
    StepFailed
        A shard's command was refused (exit 2).
    StepCrashed
        A shard crashed or was killed after its retries.
    """
    check_positive_int(shards, "shards")
    if retries < 0:
        raise InputError(f"retries must be 0 or more, got {retries}")
    root = command.launch_folder
    echo(f"{shards} shards of `probe {' '.join(command.args)}` on {executor.describe()}; logs in {root}")
    timings = run_steps(command.steps(shards), executor, root, retries=retries, echo=echo)
    files = [command.shard_file(k, shards) for k in range(shards)]
    out = None
    if merge:
        out = command.merge(shards) if shards > 1 else command.merged  # one shard: the whole run's outputs
        echo(f"merged {shards} shards into {out}" if shards > 1 else f"wrote {out}")
    return {"out": out, "shards": files, "timings": timings}



def launch_local(
    command: Sequence[str], *, shards: int = 2, jobs: int | None = None, threads: int | None = None,
    retries: int = 2, merge: bool = True, echo: Callable[[str], Any] = print, start_method: str | None = None,
) -> dict[str, Any]:
    """``probe launch local``: ``command`` (``probe extract ... --out F``) as ``shards`` processes on
    this machine, ``jobs`` at once with ``threads`` CPU threads and a GPU each (:func:`launch_shards`),
    started by ``start_method`` (:class:`~vlprobe.launch.executors.LocalExecutor`; None: its default)."""
    from vlprobe.launch.executors import local_executor

    parsed = ShardedCommand.parse(command)
    with local_executor(jobs=jobs, threads=threads, start_method=start_method) as executor:
        return launch_shards(parsed, shards, executor, retries=retries, merge=merge, echo=echo)


def launch_slurm(
    command: Sequence[str], *, shards: int = 8, partition: str | None = None, gpus_per_task: int = 1,
    cpus_per_task: int | None = None, mem_gb: int | None = None, timeout_min: int = 240, parallel: int | None = None,
    account: str | None = None, qos: str | None = None, folder: Path | None = None, cluster: str = "slurm",
    retries: int = 2, merge: bool = True, echo: Callable[[str], Any] = print,
) -> dict[str, Any]:
    """``probe launch slurm``: ``command`` as a Slurm job array of ``shards`` tasks through submitit
    (``cluster="local"``: submitit's local processes), each task with ``gpus_per_task`` GPUs;
    ``folder`` holds submitit's files (default ``<out stem>.launch/submitit``)."""
    from vlprobe.launch.executors import SubmititExecutor, slurm_parameters

    parsed = ShardedCommand.parse(command)
    params = slurm_parameters(name=f"vlprobe-{parsed.launch_folder.stem}", cluster=cluster, partition=partition,
                              gpus_per_task=gpus_per_task, cpus_per_task=cpus_per_task, mem_gb=mem_gb,
                              timeout_min=timeout_min, parallel=parallel, account=account, qos=qos)
    where = folder or parsed.launch_folder / "submitit"
    executor = SubmititExecutor(Path(where), cluster=cluster, parameters=params)
    return launch_shards(parsed, shards, executor, retries=retries, merge=merge, echo=echo)
