"""Extraction: dataset + adapter -> HDF5 cache, batched, resumable, shardable.

:func:`extract` checks the model's inputs against what it declares (its ``image_input``, load
options: :func:`vlprobe.extract.model_inputs.check_model_inputs`), loads the dataset (and variants),
loads the model through its adapter, opens or resumes the cache, and writes every batch the
pair-scoring engine (:mod:`vlprobe.extract.scoring`) yields as one flushed chunk:

* ``text`` and ``image`` streams (a dual encoder's, or a cross-encoder's unimodal ones): the rows
  not done, in batches (:func:`~vlprobe.extract.scoring.encode_stream`); a dual encoder's score
  matrix then comes from the stored pooled embeddings;
* cross-encoders (LXMERT, UNITER, BLIP-ITM) run the pair plan: the pairs not done go through
  :func:`~vlprobe.extract.scoring.score_pairs` (texts tokenised once, images' region features or
  pixels read once, batches of pairs through ``encode_pairs``), which gives the score of every
  pair and, with ``pair_states``, the pooled states of every ``pair`` stream, written together.

``shard="K/N"`` runs the K-th of N contiguous blocks of every stream's rows (and of the pair
plan) into its own file; :func:`vlprobe.extract.cache.merge.merge_shards` joins the N files and
computes the scores. ``shard="auto"`` reads K and N from the launcher's environment (Slurm,
torchrun, accelerate, MPI: :mod:`vlprobe.shards`) and writes ``<out stem>.shard-K-of-N.h5``; under
a launcher ``device="auto"`` is the process's GPU (its local rank) and the cache records the job
ids (``job_ids``).

``dataset_options`` are further keyword arguments of the dataset's loader (SugarCrepe
``image_dir``, VALSE ``image_root``, ``subsets``, ``limit``, ``all_items``), checked against its
signature; those that choose items are compared on resume (``dataset_selection``). Models that
read regions take no image folders (SugarCrepe and VALSE then load without pixels); models that
read pixels need a file for every image, checked before the cache is opened.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vlprobe import __version__
from vlprobe.data.items import Dataset
from vlprobe.data.loading import load_dataset, loader_options
from vlprobe.devices import device_name
from vlprobe.extract.cache.schema import (
    CacheHeader,
    CacheRecord,
    CacheTables,
    PairLayout,
    StreamLayout,
)
from vlprobe.extract.cache.writer import CacheWriter
from vlprobe.extract.defaults import (
    DETECTOR_ENV,
    FIXTURE_MARKER,
    RegionPlan,
    default_cache_path,
    default_checkpoint,
    default_detector,
    default_region_path,
    default_variants,
    hub_offline,
    is_hub_id,
    missing_defaults_message,
)
from vlprobe.extract.model_inputs import (
    check_model_inputs,
    check_region_width,
    model_dtype,
    require_image_files,
)
from vlprobe.extract.models.base import Adapter, CrossEncoder, DualEncoder, StreamSpec
from vlprobe.extract.models.pooling import parse_poolings
from vlprobe.extract.scoring import ImageSource, encode_stream, pooled_score_fn, score_pairs
from vlprobe.io.paths import ensure_folder
from vlprobe.layers import parse_stream_layers
from vlprobe.provenance import git_revision, package_versions
from vlprobe.registry import MODELS
from vlprobe.shards import (
    Placement,
    auto_device,
    job_entry,
    parse_shard,
    resolve_shard,
    shard_block,
    shard_path,
)
from vlprobe.validation import InputError, check_choice, check_positive_int

__all__ = [
    "PAIR_PLANS",
    "ExtractConfig",
    "ExtractResult",
    "extract",
    "pair_rows",
    "tables_from_dataset",
]

PAIR_PLANS = ("item", "all")


@dataclass(frozen=True)
class ExtractConfig:
    """Everything one extraction run depends on (the CLI builds this, then calls :func:`extract`)."""

    model: str
    #: A folder, a hub id or (UNITER) a file; None: the model's reference checkpoint
    #: (:func:`vlprobe.extract.defaults.default_checkpoint`).
    checkpoint: str | None = None
    #: The cache to write or resume; None: ``caches/<model>-<dataset>.h5``.
    out: Path | None = None
    dataset: str = "winoground"
    #: The dataset's folder; None: the folder ``VLPROBE_<DATASET>`` names, else the hub.
    data_dir: Path | None = None
    tags: Path | None = None
    #: A variants file; None: ``variants.jsonl`` in the folder ``VLPROBE_<DATASET>`` names when the
    #: dataset's folder came from it (an explicit ``data_dir`` attaches no variants by itself).
    variants: Path | None = None
    layers: str = "all"
    poolings: tuple[str, ...] = ("cls", "mean", "max")
    batch_size: int = 32
    device: str = "auto"
    #: ``auto``: the dtype the model's reference code loads it in (``Adapter.reference_dtype``),
    #: resolved before anything is recorded.
    dtype: str = "auto"
    shard: str = "0/1"
    pair_plan: str = "item"
    progress: bool = True
    #: Region-feature file (vlprobe HDF5) for models that read regions (LXMERT, UNITER); None:
    #: made from the dataset's images by the built-in detector, beside the cache.
    regions: Path | None = None
    #: A model config file given apart from the checkpoint (UNITER's JSON).
    model_config: Path | None = None
    #: A tokenizer directory or hub id given apart from the checkpoint (UNITER).
    tokenizer: str | None = None
    #: Further load options the model declares (``Adapter.load_options``, e.g. BLIP's
    #: ``score_head``); checked by :func:`vlprobe.extract.model_inputs.check_model_inputs`.
    model_options: Mapping[str, Any] = field(default_factory=dict)
    #: Cross-encoders: store the pair streams' states besides the scores. None = yes for the
    #: ``item`` plan, no for ``all`` (every image x every text x every layer is huge).
    pair_states: bool | None = None
    #: Further keyword arguments of the dataset's loader (SugarCrepe ``image_dir``, VALSE
    #: ``image_root``, ``subsets``, ``limit``, ...); checked against what the loader accepts.
    dataset_options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ExtractResult:
    """What a run did (``defaults``: each input not given -> what was taken, as the cache records it)."""

    path: Path
    rows_written: dict[str, int]
    rows_total: dict[str, int]
    seconds: float
    complete: bool
    defaults: dict[str, str] = field(default_factory=dict)


def tables_from_dataset(dataset: Dataset) -> CacheTables:
    """The cache's index tables for a dataset (canonical image and text orders)."""
    item_row = {it.id: i for i, it in enumerate(dataset.items)}
    images = [(img, item_row[it.id]) for it in dataset.items for img in it.images]
    texts = dataset.texts()
    text_item = {t.id: item_row[it.id] for it in dataset.items for t in it.texts}
    text_row = {t.id: i for i, t in enumerate(texts)}
    return CacheTables(
        item_id=[it.id for it in dataset.items],
        item_tags=[json.dumps({k: list(v) for k, v in it.tags.items()}, sort_keys=True) for it in dataset.items],
        image_id=[img.id for img, _ in images],
        image_name=[img.name for img, _ in images],
        image_item=[i for _, i in images],
        text_id=[t.id for t in texts],
        text=[t.text for t in texts],
        text_item=[text_item[t.id] for t in texts],
        text_parent=[text_row[t.parent] if t.parent else -1 for t in texts],
        text_strategy=[t.strategy or "" for t in texts],
    )


