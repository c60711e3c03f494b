"""Reading back the results of an experiment run in tests; the testbed's CLIP part."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from vlprobe.launch.steps import Step
from vlprobe.launch.testbed import DATASET, KnownAnswerConfig
from vlprobe.results.known_answers import CLIP_MODELS

#: The CLIPs the "Beyond the paper" known answers were measured on: trained, the shuffled-words
#: control (trained on shuffled words: only approximately order-blind), random weights.
BEYOND_MODELS = ("clip-trained", "clip-shuffle", "clip-random")


def only_run(manifest_path: Path, model: str | None = None) -> dict[str, Any]:
    """The manifest entry of the one run (of ``model``) in ``manifest.json``.

    Runs are named by the model and the settings they changed (``planted@seeds=2``); tests that
    write one run per folder read it without spelling that name.
    """
    runs = json.loads(Path(manifest_path).read_text(encoding="utf-8"))["runs"]
    found = [r for r in runs.values() if model is None or r.get("model", r.get("run")) == model]
    assert len(found) == 1, sorted(runs)
    return found[0]


class CLIPTestbed(NamedTuple):
    """The testbed's CLIP part (:func:`build_testbed_clip`): models, evaluation set, caches, results."""

    config: KnownAnswerConfig
    models: Path
    data: Path
    caches: dict[str, Path]
    results: Path


def _clip_part(step: Step) -> bool:
    """Whether a testbed step belongs to its CLIP part: the data (both splits, with their oracle
    regions, so that a later testbed run on the same models folder reuses them), the three CLIP
    models, and per CLIP model its extraction and Winoground scores."""
    if step.group == "train":
        return step.args[:3] == ("fixtures", "train", "clip")
    if step.group in ("extract", "experiments"):
        command, pair = step.name.split(" ", 1)
        return pair.removesuffix(f"-{DATASET}") in CLIP_MODELS and command in ("extract", "winoground-scores")
    return step.group == "data"


def build_testbed_clip(out: Path, models: Path) -> CLIPTestbed:
    """The known-answer testbed's CLIP models (trained, the order-blind control, the
    shuffled-words control, random weights) trained by the testbed's own commands (``probe
    fixtures testbed --shuffle-control``'s plan, default settings, seed 0; the LXMERT part left
    out) run by the testbed's step runner, two at once, with their caches of the evaluation set
    and its Winoground scores under ``out``. ``models`` can be handed to a testbed run as its
    ``models_dir``: it then reuses the training split and these models."""
    from vlprobe.launch.testbed import plan_commands, run_plan

    config = KnownAnswerConfig(out=out, models_dir=models, jobs=2, shuffle_control=True)
    (out / "caches").mkdir()
    run_plan([s for s in plan_commands(config) if _clip_part(s)], config.jobs, out, lambda text: None)
    return CLIPTestbed(config, config.models, out / "data",
                       {m: out / "caches" / f"{m}-{DATASET}.h5" for m in CLIP_MODELS},
                       out / "results")


def write_pair_scores(path: Path, ds: Iterable[Any], scores: np.ndarray) -> Path:
    """An item-scores file of a 2x2 benchmark: ``scores`` (N, text, image) per item of ``ds``, in its order."""
    from vlprobe.runs.score_files import write_item_scores

    items, images, texts, values = [], [], [], []
    for it, m in zip(ds, scores, strict=True):
        for j, im in enumerate(it.images):
            for k, t in enumerate(it.texts):
                items.append(it.id)
                images.append(im.id)
                texts.append(t.id)
                values.append(m[k, j])
    return write_item_scores(path, items, images, texts, values)
