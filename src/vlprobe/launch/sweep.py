"""``probe sweep PLAN.toml``: models x datasets x experiments, and models x benchmarks, as one
resumable dependency graph.

A plan names models, datasets and experiments; every (model, dataset) pair is one ``probe
extract`` step (its cache ``OUT/caches/<model>-<dataset>.h5``), every experiment one ``probe run``
step per pair, after the extraction it reads (``OUT/results/<dataset>/<experiment>/<model>.csv``;
runs of one experiment on one dataset never overlap, as they share its ``manifest.json``). Every
``[evals.NAME]`` benchmark is one ``probe eval`` step per model
(``OUT/results/<name>/<benchmark>/<model>.csv``; with ``shards = N``: N ``--shard K/N`` steps and
a ``--merge-shards`` step). Further ``[[steps]]`` are any other ``probe`` commands (making data,
training a model) that models, datasets and evals may wait for (``after``), or that wait for the
sweep's own steps (``"collect"``, ``"report <dataset>"``, ``"<experiment> <model>-<dataset>"``,
``"eval <name> <model>"``). At the end one ``probe collect`` gathers every run into
``OUT/results.csv`` and one ``probe report`` per dataset and eval draws its results into
``OUT/report/<name>.html``. The steps run on :mod:`vlprobe.launch.steps` (local processes, or Slurm
jobs through submitit): a rerun skips every step whose command and inputs' commands are
unchanged, so an interrupted sweep resumes where it stopped.

The plan (TOML; ``out`` is relative to the plan file, the paths in arguments to the folder the
sweep runs in)::

    out = "sweep-out"              # default: the plan's name beside it
    shards = 1                     # shards of each extraction and eval (launched with the other steps)

    [models.clip-b32]
    model = "clip"
    checkpoint = "openai/clip-vit-base-patch32"
    extract = ["--poolings", "cls,mean,max,pooled"]   # more probe extract arguments
    run = []                                          # more arguments of its probe run steps
    after = []                                        # steps it waits for

    [models.lxmert.run]             # or per experiment: more arguments of that experiment's run
    separability = ["--streams", "lang"]

    [datasets.winoground]
    dataset = "winoground"          # the registered name (default: the table's name)
    data_dir = "winoground/"
    extract = ["--variants", "winoground/variants.jsonl"]
    results = "results/winoground"  # its results folder, relative to out (this is the default)
    report = "report/winoground.html"                 # its report page (default)
    report_args = []                                  # more probe report arguments
    report_after = []                                 # steps its report waits for besides the runs

    [evals.sugarcrepe]              # a benchmark probe eval scores, every model (or models = [...])
    benchmark = "sugarcrepe"        # (default: the table's name)
    data_dir = "sugar-crepe/data"
    args = ["--image-dir", "coco/val2017"]            # more probe eval arguments; a model's own: eval = [...]

    [experiments.separability]
    args = ["--seeds", "3"]
    models = ["clip-b32"]           # default: every model
    cost = 1.0                      # its estimated seconds: the costliest chain of steps starts first

    [[steps]]
    name = "data"
    args = ["fixtures", "dataset", "--out", "data"]
    after = []
    group = "data"                  # what the timings add it up under (default "steps")
    cost = 1.0
    gpu = false                     # it uses no GPU (default true; collect, reports, merges use none)
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vlprobe.io.paths import ensure_folder
from vlprobe.launch.plan import SweepPlan, load_plan, parse_plan, plan_steps
from vlprobe.launch.steps import Step
from vlprobe.validation import InputError

__all__ = ["SweepPlan", "load_plan", "parse_plan", "plan_steps", "run_sweep"]

def _dry_run(steps: Sequence[Step], out: Path, echo: Any, *, timeout_min: int | None = None) -> dict[str, Any]:
    """``probe sweep --dry-run``: each step, whether a run would skip it (its record has its key),
    whether its Slurm job is queued, what it waits for, its command (with ``timeout_min``: each
    Slurm job's time limit)."""
    import shlex

    from vlprobe.launch.records import read_try
    from vlprobe.launch.slurm_graph import step_minutes
    from vlprobe.launch.steps import content_memo, done_before, plan_keys

    memo = content_memo(out)
    keys = plan_keys(steps, out, memo)
    skipped = done_before(steps, out, keys, memo)
    done = set(skipped)
    planned = [s.name for s in steps if s.name not in done]
    minutes = step_minutes(steps, timeout_min) if timeout_min is not None else {}
    echo(f"{len(steps)} steps of the plan, {len(planned)} to run, {len(skipped)} done before (in {out / 'state'}):")
    for s in steps:
        waits = f"  (after {', '.join(s.after)})" if s.after else ""
        gpu = "" if s.gpu else "  [no GPU]"
        tried = read_try(out, s.name) if s.name not in done else None
        job = f"  [Slurm job {tried['job_id']}]" if tried and tried.get("job_id") and tried.get("key") == keys[
            s.name] else ""
        limit = f"  [{minutes[s.name]} min]" if minutes else ""
        echo(f"{'done' if s.name in done else 'run '}  {s.name}{waits}{gpu}{limit}{job}")
        echo(f"      probe {shlex.join(s.args)}")
    return {"steps": {}, "planned": planned, "skipped": skipped, "wall": 0.0}


def run_sweep(
    plan: str | Path, *, out: Path | None = None, launcher: str = "local", jobs: int | None = None,
    threads: int | None = None, retries: int = 1, echo: Any = print, partition: str | None = None,
    gpus_per_task: int = 1, cpus_per_task: int | None = None, mem_gb: int | None = None, timeout_min: int = 240,
    parallel: int | None = None, account: str | None = None, qos: str | None = None, cluster: str = "slurm",
    start_method: str | None = None, show_output: bool = False, dry_run: bool = False,
    cpu_partition: str | None = None, wait: bool = True,
) -> dict[str, Any]:
    """``probe sweep``: run (or resume) the plan's steps on ``launcher``.

    ``local``: processes here, ``jobs`` at once with ``threads`` threads each, started by
    ``start_method`` (``forkserver`` or ``spawn`` of
    :class:`~vlprobe.launch.executors.LocalExecutor`, None its default). ``slurm``: every step
    not done submitted at once as a Slurm job waiting for its inputs' jobs
    (:mod:`vlprobe.launch.slurm_graph`), with the job options ``partition`` ... ``qos`` of
    :func:`vlprobe.launch.executors.slurm_parameters`, ``cpu_partition`` for the steps without a
    GPU and ``timeout_min`` for the costliest step; ``wait``: follow the jobs to the end (else
    return once submitted); ``cluster="local"`` runs the same jobs as submitit's local processes,
    step by step. ``show_output`` echoes each finished local step's output; ``dry_run`` prints
    every step (done before or to run, what it waits for, its command) and runs none.

    Returns the timings of :func:`vlprobe.launch.steps.run_steps` (dry run: ``planned``, the
    steps it would run, and ``skipped``; Slurm without waiting: ``jobs``, step -> job) with
    ``out`` and ``results`` (the collected CSV).
    """
    from vlprobe.launch.executors import Executor, SubmititExecutor, slurm_parameters
    from vlprobe.launch.executors import local_executor as make_local
    from vlprobe.launch.steps import run_steps

    parsed = load_plan(plan, out=out)
    steps = plan_steps(parsed)
    where = {"out": parsed.out, "results": parsed.out / "results.csv"}
    job: dict[str, Any] = {"partition": partition, "gpus_per_task": gpus_per_task, "cpus_per_task": cpus_per_task,
                           "mem_gb": mem_gb, "timeout_min": timeout_min, "parallel": parallel, "account": account, "qos": qos}
    if launcher not in ("local", "slurm"):
        raise InputError(f"launcher must be local or slurm, got {launcher!r}")
    if launcher == "local":
        given = [k for k, v in {**job, "cpu_partition": cpu_partition}.items()
                 if v is not None and k not in ("gpus_per_task", "timeout_min")]
        if given:  # (the two with defaults are not told apart from unset ones)
            raise InputError(f"{given[0].replace('_', '-')}: a Slurm job option; give it with --launcher slurm")
        if not wait:
            raise InputError("no-wait: Slurm's jobs go on without the driver; local steps do not (--launcher slurm)")
    elif start_method is not None:
        raise InputError("start-method: how a local step starts; give it with --launcher local")
    if dry_run:
        limits = timeout_min if launcher == "slurm" else None
        return {**_dry_run(steps, parsed.out, echo, timeout_min=limits), **where}
    if launcher == "slurm" and cluster == "slurm":
        from vlprobe.launch.slurm_graph import (
            SlurmSubmitter,
            follow_graph,
            poll_interval,
            submit_graph,
        )

        params = slurm_parameters(name=f"vlprobe-{parsed.out.name}", cluster=cluster, **job)
        submitter = SlurmSubmitter(parsed.out / "submitit", params, cpu_partition=cpu_partition)
        submitter.check()
        ensure_folder(parsed.out / "caches")
        echo(f"{len(steps)} steps of {plan} to Slurm; logs in {parsed.out / 'logs'} and {parsed.out / 'submitit'}")
        graph = submit_graph(steps, parsed.out, submitter, timeout_min=timeout_min, echo=echo)
        if not wait:
            return {"steps": {}, "skipped": sorted(graph.done), "jobs": dict(graph.alive), "wall": 0.0, **where}
        return {**follow_graph(graph, retries=retries, poll_interval=poll_interval()), **where}
    ensure_folder(parsed.out / "caches")
    executor: Executor
    if launcher == "local":
        executor = make_local(jobs=jobs, threads=threads, start_method=start_method)
    else:
        if cpu_partition is not None or not wait:
            raise InputError("cpu-partition and --no-wait are for Slurm's jobs; leave them out with --cluster local")
        params = slurm_parameters(name=f"vlprobe-{parsed.out.name}", cluster=cluster, **job)
        executor = SubmititExecutor(parsed.out / "submitit", cluster=cluster, parameters=params)
    echo(f"{len(steps)} steps of {plan} on {executor.describe()}; logs in {parsed.out / 'logs'}")
    try:
        timings = run_steps(steps, executor, parsed.out, retries=retries, echo=echo, show_output=show_output)
    finally:
        executor.close()
    return {**timings, **where}
