"""SugarCrepe's bias analysis (Hsieh et al. 2023, section 3, Figures 1 and 2): can a blind text
model tell a benchmark's positive captions from its negatives? (``probe run bias-gap``)

Every item of a benchmark whose items pair one image with positive and negative captions (ARO,
CREPE, VL-CheckList, SugarCrepe, SugarCrepe++, VALSE: the first ``Item.meta["positives"]`` texts,
default 1, are positive, the rest negative; SugarCrepe++ has two) is scored by each blind scorer (a
registered text-only model: Vera, the grammar model, a language model, caption length) without
its image. Two things are measured:

* **the benchmark's own metric** of each scorer, computed by the code ``probe eval`` computes it
  with (:func:`~vlprobe.experiments.benchmark_eval.benchmark_rows`), tie rule included: ARO's
  ``macro_accuracy`` (VG, a tie wrong) and ``precision_at_1`` (order, a tie to the caption),
  CREPE's ``recall@1`` (a tie to the caption), VL-CheckList's ``accuracy``, SugarCrepe's
  ``accuracy``, SugarCrepe++'s ``itt`` (both positives above the negative), VALSE's ``acc_r``,
  with every other row ``probe eval`` writes (intervals, slices, groups, means). A scorer's rows
  here equal ``probe eval BENCHMARK --model SCORER``'s, so a blind bar and a VLM bar from a
  ``probe eval`` CSV are the same quantity;
* **the gap** per item under each scorer: ``min(positive scores) - max(negative scores)``
  (``negatives=hardest``: with one positive and one negative simply positive minus negative), or
  one per (positive, negative) pair (``negatives=each``), and ``gap_positive``, the share of gaps
  above 0 (SugarCrepe's ``text_model_eval.py`` decision, ``pos > neg``, for every benchmark).
  Items with their positives alone (a CREPE row without hard negatives) have no gap; the metric
  counts them as their benchmark does (CREPE ranks the caption first).

The bars: SugarCrepe's Figure 1 draws CREPE as Atomic / Swap / Negate (the productivity files of
each negative type, complexities pooled: scopes ``prod_atom``, ``prod_swap``, ``prod_negate``),
ARO as its four tasks and VL-CheckList as Object / Attribute / Relation (:data:`FIGURE1`); a
benchmark without a layout there (SugarCrepe, SugarCrepe++, VALSE) gets one bar per subset, and
subsets no bar covers get their own. Each bar is its scope's headline metric
(:func:`~vlprobe.experiments.benchmark_eval.headline_metrics`), for each scorer and each VLM run.

Writes to ``OUT/bias-gap/`` (run label: ``name``, else the dataset's name):

* ``<run>.csv``: per scorer (the ``probe`` column) the benchmark's metric rows as ``probe eval``
  writes them, then per subset and ``all`` (gaps pooled) ``gap_positive`` (with its 95% bootstrap
  interval, gaps resampled within their subset), ``ties`` (percent with gap 0) and the gap's
  distribution: ``gap`` (its mean), ``gap_std``, ``gap_q05``, ``gap_q25``, ``gap_median``,
  ``gap_q75``, ``gap_q95`` (in the scorer's own score unit; Vera and the grammar model score in
  [0, 1], so their gaps lie in [-1, 1]); then per ``vlm_results`` CSV of ``probe eval``
  (``probe`` = ``vlm:<its run>``) that run's headline metric for every scope the scorers have one
  for (its intervals copied);
* ``<run>.items.csv``: every gap (``subset`` = ``<subset>:<item id>``, or
  ``<subset>:<item id>/<negative text>`` with ``negatives=each``; ``probe`` = the scorer; metrics
  ``gap``, ``gap_positive`` and ``ties``, 100 or 0 per gap), which ``probe plot`` and ``probe
  report`` draw as histograms, one panel per bar (every scorer overlaid), beside the bars; and
  each item's own value of the benchmark's metrics that are means over items (``<subset>:<item
  id>``: ``accuracy``, ``precision_at_1``, ``recall@k``, ``itt``, ...; 100 or 0);
* ``<run>.<scorer>.scores.jsonl``: each scorer's per-text scores (vlprobe's per-item score format:
  ``probe refine`` reads two of them on a two-text benchmark);
* ``manifest.json``: config (``dtype`` ``auto``, the default, recorded as each scorer's dtype:
  the one its reference code loads it in, Vera bfloat16 as SugarCrepe's ``text_model_eval.py``
  ran it), the dataset and checkpoint fingerprints, each scorer's score kind and dtype, the bars (label, scope, metric, member subsets, chance), the histogram counts per scorer and
  subset (``bins`` bins), the VLM results read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vlprobe.data.items import Dataset, Item
from vlprobe.progress import say
from vlprobe.runs.charts import Chart
from vlprobe.runs.declare import (
    REQUIRED,
    Experiment,
    check_key_values,
    check_name_values,
    key_values,
    names,
    option,
)
from vlprobe.runs.option_groups import (
    AUTO_DTYPE,
    BootstrapOptions,
    DatasetOption,
    ItemOptions,
    ModelOptions,
    ProgressOption,
    ResultsOptions,
)
from vlprobe.runs.printout import wrote_line
from vlprobe.runs.units import units_of
from vlprobe.runs.writing import RunRows, RunSlot
from vlprobe.stats.metrics import bootstrap_indices, ci95_rows
from vlprobe.validation import InputError, check_positive_int

__all__ = ["EXPERIMENT", "FIGURE1", "GAP_QUANTILES", "BiasGapConfig", "item_gaps", "run_bias_gap"]

#: Quantile rows of the gap distribution: metric -> quantile.
GAP_QUANTILES: dict[str, float] = {"gap_q05": 0.05, "gap_q25": 0.25, "gap_median": 0.5, "gap_q75": 0.75,
                                   "gap_q95": 0.95}
#: SugarCrepe's Figure 1, per benchmark its bars in the figure's order: (label, scope of ``probe eval``'s
#: rows). CREPE: the productivity files of a negative type, complexities pooled; ARO: its tasks;
#: VL-CheckList: the mean of a category's radar spokes.
FIGURE1: dict[str, tuple[tuple[str, str], ...]] = {
    "crepe": (("Atomic", "prod_atom"), ("Swap", "prod_swap"), ("Negate", "prod_negate")),
    "aro": (("VG Relation", "vg_relation"), ("VG Attribution", "vg_attribution"), ("COCO Order", "coco_order"),
            ("Flickr Order", "flickr30k_order")),
    "vl-checklist": (("Object", "Object"), ("Attribute", "Attribute"), ("Relation", "Relation")),
}
#: The ``note`` of the rows whose name alone could mislead.
NOTES = {
    "gap_positive": "share of items whose every positive the blind scorer scores strictly above every negative "
                    "(gap > 0; ties wrong, as SugarCrepe's text_model_eval.py); the benchmark's own metric is in "
                    "its own rows",
    "gap_positive_each": "share of (positive, negative) pairs the blind scorer orders right (gap > 0; ties wrong)",
    "ties": "share with gap exactly 0",
    "all": "gaps of every subset pooled",
}
NEGATIVES = ("hardest", "each")


def _check_scorers(value: tuple[str, ...], param: str) -> tuple[str, ...]:
    if not value:
        raise InputError(f"{param}: give at least one blind scorer (e.g. vera,grammar)")
    if len(set(value)) != len(value):
        raise InputError(f"{param}: a scorer is named twice in {','.join(value)}")
    return value


@dataclass(frozen=True, kw_only=True)
class BiasGapConfig(DatasetOption, ItemOptions, BootstrapOptions, ProgressOption, ResultsOptions):
    """``probe run bias-gap``: blind scorers' gaps between positive and negative captions."""

    dataset: str = DatasetOption.redeclare("dataset", REQUIRED, help="A registered dataset whose items have positive "
                                                                   "and negative captions (sugarcrepe, aro, valse, ...).")
    data_dir: Path | None = ItemOptions.redeclare("data_dir", help="Folder of the benchmark's files.")
    image_root: tuple[str, ...] = ItemOptions.redeclare(
        "image_root", help="SOURCE=DIR, repeatable: where a benchmark's files lie beside its images (ARO: the "
                           "Karpathy files of coco_order and flickr30k_order in coco=DIR and flickr30k=DIR, as the "
                           "authors' code reads them); the images are checked and hashed, not read.")
    scorers: tuple[str, ...] = option(
        ("vera", "grammar"), parse=names, check=_check_scorers, metavar="A,B", role="input",
        help="Blind (text-only) registered models, comma-separated: vera, grammar, blind-lm, caption-length, ...",
    )
    checkpoints: tuple[str, ...] = option(
        (), repeat=True, role="input", metavar="SCORER=DIR", check=check_name_values,
        help="A scorer's checkpoint (directory or hub id), SCORER=DIR, repeatable (default: the scorer's own).",
    )
    vlm_results: tuple[Path, ...] = option(
        (), repeat=True, role="input", metavar="EVAL.csv",
        help="A `probe eval` tidy CSV of the same benchmark, repeatable: its headline metric per scope beside the "
             "blind scorers' (Figure 1's bars).",
    )
    dataset_options: tuple[str, ...] = option(
        (), repeat=True, role="input", metavar="NAME=VALUE", check=check_key_values,
        help="A further option of the dataset's loader, NAME=VALUE, repeatable (aro: order_seed=0, "
             "spacy_model=NAME; valse: all_items=true).",
    )
    negatives: str = option("hardest", choices=NEGATIVES,
                            help="hardest: one gap per item (worst positive minus best negative); "
                                 "each: one gap per (positive, negative) pair.")
    bins: int = option(20, check=check_positive_int, help="Histogram bins of the gaps (manifest and figure).")
    # the blind scorers' loading options, as the model-loading group declares them
    dtype: str = ModelOptions.redeclare(
        "dtype", help="The scorers' dtype; auto: each in the one its reference code loads it in (vera: bfloat16, as "
                      "SugarCrepe's text_model_eval.py; the others float32).")
    device: str = ModelOptions.redeclare("device")
    batch_size: int = ModelOptions.redeclare("batch_size", help="Texts per forward pass.")

    def resolved(self, name: str, value: Any) -> Any:
        """``dtype`` ``auto``: each scorer's reference dtype, as ``SCORER=DTYPE`` per scorer (what the
        manifest records and the ``dtype`` column shows)."""
        if name == "dtype" and value == AUTO_DTYPE:
            from vlprobe.extract.model_inputs import model_dtype

            return tuple(f"{s}={model_dtype(s, value)}" for s in self.scorers)
        return super().resolved(name, value)

    def check(self) -> None:
        ckpts = key_values(self.checkpoints, "checkpoints", identifiers=False)
        unknown = sorted(set(ckpts) - set(self.scorers))
        if unknown:
            raise InputError(f"checkpoints: {unknown[0]!r} is not one of the scorers ({','.join(self.scorers)})")


