"""SugarCrepe's bias analysis (Hsieh et al. 2023, section 3, Figures 1 and 2): can a blind text
model tell a benchmark's positive captions from its negatives? (``probe run bias-gap``)

Every item of a benchmark whose items pair one image with positive and negative captions (ARO,
SugarCrepe, VALSE and the like: the first ``Item.meta["positives"]`` texts, default 1, are
positive, the rest negative) is scored by each blind scorer (a registered text-only model: Vera,
the grammar model, a language model, caption length) without its image. An item's **gap** under a
scorer is ``min(positive scores) - max(negative scores)`` (``negatives=hardest``: the positive
against its best-scoring negative; with one positive and one negative simply positive minus
negative), or one gap per (positive, negative) pair (``negatives=each``). A scorer **gets an item
right** when its gap is > 0: every positive scores strictly higher than every negative, ties
wrong, as SugarCrepe's ``text_model_eval.py`` decides (``pos > neg``).

Writes to ``OUT/bias-gap/`` (run label: ``name``, else the dataset's name):

* ``<run>.csv``: per subset and ``all`` (items pooled), per scorer (the ``probe`` column):
  ``accuracy`` (percent of items right, with its 95% bootstrap interval, items resampled within
  their subset), ``ties`` (percent with gap 0), and the gap's distribution: ``gap`` (its mean),
  ``gap_std``, ``gap_q05``, ``gap_q25``, ``gap_median``, ``gap_q75``, ``gap_q95`` (in the scorer's
  own score unit; Vera and the grammar model score in [0, 1], so their gaps lie in [-1, 1]); then,
  per ``vlm_results`` CSV of ``probe eval`` (``probe`` = ``vlm:<its run>``), that run's headline
  metric per subset (``macro_accuracy``, ``precision_at_1``, ``accuracy`` or ``acc_r``, the first
  the subset has; its intervals copied), for Figure 2's comparison;
* ``<run>.items.csv``: every gap (``subset`` = ``<subset>:<item id>``, or
  ``<subset>:<item id>/<negative text>`` with ``negatives=each``; ``probe`` = the scorer; metrics
  ``gap``, ``accuracy`` and ``ties``, 100 or 0 per gap): the whole distribution, which
  ``probe plot`` and ``probe report`` draw as Figure 1's histograms (one panel per subset, every
  scorer overlaid) beside Figure 2's bars (each scorer's and each VLM's share right per subset);
* ``<run>.<scorer>.scores.jsonl``: each scorer's per-text scores (vlprobe's per-item score format:
  ``probe refine`` reads two of them on a two-text benchmark);
* ``manifest.json``: config, the dataset and checkpoint fingerprints, each scorer's score kind, the
  histogram counts per scorer and subset (``bins`` bins), the VLM results read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vlprobe.data.items import Dataset, Item
from vlprobe.progress import say
from vlprobe.provenance import sha256_file
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

__all__ = ["EXPERIMENT", "GAP_QUANTILES", "HEADLINE_METRICS", "BiasGapConfig", "item_gaps", "run_bias_gap"]

#: Quantile rows of the gap distribution: metric -> quantile.
GAP_QUANTILES: dict[str, float] = {"gap_q05": 0.05, "gap_q25": 0.25, "gap_median": 0.5, "gap_q75": 0.75,
                                   "gap_q95": 0.95}
#: A ``probe eval`` run's metric shown per subset, the first one the subset has (ARO: the paper's
#: macro accuracy, Precision@1 on the order subsets; SugarCrepe: accuracy; VALSE: acc_r).
HEADLINE_METRICS: tuple[str, ...] = ("macro_accuracy", "precision_at_1", "accuracy", "acc_r")
#: The ``note`` of the rows whose name alone could mislead.
NOTES = {
    "accuracy": "share of items whose every positive the blind scorer scores strictly above every negative "
                "(gap > 0; ties wrong, as SugarCrepe's text_model_eval.py)",
    "accuracy_each": "share of (positive, negative) pairs the blind scorer orders right (gap > 0; ties wrong)",
    "ties": "share with gap exactly 0",
    "all": "items of every subset pooled",
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
        help="A `probe eval` tidy CSV of the same benchmark, repeatable: its metric per subset beside the "
             "blind scorers' (Figure 2).",
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
    dtype: str = ModelOptions.redeclare("dtype", choices=("float32", "float16"))
    device: str = ModelOptions.redeclare("device")
    batch_size: int = ModelOptions.redeclare("batch_size", help="Texts per forward pass.")

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


def _read_eval_run(path: Path) -> tuple[str, str, list[dict[str, str]], dict[str, Any]]:
    """A ``probe eval`` run's experiment, run name, tidy rows and manifest entry ({} if none)."""
    import json

    from vlprobe.runs.summary import read_tidy_csv
    from vlprobe.runs.writing import result_stem

    if path.name.endswith((".items.csv", ".summary.csv")):
        raise InputError(f"vlm_results: {path.name} is not a run's tidy results; give "
                         f"{path.name.removesuffix('.items.csv').removesuffix('.summary.csv')}.csv")
    try:
        rows = read_tidy_csv(path)
    except InputError as err:
        raise InputError(f"vlm_results: {str(err).removeprefix('csv: ')}") from None
    experiments = sorted({r["experiment"] for r in rows})
    models = sorted({r["model"] for r in rows})
    if len(experiments) != 1 or len(models) != 1:
        raise InputError(f"vlm_results: {path.name} holds rows of {len(experiments)} experiment(s) and "
                         f"{len(models)} model(s); expected one `probe eval` run")
    entry: Any = {}
    manifest = path.parent / "manifest.json"
    if manifest.is_file():
        try:
            runs = json.loads(manifest.read_text(encoding="utf-8")).get("runs") or {}
        except (json.JSONDecodeError, AttributeError):
            runs = {}
        entry = runs.get(models[0]) or next((v for k, v in runs.items() if result_stem(k) == path.stem), {})
    return experiments[0], models[0], rows, entry if isinstance(entry, dict) else {}


