"""Per-item linear separability of caption variants (``probe run separability``; paper §5.1).

For every item and layer, a :class:`~vlprobe.probes.LinearSeparabilityProbe` (the paper's
``SVC(kernel="linear", C=100)``: libsvm, unpenalised intercept) is fitted on the states of caption
0's family (the caption and its variants, label 0) against caption 1's family (label 1). The item
is *separable* at that layer when the SVM gets every training point right; its margin is
``2 / ||w||``. A fit whose ``w`` is numerically 0 relative to the points (e.g. CLIP's layer 0,
where a caption and its word-swapped partner give the same point) has *no hyperplane*: it is not
separable, has no margin, and is counted apart. The control fits the same points with their
labels permuted, one permutation per seed and case drawn from
``numpy.random.default_rng([seed, item, image + 1])`` (the same across layers).

On a stream of (image, text) pairs (cross-encoders) a *case* is an item conditioned on one of its
images: the points are the pair rows of that image with the item's texts; subsets ``image=0``,
``image=1`` report each image and ``all`` pools the cases. On a text stream a case is an item.
At a layer that does not see the image yet (LXMERT's language-only layers) an item's two image
cases hold the same points: there they are one case, as the paper's ``probe_lxmert.py`` fits its
9 pre-fusion layers once per item (image "N/A"), so ``all`` and the tag subsets count the item
once (their intervals and permutation tests do not treat a copy as a second, independent case);
it is fitted once, and ``image=<j>`` read that one case (target and controls); the per-case rows
name it by the item id, and the
manifest's ``repeated_cases`` lists, per stream and layer, how many cases were counted once
(:func:`repeated_cases`: the same texts, labels and states within a relative 1e-5).

Subsets: ``all``; ``image=<j>`` (pair streams); ``collapsed_tag=<v>``; the "Why is Winoground
Hard?" subsets as ``winoground-scores`` reports them (``wwh=<tag>``, the paper's ``wwh=NoTag``,
``wwh=Easier`` and ``wwh=Harder``, and the ``-corrected`` sets; :func:`vlprobe.data.tags.wwh_masks`);
``bow=same`` / ``bow=different``.

Outputs in ``OUT/separability/``:

* ``<model>.csv`` (tidy): per stream, layer, pooling and task (target; control per seed), subset,
  the metrics ``separable`` (% of cases), ``no_hyperplane`` (% of cases whose fit has no
  hyperplane), ``separable_margin`` (mean ``2 / ||w||`` over the separable cases only; ``n`` =
  their number, NaN when there is none), ``train_accuracy`` (%, mean) and ``converged`` (% of
  fits that converged within ``max_iter``); ``split`` is ``train`` (separability is a property of
  the training points);
  with, per layer and subset, for each of these five metrics: 95% bootstrap intervals
  over cases (``<metric>.ci95_low`` / ``.ci95_high``; task target, and control = the mean over
  control seeds per case), the selectivity (``task`` selectivity: target minus control) with its
  paired interval (the same resampled cases), and ``<metric>.p_value`` of the paired sign-flip
  permutation test of target vs control over cases (seed ``bootstrap_seed``; exact when
  ``2**cases <= permutations``); the number of permutations and the method are in the manifest;
* with ``held_out``: ``heldout_accuracy`` (split ``heldout``): per case, leave-one-out over its
  points (each variant predicted by an SVM fitted on the others; a point alone in its class is
  not tested), the % predicted right, averaged over the cases with a tested point (``n``), target
  and control alike; the target's 95% bootstrap interval over cases (``heldout_accuracy.ci95_low``
  / ``.ci95_high``; ``bootstrap`` resamples, ``bootstrap_seed``). Training accuracy measures
  separability; held-out accuracy whether the direction that separates generalises to a variant
  the SVM has not seen;
* ``<model>.items.csv`` (tidy): the same metrics per case, in the same units (``subset`` = item
  id, ``/i<j>`` for an image condition; ``separable`` is 0 or 100, ``separable_margin`` NaN for a
  case that is not separable), so the mean over cases gives the aggregate;
* ``<model>.summary.csv``: per layer, target and control mean/min/max over seeds, selectivity;
* ``manifest.json``.

Scaling is explicit and recorded. The default ``scale=paper`` is what the paper's code computes
for the cache's model family: ``probe_clip.py`` divides CLIP's states by 100 before
``SVC(kernel="linear", C=100)`` (on raw states that is ``C = 0.01``, and margins are in units of
1/100), while ``probe_lxmert.py`` and ``probe_uniter.py`` fit the raw states with ``C = 100``; so
``paper`` resolves to ``divide100`` for the CLIP family's caches (``clip`` and ``openclip``: the
same OpenAI weights get the same setting in either format) and to ``none`` for every other model (no
reference script exists for the others; they are fitted as LXMERT and UNITER were). The manifest
records the resolved scaling, ``C`` and the equivalent ``C`` on raw states. ``none``,
``divide100`` and ``standard`` (per layer and dimension over all rows of the stream) are
available by name, as is any ``C``.
The many small SVMs are fitted in parallel with joblib (``jobs``); each fit is deterministic, so
the results do not depend on ``jobs``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from joblib import Parallel, delayed

from vlprobe.data.tags import WWH_TAGS, missing_wwh_warning, winoground_number, wwh_masks
from vlprobe.experiments.cache_features import (
    SCALINGS,
    CacheIndex,
    cache_label,
    cache_path,
    load_index,
    pooling_notes,
    read_stream,
    require_variants,
    resolve_layers,
    resolve_stream,
    scale_states,
    stream_layers,
)
from vlprobe.probes.linear import LinearSeparabilityProbe
from vlprobe.probes.separability_cases import FIELDS, Case, fit_cases
from vlprobe.progress import format_bytes, progress_bar, say, warn
from vlprobe.runs.charts import NO_MARGIN, Chart
from vlprobe.runs.declare import Experiment, option
from vlprobe.runs.option_groups import (
    BootstrapTestOptions,
    CacheInput,
    ProgressOption,
    ResultsOptions,
    SeedsOption,
    StateOptions,
    check_layer_spec,
)
from vlprobe.runs.presets import PRESET_VALUES
from vlprobe.runs.printout import summary_lines
from vlprobe.runs.units import units_of
from vlprobe.runs.writing import RunRows, RunSlot
from vlprobe.stats.metrics import bootstrap_indices, ci95_rows
from vlprobe.stats.uncertainty import PERMUTATION_TEST, target_control_rows_batch
from vlprobe.validation import InputError, check_positive_float, check_positive_int

__all__ = [
    "EXPERIMENT",
    "PAPER_SCALING",
    "Case",
    "SeparabilityConfig",
    "fit_cases",
    "nothing_separable_note",
    "resolve_scale",
    "run_separability",
    "scaling_record",
    "separability_cases",
]

PROBE = "linear-separability"
HELDOUT_DEFINITION = ("leave-one-out over a case's points: each point predicted by an SVM fitted on the "
                      "others (points alone in their class not tested); % right, mean over cases with a tested point")
#: Tag families reported as subsets (when every item has them); ``bow``: the bag-of-words slices.
TAG_FAMILIES = ("collapsed_tag", "wwh", "bow")


def _check_jobs(jobs: int, param: str) -> int:
    return jobs if jobs == -1 else check_positive_int(jobs, param, " or -1 (all cores)")


@dataclass(frozen=True, kw_only=True)
class SeparabilityConfig(CacheInput, StateOptions, SeedsOption, BootstrapTestOptions, ProgressOption,
                         ResultsOptions):
    """One run: a cache in, ``OUT/separability/`` out.

    Attributes
    ----------
    cache, out : Path
    streams : tuple of str, optional
        Streams of texts or pairs; default: ``text`` if the cache has it, else every text or
        pair stream (LXMERT: ``lang`` and ``vision``). One plot panel per stream.
    pooling : str
        ``cls``, ``mean``, ``max`` or ``pooled``.
    layers : str
        Layer spec (``all``, ``0,4,-1``, ``2:6``, per stream ``lang=all;vision=-1``); ``all`` =
        every stored layer.
    scale : str
        ``paper`` (default: ``divide100`` for CLIP, ``none`` for other models, as the paper's
        scripts), ``none``, ``divide100`` or ``standard``.
    seeds : int
        Number of control permutations (seeds 0..seeds-1).
    C, max_iter, tol : SVM settings (see :class:`LinearSeparabilityProbe`).
    bootstrap : int
        Resamples of the case bootstrap (intervals of target, control and selectivity).
    bootstrap_seed : int
        Seed of the bootstrap and of the permutation test.
    permutations : int
        Random sign vectors of the permutation test (all ``2**cases`` when that is fewer).
    jobs : int
        Parallel workers (joblib; -1 = all cores).
    name : str, optional
        Results label (default: the cache's model).
    held_out : bool
        Also the leave-one-out accuracy over each case's points (``heldout_accuracy``).
    held_out_layers : str
        The layers of the held-out accuracy (a layer spec; ``all``: every fitted layer).
    bootstrap, bootstrap_seed : int
        Resamples and seed of the held-out accuracy's interval over cases.
    """

    cache: Path = CacheInput.redeclare("cache", help="A vlprobe cache with caption variants (`probe extract --variants`).")
    scale: str = option("paper", choices=("paper", *SCALINGS),
                        help="Feature scaling. paper (default): as the paper's code for the cache's model family: "
                             "CLIP states (clip, openclip) divided by 100 (probe_clip.py; = C/10^4 on raw states), LXMERT, UNITER "
                             "and other models raw (probe_lxmert.py, probe_uniter.py). none, divide100, or "
                             "standard (per layer over the stream's rows) by name.")
    seeds: int = SeedsOption.redeclare("seeds", 3, help="Number of control shuffles (seeds 0..N-1).")
    C: float = option(100.0, check=check_positive_float, help="SVM C.")
    max_iter: int = option(100_000, check=check_positive_int, help="SVM iterations.")
    tol: float = option(1e-3, check=check_positive_float, help="SVM stopping tolerance (libsvm).")
    jobs: int = option(1, check=_check_jobs, role="runtime", help="Parallel workers (-1: all cores).")
    held_out: bool = option(False, help="Also the leave-one-out accuracy over each item's variants (heldout_accuracy).")
    held_out_layers: str = option(
        "all", check=check_layer_spec,
        help="With --held-out: the layers it is computed at (a layer spec, per stream as --layers; each must be one of "
             "--layers). One more fit per point: at the last layer only (-1) it costs a fraction of all.")

    def check(self) -> None:
        super().check()
        if not self.held_out and self.held_out_layers.strip().lower() not in ("all", "*"):
            raise InputError("held_out_layers: chooses the layers of the held-out accuracy; it needs --held-out")


#: The paper's scaling per model family (cache header ``model``); other models: ``none``.
PAPER_SCALING = {"clip": "divide100", "openclip": "divide100"}
_SCALE_FACTOR = {"none": 1.0, "divide100": 0.01}


def resolve_scale(scale: str, model: str) -> str:
    """The scaling a run applies: ``paper`` resolved for the cache's model family (module docstring).

    Parameters
    ----------
    scale : str
        ``paper``, ``none``, ``divide100`` or ``standard``.
    model : str
        The cache header's model registry name (``clip``, ``lxmert``, ...).
    """
    return PAPER_SCALING.get(model, "none") if scale == "paper" else scale


def scaling_record(scale: str, model: str, C: float) -> dict[str, Any]:
    """The manifest's account of the scaling: asked, resolved, ``C`` and its raw-state equivalent."""
    resolved = resolve_scale(scale, model)
    factor = _SCALE_FACTOR.get(resolved)
    return {
        "asked": scale, "resolved": resolved, "model_family": model, "C": C,
        # SVC on states * f with C equals SVC on raw states with C * f**2 (margins * f).
        "C_on_raw_states": None if factor is None else C * factor**2,
        "paper_setting": resolve_scale("paper", model) == resolved,
        "reference": ("probe_clip.py: states / 100, SVC(kernel='linear', C=100)" if model in PAPER_SCALING
                      else "probe_lxmert.py / probe_uniter.py: raw states, SVC(kernel='linear', C=100)"
                      if model in ("lxmert", "uniter") else "no reference script for this model; paper resolves "
                      "to raw states as for LXMERT and UNITER"),
    }


def separability_cases(index: CacheIndex, modality: str, lookup: dict[tuple[int, int], int]) -> tuple[list[Case], list[str]]:
    """Cases of a stream and the ids of items skipped (fewer than 2 captions).

    Parameters
    ----------
    modality : {"text", "pair"}
    lookup : dict
        (image row, text row) -> stream row (see :func:`row_lookup`).
    """
    cases, skipped = [], []
    for i, fams in enumerate(index.families):
        if len(fams) < 2:
            skipped.append(index.item_ids[i])
            continue
        f0, f1 = fams[0], fams[1]
        texts = np.concatenate([f0, f1])
        labels = np.concatenate([np.zeros(len(f0), int), np.ones(len(f1), int)])
        if modality == "text":
            rows = np.array([lookup[(-1, int(t))] for t in texts])
            cases.append(Case(i, -1, index.item_ids[i], rows, labels))
            continue
        for j, img in enumerate(index.item_images[i]):
            keep = [(lookup[(int(img), int(t))], lab) for t, lab in zip(texts, labels, strict=True)
                    if (int(img), int(t)) in lookup]
            if not keep or len({lab for _, lab in keep}) < 2:
                continue
            r, lab = zip(*keep, strict=True)
            cases.append(Case(i, j, f"{index.item_ids[i]}/i{j}", np.asarray(r), np.asarray(lab)))
    return cases, skipped


def run_separability(config: SeparabilityConfig) -> tuple[Path, Path, list[dict[str, Any]]]:
    """Run the experiment and write its outputs (module docstring; :meth:`Experiment.run`).

    Returns
    -------
    csv_path, manifest_path : Path
    rows : list of dict
        The tidy per-layer rows.
    """
    return EXPERIMENT.run(config)


def compute_separability(config: SeparabilityConfig, slot: RunSlot) -> RunRows:
    """Fit the SVMs of every case, layer and seed: the tidy rows, the per-case rows, the manifest's entries."""
    from vlprobe.extract.cache.reader import ActivationCache

    seeds = list(range(config.seeds))
    params = {"C": config.C, "max_iter": config.max_iter, "tol": config.tol,
              "zero_tol": LinearSeparabilityProbe().zero_tol}
    with ActivationCache(cache_path(config.cache)) as cache:
        streams = _default_streams(cache, config.streams)
        index = load_index(cache)
        require_variants(index, config.cache, "separability")
        # said once the input is known good (a refused run prints its one error line only)
        wwh_note = missing_wwh_warning(cache.header.dataset, index.item_tags, f"cache {Path(config.cache).name}",
                                       "extract it again (the tags come with the dataset)")
        model = slot.label
        scale_mode = resolve_scale(config.scale, index.model)
        rows: list[dict[str, Any]] = []
        item_rows: list[dict[str, Any]] = []
        n_cases: dict[str, int] = {}
        methods: set[str] = set()
        read_layers: dict[str, dict[str, Any]] = {}
        fallbacks: dict[str, dict[str, str]] = {}
        notes: list[str] = []
        counted_once: dict[str, dict[str, int]] = {}
        held: dict[str, list[bool]] = {}
        for stream in streams:  # every stream's layers checked before the first is fitted
            pooling, layers = stream_layers(cache, stream, config.pooling, config.layers)
            held[stream] = _held_out_at(cache, stream, pooling, layers, config) if config.held_out else []
        for stream in streams:
            read = read_stream(cache, stream, ("text", "pair"), config.pooling, config.layers, param="streams")
            for note in pooling_notes([read], EXPERIMENT.name):
                say(config.progress, note)
            read_layers[stream] = {"modality": read.modality, "layers": read.layers, "pooling": read.pooling}
            if read.fell_back:
                fallbacks[stream] = {"asked": read.asked_pooling, "used": read.pooling}
            cases, skipped = separability_cases(index, read.modality, read.lookup)
            if not cases:
                raise InputError(f"cache: {Path(config.cache).name} has no item with two captions to separate")
            n_cases[stream] = len(cases)
            warn(wwh_note)
            wwh_note = None
            repeated = repeated_cases(read.states, cases)
            n_fits = int((~repeated).sum()) * (1 + len(seeds))
            cells = f"{len(cases)} cases x {len(read.layers)} layers"
            if repeated.any():  # the case-layers fitted once for both images of an item
                cells = f"({cells} - {int(repeated.sum())} repeated)"
            say(config.progress, f"{EXPERIMENT.name}: stream {stream} ({read.modality}, {read.pooling}): fitting {n_fits} linear "
                                 f"SVMs ({cells} x (target + {len(seeds)} "
                                 f"controls)){' and one more per point left out' if config.held_out else ''} "
                                 f"with {_n_workers(config.jobs)} worker(s); states "
                                 f"{format_bytes(read.states.nbytes)}")
            scaled = scale_states(read.states, scale_mode)
            with progress_bar(config.progress, n_fits, f"{EXPERIMENT.name} {stream}", "fit") as bar:
                per_layer = _fit_layers(scaled, cases, seeds, params, config.jobs, bar.update, held[stream], repeated)
            warning = nothing_separable_note(per_layer, scaled, stream, scale_mode, config.C)
            if warning:
                say(True, f"{EXPERIMENT.name}: {warning}")  # a warning, not progress: --quiet keeps it
                notes.append(warning)
            base = {"experiment": EXPERIMENT.name, "model": model, "stream": stream, "pooling": read.pooling,
                    "probe": PROBE, "split": "train"}
            layout = CaseLayout(cases, _subsets(cases, read.modality, index), repeated)
            once = {str(layer): int(repeated[li].sum()) for li, layer in enumerate(read.layers) if repeated[li].any()}
            if once:
                counted_once[stream] = once
            _rows(per_layer, read.layers, read.kinds, layout, seeds, base, rows, item_rows)
            methods |= _uncertainty_rows(per_layer, read.layers, read.kinds, layout, base, config, rows)
            if config.held_out:
                _heldout_intervals(per_layer, read.layers, read.kinds, layout, base, rows, config)

    return RunRows(
        rows, {"cache": index.provenance}, seeds=seeds, item_rows=item_rows, summary=True,
        extra={
            "model": model, "streams": read_layers, "pooling_fallback": fallbacks, "notes": notes,
            "probe": {"name": PROBE, "solver": "libsvm SVC(kernel='linear')", **params},
            "scaling": scaling_record(config.scale, index.model, config.C),
            "n_cases": n_cases, "skipped_items": skipped,
            "repeated_cases": {"definition": REPEATED_DEFINITION, "per_stream_layer": counted_once},
            "control": "labels of each case permuted by numpy default_rng([seed, item, image + 1])",
            "units": units_of(rows, item_rows),
            "separable_margin": "mean 2/||w|| over the separable cases only (n = their number)",
            "no_hyperplane": "fits whose decision values span less than zero_tol over the points (w ~ 0)",
            "bootstrap": {"resamples": config.bootstrap, "seed": config.bootstrap_seed, "level": 0.95,
                          "over": "cases of the subset; control per case = mean over control seeds",
                          "metrics": list(UNCERTAIN)},
            "permutation_test": {"test": PERMUTATION_TEST, "permutations": config.permutations,
                                 "seed": config.bootstrap_seed, "method": sorted(methods)},
            "outputs": [slot.file(".csv"), slot.file(".items.csv"), slot.file(".summary.csv")],
            **({"heldout_accuracy": HELDOUT_DEFINITION,
                "bootstrap": {"resamples": config.bootstrap, "seed": config.bootstrap_seed, "level": 0.95,
                              "kind": "percentile; cases resampled; target rows only"}} if config.held_out else {}),
        },
    )


def _default_streams(cache: Any, streams: tuple[str, ...] | None) -> list[str]:
    if streams:
        return [resolve_stream(cache, s, ("text", "pair"), param="streams") for s in streams]
    if "text" in cache.streams:
        return [resolve_stream(cache, "text", ("text", "pair"))]
    found = [s for s in cache.streams if cache.modality(s) in ("text", "pair")]
    return found or [resolve_stream(cache, None, ("text", "pair"))]


def _held_out_at(cache: Any, stream: str, pooling: str, layers: list[int | None], config: SeparabilityConfig) -> list[bool]:
    """Per fitted layer, whether the held-out accuracy is computed there (``held_out_layers``)."""
    if config.held_out_layers.strip().lower() in ("all", "*"):
        return [True] * len(layers)
    chosen = resolve_layers(cache, stream, pooling, config.held_out_layers, param="held_out_layers")
    extra = [layer for layer in chosen if layer not in layers]
    if extra:
        raise InputError(f"held_out_layers: layer(s) {extra} of stream {stream!r} are not among the fitted layers "
                         f"{layers} (--layers {config.layers})")
    return [layer in chosen for layer in layers]


def _fit_layers(
    states: np.ndarray, cases: list[Case], seeds: list[int], params: dict[str, Any], jobs: int,
    progress: Callable[[int], Any] | None = None,
    held_out: Sequence[bool] = (),
    repeated: np.ndarray | None = None,
) -> np.ndarray:
    """(L, cases, 1 + seeds, len(FIELDS)) results of :func:`fit_cases` on every layer, in parallel;
    the held-out accuracy at the layers ``held_out`` marks (none when it is empty). A case that
    ``repeated`` (L, cases) marks at a layer is not fitted there: it holds the results of the
    first case of its item, whose points it shares (target and controls alike).

    ``progress`` is called with the number of fits of each finished task (a layer's cases, or a
    share of them: at least about 2 tasks per worker, so the bar moves).
    """
    n_layers = states.shape[1]
    if repeated is None:
        repeated = np.zeros((n_layers, len(cases)), dtype=bool)
    n_chunks = max(1, -(-4 * _n_workers(jobs) // n_layers), -(-len(cases) // 64))
    tasks = []
    for li in range(n_layers):
        fitted = [c for c in range(len(cases)) if not repeated[li, c]]
        tasks += [(li, ch) for ch in (fitted[k::n_chunks] for k in range(n_chunks)) if ch]
    results = Parallel(n_jobs=jobs, return_as="generator")(
        delayed(fit_cases)(states[:, li, :], [cases[c] for c in ch], seeds, params, bool(held_out and held_out[li]))
        for li, ch in tasks
    )
    per_layer = np.empty((n_layers, len(cases), 1 + len(seeds), len(FIELDS)))
    for (li, ch), res in zip(tasks, results, strict=True):
        per_layer[li, ch] = res
        if progress is not None:
            progress(res.shape[0] * res.shape[1])
    first = {case.item: c for c, case in reversed(list(enumerate(cases)))}
    for li, c in zip(*np.nonzero(repeated), strict=True):
        per_layer[li, c] = per_layer[li, first[cases[c].item]]
    return per_layer


def nothing_separable_note(per_layer: np.ndarray, states: np.ndarray, stream: str, scale: str, C: float) -> str | None:
    """A line when no case is separable at any layer (target fits), else None.

    Usually the states' scale, not the model: with norms far below 1 a soft-margin SVM at this
    ``C`` prefers a small ``w`` to fitting every point. The line gives the median state norm
    after scaling and the options that change it.

    Parameters
    ----------
    per_layer : ndarray, shape (L, cases, 1 + seeds, len(FIELDS))
    states : ndarray, shape (R, L, H)
        The states as fitted (after scaling).
    """
    if per_layer.size == 0 or (per_layer[:, :, 0, FIELDS.index("separable")] > 0).any():
        return None
    norm = float(np.median(np.linalg.norm(states, axis=-1))) if states.size else 0.0
    other = "standard" if scale != "standard" else "none"
    return (f"no case is separable at any layer of stream {stream} (median state norm {norm:.3g} after scaling "
            f"{scale!r}, C={C:g}); tiny states need a larger C or another scaling: try --scale {other}"
            + (" or --scale none" if scale == "divide100" else "") + f", or --C {C * 1e4:g}")


def tag_subsets(tags: Sequence[dict[str, list[str]]], item_ids: Sequence[str]) -> dict[str, np.ndarray]:
    """Case masks per tag: ``collapsed_tag=<v>``; the "Why is Winoground Hard?" subsets as
    ``winoground-scores`` reports them (:func:`vlprobe.data.tags.wwh_masks`: ``wwh=<tag>``, the
    paper's ``wwh=NoTag`` / ``Easier`` / ``Harder`` and the ``-corrected`` sets), for
    ``winoground/<id>`` items; and ``bow=same`` / ``bow=different`` where present.

    Parameters
    ----------
    tags : sequence of dict
        Tag families of each case's item.
    item_ids : sequence of str
        Each case's item id (``winoground/<n>`` gives the Winoground id the paper's sets need).
    """
    out: dict[str, np.ndarray] = {}
    for family in TAG_FAMILIES:
        if not tags or not all(family in t for t in tags):
            continue
        if family == "wwh":
            ids = [winoground_number(i) for i in item_ids]
            masks = wwh_masks([-1 if i is None else i for i in ids], [t[family] for t in tags])
            present = {f"wwh={v}" for t in tags for v in t[family]}
            out.update({k: m for k, m in masks.items() if k in present or k[4:] not in WWH_TAGS})
            if any(i is None for i in ids):  # the paper's sets are lists of Winoground ids
                for name in ("wwh=NoTag", "wwh=Easier", "wwh=Harder"):
                    out.pop(name)
            continue
        for value in sorted({v for t in tags for v in t[family]}):
            out[f"{family}={value}"] = np.array([value in t[family] for t in tags])
    return out


@dataclass(frozen=True)
class CaseLayout:
    """A stream's cases with their subsets and, per layer, the cases counted once.

    Attributes
    ----------
    cases : list of Case
    subsets : dict of str to bool ndarray, shape (cases,)
    repeated : bool ndarray, shape (layers, cases)
        True where a case has the same points as an earlier case of its item at that layer
        (:func:`repeated_cases`): left out of every subset that pools the images of an item.
    """

    cases: list[Case]
    subsets: dict[str, np.ndarray]
    repeated: np.ndarray

    def mask(self, subset: str, li: int) -> np.ndarray:
        """The cases of ``subset`` at layer ``li``: a case repeated there counts once, except in
        the ``image=<j>`` subsets (each holds one case per item anyway)."""
        mask = self.subsets[subset]
        return mask if subset.startswith("image=") else mask & ~self.repeated[li]

    def names(self, li: int) -> list[str]:
        """The cases' names at layer ``li``: the item id alone for a case whose twin is repeated there."""
        merged = {self.cases[c].item for c in np.flatnonzero(self.repeated[li])}
        return [case.name.rsplit("/i", 1)[0] if case.image >= 0 and case.item in merged else case.name
                for case in self.cases]


#: How the manifest describes the cases counted once.
REPEATED_DEFINITION = (
    "on a pair stream, a case whose points equal those of an earlier case of its item at a layer (the layer "
    "does not see the image yet, e.g. LXMERT's language-only layers) is one case there, as the paper's "
    "probe_lxmert.py fits its 9 pre-fusion layers once per item: it is not fitted again (image=<j> read the "
    "item's one case, target and controls), it is left out of the subsets that pool an item's images (all, tags), "
    "and the one case is named by the item id in the per-case rows")


def repeated_cases(states: np.ndarray, cases: Sequence[Case]) -> np.ndarray:
    """Per layer, the cases whose points equal an earlier case's of the same item.

    Two cases of an item repeat each other at a layer when they hold the same texts with the
    same labels and their states agree there (within a relative 1e-5: the same computation
    may run in another batch, which moves the last bits).

    Parameters
    ----------
    states : ndarray, shape (R, L, H)
    cases : sequence of Case

    Returns
    -------
    bool ndarray, shape (L, len(cases))
    """
    out = np.zeros((states.shape[1], len(cases)), dtype=bool)
    first: dict[int, int] = {}
    for c, case in enumerate(cases):
        if case.image < 0:
            continue
        f = first.setdefault(case.item, c)
        other = cases[f]
        if f == c or len(other.rows) != len(case.rows) or not np.array_equal(other.labels, case.labels):
            continue
        a, b = states[other.rows], states[case.rows]  # (n, L, H)
        scale = np.maximum(np.abs(a).max(axis=(0, 2)), np.abs(b).max(axis=(0, 2)))  # (L,)
        out[:, c] = (np.abs(a - b).max(axis=(0, 2)) <= 1e-5 * scale) if a.size else False
    return out


def _rows(
    per_layer: np.ndarray, layers: list[int | None], kinds: list[str | None], layout: CaseLayout, seeds: list[int],
    base: dict[str, Any], rows: list[dict[str, Any]], item_rows: list[dict[str, Any]],
) -> None:
    """Append the tidy per-layer rows and per-case rows of one stream."""
    runs = [("target", None)] + [("control", s) for s in seeds]
    for li, layer in enumerate(layers):
        lrow = {**base, "layer": layer, "kind": kinds[li]}
        for t, (task, seed) in enumerate(runs):
            res = per_layer[li, :, t]
            for subset in layout.subsets:
                rows.extend(_aggregate(res[layout.mask(subset, li)], {**lrow, "task": task, "seed": seed, "subset": subset}))
            values = _case_values(res)
            tested = res[:, FIELDS.index("heldout_n")]
            names = layout.names(li)
            for c, case in enumerate(layout.cases):
                if layout.repeated[li, c]:
                    continue
                name = names[c]
                for metric, column in values.items():
                    held = metric == "heldout_accuracy"
                    item_rows.append({**lrow, "task": task, "seed": seed, "subset": name,
                                      "metric": metric, "value": float(column[c]),
                                      "n": int(tested[c]) if held else len(case.rows),
                                      **({"split": "heldout"} if held else {})})


def _subsets(cases: list[Case], modality: str, index: CacheIndex) -> dict[str, np.ndarray]:
    subsets: dict[str, np.ndarray] = {"all": np.ones(len(cases), bool)}
    if modality == "pair":
        for j in sorted({c.image for c in cases}):
            subsets[f"image={j}"] = np.array([c.image == j for c in cases])
    subsets.update(tag_subsets([index.item_tags[c.item] for c in cases], [index.item_ids[c.item] for c in cases]))
    return subsets


#: Metrics given bootstrap intervals, selectivity and the permutation test.
UNCERTAIN = ("separable", "separable_margin", "train_accuracy", "no_hyperplane", "converged")


def _uncertainty_rows(
    per_layer: np.ndarray, layers: list[int | None], kinds: list[str | None], layout: CaseLayout,
    base: dict[str, Any], config: SeparabilityConfig, rows: list[dict[str, Any]],
) -> set[str]:
    """Append intervals, selectivity and permutation-test rows (module docstring); return the test methods."""
    methods: set[str] = set()
    for subset in layout.subsets:
        # Cells grouped by their number of cases (a layer where an item's image cases coincide
        # counts fewer): the same resampled positions for every layer with n cases, paired.
        groups: dict[int, list[tuple[dict[str, Any], str, np.ndarray, np.ndarray]]] = {}
        for li, layer in enumerate(layers):
            mask = layout.mask(subset, li)
            n = int(mask.sum())
            if not n:
                continue
            values = [_case_values(per_layer[li, mask, t]) for t in range(per_layer.shape[2])]
            for metric in UNCERTAIN:
                target = values[0][metric][None, :]
                control = np.stack([v[metric] for v in values[1:]])
                groups.setdefault(n, []).append(
                    ({**base, "layer": layer, "kind": kinds[li], "subset": subset}, metric, target, control))
        out: list[dict[str, Any]] = []
        for n, cells in groups.items():
            idx = bootstrap_indices(n, config.bootstrap, config.bootstrap_seed)
            got, found = target_control_rows_batch(cells, idx, config.bootstrap_seed, n_permutations=config.permutations,
                                                   permutation_seed=config.bootstrap_seed)
            out.extend(got)
            methods |= {m for m in found if m}
        rows.extend(sorted(out, key=lambda r: layers.index(r["layer"])))  # layer order, as before the grouping
    return methods


def _case_values(res: np.ndarray) -> dict[str, np.ndarray]:
    """Per-case metric values (module docstring) from (cases, len(FIELDS)) fit results;
    ``heldout_accuracy`` only when it was computed."""
    f = {name: res[:, i] for i, name in enumerate(FIELDS)}
    separable = f["separable"] > 0
    out = {
        "separable": 100.0 * f["separable"],
        "no_hyperplane": 100.0 * (1.0 - f["has_hyperplane"]),
        "separable_margin": np.where(separable, f["margin"], np.nan),
        "train_accuracy": 100.0 * f["train_accuracy"],
        "converged": 100.0 * f["converged"],
    }
    if (f["heldout_n"] > 0).any():
        out["heldout_accuracy"] = 100.0 * f["heldout_accuracy"]
    return out


def _heldout_intervals(
    per_layer: np.ndarray, layers: list[int | None], kinds: list[str | None], layout: CaseLayout,
    base: dict[str, Any], rows: list[dict[str, Any]], config: SeparabilityConfig,
) -> None:
    """The target's ``heldout_accuracy`` 95% intervals per layer and subset (cases resampled)."""
    col = FIELDS.index("heldout_accuracy")
    for subset in layout.subsets:
        for li, layer in enumerate(layers):
            members = np.flatnonzero(layout.mask(subset, li))
            if not len(members):
                continue
            values = 100.0 * per_layer[li, :, 0, col]
            if not np.isfinite(values[members]).any():  # not computed at this layer (held_out_layers)
                continue
            idx = members[bootstrap_indices(len(members), config.bootstrap, config.bootstrap_seed)]
            with np.errstate(all="ignore"):
                boot = np.nanmean(np.where(np.isfinite(values[idx]), values[idx], np.nan), axis=1)
            n = int(np.isfinite(values[members]).sum())
            rows.extend(ci95_rows({**base, "layer": layer, "kind": kinds[li], "task": "target", "subset": subset,
                                   "split": "heldout",
                                   "n": n}, "heldout_accuracy", boot))


def _aggregate(res: np.ndarray, row: dict[str, Any]) -> list[dict[str, Any]]:
    """The subset's rows: percentages over its cases, the margin over its separable cases."""
    n = len(res)
    if not n:
        return []
    out = []
    for metric, column in _case_values(res).items():
        kept = column[np.isfinite(column)] if metric in ("separable_margin", "heldout_accuracy") else column
        split = {"split": "heldout"} if metric == "heldout_accuracy" else {}
        out.append({**row, "metric": metric, "n": len(kept), **split,
                    "value": float(kept.mean()) if len(kept) else float("nan")})
    return out


def _n_workers(jobs: int) -> int:
    import os

    return (os.cpu_count() or 1) if jobs == -1 else jobs


def report(config: SeparabilityConfig, result: tuple[Path, Path, list[dict[str, Any]]]) -> list[str]:
    """% separable, target vs control, per stream and layer; then the files written."""
    csv_path, _, rows = result
    lines = summary_lines(rows, "separable", "train", csv_path, side=(f"{csv_path.stem}.items.csv",))
    if config.held_out:
        held = summary_lines(rows, "heldout_accuracy", "heldout", csv_path)
        lines = [*lines[: -1], *held[: -1], lines[-1]]  # the files written, once, last
    return lines


# Version 2: libsvm's SVC (was liblinear); no_hyperplane; separable_margin over separable cases only
# (was margin over every finite fit); per-case percentages in percent (were fractions).
# Version 3: held_out (heldout_accuracy, split heldout, with intervals).
# Version 4: scale=paper by default (CLIP states / 100, as probe_clip.py; other models raw);
# wwh=NoTag renamed wwh=NoTag-corrected (the items untagged in the tag file, 172 of Winoground's).
# Version 5: scale=paper divides openclip caches' states by 100 too (the CLIP family, as probe_clip.py).
# Version 6: an item's image cases with the same points at a layer count once there (repeated_cases);
# the paper's wwh=NoTag/Easier/Harder and the Easier/Harder-corrected sets beside NoTag-corrected.
EXPERIMENT = Experiment("separability", 6, SeparabilityConfig, compute_separability, report, label=cache_label,
                        presets=PRESET_VALUES["separability"], swept=("streams", "layers", "seeds"),
                        chart=Chart("layers", ("separable", "separable_margin", "train_accuracy"), split="train",
                                    missing={"separable_margin": NO_MARGIN}))
