"""The known-answer table of the testbed: what each model's results should show, and whether they do.

The testbed (:mod:`vlprobe.launch.testbed`) runs every experiment on models whose answers are
known: a small CLIP trained on synthetic scenes (``clip-trained``); its order-blind control
(``clip-bow``: the same data and loss with a text tower that cannot see word order by
construction, :mod:`vlprobe.fixtures.bow_clip`); the same CLIP trained on captions with shuffled
words (``clip-shuffle``, when the run includes it: a causal tower with positions trained not to
use order, which is not the same thing); the CLIP's untrained initial weights (``clip-random``);
an LXMERT trained on oracle regions with hard negatives until it binds attributes to objects and
objects to places (``lxmert-trained``), the same LXMERT trained only to tell which objects a
caption names (``lxmert-objects``: negatives are other items' captions), and its initial weights
(``lxmert-random``). :func:`known_answer_table` reads the experiments' CSVs back into one row per
(model, metric); :data:`EXPECTATIONS` lists the comparisons a working probe must reproduce, each
with what it means when it does not hold; :func:`write_report` writes the table, the comparison
figure and a summary whose sentences are computed from the numbers.

Metrics (percent unless named otherwise)
----------------------------------------
``winoground.text|image|group``      Winoground scores over all items (``winoground-scores``);
``winoground.text.same_words``       the text score over items whose two captions hold the same
                                     multiset of words (every synthetic item), a difference within
                                     :data:`TIE_TOLERANCE` counted as a tie (and a tie as wrong):
                                     a model blind to word order cannot tell those captions apart;
``winoground.same_words.tied``       % of those items whose two captions tie (within
                                     :data:`TIE_TOLERANCE`) with both images;
``match.auroc``                      matching pairs against the swapped pairs of the same items,
                                     ranked by the model's score (0.5 = chance);
``recall.i2t@1``, ``recall.t2i@1``   recall at 1 over the full matrix (dual encoders);
``separability.<m>.<task>``          at the last layer of the text (CLIP) or language (LXMERT)
                                     stream, ``m`` = ``separable_margin`` (mean SVM margin over
                                     the separable cases), ``separable`` (% of cases) or
                                     ``heldout_accuracy`` (leave-one-out accuracy over each
                                     item's variants), ``task`` = target or control (mean over
                                     seeds); ``separable_margin.ratio`` = target / control;
``task_adaptation.<mode>.<task>``    test accuracy of the task-adapted MLP, mode ``text|image``;
``variant_probe.<task>``             test accuracy at the last layer of the variant probe;
``variant_similarity.text``          text score of the variant-aware similarity (mean over the
                                     caption and its variants, λ = 0.5).

What "% separable" can and cannot show
--------------------------------------
The paper's separability counts an item as separable when a linear SVM fits its variants'
labels perfectly. With fewer points than dimensions (here 8 to 14 points in 64 dimensions; in
the paper's models 10 or so in 512 to 768) almost any labelling of points in general position is
linearly separable, so the control (labels shuffled) is near 100 % too: the metric saturates and
shows no selectivity even where the model does separate the captions. The known answer is stated
so (both near 100), the margin (how far apart the two families lie) and the held-out accuracy
(whether a variant the SVM did not see lands on its caption's side) are the answers that move.
"""

from __future__ import annotations

import csv
import json
import math
import operator
import os
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlprobe.io.atomic import atomic_path, atomic_write
from vlprobe.io.paths import ensure_folder
from vlprobe.runs.charts import NO_MARGIN
from vlprobe.runs.summary import read_tidy_csv, summarize
from vlprobe.validation import InputError

__all__ = [
    "CLIP_MODELS",
    "EXPECTATIONS",
    "LXMERT_MODELS",
    "TIE_TOLERANCE",
    "Expectation",
    "check_expectations",
    "comparison_figure",
    "known_answer_table",
    "read_checks",
    "read_report",
    "run_file",
    "verdict_line",
    "verdict_rows",
    "write_report",
]