def _vlm_rows(config: BiasGapConfig, dataset: Dataset, subsets: list[str], label: str
              ) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]]:
    """Each ``probe eval`` CSV's headline metric per subset (and its interval rows)."""
    rows: list[dict[str, Any]] = []
    inputs: dict[str, Any] = {}
    record: dict[str, Any] = {}
    for k, path in enumerate(config.vlm_results):
        experiment, run_name, run_rows, run_manifest = _read_eval_run(Path(path))
        if experiment != config.dataset:
            raise InputError(f"vlm_results: {Path(path).name} holds {experiment} results, not {config.dataset}'s "
                             f"(give the CSV of `probe eval {config.dataset}`)")
        by_key = {(r["subset"], r["metric"]): r for r in run_rows if r.get("task", "target") in ("target", "")}
        probe = f"vlm:{run_name}"
        if any(r["probe"] == probe for r in rows):
            raise InputError(f"vlm_results: two CSVs of one run name {run_name!r} ({Path(path).name})")
        shown: dict[str, str] = {}
        for subset in [*subsets, "all"]:
            metric = next((m for m in HEADLINE_METRICS if (subset, m) in by_key), None)
            if metric is None:
                continue
            shown[subset] = metric
            src = by_key[(subset, metric)]
            base = {"experiment": EXPERIMENT.name, "model": label, "probe": probe, "task": "target", "split": "test",
                    "subset": subset, "n": src.get("n") or None}
            note = f"`probe eval {config.dataset}`'s {metric} of run {run_name} ({Path(path).name})"
            rows.append({**base, "metric": metric, "value": float(src["value"]), "note": note})
            for bound in ("low", "high"):
                ci = by_key.get((subset, f"{metric}.ci95_{bound}"))
                if ci is not None:
                    rows.append({**base, "metric": f"{metric}.ci95_{bound}", "value": float(ci["value"]),
                                 "seed": ci.get("seed") or None})
        if not shown:
            raise InputError(f"vlm_results: {Path(path).name} has none of the subsets {', '.join(subsets)} "
                             f"with a metric {', '.join(HEADLINE_METRICS)}")
        their = ((run_manifest.get("inputs") or {}).get("dataset") or {}).get("fingerprint")
        inputs[f"vlm_results_{k}"] = {"path": str(path), "sha256": sha256_file(path)}
        record[run_name] = {"csv": str(path), "metrics": shown,
                            "same_dataset": None if their is None else their == dataset.fingerprint}
    return rows, inputs, record