def _dataset_option_values(config: BiasGapConfig) -> dict[str, Any]:
    """The loader options: ``subsets``, ``limit``, ``image_root`` and the ``dataset_options`` (typed as the loader's
    parameters take them: integers and true/false parsed)."""
    opts: dict[str, Any] = {}
    for key, text in key_values(config.dataset_options, "dataset_options").items():
        low = text.lower()
        if low in ("true", "false"):
            opts[key] = low == "true"
        else:
            try:
                opts[key] = int(text)
            except ValueError:
                opts[key] = text
    for key in ("subsets", "limit", "image_root"):
        if key in opts:
            raise InputError(f"dataset_options: give {key} as --{key.replace('_', '-')}, not as a dataset option")
    return {**opts, "subsets": config.subsets, "limit": config.limit, "image_root": list(config.image_root) or None}


def positives_of(item: Item, dataset: str) -> int:
    """How many of the item's leading captions are positive (``meta["positives"]``, default 1);
    InputError when the item is not one image with positive and negative captions."""
    k = int(item.meta.get("positives", 1))
    if len(item.images) != 1 or not 1 <= k < len(item.captions):
        raise InputError(
            f"dataset: {dataset} item {item.id!r} has {len(item.images)} image(s) and {len(item.captions)} "
            "caption(s), not one image with positive and negative captions; bias-gap takes benchmarks such as "
            "sugarcrepe, aro, valse"
        )
    return k


