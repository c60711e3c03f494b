"""What the experiments that run a model on each benchmark's minimal pairs share (``patch``,
``erasure``): the benchmarks they read, the dual-encoder check and the items with two captions.

Models: dual encoders and cross-encoders whose adapters name their layer sites, generative models
included (their language model's layers, over the joint sequence). A minimal pair is an item's two
captions: Winoground caption 0 / 1 (two images), SugarCrepe's positive / negative and VALSE's
caption / foil (one image).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from vlprobe.data.loading import load_dataset
from vlprobe.runs.declare import REQUIRED
from vlprobe.runs.option_groups import DatasetOption, ItemOptions, ModelOptions, ResultsOptions
from vlprobe.validation import InputError

__all__ = ["PAIR_DATASETS", "PairModel", "PairModelOptions", "editable_streams", "load_pair_model", "pair_items",
           "pair_label", "pair_model_class", "pair_regions", "text_side_streams", "tower_scores"]

PAIR_DATASETS = ("winoground", "sugarcrepe", "valse")


@dataclass(frozen=True, kw_only=True)
class PairModelOptions(ModelOptions, ItemOptions):
    """A model run on a benchmark's minimal pairs: the model-loading group (the model and its
    checkpoint required, loaded as ``probe extract`` loads it) and the benchmark's items."""

    model: str = ModelOptions.redeclare(
        "model", help="Registered model (see `probe ls models`) whose states can be edited: clip, siglip, lxmert, "
                      "uniter, blip-itm, llava, qwen2-vl.",
    )
    checkpoint: str = ModelOptions.redeclare("checkpoint", REQUIRED)
    dtype: str = ModelOptions.redeclare("dtype", choices=("auto", "float32", "float16"))
    dataset: str = DatasetOption.redeclare("dataset", choices=PAIR_DATASETS, help="The benchmark.")
    limit: int | None = ItemOptions.redeclare("limit", help="At most N items (SugarCrepe / VALSE: per subset).")
    name: str | None = ResultsOptions.redeclare(
        "name", help="Results label: names the run and its files (default: the model).",
    )


def pair_model_class(model: str, experiment: str) -> Any:
    """The registered adapter class of ``model``; InputError unless it is a dual or cross-encoder
    (generative models are cross-encoders over their joint sequence)."""
    from vlprobe.extract.models.base import CrossEncoder, DualEncoder
    from vlprobe.registry import MODELS

    cls = MODELS.get(model)
    if not (isinstance(cls, type) and issubclass(cls, (DualEncoder, CrossEncoder))):
        raise InputError(f"model: {experiment} runs dual encoders and cross-encoders; {model!r} is neither")
    return cls


def editable_streams(adapter: Any) -> list[str]:
    """The adapter's streams whose states it can edit (``layer_sites``), in its order; the first is
    the text side (CLIP/SigLIP ``text``, LXMERT ``lang``, UNITER ``text``, BLIP-ITM ``pair``, or
    ``text`` with ``score_head=itc``)."""
    out = []
    for s in adapter.streams:
        try:
            adapter.layer_sites(s)
        except InputError:
            continue
        out.append(s)
    if not out:
        raise InputError(f"model: {adapter.name} does not support editing its states (no layer sites)")
    return out


def text_side_streams(adapter: Any, editable: list[str]) -> list[str]:
    """The editable streams on a minimal pair's caption side (patching swaps captions there, the
    image fixed): the first editable stream, or a generative model's ``caption`` and ``joint``."""
    declared = getattr(adapter, "text_side_streams", None)
    return [s for s in editable if s in declared] if declared else editable[:1]


