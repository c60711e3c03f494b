"""Blind (text-only) baselines: models that score a caption without looking at the image.

A benchmark item is "solved blind" when the correct caption simply reads better than the wrong
one. Three registered models (``probe eval ... --model NAME``):

``blind-lm``        token-normalised log-likelihood under any Hugging Face causal LM (directory
                    or hub id): score = mean over the text's tokens of log p(token | preceding
                    tokens), the first token conditioned on the model's BOS (or EOS) token; texts
                    longer than the model's positions are truncated. It is
                    minus the log of the per-token perplexity, so higher = more plausible.
``blind-grammar``   P(acceptable) of any Hugging Face sequence classifier (e.g. a CoLA model).
                    Which label means "acceptable" is read from ``config.id2label`` (a label named
                    acceptable / grammatical / correct / ok), taken as ``LABEL_1`` for a two-label
                    model with generic names (the CoLA convention), or given explicitly with
                    ``acceptable_label`` (a label name or index); anything else is refused.
``caption-length``  minus the caption's length in characters (shorter reads as more plausible;
                    no checkpoint).

They score texts, not pairs (:meth:`TextScorer.score_texts`), and have no hidden-state streams:
``probe extract`` refuses them with one line.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from vlprobe.extract.models.hf import ResolvedCheckpoint, resolve_checkpoint
from vlprobe.validation import InputError, check_positive_int

__all__ = ["CaptionLengthScorer", "CausalLMScorer", "GrammarScorer", "SequenceClassifierScorer", "TextScorer"]

_ALLOW = ["*.json", "*.txt", "*.safetensors", "*.model", "*.bin"]
_ACCEPTABLE = re.compile(r"^(acceptable|grammatical|correct|ok|yes|positive)$", re.IGNORECASE)


class TextScorer:
    """Base of the blind baselines: one score per text, higher = more plausible."""

    name: ClassVar[str] = ""
    score_kind: ClassVar[str] = ""
    #: Blind baselines never look at the image (see ``Adapter.image_input``).
    image_input: ClassVar[str] = "none"
    #: Extra keyword arguments :meth:`load` accepts.
    load_options: ClassVar[tuple[str, ...]] = ()
    #: The dtype the reference code loads the model in (see ``Adapter.reference_dtype``).
    reference_dtype: ClassVar[str] = "float32"

    checkpoint: ResolvedCheckpoint | None = None

    @classmethod
    def load(cls, checkpoint: str | None, *, device: str = "auto", dtype: str = "float32", **options: Any) -> TextScorer:
        raise NotImplementedError

    def score_texts(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """Scores of ``texts``, shape (len(texts),), float64."""
        raise NotImplementedError

    @property
    def streams(self) -> dict[str, Any]:
        raise InputError(
            f"model {self.name!r} is a blind text-only baseline for `probe eval`; it has no hidden-state "
            "streams to extract"
        )

    def describe(self) -> dict[str, Any]:
        return {}


def _load_hf(checkpoint: str | None, name: str, device: str, dtype: str) -> tuple[ResolvedCheckpoint, Any, Any]:
    from vlprobe.devices import resolve_device, resolve_dtype

    if not checkpoint:
        raise InputError(f"checkpoint: model {name!r} needs --checkpoint (a Hugging Face directory or hub id)")
    return resolve_checkpoint(checkpoint, allow_patterns=_ALLOW), resolve_device(device), resolve_dtype(dtype)


def _refuse_new_weights(loading: dict[str, Any], checkpoint: str | None, what: str) -> None:
    """A checkpoint of another kind loads with a freshly initialised head: refuse it, naming the weights."""
    missing = sorted(loading.get("missing_keys", []))  # a set in transformers: sorted, the message is the same each run
    if missing:
        raise InputError(
            f"checkpoint: {checkpoint!r} is not {what}: it lacks {len(missing)} weight(s) such as {missing[0]!r}, "
            "which would be random"
        )


def _first_line(exc: BaseException) -> str:
    """The first line of an exception's message (transformers' end in long lists of model types)."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _check_texts(texts: Sequence[str], batch_size: int) -> list[str]:
    check_positive_int(batch_size, "batch_size")
    out = list(texts)
    for t in out:
        if not isinstance(t, str):
            raise InputError(f"texts must be strings, got {type(t).__name__}")
    return out


