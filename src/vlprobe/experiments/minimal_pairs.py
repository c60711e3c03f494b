"""What the experiments that run a model on each benchmark's minimal pairs share (``patch``,
``erasure``): the benchmarks they read, the dual-encoder check and the items with two captions.

Models: dual encoders and cross-encoders whose adapters name their layer sites. A minimal pair is an item's two captions: Winoground caption 0 / 1 (two images), SugarCrepe's
positive / negative and VALSE's caption / foil (one image).
"""

from __future__ import annotations

from typing import Any

from vlprobe.data.loading import load_dataset
from vlprobe.validation import InputError, check_choice, check_positive_int, check_seed

__all__ = ["PAIR_DATASETS", "check_run_options", "editable_streams", "pair_items", "pair_model_class"]

PAIR_DATASETS = ("winoground", "sugarcrepe", "valse")


def check_run_options(config: Any) -> None:
    """The options every such experiment has: ``dataset``, ``batch_size``, ``limit``, ``bootstrap``,
    ``bootstrap_seed``."""
    check_choice(config.dataset, "dataset", PAIR_DATASETS)
    check_positive_int(config.batch_size, "batch_size")
    check_positive_int(config.bootstrap, "bootstrap")
    check_seed(config.bootstrap_seed, "bootstrap_seed")
    if config.limit is not None:
        check_positive_int(config.limit, "limit")


def pair_model_class(model: str, experiment: str) -> Any:
    """The registered adapter class of ``model``; InputError unless it is a dual or cross-encoder."""
    from vlprobe.extract.models.base import CrossEncoder, DualEncoder
    from vlprobe.registry import MODELS

    cls = MODELS.get(model)
    if not (isinstance(cls, type) and issubclass(cls, (DualEncoder, CrossEncoder))):
        raise InputError(f"model: {experiment} runs dual encoders and cross-encoders; {model!r} is neither")
    return cls


def editable_streams(adapter: Any) -> list[str]:
    """The adapter's streams whose states it can edit (``layer_sites``), in its order; the first is
    the text side (CLIP ``text``, LXMERT ``lang``, UNITER ``text``, BLIP-ITM ``pair``)."""
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
