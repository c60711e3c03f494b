"""What ``probe extract`` takes when an input is not given: the papers' setup.

``probe extract --model lxmert`` alone runs LXMERT as the papers ran it, on Winoground, into
``caches/lxmert-winoground.h5``:

* ``checkpoint``: the environment variable ``VLPROBE_<MODEL>_CHECKPOINT``
  (``VLPROBE_UNITER_CHECKPOINT=/models/uniter-base.pt``, ``VLPROBE_BLIP_ITM_CHECKPOINT=...``) if
  set, else the model's reference checkpoint (its adapter's ``reference_checkpoint``: the hub id
  the papers used, ``openai/clip-vit-base-patch32``, ``unc-nlp/lxmert-base-uncased``). UNITER's
  is the official ``uniter-base.pt``, which is not on the hub: without the variable it must be
  given;
* ``data_dir``: ``VLPROBE_<DATASET>`` (``VLPROBE_WINOGROUND=/data/winoground``) if set, else the
  hub (:func:`vlprobe.data.loading.resolve_data_dir`);
* ``variants``: ``variants.jsonl`` in the folder ``VLPROBE_<DATASET>`` names, when the dataset's
  folder came from that variable and has one (the machine's copy of the dataset with its
  variants; a folder given as ``data_dir`` attaches only the variants file given);
* ``out``: ``caches/<model>-<dataset>.h5`` (a shard: ``caches/<model>-<dataset>.shard-K-of-N.h5``);
* ``regions`` (models that read regions): made from the dataset's images by the built-in
  detector (:data:`REFERENCE_DETECTOR`, or ``VLPROBE_DETECTOR_CHECKPOINT``) with the preset of the
  features the model was trained on (its adapter's ``region_preset``: LXMERT ``lxmert-36``,
  UNITER ``uniter-10-100``), into ``<dataset>-<preset>-regions.h5`` beside the cache; a later
  run resumes or reuses that file.

Each default taken is recorded in the cache (``defaults``: field -> what was taken and why),
which ``probe cache info`` shows. A hub id that is not in the local hub cache while offline fails
before any work, in one line saying what to download and where to put it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlprobe.shards import parse_shard, shard_path
from vlprobe.validation import InputError

__all__ = [
    "CACHES_DIR",
    "DETECTOR_ENV",
    "FIXTURE_MARKER",
    "REFERENCE_DETECTOR",
    "RegionPlan",
    "checkpoint_env",
    "default_cache_path",
    "default_checkpoint",
    "default_detector",
    "default_region_path",
    "default_variants",
    "hub_cache_dir",
    "hub_offline",
    "is_hub_id",
    "missing_defaults_message",
]

#: Where ``probe extract`` writes a cache without ``--out`` (relative to the working folder), and
#: where ``probe run NAME`` looks for caches without ``--cache``.
CACHES_DIR = Path("caches")
#: The Visual Genome Faster R-CNN the built-in detector loads by default: the checkpoint of the
#: transformers LXMERT demo (the bottom-up-attention model's weights).
REFERENCE_DETECTOR = "unc-nlp/frcnn-vg-finetuned"
#: The environment variable naming another detector checkpoint (a folder) to use by default.
DETECTOR_ENV = "VLPROBE_DETECTOR_CHECKPOINT"
#: The marker file of a checkpoint vlprobe wrote as a test fixture (tiny random weights; see
#: :mod:`vlprobe.fixtures.staging`); a default checkpoint carrying it is said to be one.
FIXTURE_MARKER = "VLPROBE_FIXTURE.json"
#: The file name of a dataset's variants beside its files, attached when ``variants`` is not given.
VARIANTS_NAME = "variants.jsonl"


def _env_key(name: str) -> str:
    return re.sub(r"[^A-Z0-9]+", "_", name.upper()).strip("_")


def checkpoint_env(model: str) -> str:
    """``VLPROBE_<MODEL>_CHECKPOINT``: the environment variable naming a model's default checkpoint."""
    return f"VLPROBE_{_env_key(model)}_CHECKPOINT"


