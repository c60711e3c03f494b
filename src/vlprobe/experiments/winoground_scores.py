"""Winoground text / image / group scores, overall and per tag (``probe run winoground-scores``).

Scores come from a vlprobe cache (the original captions' rows of its score matrix) or from a
score file: the official Winoground ``model_scores`` JSONL format
(``{"label": "<id>_c<k>_i<j>", "score": x}``, 1,600 lines for the full dataset), vlprobe's own
per-item score file (:mod:`vlprobe.runs.score_files`), or a 2N x 2N caption x image
``.npy``/``.npz`` matrix in canonical order. Every run writes ``<model>.scores.jsonl`` (the
per-item scores it used) beside its CSV, and 95% paired bootstrap intervals of the overall
scores (metrics ``text.ci95_low``, ``text.ci95_high``, ...; seeded, subset ``all``).

Subsets (column ``subset``): ``all``; ``collapsed_tag=…``, ``tag=…``, ``secondary_tag=…``
(``(none)`` for items without one), ``num_main_preds=…``; and the "Why is Winoground Hard?" tags
``wwh=<tag>``; the paper's untagged set and split, as its code builds them:
``wwh=NoTag`` (the code's hard-coded 171-id list, which leaves out id 313), ``wwh=Easier``
(NoTag plus Non Minimal: 201 items) and ``wwh=Harder`` (the rest: 199, id 313 among them); and
the corrected sets, named so: ``wwh=NoTag-corrected`` (every id whose list is empty in the tag
file: 172), ``wwh=Easier-corrected`` (202) and ``wwh=Harder-corrected`` (198); ``bow=same`` (the two captions hold the same multiset of words,
:mod:`vlprobe.data.bow`) and ``bow=different``, where the captions are known (a cache, or a
scores file with ``data_dir``). Values are percentages; ``n`` is the number of items in the subset.

Metrics: ``text``, ``image``, ``group`` and Winoground's ``matching`` score
(s00*s11 > s01*s10). ``matching`` is defined for non-negative scores only (zeros included, as in
the human scores): when any score of the run is negative its rows hold NaN and their ``note``
(and the manifest's ``undefined_metrics``) says why.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from vlprobe.data.bow import BOW_FAMILY, bow_masks, bow_tag, table_tags
from vlprobe.data.source_files import iter_json_lines
from vlprobe.data.tags import missing_wwh_warning, winoground_number, wwh_masks
from vlprobe.experiments.cache_features import cache_label
from vlprobe.progress import format_bytes, say, warn
from vlprobe.provenance import sha256_file
from vlprobe.runs.charts import WINOGROUND_CHANCE, Chart
from vlprobe.runs.declare import Experiment, option
from vlprobe.runs.option_groups import BootstrapOptions, ItemOptions, ProgressOption, ResultsOptions
from vlprobe.runs.printout import metric_lines
from vlprobe.runs.score_files import (
    is_item_scores_file,
    read_item_scores,
    read_score_matrix,
    winoground_from_item_scores,
    winoground_from_matrix,
    write_item_scores,
)
from vlprobe.runs.units import units_of
from vlprobe.runs.writing import RunRows, RunSlot
from vlprobe.stats.metrics import (
    MATCHING_UNDEFINED,
    bootstrap_indices,
    ci95_rows,
    winoground_outcomes,
)
from vlprobe.validation import InputError, check_file

__all__ = [
    "EXPERIMENT",
    "WinogroundScoresConfig",
    "item_scores_from_cache",
    "read_model_scores",
    "read_winoground_scores",
    "run_winoground_scores",
    "subset_masks",
]

METRICS = ("text", "image", "group", "matching")
_LABEL = re.compile(r"^(\d+)_c([01])_i([01])$")


@dataclass(frozen=True, kw_only=True)
class WinogroundScoresConfig(BootstrapOptions, ProgressOption, ResultsOptions):
    """Inputs and output of one run; give ``cache`` or ``scores``.

    ``tags`` (a tag file) gives the "Why is Winoground Hard?" tags: for a score file, or in place
    of the ones a cache carries. ``data_dir`` (a Winoground copy) gives all tags of a score file.
    """

    cache: Path | None = option(None, role="input", help="A vlprobe cache of Winoground.")
    scores: Path | None = option(
        None, role="input",
        help="A score file instead of a cache: official model_scores JSONL ({label: <id>_c<k>_i<j>, score}), "
             "a vlprobe per-item score file, or a 2N x 2N caption x image .npy/.npz matrix.",
    )
    data_dir: Path | None = ItemOptions.redeclare("data_dir", help="Winoground copy, for the tags of a score file.")
    tags: Path | None = option(
        None, role="input", help="'Why is Winoground Hard?' tag file (overrides a cache's).",
    )

    def check(self) -> None:
        if (self.cache is None) == (self.scores is None):
            raise InputError("give exactly one of cache (a vlprobe cache) or scores (a score file)")
        if self.cache is not None and self.data_dir is not None:
            raise InputError("data_dir applies to scores only: a cache carries its dataset's tags")


def read_winoground_scores(path: str | os.PathLike[str]) -> tuple[list[int], np.ndarray]:
    """Winoground (N, 2, 2) scores from any supported score file (see the module docstring)."""
    p = check_file(path, "scores")
    if p.suffix.lower() in (".npy", ".npz"):
        s = winoground_from_matrix(read_score_matrix(p, param="scores"), param="scores")
        return list(range(len(s))), s
    if is_item_scores_file(p):
        return winoground_from_item_scores(read_item_scores(p, param="scores"), param="scores")
    return read_model_scores(p)


def item_scores_from_cache(path: str | os.PathLike[str]) -> tuple[str, list[int], np.ndarray, list[dict[str, list[str]]], dict[str, Any]]:
    """Winoground's 2 x 2 scores per item from a cache.

    Returns
    -------
    model : str
    ids : list of int
        Winoground ids.
    s : ndarray, shape (N, 2, 2)
        ``s[n, k, j]`` = score of caption k with image j.
    tags : list of dict
        Tag families per item.
    provenance : dict
        The cache's fingerprints.
    """
    from vlprobe.extract.cache.reader import ActivationCache

    with ActivationCache(path) as cache:
        if cache.header.dataset != "winoground":
            raise InputError(f"cache: {Path(path).name} holds dataset {cache.header.dataset!r}, not winoground")
        matrix, done = cache.scores()
        items, images, texts = cache.table("items"), cache.table("images"), cache.table("texts")
        h = cache.header
        provenance = cache.provenance()
    image_row = {str(i): r for r, i in enumerate(images["id"])}
    text_row = {str(t): r for r, t in enumerate(texts["id"]) if texts["parent"][r] < 0}
    ids, rows_img, rows_txt = [], [], []
    for item_id in items["id"]:
        ids.append(_winoground_id(str(item_id)))
        rows_img.append([image_row[f"{item_id}/i{j}"] for j in (0, 1)])
        rows_txt.append([text_row[f"{item_id}/c{k}"] for k in (0, 1)])
    ri, rt = np.asarray(rows_img), np.asarray(rows_txt)
    # s[n, k, j] = matrix[image j of n, caption k of n]
    s = matrix[ri[:, None, :], rt[:, :, None]]
    if not done[ri[:, None, :], rt[:, :, None]].all():
        raise InputError(f"cache: {Path(path).name} lacks some caption-image scores; finish the extraction")
    tags = table_tags(items, texts)
    return h.model, ids, s, tags, provenance


def read_model_scores(path: str | os.PathLike[str]) -> tuple[list[int], np.ndarray]:
    """Read an official ``model_scores`` JSONL file.

    Returns
    -------
    ids : list of int
        Winoground ids, ascending.
    s : ndarray, shape (N, 2, 2)
    """
    p = check_file(path, "scores")
    found: dict[int, dict[tuple[int, int], float]] = {}
    for _, where, obj in iter_json_lines(p, "scores"):
        try:
            label, score = obj["label"], obj["score"]
        except (KeyError, TypeError):
            raise InputError(f'scores: {where} is not {{"label": "<id>_c<k>_i<j>", "score": x}}') from None
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
            raise InputError(f"scores: {where} has score {score!r}, expected a finite number")
        m = _LABEL.match(str(label))
        if not m:
            raise InputError(f"scores: {where} has label {label!r}, expected <id>_c<k>_i<j>")
        wid, k, j = (int(g) for g in m.groups())
        pair = found.setdefault(wid, {})
        if (k, j) in pair:
            raise InputError(f"scores: {where} repeats label {label!r}")
        pair[(k, j)] = float(score)
    if not found:
        raise InputError(f"scores: {p.name} holds no scores")
    ids = sorted(found)
    for wid in ids:
        if len(found[wid]) != 4:
            raise InputError(f"scores: {p.name} has {len(found[wid])} of 4 scores for id {wid}")
    s = np.array([[[found[w][(k, j)] for j in (0, 1)] for k in (0, 1)] for w in ids])
    return ids, s


def subset_masks(ids: Sequence[int], tags: Sequence[Mapping[str, Iterable[str]]]) -> dict[str, np.ndarray]:
    """Boolean item masks per subset (see the module docstring), ``all`` first."""
    n = len(ids)
    out: dict[str, np.ndarray] = {"all": np.ones(n, dtype=bool)}
    families = sorted({f for t in tags for f in t})
    for fam in families:
        if fam in ("wwh", BOW_FAMILY):
            continue
        values = sorted({v for t in tags for v in t.get(fam, ())})
        for v in values:
            out[f"{fam}={v}"] = np.array([v in t.get(fam, ()) for t in tags])
        if fam == "secondary_tag":
            out["secondary_tag=(none)"] = np.array([not list(t.get(fam, ())) for t in tags])
    if any("wwh" in t for t in tags):
        out.update(wwh_masks(ids, [t.get("wwh", ()) for t in tags]))
    out.update(bow_masks(tags))
    return out


def _winoground_id(item_id: str) -> int:
    """:func:`~vlprobe.data.tags.winoground_number`, an InputError for an id that is none."""
    number = winoground_number(item_id)
    if number is None:
        raise InputError(f"item id {item_id!r} is not a Winoground id (winoground/<n>)")
    return number


def _tags_for(ids: list[int], config: WinogroundScoresConfig) -> tuple[list[dict[str, list[str]]], dict[str, Any]]:
    if config.data_dir is not None:
        from vlprobe.data.winoground import load_winoground

        # Only captions and tags are read: the images need not be there.
        ds = load_winoground(config.data_dir, tags=config.tags if config.tags is not None else None, images=False)
        by_id = {it.meta["winoground_id"]: it for it in ds.items}
        missing = [w for w in ids if w not in by_id]
        if missing:
            raise InputError(f"scores: ids {missing[:5]} are not in the dataset at {config.data_dir}")
        tags = [{**{k: list(v) for k, v in by_id[w].tags.items()},
                 BOW_FAMILY: bow_tag([t.text for t in by_id[w].texts if t.parent is None])} for w in ids]
        return tags, {"dataset_fingerprint": ds.fingerprint, **ds.extra_fingerprints}
    if config.tags is not None:
        from vlprobe.data.tags import load_tag_file

        table = load_tag_file(config.tags)
        missing = [w for w in ids if w not in table.tags]
        if missing:
            raise InputError(f"tags: ids {missing[:5]} are missing from {config.tags}")
        return [{"wwh": list(table.tags[w])} for w in ids], {"tags": table.sha256}
    return [{} for _ in ids], {}


def run_winoground_scores(config: WinogroundScoresConfig) -> tuple[Path, Path, list[dict[str, Any]]]:
    """Compute the scores and write the CSV, the per-item scores and the manifest (:meth:`Experiment.run`).

    Returns
    -------
    csv_path, manifest_path : Path
    rows : list of dict
        The tidy rows written.
    """
    return EXPERIMENT.run(config)


def compute_winoground_scores(config: WinogroundScoresConfig, slot: RunSlot) -> RunRows:
    """Text, image and group scores per subset with intervals: tidy rows, the manifest's entries, the per-item scores."""
    if config.cache is not None:
        model, ids, s, tags, prov = item_scores_from_cache(config.cache)
        if config.tags is not None:  # replace the "Why is Winoground Hard?" tags the cache carries
            wwh, tag_prov = _tags_for(ids, replace(config, data_dir=None))
            tags = [{**t, **w} for t, w in zip(tags, wwh, strict=True)]
            prov = {**prov, "tags_override": tag_prov}
        inputs = {"cache": prov}
        warn(missing_wwh_warning("winoground", tags, f"cache {Path(config.cache).name}",
                                 "extract it again (the tags come with the dataset) or pass --tags FILE"))
    elif config.scores is not None:  # WinogroundScoresConfig.check: exactly one of the two
        ids, s = read_winoground_scores(config.scores)
        model = config.scores.stem
        tags, tag_prov = _tags_for(ids, config)
        inputs = {"scores": {"path": str(config.scores), "sha256": sha256_file(config.scores)},
                  **({"tags": tag_prov} if tag_prov else {})}
        warn(missing_wwh_warning("winoground", tags, f"score file {config.scores.name}",
                                 "pass --tags FILE, or --data-dir DIR (a Winoground folder)"))
    model = slot.label
    outcomes = winoground_outcomes(s)
    undefined = {m: MATCHING_UNDEFINED for m in METRICS if m not in outcomes}
    masks = subset_masks(ids, tags)
    say(config.progress, f"{EXPERIMENT.name}: text, image and group scores of {len(ids)} items in {len(masks)} subsets, "
                         f"{config.bootstrap} bootstrap resamples; about {format_bytes(8 * config.bootstrap * len(ids))}")
    rows: list[dict[str, Any]] = []
    for subset, mask in masks.items():
        n = int(mask.sum())
        for metric in METRICS:
            hit = outcomes.get(metric)
            value = float(100.0 * hit[mask].mean()) if n and hit is not None else float("nan")
            rows.append({
                "experiment": EXPERIMENT.name, "model": model, "task": "target", "split": "all",
                "subset": subset, "metric": metric, "value": value, "n": n,
                **({"note": undefined[metric]} if metric in undefined else {}),
            })
    idx = bootstrap_indices(len(ids), config.bootstrap, config.bootstrap_seed)
    base = {"experiment": EXPERIMENT.name, "model": model, "task": "target", "split": "all", "subset": "all",
            "n": len(ids)}
    for metric in METRICS:
        hit = outcomes.get(metric)
        boot = 100.0 * hit[idx].mean(axis=1) if hit is not None else np.full(len(idx), np.nan)
        rows += ci95_rows(base, metric, boot)
    return RunRows(
        rows, inputs, seeds=[config.bootstrap_seed],
        files={".scores.jsonl": lambda path: _write_winoground_item_scores(path, ids, s)},
        extra={"units": units_of(rows), "n_items": len(ids), "model": model,
               "undefined_metrics": undefined,
               "bootstrap": {"resamples": config.bootstrap, "seed": config.bootstrap_seed, "level": 0.95,
                             "kind": "percentile, items resampled with replacement, paired across metrics"},
               "item_scores": slot.file(".scores.jsonl")},
    )


