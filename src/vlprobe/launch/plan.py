"""A ``probe sweep`` plan (TOML) read, checked and made into steps (:mod:`vlprobe.launch.sweep` runs them).

Everything a plan says is checked before any step starts, each problem one line naming its key:
a key no table takes (``chekpoint``, ``datadir``, ``arg``: with the key it may mean), a model,
dataset, experiment or benchmark vlprobe does not know, an experiment's or eval's ``models``
naming no model of the plan, a step waiting for a step that is not there, and any input a step
reads (``--checkpoint``, ``--data-dir``, ``--variants``, ``--regions``, ``--cache``, ...) that
does not exist and that no step of the plan writes (its ``--out``). A checkpoint that may be a
hub id (``openai/clip-vit-base-patch32``) is left to the extraction.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vlprobe.launch.identity import canonical, command_tokens, inside, made_places
from vlprobe.launch.records import Owned
from vlprobe.launch.steps import Step, ordered_steps
from vlprobe.shards import shard_path
from vlprobe.validation import InputError, unknown_name_message

__all__ = ["TABLE_KEYS", "SweepPlan", "check_inputs", "load_plan", "parse_plan", "plan_steps"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
#: The keys each kind of table takes (``steps``: each ``[[steps]]``).
TABLE_KEYS: dict[str, frozenset[str]] = {
    "models": frozenset({"model", "checkpoint", "extract", "run", "eval", "after", "timeout_min"}),
    "datasets": frozenset({"dataset", "data_dir", "extract", "results", "report", "report_args", "report_after", "after",
                           "timeout_min"}),
    "experiments": frozenset({"args", "models", "cost", "timeout_min"}),
    "evals": frozenset({"benchmark", "data_dir", "args", "models", "results", "report", "report_args",
                        "report_after", "after", "cost", "timeout_min"}),
    "steps": frozenset({"name", "args", "after", "group", "cost", "gpu", "timeout_min"}),
}
_TOP_KEYS = frozenset({"out", "shards", "models", "datasets", "experiments", "evals", "steps"})
#: Options whose value is a file or folder a step reads (``--image-root NAME=PATH`` too).
INPUT_OPTIONS = frozenset({"--checkpoint", "--data-dir", "--variants", "--regions", "--tags", "--image-dir",
                           "--image-root", "--cache", "--scores", "--model-config", "--tokenizer", "--models",
                           "--detector", "--image-tower", "--known-answers"})
#: Of those, the ones that may name a hub id instead of a path.
_HUB_OPTIONS = frozenset({"--checkpoint", "--tokenizer", "--detector"})


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


def _keys(table: Mapping[str, Any], kind: str, where: str) -> None:
    """Refuse a key the ``kind`` of table does not take, with the key it may mean."""
    known = sorted(TABLE_KEYS[kind])
    for key in table:
        if key not in TABLE_KEYS[kind]:
            raise InputError(f"plan: {where}: {unknown_name_message('key', key, known)}")


def _table(raw: Mapping[str, Any], key: str) -> dict[str, dict[str, Any]]:
    got = raw.get(key, {})
    if not isinstance(got, dict) or not all(isinstance(v, dict) for v in got.values()):
        raise InputError(f"plan: [{key}.NAME] tables expected under {key!r}")
    for name, table in got.items():
        if not _NAME.match(name):
            raise InputError(f"plan: {key} name {name!r} must be letters, digits, '.', '_' or '-'")
        _keys(table, key, f"{key}.{name}")
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
    malformed or unknown (module docstring; the inputs are checked by :func:`plan_steps`)."""
    unknown = sorted(set(raw) - _TOP_KEYS)
    if unknown:
        raise InputError(f"plan: {unknown_name_message('key', unknown[0], sorted(_TOP_KEYS))}")
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
    _registered(models, datasets, experiments)
    for kind, tables in (("experiments", experiments), ("evals", evals)):
        for name, table in tables.items():
            for wanted in _strings(table.get("models", []), f"{kind}.{name}.models"):
                if wanted not in models:
                    raise InputError(f"plan: {kind}.{name}.models: "
                                     f"{unknown_name_message('model', wanted, sorted(models))} of the plan")
    steps = raw.get("steps", [])
    if not isinstance(steps, list) or not all(isinstance(s, dict) and "name" in s and "args" in s for s in steps):
        raise InputError("plan: every [[steps]] needs name and args")
    for s in steps:
        _keys(s, "steps", f"steps {s['name']!r}")
    for name, m in models.items():
        run = m.get("run", [])
        if isinstance(run, dict):
            for experiment, extra in run.items():
                _strings(extra, f"models.{name}.run.{experiment}")
                if experiment not in experiments:
                    raise InputError(f"plan: models.{name}.run.{experiment}: no [experiments.{experiment}] in the plan")
    shards = raw.get("shards", 1)
    if not isinstance(shards, int) or isinstance(shards, bool) or shards < 1:
        raise InputError(f"plan: shards must be a positive integer, got {shards!r}")
    return SweepPlan(Path(where), models, datasets, experiments, steps, shards, evals)


