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
4. the known-answer report (:mod:`vlprobe.experiments.known_answers`) in ``OUT/report/``: the table,
   the checks, ``comparison.png`` and ``summary.txt``.

Independent commands run in ``jobs`` worker processes (one torch thread each). The probe
experiments run with explicit small settings (:data:`QUICK_SETTINGS`: fewer seeds, epochs and a
narrower MLP than the paper's defaults) so the whole run fits in minutes on two CPU cores; the
report says so.
"""

from __future__ import annotations

import contextlib
import io
import os
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlprobe.validation import InputError, check_positive_int, check_seed

__all__ = ["QUICK_SETTINGS", "KnownAnswerConfig", "plan_commands", "run_testbed"]

#: Probe settings of the testbed runs (the paper's defaults take far longer; see the report note).
QUICK_SETTINGS: dict[str, list[str]] = {
    "separability": ["--seeds", "2"],
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
        Worker processes.
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


def plan_commands(config: KnownAnswerConfig) -> list[tuple[str, list[tuple[str, list[list[str]]]]]]:
    """The commands of a run: stages of lanes; the lanes of a stage run in parallel, the commands
    of a lane in order. Each command is the argument list of ``probe``.

    Returns
    -------
    list of (stage name, list of (lane name, list of argument lists))
    """
    out, models, seed = Path(config.out), config.models, _s(config.seed)
    train, evald = models / "train-data", out / "data"
    train_regions, eval_regions = models / "train-regions.h5", out / "regions.h5"
    caches, results = out / "caches", out / "results"
    q = ["--quiet"]
    make_train = [["fixtures", "dataset", "--split", "train", "--n-items", _s(config.train_items), "--seed", seed,
                   "--out", _s(train)],
                  ["fixtures", "regions", "--oracle", "--data-dir", _s(train), "--out", _s(train_regions),
                   "--seed", seed, "--dtype", "float16"]]
    if _training_data_ready(config):  # deterministic files: rewriting them would give the same bytes
        make_train = []
    data = [
        *([("training split", make_train)] if make_train else []),
        ("evaluation set", [["fixtures", "dataset", "--n-items", _s(config.eval_items), "--seed", seed, "--out", _s(evald)],
                            ["fixtures", "regions", "--oracle", "--data-dir", _s(evald), "--out", _s(eval_regions),
                             "--seed", seed]]),
    ]
    clip = ["fixtures", "train", "clip", "--data-dir", _s(train), "--seed", seed, "--device", "cpu",
            "--steps", _s(config.clip_steps), *q]
    lxmert = ["fixtures", "train", "lxmert", "--data-dir", _s(train), "--regions", _s(train_regions), "--seed", seed,
              "--device", "cpu", "--steps", _s(config.lxmert_steps), *q]
    training = [
        ("clip-trained", [[*clip, "--out", _s(models / "clip-trained")]]),
        ("clip-shuffle", [[*clip, "--text-order", "shuffle", "--out", _s(models / "clip-shuffle")]]),
        ("lxmert-trained", [[*lxmert, "--out", _s(models / "lxmert-trained")]]),
        ("random weights", [[*clip, "--untrained", "--out", _s(models / "clip-random")],
                            [*lxmert, "--untrained", "--out", _s(models / "lxmert-random")]]),
    ]
    lanes = []
    for name in ("clip-trained", "clip-shuffle", "clip-random", "lxmert-trained", "lxmert-random"):
        cache = _s(caches / f"{name}.h5")
        run = ["--cache", cache, "--out", _s(results), "--name", name]
        if name.startswith("clip"):
            extract = ["extract", "--model", "clip", "--checkpoint", _s(models / name), "--poolings", "cls,mean,max,pooled"]
            per_model = [["run", "recall", *run]]
            stream: list[str] = []
        else:
            extract = ["extract", "--model", "lxmert", "--checkpoint", _s(models / name), "--regions", _s(eval_regions),
                       "--pair-plan", "item", "--poolings", "cls,mean,max,pooled"]
            per_model = []
            stream = ["--streams", "lang"]
        commands = [
            [*extract, "--dataset", "winoground", "--data-dir", _s(evald), "--variants", _s(evald / "variants.jsonl"),
             "--device", "cpu", "--out", cache, *q],
            ["run", "winoground-scores", *run],
            *per_model,
            ["run", "separability", *run, *stream, *QUICK_SETTINGS["separability"]],
            ["run", "task-adaptation", *run, *stream, "--device", "cpu", *QUICK_SETTINGS["task-adaptation"]],
            ["run", "variant-probe", *run, *stream, "--device", "cpu",
             *QUICK_SETTINGS["variant-probe"]],
            ["run", "variant-similarity", *run],
        ]
        lanes.append((name, commands))
    return [("data", data), ("train", training), ("extract and probe", lanes)]


def _training_data_ready(config: KnownAnswerConfig) -> bool:
    """Whether ``models_dir`` holds the training split (and its regions) this config asks for."""
    from vlprobe.data.synthetic import synthetic_provenance

    want = {"n_items": config.train_items, "seed": config.seed, "image_size": 64, "split": "train"}
    models = config.models
    return synthetic_provenance(models / "train-data") == want and (models / "train-regions.h5").is_file()


def _worker_init() -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch

    torch.set_num_threads(1)


def _run_lane(name: str, commands: Sequence[Sequence[str]], log: str) -> tuple[str, float, float, str]:
    """Run ``commands`` in this process, output into ``log``; raise on the first failure (an
    :class:`InputError` where the command refused its input)."""
    from vlprobe.cli import app

    wall, cpu = time.perf_counter(), time.process_time()
    lines = []
    with open(log, "w", encoding="utf-8") as fh:
        for args in commands:
            shown = "probe " + " ".join(args)
            lines.append(f"$ {shown}")
            fh.write(f"$ {shown}\n")
            fh.flush()
            buf = io.StringIO()
            t0, c0 = time.perf_counter(), time.process_time()
            with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
                rc = app(list(args), standalone_mode=False)
            text = buf.getvalue()
            took = f"({time.perf_counter() - t0:.1f} s, {time.process_time() - c0:.1f} s CPU)"
            fh.write(f"{text}{took}\n")
            fh.flush()
            lines += [f"  {line}" for line in text.splitlines() if line.strip()] + [f"  {took}"]
            if rc == 2:  # the command refused its input in one line: so does the testbed
                said = text.strip().splitlines()[-1] if text.strip() else ""
                raise InputError(f"testbed: `{shown}` was refused (see {log}): {said}")
            if rc not in (None, 0):
                raise RuntimeError(f"testbed: `{shown}` failed (exit {rc}); see {log}:\n{text.strip()}")
    return name, time.perf_counter() - wall, time.process_time() - cpu, "\n".join(lines)


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
        ``report`` (see :func:`vlprobe.experiments.known_answers.write_report`), ``timings`` (stage
        and lane -> wall / CPU seconds), ``out``.
    """
    from vlprobe.experiments.known_answers import write_report

    for name in ("train_items", "eval_items", "clip_steps", "lxmert_steps", "jobs"):
        check_positive_int(getattr(config, name), name)
    check_seed(config.seed)
    from vlprobe.io import claim_folder

    # OUT's results, report and caches are cleared below: only a folder of the testbed's own.
    out = claim_folder(config.out, kind=TESTBED_KIND, recognise=_earlier_testbed)
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    for sub in ("results", "report", "caches"):
        _clear(out / sub)
    (out / "caches").mkdir()  # extract writes its cache into an existing folder
    timings: dict[str, dict[str, tuple[float, float]]] = {}
    if _training_data_ready(config):
        echo(f"reusing the training split and its oracle regions in {config.models}")
    ctx = _spawn_context()
    with ProcessPoolExecutor(max_workers=config.jobs, mp_context=ctx, initializer=_worker_init) as pool:
        for stage, lanes in plan_commands(config):
            start = time.perf_counter()
            echo(f"== {stage} ({len(lanes)} lanes, {config.jobs} workers)")
            futures = [pool.submit(_run_lane, name, cmds, str(logs / f"{stage.replace(' ', '-')}.{i}.log"))
                       for i, (name, cmds) in enumerate(lanes)]
            timings[stage] = {}
            for fut in futures:
                name, wall, cpu, text = fut.result()
                timings[stage][name] = (wall, cpu)
                echo(text)
            timings[stage]["(stage wall)"] = (time.perf_counter() - start, 0.0)
    note = (
        "Probe settings are the testbed's small ones, not the paper defaults: "
        + "; ".join(f"{k} {' '.join(v)}" for k, v in QUICK_SETTINGS.items())
        + f". Models trained with seed {config.seed} ({config.clip_steps} CLIP steps, {config.lxmert_steps} LXMERT steps)"
        f" on {config.train_items} training items; evaluated on {config.eval_items} items."
    )
    seeds = {"data_seed": config.seed, "train_seed": config.seed, "separability_control_seeds": 2,
             "task_adaptation_seeds": 3, "variant_probe_seeds": 2, "split_seed": 0}
    report = write_report(out / "results", out / "data", out / "report", seeds=seeds, note=note)
    return {"report": report, "timings": timings, "out": out}


def _spawn_context() -> Any:
    import multiprocessing

    return multiprocessing.get_context("spawn")