def pair_rows(tables: CacheTables, plan: str) -> tuple[np.ndarray, np.ndarray]:
    """(image rows, text rows) of every pair in a pair plan.

    ``item``: every image x every text of the same item (variants included), item by item;
    ``all``: every image x every text.

    Returns
    -------
    image, text : ndarray of int, shape (P,)
    """
    check_choice(plan, "pair_plan", PAIR_PLANS, kind="pair plan")
    image_item = np.asarray(tables.image_item)
    text_item = np.asarray(tables.text_item)
    if plan == "all":
        img, txt = np.meshgrid(np.arange(len(image_item)), np.arange(len(text_item)), indexing="ij")
        return img.ravel(), txt.ravel()
    imgs, txts = [], []
    for item in range(len(tables.item_id)):
        i_rows = np.flatnonzero(image_item == item)
        t_rows = np.flatnonzero(text_item == item)
        img, txt = np.meshgrid(i_rows, t_rows, indexing="ij")
        imgs.append(img.ravel())
        txts.append(txt.ravel())
    return np.concatenate(imgs), np.concatenate(txts)


def _stream_rows(spec: StreamSpec, tables: CacheTables, plan: str) -> tuple[np.ndarray, np.ndarray]:
    n_img, n_txt = len(tables.image_id), len(tables.text_id)
    if spec.modality == "text":
        return np.full(n_txt, -1), np.arange(n_txt)
    if spec.modality == "image":
        return np.arange(n_img), np.full(n_img, -1)
    if spec.modality == "pair":
        return pair_rows(tables, plan)
    raise RuntimeError(f"adapter bug: stream {spec.name!r} declares unknown modality {spec.modality!r}")


