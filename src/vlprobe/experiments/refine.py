"""SugarCrepe's adversarial refinement (Hsieh et al. 2023, Algorithm 1), seeded (``probe refine``).

Two blind scorers A and B give each item a gap g = score(correct text) - score(wrong text) in
[-1, 1] (scores in [0, 1]; :data:`TRANSFORMS` map others there). A scorer is right on an item when
its gap is > 0. Refinement keeps a subset on which neither scorer beats chance:

1. items with g_A = g_B = 0 are kept;
2. items with exactly one zero gap lie on an axis: the other gap is binned by sign and magnitude
   (``axis_bins`` bins per sign, bin = min(floor(|g| * axis_bins), axis_bins - 1) + 1, so |g| = 1
   falls in the last bin); bin +b is balanced against bin -b of the same axis;
3. all other items fall in a ``grid`` x ``grid`` lattice over [-1, 1]^2 (grid/2 bins per sign and
   axis, |g| = 1 in the outermost); each cell (i, j) is balanced against its reflection (-i, -j),
   which pairs (i, j) with (-i, -j) and (i, -j) with (-i, j).

Balancing two cells keeps the smaller whole and an equal random subsample (without replacement,
``np.random.default_rng(seed)``, cells visited in sorted order) of the larger; a cell whose
partner is empty is dropped. On the kept items of steps 2-3 each scorer is right exactly half the
time; step 1's items (and an axis item's zero gap) are ties, which count as wrong, so a scorer
sits at or a little under 50% overall. The upstream script's defects are not repeated: it is
seeded, |g| = 1 has a bin, and it reads vlprobe's per-item score files.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vlprobe.io.atomic import atomic_write, write_json
from vlprobe.io.ownership import check_output
from vlprobe.provenance import sha256_file
from vlprobe.runs.declare import Experiment, Options, option
from vlprobe.runs.score_files import caption_foil_scores, read_item_scores
from vlprobe.validation import InputError, check_int, check_positive_int, check_seed

#: What refine's outputs are listed as among the files vlprobe wrote (:mod:`vlprobe.io`).
REFINED_KIND = "refined items"

__all__ = ["EXPERIMENT", "TRANSFORMS", "RefineConfig", "RefineResult", "adversarial_refine", "run_refine"]


def _rank(x: np.ndarray) -> np.ndarray:
    from scipy.stats import rankdata

    return rankdata(x, method="average") / len(x)


#: Maps from a scorer's raw scores (correct and wrong texts pooled) into [0, 1].
TRANSFORMS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "none": lambda x: x,
    "exp": np.exp,  # log-probabilities (blind-lm) -> per-token probabilities
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),  # logits
    "rank": _rank,  # empirical CDF over the pooled scores
}


@dataclass(frozen=True)
class RefineResult:
    """Kept item positions and what each step did."""

    kept: np.ndarray
    steps: dict[str, dict[str, int]] = field(default_factory=dict)


def _signed_bins(g: np.ndarray, per_sign: int) -> np.ndarray:
    mag = np.minimum(np.floor(np.abs(g) * per_sign).astype(np.int64), per_sign - 1) + 1
    return np.sign(g).astype(np.int64) * mag


def _balance(a: np.ndarray, b: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
    if not len(a) or not len(b):
        return []
    k = min(len(a), len(b))
    return [np.sort(rng.choice(a, k, replace=False)) if len(a) > k else a,
            np.sort(rng.choice(b, k, replace=False)) if len(b) > k else b]


def check_grid(grid: int, param: str = "grid") -> int:
    """An even number of grid cells per axis, >= 2."""
    if check_int(grid, param, low=2, meaning=" (even)") % 2:
        raise InputError(f"{param} must be an even integer >= 2, got {grid!r}")
    return grid


def adversarial_refine(
    gap_a: np.ndarray, gap_b: np.ndarray, *, grid: int = 100, axis_bins: int = 10, seed: int = 0,
) -> RefineResult:
    """Algorithm 1 (see the module docstring).

    Parameters
    ----------
    gap_a, gap_b : ndarray, shape (N,)
        Each scorer's gap per item, in [-1, 1].
    grid : int
        Even number of cells per axis of the 2-D lattice (100 upstream).
    axis_bins : int
        Bins per sign for items on an axis (10 upstream).
    seed : int

    Returns
    -------
    RefineResult
        ``kept``: ascending item positions.
    """
    a = np.asarray(gap_a, dtype=np.float64)
    b = np.asarray(gap_b, dtype=np.float64)
    if a.ndim != 1 or a.shape != b.shape:
        raise InputError(f"gap_a and gap_b must be 1-D of one length, got shapes {a.shape} and {b.shape}")
    for name, g in (("gap_a", a), ("gap_b", b)):
        if not np.isfinite(g).all() or (np.abs(g) > 1).any():
            raise InputError(f"{name} must lie in [-1, 1] (scores in [0, 1]), got values from {g.min()} to {g.max()}")
    check_grid(grid)
    check_positive_int(axis_bins, "axis_bins")
    rng = np.random.default_rng(check_seed(seed))
    kept: list[np.ndarray] = []
    steps: dict[str, dict[str, int]] = {}

    both_zero = np.flatnonzero((a == 0) & (b == 0))
    kept.append(both_zero)
    steps["both_zero"] = {"items": len(both_zero), "kept": len(both_zero)}

    for name, zero, other in (("axis_a_zero", a, b), ("axis_b_zero", b, a)):
        on_axis = np.flatnonzero((zero == 0) & (other != 0))
        bins = _signed_bins(other[on_axis], axis_bins)
        got = 0
        for k in range(1, axis_bins + 1):
            for part in _balance(on_axis[bins == k], on_axis[bins == -k], rng):
                kept.append(part)
                got += len(part)
        steps[name] = {"items": len(on_axis), "kept": got}

    inner = np.flatnonzero((a != 0) & (b != 0))
    bi, bj = _signed_bins(a[inner], grid // 2), _signed_bins(b[inner], grid // 2)
    cells: dict[tuple[int, int], list[int]] = {}
    for pos, i, j in zip(inner.tolist(), bi.tolist(), bj.tolist(), strict=True):
        cells.setdefault((i, j), []).append(pos)
    got = 0
    for (i, j) in sorted(c for c in cells if c[0] > 0):
        for part in _balance(np.asarray(cells[(i, j)]), np.asarray(cells.get((-i, -j), [])), rng):
            kept.append(part)
            got += len(part)
    steps["grid"] = {"items": len(inner), "kept": got, "cells": len(cells)}
    out = np.sort(np.concatenate(kept)) if kept else np.zeros(0, dtype=np.int64)
    return RefineResult(out.astype(np.int64), steps)


_TRANSFORM_HELP = "Map {}'s scores into [0, 1] (exp: log-probabilities, sigmoid: logits, rank: empirical CDF)."


@dataclass(frozen=True, kw_only=True)
class RefineConfig(Options):
    """``probe refine`` inputs and output."""

    scores_a: Path = option(role="input", help="Per-item score file of blind scorer A.")
    scores_b: Path = option(role="input", help="Per-item score file of blind scorer B.")
    out: Path = option(role="output", help="JSONL of kept item ids to write (+ <stem>.manifest.json).")
    grid: int = option(100, check=check_grid, help="Cells per axis of the 2-D gap grid (even).")
    axis_bins: int = option(10, check=check_positive_int, help="Bins per sign for items with one zero gap.")
    seed: int = option(0, check=check_seed, help="Seed of the balancing subsamples.")
    transform_a: str = option("none", choices=tuple(TRANSFORMS), help=_TRANSFORM_HELP.format("A"))
    transform_b: str = option("none", choices=tuple(TRANSFORMS), help=_TRANSFORM_HELP.format("B"))


def _gaps(path: Path, transform: str, param: str) -> tuple[list[str], np.ndarray, np.ndarray]:
    if transform not in TRANSFORMS:
        raise InputError(f"transform_{param[-1]}: expected one of {', '.join(TRANSFORMS)}, got {transform!r}")
    ids, pos, neg = caption_foil_scores(read_item_scores(path, param=param), param=param)
    both = TRANSFORMS[transform](np.concatenate([pos, neg]))
    if both.min() < 0 or both.max() > 1:
        raise InputError(
            f"{param}: {Path(path).name} scores span [{both.min():.4g}, {both.max():.4g}] after transform "
            f"{transform!r}, outside [0, 1]; pick --transform-{param[-1]} exp (log-probabilities, blind-lm), "
            "sigmoid (logits) or rank"
        )
    n = len(ids)
    return ids, both[:n] - both[n:], np.asarray(pos > neg)


def run_refine(config: RefineConfig) -> tuple[Path, Path, RefineResult]:
    """Refine the items two score files share; write the kept ids (JSONL) and a manifest.

    Returns
    -------
    out, manifest_path : Path
        ``out`` holds one ``{"item": id}`` line per kept item; the manifest is ``out`` with the
        suffix ``.manifest.json`` (``keep.jsonl`` -> ``keep.manifest.json``).
    result : RefineResult
    """
    out = Path(config.out)
    for path in (out, out.with_suffix(".manifest.json")):
        check_output(path, REFINED_KIND)  # before any work
    ids_a, gap_a, right_a = _gaps(Path(config.scores_a), config.transform_a, "scores_a")
    ids_b, gap_b, right_b = _gaps(Path(config.scores_b), config.transform_b, "scores_b")
    if set(ids_a) != set(ids_b):
        only_a, only_b = sorted(set(ids_a) - set(ids_b)), sorted(set(ids_b) - set(ids_a))
        example = only_a[0] if only_a else only_b[0]
        raise InputError(
            f"scores_b: the two files score different items ({len(only_a)} only in scores_a, "
            f"{len(only_b)} only in scores_b, e.g. {example!r})"
        )
    order = {x: i for i, x in enumerate(ids_b)}
    perm = np.array([order[x] for x in ids_a], dtype=np.int64)
    gap_b, right_b = gap_b[perm], right_b[perm]
    result = adversarial_refine(gap_a, gap_b, grid=config.grid, axis_bins=config.axis_bins, seed=config.seed)
    out = Path(config.out)
    with atomic_write(out, kind=REFINED_KIND) as fh:
        for i in result.kept.tolist():
            fh.write(json.dumps({"item": ids_a[i]}) + "\n")
    kept = result.kept

    def pct(x: np.ndarray) -> float:
        return float(100.0 * x.mean()) if len(x) else float("nan")

    subsets = np.array([x.split("/")[1] if x.count("/") >= 2 else "" for x in ids_a])
    manifest = EXPERIMENT.manifest(
        config,
        {"scores_a": {"path": str(config.scores_a), "sha256": sha256_file(config.scores_a)},
         "scores_b": {"path": str(config.scores_b), "sha256": sha256_file(config.scores_b)}},
        seeds=[config.seed],
        extra={
            "items_before": len(ids_a), "items_kept": len(kept), "steps": result.steps,
            "accuracy_percent": {
                "scores_a": {"before": pct(right_a), "after": pct(right_a[kept])},
                "scores_b": {"before": pct(right_b), "after": pct(right_b[kept])},
            },
            "kept_per_subset": {s: int((subsets[kept] == s).sum()) for s in dict.fromkeys(subsets.tolist())},
        },
    )
    manifest_path = out.with_suffix(".manifest.json")
    write_json(manifest_path, manifest, kind=REFINED_KIND)
    return out, manifest_path, result


def report(config: RefineConfig, result: tuple[Path, Path, RefineResult]) -> list[str]:
    """Items kept, each scorer's accuracy before and after, then the files written."""
    path, manifest_path, _ = result
    m = json.loads(manifest_path.read_text(encoding="utf-8"))
    acc = m["accuracy_percent"]
    lines = [f"kept {m['items_kept']} of {m['items_before']} items"]
    for key in ("scores_a", "scores_b"):
        lines.append(f"{key}: accuracy {acc[key]['before']:.2f}% before, {acc[key]['after']:.2f}% on the kept items")
    return [*lines, f"wrote {path} and {manifest_path}"]


EXPERIMENT = Experiment("refine", 1, RefineConfig, run_refine, report)