def _chance(items: list[Item], npos: list[int], subsets: list[str], order: list[str], negatives: str
            ) -> dict[str, float]:
    """Per subset, the percent a scorer with random scores (no ties) gets right: 1 / C(T, k) per
    item with k positives among T captions (``hardest``), 50 per pair (``each``)."""
    out: dict[str, float] = {}
    for subset in order:
        if negatives == "each":
            out[subset] = 50.0
            continue
        mine = [100.0 / math.comb(len(it.captions), k) for it, k, s in zip(items, npos, subsets, strict=True)
                if s == subset]
        out[subset] = float(np.mean(mine))
    return out


def _histogram(gaps: np.ndarray, bins: int, lo: float, hi: float) -> dict[str, Any]:
    counts, edges = np.histogram(gaps, bins=bins, range=(lo, hi))
    return {"edges": [float(e) for e in edges], "counts": [int(c) for c in counts]}


def compute_bias_gap(config: BiasGapConfig, slot: RunSlot) -> RunRows:
    """Score every caption with each blind scorer; the rows, per-item gaps and manifest entries."""
    from vlprobe.data.loading import load_dataset
    from vlprobe.extract.eval_scorer import load_scorer
    from vlprobe.runs.score_files import write_item_scores

    label = slot.label
    dataset = load_dataset(config.dataset, config.data_dir, options=_dataset_option_values(config))
    items: list[Item] = []
    no_negatives: dict[str, int] = {}
    for it in dataset.items:  # an item with its positives alone (a CREPE row without hard negatives) has no gap
        if len(it.images) == 1 and len(it.captions) == int(it.meta.get("positives", 1)):
            no_negatives[_subset(it)] = no_negatives.get(_subset(it), 0) + 1
        else:
            items.append(it)
    if not items:
        raise InputError(f"{config.dataset}: no items to score" + (" (none has a negative caption)" if no_negatives else ""))
    if no_negatives:
        say(config.progress, f"bias-gap: {sum(no_negatives.values())} item(s) without a negative caption left out")
    npos = [positives_of(it, config.dataset) for it in items]
    subsets = [_subset(it) for it in items]
    order = list(dict.fromkeys(subsets))
    texts = [t.text for it in items for t in it.captions]
    images = [it.images[0] for it in items for _ in it.captions]
    checkpoints = key_values(config.checkpoints, "checkpoints", identifiers=False)
    inputs: dict[str, Any] = {"dataset": {"name": dataset.name, "fingerprint": dataset.fingerprint,
                                          "source": dataset.source}}
    scorer_info: dict[str, Any] = {}
    per_scorer: dict[str, np.ndarray] = {}
    device = "cpu"
    files: dict[str, Any] = {}
    text_ids = [t.id for it in items for t in it.captions]
    image_ids = [it.images[0].id for it in items for _ in it.captions]
    item_ids = [it.id for it in items for _ in it.captions]
    for name in config.scorers:
        say(config.progress, f"bias-gap: {name} scores {len(set(texts))} distinct captions of {len(items)} items")
        scorer = load_scorer(name, checkpoints.get(name), device=config.device, dtype=config.dtype,
                             batch_size=config.batch_size)
        values, _ = scorer.score_with_logits(images, texts, progress=config.progress)
        per_scorer[name] = values
        device = scorer.device
        inputs[f"checkpoint_{name}"] = {"spec": checkpoints.get(name), "fingerprint": scorer.fingerprint}
        scorer_info[name] = {"score_kind": scorer.score_kind, "info": scorer.info,
                             "scores": slot.file(f".{name}.scores.jsonl")}
        files[f".{name}.scores.jsonl"] = (lambda v: lambda path: write_item_scores(
            path, item_ids, image_ids, text_ids, v))(values)
    # gaps: one per item (hardest) or per (positive, negative) pair (each)
    unit_subset: list[str] = []
    unit_id: list[str] = []
    gaps: dict[str, list[float]] = {name: [] for name in config.scorers}
    at = 0
    for it, k, sub in zip(items, npos, subsets, strict=True):
        n_text = len(it.captions)
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
        at += n_text
    sub_arr = np.asarray(unit_subset)
    idx = bootstrap_indices(len(unit_id), config.bootstrap, config.bootstrap_seed, strata=sub_arr)
    rows: list[dict[str, Any]] = []
    item_rows: list[dict[str, Any]] = []
    histograms: dict[str, dict[str, Any]] = {}
    acc_note = NOTES["accuracy" if config.negatives == "hardest" else "accuracy_each"]
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
            note = acc_note + ("; " + NOTES["all"] if subset == "all" else "")
            rows.append({**base, "metric": "accuracy", "value": 100.0 * float(right[cols].mean()), "note": note})
            rows.extend(ci95_rows(base, "accuracy", 100.0 * right[idx[:, cols]].mean(axis=1)))
            rows.append({**base, "metric": "ties", "value": 100.0 * float((gs == 0).mean()), "note": NOTES["ties"]})
            rows.append({**base, "metric": "gap", "value": float(gs.mean()), "note": "mean gap"})
            rows.append({**base, "metric": "gap_std", "value": float(gs.std(ddof=1)) if len(gs) > 1 else math.nan})
            for metric, q in GAP_QUANTILES.items():
                rows.append({**base, "metric": metric, "value": float(np.quantile(gs, q))})
            histograms[name][subset] = _histogram(gs, config.bins, -half, half)
        # per gap: the gap, and whether it is right or a tie (in percent: their means are the rows above)
        for uid, sub, v in zip(unit_id, unit_subset, g.tolist(), strict=True):
            case = {"experiment": EXPERIMENT.name, "model": label, "probe": name, "task": "target", "split": "test",
                    "subset": f"{sub}:{uid}"}
            item_rows += [{**case, "metric": "gap", "value": v},
                          {**case, "metric": "accuracy", "value": 100.0 if v > 0 else 0.0},
                          {**case, "metric": "ties", "value": 100.0 if v == 0 else 0.0}]
    vlm_rows, vlm_inputs, vlm_record = _vlm_rows(config, dataset, order, label) if config.vlm_results else ([], {}, {})
    rows += vlm_rows
    inputs.update(vlm_inputs)
    extra = {
        "units": units_of(rows, item_rows), "dataset": config.dataset, "scorers": scorer_info,
        "negatives": config.negatives, "n_items": len(items), "n_gaps": len(unit_id),
        "items_without_negatives": {"per_subset": no_negatives, "note": "left out: no gap without a negative"},
        "items_per_subset": {s: int(sum(x == s for x in subsets)) for s in order},
        "definitions": {
            "gap": "min(positive scores) - max(negative scores) per item" if config.negatives == "hardest"
                   else "positive score - negative score per (positive, negative) pair",
            "accuracy": acc_note,
        },
        "histograms": histograms, "vlm_results": vlm_record,
        "chance_percent": _chance(items, npos, subsets, order, config.negatives),
        "bootstrap": {"resamples": config.bootstrap, "seed": config.bootstrap_seed, "level": 0.95,
                      "kind": "percentile; gaps resampled within their subset; one index set for every scorer"},
        "item_gaps": slot.file(".items.csv"),
    }
    return RunRows(rows, inputs, extra, seeds=[config.bootstrap_seed], device=device, item_rows=item_rows,
                   files=files)


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
    """Each scorer's share right (and each VLM's metric) per subset with its interval, then the files."""
    csv_path, _, rows = result
    ci = {(r["probe"], r["subset"], r["metric"]): r["value"] for r in rows if ".ci95_" in r["metric"]}
    lines = []
    for r in rows:
        if r["metric"] not in ("accuracy", *HEADLINE_METRICS):
            continue
        low, high = (ci.get((r["probe"], r["subset"], f"{r['metric']}.ci95_{b}")) for b in ("low", "high"))
        interval = f"  [{low:6.2f}, {high:6.2f}]" if low is not None and high is not None else ""
        lines.append(f"{r['probe']:<20} {r['subset']:<18} {r['metric']:<15} {r['value']:7.2f}{interval}  (n={r['n']})")
    return [*lines, wrote_line(csv_path, csv_path.stem + ".items.csv",
                               *(f"{csv_path.stem}.{s}.scores.jsonl" for s in config.scorers))]


EXPERIMENT = Experiment(
    "bias-gap", 1, BiasGapConfig, compute_bias_gap, report, label=_label,
    omit=("image_dir",),  # blind scorers read no image; image_root finds ARO's Karpathy files (the authors' layout)
    chart=Chart("gaps", ("accuracy",), subsets=None, categories="subset", chance={"accuracy": 50.0}),
)
