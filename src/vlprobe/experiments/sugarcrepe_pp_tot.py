"""SugarCrepe++'s text-only task (TOT) from a cache (``probe run sugarcrepe-pp-tot``).

TOT asks a model's text encoder alone whether the two positive captions are closer to each other
than either is to the negative: with unit embeddings ``p1``, ``p2``, ``neg``, a sample is right iff
``cos(p1, p2) > cos(p1, neg)`` and ``cos(p1, p2) > cos(p2, neg)`` (strict: a tie is wrong), as the
authors' ``VLMs/test_*.py`` and ``evaluate_ulms.py`` count it; the score is the share of right
samples per file. The embeddings are the cache's ``pooled`` text states (``probe extract
--dataset sugarcrepe-pp``): for a dual encoder such as CLIP, the projected text embedding its
scores use (``encode_text`` / ``get_text_features``), which the authors' scripts normalise and
compare. A model without a pooled text embedding (a cross-encoder) has no TOT.

Rows: ``tot`` per file (``subset``), with its 95% bootstrap interval (samples resampled within
their file, seeded).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vlprobe.experiments.cache_features import cache_label
from vlprobe.runs.charts import Chart
from vlprobe.runs.declare import REQUIRED, Experiment, option
from vlprobe.runs.option_groups import BootstrapOptions, ProgressOption, ResultsOptions
from vlprobe.runs.printout import metric_lines
from vlprobe.runs.units import units_of
from vlprobe.runs.writing import RunRows, RunSlot
from vlprobe.stats.metrics import bootstrap_indices, ci95_rows
from vlprobe.validation import InputError

__all__ = ["EXPERIMENT", "TotConfig", "tot_outcomes"]

TOT_NOTE = ("the paper's TOT: cos(P1, P2) above cos(P1, negative) and cos(P2, negative) on the text encoder's "
            "pooled embeddings; strict > (a tie is wrong), as the authors' scripts")


@dataclass(frozen=True, kw_only=True)
class TotConfig(BootstrapOptions, ProgressOption, ResultsOptions):
    """One cache of SugarCrepe++ (``probe extract --dataset sugarcrepe-pp``) in, one CSV out."""

    cache: Path = option(REQUIRED, role="input", help="A vlprobe cache of SugarCrepe++ made by a dual encoder.")


def tot_outcomes(p1: np.ndarray, p2: np.ndarray, neg: np.ndarray) -> np.ndarray:
    """Per sample, whether the text-only task is right.

    Parameters
    ----------
    p1, p2, neg : ndarray, shape (N, H)
        Text embeddings (any scale: each is normalised).

    Returns
    -------
    ndarray of bool, shape (N,)
    """
    def unit(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        return x / np.linalg.norm(x, axis=-1, keepdims=True)

    a, b, n = unit(p1), unit(p2), unit(neg)
    p1_p2, p1_neg, p2_neg = (a * b).sum(-1), (a * n).sum(-1), (b * n).sum(-1)
    return (p1_p2 > p1_neg) & (p1_p2 > p2_neg)


def _embeddings(path: Path) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
    """Item ids and the (N, H) pooled embeddings of P1, P2 and the negative, and the cache's provenance."""
    from vlprobe.extract.cache.reader import ActivationCache

    with ActivationCache(path) as cache:
        if cache.header.dataset != "sugarcrepe-pp":
            raise InputError(f"cache: {Path(path).name} holds dataset {cache.header.dataset!r}, not sugarcrepe-pp")
        if "text" not in cache.streams or "pooled" not in cache.poolings("text"):
            raise InputError(f"cache: {Path(path).name} ({cache.header.model}) has no pooled text embedding; TOT "
                             "compares a text encoder's embeddings (a dual encoder's: clip, siglip, openclip)")
        states = cache.states("text", "pooled")
        stored = cache.rows("text")["text"]
        texts, items = cache.table("texts"), cache.table("items")
        provenance = cache.provenance()
    at = {str(texts["id"][int(r)]): k for k, r in enumerate(stored)}
    ids = [str(i) for i in items["id"]]
    try:
        rows = np.array([[at[f"{i}/c{k}"] for k in range(3)] for i in ids])
    except KeyError as exc:
        raise InputError(f"cache: {Path(path).name} lacks the text {exc.args[0]!r} (each item needs c0, c1, c2)") from None
    return ids, states[rows[:, 0]], states[rows[:, 1]], states[rows[:, 2]], provenance


def compute_tot(config: TotConfig, slot: RunSlot) -> RunRows:
    """TOT per file with intervals: tidy rows and the manifest's entries."""
    ids, p1, p2, neg, provenance = _embeddings(config.cache)
    right = tot_outcomes(p1, p2, neg)
    subsets = np.array([i.split("/")[1] for i in ids])
    rows: list[dict[str, Any]] = []
    for subset in dict.fromkeys(subsets.tolist()):
        cols = np.flatnonzero(subsets == subset)
        base = {"experiment": EXPERIMENT.name, "model": slot.label, "task": "target", "split": "test",
                "subset": subset, "n": len(cols)}
        rows.append({**base, "metric": "tot", "value": 100.0 * float(right[cols].mean()), "note": TOT_NOTE})
        idx = cols[bootstrap_indices(len(cols), config.bootstrap, config.bootstrap_seed)]
        rows += ci95_rows(base, "tot", 100.0 * right[idx].mean(axis=-1).reshape(-1))
    return RunRows(rows, {"cache": provenance}, seeds=[config.bootstrap_seed],
                   extra={"units": units_of(rows), "model": slot.label, "n_items": len(ids),
                          "bootstrap": {"resamples": config.bootstrap, "seed": config.bootstrap_seed, "level": 0.95,
                                        "kind": "percentile; samples resampled within their file"}})


def report(config: TotConfig, result: tuple[Path, Path, list[dict[str, Any]]]) -> Sequence[str]:
    """TOT per file with its interval, then the files written."""
    csv_path, _, rows = result
    return metric_lines(rows, None, csv_path)


EXPERIMENT = Experiment("sugarcrepe-pp-tot", 1, TotConfig, compute_tot, report, label=cache_label,
                        chart=Chart("bars", ("tot",), subsets=None, categories="subset", chance={"tot": 100.0 / 3}))