#: The CLIP testbed models, in the figure's column order (``clip-shuffle`` only in runs that train it).
CLIP_MODELS = ("clip-trained", "clip-bow", "clip-shuffle", "clip-random")
LXMERT_MODELS = ("lxmert-trained", "lxmert-objects", "lxmert-random")
_LAST_LAYER_STREAMS = ("text", "lang")
#: Two scores closer than this are a tie. An order-blind text tower gives two captions with the
#: same words the same embedding in arithmetic; in floating point its sums run in another order,
#: which moves a cosine by a few 1e-8 (measured on the testbed's control: at most 6e-8, and 72 of its 100
#: items tie bit for bit; the shuffled-words CLIP's smallest gap is 2.5e-4).
TIE_TOLERANCE = 1e-5
_OPS: dict[str, Callable[[float, float], bool]] = {">": operator.gt, "<": operator.lt, ">=": operator.ge,
                                                   "<=": operator.le}


@dataclass(frozen=True)
class Expectation:
    """``left`` ``op`` ``right``, by more than ``by``: a known answer.

    ``left`` and ``right`` are ``(model, metric)``; ``right`` may instead be a number. ``op`` is
    ``>``, ``<``, ``>=`` or ``<=``. ``by`` is the least difference that counts (``left > right +
    by``, ``left < right - by``): a model compared with another model must beat it by more than
    item noise (one item of 100 moves a score by 1 point; chance-level AUROCs differ by a few
    thousandths). ``if_not`` says what it means when the answer does not come out.
    """

    claim: str
    left: tuple[str, str]
    op: str
    right: tuple[str, str] | float
    by: float = 0.0
    if_not: str = ""

    def evaluate(self, values: Mapping[tuple[str, str], float]) -> tuple[float, float, bool] | None:
        """(left value, right value, whether it holds), or None if a value is missing."""
        lhs = values.get(self.left)
        rhs = self.right if isinstance(self.right, (int, float)) else values.get(self.right)
        if lhs is None or rhs is None or not (math.isfinite(lhs) and math.isfinite(rhs)):
            return None
        bound = rhs + self.by if self.op.startswith(">") else rhs - self.by
        return lhs, float(rhs), _OPS[self.op](lhs, bound)


#: Least difference between two models' Winoground scores that counts (percentage points).
_POINTS = 5.0
#: "Well above": least difference for a model that learnt the task against one that cannot.
_WELL = 20.0

_BOW, _TRAINED, _RANDOM = "clip-bow", "clip-trained", "clip-random"
_LX, _LX_OBJECTS, _LX_RANDOM = "lxmert-trained", "lxmert-objects", "lxmert-random"
_WORD_ORDER = ("the trained CLIP did not learn word order (fewer training steps than the default?), or the "
               "control is not blind to it")

