"""Variant-aware similarity (paper §5.2, ``probe run variant-similarity``).

For caption C of a Winoground item and image I::

    S'(I, C) = (1 - λ) S(I, C) + λ · agg_{v ∈ V(C)} S(I, v)

with V(C) the caption's variants (texts whose parent is C in the cache) plus C itself
(unless ``variants_only``; the paper's code includes C), agg ∈ {mean, max}, over a λ grid; then the
Winoground text / image / group scores of S'. λ = 0 is the plain Winoground score; λ = 1 with max
is the score of each pair's best variant. Works for any cache holding the pair scores of the
variants (dual encoders score every pair; cross-encoders with the ``item`` pair plan score each
item's images against its captions and their variants).

CSV: one row per (agg, λ, subset, metric), agg and λ in the ``agg`` and ``lambda`` setting
columns (``variants_only`` in its own); subsets as in ``winoground-scores`` (all, tags, bag-of-words slices);
values in percent; with 95% bootstrap intervals over items (``<metric>.ci95_low`` /
``.ci95_high``), the same resampled items for every setting and metric (paired: two settings
or two models on the same items are resampled alike). ``<run>.items.csv`` holds each item's
outcome (0 or 100) per setting and metric (``subset`` = item id), for ``probe compare``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vlprobe.data.bow import table_tags
from vlprobe.data.tags import missing_wwh_warning
from vlprobe.experiments.cache_features import cache_label
from vlprobe.progress import format_bytes, say, warn
from vlprobe.runs.charts import WINOGROUND_CHANCE, Chart
from vlprobe.runs.declare import Experiment, floats, names, option
from vlprobe.runs.option_groups import (
    BootstrapOptions,
    CacheInput,
    ProgressOption,
    ResultsOptions,
)
from vlprobe.runs.printout import wrote_line
from vlprobe.runs.units import units_of
from vlprobe.runs.writing import RunRows, RunSlot
from vlprobe.stats.metrics import bootstrap_indices, ci95_rows, winoground_outcomes
from vlprobe.validation import InputError, check_choice, check_probability

__all__ = [
    "EXPERIMENT", "VariantScores", "VariantSimilarityConfig", "blend", "run_variant_similarity",
    "variant_scores",
]

AGGS = ("mean", "max")


def _check_lambdas(values: tuple[float, ...], param: str) -> tuple[float, ...]:
    if not values:
        raise InputError(f"{param}: give at least one value")
    return tuple(check_probability(lam, param, meaning=" (each lambda)") for lam in values)


def _check_aggs(values: tuple[str, ...], param: str) -> tuple[str, ...]:
    if not values:
        raise InputError(f"{param}: give at least one of {', '.join(AGGS)}")
    return values


@dataclass(frozen=True, kw_only=True)
class VariantSimilarityConfig(CacheInput, BootstrapOptions, ProgressOption, ResultsOptions):
    """One cache in, one CSV out."""

    cache: Path = CacheInput.redeclare("cache", help="A vlprobe Winoground cache extracted with --variants.")
    aggs: tuple[str, ...] = option(
        AGGS, parse=names, choices=AGGS, check=_check_aggs, metavar="A,B",
        help="Aggregations over a caption's variants.",
    )
    lambdas: tuple[float, ...] = option(
        (0.0, 0.25, 0.5, 0.75, 1.0), parse=floats, check=_check_lambdas, metavar="L,L", help="Blend weights in [0, 1].",
    )
    variants_only: bool = option(
        False,
        help="Aggregate over the caption's variants only (the paper's code includes the caption).",
    )


@dataclass(frozen=True)
class VariantScores:
    """Per-item score tensors, ``[n, k, j]`` = caption k with image j of item n.

    Attributes
    ----------
    ids : list of str
        Item ids.
    original : ndarray, shape (N, 2, 2)
    variants : ndarray, shape (N, 2, 2, V)
        Variant scores, NaN-padded to the most variants of any caption (V may be 0).
    n_variants : ndarray of int, shape (N, 2)
    """

    ids: list[str]
    original: np.ndarray
    variants: np.ndarray
    n_variants: np.ndarray


def variant_scores(
    matrix: np.ndarray, done: np.ndarray, item_ids: Sequence[str], image_ids: Sequence[str],
    text_ids: Sequence[str], text_parent: Sequence[int] | np.ndarray,
) -> VariantScores:
    """Gather originals' and variants' scores per Winoground item from a cache's tables.

    Parameters
    ----------
    matrix, done : ndarray, shape (n_images, n_texts)
    item_ids : item ids (``winoground/17``); images ``<item>/i<j>``, captions ``<item>/c<k>``
    text_parent : int per text, the row of its original caption or -1
    """
    matrix = np.asarray(matrix, dtype=np.float64)
    parent = np.asarray(text_parent)
    image_row = {str(i): r for r, i in enumerate(image_ids)}
    text_row = {str(t): r for r, t in enumerate(text_ids) if parent[r] < 0}
    kids: dict[int, list[int]] = {}
    for r in np.flatnonzero(parent >= 0):
        kids.setdefault(int(parent[r]), []).append(int(r))
    ri, rt = [], []
    for item in item_ids:
        try:
            ri.append([image_row[f"{item}/i{j}"] for j in (0, 1)])
            rt.append([text_row[f"{item}/c{k}"] for k in (0, 1)])
        except KeyError as exc:
            raise InputError(f"cache: item {item!r} lacks image or caption {exc.args[0]!r} (not Winoground-shaped)") from None
    ri_a, rt_a = np.asarray(ri, dtype=np.int64).reshape(-1, 2), np.asarray(rt, dtype=np.int64).reshape(-1, 2)
    n_var = np.array([[len(kids.get(int(c), [])) for c in row] for row in rt_a], dtype=np.int64).reshape(-1, 2)
    vmax = int(n_var.max()) if n_var.size else 0
    vidx = np.full((len(rt_a), 2, vmax), -1, dtype=np.int64)
    for n, row in enumerate(rt_a):
        for k, c in enumerate(row):
            v = kids.get(int(c), [])
            vidx[n, k, : len(v)] = v
    orig = matrix[ri_a[:, None, :], rt_a[:, :, None]]
    if not done[ri_a[:, None, :], rt_a[:, :, None]].all():
        raise InputError("cache: some caption-image scores are missing; finish the extraction")
    safe = np.where(vidx < 0, 0, vidx)
    var = matrix[ri_a[:, None, :, None], safe[:, :, None, :]]  # (N, k, j, V)
    got = done[ri_a[:, None, :, None], safe[:, :, None, :]]
    real = np.broadcast_to((vidx >= 0)[:, :, None, :], var.shape)
    if not got[real].all():
        raise InputError(
            "cache: some variant-image scores are missing (a cross-encoder cache needs the variants "
            "scored against the item's images: extract with --variants)"
        )
    var = np.where(real, var, np.nan)
    return VariantScores([str(i) for i in item_ids], orig, var, n_var)


def blend(vs: VariantScores, agg: str, lam: float, include_original: bool = True) -> np.ndarray:
    """S' per item, shape (N, 2, 2). A caption without variants (and without the original) keeps S."""
    check_choice(agg, "agg", AGGS, kind="aggregation")
    check_probability(lam, "lambdas", meaning=" (each lambda)")
    pool = vs.variants
    if include_original:
        pool = np.concatenate([vs.original[..., None], pool], axis=-1)
    empty = np.isnan(pool).all(axis=-1) if pool.shape[-1] else np.ones(vs.original.shape, dtype=bool)
    if pool.shape[-1]:
        filled = np.where(np.isnan(pool), -np.inf if agg == "max" else 0.0, pool)
        if agg == "max":
            a = filled.max(axis=-1)
        else:
            a = filled.sum(axis=-1) / np.maximum((~np.isnan(pool)).sum(axis=-1), 1)
    else:
        a = vs.original.copy()
    a = np.where(empty, vs.original, a)
    return (1.0 - float(lam)) * vs.original + float(lam) * a


