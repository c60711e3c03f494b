"""The one way to load a registered dataset by name, with its loader's options checked.

``probe extract``, ``probe eval``, ``probe augment`` and the region fixtures all load datasets
through :func:`load_dataset`: the loader is looked up in the dataset registry, the options
(SugarCrepe ``image_dir``, VALSE ``image_root``, ``subsets``, ``limit``, ``all_items``,
Winoground ``tags``) are checked against its signature, an item list (``items``: a JSONL of
``{"item": id}`` lines, as ``probe refine`` writes) keeps only those items, and a variants file
is attached.

A dataset's folder not given comes from the environment variable ``VLPROBE_<DATASET>``
(``VLPROBE_WINOGROUND=/data/winoground``, ``VLPROBE_SUGARCREPE``, ``VLPROBE_VALSE``) when it is
set (:func:`resolve_data_dir`); without either, a loader that can reads the hub (Winoground).
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from vlprobe.data.items import Dataset
from vlprobe.data.source_files import iter_json_lines
from vlprobe.data.variants import attach_variants
from vlprobe.registry import DATASETS
from vlprobe.validation import InputError, check_file

__all__ = [
    "check_dataset_options",
    "data_dir_env",
    "load_dataset",
    "loader_options",
    "read_item_ids",
    "resolve_data_dir",
    "select_items",
]


def data_dir_env(name: str) -> str:
    """``VLPROBE_<DATASET>``: the environment variable naming a dataset's local folder."""
    import re

    return "VLPROBE_" + re.sub(r"[^A-Z0-9]+", "_", name.upper()).strip("_")


def resolve_data_dir(name: str, data_dir: str | os.PathLike[str] | None) -> tuple[Path | None, str | None]:
    """The folder a dataset is read from, and where it came from.

    Returns
    -------
    data_dir : Path or None
        ``data_dir`` if given, else the folder ``VLPROBE_<DATASET>`` names, else None (the hub,
        for a loader that reads it).
    origin : str or None
        The environment variable's name when the folder came from it, else None.

    Raises
    ------
    InputError
        The environment variable names something that is not a folder.
    """
    if data_dir is not None:
        return Path(data_dir), None
    env = data_dir_env(name)
    value = os.environ.get(env, "").strip()
    if not value:
        return None, None
    path = Path(value).expanduser()
    if not path.is_dir():
        raise InputError(f"data_dir: {env}={value!r} is not a folder (expected a local copy of {name})")
    return path, env


def loader_options(name: str) -> tuple[str, ...]:
    """Keyword options of a registered dataset's loader (``data_dir`` aside), in signature order."""
    params = inspect.signature(DATASETS.get(name)).parameters
    return tuple(
        p for p, par in params.items()
        if p != "data_dir" and par.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    )


def check_dataset_options(name: str, options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The options (None values dropped) a registered dataset's loader accepts; InputError naming the first it does not.

    ``data_dir`` is not an option (it has its own parameter).
    """
    loader = DATASETS.get(name)
    opts = {k: v for k, v in (options or {}).items() if v is not None}
    params = inspect.signature(loader).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return opts
    takes = loader_options(name)
    for key in opts:
        if key == "data_dir" or key not in takes:
            shown = ", ".join(f"--{t.replace('_', '-')}" for t in takes) or "no options"
            raise InputError(f"{key}: dataset {name!r} does not take --{key.replace('_', '-')} (it takes {shown})")
    return opts


def read_item_ids(path: str | os.PathLike[str], *, param: str = "items") -> list[str]:
    """Item ids from a JSONL file of ``{"item": id}`` lines (what ``probe refine`` writes)."""
    p = check_file(path, param)
    ids: list[str] = []
    for _, where, obj in iter_json_lines(p, param):
        if not isinstance(obj, dict) or "item" not in obj:
            raise InputError(f'{param}: {where} is not {{"item": "<id>"}}')
        ids.append(str(obj["item"]))
    if len(set(ids)) != len(ids):
        raise InputError(f"{param}: {p.name} repeats item ids")
    return ids


def select_items(dataset: Dataset, ids: Sequence[str], *, param: str = "items") -> Dataset:
    """The dataset with only the items ``ids`` names, in the dataset's order.

    Raises
    ------
    InputError
        An id is not in the dataset (naming it and how many are missing) or none is given.
    """
    wanted = set(ids)
    if not wanted:
        raise InputError(f"{param}: the item list is empty")
    kept = tuple(it for it in dataset.items if it.id in wanted)
    if len(kept) != len(wanted):
        missing = sorted(wanted - {it.id for it in kept})
        raise InputError(
            f"{param}: {len(missing)} listed item(s) are not in the loaded {dataset.name} data, e.g. {missing[0]!r}"
        )
    return dataclasses.replace(dataset, items=kept)


def load_dataset(
    name: str, data_dir: Path | None = None, tags: Path | None = None, variants: Path | None = None,
    options: Mapping[str, Any] | None = None, items: Path | None = None,
) -> Dataset:
    """Load a registered dataset (with its loader's ``options``) and attach a variants file.

    Parameters
    ----------
    name : str
        A registered dataset (``winoground``, ``sugarcrepe``, ``valse``).
    data_dir : path, optional
        The folder of its files; default the folder ``VLPROBE_<DATASET>`` names
        (:func:`resolve_data_dir`); required by loaders that have no default.
    tags : path, optional
        The ``tags`` option (Winoground's tag file).
    variants : path, optional
        A variants file to attach (:func:`vlprobe.data.variants.attach_variants`).
    options : mapping, optional
        Further keyword options of the loader; None values are dropped.
    items : path, optional
        Keep only the items listed in this JSONL of ``{"item": id}`` lines (:func:`read_item_ids`).
    """
    loader = DATASETS.get(name)
    kwargs = check_dataset_options(name, {**(options or {}), **({} if tags is None else {"tags": tags})})
    data_dir, _ = resolve_data_dir(name, data_dir)
    data_param = inspect.signature(loader).parameters.get("data_dir")
    if data_dir is None and data_param is not None and data_param.default is inspect.Parameter.empty:
        raise InputError(
            f"data_dir: dataset {name!r} needs --data-dir (the folder of its files), or {data_dir_env(name)} set to it"
        )
    dataset = loader(data_dir=data_dir, **kwargs)
    if items is not None:
        dataset = select_items(dataset, read_item_ids(items))
    if variants is not None:
        dataset = attach_variants(dataset, variants)
    return dataset