def _registered(models: Mapping[str, Mapping[str, Any]], datasets: Mapping[str, Mapping[str, Any]],
                experiments: Mapping[str, Mapping[str, Any]]) -> None:
    """Refuse a model, dataset or experiment vlprobe does not know (registry names, nothing imported)."""
    from vlprobe.cli.experiments import ELSEWHERE
    from vlprobe.registry import DATASETS, EXPERIMENTS, MODELS

    for name, m in models.items():
        if "model" not in m:
            raise InputError(f"plan: models.{name} needs model = \"<registered model>\"")
        if str(m["model"]) not in MODELS:
            raise InputError(f"plan: models.{name}.model: {MODELS.unknown_message(str(m['model']))}")
    for name, d in datasets.items():
        registered = str(d.get("dataset", name))
        if registered not in DATASETS:
            hint = "" if "dataset" in d else " (the table's name; set dataset = \"...\" when it is another)"
            raise InputError(f"plan: datasets.{name}: {DATASETS.unknown_message(registered)}{hint}")
    runnable = sorted(n for n in EXPERIMENTS.names() if n not in ELSEWHERE)
    for name in experiments:
        if name not in runnable:
            raise InputError(f"plan: experiments.{name}: {unknown_name_message('experiment', name, runnable)} "
                             "(benchmarks go in [evals.NAME])")


def _eval_benchmarks() -> tuple[str, ...]:
    from vlprobe.experiments.benchmark_eval import BENCHMARKS

    return BENCHMARKS


