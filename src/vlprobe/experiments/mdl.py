"""Online code length of the probes' labels per layer (``probe run mdl``; Voita & Titov 2020).

How many bits does it take to send a task's labels to someone who holds the states? With the
*online* (prequential) code, the examples go in blocks: the first with the uniform code (one bit
per binary label), every later block with a probe trained on all the blocks before it
(:func:`vlprobe.probes.information.online_code_length`). A layer from which the label is easy to
extract gives a short code from few examples; one that only lets a probe memorise gives about the
uniform code. Unlike a probe's accuracy, the code length also counts how much data the probe
needed, and so separates a layer from the control task better (Voita & Titov 2020,
"Information-Theoretic Probing with Minimum Description Length").

Tasks (``task``): ``variant`` (the variant probe's labels), ``text-score`` and ``image-score``
(task adaptation's), read by :mod:`vlprobe.experiments.probe_tasks`. The control task is the
same examples with the labels of a seeded half of the items flipped (the probes' control).

Blocks: the items are put in a seeded order (one per seed, ``default_rng(seed)``); block ends
are Voita & Titov's fractions 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.25, 12.5, 25, 50 and 100 % of the
items, rounded up to whole items (an item's examples are never split between what the probe is
trained on and what it codes), merged where they round to the same item: 400 Winoground items
give ends 1, 2, 4, 7, 13, 25, 50, 100, 200, 400. The manifest records the ends. The probe
(``probe``) is an MLP on standardised features (default: 2 linear layers, width 128, Adam lr 1e-3,
50 epochs, batch 64; the variant label is an XOR no linear probe reads) or a logistic regression
(L2, ``C``); one is trained per block, so the cost is about ``2 x seeds x blocks`` probe fits
per layer.

Outputs in ``OUT/mdl/``: ``<model>.csv`` (tidy; split ``online``; per layer, task = target or
control, seed = the order's seed: ``online_code`` and ``uniform_code`` in bits, ``compression``
= uniform / online), ``<model>.summary.csv`` (target vs control mean/min/max over the seeds)
and ``manifest.json``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vlprobe.experiments.cache_features import cache_path, check_seeds, load_index
from vlprobe.experiments.outputs import (
    build_manifest,
    check_run_slot,
    config_record,
    result_stem,
    run_settings,
    write_results,
)
from vlprobe.experiments.probe_tasks import TASKS, task_examples
from vlprobe.experiments.summary import summarize, write_summary_csv
from vlprobe.experiments.units import units_of
from vlprobe.probes.information import (
    VOITA_FRACTIONS,
    block_boundaries,
    make_probe_factory,
    online_code_length,
    probe_record,
)
from vlprobe.probes.splits import flip_labels
from vlprobe.progress import progress_bar, say
from vlprobe.validation import InputError, check_choice, check_positive_float, check_positive_int

__all__ = ["MDLConfig", "control_items", "run_mdl"]

NAME = "mdl"
VERSION = 2
#: Settings the rows show (they name the run but get no column of their own).
SWEPT = ("streams", "layers", "seeds")


@dataclass(frozen=True)
class MDLConfig:
    """One run: a cache in, ``OUT/mdl/`` out.

    Attributes
    ----------
    cache, out : Path
    task : str
        ``variant``, ``text-score`` or ``image-score``.
    streams : tuple of str, optional
        ``variant``: one text or pair stream (default ``text``, else the first); the scores: the
        streams concatenated (default every stream).
    pooling, layers : str
    seeds : int
        Item orders (and control flips), seeds 0..seeds-1.
    draws : int
        ``variant``: examples per item and (caption, order).
    draw_seed : int
        ``variant``: seed of the draws.
    probe : str
        ``mlp`` or ``logistic``.
    depth, width, lr, epochs, batch_size, device
        The MLP probe's settings.
    C : float
        Inverse L2 strength of the logistic probe.
    model : str, optional
        Model name in the outputs (default: the cache's).
    progress : bool
        A progress bar on stderr.
    """

    cache: Path
    out: Path
    task: str = "variant"
    streams: tuple[str, ...] | None = None
    pooling: str = "cls"
    layers: str = "all"
    seeds: int = 3
    draws: int = 4
    draw_seed: int = 0
    probe: str = "mlp"
    depth: int = 2
    width: int = 128
    lr: float = 1e-3
    epochs: int = 50
    batch_size: int = 64
    device: str = "cpu"
    C: float = 1.0
    model: str | None = None
    progress: bool = True


def control_items(n_items: int, seed: int) -> np.ndarray:
    """The items whose labels the control task flips: ``n_items // 2`` drawn by ``default_rng([seed, 1])``."""
    return np.sort(np.random.default_rng([seed, 1]).permutation(n_items)[: n_items // 2])


def run_mdl(config: MDLConfig) -> tuple[Path, Path, list[dict[str, Any]]]:
    """Run the experiment and write its outputs (module docstring).

    Returns
    -------
    csv_path, manifest_path : Path
    rows : list of dict
    """
    from vlprobe.extract.cache.reader import ActivationCache

    seeds = check_seeds(config.seeds)
    check_choice(config.task, "task", TASKS)
    check_positive_int(config.draws, "draws")
    check_positive_float(config.C, "C")
    make = make_probe_factory(config.probe, config)
    cfg = config_record(config)
    with ActivationCache(cache_path(config.cache)) as cache:
        index = load_index(cache)
        model = config.model or index.model
        settings = run_settings(config, swept=SWEPT, rename={"task": "labels"})
        run = check_run_slot(config.out, NAME, model, cfg, settings=settings)
        ex = task_examples(cache, index, config.task, config.streams, config.pooling, config.layers,
                           draws=config.draws, seed=config.draw_seed)
    n_items = len(ex.items)
    bounds = block_boundaries(n_items)
    base = {"experiment": NAME, "model": model, "stream": ex.stream, "pooling": config.pooling, "probe": config.probe,
            "split": "online", "subset": "all" if config.task == "variant" else config.task}
    rows: list[dict[str, Any]] = []
    flips = {s: control_items(n_items, s) for s in seeds}
    n_codes = len(ex.layers) * len(seeds) * 2
    say(config.progress, f"{NAME}: {config.task} labels of {n_items} items ({len(ex.labels)} examples), stream "
                         f"{ex.stream}: {n_codes} online codes ({len(ex.layers)} layers x {len(seeds)} seed(s) x "
                         f"target + control), {len(bounds) - 2} {config.probe} probe fits each")
    with progress_bar(config.progress, n_codes, NAME, "code") as bar:
        for g, layer in enumerate(ex.layers):
            X = ex.X[g]
            if not np.isfinite(X).all():
                raise InputError(f"cache: states of layer {layer} hold NaN or infinite values")
            for seed in seeds:
                for task, y in (("target", ex.labels), ("control", flip_labels(ex.labels, ex.example_items, flips[seed]))):
                    code = online_code_length(X, y, ex.example_items, n_classes=2, seed=seed, make_probe=make)
                    row = {**base, "layer": layer, "kind": ex.kinds[g], "task": task, "seed": seed,
                           "n": code.n_examples}
                    rows += [{**row, "metric": "online_code", "value": code.online_bits},
                             {**row, "metric": "uniform_code", "value": code.uniform_bits},
                             {**row, "metric": "compression", "value": code.compression}]
                    bar.update()
    manifest = build_manifest(NAME, VERSION, cfg, {"cache": index.provenance}, seeds=seeds, extra={
        "model": model, "task": config.task, "stream": ex.stream, "layers": ex.layers,
        "n_items": n_items, "n_examples": len(ex.labels), "skipped_items": ex.skipped, **ex.extra,
        "blocks": {"fractions": list(VOITA_FRACTIONS), "ends_in_items": bounds[1:].tolist(),
                   "first_block": "uniform code (log2 2 = 1 bit per label)",
                   "order": "items permuted by numpy default_rng(seed); an item's examples stay in one block"},
        "probe": probe_record(config),
        "control": "labels of the items numpy default_rng([seed, 1]) draws (half of them) flipped",
        "control_flipped_items": {str(s): [index.item_ids[ex.items[i]] for i in f] for s, f in flips.items()},
        "units": units_of(rows),
    })
    csv_path, manifest_path = write_results(config.out, NAME, model, rows, manifest, settings=settings)
    write_summary_csv(csv_path.with_name(f"{result_stem(run)}.summary.csv"), summarize(rows))
    return csv_path, manifest_path, rows
