"""The known-answer testbed end to end (``probe fixtures testbed``, ``make demo``).

Every step is an ordinary ``probe`` command, printed as it runs, so the run doubles as a worked
example:

1. data: a synthetic training split and an evaluation dataset (disjoint seed streams), and oracle
   region features for both;
2. models: a small CLIP trained with word order kept (``clip-trained``), its order-blind control
   (``clip-bow``: its image tower, frozen, with a text tower blind to word order by
   construction), with ``shuffle_control`` the CLIP trained on shuffled words (``clip-shuffle``),
   the same CLIP untrained (``clip-random``), an LXMERT trained on the oracle regions with the
   swaps as hard negatives (``lxmert-trained``: it binds), one trained with other items'
   captions only (``lxmert-objects``: which objects, not which goes with which) and untrained
   (``lxmert-random``). Models and training data live
   in ``models_dir`` and are reused by later runs while their training settings and data are the
   same (the train commands compare the recorded key);
3. per model: ``probe extract`` over the evaluation dataset with its caption variants, then
   ``probe run`` winoground-scores, recall (CLIP), separability, task-adaptation, variant-probe and
   variant-similarity, written under ``OUT/results/<experiment>/<model>.csv`` (the caches:
   ``OUT/caches/<model>-winoground.h5``);
4. the known-answer report (:mod:`vlprobe.results.known_answers`, ``probe fixtures
   known-answers``) in ``OUT/report/``: the table, the checks, ``comparison.png`` and
   ``summary.txt``, beside ``probe report``'s page of every result (``report.html``, which opens
   with the known answers' verdicts) and ``probe collect``'s table of every run
   (``OUT/results.csv``).

The run is a ``probe sweep`` plan (:func:`testbed_plan`, written to ``OUT/plan.toml``;
:mod:`vlprobe.launch.sweep`): the data and training commands are its ``[[steps]]``, the six
(seven) models x the evaluation dataset x the experiments its tables, and it runs on the sweep's step
runner (:func:`vlprobe.launch.steps.run_steps`): each step a ``probe`` process on this machine
(``jobs`` at once, one torch thread each) that starts as soon as the steps it waits for are done,
the one with the longest chain of work behind it first: LXMERT trains while the CLIPs train and
are probed, and the two cores stay busy to the end. The runs of one experiment never overlap
(they share its ``manifest.json``). ``probe fixtures testbed`` does every step again
(``results/``, ``report/``, ``caches/`` and the record of finished steps are cleared; the
trained models are reused by the train commands themselves); ``probe sweep OUT/plan.toml`` runs
the same plan and resumes it (a finished step is skipped). The probe experiments run with
explicit small settings (:data:`QUICK_SETTINGS`: fewer seeds, epochs and a narrower MLP than the
paper's defaults) so the whole run fits in minutes on two CPU cores; the report says so.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlprobe.launch.steps import Step
from vlprobe.validation import InputError, check_positive_int, check_seed

__all__ = ["DATASET", "GROUPS", "PLAN_FILE", "QUICK_SETTINGS", "KnownAnswerConfig", "plan_commands", "report_settings", "run_plan",
           "run_testbed", "start_testbed", "testbed_plan", "write_known_answers", "write_plan"]

#: The models whose separability also gets the held-out accuracy (at the last layer only: one more
#: fit per point), and those settings.
HELD_OUT_MODELS = ("clip-trained", "clip-bow")
HELD_OUT_SETTINGS = ["--held-out", "--held-out-layers", "-1"]

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
        Training steps (the CLIPs, the LXMERT that binds).
    objects_steps : int
        Training steps of the object-only LXMERT (``lxmert-objects``: other items' captions as
        the only negatives).
    shuffle_control : bool
        Also train and probe the shuffled-words CLIP (``clip-shuffle``), a second control beside
        the order-blind ``clip-bow``.
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
    objects_steps: int = 100
    shuffle_control: bool = False
    jobs: int = 2

    @property
    def models(self) -> Path:
        return Path(self.models_dir) if self.models_dir is not None else Path(self.out) / "models"


def _s(value: Any) -> str:
    return str(value)


#: Groups of the plan's steps, in the order the timings list them.
GROUPS = ("data", "train", "extract", "experiments", "collect", "report")

#: CPU seconds of each kind of step at the default settings (measured on 2 shared cores; a
#: training step scales with its steps). Used only to order the steps, never to time out.
_COST = {
    "train dataset": 5.0, "train regions": 6.0, "eval dataset": 1.0, "eval regions": 1.0,
    "train clip": 85.0, "train bow": 30.0, "train lxmert": 115.0, "untrained": 1.5, "extract": 3.0,
    "separability": 10.0, "variant-probe": 4.5, "task-adaptation": 2.5, "variant-similarity": 0.5,
    "winoground-scores": 0.2, "recall": 0.2,
}


#: The evaluation dataset's name in the plan (its pairs are ``<model>-winoground``).
DATASET = "winoground"


def testbed_plan(config: KnownAnswerConfig) -> dict[str, Any]:
    """The run as a ``probe sweep`` plan (:mod:`vlprobe.launch.sweep`): the data and training
    commands as ``[[steps]]`` (grouped ``data`` and ``train``, each with its estimated CPU seconds
    as its cost), the five models, the evaluation dataset (results in ``OUT/results``, the
    HTML report ``OUT/report/report.html``), the experiments with :data:`QUICK_SETTINGS`, and the
    known-answer report as a last step after ``collect``. Every path is absolute, so the plan runs
    from any folder. The training split's steps are left out when ``models_dir`` already holds it
    (rewriting it would give the same bytes).

    Returns
    -------
    dict
        The plan's tables, as :func:`vlprobe.io.toml.dumps` writes them.
    """
    out, models, seed = Path(config.out).resolve(), config.models.resolve(), _s(config.seed)
    train, evald = models / "train-data", out / "data"
    train_regions, eval_regions = models / "train-regions.h5", out / "regions.h5"
    steps: list[dict[str, Any]] = []

    def add(name: str, group: str, args: list[str], after: Sequence[str] = (), cost: float = 1.0) -> None:
        step = {"name": name, "group": group, "args": args, "after": list(after), "cost": round(cost, 3)}
        if group != "train":  # the synthetic data and the report use no GPU
            step["gpu"] = False
        steps.append(step)

    ready = _training_data_ready(config)
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
            "--steps", _s(config.clip_steps), "--quiet"]
    lxmert_base = ["fixtures", "train", "lxmert", "--data-dir", _s(train), "--regions", _s(train_regions), "--seed",
                   seed, "--device", "cpu", "--quiet"]
    lxmert = [*lxmert_base, "--steps", _s(config.lxmert_steps)]
    # which objects a caption names, and nothing that would show it a swap: no contrastive loss (its
    # batch holds both images of an item) and no grounding
    lxmert_objects = [*lxmert_base, "--steps", _s(config.objects_steps), "--negatives", "other-items", "--itc-weight",
                      "0", "--grounding-weight", "0"]
    clip_cost = _COST["train clip"] * config.clip_steps / 400
    bow_cost = _COST["train bow"] * config.clip_steps / 400
    lxmert_cost = _COST["train lxmert"] * config.lxmert_steps / 400
    objects_cost = _COST["train lxmert"] * config.objects_steps / 400
    on_data = [] if ready else ["train dataset"]
    on_regions = [] if ready else ["train regions"]
    trainers = {
        "clip-trained": ([*clip, "--out", _s(models / "clip-trained")], on_data, clip_cost),
        # the trained CLIP's image tower, frozen, and a text tower blind to word order: they differ in that only
        "clip-bow": ([*clip, "--text-tower", "bag-of-words", "--image-tower", _s(models / "clip-trained"),
                      "--out", _s(models / "clip-bow")], ["train clip-trained"], bow_cost),
        **({"clip-shuffle": ([*clip, "--text-order", "shuffle", "--out", _s(models / "clip-shuffle")], on_data,
                             clip_cost)} if config.shuffle_control else {}),
        "clip-random": ([*clip, "--untrained", "--out", _s(models / "clip-random")], on_data, _COST["untrained"]),
        "lxmert-trained": ([*lxmert, "--out", _s(models / "lxmert-trained")], on_regions, lxmert_cost),
        "lxmert-objects": ([*lxmert_objects, "--out", _s(models / "lxmert-objects")], on_regions, objects_cost),
        "lxmert-random": ([*lxmert, "--untrained", "--out", _s(models / "lxmert-random")], on_regions,
                          _COST["untrained"]),
    }
    for name, (command, after, cost) in trainers.items():
        add(f"train {name}", "train", command, after, cost)
    poolings = ["--poolings", "cls,mean,max,pooled", "--device", "cpu"]
    lang = ["--streams", "lang"]
    plan_models: dict[str, dict[str, Any]] = {}
    for name in trainers:
        family = "openclip" if name == "clip-bow" else name.split("-")[0]
        entry: dict[str, Any] = {"model": family, "checkpoint": _s(models / name)}
        if name.startswith("clip"):
            entry["extract"] = poolings
            entry["after"] = [f"train {name}"]
            if name in HELD_OUT_MODELS:
                entry["run"] = {"separability": HELD_OUT_SETTINGS}
        else:
            entry["extract"] = ["--regions", _s(eval_regions), "--pair-plan", "item", *poolings]
            entry["after"] = [f"train {name}", "eval regions"]
            entry["run"] = {e: lang for e in ("separability", "task-adaptation", "variant-probe")}
        plan_models[name] = entry
    experiments: dict[str, dict[str, Any]] = {
        "winoground-scores": {},
        "recall": {"models": [m for m in trainers if m.startswith("clip")]},
        "separability": {"args": QUICK_SETTINGS["separability"]},
        "task-adaptation": {"args": ["--device", "cpu", *QUICK_SETTINGS["task-adaptation"]]},
        "variant-probe": {"args": ["--device", "cpu", *QUICK_SETTINGS["variant-probe"]]},
        "variant-similarity": {},
    }
    for experiment, table in experiments.items():
        table["cost"] = _COST[experiment]
    add("known answers", "report", ["fixtures", "known-answers", "--out", _s(out), *_settings_args(config)],
        ["collect"])
    return {
        "out": _s(out),
        "models": plan_models,
        "datasets": {DATASET: {"data_dir": _s(evald), "extract": ["--variants", _s(evald / "variants.jsonl")],
                               "after": ["eval dataset"], "results": "results", "report": "report/report.html",
                               # the page opens with the known answers' verdicts
                               "report_args": ["--known-answers", _s(out / "report" / "known_answers.json")],
                               "report_after": ["known answers"]}},
        "experiments": experiments,
        "steps": steps,
    }


def _settings_args(config: KnownAnswerConfig) -> list[str]:
    """The run's settings as ``probe fixtures known-answers`` takes them (its report's note)."""
    return ["--seed", _s(config.seed), "--train-items", _s(config.train_items), "--eval-items",
            _s(config.eval_items), "--clip-steps", _s(config.clip_steps), "--lxmert-steps", _s(config.lxmert_steps),
            "--objects-steps", _s(config.objects_steps)]


def plan_commands(config: KnownAnswerConfig) -> list[Step]:
    """The steps of :func:`testbed_plan` as ``probe sweep`` runs them (a step starts as soon as its
    inputs exist, so the CLIP models are extracted and probed while LXMERT still trains).

    Returns
    -------
    list of Step
        One ``probe`` command each, grouped by :data:`GROUPS`, with its estimated CPU seconds as
        its cost.
    """
    from vlprobe.launch.sweep import parse_plan, plan_steps

    return plan_steps(parse_plan(testbed_plan(config), Path(config.out)))


def write_known_answers(config: KnownAnswerConfig) -> dict[str, Any]:
    """``probe fixtures known-answers``: the known-answer report of a run's results
    (``OUT/results``, ``OUT/data``) into ``OUT/report``, its note and seeds from ``config``'s
    settings; returns :func:`vlprobe.results.known_answers.write_report`'s dict."""
    from vlprobe.results.known_answers import write_report

    out = Path(config.out)
    for sub in ("results", "data"):
        if not (out / sub).is_dir():
            raise InputError(f"out: {str(out)!r} holds no {sub}/ folder: not a testbed run's output")
    seeds, note = report_settings(config)
    return write_report(out / "results", out / "data", out / "report", seeds=seeds, note=note)


