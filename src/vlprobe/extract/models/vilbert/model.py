"""ViLBERT (Lu et al. 2019) and 12-in-1 (Lu et al. 2020), written here from the architecture
facebookresearch/vilbert-multi-task describes, with its checkpoints' key names.

Two streams that meet in co-attention layers:

* text: ``bert.embeddings`` (word + position + token type, LayerNorm; with
  ``task_specific_tokens`` a task embedding ``task_embeddings(task_id)`` is inserted after
  [CLS]), then BERT layers ``bert.encoder.layer.N`` (``attention.self.{query,key,value}``,
  ``attention.output.{dense,LayerNorm}``, ``intermediate.dense``, ``output.{dense,LayerNorm}``);
* image: ``bert.v_embeddings`` (``image_embeddings``: feature -> width, plus
  ``image_location_embeddings`` of the 5-d box ``(x1, y1, x2, y2, area)`` normalised, LayerNorm),
  then the same kind of layers ``bert.encoder.v_layer.N`` at the visual width;
* co-attention ``bert.encoder.c_layer.K``: ``biattention`` (``query1/key1/value1`` on the image,
  ``query2/key2/value2`` on the text; the text attends to the image keys and the image to the
  text keys, at ``bi_hidden_size``), ``biOutput`` (``dense1``/``LayerNorm1`` back to the image
  width with the image residual, ``dense2``/``LayerNorm2`` to the text width with the text
  residual; ``q_dense1/2`` are stored but unused), then each side's feed-forward
  (``v_intermediate``/``v_output``, ``t_intermediate``/``t_output``).

The order of the layers: for each pair ``(v_biattention_id[K], t_biattention_id[K])`` the text
layers up to ``t_biattention_id[K]`` (exclusive) run, then the image layers up to
``v_biattention_id[K]``, then co-attention layer K; after the last one the remaining image
layers, then the remaining text layers. ``t_pooler``/``v_pooler``: ReLU(W x[:, 0]) to
``bi_hidden_size``. Masks are additive ``(1 - mask) * -10000``. Heads: ``cls.bi_seq_relationship``
(image-text matching of the product of the pooled outputs; index 0 = match, the pretraining
labels a random caption 1) and 12-in-1's retrieval head ``vil_logit`` (one logit). GELU is the
erf form; layer norms have eps 1e-12.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vlprobe.validation import InputError, check_int

__all__ = ["MASK_VALUE", "OPTIONAL_DEFAULTS", "REQUIRED_KEYS", "ViLBertConfig", "ViLBertModel", "schedule"]

#: The additive attention mask of padded positions, as the reference builds it.
MASK_VALUE = -10000.0


#: The sizes a config must state: vilbert-multi-task's ``BertConfig.from_dict`` starts from the
#: class defaults (``vilbert/vilbert.py``: 12 image heads, width 768, 3 image layers,
#: co-attention at [0, 1] / [10, 11], ...), which are not the released model's, so a key left
#: out would build another model with the same weight shapes (heads) or none that fits.
REQUIRED_KEYS: tuple[str, ...] = (
    "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
    "max_position_embeddings", "type_vocab_size", "v_feature_size", "v_hidden_size", "v_num_hidden_layers",
    "v_num_attention_heads", "v_intermediate_size", "bi_hidden_size", "bi_num_attention_heads",
    "v_biattention_id", "t_biattention_id",
)
#: The original's defaults of the keys a config may leave out (its class defaults).
OPTIONAL_DEFAULTS: dict[str, Any] = {
    "fusion_method": "mul", "dynamic_attention": False, "task_specific_tokens": False, "hidden_act": "gelu",
    "v_hidden_act": "gelu", "with_coattention": True, "model": "bert",
}


@dataclass(frozen=True)
class ViLBertConfig:
    """A vilbert-multi-task config JSON (``bert_base_6layer_6conect.json``'s keys)."""

    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    max_position_embeddings: int
    type_vocab_size: int
    v_feature_size: int
    v_hidden_size: int
    v_num_hidden_layers: int
    v_num_attention_heads: int
    v_intermediate_size: int
    bi_hidden_size: int
    bi_num_attention_heads: int
    v_biattention_id: tuple[int, ...]
    t_biattention_id: tuple[int, ...]
    fusion_method: str = "mul"
    task_specific_tokens: bool = False
    dynamic_attention: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: Any, param: str = "model_config", task_specific_tokens: bool | None = None) -> ViLBertConfig:
        """A config from the JSON's dict, every size checked (see :data:`REQUIRED_KEYS`).

        ``task_specific_tokens`` (12-in-1's task token) is what the weights say when given: the
        release switches it on from the command line (``--task_specific_tokens``), never in a
        config JSON. ``pooling_method`` (in the released JSONs) is not read by the original,
        which fuses by ``fusion_method`` (default ``mul``).

        Raises
        ------
        InputError
            A missing size, a field of another type, or a layout the original cannot build.
        """
        if not isinstance(d, dict):
            raise InputError(f"{param}: a ViLBERT config must be a JSON object")
        if not {"v_hidden_size", "bi_hidden_size", "v_biattention_id"} <= set(d):
            raise InputError(f"{param}: not a ViLBERT config (no v_hidden_size, bi_hidden_size, v_biattention_id)")
        missing = [k for k in REQUIRED_KEYS if k not in d]
        if missing:
            raise InputError(
                f"{param}: the ViLBERT config lacks {missing[0]}; vilbert-multi-task would build it with its class "
                f"default instead of the released size: give the config released with these weights "
                f"(bert_base_6layer_6conect.json)"
            )
        kw: dict[str, Any] = {}
        for k in REQUIRED_KEYS:
            if k.endswith("_id"):
                ids = d[k]
                if not isinstance(ids, list) or not ids or not all(_is_index(i) for i in ids):
                    raise InputError(f"{param}: {k} must be a non-empty list of integers >= 0, got {ids!r}")
                kw[k] = tuple(int(i) for i in ids)
            else:
                kw[k] = check_int(d[k], f"{param}: {k}", low=1)
        opt = {k: d.get(k, v) for k, v in OPTIONAL_DEFAULTS.items()}
        for k in ("dynamic_attention", "task_specific_tokens", "with_coattention"):
            if not isinstance(opt[k], bool):
                raise InputError(f"{param}: {k} must be true or false, got {opt[k]!r}")
        for k in ("fusion_method", "hidden_act", "v_hidden_act", "model"):
            if not isinstance(opt[k], str):
                raise InputError(f"{param}: {k} must be a string, got {opt[k]!r}")
        if len(kw["v_biattention_id"]) != len(kw["t_biattention_id"]):
            raise InputError(f"{param}: v_biattention_id and t_biattention_id must pair up")
        if max(kw["v_biattention_id"]) >= kw["v_num_hidden_layers"] or max(kw["t_biattention_id"]) >= kw["num_hidden_layers"]:
            raise InputError(f"{param}: a co-attention id is past the last layer")
        for width, heads in (("hidden_size", "num_attention_heads"), ("v_hidden_size", "v_num_attention_heads"),
                             ("bi_hidden_size", "bi_num_attention_heads")):
            if kw[width] % kw[heads]:
                raise InputError(f"{param}: {width} {kw[width]} is not a multiple of {heads} {kw[heads]}")
        if opt["fusion_method"] not in ("mul", "sum"):
            raise InputError(f"{param}: fusion_method {opt['fusion_method']!r} is not mul or sum")
        if (opt["hidden_act"], opt["v_hidden_act"]) != ("gelu", "gelu"):
            raise InputError(f"{param}: only the gelu activation is supported")
        if not opt["with_coattention"] or opt["model"] != "bert":
            raise InputError(f"{param}: only the BERT model with co-attention (with_coattention, model 'bert') is supported")
        for flag in ("in_batch_pairs", "fast_mode"):
            if d.get(flag):
                raise InputError(f"{param}: {flag} (a training mode) is not supported")
        tokens = opt["task_specific_tokens"] if task_specific_tokens is None else task_specific_tokens
        if "task_specific_tokens" in d and opt["task_specific_tokens"] != tokens:
            said = "hold" if tokens else "lack"
            raise InputError(
                f"{param}: task_specific_tokens is {str(opt['task_specific_tokens']).lower()}, but the weights {said} "
                "bert.embeddings.task_embeddings.weight (12-in-1's task tokens); leave the key out and the weights decide"
            )
        return cls(**kw, fusion_method=opt["fusion_method"], task_specific_tokens=tokens,
                   dynamic_attention=opt["dynamic_attention"],
                   extra={k: v for k, v in d.items() if k not in REQUIRED_KEYS and k not in OPTIONAL_DEFAULTS})

    @classmethod
    def from_json(cls, path: Path, param: str = "model_config", task_specific_tokens: bool | None = None) -> ViLBertConfig:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise InputError(f"{param}: cannot read {str(path)!r} as JSON ({exc})") from None
        return cls.from_dict(data, f"{param} {Path(path).name!r}", task_specific_tokens)