def run_variant_similarity(config: VariantSimilarityConfig) -> tuple[Path, Path, list[dict[str, Any]]]:
    """Compute the λ x agg grid and write the CSV, the per-item CSV and the manifest
    (:meth:`Experiment.run`)."""
    return EXPERIMENT.run(config)


def compute_variant_similarity(config: VariantSimilarityConfig, slot: RunSlot) -> RunRows:
    """The λ x agg grid: tidy rows, per-item rows and the manifest's entries."""
    from vlprobe.experiments.winoground_scores import _winoground_id, subset_masks
    from vlprobe.extract.cache.reader import ActivationCache

    aggs, lambdas = config.aggs, config.lambdas
    with ActivationCache(config.cache) as cache:
        if cache.header.dataset != "winoground":
            raise InputError(f"cache: {Path(config.cache).name} holds dataset {cache.header.dataset!r}, not winoground")
        matrix, done = cache.scores()
        items, images, texts = cache.table("items"), cache.table("images"), cache.table("texts")
        model = slot.label
        provenance = cache.provenance()
    vs = variant_scores(matrix, done, list(items["id"]), list(images["id"]), list(texts["id"]), texts["parent"])
    if not vs.n_variants.any():
        raise InputError(f"cache: {Path(config.cache).name} holds no caption variants (extract with --variants FILE)")
    tags = table_tags(items, texts)
    warn(missing_wwh_warning("winoground", tags, f"cache {Path(config.cache).name}",
                             "extract it again (the tags come with the dataset)"))
    ids = [_winoground_id(str(i)) for i in items["id"]]
    masks = subset_masks(ids, tags)
    say(config.progress, f"{EXPERIMENT.name}: {len(aggs)} aggregation(s) x {len(lambdas)} lambda(s) over {len(ids)} items "
                         f"(up to {vs.variants.shape[-1]} variants per caption); about "
                         f"{format_bytes(2 * vs.variants.nbytes)}")
    # One set of resampled items per subset, shared by every setting and metric: paired intervals.
    idx = {s: bootstrap_indices(int(m.sum()), config.bootstrap, config.bootstrap_seed) for s, m in masks.items() if m.any()}
    rows: list[dict[str, Any]] = []
    item_rows: list[dict[str, Any]] = []
    for agg in aggs:
        for lam in lambdas:
            outcomes = winoground_outcomes(blend(vs, agg, lam, not config.variants_only))
            for subset, mask in masks.items():
                n = int(mask.sum())
                for metric in ("text", "image", "group"):
                    row = {"experiment": EXPERIMENT.name, "model": model, "agg": agg, "lambda": lam, "task": "target",
                           "split": "all", "subset": subset, "n": n}
                    hit = 100.0 * outcomes[metric][mask]
                    rows.append({**row, "metric": metric, "value": float(hit.mean()) if n else float("nan")})
                    if n:
                        rows += ci95_rows(row, metric, hit[idx[subset]].mean(axis=1))
            for metric in ("text", "image", "group"):
                item_rows += [{"experiment": EXPERIMENT.name, "model": model, "agg": agg, "lambda": lam, "task": "target",
                               "split": "all", "subset": item_id, "metric": metric, "value": 100.0 * float(v), "n": 1}
                              for item_id, v in zip(vs.ids, outcomes[metric], strict=True)]
    return RunRows(rows, {"cache": provenance}, item_rows=item_rows, extra={
        "units": units_of(rows), "model": model, "n_items": len(ids),
        "variants_per_caption": {"min": int(vs.n_variants.min()), "max": int(vs.n_variants.max()),
                                 "mean": float(vs.n_variants.mean())},
        "bootstrap": {"resamples": config.bootstrap, "seed": config.bootstrap_seed, "level": 0.95,
                      "over": "items of the subset, the same resamples for every setting and metric"},
        "outputs": [slot.file(".csv"), slot.file(".items.csv")],
    })


