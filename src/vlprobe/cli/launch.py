"""``probe launch local|slurm -- COMMAND``: a sharded extraction or evaluation run to the end, on this machine
or as a Slurm job array; ``probe sweep PLAN``: models x datasets x experiments."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer

from vlprobe.cli.app import app, guarded

launch_app = typer.Typer(
    name="launch",
    help="Run `probe extract`, `probe regions extract` or `probe eval BENCHMARK` as shards to the end: retries, then the merge.",
    no_args_is_help=True,
)

_EXTRA = {"allow_extra_args": True, "ignore_unknown_options": True}

Shards = Annotated[int, typer.Option("--shards", "--array", help="Shards (processes or array tasks).")]
Retries = Annotated[int, typer.Option(help="Times a shard that died is started again (it resumes).")]
Merge = Annotated[bool, typer.Option("--merge/--no-merge", help="Merge the shards at the end (or leave them).")]


# The job options of `probe launch slurm` and `probe sweep --launcher slurm` (one declaration each).
Partition = Annotated[str | None, typer.Option(help="Slurm partition.")]
GpusPerTask = Annotated[int, typer.Option(help="GPUs of each Slurm job (array task).")]
CpusPerTask = Annotated[int | None, typer.Option(help="CPUs of each Slurm job (array task).")]
MemGb = Annotated[int | None, typer.Option(help="Memory of each Slurm job (array task), GB.")]
TimeoutMin = Annotated[int, typer.Option(help="Time limit of the costliest Slurm job, minutes (each other job: in proportion to its cost, at least 10).")]
Parallel = Annotated[int | None, typer.Option(help="Slurm jobs running at once (sbatch --array=...%N).")]
Account = Annotated[str | None, typer.Option(help="Slurm account.")]
Qos = Annotated[str | None, typer.Option(help="Slurm QOS.")]
Cluster = Annotated[str, typer.Option(help="slurm, or local: submitit's local processes (a trial run here).")]
CpuPartition = Annotated[str | None, typer.Option(
    help="Slurm partition of the jobs that use no GPU (merges, collect, reports; default: --partition).")]
Wait = Annotated[bool, typer.Option(
    "--wait/--no-wait", help="Follow the Slurm jobs to their end (retrying the ones that die), or return once "
                             "every job is submitted (run the same command again to follow or resume).")]
StartMethod = Annotated[str | None, typer.Option(
    help="How a local step's process starts: forkserver (a fork of a process that imported torch once; the "
         "default on Linux) or spawn (a fresh python -m vlprobe).")]


def _echo(line: str) -> None:
    typer.echo(line, err=True)


@contextlib.contextmanager
def _crashes_in_one_line() -> Iterator[None]:
    """A step that crashed or was killed after its retries (out of memory, preempted, SIGKILL) is
    no bug of vlprobe: one ``error:`` line naming the step, its exit and its log, exit code 1."""
    from vlprobe.launch.steps import StepCrashed

    try:
        yield
    except StepCrashed as exc:
        typer.echo("error: " + " ".join(str(exc).split()), err=True)
        raise typer.Exit(1) from None


def _said(result: dict) -> None:
    if result.get("timings") is None and "jobs" in result:  # submitted, not followed
        typer.echo(" ".join(f"{job}" for job in result["jobs"].values()))
        return
    typer.echo(str(result["out"] or " ".join(map(str, result["shards"]))))


@launch_app.command("local", context_settings=_EXTRA)
@guarded
def launch_local(
    ctx: typer.Context,
    shards: Shards = 2,
    jobs: Annotated[int | None, typer.Option(help="Shards at once (default: one per GPU, else 1).")] = None,
    threads: Annotated[int | None, typer.Option(help="CPU threads per shard (default: torch's choice).")] = None,
    retries: Retries = 2,
    merge: Merge = True,
    start_method: StartMethod = None,
) -> None:
    """Run COMMAND (after --) as shards in processes on this machine, one GPU each, then merge.

    Example: probe launch local --shards 4 -- probe extract --model clip ... --out all.h5
    """
    from vlprobe.launch.sharded import launch_local as run

    with _crashes_in_one_line():
        _said(run(ctx.args, shards=shards, jobs=jobs, threads=threads, retries=retries, merge=merge, echo=_echo,
                  start_method=start_method))


@launch_app.command("slurm", context_settings=_EXTRA)
@guarded
def launch_slurm(
    ctx: typer.Context,
    shards: Shards = 8,
    partition: Partition = None,
    gpus_per_task: GpusPerTask = 1,
    cpus_per_task: CpusPerTask = None,
    mem_gb: MemGb = None,
    timeout_min: TimeoutMin = 240,
    parallel: Parallel = None,
    account: Account = None,
    qos: Qos = None,
    folder: Annotated[Path | None, typer.Option(help="submitit's folder (default: <out stem>.launch/submitit).")] = None,
    cluster: Cluster = "slurm",
    retries: Retries = 2,
    merge: Merge = True,
    cpu_partition: CpuPartition = None,
    wait: Wait = True,
) -> None:
    """Submit COMMAND (after --) as a Slurm job array through submitit and its merge as a job that
    waits for the array, follow them, resubmit the shards that died. Needs `pip install 'vlprobe\\[slurm]'`.

    Example: probe launch slurm --array 8 --partition gpu --gpus-per-task 1 -- probe extract ... --out all.h5
    """
    from vlprobe.launch.sharded import launch_slurm as run

    with _crashes_in_one_line():
        _said(run(ctx.args, shards=shards, partition=partition, gpus_per_task=gpus_per_task,
                  cpus_per_task=cpus_per_task, mem_gb=mem_gb, timeout_min=timeout_min, parallel=parallel,
                  account=account, qos=qos, folder=folder, cluster=cluster, retries=retries, merge=merge, echo=_echo,
                  cpu_partition=cpu_partition, wait=wait))


@app.command("sweep")
@guarded
def sweep_cmd(
    plan: Annotated[Path, typer.Argument(help="The plan (TOML): models, datasets, experiments, other steps.")],
    out: Annotated[Path | None, typer.Option(help="Output root (default: the plan's out).")] = None,
    launcher: Annotated[str, typer.Option(help="local (processes here) or slurm (submitit jobs).")] = "local",
    jobs: Annotated[int | None, typer.Option(help="Local steps at once (default: one per GPU, else 1).")] = None,
    threads: Annotated[int | None, typer.Option(help="CPU threads per local step.")] = None,
    retries: Annotated[int, typer.Option(help="Times a step that died is started again.")] = 1,
    partition: Partition = None,
    gpus_per_task: GpusPerTask = 1,
    cpus_per_task: CpusPerTask = None,
    mem_gb: MemGb = None,
    timeout_min: TimeoutMin = 240,
    parallel: Parallel = None,
    account: Account = None,
    qos: Qos = None,
    cluster: Cluster = "slurm",
    start_method: StartMethod = None,
    cpu_partition: CpuPartition = None,
    wait: Wait = True,
    dry_run: Annotated[bool, typer.Option(
        help="Print every step (done before, or to run), what it waits for and its command; run none.")] = False,
) -> None:
    """Run a plan of models x datasets x experiments (and models x benchmarks: probe eval) as a dependency graph; a rerun resumes.

    With --launcher slurm every step is submitted at once as a Slurm job (submitit) that waits for
    the jobs of its inputs (--dependency=afterok), with the job options given (--partition,
    --gpus-per-task, ...) and a time limit that follows its cost; a rerun asks Slurm first and
    submits nothing that is queued, running or done.
    """
    from vlprobe.launch.sweep import run_sweep

    with _crashes_in_one_line():
        result = run_sweep(plan, out=out, launcher=launcher, jobs=jobs, threads=threads, retries=retries,
                           echo=typer.echo if dry_run else _echo, partition=partition, gpus_per_task=gpus_per_task,
                           cpus_per_task=cpus_per_task, mem_gb=mem_gb, timeout_min=timeout_min, parallel=parallel,
                           account=account, qos=qos, cluster=cluster, start_method=start_method, dry_run=dry_run,
                           cpu_partition=cpu_partition, wait=wait)
    if not dry_run and "jobs" not in result:
        typer.echo(str(result["results"]))
