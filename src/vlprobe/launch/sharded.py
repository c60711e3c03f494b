"""``probe launch local|slurm -- probe extract ... --out all.h5``: one sharded run, start to merge.

The command (``probe extract``, ``probe regions extract`` or ``probe eval BENCHMARK --model
...``, without ``--shard``) runs as N shards, each a step of :mod:`vlprobe.launch.steps` with
``--shard K/N`` (extract: ``--out <stem>.shard-K-of-N.h5``, the names ``--shard auto`` gives, so
``probe cache merge --out`` finds them too; eval: the same ``--out`` folder, each shard writing
``OUT/<benchmark>/<run>.shard-K-of-N.scores.jsonl``), then a merge step that waits for them
(``probe cache merge``, ``probe regions merge``, ``probe eval ... --merge-shards``), on an
executor: local processes (:mod:`vlprobe.launch.executors`), or Slurm, where the shards go as
one job array and the merge as a job that waits for it (:mod:`vlprobe.launch.slurm_graph`).

A shard is done when it finished under the same key (:mod:`vlprobe.launch.identity`: the same
options and the same checkpoint, dataset, variants and regions, by content) and its file is
complete: a cache's or region file's done masks full, an eval shard's score file there. A
relaunch with another checkpoint or other options into the same ``--out`` runs every shard and
the merge again, first removing the files its earlier launch made of other inputs
(:mod:`vlprobe.launch.records`): only files its records name, and only when vlprobe wrote them;
any other file is never removed (the shard's command refuses it in one line when its settings
differ). A shard that died (killed,
preempted, out of memory) is started again up to ``retries`` times (an extraction resumes from
its done mask, an eval shard scores its block again). The logs and the record of the steps are
in ``<out stem>.launch/`` beside ``--out`` (eval: ``OUT/<benchmark>/<run>.launch/``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlprobe.launch.executors import Executor
from vlprobe.launch.records import Owned
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
        return self._file_state(self.shard_file(k, n), f"{k}/{n}")

    def merge_args(self, n: int) -> tuple[str, ...]:
        """The arguments of the step that joins the N shards into the whole run."""
        if self.kind == "eval":
            return (*self.args, "--merge-shards", "--out", str(self.out))
        files = [str(self.shard_file(k, n)) for k in range(n)]
        return ("cache" if self.kind == "cache" else "regions", "merge", "--out", str(self.out), *files)

    def merged_state(self) -> str:
        """``""`` when the merged output is complete, else what it lacks."""
        if self.kind == "eval":
            return "" if self.merged.is_file() else f"no {self.merged.name} yet"
        return self._file_state(self.out, "0/1")

    def _file_state(self, path: Path, shard: str) -> str:
        if self.kind == "cache":
            from vlprobe.extract.cache.merge import shard_state

            return shard_state(path, shard)
        from vlprobe.extract.regions.merge import region_shard_state

        return region_shard_state(path, shard)

    def _owns(self, path: Path | None) -> Owned:
        """What a step of this run leaves (:mod:`vlprobe.launch.records`): its file, and for the
        eval's whole run its recorded run."""
        if self.run is not None:
            return Owned(runs=((str(self.out / self.run[0].benchmark), self.run[1]),)) if path is None else Owned()
        return Owned((str(path),)) if path is not None else Owned()

    def steps(self, n: int, *, merge: bool = True) -> list[Step]:
        """One step per shard, done when its file is complete, then (``merge`` and N > 1) the
        merge step, done when the merged output is complete."""
        if n == 1:  # the one shard writes the whole run
            return [Step("shard 0/1", self.shard_args(0, 1), group="shards", done=functools.partial(self.state, 0, 1),
                         owns=self._owns(None if self.kind == "eval" else self.out))]
        shards = [Step(f"shard {k}/{n}", self.shard_args(k, n), group="shards",
                       done=functools.partial(self.state, k, n),
                       owns=self._owns(None) if self.kind == "eval" else self._owns(self.shard_file(k, n)))
                  for k in range(n)]
        if not merge:
            return shards
        return [*shards, Step("merge", self.merge_args(n), tuple(s.name for s in shards), group="merge", cost=0.5,
                              gpu=False, done=self.merged_state,
                              owns=self._owns(None if self.kind == "eval" else self.out))]


