"""What a registered model is and what it reads: the input checks of ``probe extract`` and ``probe eval``.

A model class declares what it reads for an image (``image_input``: ``pixels``, ``regions`` or
``none``) and the extra keyword arguments its ``load`` takes (``load_options``).
:func:`check_model_inputs` is the one place that turns that declaration into input checks (a
region file required or refused, image folders refused where no pixels are read, undeclared load
options refused); :func:`model_dtype` resolves ``dtype="auto"`` to the dtype the model's reference
code loads it in (its class's ``reference_dtype``); :func:`require_image_files` checks that a model that reads pixels has a file for
every image, :func:`check_region_width` that a region file fits the loaded model, and
:func:`model_kind` says how the pair-scoring engine scores the model's pairs.

Every message names the parameter as the configs do (``regions``, ``image_dir``, a load option's
own name), never a command-line spelling.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from vlprobe.data.items import ImageRef
from vlprobe.extract.models.base import IMAGE_INPUTS, CrossEncoder, DualEncoder
from vlprobe.validation import InputError

__all__ = [
    "AUTO_DTYPE",
    "check_model_inputs",
    "check_region_width",
    "image_input",
    "model_dtype",
    "model_kind",
    "require_image_files",
]

#: The ``dtype`` that stands for the one the model's reference code loads it in.
AUTO_DTYPE = "auto"

#: The dataset loaders' image-folder parameters, with what each takes (named in the messages).
_IMAGE_FOLDERS = {"image_dir": "image_dir (a folder of the images)",
                  "image_root": "image_root (SOURCE=DIR per image source)"}


def model_kind(cls: Any) -> str:
    """``"dual"``, ``"cross"`` or ``"text"`` for a registered model's class.

    Raises
    ------
    InputError
        The object is none of a dual encoder, a cross-encoder or a blind text scorer.
    """
    from vlprobe.extract.models.blind import TextScorer

    if isinstance(cls, type):
        if issubclass(cls, DualEncoder):
            return "dual"
        if issubclass(cls, CrossEncoder):
            return "cross"
        if issubclass(cls, TextScorer):
            return "text"
    name = getattr(cls, "name", None) or getattr(cls, "__name__", repr(cls))
    raise InputError(f"model {name!r} is neither a dual encoder, a cross-encoder nor a text scorer; it cannot score pairs")


def image_input(cls: Any) -> str:
    """What a model class declares it reads for an image: ``pixels``, ``regions`` or ``none``.

    Raises
    ------
    TypeError
        The class declares none of them (a bug of the model, not of the input).
    """
    kind = getattr(cls, "image_input", None)
    if kind not in IMAGE_INPUTS:
        raise TypeError(f"{getattr(cls, '__name__', cls)!r} declares no image_input (one of {', '.join(IMAGE_INPUTS)})")
    return str(kind)


def model_dtype(model: str | type, dtype: str, param: str = "dtype") -> str:
    """The concrete dtype a model runs in: ``dtype`` itself, or for ``"auto"`` the one its
    reference code loads it in (the class's ``reference_dtype``: float32 unless the model
    declares another, as Vera declares bfloat16). What is recorded is this, never ``"auto"``.

    Parameters
    ----------
    model : str or type
        A registered name or the registered class.
    dtype : {"auto", "float32", "float16", "bfloat16"}

    Raises
    ------
    InputError
        An unknown model, or a dtype that is none of those.
    """
    from vlprobe.devices import DTYPES

    if dtype == AUTO_DTYPE:
        from vlprobe.registry import MODELS

        cls: Any = MODELS.get(model) if isinstance(model, str) else model
        dtype = str(getattr(cls, "reference_dtype", "float32"))
        if dtype not in DTYPES:
            raise TypeError(f"{getattr(cls, '__name__', cls)!r} declares reference_dtype {dtype!r}, not one of "
                            f"{', '.join(DTYPES)}")
        return dtype
    if dtype not in DTYPES:
        raise InputError(f"{param} must be {AUTO_DTYPE} or one of {', '.join(DTYPES)}, got {dtype!r}")
    return dtype


def check_model_inputs(
    model: str, cls: Any, *, regions: str | os.PathLike[str] | None = None,
    image_options: Mapping[str, Any] | None = None, load_options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Check a model's inputs against what its class declares; return the load options to pass.

    Parameters
    ----------
    model : str
        The registered name (named in the errors).
    cls : type
        Its class (``MODELS.get(model)``).
    regions : path, optional
        The region-feature file: required when ``cls.image_input == "regions"``, refused otherwise.
    image_options : mapping, optional
        Image folders given to the dataset loader (``image_dir``, ``image_root``; None or empty =
        not given): refused unless the model reads pixels.
    load_options : mapping, optional
        Extra keyword arguments for ``cls.load``; None values are dropped, the others must be in
        ``cls.load_options``.

    Returns
    -------
    dict
        The load options given.

    Raises
    ------
    InputError
        One line naming the parameter and what the model reads instead.
    """
    reads = image_input(cls)
    if reads == "regions" and regions is None:
        raise InputError(
            f"regions: {model} reads precomputed region features; give regions, a region file (.h5) "
            "(see `probe regions import`, or `probe fixtures regions` for random ones)"
        )
    if reads != "regions" and regions is not None:
        what = "reads pixels" if reads == "pixels" else "scores captions only"
        raise InputError(f"regions: {model} {what}, not region features; leave regions unset")
    if reads != "pixels":
        given = [k for k, v in (image_options or {}).items() if v]
        if given:
            what = "reads region features (regions)" if reads == "regions" else "scores captions only"
            raise InputError(f"{given[0]}: {model} {what}, not pixels; leave {given[0]} unset")
    out: dict[str, Any] = {}
    declared = tuple(getattr(cls, "load_options", ()))
    for name, value in (load_options or {}).items():
        if value is None:
            continue
        if name not in declared:
            raise InputError(
                f"{name}: {model} does not take the load option {name} (it takes {', '.join(declared) or 'none'})"
            )
        out[name] = value
    return out


def require_image_files(model: str, images: Sequence[ImageRef], dataset: str = "", takes: Sequence[str] = ()) -> None:
    """A model that reads pixels needs a file for every image (SugarCrepe/VALSE load without them).

    Parameters
    ----------
    model : str
    images : sequence of ImageRef
    dataset : str
        The dataset's name, for the message.
    takes : sequence of str, optional
        The loader's options (``loader_options(dataset)``), for the message: the image-folder
        parameters it takes; without them both are named.

    Raises
    ------
    InputError
        Named after the first image-folder parameter (``data_dir`` where the loader takes none).
    """
    lacking = next((img for img in images if img.path is None), None)
    if lacking is not None:
        known = [k for k in _IMAGE_FOLDERS if k in takes] if takes else list(_IMAGE_FOLDERS)
        give = " or ".join(_IMAGE_FOLDERS[k] for k in known) or "a data_dir with the images"
        where = f"{dataset} image" if dataset else "image"
        raise InputError(
            f"{known[0] if known else 'data_dir'}: {model} reads pixels and needs images, but {where} "
            f"{lacking.name!r} ({lacking.id}) has no file; give {give}"
        )


def check_region_width(model: str, adapter: Any, store: Any) -> None:
    """Refuse a region store whose feature width is not the one the loaded model reads."""
    if store.feature_dim != adapter.feature_dim:
        raise InputError(
            f"regions: {store.path.name} holds {store.feature_dim}-d features; {model} reads "
            f"{adapter.feature_dim}-d region features"
        )