def report_settings(config: KnownAnswerConfig) -> tuple[dict[str, int], str]:
    """The seeds and the note the known-answer report records for a run with ``config``."""
    note = (
        "Probe settings are the testbed's small ones, not the paper defaults: "
        + "; ".join(f"{k} {' '.join(v)}" for k, v in QUICK_SETTINGS.items())
        + f". Models trained with seed {config.seed} ({config.clip_steps} CLIP steps, {config.lxmert_steps} LXMERT steps,"
        f" {config.objects_steps} steps of the object-only LXMERT)"
        f" on {config.train_items} training items; evaluated on {config.eval_items} items."
    )
    seeds = {"data_seed": config.seed, "train_seed": config.seed, "separability_control_seeds": 2,
             "task_adaptation_seeds": 3, "variant_probe_seeds": 2, "split_seed": 0}
    return seeds, note


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
    """Run the whole testbed (module docstring): write its plan to ``OUT/plan.toml`` and run it
    with ``probe sweep``'s runner; return the report and the timings.

    Returns
    -------
    dict
        ``report`` (see :func:`vlprobe.results.known_answers.write_report`), ``timings`` (see
        :func:`vlprobe.launch.steps.run_steps`), ``out``, ``plan`` (the plan file).

    Raises
    ------
    vlprobe.launch.steps.StepFailed, vlprobe.launch.steps.StepCrashed
        A step refused its input, or crashed (after the running ones finished; their work is kept: a rerun reuses the
        models).
    """
    from vlprobe.launch.sweep import run_sweep
    from vlprobe.results.known_answers import read_report

    plan = start_testbed(config, echo=echo)
    timings = run_sweep(plan, jobs=config.jobs, threads=1, retries=0, echo=echo, show_output=True)
    return {"report": read_report(Path(plan).parent / "report"), "timings": timings, "out": plan.parent,
            "plan": plan}


