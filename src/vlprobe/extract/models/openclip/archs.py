"""OpenCLIP model configurations: the built-in architectures by name and the config parser.

An OpenCLIP checkpoint holds weights only; its architecture comes from a model config, in
OpenCLIP's JSON form::

    {"embed_dim": 512, "quick_gelu": true,
     "vision_cfg": {"image_size": 224, "layers": 12, "width": 768, "patch_size": 32},
     "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 512, "heads": 8, "layers": 12}}

``vision_cfg.layers`` is an int for a vision transformer and four ints for OpenAI's
ModifiedResNet; ``text_cfg.hf_model_name`` selects a Hugging Face text tower (roberta,
xlm-roberta) instead of CLIP's causal text transformer. The config comes from, in this order:
the ``model_config`` load option (a model-config JSON, or an ``open_clip_config.json`` that
holds one under ``model_cfg``), the ``arch`` option (a name of :data:`ARCHS`, the values of
OpenCLIP's ``model_configs/<name>.json``), or the ``open_clip_config.json`` beside the weights
(what OpenCLIP's Hugging Face hub repositories carry).

The activation: OpenCLIP builds QuickGELU (``x * sigmoid(1.702 x)``) when the config says
``"quick_gelu": true`` (its ``-quickgelu`` names) and GELU otherwise, also for weights trained
with QuickGELU: OpenAI's, LAION-400M's and NegCLIP's. OpenCLIP switches to QuickGELU by itself
only for its ``openai`` pretrained tag; a state dict loaded from a path under a plain name runs
with GELU, which is how SugarCrepe's published NegCLIP row was computed (sugar-crepe issue #7).
vlprobe does the same by default and offers ``act=quick_gelu`` (or a ``-quickgelu`` name) as the
correction.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vlprobe.extract.models.openclip.tokenizer import check_clean_mode
from vlprobe.validation import InputError, unknown_name_message

__all__ = [
    "ACTIVATIONS",
    "ARCHS",
    "HF_TEXT_CONFIGS",
    "OPENAI_MEAN",
    "OPENAI_STD",
    "OpenClipConfig",
    "PreprocessConfig",
    "TextConfig",
    "VisionConfig",
    "arch_config",
    "arch_names",
    "read_config_file",
]

#: OpenAI CLIP's image normalisation, OpenCLIP's default.
OPENAI_MEAN: tuple[float, float, float] = (0.48145466, 0.4578275, 0.40821073)
OPENAI_STD: tuple[float, float, float] = (0.26862954, 0.26130258, 0.27577711)
#: The MLP activations an OpenCLIP transformer can have (the ``act`` load option).
ACTIVATIONS: tuple[str, ...] = ("gelu", "quick_gelu")

_CLIP_TEXT = {"context_length": 77, "vocab_size": 49408}


def _text(width: int, heads: int, layers: int = 12) -> dict[str, Any]:
    return {**_CLIP_TEXT, "width": width, "heads": heads, "layers": layers}


def _resnet(embed: int, size: int, layers: list[int], width: int, text_width: int, text_heads: int) -> dict[str, Any]:
    return {"embed_dim": embed, "vision_cfg": {"image_size": size, "layers": layers, "width": width, "patch_size": None},
            "text_cfg": _text(text_width, text_heads)}


def _vit(embed: int, layers: int, width: int, patch: int, text: dict[str, Any], **vision: Any) -> dict[str, Any]:
    return {"embed_dim": embed, "vision_cfg": {"image_size": 224, "layers": layers, "width": width, "patch_size": patch, **vision},
            "text_cfg": text}


def _hf_text(name: str, **extra: Any) -> dict[str, Any]:
    return {"hf_model_name": name, "hf_tokenizer_name": name, "hf_pooler_type": "mean_pooler", **extra}


#: OpenCLIP's model configs of the architectures in SugarCrepe's, VALSE's and "Why is Winoground
#: Hard?"'s tables (the values of ``model_configs/<name>.json``). Every name also exists with a
#: ``-quickgelu`` suffix (the same config with ``"quick_gelu": true``).
ARCHS: dict[str, dict[str, Any]] = {
    "RN50": _resnet(1024, 224, [3, 4, 6, 3], 64, 512, 8),
    "RN101": _resnet(512, 224, [3, 4, 23, 3], 64, 512, 8),
    "RN50x4": _resnet(640, 288, [4, 6, 10, 6], 80, 640, 10),
    "RN50x16": _resnet(768, 384, [6, 8, 18, 8], 96, 768, 12),
    "RN50x64": _resnet(1024, 448, [3, 15, 36, 10], 128, 1024, 16),
    "ViT-B-32": _vit(512, 12, 768, 32, _text(512, 8)),
    "ViT-B-16": _vit(512, 12, 768, 16, _text(512, 8)),
    "ViT-L-14": _vit(768, 24, 1024, 14, _text(768, 12)),
    "ViT-H-14": _vit(1024, 32, 1280, 14, _text(1024, 16), head_width=80),
    "ViT-g-14": _vit(1024, 40, 1408, 14, _text(1024, 16), head_width=88, mlp_ratio=4.3637),
    "ViT-bigG-14": _vit(1280, 48, 1664, 14, _text(1280, 20, 32), head_width=104, mlp_ratio=4.9231),
    "roberta-ViT-B-32": {**_vit(512, 12, 768, 32, _hf_text("roberta-base", hf_proj_type="mlp")), "quick_gelu": True},
    "xlm-roberta-base-ViT-B-32": _vit(512, 12, 768, 32, _hf_text("xlm-roberta-base", hf_proj_type="mlp")),
    "xlm-roberta-large-ViT-H-14": _vit(1024, 32, 1280, 14, _hf_text("xlm-roberta-large"), head_width=80),
}

#: The Hugging Face configs of the text towers above (as their hub ``config.json`` files state
#: them), so that their architecture is known offline; the weights come from the checkpoint.
HF_TEXT_CONFIGS: dict[str, dict[str, Any]] = {
    "roberta-base": {"model_type": "roberta", "vocab_size": 50265, "hidden_size": 768, "num_hidden_layers": 12,
                     "num_attention_heads": 12, "intermediate_size": 3072, "max_position_embeddings": 514,
                     "type_vocab_size": 1, "layer_norm_eps": 1e-5, "pad_token_id": 1, "bos_token_id": 0,
                     "eos_token_id": 2, "hidden_act": "gelu"},
    "xlm-roberta-base": {"model_type": "xlm-roberta", "vocab_size": 250002, "hidden_size": 768,
                         "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072,
                         "max_position_embeddings": 514, "type_vocab_size": 1, "layer_norm_eps": 1e-5,
                         "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2, "hidden_act": "gelu"},
    "xlm-roberta-large": {"model_type": "xlm-roberta", "vocab_size": 250002, "hidden_size": 1024,
                          "num_hidden_layers": 24, "num_attention_heads": 16, "intermediate_size": 4096,
                          "max_position_embeddings": 514, "type_vocab_size": 1, "layer_norm_eps": 1e-5,
                          "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2, "hidden_act": "gelu"},
}

_QUICKGELU = "-quickgelu"
# Config keys that change the architecture in ways vlprobe does not build: refused, not ignored.
_UNSUPPORTED_VISION = ("timm_model_name", "ls_init_value", "attentional_pool", "no_ln_pre", "final_ln_after_pool",
                       "output_tokens", "patch_dropout", "input_patchnorm", "act_kwargs", "norm_kwargs")
_UNSUPPORTED_TEXT = ("ls_init_value", "embed_cls", "no_causal_mask", "final_ln_after_pool", "proj_bias",
                     "output_tokens", "act_kwargs", "norm_kwargs", "ln_post_emb")
_NEUTRAL_VISION = ("timm_model_pretrained", "timm_pool", "timm_proj", "timm_proj_bias", "timm_drop", "timm_drop_path")
_NEUTRAL_TEXT = ("hf_model_pretrained", "hf_tokenizer_name", "pad_id")


def arch_names() -> list[str]:
    """Every built-in architecture name, the ``-quickgelu`` forms included."""
    return sorted([*ARCHS, *(n + _QUICKGELU for n in ARCHS)])


def arch_config(name: str, param: str = "arch") -> dict[str, Any]:
    """The model config (OpenCLIP's JSON form) of a built-in architecture name.

    Raises
    ------
    InputError
        ``name`` is not one of :func:`arch_names` (the message names the closest).
    """
    base = name[: -len(_QUICKGELU)] if name.endswith(_QUICKGELU) else name
    if base not in ARCHS:
        raise InputError(f"{param}: {unknown_name_message('OpenCLIP architecture', name, arch_names())}")
    cfg = json.loads(json.dumps(ARCHS[base]))  # a deep copy
    if name.endswith(_QUICKGELU):
        cfg["quick_gelu"] = True
    return cfg


@dataclass(frozen=True)
class VisionConfig:
    """OpenCLIP's ``vision_cfg``: a vision transformer (``layers`` an int) or a ModifiedResNet (four ints)."""

    image_size: int
    layers: int | tuple[int, ...]
    width: int
    patch_size: int | None = None
    head_width: int = 64
    mlp_ratio: float = 4.0

    @property
    def resnet(self) -> bool:
        return isinstance(self.layers, tuple)

    @property
    def heads(self) -> int:
        """Attention heads: of the transformer, or of the ResNet's attention pool (``32 * width / head_width``)."""
        return (self.width * 32 if self.resnet else self.width) // self.head_width

    @property
    def mlp_width(self) -> int:
        return int(self.width * self.mlp_ratio)


@dataclass(frozen=True)
class TextConfig:
    """OpenCLIP's ``text_cfg``: CLIP's causal transformer, or a Hugging Face tower (``hf_model_name``)."""

    context_length: int = 77
    vocab_size: int = 49408
    width: int = 512
    heads: int = 8
    layers: int = 12
    mlp_ratio: float = 4.0
    hf_model_name: str = ""
    hf_tokenizer_name: str = ""
    hf_pooler_type: str = "mean_pooler"
    hf_proj_type: str = "mlp"
    #: The Hugging Face model config of a HF tower (a dict, as its ``config.json``); empty for CLIP's.
    hf_config: dict[str, Any] = field(default_factory=dict)
    #: OpenCLIP's text cleaning before tokenizing (:data:`~vlprobe.extract.models.openclip.tokenizer.CLEAN_MODES`):
    #: ``lower`` for CLIP's tower, ``whitespace`` for a HF tower (OpenCLIP's defaults), or
    #: ``text_cfg.tokenizer_kwargs.clean``.
    clean: str = "lower"

    @property
    def hf(self) -> bool:
        return bool(self.hf_model_name)

    @property
    def mlp_width(self) -> int:
        return int(self.width * self.mlp_ratio)


@dataclass(frozen=True)
class PreprocessConfig:
    """OpenCLIP's evaluation transform: resize the shorter side (``shortest``; or ``squash`` both
    sides) to ``size`` with ``interpolation``, centre-crop ``size`` x ``size``, scale to [0, 1],
    normalise with ``mean``/``std``."""

    size: int
    mean: tuple[float, float, float] = OPENAI_MEAN
    std: tuple[float, float, float] = OPENAI_STD
    interpolation: str = "bicubic"
    resize_mode: str = "shortest"

    def describe(self) -> dict[str, Any]:
        return {"size": self.size, "mean": list(self.mean), "std": list(self.std),
                "interpolation": self.interpolation, "resize_mode": self.resize_mode}


@dataclass(frozen=True)
class OpenClipConfig:
    """One OpenCLIP architecture, as parsed from its model config.

    Attributes
    ----------
    name : str
        The architecture's name (a built-in one, or where the config came from).
    embed_dim : int
        Width of the joint embedding space.
    vision, text : VisionConfig, TextConfig
    act : {"gelu", "quick_gelu"}
        The MLP activation of the transformers (the vision transformer and CLIP's text tower).
    preprocess : PreprocessConfig
    """

    name: str
    embed_dim: int
    vision: VisionConfig
    text: TextConfig
    act: str
    preprocess: PreprocessConfig

    @classmethod
    def from_dict(cls, cfg: Any, *, name: str, param: str, preprocess: Any = None, act: str | None = None) -> OpenClipConfig:
        """Parse OpenCLIP's model-config dict.

        Parameters
        ----------
        cfg : dict
            ``{"embed_dim", "quick_gelu"?, "vision_cfg", "text_cfg"}``.
        name : str
            What to call the architecture.
        param : str
            The parameter the config came from, named in errors.
        preprocess : dict, optional
            ``preprocess_cfg`` of an ``open_clip_config.json`` (``mean``, ``std``,
            ``interpolation``, ``resize_mode``).
        act : str, optional
            Overrides the config's ``quick_gelu``.
        """
        if not isinstance(cfg, dict):
            raise InputError(f"{param}: an OpenCLIP model config must be a JSON object, got {type(cfg).__name__}")
        missing = [k for k in ("embed_dim", "vision_cfg", "text_cfg") if k not in cfg]
        if missing:
            raise InputError(f"{param}: the OpenCLIP model config lacks {', '.join(missing)}")
        for key in ("custom_text", "multimodal_cfg", "init_logit_bias"):
            if cfg.get(key) not in (None, False):
                raise InputError(f"{param}: {name}: {key!r} models (CoCa, SigLIP-style heads) are not OpenCLIP CLIP models vlprobe reads")
        vision = _vision(cfg["vision_cfg"], param, name)
        text = _text_config(cfg["text_cfg"], param, name)
        if act is None:
            act = "quick_gelu" if bool(cfg.get("quick_gelu", False)) else "gelu"
        elif act not in ACTIVATIONS:
            raise InputError(f"act: expected one of {', '.join(ACTIVATIONS)}, got {act!r}")
        pre = _preprocess(preprocess or {}, vision.image_size, param)
        return cls(name, _pos_int(cfg["embed_dim"], f"{param}: embed_dim"), vision, text, act, pre)

    def describe(self) -> dict[str, Any]:
        v, t = self.vision, self.text
        vision = ({"tower": "ModifiedResNet", "layers": list(v.layers), "width": v.width} if isinstance(v.layers, tuple)
                  else {"tower": "VisionTransformer", "layers": v.layers, "width": v.width, "patch_size": v.patch_size,
                        "heads": v.heads, "mlp_width": v.mlp_width})
        text = ({"tower": f"transformers {t.hf_model_name}", "pooler": t.hf_pooler_type} if t.hf
                else {"tower": "TextTransformer", "layers": t.layers, "width": t.width, "heads": t.heads,
                      "context_length": t.context_length})
        return {"arch": self.name, "embed_dim": self.embed_dim, "act": self.act, "vision": vision, "text": text,
                "preprocess": self.preprocess.describe()}


def _pos_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InputError(f"{what} must be a positive int, got {value!r}")
    return int(value)


def _refuse(section: dict[str, Any], keys: tuple[str, ...], neutral: tuple[str, ...], param: str, name: str, where: str) -> None:
    for key in keys:
        value = section.get(key)
        if value not in (None, False, 0, 0.0, {}, "", "none") and key not in neutral:
            raise InputError(f"{param}: {name}: {where}.{key}={value!r} is an OpenCLIP variant vlprobe does not build")


def _vision(v: Any, param: str, name: str) -> VisionConfig:
    if not isinstance(v, dict):
        raise InputError(f"{param}: vision_cfg must be a JSON object")
    _refuse(v, _UNSUPPORTED_VISION, _NEUTRAL_VISION, param, name, "vision_cfg")
    if v.get("pool_type", "tok") not in ("tok",) or v.get("global_average_pool"):
        raise InputError(f"{param}: {name}: vision_cfg pooling other than the class token is not supported")
    size = v.get("image_size", 224)
    if isinstance(size, list) and len(size) == 2 and size[0] == size[1]:
        size = size[0]
    layers = v.get("layers", 12)
    width = _pos_int(v.get("width", 768), f"{param}: vision_cfg.width")
    head_width = _pos_int(v.get("head_width", 64), f"{param}: vision_cfg.head_width")
    mlp_ratio = float(v.get("mlp_ratio", 4.0))
    if isinstance(layers, list):
        if len(layers) != 4:
            raise InputError(f"{param}: vision_cfg.layers of a ModifiedResNet must list 4 stages, got {layers!r}")
        stages = tuple(_pos_int(n, f"{param}: vision_cfg.layers") for n in layers)
        return VisionConfig(_pos_int(size, f"{param}: vision_cfg.image_size"), stages, width, None, head_width, mlp_ratio)
    patch = _pos_int(v.get("patch_size", 16), f"{param}: vision_cfg.patch_size")
    image_size = _pos_int(size, f"{param}: vision_cfg.image_size")
    if image_size % patch:
        raise InputError(f"{param}: vision_cfg.image_size {image_size} is not a multiple of patch_size {patch}")
    if width % head_width:
        raise InputError(f"{param}: vision_cfg.width {width} is not a multiple of head_width {head_width}")
    return VisionConfig(image_size, _pos_int(layers, f"{param}: vision_cfg.layers"), width, patch, head_width, mlp_ratio)


def _text_config(t: Any, param: str, name: str) -> TextConfig:
    if not isinstance(t, dict):
        raise InputError(f"{param}: text_cfg must be a JSON object")
    _refuse(t, _UNSUPPORTED_TEXT, _NEUTRAL_TEXT, param, name, "text_cfg")
    hf_name = str(t.get("hf_model_name") or "")
    clean = _clean_mode(t.get("tokenizer_kwargs"), "whitespace" if hf_name else "lower", param, name)
    if hf_name:
        # Older OpenCLIP configs spell the two HF options "proj" and "pooler_type".
        pooler = str(t.get("hf_pooler_type", t.get("pooler_type", "mean_pooler")))
        proj = t.get("hf_proj_type", t.get("proj", "mlp"))
        if pooler not in ("mean_pooler", "cls_pooler"):
            raise InputError(f"{param}: {name}: text_cfg.hf_pooler_type {pooler!r} is not supported (mean_pooler, cls_pooler)")
        return TextConfig(
            context_length=_pos_int(t.get("context_length", 77), f"{param}: text_cfg.context_length"),
            hf_model_name=hf_name, hf_tokenizer_name=str(t.get("hf_tokenizer_name") or hf_name),
            hf_pooler_type=pooler, hf_proj_type=str(proj or "none"),
            hf_config=dict(HF_TEXT_CONFIGS.get(hf_name, {})), clean=clean,
        )
    pool = t.get("pool_type", "argmax")
    if pool != "argmax":
        raise InputError(f"{param}: {name}: text_cfg.pool_type {pool!r} is not supported (argmax: the EOS token)")
    width = _pos_int(t.get("width", 512), f"{param}: text_cfg.width")
    heads = _pos_int(t.get("heads", 8), f"{param}: text_cfg.heads")
    if width % heads:
        raise InputError(f"{param}: text_cfg.width {width} is not a multiple of heads {heads}")
    return TextConfig(
        context_length=_pos_int(t.get("context_length", 77), f"{param}: text_cfg.context_length"),
        vocab_size=_pos_int(t.get("vocab_size", 49408), f"{param}: text_cfg.vocab_size"),
        width=width, heads=heads, layers=_pos_int(t.get("layers", 12), f"{param}: text_cfg.layers"),
        mlp_ratio=float(t.get("mlp_ratio", 4.0)), clean=clean,
    )


def _clean_mode(kwargs: Any, default: str, param: str, name: str) -> str:
    """``text_cfg.tokenizer_kwargs``: its ``clean`` (OpenCLIP's text cleaning), else ``default``;
    any other tokenizer option is one vlprobe does not apply, refused."""
    if kwargs in (None, {}):
        return default
    if not isinstance(kwargs, dict):
        raise InputError(f"{param}: {name}: text_cfg.tokenizer_kwargs must be a JSON object, got {kwargs!r}")
    other = sorted(k for k in kwargs if k != "clean")
    if other:
        raise InputError(f"{param}: {name}: text_cfg.tokenizer_kwargs.{other[0]} is a tokenizer option vlprobe does not apply")
    return check_clean_mode(kwargs.get("clean", default), f"{param}: {name}: text_cfg.tokenizer_kwargs.clean")


def _preprocess(p: Any, size: int, param: str) -> PreprocessConfig:
    if not isinstance(p, dict):
        raise InputError(f"{param}: preprocess_cfg must be a JSON object")

    def triple(key: str, default: tuple[float, float, float]) -> tuple[float, float, float]:
        value = p.get(key, default)
        if isinstance(value, (int, float)):
            value = [value] * 3
        if (not isinstance(value, (list, tuple)) or len(value) != 3
                or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in value)):
            raise InputError(f"{param}: preprocess_cfg.{key} must be 3 numbers, got {value!r}")
        return (float(value[0]), float(value[1]), float(value[2]))

    interpolation = str(p.get("interpolation", "bicubic"))
    resize_mode = str(p.get("resize_mode", "shortest"))
    if interpolation not in ("bicubic", "bilinear"):
        raise InputError(f"{param}: preprocess_cfg.interpolation {interpolation!r} is not supported (bicubic, bilinear)")
    if resize_mode not in ("shortest", "squash"):
        raise InputError(f"{param}: preprocess_cfg.resize_mode {resize_mode!r} is not supported (shortest, squash)")
    mean, std = triple("mean", OPENAI_MEAN), triple("std", OPENAI_STD)
    if not all(math.isfinite(m) for m in mean) or not all(math.isfinite(d) and d != 0 for d in std):
        raise InputError(f"{param}: preprocess_cfg needs finite mean and non-zero finite std (pixels are divided by "
                         f"the std), got mean {list(mean)}, std {list(std)}")
    pre_size = p.get("size", size)
    if isinstance(pre_size, list) and len(pre_size) == 2 and pre_size[0] == pre_size[1]:
        pre_size = pre_size[0]
    return PreprocessConfig(_pos_int(pre_size, f"{param}: preprocess_cfg.size"), mean, std, interpolation, resize_mode)


def read_config_file(path: Path, param: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A model-config JSON file: ``(model_cfg, preprocess_cfg)``.

    Reads both OpenCLIP's model configs (``{"embed_dim", "vision_cfg", "text_cfg"}``) and the
    ``open_clip_config.json`` of its hub repositories (``{"model_cfg": ..., "preprocess_cfg": ...}``).
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"{param}: cannot read {str(path)!r} as JSON ({exc})") from None
    if not isinstance(data, dict):
        raise InputError(f"{param}: {str(path)!r} must hold a JSON object")
    if "model_cfg" in data:
        return data["model_cfg"], data.get("preprocess_cfg") or {}
    return data, {}
