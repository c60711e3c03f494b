"""Finding and reading OpenCLIP checkpoints.

``checkpoint`` is one of:

* a folder as OpenCLIP's Hugging Face hub repositories lay it out: ``open_clip_model.safetensors``
  or ``open_clip_pytorch_model.bin``, with ``open_clip_config.json`` (``model_cfg`` and
  ``preprocess_cfg``) and usually the tokenizer files;
* a weights file: a ``.safetensors`` file, or a torch-saved state dict (``.pt``, ``.pth``,
  ``.bin``, ``.ckpt``) as OpenCLIP's training writes them: the dict itself, or under
  ``state_dict`` (with the epoch, name and optimizer beside it), its keys with or without the
  ``module.`` prefix of distributed training (NegCLIP's checkpoint is such a file); an
  ``open_clip_config.json`` beside it is read when no architecture is given;
* OpenAI's TorchScript archives (``RN50.pt``, ``ViT-B-32.pt``), whose state dict is taken from
  ``torch.jit.load`` (their extra ``input_resolution``, ``context_length`` and ``vocab_size``
  entries are dropped);
* a hub id (``laion/CLIP-ViT-H-14-laion2B-s32B-b79K``, optionally prefixed ``hf-hub:``), read from
  the local hub cache when offline.

Pickled files are read with ``torch.load(weights_only=True)``: tensors and plain containers only.
"""

from __future__ import annotations

import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from vlprobe.extract.models.hf import reading_weights, resolve_checkpoint
from vlprobe.provenance import sha256_file
from vlprobe.validation import InputError

__all__ = [
    "CONFIG_FILE",
    "WEIGHT_FILES",
    "CheckpointFiles",
    "check_finite",
    "check_sizes",
    "find_checkpoint",
    "fit_state_dict",
    "hf_proj_type",
    "read_state_dict",
    "state_dict_family",
]

#: The weight files of an OpenCLIP hub folder, in the order they are looked for.
WEIGHT_FILES: tuple[str, ...] = ("open_clip_model.safetensors", "open_clip_pytorch_model.bin")
#: The model and preprocessing config of an OpenCLIP hub folder.
CONFIG_FILE = "open_clip_config.json"
_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt")
_ALLOW = [*WEIGHT_FILES, CONFIG_FILE, "*.txt", "tokenizer*.json", "vocab.json", "special_tokens_map.json",
          "merges.txt", "*.model"]
# Entries of OpenAI's state dicts (and buffers of some savers) that are no weights.
_NOT_WEIGHTS = ("input_resolution", "context_length", "vocab_size", "attn_mask")


@dataclass(frozen=True)
class CheckpointFiles:
    """A resolved OpenCLIP checkpoint.

    Attributes
    ----------
    spec : str
        What the user passed.
    weights : Path
        The weights file.
    folder : Path
        Where the side files are looked for (the folder, or the file's folder).
    config : Path or None
        ``open_clip_config.json`` when there is one.
    fingerprint : str
        ``sha256:<hex>`` of the weights file, or ``hub:<id>@<commit>``.
    """

    spec: str
    weights: Path
    folder: Path
    config: Path | None
    fingerprint: str


def _hf_kind(folder: Path) -> str:
    """The ``model_type`` of a Hugging Face checkpoint folder's config.json, or ""."""
    import json

    try:
        return str(json.loads((folder / "config.json").read_text(encoding="utf-8")).get("model_type", ""))
    except (OSError, ValueError, AttributeError):
        return ""


def find_checkpoint(spec: str) -> CheckpointFiles:
    """Resolve ``checkpoint`` (see the module docstring).

    Raises
    ------
    InputError
        Nothing at ``spec``; a folder without OpenCLIP weights (naming what it holds instead); a
        file of another kind; a hub id not in the local cache while offline.
    """
    if not spec or not str(spec).strip():
        raise InputError("checkpoint: OpenCLIP needs a checkpoint folder, weights file or hub id, got ''")
    p = Path(spec).expanduser()
    if p.is_file():
        if p.suffix.lower() not in _SUFFIXES:
            raise InputError(
                f"checkpoint: {spec!r} is not an OpenCLIP weights file (expected {', '.join(_SUFFIXES)})"
            )
        config = p.parent / CONFIG_FILE
        return CheckpointFiles(spec, p, p.parent, config if config.is_file() else None, "sha256:" + sha256_file(p))
    if p.is_dir():
        return _in_folder(spec, p, None)
    hub = spec.removeprefix("hf-hub:")
    resolved = resolve_checkpoint(hub, allow_patterns=_ALLOW)
    return _in_folder(spec, resolved.path, resolved.fingerprint)


