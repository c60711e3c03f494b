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

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vlprobe.io.paths import ensure_folder
from vlprobe.launch.steps import Step, ordered_steps
from vlprobe.shards import shard_path
from vlprobe.validation import InputError

__all__ = ["SweepPlan", "load_plan", "parse_plan", "plan_steps", "run_sweep"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
#: The keys of a ``[[steps]]`` table.
_STEP_KEYS = frozenset({"name", "args", "after", "group", "cost", "gpu"})


@dataclass(frozen=True)
class SweepPlan:
    """A parsed plan (module docstring): tables as dicts, ``out`` resolved."""

    out: Path
    models: Mapping[str, Mapping[str, Any]]
    datasets: Mapping[str, Mapping[str, Any]]
    experiments: Mapping[str, Mapping[str, Any]]
    steps: Sequence[Mapping[str, Any]]
    shards: int = 1
    evals: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


def _strings(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, (str, int, float)) for v in value):
        raise InputError(f"plan: {where} must be a list of strings, got {value!r}")
    return [str(v) for v in value]


def _table(raw: Mapping[str, Any], key: str) -> dict[str, dict[str, Any]]:
    got = raw.get(key, {})
    if not isinstance(got, dict) or not all(isinstance(v, dict) for v in got.values()):
        raise InputError(f"plan: [{key}.NAME] tables expected under {key!r}")
    for name in got:
        if not _NAME.match(name):
            raise InputError(f"plan: {key} name {name!r} must be letters, digits, '.', '_' or '-'")
    return {k: dict(v) for k, v in got.items()}


def load_plan(path: str | Path, *, out: Path | None = None) -> SweepPlan:
    """Read a plan file; InputError naming the key for anything malformed."""
    from vlprobe.io.toml import read_toml

    p = Path(path)
    return parse_plan(read_toml(p, "plan", "valid TOML"), p.parent, default_out=p.stem, out=out)