def extract(config: ExtractConfig) -> ExtractResult:
    """Run (or resume) one extraction; see the module docstring.

    Returns
    -------
    ExtractResult
    """
    t0 = time.perf_counter()
    adapter_cls = MODELS.get(config.model)
    if not (isinstance(adapter_cls, type) and issubclass(adapter_cls, Adapter)):
        raise InputError(
            f"model: {config.model!r} has no hidden-state streams to extract (a blind text-only baseline "
            "is scored with `probe eval`)"
        )
    config = dataclasses.replace(config, dtype=model_dtype(adapter_cls, config.dtype))  # the cache records it
    config, k, n_shards, placement = _placed(config)  # before any default is looked up
    config, taken, plan, missing = _with_defaults(config, adapter_cls)
    _validate(config)
    assert config.out is not None
    jobs = [job_entry(k, n_shards, placement)] if placement is not None else []
    if placement is not None:
        _say(config, f"shard {k}/{n_shards} under {placement.source}: {config.out}")
    CacheWriter.check_out(config.out)  # before the model loads
    poolings = parse_poolings(config.poolings, param="poolings")
    image_options = {k: config.dataset_options.get(k) for k in ("image_dir", "image_root")}
    options = check_model_inputs(
        config.model, adapter_cls, regions=plan.path if plan is not None else config.regions,
        image_options={} if plan is not None else image_options,
        load_options={"model_config": config.model_config, "tokenizer": config.tokenizer, **config.model_options},
    )
    cache_options = {k: v for k, v in config.dataset_options.items() if plan is None or k not in image_options}
    # every default that is not there fails now, all of them in one line, before any work
    if "checkpoint" in taken and config.checkpoint is not None:
        origin = taken["checkpoint"]
        note = _check_default(missing, config.checkpoint, origin, "checkpoint")
        taken["checkpoint"] = f"{config.checkpoint} ({origin}{note})"
    if plan is not None:
        _check_default(missing, plan.detector, plan.detector_origin, "detector", how=(
            f"set {DETECTOR_ENV}=DIR (a folder holding the detector's config.yaml and pytorch_model.bin), or pass "
            f"--regions FILE (`probe regions extract --detector DIR --dataset {config.dataset}` makes one)"))
    dataset = None
    if config.data_dir is None and (not missing or hub_offline()):  # the dataset's default source (the hub)
        try:
            dataset = load_dataset(config.dataset, None, config.tags, config.variants, cache_options)
        except InputError as exc:
            missing.append(str(exc))
    if missing:
        raise InputError(missing_defaults_message(missing))
    assert config.checkpoint is not None  # _with_defaults filled it, or said why not
    _say_defaults(config, taken)
    if dataset is None:
        dataset = load_dataset(config.dataset, config.data_dir, config.tags, config.variants, cache_options)
    if adapter_cls.image_input == "pixels":
        require_image_files(config.model, dataset.images(), config.dataset, loader_options(config.dataset))
    if plan is not None:
        taken["regions"] = _make_regions(config, plan)
        config = dataclasses.replace(config, regions=plan.path)
        _say_defaults(config, {"regions": taken["regions"]})
    store = _open_regions(config, adapter_cls, dataset)
    try:
        assert config.checkpoint is not None
        adapter: Adapter = adapter_cls.load(config.checkpoint, device=config.device, dtype=config.dtype, **options)
        if store is not None:
            check_region_width(config.model, adapter, store)
        return _extract(config, adapter, dataset, store, poolings, k, n_shards, t0, taken, jobs)
    finally:
        if store is not None:
            store.close()