def item_gaps(scores: np.ndarray, positives: int, negatives: str = "hardest") -> np.ndarray:
    """The gaps of one item's text scores (see the module docstring).

    Parameters
    ----------
    scores : ndarray, shape (T,)
        The item's captions' scores, positives first.
    positives : int
        How many leading captions are positive (1 <= positives < T).
    negatives : {"hardest", "each"}

    Returns
    -------
    ndarray, shape (1,) for ``hardest``, (positives * (T - positives),) for ``each`` (positive-major)
    """
    pos, neg = scores[:positives], scores[positives:]
    if negatives == "hardest":
        return np.array([pos.min() - neg.max()])
    return (pos[:, None] - neg[None, :]).ravel()


def _subset(item: Item) -> str:
    sub = item.meta.get("subset")
    return str(sub) if sub else item.id.split("/")[1] if item.id.count("/") >= 2 else ""


def _label(config: BiasGapConfig) -> str:
    from vlprobe.registry import DATASETS, MODELS

    if config.dataset not in DATASETS:
        raise InputError(DATASETS.unknown_message(config.dataset))
    from vlprobe.extract.models.blind import TextScorer

    for name in config.scorers:
        cls = MODELS.get(name)
        if not (isinstance(cls, type) and issubclass(cls, TextScorer)):
            raise InputError(f"scorers: {name!r} reads images; bias-gap takes blind (text-only) models: "
                             + ", ".join(n for n in MODELS.names()
                                         if isinstance(c := MODELS.get(n), type) and issubclass(c, TextScorer)))
    for path in config.vlm_results:
        if not Path(path).is_file():
            raise FileNotFoundError(f"vlm_results: no such file {str(path)!r}")
    return config.name or config.dataset