def _cost(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise InputError(f"plan: {where} must be a number of seconds >= 0, got {value!r}")
    return float(value)


def _minutes(*tables: tuple[Mapping[str, Any], str]) -> float | None:
    """The largest ``timeout_min`` the tables give (None when none does)."""
    got: list[float] = []
    for table, where in tables:
        if "timeout_min" in table:
            value = table["timeout_min"]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise InputError(f"plan: {where}.timeout_min must be a number of minutes > 0, got {value!r}")
            got.append(float(value))
    return max(got) if got else None


def _run_args(model: Mapping[str, Any], mname: str, experiment: str) -> list[str]:
    """A model's extra arguments of its ``experiment`` runs: ``run`` as a list (every run) or a
    table experiment -> list."""
    run = model.get("run", [])
    if isinstance(run, dict):
        return _strings(run.get(experiment, []), f"models.{mname}.run.{experiment}")
    return _strings(run, f"models.{mname}.run")


def cache_state(path: str, shard: str) -> str:
    """``""`` when ``path`` is a complete cache of ``shard`` (a step's ``done`` check)."""
    from vlprobe.extract.cache.merge import shard_state

    return shard_state(path, shard)


def _in_shards(
    name: str, shards: int, args: Sequence[str], merge: tuple[str, ...], after: tuple[str, ...], *, group: str,
    cost: float, merge_cost: float = 1.0, exclusive: str = "", out: Path | None = None, owns: Owned | None = None,
    timeout_min: float | None = None,
) -> list[Step]:
    """The steps of one command, ``args`` (``--out out`` added when ``out`` is given: a cache,
    each step's done check): the step ``name``, or with ``shards`` > 1 the steps ``"<name> k/N"``
    (``--shard k/N``, each into its shard file of ``out``) and then ``merge`` as ``name`` (no GPU;
    ``exclusive``: it writes what the whole command would; ``owns``: the runs it records, which
    its shards own too: the first step of a new key to start removes the earlier run, before any
    shard writes a score file of the run's name that the merge would otherwise remove)."""
    runs = owns.runs if owns is not None else ()

    def done(path: Path | None, shard: str) -> Any:
        return functools.partial(cache_state, str(path), shard) if path is not None else None

    def files(path: Path | None) -> tuple[str, ...]:
        return (str(path),) if path is not None else ()

    if shards == 1:
        whole = (*args, "--out", str(out)) if out is not None else tuple(args)
        return [Step(name, whole, after, group=group, cost=cost, exclusive=exclusive, done=done(out, "0/1"),
                     owns=Owned(files(out), runs), timeout_min=timeout_min)]
    parts = []
    for k in range(shards):
        part = shard_path(out, k, shards) if out is not None else None
        parts.append(Step(f"{name} {k}/{shards}", (*args, "--shard", f"{k}/{shards}",
                                                      *(("--out", str(part)) if part is not None else ())),
                          after, group=group, cost=cost, done=done(part, f"{k}/{shards}"),
                          owns=Owned(files(part), runs), timeout_min=timeout_min))
    return [*parts, Step(name, merge, tuple(p.name for p in parts), group=group, cost=merge_cost,
                         exclusive=exclusive, gpu=False, done=done(out, "0/1"), owns=Owned(files(out), runs))]


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
    """The plan's steps (module docstring), in an order where each comes after its inputs; every
    input they read is checked (:func:`check_inputs`)."""
    out = plan.out
    steps: list[Step] = []
    for s in plan.steps:
        where = f"steps {s['name']!r}"
        steps.append(Step(str(s["name"]), tuple(_strings(s["args"], f"{where} args")),
                          tuple(_strings(s.get("after", []), f"{where} after")), group=str(s.get("group", "steps")),
                          cost=_cost(s.get("cost", 1.0), f"{where} cost"), gpu=_flag(s.get("gpu", True), f"{where} gpu"),
                          timeout_min=_minutes((s, where))))
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
                                group="extract", cost=3.0, out=cache,
                                timeout_min=_minutes((m, f"models.{mname}"), (d, f"datasets.{dname}")))
            for ename, e in plan.experiments.items():
                if not _wanted(e, mname, f"experiments.{ename}.models"):
                    continue
                run = ["run", ename, "--cache", str(cache), "--out", str(results[dname]), "--name", mname,
                       *_strings(e.get("args", []), f"experiments.{ename}.args"), *_run_args(m, mname, ename)]
                name = f"{ename} {pair}"
                steps.append(Step(name, tuple(run), tuple(extracted), group="experiments",
                                  cost=_cost(e.get("cost", 1.0), f"experiments.{ename}.cost"),
                                  exclusive=f"{ename} {dname}", owns=Owned(runs=((str(results[dname] / ename), mname),)),
                                  timeout_min=_minutes((e, f"experiments.{ename}"))))
                runs.append(name)
                by_dataset[dname].append(name)
    for ename, e in plan.evals.items():
        results[ename] = _under(out, e.get("results", f"results/{ename}"), f"evals.{ename}.results")
        by_dataset[ename] = []
        benchmark = str(e.get("benchmark", ename))
        for mname, m in plan.models.items():
            if not _wanted(e, mname, f"evals.{ename}.models"):
                continue
            args = ["eval", benchmark, "--model", str(m["model"]), "--name", mname, "--quiet"]
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
                                exclusive=f"eval {ename}", owns=Owned(runs=((str(results[ename] / benchmark), mname),)),
                                timeout_min=_minutes((e, f"evals.{ename}")))
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
    ordered = ordered_steps(steps)  # ([[steps]] may wait for the sweep's own steps)
    check_inputs(ordered, out)
    return ordered


def _looks_local(spec: str) -> bool:
    """Whether a checkpoint spec names a local path rather than a hub id (as the loaders decide)."""
    return spec.startswith((".", "/", "~")) or os.sep + os.sep in spec or spec.count("/") > 1


def check_inputs(steps: Sequence[Step], root: Path) -> None:
    """Refuse, in one line, an input of a step (:data:`INPUT_OPTIONS`) that does not exist and that
    no step writes (inside no step's ``--out``); a spec of a hub option that may be a hub id is
    left to the step."""
    made = made_places(steps, root)
    for s in steps:
        for option, value in command_tokens(s.args):
            if option not in INPUT_OPTIONS:
                continue
            path = value.split("=", 1)[1] if option == "--image-root" and "=" in value else value
            if not path or os.path.exists(os.path.expanduser(path)):
                continue
            if option in _HUB_OPTIONS and not _looks_local(path):
                continue
            if inside(canonical(path, root), made):
                continue
            raise InputError(f"plan: step {s.name!r} reads {option} {path!r}, which does not exist and which no "
                             "step of the plan writes (paths in arguments are taken from the folder the sweep runs in)")