def _with_defaults(
    config: ExtractConfig, adapter_cls: type[Adapter],
) -> tuple[ExtractConfig, dict[str, str], RegionPlan | None, list[str]]:
    """The config with every input not given filled in (:mod:`vlprobe.extract.defaults`), what
    was taken for each (field -> description, as the cache records it), the regions to make, and
    what could not be filled in (a message each; the checkpoint then stays None)."""
    from vlprobe.data.loading import resolve_data_dir

    taken: dict[str, str] = {}
    changes: dict[str, Any] = {}
    missing: list[str] = []
    if config.checkpoint is None:
        try:
            spec, origin = default_checkpoint(config.model, adapter_cls)
        except InputError as exc:
            missing.append(str(exc))
        else:
            changes["checkpoint"] = spec
            taken["checkpoint"] = origin  # completed once the checkpoint is found
    data_dir, env = resolve_data_dir(config.dataset, config.data_dir)
    if env is not None:
        changes["data_dir"] = data_dir
        taken["data_dir"] = f"{Path(data_dir).resolve()} ({env})" if data_dir is not None else env
    if config.variants is None and env is not None:  # a folder given explicitly attaches only what variants names
        variants = default_variants(data_dir)
        if variants is not None:
            changes["variants"] = variants
            taken["variants"] = f"{variants.resolve()} ({variants.name} in the dataset's folder)"
    out = config.out
    if out is None:
        out = default_cache_path(config.model, config.dataset, config.shard)
        changes["out"] = out
        taken["out"] = str(out)
    plan = None
    if adapter_cls.image_input == "regions" and config.regions is None:
        preset = adapter_cls.region_preset
        if preset is None:
            raise InputError(
                f"regions: {config.model} was trained on region features that the built-in detector does not "
                "make (no region_preset); give --regions FILE (`probe regions extract` or `probe regions import`)"
            )
        if parse_shard(config.shard)[1] > 1:
            raise InputError(
                f"regions: a sharded extraction of {config.model} needs a region file; make it first with "
                f"`probe regions extract --dataset {config.dataset} --preset {preset}` (itself shardable) and pass "
                "--regions FILE"
            )
        detector, detector_origin = default_detector()
        path = default_region_path(out, config.dataset, preset, config.dataset_options)
        plan = RegionPlan(path, detector, detector_origin, preset)
    return dataclasses.replace(config, **changes), taken, plan, missing


def _check_default(missing: list[str], spec: str, origin: str, param: str, how: str | None = None) -> str:
    """Check a checkpoint taken by default: a hub id the hub cache lacks offline adds its message
    (what to download and where to put it; ``how``: how else to give it) to ``missing``; returns
    a note for the record when the checkpoint found is a vlprobe test fixture (tiny random weights
    under the real name)."""
    from vlprobe.extract.models.hf import resolve_checkpoint
    if not is_hub_id(spec):
        return ""
    try:
        resolved = resolve_checkpoint(spec, param=param, allow_patterns=["*.json", "*.yaml", "*.txt"],
                                      default_of=origin, how=how)
    except InputError as exc:
        missing.append(str(exc))
        return ""
    if (resolved.path / FIXTURE_MARKER).is_file():
        print(f"note: {param} {spec} in the hub cache ({resolved.path}) is a vlprobe test fixture: tiny random weights, "
              "not the real model", file=sys.stderr)
        return ", a vlprobe test fixture: random weights"
    return ""