def _histogram(gaps: np.ndarray, bins: int, lo: float, hi: float) -> dict[str, Any]:
    counts, edges = np.histogram(gaps, bins=bins, range=(lo, hi))
    return {"edges": [float(e) for e in edges], "counts": [int(c) for c in counts]}


def _chance(items: list[Item], npos: list[int], subsets: list[str], order: list[str], negatives: str
            ) -> dict[str, float]:
    """Per subset, the percent of gaps above 0 under random scores (no ties): 1 / C(T, k) per item
    with k positives among T captions (``hardest``), 50 per pair (``each``)."""
    out: dict[str, float] = {}
    for subset in order:
        if negatives == "each":
            out[subset] = 50.0
            continue
        mine = [100.0 / math.comb(len(it.captions), k) for it, k, s in zip(items, npos, subsets, strict=True)
                if s == subset]
        out[subset] = float(np.mean(mine))
    return out


def _split_items(dataset: Dataset, name: str) -> tuple[list[Item], list[Item], dict[str, int]]:
    """Every item (the metric's), those with a gap (a negative caption) and the count without one
    per subset; InputError for an item that is not one image with positive and negative captions."""
    every = list(dataset.items)
    gapped: list[Item] = []
    no_negatives: dict[str, int] = {}
    for it in every:  # an item with its positives alone (a CREPE row without hard negatives) has no gap
        if len(it.images) == 1 and len(it.captions) == int(it.meta.get("positives", 1)):
            no_negatives[_subset(it)] = no_negatives.get(_subset(it), 0) + 1
        else:
            positives_of(it, name)
            gapped.append(it)
    if not gapped:
        raise InputError(f"{name}: no items to score" + (" (none has a negative caption)" if no_negatives else ""))
    return every, gapped, no_negatives


