"""What ``probe eval`` computes for the benchmarks whose items hold more than two texts or their own
metric: ARO, and the benchmarks added beside it (:data:`SPECS`).

A :class:`BenchmarkSpec` turns each item's score matrix (texts x images) into per-item outcomes,
and outcomes into the benchmark's metrics per subset, exactly as its authors' evaluation code
computes them (definitions and sources in :mod:`vlprobe.stats.benchmark_metrics`). The rows are
built by :func:`spec_rows`: per subset every metric with its 95% bootstrap interval, per group
(an ARO relation or attribute pair) its accuracy (subset ``<subset>/<tag>=<value>``), and each
subset's bag-of-words slices (``<subset>/bow=same``, ``<subset>/bow=different``). Items are
resampled within their subset and group, so a macro average keeps every group it averages.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vlprobe.stats.benchmark_metrics import (
    ARO_EXCLUDED_RELATIONS,
    ARO_MIN_ATTRIBUTE_ITEMS,
    first_is_best,
    macro_accuracy,
    mmvp_pair_right,
    naturalbench_answers,
    naturalbench_outcomes,
    pair_right,
    rank_of_first,
    sugarcrepe_pp_outcomes,
)
from vlprobe.stats.metrics import bootstrap_indices, ci95_rows, winoground_outcomes

__all__ = ["SPECS", "BenchmarkSpec", "score_block", "spec_rows"]

#: (subset, per-item outcomes at the chosen columns (..., n), group of each column (n,)) ->
#: {metric: values of shape (...)} in [0, 1].
MetricFn = Callable[[str, Mapping[str, np.ndarray], np.ndarray], dict[str, np.ndarray]]


@dataclass(frozen=True)
class BenchmarkSpec:
    """One benchmark's evaluation.

    Attributes
    ----------
    name : str
        The registered dataset and experiment name.
    subsets : tuple of str
        Its subsets, in the paper's order (what an item id's second part may be).
    outcomes : callable
        (subset, (N, texts, images) scores of that subset's items) -> {outcome: (N,) array}.
    metrics : MetricFn
    group_tag : dict of str to str
        Subset -> the tag family its macro average runs over (ARO: ``relation``, ``attributes``).
    notes : dict of str to str
        ``(metric)`` or ``(subset, metric)`` key -> the note column of its rows.
    chance : dict of str to float
        Metric -> chance level in percent (for the chart), where one fits every subset.
    summary : str
        The scope of the unweighted mean over the run's subsets of each metric (MMVP-VLM's
        average over its categories), "" for none.
    pooled : str
        The scope of each metric over every item of the run (NaturalBench's scores pool all
        samples), "" for none.
    bow : bool
        Whether the bag-of-words slices mean anything (False where the texts differ by design,
        as NaturalBench's answers).
    means : tuple of (scope, members)
        Unweighted means over members, in order: a member is a subset or an earlier scope;
        members the run lacks are left out, a scope with none is skipped (VL-CheckList's radar:
        per aspect the mean over image corpora of each corpus's mean over its files).
    pools : tuple of (scope, subsets)
        Scopes whose metrics pool the items of their subsets (CREPE's productivity negative types
        over the nine complexities); subsets the run lacks are left out, a scope with none is skipped.
    headline : tuple of str
        The benchmark's own number per scope, the first of these a scope has (the paper's: what
        ``probe run bias-gap`` draws for a blind scorer and a VLM alike).
    """

    name: str
    subsets: tuple[str, ...]
    outcomes: Callable[[str, np.ndarray], dict[str, np.ndarray]]
    metrics: MetricFn
    group_tag: dict[str, str] = field(default_factory=dict)
    notes: dict[Any, str] = field(default_factory=dict)
    chance: dict[str, float] = field(default_factory=dict)
    summary: str = ""
    pooled: str = ""
    bow: bool = True
    means: tuple[tuple[str, tuple[str, ...]], ...] = ()
    pools: tuple[tuple[str, tuple[str, ...]], ...] = ()
    headline: tuple[str, ...] = ()

    def note(self, subset: str, metric: str) -> str:
        return self.notes.get((subset, metric), self.notes.get(metric, ""))


# -- ARO ---------------------------------------------------------------------------------------------

_ARO_VG = ("vg_relation", "vg_attribution")


def _aro_outcomes(subset: str, scores: np.ndarray) -> dict[str, np.ndarray]:
    s = scores[:, :, 0]
    return {"correct": pair_right(s) if subset in _ARO_VG else first_is_best(s)}


def _aro_metrics(subset: str, out: Mapping[str, np.ndarray], groups: np.ndarray) -> dict[str, np.ndarray]:
    correct = out["correct"].astype(np.float64)
    if subset == "vg_relation":
        macro, _ = macro_accuracy(correct, groups, exclude=ARO_EXCLUDED_RELATIONS)
        return {"macro_accuracy": macro, "accuracy": correct.mean(axis=-1)}
    if subset == "vg_attribution":
        macro, _ = macro_accuracy(correct, groups, min_items=ARO_MIN_ATTRIBUTE_ITEMS)
        return {"macro_accuracy": macro, "accuracy": correct.mean(axis=-1)}
    return {"precision_at_1": correct.mean(axis=-1)}


_ARO_TIE_VG = "a tie is wrong (the authors' np.argmax over [false, true])"
ARO = BenchmarkSpec(
    "aro",
    ("vg_relation", "vg_attribution", "coco_order", "flickr30k_order"),
    _aro_outcomes,
    _aro_metrics,
    group_tag={"vg_relation": "relation", "vg_attribution": "attributes"},
    notes={
        ("vg_relation", "macro_accuracy"): "the paper's number: mean over relations of each relation's accuracy, "
        f"the {len(ARO_EXCLUDED_RELATIONS)} relations the authors' notebook lists left out; " + _ARO_TIE_VG,
        ("vg_attribution", "macro_accuracy"): "the paper's number: mean over attribute pairs with at least "
        f"{ARO_MIN_ATTRIBUTE_ITEMS} items of each pair's accuracy; " + _ARO_TIE_VG,
        ("vg_relation", "accuracy"): "every item (micro; not the paper's number); " + _ARO_TIE_VG,
        ("vg_attribution", "accuracy"): "every item (micro; not the paper's number); " + _ARO_TIE_VG,
        "group_accuracy": "this group's items; " + _ARO_TIE_VG,
        "precision_at_1": "the caption scores at least as high as its four perturbations (the authors' "
        "np.argmax == 0: a tie goes to the caption); perturbations drawn from order_seed",
    },
    chance={"macro_accuracy": 50.0, "accuracy": 50.0, "precision_at_1": 20.0},
    headline=("macro_accuracy", "precision_at_1"),
)

# -- MMVP-VLM ----------------------------------------------------------------------------------------


def _mmvp_outcomes(subset: str, scores: np.ndarray) -> dict[str, np.ndarray]:
    return {"correct": mmvp_pair_right(scores)}


def _mmvp_metrics(subset: str, out: Mapping[str, np.ndarray], groups: np.ndarray) -> dict[str, np.ndarray]:
    return {"pair_accuracy": out["correct"].astype(np.float64).mean(axis=-1)}


def _mmvp() -> BenchmarkSpec:
    from vlprobe.data.mmvp_vlm import MMVP_SUBSETS

    tie = ("both statements pick their own image (MMVP's evaluate_vlm.py: softmax over the two images > 0.5 "
           "picks image 1, else image 2; a tie is wrong for statement 1, right for statement 2)")
    return BenchmarkSpec(
        "mmvp-vlm", MMVP_SUBSETS, _mmvp_outcomes, _mmvp_metrics,
        notes={"pair_accuracy": "pairs whose " + tie,
               ("mean-of-subsets", "pair_accuracy"): "unweighted mean over the categories evaluated (the paper's "
                                                     "average over its nine); " + tie},
        chance={"pair_accuracy": 25.0}, summary="mean-of-subsets", headline=("pair_accuracy",),
    )


MMVP_VLM = _mmvp()


# -- NaturalBench ------------------------------------------------------------------------------------


def _naturalbench_outcomes(subset: str, scores: np.ndarray) -> dict[str, np.ndarray]:
    return naturalbench_outcomes(naturalbench_answers(scores))


def _naturalbench_metrics(subset: str, out: Mapping[str, np.ndarray], groups: np.ndarray) -> dict[str, np.ndarray]:
    return {name: np.asarray(out[name], dtype=np.float64).mean(axis=-1)
            for name in ("question_accuracy", "image_accuracy", "binary_accuracy", "group_accuracy")}


_NB_TIE = ("answers read off the scores: question q + Yes/A against + No/B on each image; a tie is no answer, "
           "wrong everywhere (the authors' -1)")
NATURALBENCH = BenchmarkSpec(
    "naturalbench", ("yes_no", "multiple_choice"), _naturalbench_outcomes, _naturalbench_metrics,
    notes={
        "question_accuracy": "the paper's Q-Acc (get_scores' question_score): a question right on both images; "
                             + _NB_TIE,
        "image_accuracy": "the paper's I-Acc (image_score): an image right for both questions; " + _NB_TIE,
        "binary_accuracy": "the paper's Acc (binary_score): every (question, image) answer; " + _NB_TIE,
        "group_accuracy": "the paper's G-Acc (group_score): all four answers right; " + _NB_TIE,
    },
    chance={"question_accuracy": 25.0, "image_accuracy": 25.0, "binary_accuracy": 50.0, "group_accuracy": 6.25},
    pooled="all", bow=False, headline=("group_accuracy",),
)

# -- Winoground-style 2 x 2 benchmarks (EqBen, ColorSwap) ----------------------------------------------------


def _wino_outcomes(subset: str, scores: np.ndarray) -> dict[str, np.ndarray]:
    out = winoground_outcomes(scores)
    return {name: out[name] for name in ("text", "image", "group")}


def _wino_metrics(subset: str, out: Mapping[str, np.ndarray], groups: np.ndarray) -> dict[str, np.ndarray]:
    return {name: np.asarray(out[name], dtype=np.float64).mean(axis=-1) for name in ("text", "image", "group")}


_WINO_TIES = "strict > (a tie is wrong)"
_WINO_NOTES = {
    "text": "text score: c0 beats c1 on image 0 and c1 beats c0 on image 1; " + _WINO_TIES,
    "image": "image score: image 0 beats image 1 for c0 and image 1 beats image 0 for c1; " + _WINO_TIES,
    "group": "group score: text and image both right; " + _WINO_TIES,
}


def _eqben() -> BenchmarkSpec:
    from vlprobe.data.eqben import EQBEN_SUBSETS

    source = " (EqBen's cal_wino_score, per sub-dataset as evaluate_eqben_locally.py)"
    notes: dict[Any, str] = {m: n + source for m, n in _WINO_NOTES.items()}
    notes.update({("all", m): n + "; every item pooled (not in the paper's table)" for m, n in _WINO_NOTES.items()})
    return BenchmarkSpec("eqben", EQBEN_SUBSETS, _wino_outcomes, _wino_metrics, notes=notes,
                         chance={"text": 25.0, "image": 25.0, "group": 100.0 / 6}, pooled="all", headline=("group",))


EQBEN = _eqben()


def _colorswap() -> BenchmarkSpec:
    from vlprobe.data.colorswap import COLORSWAP_SUBSETS

    source = " (Winoground's scores, which ColorSwap follows: its main ITM metric is the group score)"
    return BenchmarkSpec("colorswap", COLORSWAP_SUBSETS, _wino_outcomes, _wino_metrics,
                         notes={m: n + source for m, n in _WINO_NOTES.items()},
                         chance={"text": 25.0, "image": 25.0, "group": 100.0 / 6}, headline=("group",))


COLORSWAP = _colorswap()

# -- SugarCrepe++ ------------------------------------------------------------------------------------


def _scpp_outcomes(subset: str, scores: np.ndarray) -> dict[str, np.ndarray]:
    return sugarcrepe_pp_outcomes(scores)


def _scpp_metrics(subset: str, out: Mapping[str, np.ndarray], groups: np.ndarray) -> dict[str, np.ndarray]:
    return {name: np.asarray(out[name], dtype=np.float64).mean(axis=-1) for name in ("itt", "image_p1_neg", "image_p2_neg")}


def _sugarcrepe_pp() -> BenchmarkSpec:
    from vlprobe.data.sugarcrepe_pp import SUGARCREPE_PP_SUBSETS

    tie = "strict > (a tie is wrong), as the authors' VLMs/test_*.py"
    return BenchmarkSpec(
        "sugarcrepe-pp", SUGARCREPE_PP_SUBSETS, _scpp_outcomes, _scpp_metrics,
        notes={"itt": "the paper's ITT accuracy: P1 and P2 both score above the negative with the image; " + tie,
               "image_p1_neg": "the scripts' Image-P1-Neg: P1 above the negative (SugarCrepe's own test); " + tie,
               "image_p2_neg": "the scripts' Image-P2-Neg: P2 above the negative; " + tie},
        chance={"itt": 100.0 / 3, "image_p1_neg": 50.0, "image_p2_neg": 50.0}, headline=("itt",),
    )


SUGARCREPE_PP = _sugarcrepe_pp()

# -- CREPE -------------------------------------------------------------------------------------------

#: CREPE's Recall@k cut-offs (``crepe_eval_utils.get_one2many_metrics``).
CREPE_KS = (1, 3, 5, 10)


def _crepe_outcomes(subset: str, scores: np.ndarray) -> dict[str, np.ndarray]:
    s = scores[:, :, 0]
    if s.shape[1] < 2:  # every item of the subset without hard negatives: the caption is first
        return {"rank": np.zeros(len(s), dtype=np.int64)}
    return {"rank": rank_of_first(s)}


def _crepe_metrics(subset: str, out: Mapping[str, np.ndarray], groups: np.ndarray) -> dict[str, np.ndarray]:
    rank = np.asarray(out["rank"])
    return {f"recall@{k}": (rank < k).astype(np.float64).mean(axis=-1) for k in CREPE_KS}


def _crepe() -> BenchmarkSpec:
    from vlprobe.data.crepe import CREPE_COMPLEXITIES, CREPE_PROD_NEGATIVES, CREPE_SUBSETS

    tie = ("the caption's rank among [caption, *hard negatives] as get_one2many_rank (torch.argsort descending): "
           "the negatives scoring strictly higher; a tie goes to the caption")
    notes: dict[Any, str] = {f"recall@{k}": f"image-to-text Recall@{k} over each item's own retrieval set; " + tie
                             for k in CREPE_KS}
    pools = []
    for neg in CREPE_PROD_NEGATIVES:
        pools.append((f"prod_{neg}", tuple(f"prod_{neg}_{c}" for c in CREPE_COMPLEXITIES)))
        notes.update({(f"prod_{neg}", f"recall@{k}"): f"the {neg} files' items of every complexity pooled (SugarCrepe's "
                      f"Fig. 1 bar; vlprobe's pooling: the papers give no number for it); " + tie for k in CREPE_KS})
    return BenchmarkSpec("crepe", CREPE_SUBSETS, _crepe_outcomes, _crepe_metrics, notes=notes, pools=tuple(pools),
                         headline=("recall@1",))


CREPE = _crepe()

# -- VL-CheckList ------------------------------------------------------------------------------------


def _vlc_outcomes(subset: str, scores: np.ndarray) -> dict[str, np.ndarray]:
    return {"correct": pair_right(scores[:, :, 0])}


def _vlc_metrics(subset: str, out: Mapping[str, np.ndarray], groups: np.ndarray) -> dict[str, np.ndarray]:
    return {"accuracy": out["correct"].astype(np.float64).mean(axis=-1)}


def _vlc() -> BenchmarkSpec:
    from vlprobe.data.vl_checklist import VLC_ASPECTS, VLC_SUBSETS

    means: list[tuple[str, tuple[str, ...]]] = []
    notes: dict[Any, str] = {"accuracy": "the file's total_acc of the authors' ITC evaluation (evaluate.py): "
                                         "score(POS[0]) > score(NEG[0]); a tie is wrong"}
    for aspect, corpora in VLC_ASPECTS.items():
        members = []
        for corpus, files in corpora.items():
            if len(files) > 1:
                means.append((f"{aspect}_{corpus}", files))
                notes[(f"{aspect}_{corpus}", "accuracy")] = "unweighted mean over this corpus's files (radar.py)"
                members.append(f"{aspect}_{corpus}")
            else:
                members.append(files[0])
        means.append((aspect, tuple(members)))
        notes[(aspect, "accuracy")] = ("the radar's spoke (radar.py: mean over image corpora of each corpus's mean "
                                       "over its files)")
    for category in ("Object", "Attribute", "Relation"):
        spokes = tuple(a for a in VLC_ASPECTS if a.startswith(category))
        means.append((category, spokes))
        notes[(category, "accuracy")] = (f"unweighted mean over the {len(spokes)} {category} spokes of the radar "
                                         "(vlprobe's: the authors' code stops at the spokes)")
    return BenchmarkSpec("vl-checklist", VLC_SUBSETS, _vlc_outcomes, _vlc_metrics, notes=notes,
                         chance={"accuracy": 50.0}, means=tuple(means), headline=("accuracy",))


VL_CHECKLIST = _vlc()

#: The benchmarks ``probe eval`` evaluates through a spec.
SPECS: dict[str, BenchmarkSpec] = {s.name: s for s in (ARO, MMVP_VLM, NATURALBENCH, EQBEN, COLORSWAP, SUGARCREPE_PP, CREPE, VL_CHECKLIST)}


# -- rows --------------------------------------------------------------------------------------------


def _resamples(cols: np.ndarray, strata: np.ndarray, n_boot: int, seed: int) -> np.ndarray:
    """Resampled positions of a set of items (within their strata), as many resamples as asked."""
    local = bootstrap_indices(len(cols), n_boot, seed, strata=strata[cols])
    return cols[local]


def score_block(scores: Sequence[np.ndarray], cols: np.ndarray) -> np.ndarray:
    """The score matrices of the items ``cols`` as one (n, texts, images) array, an item with fewer
    texts padded with NaN (a CREPE row with fewer negatives)."""
    members = [scores[int(i)] for i in cols]
    width = max(m.shape[0] for m in members)
    block = np.full((len(cols), width, members[0].shape[1]), np.nan)
    for r, m in enumerate(members):
        block[r, :m.shape[0]] = m
    return block


def spec_rows(
    spec: BenchmarkSpec, subsets: Sequence[str], groups: Sequence[str], scores: Sequence[np.ndarray],
    base: dict[str, Any], n_boot: int, seed: int, slices: Sequence[str] | None = None,
) -> tuple[list[dict[str, Any]], np.ndarray]:
    """The tidy rows of one run (values in percent) and the strata its items were resampled in.

    Parameters
    ----------
    subsets, groups : sequence of str, length N
        Each item's subset and group ("" where its subset has none).
    scores : sequence of ndarray, shape (texts, images) each
    base : dict
        The rows' other columns.
    n_boot, seed : int
        Bootstrap resamples (0: no intervals) and seed.
    slices : sequence of str, optional
        Each item's bag-of-words value (``same``, ``different``, or "" for none); None: no slices.
    """
    sub = np.asarray(subsets)
    grp = np.asarray(groups)
    strata = np.char.add(np.char.add(sub.astype(str), "\x1f"), grp.astype(str))
    outcomes: dict[str, np.ndarray] = {}
    for subset in dict.fromkeys(sub.tolist()):
        cols = np.flatnonzero(sub == subset)
        for key, values in spec.outcomes(subset, score_block(scores, cols)).items():
            outcomes.setdefault(key, np.zeros(len(sub), dtype=values.dtype))[cols] = values
    rows: list[dict[str, Any]] = []
    slice_values = None if slices is None else np.asarray(slices)

    def emit(scope: str, subset: str, cols: np.ndarray) -> None:
        at = _resamples(cols, strata, n_boot, seed)
        point = spec.metrics(subset, {k: v[cols] for k, v in outcomes.items()}, grp[cols])
        boot = spec.metrics(subset, {k: v[at] for k, v in outcomes.items()}, grp[cols])
        for metric, value in point.items():
            row = {**base, "subset": scope, "n": len(cols)}
            note = spec.note(scope if (scope, metric) in spec.notes else subset, metric)
            rows.append({**row, "metric": metric, "value": 100.0 * float(value), **({"note": note} if note else {})})
            rows.extend(ci95_rows(row, metric, 100.0 * np.asarray(boot[metric]).reshape(-1)))

    summary: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    # scope -> (items, {metric: (value, resampled values)}): the subsets, then the means over them
    parts: dict[str, tuple[int, dict[str, tuple[np.ndarray, np.ndarray]]]] = {}
    for subset in dict.fromkeys(sub.tolist()):
        cols = np.flatnonzero(sub == subset)
        emit(subset, subset, cols)
        if spec.summary or spec.means:
            at = _resamples(cols, strata, n_boot, seed)
            point = spec.metrics(subset, {k: v[cols] for k, v in outcomes.items()}, grp[cols])
            boot = spec.metrics(subset, {k: v[at] for k, v in outcomes.items()}, grp[cols])
            parts[subset] = (len(cols), {m: (np.asarray(value), np.asarray(boot[m]).reshape(-1))
                                         for m, value in point.items()})
            if spec.summary:  # a mean over the run's subsets only where the spec declares one (not for means)
                for metric, value in point.items():
                    summary.setdefault(metric, []).append((np.asarray(value), np.asarray(boot[metric]).reshape(-1)))
        tag = spec.group_tag.get(subset)
        if tag:
            for g in sorted(dict.fromkeys(grp[cols].tolist())):
                gcols = cols[grp[cols] == g]
                at = _resamples(gcols, strata, n_boot, seed)
                correct = outcomes["correct"].astype(np.float64)
                row = {**base, "subset": f"{subset}/{tag}={g}", "n": len(gcols)}
                note = spec.note(subset, "group_accuracy")
                rows.append({**row, "metric": "accuracy", "value": 100.0 * float(correct[gcols].mean()),
                             **({"note": note} if note else {})})
                rows.extend(ci95_rows(row, "accuracy", 100.0 * correct[at].mean(axis=-1).reshape(-1)))
        if slice_values is not None:
            for v in ("same", "different"):
                scols = cols[slice_values[cols] == v]
                if len(scols):
                    emit(f"{subset}/bow={v}", subset, scols)
    if spec.pooled:
        emit(spec.pooled, str(sub[0]), np.arange(len(sub)))
    for scope, pool in spec.pools:  # the items of several subsets as one
        found = [m for m in pool if m in set(sub.tolist())]
        if found:
            emit(scope, found[0], np.flatnonzero(np.isin(sub, found)))
    for metric, per_subset in summary.items():  # each subset's value from its own resamples, then their mean
        row = {**base, "subset": spec.summary, "n": len(sub)}
        note = spec.note(spec.summary, metric)
        mean = float(np.mean([p for p, _ in per_subset]))
        rows.append({**row, "metric": metric, "value": 100.0 * mean, **({"note": note} if note else {})})
        rows.extend(ci95_rows(row, metric, 100.0 * np.mean([b for _, b in per_subset], axis=0)))
    for scope, scope_members in spec.means:  # unweighted means of members' values and of their resamples
        present = [parts[m] for m in scope_members if m in parts]
        if not present:
            continue
        n = sum(k for k, _ in present)
        merged = {metric: (np.mean([p[metric][0] for _, p in present], axis=0),
                           np.mean([p[metric][1] for _, p in present], axis=0)) for metric in present[0][1]}
        parts[scope] = (n, merged)
        for metric, (value, boot_values) in merged.items():
            row = {**base, "subset": scope, "n": n}
            note = spec.note(scope, metric)
            rows.append({**row, "metric": metric, "value": 100.0 * float(value), **({"note": note} if note else {})})
            rows.extend(ci95_rows(row, metric, 100.0 * boot_values))
    return rows, strata