def _make_regions(config: ExtractConfig, plan: RegionPlan) -> str:
    """Make (or resume, or reuse) the regions of ``plan`` from the dataset's images; what the cache records."""
    from vlprobe.extract.regions.extraction import RegionExtractConfig, extract_regions

    assert config.out is not None
    ensure_folder(Path(config.out).parent)
    options = {k: v for k, v in config.dataset_options.items() if v is not None}
    _say(config, f"regions: {plan.path} (the {plan.preset} boxes of the {config.dataset} images, detector {plan.detector})")
    try:
        got = extract_regions(RegionExtractConfig(
            detector=plan.detector, out=plan.path, dataset=config.dataset, data_dir=config.data_dir,
            dataset_options=options, preset=plan.preset, device=config.device, progress=config.progress,
        ))
    except InputError as exc:
        raise InputError(
            f"regions (made by vlprobe into {plan.path}, as none was given): {exc}; pass --regions FILE, or move "
            f"{plan.path} away to make it again"
        ) from None
    if got.images_written:
        _say(config, f"regions: wrote {got.images_written} of {got.images_total} images into {plan.path} ({got.seconds:.1f} s)")
    return f"{plan.path} (made by vlprobe: detector {plan.detector} ({plan.detector_origin}), preset {plan.preset})"


def _say_defaults(config: ExtractConfig, taken: Mapping[str, str]) -> None:
    for name, what in taken.items():
        _say(config, f"default {name}: {what}")


def _open_regions(config: ExtractConfig, adapter_cls: type[Adapter], dataset: Dataset) -> Any:
    """The region store of a model that reads regions, checked to cover every image of the dataset."""
    if adapter_cls.image_input != "regions":
        return None
    from vlprobe.extract.regions.store import RegionStore

    if config.regions is None:
        raise ValueError(f"{config.model}: no region file, which check_model_inputs requires")
    store = RegionStore(config.regions)
    try:
        store.require([img.name for img in dataset.images()], "the dataset's")
    except BaseException:
        store.close()
        raise
    return store