class CausalLMScorer(TextScorer):
    """Blind baseline: token-normalised log-likelihood under a causal LM (any HF causal LM)."""

    name = "blind-lm"
    score_kind = "mean_token_logprob"

    def __init__(self, model: Any, tokenizer: Any, checkpoint: ResolvedCheckpoint, device: Any) -> None:
        self.model, self.tokenizer, self.checkpoint, self.device = model, tokenizer, checkpoint, device
        cfg = model.config
        self.max_length = int(getattr(cfg, "n_positions", None) or getattr(cfg, "max_position_embeddings", None) or 1024)
        context = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
        self.context_id: int | None = None if context is None else int(context)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.context_id
        self.pad_id = 0 if pad is None else int(pad)

    @classmethod
    def load(cls, checkpoint: str | None, *, device: str = "auto", dtype: str = "float32", **options: Any) -> CausalLMScorer:
        if options:
            raise InputError(f"model 'blind-lm' takes no options, got {sorted(options)}")
        return cls(*cls.load_causal_lm(checkpoint, device, dtype))

    @classmethod
    def load_causal_lm(cls, checkpoint: str | None, device: str, dtype: str) -> tuple[Any, Any, ResolvedCheckpoint, Any]:
        """A Hugging Face causal LM, its tokenizer, the resolved checkpoint and the device
        (a checkpoint of another kind, or one whose LM head would be new, is refused)."""
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

        from vlprobe.extract.models.hf import (
            from_pretrained_with_info,
            quiet_transformers,
            reading_weights,
        )

        ckpt, dev, torch_dtype = _load_hf(checkpoint, cls.name, device, dtype)
        with quiet_transformers(), reading_weights(str(checkpoint)):
            try:
                AutoConfig.from_pretrained(ckpt.path)
                model, loading = from_pretrained_with_info(AutoModelForCausalLM, ckpt.path, checkpoint=str(checkpoint),
                                                           dtype=torch_dtype)
            except InputError:
                raise
            except (OSError, ValueError, KeyError) as exc:
                raise InputError(f"checkpoint: {checkpoint!r} is not a causal language model ({_first_line(exc)})") from None
            _refuse_new_weights(loading, checkpoint, "a causal language model")
            model = model.to(dev).eval()
            tokenizer = AutoTokenizer.from_pretrained(ckpt.path)
        return model, tokenizer, ckpt, dev

    def _ids(self, text: str) -> list[int]:
        room = self.max_length - (self.context_id is not None)
        ids = list(self.tokenizer(text, add_special_tokens=False, truncation=True, max_length=room)["input_ids"])
        if self.context_id is not None:
            ids = [self.context_id, *ids]
        if len(ids) < 2:
            raise InputError(
                f"texts: {text!r} gives no token to score under {self.checkpoint.spec if self.checkpoint else 'the model'!r}"
            )
        return ids

    def score_texts(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        import torch

        texts = _check_texts(texts, batch_size)
        out = np.empty(len(texts), dtype=np.float64)
        with torch.inference_mode():
            for start in range(0, len(texts), batch_size):
                seqs = [self._ids(t) for t in texts[start : start + batch_size]]
                width = max(len(s) for s in seqs)
                ids = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)
                mask = torch.zeros((len(seqs), width), dtype=torch.long)
                for r, s in enumerate(seqs):
                    ids[r, : len(s)] = torch.tensor(s)
                    mask[r, : len(s)] = 1
                ids, mask = ids.to(self.device), mask.to(self.device)
                logits = self.model(input_ids=ids, attention_mask=mask).logits.float()
                logp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None])[..., 0]
                target = mask[:, 1:].float()
                mean = (logp * target).sum(1) / target.sum(1)
                out[start : start + len(seqs)] = mean.double().cpu().numpy()
        return out

    def describe(self) -> dict[str, Any]:
        return {"model_class": type(self.model).__name__, "context_token_id": self.context_id,
                "max_length": self.max_length, "score": "mean log p(token | prefix) over the text's tokens"}


