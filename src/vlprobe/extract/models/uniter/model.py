"""UNITER as a clean-room PyTorch module that loads the official checkpoints.

UNITER (Chen et al., 2020) is a single-stream BERT over ``[CLS] text [SEP]`` followed by image
regions. It is not in transformers, and the official code needs apex and horovod, so vlprobe
carries this module instead. It loads the official ``uniter-base.pt`` / ``uniter-large.pt``
state dicts and their config JSON with no missing keys; the text side has exactly the structure
and key names of ``transformers.BertModel``, which the tests use as an oracle.

Architecture (hidden size H, L layers)
--------------------------------------
- Text embeddings (``uniter.embeddings.*``, BERT's): ``LayerNorm(word + position + type0)``,
  positions ``0 .. T-1``, token type 0.
- Image embeddings (``uniter.img_embeddings.*``): ``LayerNorm(img_layer_norm(img_linear(feat)) +
  pos_layer_norm(pos_linear(pos7)) + type1)`` where ``type1`` is row 1 of the *text* token-type
  embedding table; regions have no position embedding. ``pos7 = (x1, y1, x2, y2, w, h, w*h)``
  with coordinates normalised by the image width/height. ``mask_embedding`` (masked-region
  pretraining) is loaded but never used: probing does not mask regions.
- Joint sequence ``[text padded to T | regions padded to R]`` with a key-padding mask
  ``cat(attention_mask, img_mask)``, added to the attention scores as ``(1 - mask) * -10000``
  (the official constant; finite in float16). The official code packs ``[text_i | regions_i |
  pad]`` per sample instead; both give the same states at valid positions.
- ``L`` post-LN BERT layers (erf GELU), pooler ``tanh(dense(h[:, 0]))`` on the ``[CLS]`` token.
- Score: pretrained checkpoints carry ``itm_output = Linear(H, 2)`` and the match probability is
  ``softmax(itm_output(pooled))[:, 1]``; retrieval-fine-tuned checkpoints carry ``rank_output =
  Linear(H, 1)`` and the probability is ``sigmoid(rank_output(pooled))``.
  :attr:`UniterModel.score_head` says which one a model uses.

Layer numbering
---------------
``hidden_states[0]`` is the embedding output (text and image embeddings, before any block) and
``hidden_states[k]`` the output of block ``k`` (1..L): L + 1 states, 13 for uniter-base. The
official model (and the "Why is Winoground Hard?" code) returns only the L block outputs, indexed
from 0, so **vlprobe layer = paper (WWH) layer index + 1**; WWH's UNITER layer 8 is vlprobe 9.

Loading (:meth:`UniterModel.from_official`)
-------------------------------------------
The ``.pt`` file is a plain ``{name: tensor}`` dict, possibly float16. Keys are normalised as the
official loader does: a leading ``module.`` or ``bert.`` is stripped, LayerNorm ``gamma``/``beta``
become ``weight``/``bias``, and bare body keys (``embeddings.*``, ``encoder.*``, ...) get the
``uniter.`` prefix. Tensors are cast to float32 (or the requested dtype). A missing key is an
error; the pretraining heads ``cls.*``, ``feat_regress.*`` and ``region_classifier.*`` (and the
unused score head) are ignored and listed in :attr:`UniterModel.load_report`; any other extra key
is reported there and in a warning.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vlprobe.extract.models.meta import meta_skeleton
from vlprobe.validation import (
    InputError,
    check_choice,
    check_float,
    check_int,
    check_positive_float,
    check_positive_int,
    check_seed,
)

__all__ = [
    "IGNORED_PREFIXES",
    "MASK_CONSTANT",
    "LoadReport",
    "UniterConfig",
    "UniterModel",
    "UniterOutput",
    "load_official_state_dict",
    "normalize_official_keys",
    "official_key_shapes",
]

#: Additive attention-mask value of masked keys, as in the official code (finite in float16).
MASK_CONSTANT = -10000.0
#: Key prefixes of the official pretraining heads: present in ``uniter-base.pt``, never loaded.
IGNORED_PREFIXES: tuple[str, ...] = ("cls.", "feat_regress.", "region_classifier.")
_BODY_PREFIXES = ("embeddings.", "img_embeddings.", "encoder.", "pooler.")
_SCORE_HEADS = ("itm", "rank")
_REQUIRED_CONFIG_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
_ACTIVATIONS = {
    "gelu": lambda x: F.gelu(x),  # erf form, as the official gelu
    "relu": F.relu,
    "swish": F.silu,
}


# -- config ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class UniterConfig:
    """Hyper-parameters of a UNITER model, as in the official config JSON.

    ``uniter-base.json``: hidden 768, 12 layers, 12 heads, intermediate 3072, vocabulary 28,996
    (bert-base-cased); large: 1024 / 24 / 16 / 4096. ``layer_norm_eps`` and ``img_dim`` are not in
    the official files (constants there) and default to 1e-12 and 2048. Unknown keys are kept in
    ``extra`` and written back by :meth:`to_dict`.
    """

    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    img_dim: int = 2048
    extra: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                     "intermediate_size", "max_position_embeddings", "img_dim"):
            check_positive_int(getattr(self, name), f"config.{name}")
        check_int(self.type_vocab_size, "config.type_vocab_size", low=2, meaning=" (type 1 marks image regions)")
        if self.hidden_size % self.num_attention_heads:
            raise InputError(
                f"config.hidden_size ({self.hidden_size}) must be a multiple of "
                f"config.num_attention_heads ({self.num_attention_heads})"
            )
        if self.hidden_act not in _ACTIVATIONS:
            raise InputError(
                f"config.hidden_act must be one of {sorted(_ACTIVATIONS)}, got {self.hidden_act!r}"
            )
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            check_float(getattr(self, name), f"config.{name}", low=0.0, high=1.0, high_open=True)
        for name in ("initializer_range", "layer_norm_eps"):
            check_positive_float(getattr(self, name), f"config.{name}")
        object.__setattr__(self, "extra", dict(self.extra))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> UniterConfig:
        """Build from the official JSON's dict; unknown keys go to ``extra``.

        Raises
        ------
        InputError
            If a required key (vocab_size, hidden_size, num_hidden_layers, num_attention_heads,
            intermediate_size) is missing or a value is invalid.
        """
        if not isinstance(data, Mapping):
            raise InputError(f"config must be a mapping, got {type(data).__name__}")
        known = {f.name for f in fields(cls)} - {"extra"}
        kwargs = {k: v for k, v in data.items() if k in known}
        extra = {k: v for k, v in data.items() if k not in known}
        missing = [k for k in _REQUIRED_CONFIG_KEYS if k not in kwargs]
        if missing:
            raise InputError(f"config is missing required key(s) {missing} (got keys {sorted(data)})")
        return cls(**kwargs, extra=extra)

    @classmethod
    def from_json(cls, path: str | os.PathLike[str]) -> UniterConfig:
        """Read an official config JSON (``uniter-base.json``)."""
        p = Path(path)
        if not p.is_file():
            raise InputError(f"config: {str(p)!r} is not a file (expected the UNITER config JSON)")
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputError(f"config: {str(p)!r} is not valid JSON ({exc})") from None
        if not isinstance(data, dict):
            raise InputError(f"config: {str(p)!r} must hold a JSON object, got {type(data).__name__}")
        return cls.from_dict(data)

    @classmethod
    def coerce(cls, config: UniterConfig | Mapping[str, Any] | str | os.PathLike[str]) -> UniterConfig:
        """A config from a :class:`UniterConfig`, a dict or a JSON path."""
        if isinstance(config, cls):
            return config
        if isinstance(config, Mapping):
            return cls.from_dict(config)
        if isinstance(config, str | os.PathLike):
            return cls.from_json(config)
        raise InputError(
            f"config must be a UniterConfig, a dict or a path to the config JSON, got {type(config).__name__}"
        )

    def to_dict(self) -> dict[str, Any]:
        """The official JSON keys plus ``layer_norm_eps``, ``img_dim`` and the extra keys."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        out.update(self.extra)
        return out