EXPECTATIONS: tuple[Expectation, ...] = (
    Expectation("trained CLIP tells minimal-pair captions apart better than its order-blind control",
                (_TRAINED, "winoground.text"), ">", (_BOW, "winoground.text"), _POINTS, _WORD_ORDER),
    Expectation("... and minimal-pair images",
                (_TRAINED, "winoground.image"), ">", (_BOW, "winoground.image"), _POINTS, _WORD_ORDER),
    Expectation("trained CLIP beats its random initial weights on the text score",
                (_TRAINED, "winoground.text"), ">", (_RANDOM, "winoground.text"), _POINTS,
                "the CLIP did not learn the synthetic world"),
    Expectation("... and on the image score",
                (_TRAINED, "winoground.image"), ">", (_RANDOM, "winoground.image"), _POINTS,
                "the CLIP did not learn the synthetic world"),
    Expectation("the order-blind control ties every same-words pair, with both images (% of items)",
                (_BOW, "winoground.same_words.tied"), ">=", 100.0, 0.0,
                "the control's text tower sees word order: it is not a bag-of-words control"),
    Expectation("... while the trained CLIP tells most of them apart (text score on them)",
                (_TRAINED, "winoground.text.same_words"), ">", (_BOW, "winoground.text.same_words"), _WELL,
                _WORD_ORDER),
    Expectation("separability (margin), trained CLIP: target far above control at the last text layer",
                (_TRAINED, "separability.separable_margin.target"), ">",
                (_TRAINED, "separability.separable_margin.control"), 1.0,
                "the caption families do not lie apart in the last layer: the probe misses what the model learnt"),
    Expectation("separability (% separable) saturates: the shuffled-label control is near 100 % separable too",
                (_TRAINED, "separability.separable.control"), ">=", 90.0, 0.0,
                "fewer than 90 % of random labellings separate: more points per item than the paper's setting?"),
    Expectation("... so the trained CLIP's target is near 100 % too, with no selectivity to show",
                (_TRAINED, "separability.separable.target"), ">=", 85.0, 0.0,
                "the trained model's caption families overlap in many items"),
    Expectation("the order-blind control cannot separate its captions: caption 0 and caption 1 are one point",
                (_BOW, "separability.separable.target"), "<=", 5.0, 0.0,
                "the control's caption 0 and caption 1 differ: its text tower sees word order"),
    Expectation("held-out separability, trained CLIP: a variant the SVM did not see lands on its caption's side",
                (_TRAINED, "separability.heldout_accuracy.target"), ">",
                (_TRAINED, "separability.heldout_accuracy.control"), 15.0,
                "the direction that separates a caption's variants does not generalise to a new variant"),
    Expectation("... and far more often than for the order-blind control",
                (_TRAINED, "separability.heldout_accuracy.target"), ">", (_BOW, "separability.heldout_accuracy.target"),
                _WELL, _WORD_ORDER),
    Expectation("task adaptation (text score), trained CLIP: above its control task",
                (_TRAINED, "task_adaptation.text.target"), ">", (_TRAINED, "task_adaptation.text.control"), _POINTS,
                "an MLP on the pair embeddings cannot learn the text score from 300 items at the testbed's settings"),
    Expectation("task adaptation (image score), trained CLIP: above its control task",
                (_TRAINED, "task_adaptation.image.target"), ">", (_TRAINED, "task_adaptation.image.control"), _POINTS,
                "an MLP on the pair embeddings cannot learn the image score from 300 items at the testbed's settings"),
    Expectation("task adaptation (text score), random weights: at chance (< 60)",
                (_RANDOM, "task_adaptation.text.target"), "<", 60.0, 0.0,
                "the MLP finds the answer in random features: a leak between the task's splits"),
    Expectation("variant probe, trained CLIP: above its control task at the last layer",
                (_TRAINED, "variant_probe.target"), ">", (_TRAINED, "variant_probe.control"), _POINTS,
                "the last layer does not tell a paraphrase from a swap, or the probe cannot read it"),
    Expectation("LXMERT on oracle regions tells a caption from its swap (matching AUROC > 0.8)",
                (_LX, "match.auroc"), ">", 0.8, 0.0,
                "LXMERT did not learn which attribute belongs to which object, or which object is where"),
    Expectation("LXMERT on oracle regions: Winoground text score well above random weights",
                (_LX, "winoground.text"), ">", (_LX_RANDOM, "winoground.text"), _WELL,
                "LXMERT did not learn to bind (see the AUROC)"),
    Expectation("... and the image score",
                (_LX, "winoground.image"), ">", (_LX_RANDOM, "winoground.image"), _WELL,
                "LXMERT did not learn to bind (see the AUROC)"),
    Expectation("the LXMERT trained on swaps (binding) beats the one that only learnt which objects are named",
                (_LX, "winoground.text"), ">", (_LX_OBJECTS, "winoground.text"), _WELL,
                "the swaps taught LXMERT nothing that another item's caption does not"),
    Expectation("... on the image score too",
                (_LX, "winoground.image"), ">", (_LX_OBJECTS, "winoground.image"), _WELL,
                "the swaps taught LXMERT nothing that another item's caption does not"),
)


def run_file(results: Path, experiment: str, model: str, suffix: str = ".csv") -> Path | None:
    """The output of ``model``'s run of ``experiment`` in ``results``: ``<model><suffix>``, or the
    one settings-keyed run ``<model>@<settings><suffix>``; None when there is none."""
    import glob

    folder = Path(results) / experiment
    if (folder / f"{model}{suffix}").is_file():
        return folder / f"{model}{suffix}"
    others = (".summary.csv", ".items.csv", ".scores.jsonl")
    found = [p for p in sorted(folder.glob(f"{glob.escape(model)}@*{suffix}"))
             if not any(p.name.endswith(o) for o in others if o != suffix)]
    if len(found) > 1:
        raise InputError(f"results: {len(found)} runs of {model!r} in {str(folder)!r} ({found[0].name}, ...); "
                         "the known-answer table reads one run per model and experiment")
    return found[0] if found else None


def _rows(results: Path, experiment: str, model: str) -> list[dict[str, str]]:
    path = run_file(results, experiment, model)
    return read_tidy_csv(path) if path is not None else []