def parse_plan(raw: Mapping[str, Any], base: Path, *, default_out: str = "sweep-out",
               out: Path | None = None) -> SweepPlan:
    """A plan's tables (as TOML reads them) -> :class:`SweepPlan`; ``out`` relative to ``base``
    (default ``default_out``) unless ``out`` is given. InputError naming the key for anything
    malformed."""
    known = {"out", "shards", "models", "datasets", "experiments", "evals", "steps"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise InputError(f"plan: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    where = out if out is not None else base / str(raw.get("out", default_out))
    models, datasets, experiments = _table(raw, "models"), _table(raw, "datasets"), _table(raw, "experiments")
    evals = _table(raw, "evals")
    if not models or not (datasets or evals):
        raise InputError("plan: it needs at least one [models.NAME] and one [datasets.NAME] or [evals.NAME]")
    both = sorted(set(datasets) & set(evals))
    if both:
        raise InputError(f"plan: {both[0]!r} is both a dataset and an eval (they name results folders: one of each)")
    for name, e in evals.items():
        benchmark = e.get("benchmark", name)
        if benchmark not in _eval_benchmarks():
            raise InputError(f"plan: evals.{name}: benchmark {benchmark!r} is not one of "
                             f"{', '.join(_eval_benchmarks())} (set benchmark = \"...\" when the name is another)")
    for name, m in models.items():
        if "model" not in m:
            raise InputError(f"plan: models.{name} needs model = \"<registered model>\"")
    steps = raw.get("steps", [])
    if not isinstance(steps, list) or not all(isinstance(s, dict) and "name" in s and "args" in s for s in steps):
        raise InputError("plan: every [[steps]] needs name and args")
    for s in steps:
        unknown = sorted(set(s) - _STEP_KEYS)
        if unknown:
            raise InputError(f"plan: steps {s['name']!r}: unknown key(s) {', '.join(unknown)} "
                             f"(known: {', '.join(sorted(_STEP_KEYS))})")
    for name, m in models.items():
        run = m.get("run", [])
        if isinstance(run, dict):
            for experiment, extra in run.items():
                _strings(extra, f"models.{name}.run.{experiment}")
                if experiment not in experiments:
                    raise InputError(f"plan: models.{name}.run.{experiment}: no [experiments.{experiment}] in the plan")
    shards = raw.get("shards", 1)
    if not isinstance(shards, int) or shards < 1:
        raise InputError(f"plan: shards must be a positive integer, got {shards!r}")
    return SweepPlan(Path(where), models, datasets, experiments, steps, shards, evals)


def _eval_benchmarks() -> tuple[str, ...]:
    from vlprobe.experiments.benchmark_eval import BENCHMARKS

    return BENCHMARKS


def _cost(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise InputError(f"plan: {where} must be a number of seconds >= 0, got {value!r}")
    return float(value)


def _run_args(model: Mapping[str, Any], mname: str, experiment: str) -> list[str]:
    """A model's extra arguments of its ``experiment`` runs: ``run`` as a list (every run) or a
    table experiment -> list."""
    run = model.get("run", [])
    if isinstance(run, dict):
        return _strings(run.get(experiment, []), f"models.{mname}.run.{experiment}")
    return _strings(run, f"models.{mname}.run")


def _in_shards(
    name: str, shards: int, args: Sequence[str], merge: tuple[str, ...], after: tuple[str, ...], *, group: str,
    cost: float, merge_cost: float = 1.0, exclusive: str = "", out: Path | None = None,
) -> list[Step]:
    """The steps of one command, ``args`` (``--out out`` added when ``out`` is given): the step
    ``name``, or with ``shards`` > 1 the steps ``"<name> k/N"`` (``--shard k/N``, each into its
    shard file of ``out``) and then ``merge`` as ``name`` (no GPU; ``exclusive``: it writes what
    the whole command would)."""
    if shards == 1:
        whole = (*args, "--out", str(out)) if out is not None else tuple(args)
        return [Step(name, whole, after, group=group, cost=cost, exclusive=exclusive)]
    parts = [Step(f"{name} {k}/{shards}", (*args, "--shard", f"{k}/{shards}",
                                             *(("--out", str(shard_path(out, k, shards))) if out is not None else ())),
                  after, group=group, cost=cost) for k in range(shards)]
    return [*parts, Step(name, merge, tuple(p.name for p in parts), group=group, cost=merge_cost,
                         exclusive=exclusive, gpu=False)]


def _flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise InputError(f"plan: {where} must be true or false, got {value!r}")
    return value


def _wanted(table: Mapping[str, Any], model: str, where: str) -> bool:
    """Whether an experiment's or eval's ``models`` list (default: every model) holds ``model``."""
    wanted = table.get("models")
    return wanted is None or model in _strings(wanted, where)


def _under(out: Path, value: Any, where: str) -> Path:
    """A path of the plan relative to ``out`` (a dataset's results folder or report page)."""
    if not isinstance(value, str) or not value:
        raise InputError(f"plan: {where} must be a path relative to out, got {value!r}")
    return out / value


def plan_steps(plan: SweepPlan) -> list[Step]:
    """The plan's steps (module docstring), in an order where each comes after its inputs."""
    out = plan.out
    steps: list[Step] = []
    for s in plan.steps:
        where = f"steps {s['name']!r}"
        steps.append(Step(str(s["name"]), tuple(_strings(s["args"], f"{where} args")),
                          tuple(_strings(s.get("after", []), f"{where} after")), group=str(s.get("group", "steps")),
                          cost=_cost(s.get("cost", 1.0), f"{where} cost"), gpu=_flag(s.get("gpu", True), f"{where} gpu")))
    runs: list[str] = []
    by_dataset: dict[str, list[str]] = {d: [] for d in plan.datasets}
    results = {dname: _under(out, d.get("results", f"results/{dname}"), f"datasets.{dname}.results")
               for dname, d in plan.datasets.items()}
    for mname, m in plan.models.items():
        for dname, d in plan.datasets.items():
            pair = f"{mname}-{dname}"
            cache = out / "caches" / f"{pair}.h5"
            args = ["extract", "--model", str(m["model"]), "--dataset", str(d.get("dataset", dname)), "--quiet"]
            if "checkpoint" in m:
                args += ["--checkpoint", str(m["checkpoint"])]
            if "data_dir" in d:
                args += ["--data-dir", str(d["data_dir"])]
            args += _strings(m.get("extract", []), f"models.{mname}.extract")
            args += _strings(d.get("extract", []), f"datasets.{dname}.extract")
            after = (*_strings(m.get("after", []), f"models.{mname}.after"),
                     *_strings(d.get("after", []), f"datasets.{dname}.after"))
            extracted = [f"extract {pair}"]
            steps += _in_shards(f"extract {pair}", plan.shards, args, ("cache", "merge", "--out", str(cache)), after,
                                group="extract", cost=3.0, out=cache)
            for ename, e in plan.experiments.items():
                if not _wanted(e, mname, f"experiments.{ename}.models"):
                    continue
                run = ["run", ename, "--cache", str(cache), "--out", str(results[dname]), "--name", mname,
                       *_strings(e.get("args", []), f"experiments.{ename}.args"), *_run_args(m, mname, ename)]
                name = f"{ename} {pair}"
                steps.append(Step(name, tuple(run), tuple(extracted), group="experiments",
                                  cost=_cost(e.get("cost", 1.0), f"experiments.{ename}.cost"),
                                  exclusive=f"{ename} {dname}"))
                runs.append(name)
                by_dataset[dname].append(name)
    for ename, e in plan.evals.items():
        results[ename] = _under(out, e.get("results", f"results/{ename}"), f"evals.{ename}.results")
        by_dataset[ename] = []
        for mname, m in plan.models.items():
            if not _wanted(e, mname, f"evals.{ename}.models"):
                continue
            args = ["eval", str(e.get("benchmark", ename)), "--model", str(m["model"]), "--name", mname, "--quiet"]
            if "checkpoint" in m:
                args += ["--checkpoint", str(m["checkpoint"])]
            if "data_dir" in e:
                args += ["--data-dir", str(e["data_dir"])]
            args += [*_strings(e.get("args", []), f"evals.{ename}.args"),
                     *_strings(m.get("eval", []), f"models.{mname}.eval"), "--out", str(results[ename])]
            after = (*_strings(m.get("after", []), f"models.{mname}.after"),
                     *_strings(e.get("after", []), f"evals.{ename}.after"))
            name = f"eval {ename} {mname}"
            # the shards write their own score files; the merge writes the run (and the manifest)
            steps += _in_shards(name, plan.shards, args, (*args, "--merge-shards"), after, group="evals",
                                cost=_cost(e.get("cost", 3.0), f"evals.{ename}.cost"), merge_cost=0.5,
                                exclusive=f"eval {ename}")
            runs.append(name)
            by_dataset[ename].append(name)
    if runs:
        steps.append(Step("collect", ("collect", *(str(results[d]) for d, done in by_dataset.items() if done),
                                      "--out", str(out / "results.csv")), tuple(runs), group="collect", cost=0.5,
                          gpu=False))
    for dname, done in by_dataset.items():
        if done:
            kind = "datasets" if dname in plan.datasets else "evals"
            table = plan.datasets[dname] if kind == "datasets" else plan.evals[dname]
            page = _under(out, table.get("report", f"report/{dname}.html"), f"{kind}.{dname}.report")
            more = _strings(table.get("report_args", []), f"{kind}.{dname}.report_args")
            waits = _strings(table.get("report_after", []), f"{kind}.{dname}.report_after")
            steps.append(Step(f"report {dname}", ("report", str(results[dname]), "--out", str(page), "--quiet", *more),
                              (*done, *waits), group="report", cost=2.0, gpu=False))
    return ordered_steps(steps)  # ([[steps]] may wait for the sweep's own steps)


def _dry_run(steps: Sequence[Step], out: Path, echo: Any) -> dict[str, Any]:
    """``probe sweep --dry-run``: each step, whether a run would skip it, what it waits for, its command."""
    import shlex

    from vlprobe.launch.steps import done_before

    skipped = done_before(steps, out)
    done = set(skipped)
    planned = [s.name for s in steps if s.name not in done]
    echo(f"{len(steps)} steps of the plan, {len(planned)} to run, {len(skipped)} done before (in {out / 'state'}):")
    for s in steps:
        waits = f"  (after {', '.join(s.after)})" if s.after else ""
        gpu = "" if s.gpu else "  [no GPU]"
        echo(f"{'done' if s.name in done else 'run '}  {s.name}{waits}{gpu}")
        echo(f"      probe {shlex.join(s.args)}")
    return {"steps": {}, "planned": planned, "skipped": skipped, "wall": 0.0}


def run_sweep(
    plan: str | Path, *, out: Path | None = None, launcher: str = "local", jobs: int | None = None,
    threads: int | None = None, retries: int = 1, echo: Any = print, partition: str | None = None,
    gpus_per_task: int = 1, cpus_per_task: int | None = None, mem_gb: int | None = None, timeout_min: int = 240,
    parallel: int | None = None, account: str | None = None, qos: str | None = None, cluster: str = "slurm",
    start_method: str | None = None, show_output: bool = False, dry_run: bool = False,
) -> dict[str, Any]:
    """``probe sweep``: run (or resume) the plan's steps on ``launcher`` (``local`` processes, ``jobs``
    at once with ``threads`` threads each, started by ``start_method``: ``forkserver`` or ``spawn``
    of :class:`~vlprobe.launch.executors.LocalExecutor`, None its default; ``slurm``: a submitit
    job per step with the job options ``partition`` ... ``qos`` of :func:`vlprobe.launch.executors.slurm_parameters`, on ``cluster``:
    ``slurm``, or ``local`` for submitit's local processes); ``show_output`` echoes each finished
    step's output; ``dry_run`` prints every step (done before or to run, what it waits for, its
    command) and runs none. Returns the timings of :func:`vlprobe.launch.steps.run_steps` (dry
    run: ``planned``, the steps it would run, and ``skipped``) with ``out`` and ``results`` (the
    collected CSV)."""
    from vlprobe.launch.executors import Executor, SubmititExecutor, slurm_parameters
    from vlprobe.launch.executors import local_executor as make_local
    from vlprobe.launch.steps import run_steps

    parsed = load_plan(plan, out=out)
    steps = plan_steps(parsed)
    if dry_run:
        return {**_dry_run(steps, parsed.out, echo), "out": parsed.out, "results": parsed.out / "results.csv"}
    executor: Executor
    job: dict[str, Any] = {"partition": partition, "gpus_per_task": gpus_per_task, "cpus_per_task": cpus_per_task,
                           "mem_gb": mem_gb, "timeout_min": timeout_min, "parallel": parallel, "account": account, "qos": qos}
    if launcher == "local":
        given = [k for k, v in job.items() if v is not None and k not in ("gpus_per_task", "timeout_min")]
        if given:  # (the two with defaults are not told apart from unset ones)
            raise InputError(f"{given[0].replace('_', '-')}: a Slurm job option; give it with --launcher slurm")
        executor = make_local(jobs=jobs, threads=threads, start_method=start_method)
    elif launcher == "slurm":
        if start_method is not None:
            raise InputError("start-method: how a local step starts; give it with --launcher local")
        params = slurm_parameters(name=f"vlprobe-{parsed.out.name}", cluster=cluster, **job)
        executor = SubmititExecutor(parsed.out / "submitit", cluster=cluster, parameters=params)
    else:
        raise InputError(f"launcher must be local or slurm, got {launcher!r}")
    ensure_folder(parsed.out)
    ensure_folder(parsed.out / "caches")
    echo(f"{len(steps)} steps of {plan} on {executor.describe()}; logs in {parsed.out / 'logs'}")
    try:
        timings = run_steps(steps, executor, parsed.out, retries=retries, echo=echo, show_output=show_output)
    finally:
        executor.close()
    return {**timings, "out": parsed.out, "results": parsed.out / "results.csv"}