def _in_folder(spec: str, folder: Path, fingerprint: str | None) -> CheckpointFiles:
    weights = next((folder / f for f in WEIGHT_FILES if (folder / f).is_file()), None)
    if weights is None:
        kind = _hf_kind(folder)
        what = f"a Hugging Face {kind!r} checkpoint" if kind else "no OpenCLIP checkpoint"
        hint = " (use --model clip)" if kind == "clip" else ""
        raise InputError(
            f"checkpoint: {spec!r} is {what}{hint}: an OpenCLIP folder holds {' or '.join(WEIGHT_FILES)}; "
            "or pass the weights file itself"
        )
    config = folder / CONFIG_FILE
    fp = fingerprint or "sha256:" + sha256_file(weights)
    return CheckpointFiles(spec, weights, folder, config if config.is_file() else None, fp)


def _is_torchscript(path: Path) -> bool:
    if not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as z:
        return any(n.endswith("constants.pkl") or "/code/" in n for n in z.namelist())


def read_state_dict(path: Path, spec: str, meta: dict[str, Any] | None = None) -> dict[str, torch.Tensor]:
    """The weights of an OpenCLIP checkpoint file as one flat ``{key: tensor}`` dict.

    Unwraps ``{"state_dict": ...}`` and strips a ``module.`` prefix; drops OpenAI's non-weight
    entries (``input_resolution``, ``context_length``, ``vocab_size``). ``meta``, when given, is
    filled with ``training_epoch`` (an int, or None) for a training checkpoint of OpenCLIP's
    ``main.py`` (``{"epoch", "name", "state_dict", ...}``, as NegCLIP's ``negclip.pth``).

    Raises
    ------
    InputError
        The file cannot be read, holds objects other than tensors and containers, or holds no
        tensors.
    """
    with reading_weights(spec):
        if path.suffix.lower() == ".safetensors":
            from safetensors.torch import load_file

            obj: Any = load_file(str(path))
        elif _is_torchscript(path):
            try:
                obj = torch.jit.load(str(path), map_location="cpu").state_dict()
            except RuntimeError as exc:
                raise InputError(f"checkpoint: {spec!r} is a TorchScript archive that cannot be read ({exc})") from None
        else:
            try:
                obj = torch.load(str(path), map_location="cpu", weights_only=True)
            except RuntimeError as exc:
                raise InputError(f"checkpoint: {spec!r} cannot be read as a torch file ({str(exc).splitlines()[0]})") from None
    if isinstance(obj, Mapping) and isinstance(obj.get("state_dict"), Mapping):
        if meta is not None and "epoch" in obj:
            epoch = obj["epoch"]
            meta["training_epoch"] = int(epoch) if isinstance(epoch, int) else None
        obj = obj["state_dict"]
    if not isinstance(obj, Mapping):
        raise InputError(f"checkpoint: {spec!r} holds a {type(obj).__name__}, not a state dict")
    state = {str(k): v for k, v in obj.items() if isinstance(v, torch.Tensor)}
    if not state:
        raise InputError(f"checkpoint: {spec!r} holds no tensors")
    if all(k.startswith("module.") for k in state):
        state = {k[len("module."):]: v for k, v in state.items()}
    return {k: v for k, v in state.items() if k not in _NOT_WEIGHTS}


def state_dict_family(state: Mapping[str, Any]) -> str:
    """What a state dict looks like: ``vit``, ``resnet`` (vision tower), ``+hf-text`` appended
    for a Hugging Face text tower; ``""`` when it is no OpenCLIP CLIP state dict."""
    if "visual.class_embedding" in state:
        vision = "vit"
    elif "visual.attnpool.positional_embedding" in state:
        vision = "resnet"
    else:
        return ""
    if any(k.startswith("text.transformer.") for k in state):
        return vision + "+hf-text"
    return vision if "token_embedding.weight" in state or "text.token_embedding.weight" in state else ""