def _pair_scores(path: Path) -> dict[str, dict[tuple[int, int], float]]:
    """Per item id: (image k, caption j) -> score, from a ``winoground-scores`` scores file."""
    out: dict[str, dict[tuple[int, int], float]] = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                rec = json.loads(line)
                image, text = int(rec["image"].rsplit("/i", 1)[1]), int(rec["text"].rsplit("/c", 1)[1])
                out.setdefault(rec["item"], {})[(image, text)] = float(rec["score"])
    return out


def _auroc(positives: Sequence[float], negatives: Sequence[float]) -> float:
    """P(positive > negative) + 0.5 P(tie)."""
    if not positives or not negatives:
        return float("nan")
    wins = sum((p > n) + 0.5 * (p == n) for p in positives for n in negatives)
    return wins / (len(positives) * len(negatives))


def _score_metrics(scores_file: Path, captions: Mapping[str, tuple[str, str]]) -> dict[str, float]:
    per_item = _pair_scores(scores_file)
    same, correct, tied, pos, neg = 0, 0, 0, [], []
    for item, s in per_item.items():
        if {(0, 0), (0, 1), (1, 0), (1, 1)} - set(s):
            continue
        pos += [s[0, 0], s[1, 1]]
        neg += [s[0, 1], s[1, 0]]
        c0, c1 = captions.get(item, ("", ""))
        if c0 and Counter(c0.split()) == Counter(c1.split()):
            same += 1
            # Image k's score for its own caption against the other one's; within the tolerance, a tie.
            gaps = (s[0, 0] - s[0, 1], s[1, 1] - s[1, 0])
            correct += all(g > TIE_TOLERANCE for g in gaps)
            tied += all(abs(g) <= TIE_TOLERANCE for g in gaps)
    out = {"match.auroc": _auroc(pos, neg)}
    if same:
        out["winoground.text.same_words"] = 100.0 * correct / same
        out["winoground.same_words.tied"] = 100.0 * tied / same
    return out


def _last_layer(summary: list[dict[str, Any]], metric: str, split: str, subset: str = "all") -> dict[str, Any] | None:
    recs = [r for r in summary if r["metric"] == metric and r["split"] == split and r["subset"] == subset
            and r["stream"] in _LAST_LAYER_STREAMS and r["layer"] not in ("", None)]
    if not recs:
        return None
    stream = next(s for s in _LAST_LAYER_STREAMS if any(r["stream"] == s for r in recs))
    recs = [r for r in recs if r["stream"] == stream]
    return max(recs, key=lambda r: int(r["layer"]))