def _extract(
    config: ExtractConfig, adapter: Adapter, dataset: Dataset, store: Any,
    poolings: tuple[str, ...], k: int, n_shards: int, t0: float, taken: Mapping[str, str],
    jobs: list[dict[str, str]],
) -> ExtractResult:
    dual = isinstance(adapter, DualEncoder)
    streams = adapter.streams
    layers = parse_stream_layers(config.layers, {s: spec.n_layers for s, spec in streams.items()})
    stored_poolings = tuple(dict.fromkeys((*poolings, "pooled")))
    tables = tables_from_dataset(dataset)
    plan = "all" if dual else config.pair_plan
    pair_states = False if dual else (config.pair_states if config.pair_states is not None else plan == "item")
    if not pair_states:  # pair streams only with pair states; text and image streams are cheap
        layers = {s: v for s, v in layers.items() if streams[s].modality != "pair"}
    fingerprints = adapter.input_fingerprints()
    model_options = adapter.model_options()
    assert config.checkpoint is not None
    header = CacheHeader(
        model=config.model,
        checkpoint=config.checkpoint,
        checkpoint_fingerprint=adapter.checkpoint.fingerprint,
        dataset=dataset.name,
        dataset_fingerprint=dataset.fingerprint,
        variants_fingerprint=dataset.extra_fingerprints.get("variants", ""),
        pair_plan=plan,
        poolings=stored_poolings,
        dtype=config.dtype,
        shard=f"{k}/{n_shards}",
        layers=layers,
        pair_states=pair_states,
        regions_fingerprint=store.fingerprint if store is not None else "",
        config_fingerprint=fingerprints.get("config", ""),
        tokenizer_fingerprint=fingerprints.get("tokenizer", ""),
        dataset_selection=_dataset_selection(config.dataset_options),
        model_options=json.dumps(model_options, sort_keys=True) if model_options else "",
        **adapter.image_preprocessing(),
    )
    layouts = []
    pairs: PairLayout | None = None
    if not dual:
        image, text = pair_rows(tables, plan)
        start, stop = shard_block(len(image), k, n_shards)
        pairs = PairLayout(image, text, start, stop, position_columns=getattr(adapter, "position_columns", ()))
    for name, spec in streams.items():
        if name not in layers:
            continue
        image, text = _stream_rows(spec, tables, plan)
        start, stop = shard_block(len(image), k, n_shards)
        usable = tuple(p for p in stored_poolings if p in spec.poolings)
        layouts.append(StreamLayout(spec, layers[name], image, text, start, stop, usable))
    info = adapter.describe()
    record = CacheRecord(
        vlprobe_version=__version__,
        versions=package_versions(),
        git_revision=git_revision(),
        device=device_name(adapter.device),
        dataset_source=dataset.source,
        tags_fingerprint=dataset.extra_fingerprints.get("tags", ""),
        model_info=info,
        batch_size=config.batch_size,
        dataset_options={k: _plain(v) for k, v in config.dataset_options.items() if v is not None},
        defaults=dict(taken),
        job_ids=jobs,
    )
    written: dict[str, int] = {}
    totals: dict[str, int] = {}
    assert config.out is not None
    with CacheWriter.open(
        config.out, header, tables, layouts, record, with_scores=(n_shards == 1 or not dual), pairs=pairs, score_kind=adapter.score_kind,
    ) as writer:
        for lay in layouts:
            if lay.spec.modality == "pair":
                continue  # written with the pairs
            name = lay.spec.name
            todo = writer.todo(name)
            totals[name] = lay.stop - lay.row_start
            written[name] = len(todo)
            if len(todo) and len(todo) < totals[name]:
                _say(config, f"{name}: resuming, {totals[name] - len(todo)} of {totals[name]} rows already done")
            _run_stream(writer, adapter, lay, todo, dataset, config)
        if isinstance(adapter, CrossEncoder) and pairs is not None:
            todo = writer.pair_todo()
            total = pairs.stop - pairs.row_start
            if len(todo) and len(todo) < total:
                _say(config, f"pairs: resuming, {total - len(todo)} of {total} pairs already done")
            _run_pairs(writer, adapter, [lay for lay in layouts if lay.spec.modality == "pair"], todo, dataset,
                       store, config)
            writer.scores_from_pairs(adapter.score_kind)
            for name in ["pairs", *(lay.spec.name for lay in layouts if lay.spec.modality == "pair")]:
                written[name], totals[name] = len(todo), total
        elif n_shards == 1 and isinstance(adapter, DualEncoder):
            writer.scores_from_pooled(pooled_score_fn(type(adapter), info), adapter.score_kind)
        writer.update_record(complete=True)
    return ExtractResult(Path(config.out), written, totals, time.perf_counter() - t0, True, dict(taken))


def _placed(config: ExtractConfig) -> tuple[ExtractConfig, int, int, Placement | None]:
    """The run's shard (``auto``: from the launcher's environment, and a given ``out`` becomes
    ``<out stem>.shard-K-of-N.h5``; a default one names the shard already; a folder ``out`` holds
    the default name, ``<out>/<model>-<dataset>[.shard-K-of-N].h5``) and its device
    (``auto`` under a launcher: the process's GPU), with the launcher's placement."""
    k, n, placement = resolve_shard(config.shard)
    out = config.out
    if out is not None and out_is_folder(out):  # --out shards/: the default name in that folder
        out = default_cache_path(config.model, config.dataset, f"{k}/{n}", folder=Path(out))
    elif out is not None and str(config.shard).strip().lower() == "auto":
        out = shard_path(out, k, n)
    config = dataclasses.replace(config, out=out, shard=f"{k}/{n}", device=auto_device(config.device, placement))
    return config, k, n, placement