def hub_cache_dir() -> str:
    """The hub cache folder ``huggingface_hub`` reads (``HF_HUB_CACHE``, else ``HF_HOME/hub``)."""
    from huggingface_hub import constants

    return str(constants.HF_HUB_CACHE)


def hub_offline() -> bool:
    """Whether ``huggingface_hub`` is told not to reach the hub (``HF_HUB_OFFLINE=1``)."""
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def missing_defaults_message(missing: list[str]) -> str:
    """One line naming every input taken by default that is not there (``probe extract`` checks
    them all before any work, so one run lists them all): a single one as it is, several numbered."""
    if len(missing) == 1:
        return missing[0]
    listed = "; ".join(f"({n}) {m}" for n, m in enumerate(missing, 1))
    return f"{len(missing)} inputs taken by default are missing (nothing was done): {listed}"


def is_hub_id(spec: str) -> bool:
    """Whether a checkpoint spec would be looked up on the hub (not an existing local path)."""
    return not Path(spec).expanduser().exists()


def default_checkpoint(model: str, adapter_cls: Any) -> tuple[str, str]:
    """The checkpoint ``probe extract --model MODEL`` loads when none is given, and why.

    Returns
    -------
    spec : str
        A hub id, a folder or (UNITER) a file.
    origin : str
        What it is: ``"VLPROBE_UNITER_CHECKPOINT"`` or ``"reference checkpoint of lxmert"``.

    Raises
    ------
    InputError
        The model has no reference checkpoint, or one that is not on the hub and no environment
        variable names a copy (the message says where to get it and how to pass it).
    """
    env = checkpoint_env(model)
    value = os.environ.get(env, "").strip()
    if value:
        return value, env
    ref = getattr(adapter_cls, "reference_checkpoint", None)
    if ref is None:
        raise InputError(f"checkpoint: {model} has no reference checkpoint; pass --checkpoint DIR_OR_HUB_ID (or set {env})")
    if not ref.hub:
        raise InputError(
            f"checkpoint: {model}'s reference checkpoint is {ref.name}, {ref.source}; download it on a machine with "
            f"network and pass --checkpoint FILE (or set {env}=FILE)"
        )
    return ref.name, f"reference checkpoint of {model}"


def default_detector() -> tuple[str, str]:
    """The detector a region model's automatic regions come from, and why (see :func:`default_checkpoint`)."""
    value = os.environ.get(DETECTOR_ENV, "").strip()
    if value:
        return value, DETECTOR_ENV
    return REFERENCE_DETECTOR, "reference detector"


def default_cache_path(model: str, dataset: str, shard: str = "0/1", folder: Path = CACHES_DIR) -> Path:
    """``caches/<model>-<dataset>.h5``; the K-th of N shards ``caches/<model>-<dataset>.shard-K-of-N.h5``
    (the name ``--shard auto`` gives, which ``probe cache merge --out caches/<model>-<dataset>.h5`` finds)."""
    k, n = parse_shard(shard)
    return shard_path(folder / f"{model}-{dataset}.h5", k, n)


def default_region_path(cache: Path, dataset: str, preset: str, selection: Mapping[str, Any] | None = None) -> Path:
    """``<dataset>-<preset>-regions.h5`` beside the cache; a dataset read with item-choosing options
    (``subsets``, ``limit``) gets a short hash of them in the name, so each selection keeps its own file."""
    stem = f"{dataset}-{preset}-regions"
    chosen = {k: v for k, v in (selection or {}).items() if v is not None and k not in ("image_dir", "image_root")}
    if chosen:
        import hashlib
        import json

        digest = hashlib.sha256(json.dumps(chosen, sort_keys=True, default=str).encode()).hexdigest()[:8]
        stem += f"-{digest}"
    return Path(cache).parent / f"{stem}.h5"


def default_variants(data_dir: Path | None) -> Path | None:
    """``variants.jsonl`` in a local dataset folder, when there is one (None otherwise)."""
    if data_dir is None:
        return None
    p = Path(data_dir) / VARIANTS_NAME
    return p if p.is_file() else None


@dataclass(frozen=True)
class RegionPlan:
    """Regions ``probe extract`` makes itself for a model that reads them (no ``regions`` given)."""

    path: Path
    detector: str
    detector_origin: str
    preset: str