def _experiment_metrics(results: Path, model: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for row in _rows(results, "winoground-scores", model):
        if row["subset"] == "all" and row["metric"] in ("text", "image", "group"):
            out[f"winoground.{row['metric']}"] = float(row["value"])
    for row in _rows(results, "recall", model):
        if row["subset"] in ("i2t", "t2i") and row["metric"] == "recall@1":
            out[f"recall.{row['subset']}@1"] = float(row["value"])
    sep = summarize(_rows(results, "separability", model))
    for metric, split in (("separable_margin", "train"), ("separable", "train"), ("heldout_accuracy", "heldout")):
        rec = _last_layer(sep, metric, split)
        if rec is not None:
            out[f"separability.{metric}.target"] = rec["target_mean"]
            out[f"separability.{metric}.control"] = rec["control_mean"]
    if out.get("separability.separable_margin.control"):
        out["separability.separable_margin.ratio"] = (
            out["separability.separable_margin.target"] / out["separability.separable_margin.control"])
    for rec in summarize(_rows(results, "task-adaptation", model)):
        if rec["metric"] == "accuracy" and rec["split"] == "test" and rec["subset"] in ("text-score", "image-score"):
            mode = rec["subset"].split("-")[0]
            out[f"task_adaptation.{mode}.target"] = rec["target_mean"]
            out[f"task_adaptation.{mode}.control"] = rec["control_mean"]
    rec = _last_layer(summarize(_rows(results, "variant-probe", model)), "accuracy", "test")
    if rec is not None:
        out["variant_probe.target"] = rec["target_mean"]
        out["variant_probe.control"] = rec["control_mean"]
    for row in _rows(results, "variant-similarity", model):
        if (row["subset"] == "all" and row["metric"] == "text" and row.get("agg") == "mean"
                and row.get("lambda") not in (None, "") and float(row["lambda"]) == 0.5):
            out["variant_similarity.text"] = float(row["value"])
    return out


def _captions(data_dir: Path) -> dict[str, tuple[str, str]]:
    out = {}
    with open(Path(data_dir) / "examples.jsonl", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                row = json.loads(line)
                out[f"winoground/{row['id']}"] = (row["caption_0"], row["caption_1"])
    return out


def known_answer_table(
    results: str | os.PathLike[str], data_dir: str | os.PathLike[str], models: Sequence[str],
    seeds: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """One row per (model, metric) from the experiments' outputs in ``results``.

    Parameters
    ----------
    results : path
        The experiments' output folder (``OUT`` of ``probe run NAME --out OUT --model MODEL``).
    data_dir : path
        The evaluation dataset (for the same-words subset).
    models : sequence of str
        Model names as the experiments wrote them.
    seeds : mapping, optional
        Recorded in every row's ``seeds`` column (training and probe seeds).

    Returns
    -------
    list of dict
        Keys ``model``, ``metric``, ``value``, ``seeds`` (JSON).
    """
    results = Path(results)
    captions = _captions(Path(data_dir))
    table = []
    for model in models:
        metrics = _experiment_metrics(results, model)
        scores = run_file(results, "winoground-scores", model, ".scores.jsonl")
        if scores is not None:
            metrics.update(_score_metrics(scores, captions))
        for metric in sorted(metrics):
            table.append({"model": model, "metric": metric, "value": metrics[metric],
                          "seeds": json.dumps(dict(seeds or {}), sort_keys=True)})
    return table


def check_expectations(table: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each of :data:`EXPECTATIONS` against the table: claim, values, holds (None: not measured),
    and ``if_not`` (what it means when it does not hold)."""
    values = {(r["model"], r["metric"]): float(r["value"]) for r in table}
    out = []
    for exp in EXPECTATIONS:
        got = exp.evaluate(values)
        right = exp.right if isinstance(exp.right, (int, float)) else " ".join(exp.right)
        out.append({
            "claim": exp.claim, "left": " ".join(exp.left), "op": exp.op, "right": right, "by": exp.by,
            "left_value": None if got is None else got[0], "right_value": None if got is None else got[1],
            "holds": None if got is None else got[2], "if_not": exp.if_not,
        })
    return out


def _by(c: Mapping[str, Any]) -> str:
    """The least difference of a check as its comparison reads (`` + 5``, `` - 5``; none: empty)."""
    return f" {'+' if c['op'].startswith('>') else '-'} {c['by']:g}" if c.get("by") else ""


def _why(c: Mapping[str, Any]) -> str:
    """What a check that does not hold means."""
    return c.get("if_not") or "a finding about the probes or the testbed"


def _measured(c: Mapping[str, Any]) -> str:
    """``left = value`` and the comparison it was put to (``> right = value + by``)."""
    if c["holds"] is None:
        return "not measured"
    right = (f"{c['right_value']:.4g}" if isinstance(c["right"], (int, float))  # a bound, not a model's value
             else f"{c['right']} = {c['right_value']:.4g}")
    return f"{c['left']} = {c['left_value']:.4g} {c['op']} {right}{_by(c)}"


def verdict_line(checks: Sequence[Mapping[str, Any]]) -> str:
    """``"16 of 16 known answers hold"``, with how many were not measured."""
    held = sum(c["holds"] is True for c in checks)
    missing = sum(c["holds"] is None for c in checks)
    line = f"{held} of {len(checks)} known answers hold"
    return line + (f" ({missing} not measured: a model or an experiment was left out of the run)" if missing else "")


def verdict_rows(checks: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, str, str]]:
    """Per check: the claim, what was measured, what was expected, and ``yes`` or ``NO: <why>``."""
    rows = []
    for c in checks:
        expected = f"{c['op']} {c['right']}{_by(c)}"
        if c["holds"] is None:
            held = "not measured"
        else:
            held = "yes" if c["holds"] else f"NO: {_why(c)}"
        measured = "" if c["holds"] is None else f"{c['left']} = {c['left_value']:.4g}" + (
            "" if isinstance(c["right"], (int, float)) else f"; {c['right']} = {c['right_value']:.4g}")
        rows.append((c["claim"], measured, expected, held))
    return rows


def read_checks(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The checks of a ``known_answers.json`` (:func:`write_report`); an InputError names a file
    that is not one."""
    from vlprobe.validation import check_file

    path = check_file(path, "known_answers")
    try:
        checks = json.loads(Path(path).read_text(encoding="utf-8"))["checks"]
    except (ValueError, KeyError, TypeError):
        raise InputError(f"known_answers: {str(path)!r} is not a known_answers.json of `probe fixtures known-answers`") from None
    if not isinstance(checks, list) or not all(isinstance(c, dict) and "claim" in c and "holds" in c for c in checks):
        raise InputError(f"known_answers: {str(path)!r} is not a known_answers.json of `probe fixtures known-answers`")
    return checks


def _summary_text(checks: Sequence[Mapping[str, Any]], table: Sequence[Mapping[str, Any]], note: str) -> str:
    lines = ["Known answers of the testbed (computed from the result CSVs)", ""]
    for c in checks:
        if c["holds"] is None:
            lines.append(f"[not measured] {c['claim']}")
            continue
        mark = "holds" if c["holds"] else "DOES NOT HOLD"
        lines.append(f"[{mark}] {c['claim']}: {_measured(c)}")
        if not c["holds"]:
            lines.append(f"    why it matters: {_why(c)}")
    lines += ["", verdict_line(checks) + "."]
    lines += ["", "% separable saturates: with fewer points per item than dimensions almost any labelling is "
                  "linearly separable, so the shuffled-label control is near 100 % too and the metric shows no "
                  "selectivity. The margin and the held-out accuracy are the answers that move (see the "
                  "separability lines above)."]
    if note:
        lines += ["", note]
    lines += ["", "model            metric                              value"]
    lines += [f"{r['model']:<16} {r['metric']:<35} {float(r['value']):8.2f}" for r in table]
    return "\n".join(lines) + "\n"


#: The rows of the comparison figure: (experiment, metric, split, axis label, chance level or None).
_FIGURE_ROWS = (
    ("separability", "separable_margin", "train", "separability: mean SVM margin\n(separable cases)", None),
    ("variant-probe", "accuracy", "test", "variant probe: test accuracy (%)", 50.0),
)


def _figure(results: Path, out_png: Path, models: Sequence[str]) -> Path | None:
    """Write :func:`comparison_figure` as ``out_png`` (None, and no file, when there is nothing to draw)."""
    fig = comparison_figure(results, models)
    if fig is None:
        return None
    with atomic_path(out_png) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    return out_png


def comparison_figure(results: Path, models: Sequence[str]) -> Any | None:
    """Target vs control per layer (rows: separability margin, variant-probe accuracy), one column
    per model; mean over seeds and the min-max band. Target solid with filled circles, control
    dashed with open squares (:data:`~vlprobe.results.plots.TASK_STYLES`), so the two read apart in
    greyscale and with any colour vision; chance as a dotted line where the task has one; a layer
    where one task has a value and the other none is marked with a cross on the axis, and the
    legend says why (a margin is a mean over the separable cases: none separable, no margin)."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.transforms import blended_transform_factory

    from vlprobe.results.plots import TASK_COLORS, TASK_STYLES

    present = [p for p in _FIGURE_ROWS if any(run_file(results, p[0], m) is not None for m in models)]
    if not present:
        return None
    fig = Figure(figsize=(4.2 * len(models), 3.2 * len(present) + 0.6))
    axes = fig.subplots(len(present), len(models), squeeze=False, sharey="row")
    crossed = chance_drawn = False
    for r, (experiment, metric, split, label, chance) in enumerate(present):
        for c, model in enumerate(models):
            ax = axes[r][c]
            recs = [rec for rec in summarize(_rows(results, experiment, model))
                    if rec["metric"] == metric and rec["split"] == split and rec["subset"] == "all"
                    and rec["stream"] in _LAST_LAYER_STREAMS and rec["layer"] not in ("", None)]
            recs.sort(key=lambda rec: int(rec["layer"]))
            xs = [int(rec["layer"]) for rec in recs]
            for task in ("target", "control"):
                style, marker, face = TASK_STYLES[task]
                color = TASK_COLORS[task]
                mean = [rec[f"{task}_mean"] for rec in recs]
                ax.plot(xs, mean, ls=style, marker=marker, ms=4, mfc=face or color, color=color, lw=1.6, zorder=3)
                ax.fill_between(xs, [rec[f"{task}_min"] for rec in recs], [rec[f"{task}_max"] for rec in recs],
                                color=color, alpha=0.2, linewidth=0)
                other = "control" if task == "target" else "target"
                gaps = [x for x, m, rec in zip(xs, mean, recs, strict=True)
                        if not math.isfinite(m) and math.isfinite(rec[f"{other}_mean"])]
                if gaps:
                    crossed = True
                    ax.plot(gaps, [0.0] * len(gaps), ls="none", marker="x", ms=7, mew=1.6, color=color, clip_on=False,
                            zorder=4, transform=blended_transform_factory(ax.transData, ax.transAxes))
            if chance is not None:
                chance_drawn = True
                ax.axhline(chance, color="0.27", ls=":", lw=1.1, zorder=2)
            if metric == "separable_margin" and any(
                    rec[f"{task}_{k}"] > 0 for rec in recs for task in ("target", "control") for k in ("min", "max")):
                ax.set_yscale("log")  # NaN-only or non-positive margins cannot be drawn on a log axis
            if xs:
                ax.set_xticks(xs)
            ax.set_title(f"{model}" if r == 0 else "", fontsize=10)
            ax.set_xlabel("text layer (0: embeddings)")
            ax.grid(alpha=0.3)
        axes[r][0].set_ylabel(label, fontsize=9)
    handles = [Line2D([], [], color=TASK_COLORS[t], ls=TASK_STYLES[t][0], marker=TASK_STYLES[t][1],
                      mfc=TASK_STYLES[t][2] or TASK_COLORS[t], ms=5) for t in ("target", "control")]
    names = ["target", "control (labels shuffled or flipped)"]
    if chance_drawn:
        handles.append(Line2D([], [], color="0.27", ls=":"))
        names.append("chance (variant probe: 50%)")
    if crossed:
        handles.append(Line2D([], [], color="0.2", ls="none", marker="x", ms=7, mew=1.6))
        names.append(NO_MARGIN)
    fig.legend(handles, names, loc="lower center", ncol=len(handles), fontsize=8.5, frameon=False)
    fig.suptitle("Known-answer testbed: target vs control per layer (mean, min–max band over seeds)")
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig


def write_report(
    results: str | os.PathLike[str], data_dir: str | os.PathLike[str], out: str | os.PathLike[str], *,
    models: Sequence[str] = (*CLIP_MODELS, *LXMERT_MODELS), seeds: Mapping[str, Any] | None = None,
    note: str = "",
) -> dict[str, Any]:
    """Write ``known_answers.csv``, ``known_answers.json`` (checks), ``comparison.png`` and
    ``summary.txt`` into ``out``; return the table, checks, summary text and paths."""
    out = Path(out)
    ensure_folder(out)
    table = known_answer_table(results, data_dir, models, seeds)
    checks = check_expectations(table)
    with atomic_write(out / "known_answers.csv") as fh:
        writer = csv.DictWriter(fh, ["model", "metric", "value", "seeds"], lineterminator="\n")
        writer.writeheader()
        writer.writerows(table)
    with atomic_write(out / "known_answers.json") as fh:
        json.dump({"checks": checks, "seeds": dict(seeds or {})}, fh, indent=2, sort_keys=True)
        fh.write("\n")
    text = _summary_text(checks, table, note)
    with atomic_write(out / "summary.txt") as fh:
        fh.write(text)
    figure = _figure(Path(results), out / "comparison.png",  # the CLIPs this run has (clip-shuffle only on request)
                     [m for m in CLIP_MODELS if m in models and run_file(Path(results), "separability", m) is not None])
    return {"table": table, "checks": checks, "summary": text, "figure": figure,
            "csv": out / "known_answers.csv", "summary_path": out / "summary.txt"}


def read_report(out: str | os.PathLike[str]) -> dict[str, Any]:
    """The report :func:`write_report` wrote into ``out``, read back (the same keys; a table
    row's ``value`` as a float)."""
    out = Path(out)
    with open(out / "known_answers.csv", newline="", encoding="utf-8") as fh:
        table = [{**row, "value": float(row["value"])} for row in csv.DictReader(fh)]
    checks = json.loads((out / "known_answers.json").read_text(encoding="utf-8"))["checks"]
    return {"table": table, "checks": checks, "summary": (out / "summary.txt").read_text(encoding="utf-8"),
            "figure": out / "comparison.png", "csv": out / "known_answers.csv", "summary_path": out / "summary.txt"}