def _metric_rows(config: BiasGapConfig, items: list[Item], values: np.ndarray, label: str, name: str,
                 score_kind: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A scorer's rows of the benchmark's own metrics, as ``probe eval`` computes them, and each
    item's own value of those that are means over items (per-case rows); none for a dataset ``probe
    eval`` does not evaluate."""
    from vlprobe.experiments.benchmark_eval import BENCHMARKS, benchmark_rows, item_values

    if config.dataset not in BENCHMARKS:
        return [], []
    threshold = None
    if config.dataset == "valse":
        from vlprobe.extract.eval_scorer import MATCH_THRESHOLDS

        threshold = MATCH_THRESHOLDS.get(score_kind)
    mats, at = [], 0
    for it in items:  # one image each: (texts, 1)
        mats.append(values[at:at + len(it.captions)].reshape(-1, 1))
        at += len(it.captions)
    base = {"experiment": EXPERIMENT.name, "model": label, "probe": name, "task": "target", "split": "test"}
    rows = benchmark_rows(config.dataset, items, mats, base, config.bootstrap, config.bootstrap_seed,
                          threshold=threshold)
    per_item = [{**base, "subset": f"{it.meta['subset']}:{it.id}", "metric": metric, "value": value}
                for it, own in zip(items, item_values(config.dataset, items, mats), strict=True)
                for metric, value in own.items()]
    return rows, per_item


def _scopes(config: BiasGapConfig, rows: list[dict[str, Any]]) -> dict[str, str]:
    """The bars' scopes, each with its headline metric (the benchmark's own; ``gap_positive`` for a
    dataset ``probe eval`` does not evaluate), as the first scorer's rows have them."""
    from vlprobe.experiments.benchmark_eval import BENCHMARKS, headline_metrics
    from vlprobe.experiments.bias_bars import headline_scopes

    headline = headline_metrics(config.dataset) if config.dataset in BENCHMARKS else ("gap_positive",)
    return headline_scopes([r for r in rows if r["probe"] == config.scorers[0]], headline)


