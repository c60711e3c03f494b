"""One unit per metric name, in every CSV and manifest of every experiment.

A metric name means one quantity in one unit wherever it appears: the tidy CSV, the per-case
CSV (``<model>.items.csv``), the summary CSV and the manifest's ``units``. Percentages are
percentages everywhere, per case too (a separable case is 100, not 1), so the mean of the
per-case values of a ``percent`` metric is the aggregate. Interval rows
(``<metric>.ci95_low`` / ``.ci95_high``) carry their metric's unit; so do selectivity rows
(``task`` selectivity: target minus control, in the metric's unit, hence possibly negative).
Permutation-test rows ``<metric>.p_value`` are probabilities (:data:`P_VALUE`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["BITS", "BITS_PER_EXAMPLE", "GAP", "MARGIN", "NOT_MEANS", "PERCENT", "P_VALUE", "RANK", "RATIO", "SCORE_CHANGE", "SHARE",
           "base_metric", "metric_unit", "short_unit", "units_of"]

PERCENT = "percent"
RANK = "rank (1 = best; ties count against the model)"
MARGIN = "2/||w|| in the (scaled) state space"
P_VALUE = "probability (two-sided p-value)"
BITS = "bits (total over the examples)"
BITS_PER_EXAMPLE = "bits per example (held-out cross-entropy, log base 2)"
RATIO = "ratio (uniform code length / online code length)"
SCORE_CHANGE = "the model's own score (cosine or match probability), difference"
SHARE = "fraction of the full change (1 = the donor's score)"
GAP = "the blind scorer's own score, positive minus negative caption"

_UNITS: dict[str, str] = {
    # Winoground scores (winoground-scores, variant-similarity)
    "text": PERCENT, "image": PERCENT, "group": PERCENT, "matching": PERCENT,
    # recall (recall@k is matched by pattern)
    "median_rank": RANK, "mean_rank": RANK,
    # separability
    "separable": PERCENT, "no_hyperplane": PERCENT, "train_accuracy": PERCENT, "converged": PERCENT,
    "separable_margin": MARGIN, "heldout_accuracy": PERCENT,
    # online code length (mdl)
    "online_code": BITS, "uniform_code": BITS, "compression": RATIO,
    # conditional probing
    "bits_prior": BITS_PER_EXAMPLE, "bits_baseline": BITS_PER_EXAMPLE, "bits_layer": BITS_PER_EXAMPLE,
    "bits_joint": BITS_PER_EXAMPLE, "information_gain": BITS_PER_EXAMPLE,
    "accuracy_baseline": PERCENT, "accuracy_layer": PERCENT, "accuracy_joint": PERCENT,
    # activation patching
    "score_change": SCORE_CHANGE, "full_change": SCORE_CHANGE, "recovered": SHARE,
    # MLP probes, SugarCrepe
    "accuracy": PERCENT,
    # ARO
    "macro_accuracy": PERCENT, "precision_at_1": PERCENT,
    # MMVP-VLM
    "pair_accuracy": PERCENT,
    # NaturalBench
    "question_accuracy": PERCENT, "image_accuracy": PERCENT, "binary_accuracy": PERCENT, "group_accuracy": PERCENT,
    # SugarCrepe++
    "itt": PERCENT, "image_p1_neg": PERCENT, "image_p2_neg": PERCENT, "tot": PERCENT,
    # VALSE
    "acc_r": PERCENT, "acc_r_valse": PERCENT, "auroc": PERCENT, "caption_tpr": PERCENT,
    "foil_tnr": PERCENT, "acc": PERCENT, "min_rate": PERCENT, "ppv": PERCENT, "npv": PERCENT,
    "min_precision": PERCENT,
    # bias-gap (gap: the mean gap; gap_q05 ... gap_q95 and gap_median: its quantiles; gap_positive: share > 0)
    "ties": PERCENT, "gap_positive": PERCENT, "gap": GAP, "gap_std": GAP, "gap_q05": GAP, "gap_q25": GAP, "gap_median": GAP,
    "gap_q75": GAP, "gap_q95": GAP,
}
#: Metrics that summarise the per-case values otherwise than by their mean (spread, quantiles, a mean
#: over groups, a rank statistic): a per-case file holds none of them (every other metric of a per-case file averages to its aggregate).
NOT_MEANS: frozenset[str] = frozenset({"gap_std", "gap_q05", "gap_q25", "gap_median", "gap_q75", "gap_q95",
                                      "macro_accuracy", "auroc"})
_RECALL = re.compile(r"^recall@\d+$")
_INTERVAL = re.compile(r"\.ci95_(low|high)$")
_P_VALUE = re.compile(r"\.p_value$")


def base_metric(metric: str) -> str:
    """The metric an interval row belongs to (``text.ci95_low`` -> ``text``); others unchanged."""
    return _INTERVAL.sub("", metric)


def metric_unit(metric: str) -> str:
    """The unit of a metric name (or of its interval rows).

    Raises
    ------
    KeyError
        The name is not declared here: a new metric must be given its unit first.
    """
    if _P_VALUE.search(metric):
        metric_unit(_P_VALUE.sub("", metric))  # the tested metric must be declared too
        return P_VALUE
    name = base_metric(metric)
    if _RECALL.match(name):
        return PERCENT
    try:
        return _UNITS[name]
    except KeyError:
        raise KeyError(f"metric {name!r} has no declared unit (vlprobe.runs.units)") from None


#: Short forms of units too long for an axis label or a column header.
_SHORT_UNITS = {PERCENT: "%", MARGIN: "2/‖w‖, scaled states", P_VALUE: "p-value"}


def short_unit(unit: str) -> str:
    """A unit as an axis label or a column header shows it: ``percent`` as ``%``, a long unit by
    its head (``rank (1 = best; ...)`` -> ``rank``)."""
    if unit in _SHORT_UNITS:
        return _SHORT_UNITS[unit]
    head = unit.split(" (")[0]
    return head if head.count("(") == head.count(")") else unit


def units_of(*row_sets: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """``{metric: unit}`` of every metric in the rows (intervals folded into their metric), first seen first."""
    out: dict[str, str] = {}
    for rows in row_sets:
        for row in rows:
            name = base_metric(str(row["metric"]))
            if name not in out:
                out[name] = metric_unit(name)
    return out
