"""Conditional probing over a bag-of-words baseline (``probe run conditional``; Hewitt et al. 2021).

Does a layer know more about a caption than its bag of words? Conditional probing ("Conditional
probing: measuring usable information beyond a baseline", Hewitt, Ethayarajh, Liang & Manning
2021) measures the V-information a representation adds to a baseline:

    I_V(layer -> Y | baseline) = H_V(Y | baseline) - H_V(Y | baseline ⊕ layer),

the held-out cross-entropy (bits per example) a probe on the baseline loses when the layer's
states are concatenated to it. The task is the variant probe's (which of two options paraphrases
a reference caption, :mod:`vlprobe.experiments.variant_probe`): within an item the two captions
hold mostly the same words, so what the layer adds beyond the bag of words is, directly, word-
order (compositional) information.

The baseline (per text) is, by default, the mean of the caption's layer-0 token states in the same
cache (``baseline_pooling=mean``, ``baseline_layer=0``): token embeddings (plus position
embeddings, whose mean depends on the length only, for CLIP) averaged, hence blind to order. For
BERT-style models (LXMERT, UNITER) layer 0 applies a LayerNorm per token after adding positions,
so it is close to, not exactly, a bag of words. Another representation can be given as
``baseline_cache`` (a cache of the same dataset; texts matched by id). A cache without the mean
pooling at layer 0 is refused with the fix in the message.

Per layer and seed, probes (``probe``: an MLP, default, or logistic regression) are trained on the
train items of a seeded, tag-stratified item split on the baseline alone, the layer alone and the
concatenation, and scored on the test items. Outputs in ``OUT/conditional/``: ``<model>.csv``
(tidy; split ``test``; ``information_gain`` = bits_baseline - bits_joint, and ``bits_prior``,
``bits_baseline``, ``bits_layer``, ``bits_joint``, ``accuracy_baseline/layer/joint``; seed =
the probes' seed; 95% bootstrap intervals over test items, seed ``bootstrap_seed``, on the first
seed's rows), ``<model>.summary.csv`` (mean/min/max over seeds; the task column is ``target``, no
control: the baseline is the control) and ``manifest.json``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vlprobe.experiments.cache_features import (
    POOLINGS,
    cache_label,
    cache_path,
    load_index,
    load_states,
    resolve_layers,
    resolve_stream,
    row_lookup,
)
from vlprobe.experiments.mlp_runs import plan_items, split_record
from vlprobe.experiments.probe_tasks import (
    InformationProbeOptions,
    VariantDrawOptions,
    config_examples,
    probe_setup,
)
from vlprobe.experiments.variant_probe import variant_items
from vlprobe.probes.information import conditional_information, probe_record
from vlprobe.progress import progress_bar, say
from vlprobe.runs.charts import Chart
from vlprobe.runs.declare import Experiment, option
from vlprobe.runs.option_groups import (
    BootstrapOptions,
    CacheInput,
    ProgressOption,
    ResultsOptions,
    SeedsOption,
    SplitOptions,
    StateOptions,
)
from vlprobe.runs.printout import wrote_line
from vlprobe.runs.units import units_of
from vlprobe.runs.writing import RunRows, RunSlot
from vlprobe.stats.metrics import bootstrap_indices, ci95_rows
from vlprobe.validation import InputError, check_int

__all__ = ["EXPERIMENT", "ConditionalConfig", "run_conditional"]


def _check_layer(value: int, param: str) -> int:
    return check_int(value, param, low=0, meaning=" (a stored layer)")


@dataclass(frozen=True, kw_only=True)
class ConditionalConfig(CacheInput, StateOptions, SeedsOption, VariantDrawOptions, SplitOptions, InformationProbeOptions,
                        BootstrapOptions, ProgressOption, ResultsOptions):
    """One run: a cache with variants in, ``OUT/conditional/`` out.

    Attributes
    ----------
    streams : tuple of str, optional
        One text or pair stream (default ``text``, else the first).
    pooling, layers : str
        The layers probed.
    baseline_cache : Path, optional
        Where the baseline comes from (default: ``cache``).
    baseline_stream : str, optional
        Default: the probed stream (in ``cache``), or the ``text`` stream of ``baseline_cache``.
    baseline_pooling : str
    baseline_layer : int
    seeds : int
        Probe seeds 0..seeds-1.
    draws, draw_seed : int
        Examples per item and (caption, order); their seed.
    test_size, split_seed, stratify, split_file : the item split (as the MLP experiments').
    probe : str
        ``mlp`` or ``logistic``; ``depth, width, lr, epochs, batch_size, device`` (MLP), ``C``.
    """

    cache: Path = CacheInput.redeclare("cache", help="A vlprobe cache with caption variants (`probe extract --variants`).")
    streams: tuple[str, ...] | None = StateOptions.redeclare(
        "streams", help="One stream of texts or pairs (default: text, else the first such).",
    )
    baseline_cache: Path | None = option(
        None, role="input", help="Cache holding the baseline representation (default: the probed cache).",
    )
    baseline_stream: str | None = option(None, help="Baseline stream (default: the probed one).")
    baseline_pooling: str = option("mean", choices=POOLINGS, help="Baseline pooling (mean: the bag of token states).")
    baseline_layer: int = option(0, check=_check_layer, help="Baseline layer (0: the embeddings).")
    seeds: int = SeedsOption.redeclare("seeds", 3, help="Probe seeds (0..N-1).")


def _baseline_states(cache: Any, config: ConditionalConfig, stream: str) -> tuple[np.ndarray, dict[tuple[int, int], int], str]:
    """Baseline states (R, H) of a cache's stream, its row lookup, and the stream's name."""
    name = resolve_stream(cache, config.baseline_stream or stream, ("text", "pair"), param="baseline_stream")
    has = config.baseline_pooling in cache.poolings(name) and config.baseline_layer in cache.layers(name)
    if not has:
        raise InputError(
            f"cache: {cache.path.name} has no {config.baseline_pooling!r} pooling of stream {name!r} at layer "
            f"{config.baseline_layer} for the bag-of-words baseline; extract with --poolings "
            f"cls,{config.baseline_pooling} and layer {config.baseline_layer} stored, or give --baseline-cache"
        )
    layer = resolve_layers(cache, name, config.baseline_pooling, str(config.baseline_layer))
    _, lookup = row_lookup(cache, name)
    return load_states(cache, name, config.baseline_pooling, layer)[:, 0, :], lookup, name


def _external_rows(cache: Any, rows: np.ndarray, lookup: dict[tuple[int, int], int], other: Any,
                   other_lookup: dict[tuple[int, int], int], other_stream: str) -> np.ndarray:
    """Rows of the baseline cache for the main cache's example rows, matched by text (and image) id."""
    texts = [str(t) for t in cache.table("texts")["id"]]
    images = [str(t) for t in cache.table("images")["id"]]
    o_text = {str(t): r for r, t in enumerate(other.table("texts")["id"])}
    o_image = {str(t): r for r, t in enumerate(other.table("images")["id"])}
    o_modality = other.modality(other_stream)
    inverse = {v: k for k, v in lookup.items()}
    out = np.empty_like(rows)
    for e, r in np.ndenumerate(rows):
        img, txt = inverse[int(r)]
        t_id = texts[txt]
        if t_id not in o_text:
            raise InputError(f"baseline_cache: text {t_id!r} is not in {other.path.name}")
        key = (-1, o_text[t_id]) if o_modality == "text" else (o_image.get(images[img], -2), o_text[t_id])
        if key not in other_lookup:
            raise InputError(f"baseline_cache: {other.path.name} has no row of stream {other_stream!r} for {t_id!r}")
        out[e] = other_lookup[key]
    return out


def run_conditional(config: ConditionalConfig) -> tuple[Path, Path, list[dict[str, Any]]]:
    """Run the experiment and write its outputs (module docstring; :meth:`Experiment.run`).

    Returns
    -------
    csv_path, manifest_path : Path
    rows : list of dict
    """
    return EXPERIMENT.run(config)


def compute_conditional(config: ConditionalConfig, slot: RunSlot) -> RunRows:
    """The information gain of every layer and seed over the baseline: tidy rows and the manifest's entries."""
    from vlprobe.extract.cache.reader import ActivationCache

    seeds, make = probe_setup(config)
    inputs: dict[str, Any] = {}
    with ActivationCache(cache_path(config.cache)) as cache:
        index = load_index(cache)
        inputs["cache"] = index.provenance
        items = variant_items(index)
        if len(items) < 2:
            raise InputError(f"cache: conditional probing needs at least 2 items whose two captions both have a "
                             f"variant; {Path(config.cache).name} has {len(items)}")
        plan = plan_items(slot, config, index, items)
        ex = config_examples(cache, index, config, "variant", items=plan.items)
        assert ex.rows is not None and ex.read is not None  # the variant task always has them
        if config.baseline_cache is None:
            base_states, base_lookup, base_stream = _baseline_states(cache, config, ex.read.name)
            if base_stream == ex.read.name:
                base_rows = ex.rows
            else:
                base_rows = _external_rows(cache, ex.rows, ex.read.lookup, cache, base_lookup, base_stream)
        else:
            with ActivationCache(cache_path(config.baseline_cache)) as other:
                base_states, base_lookup, base_stream = _baseline_states(other, config, ex.read.name
                                                                         if config.baseline_stream else "text")
                base_rows = _external_rows(cache, ex.rows, ex.read.lookup, other, base_lookup, base_stream)
                inputs["baseline_cache"] = other.provenance()
    B = base_states[base_rows].reshape(len(base_rows), -1).astype(np.float32)  # (N, 3 * Hb)
    test_items = plan.split.test
    train = ~np.isin(ex.example_items, test_items)
    test_owner = ex.example_items[~train]
    owners = np.unique(test_owner)
    boot = bootstrap_indices(len(owners), config.bootstrap, config.bootstrap_seed)
    member = [np.flatnonzero(test_owner == o) for o in owners]

    base_row = {"experiment": EXPERIMENT.name, "model": plan.model, "stream": ex.stream, "pooling": ex.pooling,
                "probe": config.probe, "task": "target", "split": "test", "subset": "all"}
    rows: list[dict[str, Any]] = []
    say(config.progress, f"{EXPERIMENT.name}: stream {ex.stream}, {len(ex.labels)} examples ({int(train.sum())} train, "
                         f"{int((~train).sum())} test) against the {config.baseline_pooling} layer-{config.baseline_layer} "
                         f"baseline of {base_stream}: {3 * len(ex.layers) * len(seeds)} {config.probe} probe fits "
                         f"({len(ex.layers)} layers x {len(seeds)} seed(s) x baseline, layer, joint)")
    with progress_bar(config.progress, len(ex.layers) * len(seeds), EXPERIMENT.name, "layer-seed") as bar:
        for g, layer in enumerate(ex.layers):
            for seed in seeds:
                out = conditional_information(B, ex.X[g], ex.labels, train, n_classes=2, seed=seed, make_probe=make)
                values = {
                    "information_gain": out["baseline"] - out["joint"],
                    "bits_prior": out["prior"], "bits_baseline": out["baseline"], "bits_layer": out["layer"],
                    "bits_joint": out["joint"], "accuracy_baseline": 100.0 * out["baseline_correct"],
                    "accuracy_layer": 100.0 * out["layer_correct"], "accuracy_joint": 100.0 * out["joint_correct"],
                }
                row = {**base_row, "layer": layer, "kind": ex.kinds[g], "seed": seed, "n": int((~train).sum())}
                for metric, per_example in values.items():
                    rows.append({**row, "metric": metric, "value": float(per_example.mean())})
                    if seed == seeds[0]:
                        per_item = np.array([per_example[m].mean() for m in member])
                        rows += ci95_rows({**row, "n": len(owners)}, metric, per_item[boot].mean(axis=1))
                bar.update()
    return RunRows(rows, inputs, seeds=seeds, summary=True, extra={
        "model": plan.model, "stream": ex.stream, "layers": ex.layers, "n_examples": len(ex.labels),
        "skipped_items": ex.skipped, **ex.extra,
        "baseline": {"stream": base_stream, "pooling": config.baseline_pooling, "layer": config.baseline_layer,
                     "cache": "the probed cache" if config.baseline_cache is None else str(config.baseline_cache),
                     "features": "concat(baseline(reference), baseline(option 1), baseline(option 2))"},
        "information_gain": "bits_baseline - bits_joint: held-out cross-entropy (bits per example) the layer "
                            "removes from a probe on the baseline (Hewitt et al. 2021)",
        "probe": probe_record(config),
        "split": split_record(index.item_ids, plan.items, plan.split, plan.families, config.split_file, {})["split"],
        "bootstrap": {"resamples": config.bootstrap, "seed": config.bootstrap_seed, "level": 0.95,
                      "kind": "percentile; test items resampled (their examples' mean); first seed's rows"},
        "units": units_of(rows),
    })


def report(config: ConditionalConfig, result: tuple[Path, Path, list[dict[str, Any]]]) -> list[str]:
    """The information gain over the baseline per layer (first seed), then the files written."""
    csv_path, _, rows = result
    first = min((r["seed"] for r in rows if r["metric"] == "information_gain"), default=0)
    lines = [f"{r['stream']:<12} layer {r['layer']!s:>3} information gain over the baseline: {r['value']:+.3f} bits/example"
             for r in rows if r["metric"] == "information_gain" and r["seed"] == first]
    return [*lines, wrote_line(csv_path, f"{csv_path.stem}.summary.csv")]


# Version 2: settings-keyed run names and setting columns.
EXPERIMENT = Experiment("conditional", 2, ConditionalConfig, compute_conditional, report, label=cache_label,
                        swept=("streams", "layers", "seeds"),
                        chart=Chart("layers", ("information_gain", "accuracy_joint", "bits_joint"), split="test", floor=None))