def compute_bias_gap(config: BiasGapConfig, slot: RunSlot) -> RunRows:
    """Score every caption with each blind scorer; the rows, per-item gaps and manifest entries."""
    from vlprobe.data.loading import load_dataset
    from vlprobe.experiments.benchmark_eval import BENCHMARKS
    from vlprobe.experiments.bias_bars import bars_of, vlm_rows
    from vlprobe.extract.eval_scorer import load_scorer
    from vlprobe.runs.score_files import write_item_scores

    label = slot.label
    dataset = load_dataset(config.dataset, config.data_dir, options=_dataset_option_values(config))
    every, items, no_negatives = _split_items(dataset, config.dataset)
    if no_negatives:
        say(config.progress, f"bias-gap: {sum(no_negatives.values())} item(s) without a negative caption have no gap "
                             "(their benchmark's metric counts them)")
    npos = [positives_of(it, config.dataset) for it in items]
    subsets = [_subset(it) for it in items]
    order = list(dict.fromkeys(subsets))
    texts = [t.text for it in every for t in it.captions]
    images = [it.images[0] for it in every for _ in it.captions]
    checkpoints = key_values(config.checkpoints, "checkpoints", identifiers=False)
    inputs: dict[str, Any] = {"dataset": {"name": dataset.name, "fingerprint": dataset.fingerprint,
                                          "source": dataset.source}}
    scorer_info: dict[str, Any] = {}
    per_scorer: dict[str, np.ndarray] = {}
    device = "cpu"
    files: dict[str, Any] = {}
    text_ids = [t.id for it in every for t in it.captions]
    image_ids = [it.images[0].id for it in every for _ in it.captions]
    item_ids = [it.id for it in every for _ in it.captions]
    rows: list[dict[str, Any]] = []
    metric_items: list[dict[str, Any]] = []
    for name in config.scorers:
        say(config.progress, f"bias-gap: {name} scores {len(set(texts))} distinct captions of {len(every)} items")
        scorer = load_scorer(name, checkpoints.get(name), device=config.device, dtype=config.dtype,
                             batch_size=config.batch_size)
        values, _ = scorer.score_with_logits(images, texts, progress=config.progress)
        per_scorer[name] = values
        device = scorer.device
        inputs[f"checkpoint_{name}"] = {"spec": checkpoints.get(name), "fingerprint": scorer.fingerprint}
        scorer_info[name] = {"score_kind": scorer.score_kind, "dtype": scorer.dtype, "info": scorer.info,
                             "scores": slot.file(f".{name}.scores.jsonl")}
        files[f".{name}.scores.jsonl"] = (lambda v: lambda path: write_item_scores(
            path, item_ids, image_ids, text_ids, v))(values)
        more, per_item = _metric_rows(config, every, values, label, name, scorer.score_kind)
        rows += more
        metric_items += per_item
    # gaps: one per item (hardest) or per (positive, negative) pair (each), of the items with a negative
    at_of = dict(zip([it.id for it in every], np.cumsum([0] + [len(it.captions) for it in every[:-1]]).tolist(),
                     strict=True))
    unit_subset: list[str] = []
    unit_id: list[str] = []
    gaps: dict[str, list[float]] = {name: [] for name in config.scorers}
    for it, k, sub in zip(items, npos, subsets, strict=True):
        at, n_text = int(at_of[it.id]), len(it.captions)
        for name in config.scorers:
            gaps[name].extend(item_gaps(per_scorer[name][at:at + n_text], k, config.negatives).tolist())
        if config.negatives == "hardest":
            unit_id.append(it.id)
            unit_subset.append(sub)
        else:
            for p in range(k):
                for neg in it.captions[k:]:
                    unit_id.append(f"{it.id}/{neg.id.rsplit('/', 1)[-1]}" if k == 1
                                   else f"{it.id}/{it.captions[p].id.rsplit('/', 1)[-1]}-{neg.id.rsplit('/', 1)[-1]}")
                    unit_subset.append(sub)
    gap_rows, item_rows, histograms = _gap_rows(config, label, gaps, unit_id, unit_subset, order)
    rows += gap_rows
    item_rows += metric_items
    # the bars: each scope's headline metric, for the scorers and for the VLM runs compared
    scopes = _scopes(config, rows)
    bars = bars_of(config.dataset, FIGURE1.get(config.dataset, ()), scopes, every,
                   list(dict.fromkeys(_subset(it) for it in every)))
    vlm_record: dict[str, Any] = {}
    if config.vlm_results:
        base = {"experiment": EXPERIMENT.name, "model": label, "task": "target", "split": "test"}
        more, vlm_inputs, vlm_record = vlm_rows(config.vlm_results, config.dataset, dataset, scopes, base)
        rows += more
        inputs.update(vlm_inputs)
    gap_note = NOTES["gap_positive" if config.negatives == "hardest" else "gap_positive_each"]
    extra = {
        "units": units_of(rows, item_rows), "dataset": config.dataset, "scorers": scorer_info,
        "negatives": config.negatives, "n_items": len(every), "n_gap_items": len(items), "n_gaps": len(unit_id),
        "items_without_negatives": {"per_subset": no_negatives,
                                    "note": "no gap without a negative; the benchmark's metric counts them"},
        "items_per_subset": {s: int(sum(_subset(it) == s for it in every)) for s in dict.fromkeys(map(_subset, every))},
        "definitions": {
            "gap": "min(positive scores) - max(negative scores) per item" if config.negatives == "hardest"
                   else "positive score - negative score per (positive, negative) pair",
            "gap_positive": gap_note,
            "metrics": f"the benchmark's own, as `probe eval {config.dataset}` computes them (ties as its authors' "
                       "code counts them)" if config.dataset in BENCHMARKS else "none: not a `probe eval` benchmark",
        },
        "bars": bars, "headline": dict(scopes), "histograms": histograms, "vlm_results": vlm_record,
        "chance_percent": _chance(items, npos, subsets, order, config.negatives),
        "bootstrap": {"resamples": config.bootstrap, "seed": config.bootstrap_seed, "level": 0.95,
                      "kind": "percentile; the metrics' as probe eval draws them; gaps resampled within their subset, "
                              "one index set for every scorer"},
        "item_gaps": slot.file(".items.csv"),
    }
    return RunRows(rows, inputs, extra, seeds=[config.bootstrap_seed], device=device, item_rows=item_rows,
                   files=files)