def launch_shards(
    command: ShardedCommand, shards: int, executor: Executor | None, *, retries: int = 2, merge: bool = True,
    echo: Callable[[str], Any] = print, slurm: tuple[Any, int, bool] | None = None,
) -> dict[str, Any]:
    """Run ``command`` as ``shards`` shards on ``executor`` and merge them (module docstring);
    ``slurm``: ``(SlurmSubmitter, timeout_min, wait)`` to submit the steps to Slurm at once instead.

    Returns
    -------
    dict
        ``out`` (the merged output, None without ``merge``), ``shards`` (their files), ``timings``
        (:func:`vlprobe.launch.steps.run_steps`; None when not waiting for Slurm's jobs).

    Raises
    ------
    StepFailed
        A shard's or the merge's command was refused (exit 2).
    StepCrashed
        A shard crashed or was killed after its retries.
    """
    check_positive_int(shards, "shards")
    if retries < 0:
        raise InputError(f"retries must be 0 or more, got {retries}")
    root = command.launch_folder
    steps = command.steps(shards, merge=merge)
    files = [command.shard_file(k, shards) for k in range(shards)]
    out = command.merged if merge or shards == 1 else None
    if slurm is not None:
        from vlprobe.launch.slurm_graph import follow_graph, poll_interval, submit_graph

        submitter, timeout_min, wait = slurm
        submitter.check()
        echo(f"{shards} shards of `probe {' '.join(command.args)}` to Slurm; logs in {root}")
        graph = submit_graph(steps, root, submitter, timeout_min=timeout_min, echo=echo)
        if not wait:
            return {"out": out, "shards": files, "timings": None, "jobs": dict(graph.alive)}
        timings = follow_graph(graph, retries=retries, poll_interval=poll_interval())
    else:
        assert executor is not None
        echo(f"{shards} shards of `probe {' '.join(command.args)}` on {executor.describe()}; logs in {root}")
        timings = run_steps(steps, executor, root, retries=retries, echo=echo)
    if out is not None:
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
    retries: int = 2, merge: bool = True, echo: Callable[[str], Any] = print, cpu_partition: str | None = None,
    wait: bool = True,
) -> dict[str, Any]:
    """``probe launch slurm``: ``command`` as a Slurm job array of ``shards`` tasks through submitit,
    each with ``gpus_per_task`` GPUs, and the merge as a job (no GPU; ``cpu_partition``) that
    waits for the array, all submitted at once; ``wait``: follow them to the end (retrying a shard
    that died). ``cluster="local"``: submitit's local processes, step by step. ``folder`` holds
    submitit's files (default ``<out stem>.launch/submitit``)."""
    from vlprobe.launch.executors import SubmititExecutor, slurm_parameters

    parsed = ShardedCommand.parse(command)
    params = slurm_parameters(name=f"vlprobe-{parsed.launch_folder.stem}", cluster=cluster, partition=partition,
                              gpus_per_task=gpus_per_task, cpus_per_task=cpus_per_task, mem_gb=mem_gb,
                              timeout_min=timeout_min, parallel=parallel, account=account, qos=qos)
    where = Path(folder or parsed.launch_folder / "submitit")
    if cluster == "slurm":
        from vlprobe.launch.slurm_graph import SlurmSubmitter

        submitter = SlurmSubmitter(where, params, cpu_partition=cpu_partition)
        return launch_shards(parsed, shards, None, retries=retries, merge=merge, echo=echo,
                             slurm=(submitter, timeout_min, wait))
    if cpu_partition is not None or not wait:
        raise InputError("cpu-partition and --no-wait are for Slurm's jobs; leave them out with --cluster local")
    executor = SubmititExecutor(where, cluster=cluster, parameters=params)
    return launch_shards(parsed, shards, executor, retries=retries, merge=merge, echo=echo)