def tower_scores(adapter: Any, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The model's score of pooled embeddings edited tower by tower, row-wise: (..., D) and (..., D)
    (broadcast; either may be the image side) -> (...), float64.

    A dual encoder's score as a function of the cosine (:meth:`DualEncoder.scores_from_cosine`:
    CLIP's cosine, SigLIP's sigmoid of it); a cross-encoder scoring its towers' cosine (BLIP-ITM
    with ``score_head=itc``) the cosine.
    """
    from vlprobe.extract.models.base import DualEncoder

    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    cos = ((a / np.linalg.norm(a, axis=-1, keepdims=True)) * (b / np.linalg.norm(b, axis=-1, keepdims=True))).sum(-1)
    if isinstance(adapter, DualEncoder):
        return np.asarray(adapter.scores_from_cosine(cos, adapter.describe()), dtype=np.float64)
    if adapter.score_kind == "cosine":
        return cos
    raise InputError(f"model: {adapter.name} scores pairs with a pair pass ({adapter.score_kind}), not from its towers")


def pair_items(config: Any, minimum: int = 1) -> tuple[Any, list[Any]]:
    """The dataset of a config (``dataset``, ``data_dir``, ``subsets``, ``limit``, ``image_dir``,
    ``image_root``) and its items with two captions (at most ``limit`` of Winoground's)."""
    options = {} if config.dataset == "winoground" else {
        "subsets": config.subsets, "limit": config.limit, "image_dir": config.image_dir,
        "image_root": list(config.image_root) or None}
    dataset = load_dataset(config.dataset, config.data_dir, options=options)
    items = [it for it in dataset.items if len(it.captions) >= 2]
    if config.dataset == "winoground" and config.limit is not None:
        items = items[: config.limit]
    if len(items) < minimum:
        raise InputError(f"{config.dataset}: needs at least {minimum} item(s) with two captions, got {len(items)}")
    return dataset, items


class PairModel(NamedTuple):
    """What :func:`load_pair_model` loaded: the adapter, whether it is a cross-encoder, the run's
    label, the dataset's two-caption items, and the manifest's ``inputs`` record."""

    adapter: Any
    #: Whether the edits run through the cross-encoder's pair pass (else tower by tower, as a
    #: dual encoder: also BLIP-ITM scoring with its ITC head).
    cross: bool
    label: str
    items: list[Any]
    inputs: dict[str, Any]


def pair_label(config: Any) -> str:
    """The results label of a run on a model: ``config.name``, else the model's name."""
    return str(config.name or config.model)


def load_pair_model(config: Any, experiment: Any, minimum: int = 1) -> PairModel:
    """Check the model's inputs, load the items and the model.

    ``config`` is a :class:`PairModelOptions` config; ``experiment`` its declared Experiment
    (whose :meth:`~vlprobe.runs.declare.Experiment.run` claimed the results slot).
    """
    from vlprobe.extract.model_inputs import check_model_inputs
    from vlprobe.extract.models.base import CrossEncoder

    cls = pair_model_class(config.model, experiment.name)
    load_options = check_model_inputs(
        config.model, cls, regions=config.regions,
        image_options={"image_dir": config.image_dir, "image_root": config.image_root},
        load_options=config.load_options())
    label = pair_label(config)
    dataset, items = pair_items(config, minimum=minimum)
    adapter = cls.load(config.checkpoint, device=config.device, dtype=config.dtype, **load_options)
    inputs: dict[str, Any] = {
        "dataset": {"name": dataset.name, "fingerprint": dataset.fingerprint, "source": dataset.source},
        "checkpoint": {"spec": config.checkpoint, "fingerprint": adapter.checkpoint.fingerprint},
    }
    inputs.update(config.side_inputs(adapter.input_fingerprints()))
    if adapter.model_options():
        inputs["model_options"] = adapter.model_options()
    cross = isinstance(adapter, CrossEncoder) and adapter.streams[editable_streams(adapter)[0]].modality == "pair"
    return PairModel(adapter, cross, label, items, inputs)


@contextmanager
def pair_regions(config: Any, adapter: Any, items: list[Any], n_img: int, inputs: dict[str, Any]) -> Iterator[Any]:
    """The open region file of ``config.regions``, checked to hold the first ``n_img`` images of
    every item and to fit the model; recorded in ``inputs["regions"]``."""
    from vlprobe.extract.model_inputs import check_region_width
    from vlprobe.extract.regions.store import RegionStore

    with RegionStore(config.regions) as store:
        store.require([it.images[j].name for it in items for j in range(n_img)], "the")
        check_region_width(config.model, adapter, store)
        inputs["regions"] = {"path": str(config.regions), "fingerprint": store.fingerprint}
        yield store