def _gap_rows(config: BiasGapConfig, label: str, gaps: dict[str, list[float]], unit_id: list[str],
              unit_subset: list[str], order: list[str]
              ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """Per scorer, subset and ``all``: the share of gaps above 0 (with its interval), ties and the
    gap's distribution; every gap's rows; the histogram counts."""
    sub_arr = np.asarray(unit_subset)
    idx = bootstrap_indices(len(unit_id), config.bootstrap, config.bootstrap_seed, strata=sub_arr)
    rows: list[dict[str, Any]] = []
    item_rows: list[dict[str, Any]] = []
    histograms: dict[str, dict[str, Any]] = {}
    note = NOTES["gap_positive" if config.negatives == "hardest" else "gap_positive_each"]
    columns = {s: np.flatnonzero(sub_arr == s) for s in order}  # each subset's gaps, the same for every scorer
    columns["all"] = np.arange(len(unit_id))
    for name in config.scorers:
        g = np.asarray(gaps[name], dtype=np.float64)
        bounded = bool(np.all(np.abs(g) <= 1.0))
        half = 1.0 if bounded else float(np.abs(g).max()) or 1.0
        histograms[name] = {}
        right = (g > 0).astype(np.float64)
        for subset, cols in columns.items():
            gs = g[cols]
            base = {"experiment": EXPERIMENT.name, "model": label, "probe": name, "task": "target", "split": "test",
                    "subset": subset, "n": len(cols)}
            rows.append({**base, "metric": "gap_positive", "value": 100.0 * float(right[cols].mean()),
                         "note": note + ("; " + NOTES["all"] if subset == "all" else "")})
            rows.extend(ci95_rows(base, "gap_positive", 100.0 * right[idx[:, cols]].mean(axis=1)))
            rows.append({**base, "metric": "ties", "value": 100.0 * float((gs == 0).mean()), "note": NOTES["ties"]})
            rows.append({**base, "metric": "gap", "value": float(gs.mean()), "note": "mean gap"})
            rows.append({**base, "metric": "gap_std", "value": float(gs.std(ddof=1)) if len(gs) > 1 else math.nan})
            for metric, q in GAP_QUANTILES.items():
                rows.append({**base, "metric": metric, "value": float(np.quantile(gs, q))})
            histograms[name][subset] = _histogram(gs, config.bins, -half, half)
        # per gap: the gap, and whether it is above 0 or a tie (in percent: their means are the rows above)
        for uid, sub, v in zip(unit_id, unit_subset, g.tolist(), strict=True):
            case = {"experiment": EXPERIMENT.name, "model": label, "probe": name, "task": "target", "split": "test",
                    "subset": f"{sub}:{uid}"}
            item_rows += [{**case, "metric": "gap", "value": v},
                          {**case, "metric": "gap_positive", "value": 100.0 if v > 0 else 0.0},
                          {**case, "metric": "ties", "value": 100.0 if v == 0 else 0.0}]
    return rows, item_rows, histograms


def run_bias_gap(config: BiasGapConfig) -> tuple[Path, Path, list[dict[str, Any]]]:
    """Run the analysis and write its CSVs, score files and manifest entry (:meth:`Experiment.run`).

    Returns
    -------
    csv_path, manifest_path : Path
    rows : list of dict
        The tidy rows written.
    """
    return EXPERIMENT.run(config)


def report(config: BiasGapConfig, result: tuple[Path, Path, list[dict[str, Any]]]) -> list[str]:
    """Each scope's headline metric (the bars) for every scorer and VLM run with its interval, each
    scorer's share of gaps above 0 over every item, then the files."""
    csv_path, _, rows = result
    scopes = _scopes(config, rows)
    ci = {(r["probe"], r["subset"], r["metric"]): r["value"] for r in rows if ".ci95_" in r["metric"]}
    lines = []
    for r in rows:
        if scopes.get(r["subset"]) != r["metric"] and not (r["metric"] == "gap_positive" and r["subset"] == "all"):
            continue
        low, high = (ci.get((r["probe"], r["subset"], f"{r['metric']}.ci95_{b}")) for b in ("low", "high"))
        interval = f"  [{low:6.2f}, {high:6.2f}]" if low is not None and high is not None else ""
        lines.append(f"{r['probe']:<20} {r['subset']:<18} {r['metric']:<15} {r['value']:7.2f}{interval}  (n={r['n']})")
    return [*lines, wrote_line(csv_path, csv_path.stem + ".items.csv",
                               *(f"{csv_path.stem}.{s}.scores.jsonl" for s in config.scorers))]


#: Version 2: the benchmark's own metrics per scorer (probe eval's code and tie rules), ``gap_positive``
#: for the share of gaps above 0 (version 1 called it accuracy), the Figure 1 bars.
EXPERIMENT = Experiment(
    "bias-gap", 2, BiasGapConfig, compute_bias_gap, report, label=_label,
    omit=("image_dir",),  # blind scorers read no image; image_root finds ARO's Karpathy files (the authors' layout)
    chart=Chart("gaps", ("gap_positive",), subsets=None, categories="subset", chance={"gap_positive": 50.0}),
)