def _is_index(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def schedule(cfg: ViLBertConfig) -> list[tuple[str, int]]:
    """The order the layers run in: ``("t", i)`` text layer, ``("v", i)`` image layer, ``("c", k)``
    co-attention layer (see the module docstring)."""
    steps: list[tuple[str, int]] = []
    t0 = v0 = 0
    for k, (v_end, t_end) in enumerate(zip(cfg.v_biattention_id, cfg.t_biattention_id, strict=True)):
        steps += [("t", i) for i in range(t0, t_end)] + [("v", i) for i in range(v0, v_end)] + [("c", k)]
        t0, v0 = t_end, v_end
    return steps + [("v", i) for i in range(v0, cfg.v_num_hidden_layers)] + [("t", i) for i in range(t0, cfg.num_hidden_layers)]


def _heads(x: torch.Tensor, n: int) -> torch.Tensor:
    b, t, w = x.shape
    return x.view(b, t, n, w // n).transpose(1, 2)


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, additive: torch.Tensor, n: int) -> torch.Tensor:
    """Scaled dot-product attention with an additive (B, 1, 1, K) mask; (B, Tq, W)."""
    q, k, v = _heads(q, n), _heads(k, n), _heads(v, n)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + additive
    out = torch.softmax(scores, dim=-1) @ v
    return out.transpose(1, 2).reshape(out.shape[0], out.shape[2], -1)


class SelfAttention(nn.Module):
    def __init__(self, width: int, heads: int, dynamic_from: int = 0) -> None:
        super().__init__()
        self.heads = heads
        self.query, self.key, self.value = nn.Linear(width, width), nn.Linear(width, width), nn.Linear(width, width)
        if dynamic_from:
            self.dyLinear_q = nn.Linear(dynamic_from, width)
            self.dyLinear_k = nn.Linear(dynamic_from, width)

    def forward(self, x: torch.Tensor, additive: torch.Tensor, text: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        q, k = self.query(x), self.key(x)
        if hasattr(self, "dyLinear_q") and text is not None:  # image layers gated by the mean text state
            t, m = text
            pooled = (t * m).sum(1) / m.sum(1)
            q = q * (1 + torch.sigmoid(self.dyLinear_q(pooled)))[:, None]
            k = k * (1 + torch.sigmoid(self.dyLinear_k(pooled)))[:, None]
        return _attend(q, k, self.value(x), additive, self.heads)


class DenseNorm(nn.Module):
    """``LayerNorm(dense(x) + residual)``."""

    def __init__(self, d_in: int, d_out: int) -> None:
        super().__init__()
        self.dense = nn.Linear(d_in, d_out)
        self.LayerNorm = nn.LayerNorm(d_out, eps=1e-12)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dense(x) + residual)


class Intermediate(nn.Module):
    def __init__(self, d_in: int, d_out: int) -> None:
        super().__init__()
        self.dense = nn.Linear(d_in, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.gelu(self.dense(x))


class Attention(nn.Module):
    def __init__(self, width: int, heads: int, dynamic_from: int = 0) -> None:
        super().__init__()
        self.self = SelfAttention(width, heads, dynamic_from)
        self.output = DenseNorm(width, width)

    def forward(self, x: torch.Tensor, additive: torch.Tensor, text: Any = None) -> torch.Tensor:
        return self.output(self.self(x, additive, text), x)


class Layer(nn.Module):
    """A post-norm BERT layer (text, or image at its own width)."""

    def __init__(self, width: int, heads: int, inner: int, dynamic_from: int = 0) -> None:
        super().__init__()
        self.attention = Attention(width, heads, dynamic_from)
        self.intermediate = Intermediate(width, inner)
        self.output = DenseNorm(inner, width)

    def forward(self, x: torch.Tensor, additive: torch.Tensor, text: Any = None) -> torch.Tensor:
        a = self.attention(x, additive, text)
        return self.output(self.intermediate(a), a)


class BiAttention(nn.Module):
    def __init__(self, cfg: ViLBertConfig) -> None:
        super().__init__()
        v, t, b = cfg.v_hidden_size, cfg.hidden_size, cfg.bi_hidden_size
        self.heads = cfg.bi_num_attention_heads
        self.query1, self.key1, self.value1 = nn.Linear(v, b), nn.Linear(v, b), nn.Linear(v, b)
        self.query2, self.key2, self.value2 = nn.Linear(t, b), nn.Linear(t, b), nn.Linear(t, b)

    def forward(self, image: torch.Tensor, image_add: torch.Tensor, text: torch.Tensor, text_add: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """(text attending to the image (B, T, bi), image attending to the text (B, R, bi))."""
        to_image = _attend(self.query2(text), self.key1(image), self.value1(image), image_add, self.heads)
        to_text = _attend(self.query1(image), self.key2(text), self.value2(text), text_add, self.heads)
        return to_image, to_text


class BiOutput(nn.Module):
    def __init__(self, cfg: ViLBertConfig) -> None:
        super().__init__()
        v, t, b = cfg.v_hidden_size, cfg.hidden_size, cfg.bi_hidden_size
        self.dense1, self.LayerNorm1, self.q_dense1 = nn.Linear(b, v), nn.LayerNorm(v, eps=1e-12), nn.Linear(b, v)
        self.dense2, self.LayerNorm2, self.q_dense2 = nn.Linear(b, t), nn.LayerNorm(t, eps=1e-12), nn.Linear(b, t)


class ConnectionLayer(nn.Module):
    """A co-attention layer: each stream attends to the other, then its own feed-forward."""

    def __init__(self, cfg: ViLBertConfig) -> None:
        super().__init__()
        self.biattention = BiAttention(cfg)
        self.biOutput = BiOutput(cfg)
        self.v_intermediate = Intermediate(cfg.v_hidden_size, cfg.v_intermediate_size)
        self.v_output = DenseNorm(cfg.v_intermediate_size, cfg.v_hidden_size)
        self.t_intermediate = Intermediate(cfg.hidden_size, cfg.intermediate_size)
        self.t_output = DenseNorm(cfg.intermediate_size, cfg.hidden_size)

    def forward(self, image: torch.Tensor, image_add: torch.Tensor, text: torch.Tensor, text_add: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        to_image, to_text = self.biattention(image, image_add, text, text_add)
        o = self.biOutput
        a_img = o.LayerNorm1(o.dense1(to_text) + image)
        a_txt = o.LayerNorm2(o.dense2(to_image) + text)
        return (self.v_output(self.v_intermediate(a_img), a_img), self.t_output(self.t_intermediate(a_txt), a_txt))


class Embeddings(nn.Module):
    def __init__(self, cfg: ViLBertConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size, padding_idx=0)
        self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.hidden_size)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=1e-12)
        if cfg.task_specific_tokens:
            self.task_embeddings = nn.Embedding(20, cfg.hidden_size)

    def forward(self, ids: torch.Tensor, task_id: int | None = None) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)[None]
        x = self.word_embeddings(ids) + self.position_embeddings(pos) + self.token_type_embeddings(torch.zeros_like(ids))
        if hasattr(self, "task_embeddings"):
            task = self.task_embeddings(torch.full((ids.shape[0], 1), int(task_id or 0), device=ids.device))
            x = torch.cat([x[:, :1], task, x[:, 1:]], dim=1)
        return self.LayerNorm(x)


class ImageEmbeddings(nn.Module):
    def __init__(self, cfg: ViLBertConfig) -> None:
        super().__init__()
        self.image_embeddings = nn.Linear(cfg.v_feature_size, cfg.v_hidden_size)
        self.image_location_embeddings = nn.Linear(5, cfg.v_hidden_size)
        self.LayerNorm = nn.LayerNorm(cfg.v_hidden_size, eps=1e-12)

    def forward(self, features: torch.Tensor, loc5: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.image_embeddings(features) + self.image_location_embeddings(loc5))


class Encoder(nn.Module):
    def __init__(self, cfg: ViLBertConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList([Layer(cfg.hidden_size, cfg.num_attention_heads, cfg.intermediate_size)
                                    for _ in range(cfg.num_hidden_layers)])
        dyn = cfg.hidden_size if cfg.dynamic_attention else 0
        self.v_layer = nn.ModuleList([Layer(cfg.v_hidden_size, cfg.v_num_attention_heads, cfg.v_intermediate_size, dyn)
                                      for _ in range(cfg.v_num_hidden_layers)])
        self.c_layer = nn.ModuleList([ConnectionLayer(cfg) for _ in cfg.v_biattention_id])


class Pooler(nn.Module):
    def __init__(self, d_in: int, d_out: int) -> None:
        super().__init__()
        self.dense = nn.Linear(d_in, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.dense(x[:, 0]))


class Bert(nn.Module):
    def __init__(self, cfg: ViLBertConfig) -> None:
        super().__init__()
        self.embeddings = Embeddings(cfg)
        self.v_embeddings = ImageEmbeddings(cfg)
        self.encoder = Encoder(cfg)
        self.t_pooler = Pooler(cfg.hidden_size, cfg.bi_hidden_size)
        self.v_pooler = Pooler(cfg.v_hidden_size, cfg.bi_hidden_size)


class Heads(nn.Module):
    def __init__(self, cfg: ViLBertConfig) -> None:
        super().__init__()
        self.bi_seq_relationship = nn.Linear(cfg.bi_hidden_size, 2)


class ViLBertModel(nn.Module):
    """ViLBERT with the head(s) a checkpoint has: ``cls.bi_seq_relationship`` and/or ``vil_logit``."""

    def __init__(self, cfg: ViLBertConfig, *, itm_head: bool = True, vil_logit: bool = False) -> None:
        super().__init__()
        self.config = cfg
        self.bert = Bert(cfg)
        if itm_head:
            self.cls = Heads(cfg)
        if vil_logit:
            self.vil_logit = nn.Linear(cfg.bi_hidden_size, 1)
        self.steps = schedule(cfg)

    @staticmethod
    def additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return (1.0 - mask[:, None, None, :].to(dtype)) * MASK_VALUE

    def run(
        self, text: torch.Tensor, text_mask: torch.Tensor, image: torch.Tensor, image_mask: torch.Tensor,
        steps: list[tuple[str, int]],
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Run ``steps`` of the schedule; returns the text and image states after each step that
        changed them (in order)."""
        enc = self.bert.encoder
        t_add, v_add = self.additive(text_mask, text.dtype), self.additive(image_mask, image.dtype)
        t_states, v_states = [], []
        for kind, i in steps:
            if kind == "t":
                text = enc.layer[i](text, t_add)
                t_states.append(text)
            elif kind == "v":
                image = enc.v_layer[i](image, v_add, (text, text_mask[..., None].to(text.dtype)))
                v_states.append(image)
            else:
                image, text = enc.c_layer[i](image, v_add, text, t_add)
                t_states.append(text)
                v_states.append(image)
        return t_states, v_states

    def pooled(self, text_last: torch.Tensor, image_last: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Text and image pooled outputs and their fusion (product, or sum)."""
        pt, pv = self.bert.t_pooler(text_last), self.bert.v_pooler(image_last)
        return pt, pv, (pt * pv if self.config.fusion_method == "mul" else pt + pv)