class SequenceClassifierScorer(TextScorer):
    """Blind baseline: P(acceptable) of a sequence classifier (e.g. a CoLA grammar model)."""

    name = "blind-grammar"
    score_kind = "p_acceptable"
    load_options = ("acceptable_label",)

    def __init__(self, model: Any, tokenizer: Any, checkpoint: ResolvedCheckpoint, device: Any, label_index: int) -> None:
        self.model, self.tokenizer, self.checkpoint, self.device = model, tokenizer, checkpoint, device
        self.label_index = label_index
        from vlprobe.extract.models.base import text_max_length

        self.max_length = text_max_length(tokenizer, getattr(model.config, "max_position_embeddings", 512))

    @staticmethod
    def acceptable_index(id2label: dict[Any, str], acceptable_label: str | int | None = None) -> int:
        """Index of the "acceptable" class (see the module docstring for the rule)."""
        labels = {int(k): str(v) for k, v in id2label.items()}
        shown = ", ".join(f"{k}: {v}" for k, v in sorted(labels.items()))
        if acceptable_label is not None:
            text = str(acceptable_label)
            if text.isdigit() and int(text) in labels:
                return int(text)
            named = [k for k, v in labels.items() if v == text]
            if len(named) == 1:
                return named[0]
            raise InputError(f"acceptable_label: {acceptable_label!r} is neither a label nor an index of id2label ({shown})")
        named = [k for k, v in labels.items() if _ACCEPTABLE.match(v.strip())]
        if len(named) == 1:
            return named[0]
        if sorted(labels.items()) == [(0, "LABEL_0"), (1, "LABEL_1")]:
            return 1  # generic names: CoLA models label acceptable sentences 1
        raise InputError(
            f"acceptable_label: cannot tell which class means acceptable from id2label ({shown}); "
            "pass --acceptable-label NAME_OR_INDEX"
        )

    @classmethod
    def load(
        cls, checkpoint: str | None, *, device: str = "auto", dtype: str = "float32",
        acceptable_label: str | int | None = None, **options: Any,
    ) -> SequenceClassifierScorer:
        if options:
            raise InputError(f"model {cls.name!r} takes only acceptable_label, got {sorted(options)}")
        from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

        from vlprobe.extract.models.hf import (
            from_pretrained_with_info,
            quiet_transformers,
            reading_weights,
        )

        ckpt, dev, torch_dtype = _load_hf(checkpoint, cls.name, device, dtype)
        with quiet_transformers(), reading_weights(str(checkpoint)):
            try:
                config = AutoConfig.from_pretrained(ckpt.path)
            except (OSError, ValueError, KeyError) as exc:  # no config.json, or one of no Hugging Face model
                raise InputError(f"checkpoint: {checkpoint!r} is not a sequence classifier ({_first_line(exc)})") from None
            index = cls.acceptable_index(getattr(config, "id2label", None) or {}, acceptable_label)
            try:
                model, loading = from_pretrained_with_info(AutoModelForSequenceClassification, ckpt.path,
                                                           checkpoint=str(checkpoint), dtype=torch_dtype)
            except InputError:
                raise
            except (OSError, ValueError, KeyError) as exc:  # e.g. a CLIP or LXMERT folder: no classifier class
                raise InputError(
                    f"checkpoint: {checkpoint!r} is not a sequence classifier (a {config.model_type!r} model: "
                    f"{_first_line(exc)})"
                ) from None
            _refuse_new_weights(loading, checkpoint, "a trained sequence classifier")
            model = model.to(dev).eval()
            tokenizer = AutoTokenizer.from_pretrained(ckpt.path)
        return cls(model, tokenizer, ckpt, dev, index)

    def score_texts(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        import torch

        texts = _check_texts(texts, batch_size)
        out = np.empty(len(texts), dtype=np.float64)
        with torch.inference_mode():
            for start in range(0, len(texts), batch_size):
                batch = texts[start : start + batch_size]
                tok = self.tokenizer(
                    batch, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt",
                    padding_side="right",  # absolute positions: a text's score must not depend on its batch
                )
                tok = {k: v.to(self.device) for k, v in tok.items()}
                logits = self.model(**tok).logits.float()
                out[start : start + len(batch)] = torch.softmax(logits, -1)[:, self.label_index].double().cpu().numpy()
        return out

    def describe(self) -> dict[str, Any]:
        return {"model_class": type(self.model).__name__, "acceptable_index": self.label_index,
                "acceptable_label": str(self.model.config.id2label[self.label_index])}


class GrammarScorer(SequenceClassifierScorer):
    """SugarCrepe's grammar baseline: P(LABEL_1) of textattack/distilbert-base-uncased-CoLA (by default)."""

    name = "grammar"
    #: The checkpoint SugarCrepe's ``text_model_eval.py`` loads, taken when none is given.
    default_checkpoint = "textattack/distilbert-base-uncased-CoLA"

    @classmethod
    def load(
        cls, checkpoint: str | None, *, device: str = "auto", dtype: str = "float32",
        acceptable_label: str | int | None = None, **options: Any,
    ) -> SequenceClassifierScorer:
        return super().load(checkpoint or cls.default_checkpoint, device=device, dtype=dtype,
                            acceptable_label=acceptable_label, **options)


class CaptionLengthScorer(TextScorer):
    """Blind baseline: minus the caption length in characters (no checkpoint)."""

    name = "caption-length"
    score_kind = "minus_characters"

    @classmethod
    def load(cls, checkpoint: str | None = None, *, device: str = "auto", dtype: str = "float32", **options: Any) -> CaptionLengthScorer:
        if checkpoint:
            raise InputError(f"checkpoint: model 'caption-length' takes no checkpoint, got {checkpoint!r}")
        if options:
            raise InputError(f"model 'caption-length' takes no options, got {sorted(options)}")
        return cls()

    def score_texts(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        texts = _check_texts(texts, batch_size)
        return -np.array([len(t) for t in texts], dtype=np.float64)

    def describe(self) -> dict[str, Any]:
        return {"score": "-len(caption) in characters"}