def _write_winoground_item_scores(path: Path, ids: list[int], s: np.ndarray) -> None:
    items, images, texts, values = [], [], [], []
    for n, wid in enumerate(ids):
        for k in (0, 1):
            for j in (0, 1):
                items.append(f"winoground/{wid}")
                images.append(f"winoground/{wid}/i{j}")
                texts.append(f"winoground/{wid}/c{k}")
                values.append(float(s[n, k, j]))
    write_item_scores(path, items, images, texts, values)



def report(config: WinogroundScoresConfig, result: tuple[Path, Path, list[dict[str, Any]]]) -> list[str]:
    """The overall scores with intervals, then the files written."""
    csv_path, _, rows = result
    return metric_lines(rows, ("all",), csv_path)


# Version 2: matching defined for non-negative scores, NaN rows (not left out) when undefined;
# wwh=Easier/Harder from the 172 untagged ids, the paper code's split as *-WWH-code.
# Version 3: bow=same / bow=different slices.
# Version 4: wwh=NoTag/Easier/Harder are the paper's sets (171/201/199); the corrected ones are
# wwh=NoTag-corrected/Easier-corrected/Harder-corrected (172/202/198).
EXPERIMENT = Experiment("winoground-scores", 4, WinogroundScoresConfig, compute_winoground_scores, report,
                        label=cache_label,
                        chart=Chart("bars", ("text", "image", "group"), chance=WINOGROUND_CHANCE))