def report(config: VariantSimilarityConfig, result: tuple[Path, Path, list[dict[str, Any]]]) -> list[str]:
    """Text, image and group scores over every item per setting (the interval rows aside), then the files written."""
    csv_path, _, rows = result
    lines = [f"{r['model']:<12} {'agg=' + r['agg'] + ' lambda=' + format(r['lambda'], 'g'):<22} {r['metric']:<6} "
             f"{r['value']:7.2f}  (n={r['n']})" for r in rows if r["subset"] == "all" and "." not in r["metric"]]
    return [*lines, wrote_line(csv_path, f"{csv_path.stem}.items.csv")]


# Version 2: wwh=Easier/Harder from the 172 untagged ids; the paper code's split as *-WWH-code.
# 3: agg and lambda in setting columns (were packed into the probe column).
# 4: bow=same / bow=different slices.
# 5: wwh=NoTag/Easier/Harder are the paper's sets (171/201/199), the 172/202/198 ones *-corrected.
EXPERIMENT = Experiment("variant-similarity", 5, VariantSimilarityConfig, compute_variant_similarity, report,
                        label=cache_label,
                        swept=("aggs", "lambdas"), row_columns=("agg", "lambda"),
                        chart=Chart("lambda", ("text", "image", "group"), chance=WINOGROUND_CHANCE))
