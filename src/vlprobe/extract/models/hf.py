"""Loading Hugging Face checkpoints: resolve ``--checkpoint`` (local directory or hub id),
fingerprint it, read its config, and keep transformers quiet while it loads.

A directory is used as is. Anything else is a hub id, fetched through ``huggingface_hub``
into its usual cache. Offline (``HF_HUB_OFFLINE=1``) a hub id that is not cached fails at once
with a message that says how to provide the model, instead of retrying for half a minute.

Image processors are loaded with transformers' PIL backend (:data:`IMAGE_BACKEND`), whichever
backends the machine has: left to choose, ``AutoImageProcessor`` takes the torchvision backend
where torchvision imports and the PIL one elsewhere, and their resizes differ numerically, so one
command would compute other states on another machine. The papers' CLIP, SigLIP and BLIP code
preprocessed with PIL. The backend is recorded in each cache (``image_backend``, compared on
resume).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlprobe.provenance import sha256_file
from vlprobe.validation import InputError

__all__ = [
    "DEVICE_MAPS",
    "IMAGE_BACKEND",
    "LoadedModel",
    "ResolvedCheckpoint",
    "check_device_map",
    "fingerprint_dir",
    "from_pretrained_with_info",
    "image_backend_of",
    "load_hf",
    "load_hf_config",
    "load_hf_model",
    "load_hf_tokenizer",
    "load_image_processor",
    "native_stdout_dropped",
    "quiet_transformers",
    "reading_weights",
    "resolve_checkpoint",
]


#: The transformers image-processor backend pixel models are loaded with: ``"pil"`` (PIL resizes,
#: as the reference CLIP, SigLIP and BLIP preprocessing did), never ``"torchvision"``.
IMAGE_BACKEND = "pil"


@dataclass(frozen=True)
class ResolvedCheckpoint:
    """A checkpoint ready for ``from_pretrained``.

    Attributes
    ----------
    spec : str
        What the user passed.
    path : Path
        Local directory with the files.
    fingerprint : str
        ``sha256:<hex>`` over the directory's files, or ``hub:<id>@<commit>``.
    """

    spec: str
    path: Path
    fingerprint: str


def resolve_checkpoint(
    spec: str, *, param: str = "checkpoint", allow_patterns: list[str] | None = None, default_of: str | None = None,
    how: str | None = None,
) -> ResolvedCheckpoint:
    """Find the files of a checkpoint given as a directory or a hub id.

    ``default_of`` says why ``spec`` was taken when the user did not give it (``"reference
    checkpoint of lxmert"``); the messages then say so. ``how``: how else to give it, where that
    is not ``--<param> DIR`` (a command without such an option).
    """
    if not spec or not spec.strip():
        raise InputError(f"{param} must be a local directory or a hub id, got {spec!r}")
    p = Path(spec).expanduser()
    if p.is_dir():
        return ResolvedCheckpoint(spec, p.resolve(), "sha256:" + fingerprint_dir(p))
    looks_local = spec.startswith((".", "/", "~")) or os.sep + os.sep in spec or spec.count("/") > 1
    if p.exists() or looks_local:
        raise InputError(f"{param}: {spec!r} is not a directory (expected a checkpoint folder or a hub id)")
    return _resolve_hub(spec, param, allow_patterns, default_of, how)


def fingerprint_dir(path: Path) -> str:
    """sha256 over (name, content hash) of every file in ``path`` (recursively, sorted)."""
    h = hashlib.sha256()
    for f in sorted(q for q in path.rglob("*") if q.is_file() and not q.name.startswith(".")):
        h.update(f"{f.relative_to(path)}:{sha256_file(f)}\n".encode())
    return h.hexdigest()


def _resolve_hub(
    repo_id: str, param: str, allow_patterns: list[str] | None, default_of: str | None = None,
    other: str | None = None,
) -> ResolvedCheckpoint:
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
    )

    folder = "models--" + repo_id.replace("/", "--")
    how = (
        f"download it on a machine with network (hf download {repo_id}) and copy its hub-cache folder {folder} "
        f"into {constants.HF_HUB_CACHE} (HF_HUB_CACHE), or "
        + (other or f"save it with save_pretrained(DIR) and pass --{param} DIR")
    )
    if default_of:
        param = f"{param} (not given: the {default_of})"
    try:
        local = snapshot_download(repo_id, allow_patterns=allow_patterns)
    except HFValidationError:
        raise InputError(f"{param}: {repo_id!r} is neither a directory nor a valid hub id") from None
    except LocalEntryNotFoundError:
        raise InputError(
            f"{param}: {repo_id!r} is not in the local hub cache and the hub is unreachable "
            f"or offline (HF_HUB_OFFLINE=1); {how}"
        ) from None
    except GatedRepoError:
        raise InputError(f"{param}: {repo_id!r} is gated; accept its licence and set HF_TOKEN") from None
    except RepositoryNotFoundError:
        raise InputError(f"{param}: no hub repository {repo_id!r} (nor a local directory)") from None
    except OSError as exc:
        raise InputError(f"{param}: could not fetch {repo_id!r} ({exc}); {how}") from None
    path = Path(local)
    return ResolvedCheckpoint(repo_id, path, f"hub:{repo_id}@{path.name}")


def load_hf_config(path: Any, checkpoint: str, model_type: str | tuple[str, ...]) -> Any:
    """A checkpoint's transformers config, refused unless its ``model_type`` is ``model_type``.

    Parameters
    ----------
    path : path
        The resolved checkpoint folder.
    checkpoint : str
        What the user passed (named in the errors).
    model_type : str or tuple of str
        E.g. ``"clip"``, ``"lxmert"``; a tuple: any of them.
    """
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(path)
    except (OSError, ValueError) as exc:
        raise InputError(f"checkpoint: {checkpoint!r} has no readable config.json ({exc})") from None
    types = (model_type,) if isinstance(model_type, str) else tuple(model_type)
    if config.model_type not in types:
        expected = " or ".join(repr(t) for t in types)
        raise InputError(f"checkpoint: {checkpoint!r} is a {config.model_type!r} model, expected {expected}")
    return config


@dataclass(frozen=True)
class LoadedModel:
    """What :func:`load_hf` returns: the model (eval mode, on ``device``), its tokenizer, its image
    processor (None unless asked for), the resolved checkpoint, device and dtype."""

    model: Any
    tokenizer: Any
    processor: Any
    checkpoint: ResolvedCheckpoint
    device: Any
    dtype: Any


def load_hf(
    checkpoint: str, model_type: str | tuple[str, ...], model_cls: Any, *, device: str, dtype: str,
    allow_patterns: list[str], needed: tuple[str, ...] = (), image_processor: bool = False,
    check: Callable[[Any], None] | None = None, device_map: str | None = None,
) -> LoadedModel:
    """Load a transformers model, its tokenizer and (optionally) image processor from a directory
    or hub id, as every Hugging Face adapter does.

    Parameters
    ----------
    checkpoint : str
        Directory or hub id (offline: a hub id that is not cached fails fast).
    model_type : str
        The ``model_type`` its config must have (another is refused).
    model_cls : type
        The transformers class to load (``CLIPModel``, ...).
    device, dtype : str
        As the CLI takes them (``auto``/``cpu``/``cuda:N``; ``float32``/``float16``).
    allow_patterns : list of str
        Files fetched from the hub.
    needed : tuple of str
        Weight-name prefixes that must be in the checkpoint (see :func:`load_hf_model`).
    image_processor : bool
        Also load ``AutoImageProcessor`` (models that read pixels).
    check : callable, optional
        Called with the config before the weights load; raises InputError for a config the
        adapter cannot use.
    device_map : str, optional
        Place the model with accelerate (``"auto"``: over every visible GPU, then the CPU) instead
        of on ``device`` (which must then be ``"auto"``); the adapter's device is then where the
        input embeddings are.
    """
    from vlprobe.devices import resolve_device, resolve_dtype

    dev, torch_dtype = resolve_device(device), resolve_dtype(dtype)
    if device_map is not None:
        check_device_map(device_map, device)
    ckpt = resolve_checkpoint(checkpoint, allow_patterns=allow_patterns)
    with quiet_transformers(), reading_weights(checkpoint):
        config = load_hf_config(ckpt.path, checkpoint, model_type)
        if check is not None:
            check(config)
        if device_map is None:
            model = load_hf_model(model_cls, ckpt.path, checkpoint, torch_dtype, needed).to(dev)
        else:
            model = load_hf_model(model_cls, ckpt.path, checkpoint, torch_dtype, needed, device_map=device_map)
            dev = model.get_input_embeddings().weight.device
        tokenizer = load_hf_tokenizer(ckpt.path, checkpoint)
        processor = load_image_processor(ckpt.path, checkpoint) if image_processor else None
    return LoadedModel(model, tokenizer, processor, ckpt, dev, torch_dtype)


def _backend_request(backend: str) -> dict[str, Any]:
    """The ``AutoImageProcessor.from_pretrained`` keywords that ask for ``backend``."""
    import importlib.util

    if importlib.util.find_spec("transformers.image_processing_backends") is not None:
        return {"backend": backend}  # transformers with named backends (PilBackend, TorchvisionBackend)
    return {"use_fast": backend != "pil"}  # before them: the slow processors are the PIL ones


def image_backend_of(processor: Any) -> str:
    """``"pil"`` or ``"torchvision"``: the backend a loaded transformers image processor runs on
    (its ``backend``; before transformers named backends, ``...Fast`` classes ran torchvision)."""
    backend = getattr(processor, "backend", None)
    if isinstance(backend, str):
        return backend
    return "torchvision" if type(processor).__name__.endswith("Fast") else "pil"


def load_image_processor(path: Any, checkpoint: str, backend: str = IMAGE_BACKEND) -> Any:
    """``AutoImageProcessor.from_pretrained(path)`` on ``backend`` explicitly, never the one
    transformers would pick for this machine.

    Raises
    ------
    InputError
        The checkpoint has no readable image processor, or none on ``backend`` (the message names
        the processor and the backend it got).
    """
    from transformers import AutoImageProcessor

    try:
        processor = AutoImageProcessor.from_pretrained(path, **_backend_request(backend))
    except (OSError, ValueError) as exc:
        raise InputError(f"checkpoint: {checkpoint!r} has no readable image processor ({exc})") from None
    got = image_backend_of(processor)
    if got != backend:
        raise InputError(
            f"checkpoint: {checkpoint!r}'s image processor {type(processor).__name__} runs on the {got!r} "
            f"backend, not {backend!r}; vlprobe preprocesses pixels with the {backend!r} processors the "
            "reference code used"
        )
    return processor


def from_pretrained_with_info(
    model_cls: Any, path: Any, *, checkpoint: str | None = None, **kwargs: Any,
) -> tuple[Any, dict[str, Any]]:
    """``model_cls.from_pretrained(path, output_loading_info=True, **kwargs)``: the model and its
    loading info (``missing_keys``, ``unexpected_keys``, ...).

    A config whose sizes do not fit the weights is refused in one line naming the first weight
    that differs (:mod:`vlprobe.extract.models.fit`; ``checkpoint``, default ``path``, is what
    the message names), before the model is built where the weight files' headers tell, else
    from transformers' mismatched keys, instead of transformers' load report and traceback.

    transformers annotates ``from_pretrained`` as returning the model alone, which it does only
    without ``output_loading_info``; this is the one place that unpacks the pair.
    """
    from vlprobe.extract.models.fit import check_hf_fits, first_mismatch, refuse_mismatch

    name = str(path) if checkpoint is None else checkpoint
    check_hf_fits(model_cls, path, name)
    model, info = model_cls.from_pretrained(path, output_loading_info=True, ignore_mismatched_sizes=True, **kwargs)
    mismatched = {str(k): (tuple(got), tuple(want)) for k, got, want, *_ in info.get("mismatched_keys") or ()}
    if mismatched:
        order = [k for k in model.state_dict() if k in mismatched] + sorted(mismatched)
        found = first_mismatch({k: w for k, (_, w) in mismatched.items()}, {k: g for k, (g, _) in mismatched.items()},
                               order)
        if found is not None:
            raise refuse_mismatch(name, found, config=model.config)
    return model, info


#: What ``device_map`` takes (accelerate's placements).
DEVICE_MAPS: tuple[str, ...] = ("auto", "balanced", "balanced_low_0", "sequential")


def check_device_map(device_map: str, device: str = "auto") -> str:
    """``device_map`` checked: one of :data:`DEVICE_MAPS`, with accelerate importable and ``device``
    left at ``"auto"``.

    Raises
    ------
    InputError
        One line: another value, accelerate missing (how to install it), or a device given too.
    """
    import importlib.util

    if device_map not in DEVICE_MAPS:
        raise InputError(f"device_map must be one of {', '.join(DEVICE_MAPS)}, got {device_map!r}")
    if importlib.util.find_spec("accelerate") is None:
        raise InputError(
            f"device_map: {device_map!r} places the model with the accelerate package, which is not installed "
            "(pip install 'vlprobe[accelerate]')"
        )
    if (device or "auto").strip().lower() != "auto":
        raise InputError(f"device: device_map={device_map!r} places the model itself; leave device at auto, got {device!r}")
    return device_map


def load_hf_model(
    model_cls: Any, path: Any, checkpoint: str, dtype: Any, needed: tuple[str, ...], device_map: str | None = None,
) -> Any:
    """``model_cls.from_pretrained(path)``, refused when weights under the ``needed`` prefixes are missing.

    A checkpoint of the right ``model_type`` but another head (BLIP's captioner for its retrieval
    model, LXMERT's base model for its pretraining model) would otherwise load with random heads.

    Parameters
    ----------
    model_cls : type
        A transformers model class.
    path : path
        The resolved checkpoint folder.
    checkpoint : str
        What the user passed (named in the error).
    dtype : torch.dtype
    needed : tuple of str
        Weight-name prefixes the adapter reads.
    """
    extra = {} if device_map is None else {"device_map": device_map}
    model, info = from_pretrained_with_info(model_cls, path, checkpoint=checkpoint, dtype=dtype, **extra)
    missing = sorted(k for k in info["missing_keys"] if k.startswith(needed))
    if missing:
        raise InputError(
            f"checkpoint: {checkpoint!r} lacks {len(missing)} weights {model_cls.__name__} needs "
            f"(e.g. {missing[0]}); expected a {model_cls.__name__} checkpoint"
        )
    return model.eval()


def load_hf_tokenizer(path: Any, checkpoint: str) -> Any:
    """``AutoTokenizer.from_pretrained(path)``; a folder without a readable tokenizer is an input error.

    The native ``tokenizers`` library prints ``Ignored unknown kwarg option __type`` on the process's
    standard output for each special token of a ``tokenizer_config.json`` written in the 2021-2022
    form (AddedToken dicts with ``"__type"``, as ``openai/clip-vit-base-patch32`` holds it); that
    output is dropped (:func:`native_stdout_dropped`), so that a command's stdout stays its own.
    """
    from transformers import AutoTokenizer

    try:
        with native_stdout_dropped():
            return AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as exc:
        raise InputError(f"checkpoint: {checkpoint!r} has no readable tokenizer ({exc})") from None


@contextlib.contextmanager
def native_stdout_dropped() -> Iterator[None]:
    """Drop what native code writes to file descriptor 1 meanwhile (Python's own ``print`` goes
    through ``sys.stdout`` and is flushed first); a no-op where descriptor 1 cannot be redirected."""
    import sys

    try:
        sys.stdout.flush()
        saved = os.dup(1)
    except (OSError, ValueError, AttributeError):
        yield
        return
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


@contextlib.contextmanager
def reading_weights(checkpoint: str) -> Iterator[None]:
    """Weight files that cannot be read (a truncated or empty ``model.safetensors``; a
    ``pytorch_model.bin`` whose pickle holds more than tensors, which torch refuses to load) as
    one :class:`InputError` naming ``checkpoint``."""
    import pickle

    from safetensors import SafetensorError

    try:
        yield
    except SafetensorError as exc:
        raise InputError(f"checkpoint: {checkpoint!r}: model.safetensors is damaged or truncated ({exc})") from None
    except pickle.UnpicklingError as exc:
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        why = next((ln for ln in lines if "GLOBAL" in ln or "global" in ln), lines[-1] if lines else "")
        raise InputError(
            f"checkpoint: {checkpoint!r}: refusing to load pytorch_model.bin: it holds objects other than "
            f"tensors, which could run code ({why.rstrip('.')}); convert it to model.safetensors where it is trusted"
        ) from None
    except EOFError:
        raise InputError(f"checkpoint: {checkpoint!r}: a weight file ends early (truncated)") from None


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """Silence transformers' warnings and progress bars (e.g. the PIL image-processor fallback)."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()