def _dataset_selection(options: Mapping[str, Any]) -> str:
    """JSON of the dataset options that choose items (all but the image folders); "" for none."""
    chosen = {k: _plain(v) for k, v in options.items() if v is not None and k not in ("image_dir", "image_root")}
    return json.dumps(chosen, sort_keys=True) if chosen else ""


def _plain(value: Any) -> Any:
    """JSON-able form of a dataset option (paths as strings, sequences as lists)."""
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def out_is_folder(out: str | os.PathLike[str]) -> bool:
    """Whether ``--out`` names a folder: a name without a file suffix (``--out shards/``), or an
    existing folder whose name does not end in ``.h5`` (a folder named like a cache file is the
    wrong kind of output, refused as before)."""
    path = Path(out)
    if str(out).endswith(("/", os.sep)) or path.suffix == "":
        return True
    return path.is_dir() and path.suffix.lower() not in (".h5", ".hdf5")


def _validate(config: ExtractConfig) -> None:
    assert config.out is not None
    check_positive_int(config.batch_size, "batch_size")
    check_choice(config.pair_plan, "pair_plan", PAIR_PLANS, kind="pair plan")
    if Path(config.out).suffix.lower() not in (".h5", ".hdf5"):
        raise InputError(f"out must be an HDF5 file name ending in .h5 or a folder, got {str(config.out)!r}")


def _say(config: ExtractConfig, msg: str) -> None:
    if config.progress:
        print(msg, file=sys.stderr)


def _run_stream(
    writer: CacheWriter, adapter: Adapter, lay: StreamLayout, todo: np.ndarray,
    dataset: Dataset, config: ExtractConfig,
) -> None:
    """The rows not done of one ``text`` or ``image`` stream, batch by batch (the engine's loop)."""
    spec = lay.spec
    image_rows, text_rows = writer.row_inputs(spec.name)
    if spec.modality == "text":
        texts = dataset.texts()

        def load(batch: np.ndarray) -> list[Any]:
            return [texts[int(t)].text for t in text_rows[batch]]
    else:
        source = ImageSource.for_adapter(adapter, dataset.images())

        def load(batch: np.ndarray) -> list[Any]:
            return source.read(image_rows[batch])

    for got in encode_stream(adapter, spec.name, load, todo, lay.layers, lay.poolings,
                             batch_size=config.batch_size, progress=config.progress):
        writer.write(spec.name, todo[got.index], got.states, got.pooled)


def _run_pairs(
    writer: CacheWriter, adapter: CrossEncoder, layouts: Sequence[StreamLayout], todo: np.ndarray,
    dataset: Dataset, store: Any, config: ExtractConfig,
) -> None:
    """One pass over the pairs not done: scores and every pair stream, batch by batch (the engine)."""
    image_rows, text_rows = writer.pair_inputs()
    layers = {lay.spec.name: lay.layers for lay in layouts} or None
    kept = {lay.spec.name: set(lay.poolings) for lay in layouts}
    token_poolings = [p for p in ("cls", "mean", "max") if any(p in lay.poolings for lay in layouts)]
    source = ImageSource.for_adapter(adapter, dataset.images(), store)
    texts = [t.text for t in dataset.texts()]
    for got in score_pairs(adapter, texts, source, text_rows[todo], image_rows[todo], layers=layers,
                           poolings=token_poolings, batch_size=config.batch_size, progress=config.progress):
        states = {s: {p: v for p, v in d.items() if p in kept[s]} for s, d in got.states.items() if s in kept}
        pooled = {s: v for s, v in got.pooled.items() if "pooled" in kept.get(s, ())}
        writer.write_pairs(todo[got.index], got.scores, states, pooled, got.positions)