# -- modules (attribute names are the official state-dict names) ---------------------------------


class _TextEmbeddings(nn.Module):
    def __init__(self, c: UniterConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(c.vocab_size, c.hidden_size, padding_idx=0)
        self.position_embeddings = nn.Embedding(c.max_position_embeddings, c.hidden_size)
        self.token_type_embeddings = nn.Embedding(c.type_vocab_size, c.hidden_size)
        self.LayerNorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.dropout = nn.Dropout(c.hidden_dropout_prob)

    def forward(self, input_ids: Tensor) -> Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions)[None]
        x = x + self.token_type_embeddings.weight[0]
        return self.dropout(self.LayerNorm(x))


class _ImageEmbeddings(nn.Module):
    def __init__(self, c: UniterConfig) -> None:
        super().__init__()
        self.img_linear = nn.Linear(c.img_dim, c.hidden_size)
        self.img_layer_norm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.pos_layer_norm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.pos_linear = nn.Linear(7, c.hidden_size)
        self.mask_embedding = nn.Embedding(2, c.img_dim, padding_idx=0)
        self.LayerNorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.dropout = nn.Dropout(c.hidden_dropout_prob)

    def forward(self, img_feat: Tensor, img_pos_feat: Tensor, type_embedding: Tensor) -> Tensor:
        x = self.img_layer_norm(self.img_linear(img_feat))
        x = x + self.pos_layer_norm(self.pos_linear(img_pos_feat)) + type_embedding
        return self.dropout(self.LayerNorm(x))


