"""The known-answer testbed end to end (``probe fixtures testbed``, ``make demo``).

Every step is an ordinary ``probe`` command, printed as it runs, so the run doubles as a worked
example:

1. data: a synthetic training split and an evaluation dataset (disjoint seed streams), and oracle
   region features for both;
2. models: a small CLIP trained with word order kept (``clip-trained``) and with shuffled words
   (``clip-shuffle``), the same CLIP untrained (``clip-random``), an LXMERT trained on the oracle
   regions (``lxmert-trained``) and untrained (``lxmert-random``). Models and training data live
   in ``models_dir`` and are reused by later runs while their training settings and data are the
   same (the train commands compare the recorded key);
3. per model: ``probe extract`` over the evaluation dataset with its caption variants, then
   ``probe run`` winoground-scores, recall (CLIP), separability, task-adaptation, variant-probe and
   variant-similarity, written under ``OUT/results/<experiment>/<model>.csv``;
4. the known-answer report (:mod:`vlprobe.results.known_answers`) in ``OUT/report/``: the table,
   the checks, ``comparison.png`` and ``summary.txt``.

The steps (:func:`plan_commands`) are a plan run by the step runner of ``probe sweep`` and
``probe launch`` (:func:`vlprobe.launch.steps.run_steps`): each step a ``probe`` process on this
machine (``jobs`` at once, one torch thread each) that starts as soon as the steps it waits for
are done, the one with the longest chain of work behind it first: LXMERT trains while the CLIPs
train and are probed, and the two cores stay busy to the end. The runs of one experiment never
overlap (they share its ``manifest.json``). Each run does every step again (``results/``,
``report/`` and ``caches/`` are replaced; the trained models are reused by the train commands
themselves). The probe experiments run with explicit small settings (:data:`QUICK_SETTINGS`:
fewer seeds, epochs and a narrower MLP than the paper's defaults) so the whole run fits in
minutes on two CPU cores; the report says so.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlprobe.launch.steps import Step
from vlprobe.validation import check_positive_int, check_seed

__all__ = ["GROUPS", "QUICK_SETTINGS", "KnownAnswerConfig", "plan_commands", "run_testbed"]

#: Probe settings of the testbed runs (the paper's defaults take far longer; see the report note).
#: Separability fits raw states (``--scale none``) for every model, so that the CLIP and LXMERT
#: margins are in the same units (the paper's ``probe_clip.py`` divided CLIP's states by 100).
QUICK_SETTINGS: dict[str, list[str]] = {
    "separability": ["--seeds", "2", "--scale", "none"],
    "task-adaptation": ["--seeds", "3", "--depth", "2", "--width", "128", "--epochs", "100", "--lr", "1e-3"],
    "variant-probe": ["--seeds", "2", "--depth", "2", "--width", "128", "--epochs", "60", "--lr", "1e-3",
                      "--draws", "2"],
}


@dataclass(frozen=True)
class KnownAnswerConfig:
    """One testbed run.

    Attributes
    ----------
    out : Path
        Output root: ``data/`` (evaluation set), ``regions.h5``, ``caches/``, ``results/``,
        ``report/``, ``logs/``. ``results/`` and ``report/`` are replaced by every run. It must be
        new, empty or an earlier testbed's: a folder vlprobe did not make is refused.
    models_dir : Path, optional
        Trained models, training split and its regions, kept between runs (default ``out/models``).
    train_items, eval_items : int
        Items of the training split and of the evaluation dataset.
    seed : int
        Seed of the data (both splits) and of every model's training.
    clip_steps, lxmert_steps : int
        Training steps.
    jobs : int
        Steps at once (``probe`` processes).
    """

    out: Path
    models_dir: Path | None = None
    train_items: int = 1500
    eval_items: int = 100
    seed: int = 0
    clip_steps: int = 400
    lxmert_steps: int = 400
    jobs: int = 2

    @property
    def models(self) -> Path:
        return Path(self.models_dir) if self.models_dir is not None else Path(self.out) / "models"


def _s(value: Any) -> str:
    return str(value)


#: Groups of the plan's steps, in the order the timings list them.
GROUPS = ("data", "train", "extract and probe")

#: CPU seconds of each kind of step at the default settings (measured on 2 shared cores; a
#: training step scales with its steps). Used only to order the steps, never to time out.
_COST = {
    "train dataset": 5.0, "train regions": 6.0, "eval dataset": 1.0, "eval regions": 1.0,
    "train clip": 85.0, "train lxmert": 115.0, "untrained": 1.5, "extract": 3.0,
    "separability": 10.0, "variant-probe": 4.5, "task-adaptation": 2.5, "variant-similarity": 0.5,
    "winoground-scores": 0.2, "recall": 0.2,
}


def plan_commands(config: KnownAnswerConfig) -> list[Step]:
    """The steps of a run and what each waits for (a step starts as soon as its inputs exist, so
    the CLIP models are extracted and probed while LXMERT still trains).

    Returns
    -------
    list of Step
        One ``probe`` command each, grouped by :data:`GROUPS`, with its estimated CPU seconds as
        its cost; in an order where every step comes after the steps it waits for.
    """
    out, models, seed = Path(config.out), config.models, _s(config.seed)
    train, evald = models / "train-data", out / "data"
    train_regions, eval_regions = models / "train-regions.h5", out / "regions.h5"
    caches, results = out / "caches", out / "results"
    q = ("--quiet",)
    steps: list[Step] = []

    def add(name: str, group: str, args: list[str], after: Sequence[str] = (), cost: float = 1.0,
            exclusive: str = "") -> None:
        steps.append(Step(name, tuple(args), tuple(after), group, cost, exclusive))

    ready = _training_data_ready(config)  # deterministic files: rewriting them would give the same bytes
    if not ready:
        add("train dataset", "data", ["fixtures", "dataset", "--split", "train", "--n-items", _s(config.train_items),
                                      "--seed", seed, "--out", _s(train)],
            cost=_COST["train dataset"] * config.train_items / 1500)
        add("train regions", "data", ["fixtures", "regions", "--oracle", "--data-dir", _s(train), "--out",
                                      _s(train_regions), "--seed", seed, "--dtype", "float16"], ["train dataset"],
            cost=_COST["train regions"] * config.train_items / 1500)
    add("eval dataset", "data", ["fixtures", "dataset", "--n-items", _s(config.eval_items), "--seed", seed,
                                 "--out", _s(evald)], cost=_COST["eval dataset"])
    add("eval regions", "data", ["fixtures", "regions", "--oracle", "--data-dir", _s(evald), "--out",
                                 _s(eval_regions), "--seed", seed], ["eval dataset"], cost=_COST["eval regions"])
    clip = ["fixtures", "train", "clip", "--data-dir", _s(train), "--seed", seed, "--device", "cpu",
            "--steps", _s(config.clip_steps), *q]
    lxmert = ["fixtures", "train", "lxmert", "--data-dir", _s(train), "--regions", _s(train_regions), "--seed", seed,
              "--device", "cpu", "--steps", _s(config.lxmert_steps), *q]
    clip_cost = _COST["train clip"] * config.clip_steps / 400
    lxmert_cost = _COST["train lxmert"] * config.lxmert_steps / 400
    on_data = [] if ready else ["train dataset"]
    on_regions = [] if ready else ["train regions"]
    trainers = {
        "clip-trained": ([*clip, "--out", _s(models / "clip-trained")], on_data, clip_cost),
        "clip-shuffle": ([*clip, "--text-order", "shuffle", "--out", _s(models / "clip-shuffle")], on_data, clip_cost),
        "clip-random": ([*clip, "--untrained", "--out", _s(models / "clip-random")], on_data, _COST["untrained"]),
        "lxmert-trained": ([*lxmert, "--out", _s(models / "lxmert-trained")], on_regions, lxmert_cost),
        "lxmert-random": ([*lxmert, "--untrained", "--out", _s(models / "lxmert-random")], on_regions,
                          _COST["untrained"]),
    }
    for name, (command, after, cost) in trainers.items():
        add(f"train {name}", "train", command, after, cost)
    for name in trainers:
        cache = _s(caches / f"{name}.h5")
        run = ["--cache", cache, "--out", _s(results), "--name", name]
        if name.startswith("clip"):
            extract = ["extract", "--model", "clip", "--checkpoint", _s(models / name), "--poolings", "cls,mean,max,pooled"]
            stream: list[str] = []
            inputs = ["eval dataset"]
        else:
            extract = ["extract", "--model", "lxmert", "--checkpoint", _s(models / name), "--regions", _s(eval_regions),
                       "--pair-plan", "item", "--poolings", "cls,mean,max,pooled"]
            stream = ["--streams", "lang"]
            inputs = ["eval dataset", "eval regions"]
        add(f"extract {name}", "extract and probe", [
            *extract, "--dataset", "winoground", "--data-dir", _s(evald), "--variants", _s(evald / "variants.jsonl"),
            "--device", "cpu", "--out", cache, *q], [f"train {name}", *inputs], _COST["extract"])
        experiments: list[tuple[str, list[str]]] = [("winoground-scores", [])]
        if name.startswith("clip"):
            experiments.append(("recall", []))
        experiments += [
            ("separability", [*stream, *QUICK_SETTINGS["separability"]]),
            ("task-adaptation", [*stream, "--device", "cpu", *QUICK_SETTINGS["task-adaptation"]]),
            ("variant-probe", [*stream, "--device", "cpu", *QUICK_SETTINGS["variant-probe"]]),
            ("variant-similarity", []),
        ]
        for experiment, extra in experiments:
            add(f"{experiment} {name}", "extract and probe", ["run", experiment, *run, *extra], [f"extract {name}"],
                _COST[experiment], exclusive=experiment)
    return steps


def _training_data_ready(config: KnownAnswerConfig) -> bool:
    """Whether ``models_dir`` holds the training split (and its regions) this config asks for."""
    from vlprobe.data.synthetic import synthetic_provenance

    want = {"n_items": config.train_items, "seed": config.seed, "image_size": 64, "split": "train"}
    models = config.models
    return synthetic_provenance(models / "train-data") == want and (models / "train-regions.h5").is_file()


#: What a testbed's output folder is listed as among the files vlprobe wrote (:mod:`vlprobe.io`).
TESTBED_KIND = "testbed"


def _earlier_testbed(out: Path) -> bool:
    """A testbed folder made before folders were listed: it holds the log of the testbed's first
    stage (``logs/data.0.log``), written before anything else."""
    return (out / "logs" / "data.0.log").is_file()


def _clear(path: Path) -> None:
    """Remove a results folder this run replaces (a folder of the testbed's own making)."""
    import shutil

    if path.exists():
        shutil.rmtree(path)


def run_testbed(config: KnownAnswerConfig, *, echo: Any = print) -> dict[str, Any]:
    """Run the whole testbed (module docstring); return the report and the timings.

    Returns
    -------
    dict
        ``report`` (see :func:`vlprobe.results.known_answers.write_report`), ``timings`` (see
        :func:`run_plan`; with ``report``: its wall and CPU seconds), ``out``.
    """
    from vlprobe.results.known_answers import write_report

    for name in ("train_items", "eval_items", "clip_steps", "lxmert_steps", "jobs"):
        check_positive_int(getattr(config, name), name)
    check_seed(config.seed)
    from vlprobe.io.ownership import claim_folder

    # OUT's results, report and caches are cleared below: only a folder of the testbed's own.
    out = claim_folder(config.out, kind=TESTBED_KIND, recognise=_earlier_testbed)
    for sub in ("results", "report", "caches", "state"):  # state: every step runs again
        _clear(out / sub)
    (out / "caches").mkdir()  # extract writes its cache into an existing folder
    if _training_data_ready(config):
        echo(f"reusing the training split and its oracle regions in {config.models}")
    timings = run_plan(plan_commands(config), config.jobs, out, echo)
    note = (
        "Probe settings are the testbed's small ones, not the paper defaults: "
        + "; ".join(f"{k} {' '.join(v)}" for k, v in QUICK_SETTINGS.items())
        + f". Models trained with seed {config.seed} ({config.clip_steps} CLIP steps, {config.lxmert_steps} LXMERT steps)"
        f" on {config.train_items} training items; evaluated on {config.eval_items} items."
    )
    seeds = {"data_seed": config.seed, "train_seed": config.seed, "separability_control_seeds": 2,
             "task_adaptation_seeds": 3, "variant_probe_seeds": 2, "split_seed": 0}
    wall, cpu = time.perf_counter(), time.process_time()
    report = write_report(out / "results", out / "data", out / "report", seeds=seeds, note=note)
    timings["report"] = {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu}
    return {"report": report, "timings": timings, "out": out}


def run_plan(steps: Sequence[Step], jobs: int, root: Path, echo: Any = print) -> dict[str, Any]:
    """Run testbed steps (all of :func:`plan_commands`, or a part) with the step runner: ``jobs``
    ``probe`` processes at once, one torch thread each, logs in ``root/logs``, no retries (the
    steps are deterministic: a failure would repeat). Each step's command and output are echoed.

    Returns
    -------
    dict
        :func:`vlprobe.launch.steps.run_steps`'s timings: ``steps``: name -> {group, start, end,
        wall, cpu, tries}; ``wall``.

    Raises
    ------
    vlprobe.launch.steps.StepFailed, vlprobe.launch.steps.StepCrashed
        A step refused its input, or crashed (after the running ones finished; their work is kept: a rerun reuses the
        models).
    """
    from vlprobe.launch.executors import local_executor
    from vlprobe.launch.steps import run_steps

    with local_executor(jobs=jobs, threads=1) as executor:
        return run_steps(steps, executor, root, retries=0, echo=echo, show_output=True)