def hf_proj_type(state: Mapping[str, Any]) -> str:
    """The projection a Hugging Face text tower's weights hold: ``mlp``, ``linear`` or ``none``."""
    if "text.proj.0.weight" in state:
        return "mlp"
    return "linear" if "text.proj.weight" in state else "none"


def _blocks(state: Mapping[str, Any], prefix: str) -> int:
    """How many numbered blocks ``prefix<N>.`` the state dict holds (1 + the highest N; 0 if none)."""
    found = [int(k[len(prefix):].split(".", 1)[0]) for k in state
             if k.startswith(prefix) and k[len(prefix):].split(".", 1)[0].isdigit()]
    return max(found) + 1 if found else 0


def _sizes(cfg: Any, state: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """(config field, its value, what the weights hold) for the sizes that decide how large the
    model is (block counts, widths, positions), ``None`` where the weights do not say."""
    def dim(key: str, axis: int) -> Any:
        t = state.get(key)
        return int(t.shape[axis]) if t is not None and t.dim() > axis else None

    v, t = cfg.vision, cfg.text
    out: list[tuple[str, Any, Any]] = []
    if v.resnet:
        for i, depth in enumerate(v.layers, start=1):
            out.append((f"vision_cfg.layers[{i - 1}]", depth, _blocks(state, f"visual.layer{i}.")))
        stem = dim("visual.conv1.weight", 0)
        out.append(("vision_cfg.width", v.width, None if stem is None else 2 * stem))
    else:
        out.append(("vision_cfg.layers", v.layers, _blocks(state, "visual.transformer.resblocks.")))
        out.append(("vision_cfg.width", v.width, dim("visual.conv1.weight", 0)))
        out.append(("vision_cfg.patch_size", v.patch_size, dim("visual.conv1.weight", 2)))
        grid = dim("visual.positional_embedding", 0)
        out.append(("vision_cfg.image_size", v.image_size,
                    None if grid is None or v.patch_size is None else round((grid - 1) ** 0.5) * v.patch_size))
    if t.hf:
        out.append(("text_cfg (its transformers config) num_hidden_layers", t.hf_config.get("num_hidden_layers"),
                    _blocks(state, "text.transformer.encoder.layer.")))
        out.append(("text_cfg (its transformers config) hidden_size", t.hf_config.get("hidden_size"),
                    dim("text.transformer.embeddings.word_embeddings.weight", 1)))
    else:
        prefix = "text." if "text.token_embedding.weight" in state else ""
        out.append(("text_cfg.layers", t.layers, _blocks(state, f"{prefix}transformer.resblocks.")))
        out.append(("text_cfg.width", t.width, dim(f"{prefix}token_embedding.weight", 1)))
        out.append(("text_cfg.vocab_size", t.vocab_size, dim(f"{prefix}token_embedding.weight", 0)))
        out.append(("text_cfg.context_length", t.context_length, dim(f"{prefix}positional_embedding", 0)))
    proj = "visual.attnpool.c_proj.weight" if v.resnet else "visual.proj"
    out.append(("embed_dim", cfg.embed_dim, dim(proj, 0 if v.resnet else 1)))
    return out


def check_sizes(cfg: Any, state: Mapping[str, Any], spec: str) -> None:
    """Refuse a config whose sizes the weights do not hold, before any module is built.

    A config can ask for any number of blocks (``vision_cfg.layers: 1000000000``); building its
    modules, even on the meta device, would take hours before the key check could fail. The block
    counts, widths, patch and image sizes, vocabulary and positions are read from the weights'
    keys and shapes and compared first; the rest (heads aside, which the weights do not show) is
    checked key by key by :func:`fit_state_dict` once the model is built.

    Raises
    ------
    InputError
        One line naming the first config field whose value the weights do not hold.
    """
    for field_name, want, got in _sizes(cfg, state):
        if got is not None and want != got:
            raise InputError(
                f"checkpoint: {spec!r} does not fit OpenCLIP {cfg.name}: its config says {field_name} = {want}, "
                f"its weights hold {got} ({_arch_hint(state)})"
            )


def _arch_hint(state: Mapping[str, Any]) -> str:
    """What the weights look like, and how to give their architecture (the end of a refusal)."""
    code = state_dict_family(state)
    vision = {"vit": "a vision transformer", "resnet": "a ModifiedResNet"}.get(code.split("+")[0], "")
    family = (f"{vision} image tower with " + ("a Hugging Face" if "hf-text" in code else "CLIP's") + " text tower"
              if vision else "no OpenCLIP CLIP model")
    return f"its weights look like {family}; give the architecture with --model-option arch=NAME or --model-config FILE"


def check_finite(state: Mapping[str, torch.Tensor], spec: str) -> None:
    """Refuse weights that hold NaN or infinite values (a damaged or diverged checkpoint), which
    would otherwise surface later as missing scores.

    Raises
    ------
    InputError
        Naming the first such weight and how many of its values are not finite.
    """
    for key, t in state.items():
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            bad = int((~torch.isfinite(t)).sum())
            what = "NaN" if bool(torch.isnan(t).any()) else "infinite"
            raise InputError(
                f"checkpoint: {spec!r}: weight {key} holds {what} values ({bad} of {t.numel()} not finite); "
                "the checkpoint is damaged or its training diverged"
            )


def fit_state_dict(
    model: torch.nn.Module, state: Mapping[str, torch.Tensor], spec: str, arch: str,
) -> dict[str, Any]:
    """Check ``state`` against ``model``'s keys and shapes and load it (strict).

    OpenCLIP's standalone text-tower key names (``text.token_embedding`` ...) are mapped to the
    top-level ones; a ``position_ids`` buffer or an unused pooler of a Hugging Face text tower is
    ignored. Anything else missing, unexpected or of another shape is refused: a checkpoint of
    another architecture.

    Returns
    -------
    dict
        ``ignored``: the keys left out.

    Raises
    ------
    InputError
        Naming a missing/unexpected key or a shape mismatch, and the architecture.
    """
    expected = model.state_dict()
    fixed: dict[str, torch.Tensor] = {}
    ignored: list[str] = []
    for key, value in state.items():
        if key.startswith("text.") and not key.startswith(("text.transformer.", "text.proj")) and key[5:] in expected:
            key = key[5:]
        if key not in expected and (key.endswith("position_ids") or key.startswith("text.transformer.pooler.")):
            ignored.append(key)
            continue
        fixed[key] = value
    missing = [k for k in expected if k not in fixed]
    unexpected = [k for k in fixed if k not in expected]
    hint = _arch_hint(state)
    if missing:
        raise InputError(
            f"checkpoint: {spec!r} does not fit OpenCLIP {arch}: it lacks {len(missing)} weight(s) such as "
            f"{missing[0]!r} ({hint})"
        )
    if unexpected:
        raise InputError(
            f"checkpoint: {spec!r} does not fit OpenCLIP {arch}: {len(unexpected)} weight(s) such as "
            f"{unexpected[0]!r} have no place in it ({hint})"
        )
    for key, want in expected.items():
        got = fixed[key]
        if tuple(got.shape) != tuple(want.shape):
            raise InputError(
                f"checkpoint: {spec!r} does not fit OpenCLIP {arch}: {key} has shape {tuple(got.shape)}, "
                f"the architecture {tuple(want.shape)} ({hint})"
            )
    model.load_state_dict({k: v.to(expected[k].dtype) for k, v in fixed.items()}, strict=True, assign=True)
    _fill_meta_buffers(model)
    return {"ignored": ignored}


def _fill_meta_buffers(model: torch.nn.Module) -> None:
    """Give the non-persistent buffers of a model built on the meta device their values (a
    Hugging Face text tower's ``position_ids`` = 0..P-1 and ``token_type_ids`` = 0); any other
    buffer left on the meta device is a bug."""
    for module in model.modules():
        for name, buf in list(module._buffers.items()):
            if buf is None or not buf.is_meta:
                continue
            if name == "position_ids":
                module._buffers[name] = torch.arange(buf.shape[-1]).expand(buf.shape).clone()
            elif name == "token_type_ids":
                module._buffers[name] = torch.zeros(buf.shape, dtype=buf.dtype)
            else:
                raise RuntimeError(f"buffer {name} of {type(module).__name__} has no value after loading")