class _SelfAttention(nn.Module):
    def __init__(self, c: UniterConfig) -> None:
        super().__init__()
        self.num_heads = c.num_attention_heads
        self.query = nn.Linear(c.hidden_size, c.hidden_size)
        self.key = nn.Linear(c.hidden_size, c.hidden_size)
        self.value = nn.Linear(c.hidden_size, c.hidden_size)
        self.dropout_p = c.attention_probs_dropout_prob

    def forward(self, x: Tensor, additive_mask: Tensor, n_queries: int | None = None) -> Tensor:
        """(B, S, H) -> (B, Q, H): the first ``n_queries`` positions (default all) attending to all S."""
        b, _, h = x.shape
        q_in = x if n_queries is None else x[:, :n_queries]
        heads = lambda t: t.view(b, t.shape[1], self.num_heads, h // self.num_heads).transpose(1, 2)  # noqa: E731
        q, k, v = heads(self.query(q_in)), heads(self.key(x)), heads(self.value(x))
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=additive_mask, dropout_p=self.dropout_p if self.training else 0.0
        )
        return out.transpose(1, 2).reshape(b, q_in.shape[1], h)


class _DenseNorm(nn.Module):
    """``LayerNorm(dropout(dense(x)) + residual)``: BERT's attention and layer outputs."""

    def __init__(self, n_in: int, c: UniterConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(n_in, c.hidden_size)
        self.LayerNorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.dropout = nn.Dropout(c.hidden_dropout_prob)

    def forward(self, x: Tensor, residual: Tensor) -> Tensor:
        return self.LayerNorm(self.dropout(self.dense(x)) + residual)


class _Attention(nn.Module):
    def __init__(self, c: UniterConfig) -> None:
        super().__init__()
        self.self = _SelfAttention(c)
        self.output = _DenseNorm(c.hidden_size, c)

    def forward(self, x: Tensor, additive_mask: Tensor) -> Tensor:
        return self.output(self.self(x, additive_mask), x)


class _Intermediate(nn.Module):
    def __init__(self, c: UniterConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(c.hidden_size, c.intermediate_size)
        self.act = _ACTIVATIONS[c.hidden_act]

    def forward(self, x: Tensor) -> Tensor:
        return self.act(self.dense(x))


class _Layer(nn.Module):
    def __init__(self, c: UniterConfig) -> None:
        super().__init__()
        self.attention = _Attention(c)
        self.intermediate = _Intermediate(c)
        self.output = _DenseNorm(c.intermediate_size, c)

    def forward(self, x: Tensor, additive_mask: Tensor) -> Tensor:
        a = self.attention(x, additive_mask)
        return self.output(self.intermediate(a), a)


class _Encoder(nn.Module):
    def __init__(self, c: UniterConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList(_Layer(c) for _ in range(c.num_hidden_layers))


class _Pooler(nn.Module):
    def __init__(self, c: UniterConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(c.hidden_size, c.hidden_size)

    def forward(self, first_token: Tensor) -> Tensor:
        return torch.tanh(self.dense(first_token))


class _Body(nn.Module):
    """The ``uniter.*`` part of the official state dict."""

    def __init__(self, c: UniterConfig) -> None:
        super().__init__()
        self.embeddings = _TextEmbeddings(c)
        self.img_embeddings = _ImageEmbeddings(c)
        self.encoder = _Encoder(c)
        self.pooler = _Pooler(c)


# -- outputs and load report -----------------------------------------------------------------------


@dataclass
class UniterOutput:
    """What :meth:`UniterModel.forward` returns (B pairs, T text and R region positions).

    Attributes
    ----------
    hidden_states : tuple of Tensor or None
        L + 1 tensors (B, T + R, H): the embedding output first, then each block's output; text
        positions ``[:, :T]``, regions ``[:, T:]``, in the padded layout of the inputs (states
        at padded positions are finite but meaningless). None with ``output_hidden_states=False``.
    last_hidden_state : Tensor
        (B, T + R, H), the last block's output.
    pooled : Tensor
        (B, H), ``tanh(pooler.dense(last_hidden_state[:, 0]))``.
    itm_logits : Tensor or None
        (B, 2) ITM logits (index 1 = match) of a model with the ``itm`` score head, else None.
    rank_logits : Tensor or None
        (B,) retrieval logits of a model with the ``rank`` score head, else None.
    match_prob : Tensor
        (B,) float32 match probability: ``softmax(itm_logits)[:, 1]`` or ``sigmoid(rank_logits)``.
    joint_mask : Tensor
        (B, T + R) bool, True at valid text and region positions.
    text_length : int
        T, where the region positions start.
    """

    hidden_states: tuple[Tensor, ...] | None
    last_hidden_state: Tensor
    pooled: Tensor
    itm_logits: Tensor | None
    rank_logits: Tensor | None
    match_prob: Tensor
    joint_mask: Tensor
    text_length: int

    def text_states(self, layer: int) -> Tensor:
        """(B, T, H) text view of ``hidden_states[layer]``."""
        return self._layer(layer)[:, : self.text_length]

    def image_states(self, layer: int) -> Tensor:
        """(B, R, H) region view of ``hidden_states[layer]``."""
        return self._layer(layer)[:, self.text_length :]

    def _layer(self, layer: int) -> Tensor:
        if self.hidden_states is None:
            raise InputError("layer states were not kept: call forward with output_hidden_states=True")
        if not -len(self.hidden_states) <= layer < len(self.hidden_states):
            raise InputError(f"layer must be in [0, {len(self.hidden_states) - 1}], got {layer}")
        return self.hidden_states[layer]


@dataclass(frozen=True)
class LoadReport:
    """How an official checkpoint was read.

    Attributes
    ----------
    score_head : {"itm", "rank"}
        The head the model scores with.
    ignored : tuple of str
        Keys deliberately not loaded: pretraining heads and the unused score head.
    unexpected : tuple of str
        Other keys of the checkpoint that the model does not have (not loaded).
    renamed : int
        LayerNorm ``gamma``/``beta`` keys renamed to ``weight``/``bias``.
    source_dtypes : tuple of str
        Dtypes of the checkpoint's tensors (before the cast).
    """

    score_head: str
    ignored: tuple[str, ...]
    unexpected: tuple[str, ...]
    renamed: int
    source_dtypes: tuple[str, ...]


# -- the model -------------------------------------------------------------------------------------


class UniterModel(nn.Module):
    """UNITER body, pooler and one score head, with the official state-dict key names.

    Parameters
    ----------
    config : UniterConfig, dict or path
        Hyper-parameters (see :class:`UniterConfig`).
    score_head : {"itm", "rank"}
        ``itm``: ``itm_output = Linear(H, 2)`` of pretrained checkpoints; ``rank``:
        ``rank_output = Linear(H, 1)`` of retrieval-fine-tuned ones.
    seed : int
        Seed of the random initialisation (BERT's: normal(0, initializer_range) weights, zero
        biases, unit LayerNorms), drawn from a private generator; the global RNG is untouched.

    Use :meth:`from_official` to load real weights. The model is returned in eval mode.
    :meth:`forward` returns L + 1 hidden states: layer 0 is the embedding output, layer k the
    output of block k, so vlprobe layer = paper (WWH) layer index + 1.
    """

    def __init__(
        self,
        config: UniterConfig | Mapping[str, Any] | str | os.PathLike[str],
        score_head: str = "itm",
        *,
        seed: int = 0,
        _materialize: bool = True,
    ) -> None:
        super().__init__()
        config = UniterConfig.coerce(config)
        check_choice(score_head, "score_head", _SCORE_HEADS, kind="score head")
        check_seed(seed)
        self.config = config
        self.score_head = score_head
        self.load_report: LoadReport | None = None
        with meta_skeleton():  # no global-RNG init; materialised (or assigned) below
            self.uniter = _Body(config)
            if score_head == "itm":
                self.itm_output = nn.Linear(config.hidden_size, 2)
            else:
                self.rank_output = nn.Linear(config.hidden_size, 1)
        if _materialize:
            self.to_empty(device="cpu")
            self._init_weights(seed)
        self.eval()

    @torch.no_grad()
    def _init_weights(self, seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        std = self.config.initializer_range
        for module in self.modules():
            if isinstance(module, nn.LayerNorm):
                module.weight.fill_(1.0)
                module.bias.zero_()
            elif isinstance(module, nn.Linear | nn.Embedding):
                module.weight.copy_(torch.randn(module.weight.shape, generator=gen) * std)
                if isinstance(module, nn.Linear):
                    module.bias.zero_()

    # -- loading --------------------------------------------------------------------------------

    @classmethod
    def from_official(
        cls,
        checkpoint: str | os.PathLike[str] | Mapping[str, Tensor],
        config: UniterConfig | Mapping[str, Any] | str | os.PathLike[str],
        *,
        score_head: str = "auto",
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
    ) -> UniterModel:
        """Load an official UNITER checkpoint.

        Parameters
        ----------
        checkpoint : path or mapping
            ``uniter-base.pt`` (a plain ``{name: tensor}`` dict, fp16 or fp32) or the loaded dict.
        config : path, mapping or UniterConfig
            ``uniter-base.json`` or its contents.
        score_head : {"auto", "itm", "rank"}
            ``auto`` takes ``rank_output`` when the checkpoint has it (retrieval fine-tuning keeps
            a stale ``itm_output`` beside it), else ``itm_output``.
        dtype : torch.dtype
            Floating dtype of the loaded weights (float32 by default, whatever the file holds).
        device : str or torch.device

        Returns
        -------
        UniterModel
            In eval mode, with :attr:`load_report` set.

        Raises
        ------
        InputError
            If the checkpoint lacks keys the model needs (one line naming the first few), a shape
            disagrees with the config, or the file cannot be read.
        """
        if score_head not in ("auto", *_SCORE_HEADS):
            raise InputError(f"score_head must be 'auto', 'itm' or 'rank', got {score_head!r}")
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise InputError(f"dtype must be a floating torch.dtype, got {dtype!r}")
        config = UniterConfig.coerce(config)
        raw = load_official_state_dict(checkpoint)
        state, renamed = normalize_official_keys(raw)
        if score_head == "auto":
            score_head = "rank" if "rank_output.weight" in state else "itm"
        model = cls(config, score_head, _materialize=False)

        expected = model.state_dict()  # meta tensors: names and shapes only
        missing = [k for k in expected if k not in state]
        if missing:
            shown = ", ".join(missing[:4]) + (f", ... ({len(missing)} in all)" if len(missing) > 4 else "")
            raise InputError(
                f"checkpoint: {len(missing)} key(s) the UNITER model ({score_head} score head) needs "
                f"are missing: {shown}"
            )
        for k, ref in expected.items():
            if tuple(state[k].shape) != tuple(ref.shape):
                raise InputError(
                    f"checkpoint: {k} has shape {tuple(state[k].shape)} but the config implies "
                    f"{tuple(ref.shape)} (does the config JSON belong to this checkpoint?)"
                )
        other_head = "itm_output." if score_head == "rank" else "rank_output."
        extra = [k for k in state if k not in expected]
        ignored = tuple(k for k in extra if k.startswith((*IGNORED_PREFIXES, other_head)))
        unexpected = tuple(k for k in extra if k not in ignored)
        if unexpected:
            shown = ", ".join(unexpected[:4]) + (", ..." if len(unexpected) > 4 else "")
            warnings.warn(
                f"UNITER checkpoint has {len(unexpected)} unexpected key(s), not loaded: {shown}",
                stacklevel=2,
            )
        source_dtypes = tuple(sorted({str(state[k].dtype).removeprefix("torch.") for k in expected}))
        weights = {}
        for k in expected:
            t = state[k].to(dtype) if state[k].is_floating_point() else state[k]
            weights[k] = t.clone() if t is state[k] else t.contiguous()  # never alias the caller's dict
        model.load_state_dict(weights, strict=True, assign=True)
        model.to(device)
        model.load_report = LoadReport(score_head, ignored, unexpected, renamed, source_dtypes)
        return model.eval()

    # -- forward pieces (public so a runner can embed texts and images once and combine them) ---

    @property
    def hidden_size(self) -> int:
        return self.config.hidden_size

    @property
    def num_layers(self) -> int:
        """L, the number of blocks; ``forward`` returns L + 1 hidden states."""
        return self.config.num_hidden_layers

    def embed_text(self, input_ids: Tensor) -> Tensor:
        """(B, T) token ids -> (B, T, H) text embeddings (positions 0..T-1, token type 0)."""
        return self.uniter.embeddings(input_ids)

    def embed_image(self, img_feat: Tensor, img_pos_feat: Tensor) -> Tensor:
        """(B, R, img_dim) features and (B, R, 7) boxes -> (B, R, H) region embeddings (type 1)."""
        dtype = self.uniter.img_embeddings.img_linear.weight.dtype
        type1 = self.uniter.embeddings.token_type_embeddings.weight[1]
        return self.uniter.img_embeddings(img_feat.to(dtype), img_pos_feat.to(dtype), type1)

    def encode(
        self, embeddings: Tensor, joint_mask: Tensor, *, output_hidden_states: bool = True
    ) -> tuple[Tensor, tuple[Tensor, ...] | None]:
        """Run the blocks over (B, S, H) embeddings with a (B, S) key mask (1/True = valid).

        Returns the last block's output and, when asked, the L + 1 states (embeddings first).
        """
        additive = (1.0 - joint_mask.to(embeddings.dtype))[:, None, None, :] * MASK_CONSTANT
        states = [embeddings] if output_hidden_states else None
        x = embeddings
        for layer in self.uniter.encoder.layer:
            x = layer(x, additive)
            if states is not None:
                states.append(x)
        return x, (tuple(states) if states is not None else None)

    def score(self, pooled: Tensor) -> tuple[Tensor | None, Tensor | None, Tensor]:
        """(B, H) pooled -> (itm_logits (B, 2) or None, rank_logits (B,) or None, match_prob (B,))."""
        if self.score_head == "itm":
            logits = self.itm_output(pooled)
            return logits, None, torch.softmax(logits.float(), dim=-1)[:, 1]
        rank = self.rank_output(pooled)[:, 0]
        return None, rank, torch.sigmoid(rank.float())

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor,
        img_feat: Tensor | None = None,
        img_pos_feat: Tensor | None = None,
        img_mask: Tensor | None = None,
        *,
        output_hidden_states: bool = True,
    ) -> UniterOutput:
        """Encode B (text, region set) pairs.

        Parameters
        ----------
        input_ids : Tensor
            (B, T) int token ids, ``[CLS] ... [SEP]`` then padding.
        attention_mask : Tensor
            (B, T), 1/True at real tokens; position 0 must be valid (it is pooled).
        img_feat : Tensor or None
            (B, R, img_dim) region features; None (with the other two None) for no regions.
        img_pos_feat : Tensor or None
            (B, R, 7) normalised boxes ``(x1, y1, x2, y2, w, h, w*h)``.
        img_mask : Tensor or None
            (B, R), 1/True at real regions, 0 at padding.
        output_hidden_states : bool
            Keep all L + 1 states (False keeps only the last, for scoring).

        Returns
        -------
        UniterOutput
        """
        regions = self._check_inputs(input_ids, attention_mask, img_feat, img_pos_feat, img_mask)
        text = self.embed_text(input_ids)
        if regions is None:
            return self.forward_embeddings(text, attention_mask, output_hidden_states=output_hidden_states)
        feat, pos, mask = regions
        return self.forward_embeddings(
            text, attention_mask, self.embed_image(feat, pos), mask, output_hidden_states=output_hidden_states
        )

    def forward_embeddings(
        self,
        text_embeddings: Tensor,
        attention_mask: Tensor,
        image_embeddings: Tensor | None = None,
        img_mask: Tensor | None = None,
        *,
        output_hidden_states: bool = True,
    ) -> UniterOutput:
        """:meth:`forward` from precomputed embeddings.

        A pair runner can embed each caption (:meth:`embed_text`) and each region set
        (:meth:`embed_image`) once and index them per batch of pairs; the result equals
        :meth:`forward` on the same inputs.

        Parameters
        ----------
        text_embeddings : Tensor
            (B, T, H) from :meth:`embed_text`.
        attention_mask : Tensor
            (B, T), 1/True at real tokens.
        image_embeddings : Tensor or None
            (B, R, H) from :meth:`embed_image`, or None for no regions.
        img_mask : Tensor or None
            (B, R), 1/True at real regions (None when ``image_embeddings`` is None).
        output_hidden_states : bool

        Returns
        -------
        UniterOutput
        """
        if text_embeddings.dim() != 3 or tuple(attention_mask.shape) != tuple(text_embeddings.shape[:2]):
            raise InputError(
                f"text_embeddings (B, T, H) and attention_mask (B, T) disagree: "
                f"{tuple(text_embeddings.shape)} vs {tuple(attention_mask.shape)}"
            )
        t = text_embeddings.shape[1]
        if image_embeddings is None:
            if img_mask is not None:
                raise InputError("img_mask must be None when image_embeddings is None")
            emb, mask = text_embeddings, attention_mask.bool()
        else:
            if img_mask is None or tuple(img_mask.shape) != tuple(image_embeddings.shape[:2]) \
                    or image_embeddings.shape[0] != text_embeddings.shape[0]:
                raise InputError(
                    f"image_embeddings must be (B, R, H) with img_mask (B, R) and B = "
                    f"{text_embeddings.shape[0]}, got {tuple(image_embeddings.shape)} and "
                    f"{None if img_mask is None else tuple(img_mask.shape)}"
                )
            emb = torch.cat([text_embeddings, image_embeddings.to(text_embeddings.dtype)], dim=1)
            mask = torch.cat([attention_mask.bool(), img_mask.bool()], dim=1)
        last, states = self.encode(emb, mask, output_hidden_states=output_hidden_states)
        pooled = self.uniter.pooler(last[:, 0])
        itm, rank, prob = self.score(pooled)
        return UniterOutput(states, last, pooled, itm, rank, prob, mask, t)

    def _check_inputs(
        self,
        input_ids: Tensor,
        attention_mask: Tensor,
        img_feat: Tensor | None,
        img_pos_feat: Tensor | None,
        img_mask: Tensor | None,
    ) -> tuple[Tensor, Tensor, Tensor] | None:
        """The region inputs (features, boxes, mask) when given, after checking every shape."""
        for name, value in (("input_ids", input_ids), ("attention_mask", attention_mask)):
            if not isinstance(value, Tensor):
                raise InputError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
        if input_ids.dim() != 2 or input_ids.shape[1] == 0:
            raise InputError(f"input_ids must have shape (B, T) with T >= 1, got {tuple(input_ids.shape)}")
        if input_ids.is_floating_point() or input_ids.is_complex():
            raise InputError(f"input_ids must hold integer token ids, got dtype {input_ids.dtype}")
        b, t = input_ids.shape
        if t > self.config.max_position_embeddings:
            raise InputError(
                f"input_ids has {t} positions but the model has {self.config.max_position_embeddings}"
            )
        if tuple(attention_mask.shape) != (b, t):
            raise InputError(f"attention_mask must have shape {(b, t)}, got {tuple(attention_mask.shape)}")
        if img_feat is None or img_pos_feat is None or img_mask is None:
            if img_feat is not None or img_pos_feat is not None or img_mask is not None:
                raise InputError("img_feat, img_pos_feat and img_mask must be given together (or all None)")
            return None
        for name, value in (("img_feat", img_feat), ("img_pos_feat", img_pos_feat), ("img_mask", img_mask)):
            if not isinstance(value, Tensor):
                raise InputError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
        if img_feat.dim() != 3 or img_feat.shape[0] != b or img_feat.shape[2] != self.config.img_dim:
            raise InputError(
                f"img_feat must have shape ({b}, R, {self.config.img_dim}), got {tuple(img_feat.shape)}"
            )
        r = img_feat.shape[1]
        if tuple(img_pos_feat.shape) != (b, r, 7):
            raise InputError(
                f"img_pos_feat must have shape {(b, r, 7)} (x1, y1, x2, y2, w, h, w*h), "
                f"got {tuple(img_pos_feat.shape)}"
            )
        if tuple(img_mask.shape) != (b, r):
            raise InputError(f"img_mask must have shape {(b, r)}, got {tuple(img_mask.shape)}")
        return img_feat, img_pos_feat, img_mask


# -- official checkpoint files -------------------------------------------------------------------


def official_key_shapes(
    config: UniterConfig | Mapping[str, Any] | str | os.PathLike[str], score_head: str = "itm"
) -> dict[str, tuple[int, ...]]:
    """Every key :meth:`UniterModel.from_official` needs, with its shape, in state-dict order.

    Computed without allocating weights. Pretraining heads are not included.
    """
    model = UniterModel(config, score_head, _materialize=False)
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def load_official_state_dict(checkpoint: str | os.PathLike[str] | Mapping[str, Any]) -> dict[str, Tensor]:
    """Read an official UNITER ``.pt`` file (or take a loaded dict) as ``{name: tensor}``.

    Raises
    ------
    InputError
        If the path is not a readable torch file or does not hold a dict of tensors, or
        ``checkpoint`` is neither a path nor a mapping.
    """
    if isinstance(checkpoint, str | os.PathLike):
        p = Path(checkpoint)
        if not p.is_file():
            raise InputError(f"checkpoint: {str(p)!r} is not a file (expected a UNITER .pt state dict)")
        try:
            state = torch.load(p, map_location="cpu", weights_only=True)
        except Exception as exc:  # torch raises several types for a bad file
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise InputError(f"checkpoint: cannot read {str(p)!r} as a torch state dict ({first})") from None
    elif isinstance(checkpoint, Mapping):
        state = checkpoint
    else:
        raise InputError(
            f"checkpoint must be a path or a state dict, got {type(checkpoint).__name__}"
        )
    if not isinstance(state, Mapping):
        raise InputError(f"checkpoint must hold a dict of tensors, got {type(state).__name__}")
    bad = [k for k, v in state.items() if not isinstance(k, str) or not isinstance(v, Tensor)]
    if bad:
        raise InputError(
            f"checkpoint must map names to tensors; {len(bad)} entr(y/ies) do not, e.g. {bad[0]!r}"
        )
    return dict(state)


def normalize_official_keys(state: Mapping[str, Tensor]) -> tuple[dict[str, Tensor], int]:
    """Official key normalisation: strip ``module.``/``bert.``, ``gamma``/``beta`` -> ``weight``/``bias``.

    Bare body keys (``embeddings.*``, ``img_embeddings.*``, ``encoder.*``, ``pooler.*``) get the
    ``uniter.`` prefix.

    Returns
    -------
    dict, int
        The renamed state dict (same tensors) and the number of gamma/beta renames.

    Raises
    ------
    InputError
        If two keys map to the same name.
    """
    out: dict[str, Tensor] = {}
    renamed = 0
    for key, value in state.items():
        new = key.removeprefix("module.").removeprefix("bert.")
        head, _, last = new.rpartition(".")
        if last in ("gamma", "beta"):
            new = f"{head}.{'weight' if last == 'gamma' else 'bias'}" if head else last
            renamed += 1
        if new.startswith(_BODY_PREFIXES):
            new = "uniter." + new
        if new in out:
            raise InputError(f"checkpoint: keys collide after normalisation: {key!r} -> {new!r}")
        out[new] = value
    return out, renamed