def start_testbed(config: KnownAnswerConfig, *, echo: Any = print) -> Path:
    """Check ``config``, claim ``OUT`` (new, empty or an earlier testbed's), clear what a run
    replaces (``results/``, ``report/``, ``caches/``, ``state/``) and write the plan; return
    ``OUT/plan.toml``."""
    from vlprobe.io.ownership import claim_folder

    for name in ("train_items", "eval_items", "clip_steps", "lxmert_steps", "objects_steps", "jobs"):
        check_positive_int(getattr(config, name), name)
    check_seed(config.seed)
    out = claim_folder(config.out, kind=TESTBED_KIND, recognise=_earlier_testbed)
    for sub in ("results", "report", "caches", "state"):  # state: every step runs again
        _clear(out / sub)
    if _training_data_ready(config):
        echo(f"reusing the training split and its oracle regions in {config.models}")
    return write_plan(config, out / PLAN_FILE)


#: The plan file a run writes into its output folder (``probe sweep OUT/plan.toml`` runs it again, resuming).
PLAN_FILE = "plan.toml"


def write_plan(config: KnownAnswerConfig, path: str | os.PathLike[str]) -> Path:
    """Write :func:`testbed_plan` as TOML to ``path`` (atomically; a file vlprobe did not write is
    refused); return the path."""
    from vlprobe.io.atomic import atomic_write
    from vlprobe.io.toml import dumps

    path = Path(path)
    text = "# The known-answer testbed (probe fixtures testbed) as a probe sweep plan; written by vlprobe.\n" + dumps(
        testbed_plan(config))
    with atomic_write(path, kind="sweep-plan") as fh:
        fh.write(text)
    return path


def run_plan(steps: Sequence[Step], jobs: int, root: Path, echo: Any = print) -> dict[str, Any]:
    """Run some testbed steps (a part of :func:`plan_commands`) as :func:`run_testbed` runs them:
    ``jobs`` ``probe`` processes at once, one torch thread each, logs in ``root/logs``, no retries
    (the steps are deterministic: a failure would repeat), each step's command and output echoed.

    Returns
    -------
    dict
        :func:`vlprobe.launch.steps.run_steps`'s timings.
    """
    from vlprobe.launch.executors import local_executor
    from vlprobe.launch.steps import run_steps

    with local_executor(jobs=jobs, threads=1) as executor:
        return run_steps(steps, executor, root, retries=0, echo=echo, show_output=True)
