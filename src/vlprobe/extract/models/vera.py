"""Vera (Liu et al. 2023), SugarCrepe's blind plausibility baseline, as SugarCrepe's
``text_model_eval.py`` runs it.

Vera (``liujch1998/vera``) is a T5 encoder whose scoring head lives in three rows of its shared
embedding: weight = ``shared.weight[32099]`` (D), bias = ``shared.weight[32098, 0]``,
temperature ``t = shared.weight[32097, 0]`` (the rows of T5's ``<extra_id_0..2>``). A statement is
tokenised (T5's tokenizer appends ``</s>``; at most 128 tokens), encoded, and the last token's
state (the ``</s>``) scored: ``sigmoid((w . h + b) / t)``, the calibrated plausibility. A caption
beats its negative when its score is strictly higher. Batches are right-padded and read at each
row's last real token, as the reference's batched ``runs`` does.

The head runs in the model's dtype, as the reference's ``torch.nn.Linear(D, 1,
dtype=model.dtype)`` does. The reference loads the released weights with ``torch_dtype='auto'``:
in bfloat16, the dtype ``liujch1998/vera``'s config names, so its scores are bfloat16 values
(about three significant digits: a caption and its negative tie more often, and a tie counts as
not solved). The default (``dtype="auto"``: :attr:`VeraScorer.reference_dtype`) runs it so;
``--dtype float32`` is the named correction, which upcasts the same weights.
In a 16-bit dtype each statement is encoded alone, as the reference's ``Vera.run`` (what its
``text_retrieval`` calls) encodes it: batched, padded rows round differently in 16 bits and
would break or make ties the reference did not; in float32 batches differ from it by ~1e-7.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from vlprobe.extract.models.blind import TextScorer, _check_texts, _load_hf, _refuse_new_weights
from vlprobe.extract.models.hf import ResolvedCheckpoint
from vlprobe.validation import InputError

__all__ = ["HEAD_ROWS", "MAX_LENGTH", "VeraScorer"]

#: Rows of ``shared.weight`` holding the head: (weight, bias [0], temperature [0]).
HEAD_ROWS: tuple[int, int, int] = (32099, 32098, 32097)
#: The reference's truncation length.
MAX_LENGTH = 128


class VeraScorer(TextScorer):
    """Blind baseline: Vera's calibrated plausibility of the caption (liujch1998/vera by default)."""

    name = "vera"
    score_kind = "p_plausible"
    #: The checkpoint SugarCrepe used, taken when none is given.
    default_checkpoint = "liujch1998/vera"
    #: SugarCrepe's ``text_model_eval.py`` loads Vera with ``T5EncoderModel.from_pretrained(...,
    #: torch_dtype='auto')``, the dtype the checkpoint's config names (bfloat16 for
    #: ``liujch1998/vera``, whose weights are stored so), and builds the head as a Linear of the
    #: model's dtype: its scores are bfloat16 values. ``dtype="float32"`` is the correction.
    reference_dtype = "bfloat16"

    def __init__(self, model: Any, tokenizer: Any, checkpoint: ResolvedCheckpoint, device: Any) -> None:
        import torch

        self.model, self.tokenizer, self.checkpoint, self.device = model, tokenizer, checkpoint, device
        shared = model.shared.weight.detach()
        w, b, t = HEAD_ROWS
        self.weight, self.bias = shared[w].clone(), shared[b, 0].clone()  # in the model's dtype, as the reference
        self.temperature = float(shared[t, 0])
        if not np.isfinite(self.temperature) or self.temperature == 0.0:
            raise InputError(f"checkpoint: {checkpoint.spec!r}: Vera's temperature (shared.weight[{t}, 0]) is {self.temperature}")
        self._torch = torch

    @classmethod
    def load(cls, checkpoint: str | None = None, *, device: str = "auto", dtype: str = "auto",
             **options: Any) -> VeraScorer:
        """Load Vera (``dtype="auto"``: :attr:`reference_dtype`, bfloat16, as SugarCrepe)."""
        if options:
            raise InputError(f"model 'vera' takes no options, got {sorted(options)}")
        from transformers import AutoConfig, AutoTokenizer, T5EncoderModel

        from vlprobe.extract.model_inputs import model_dtype
        from vlprobe.extract.models.hf import (
            from_pretrained_with_info,
            quiet_transformers,
            reading_weights,
        )

        spec = checkpoint or cls.default_checkpoint
        ckpt, dev, torch_dtype = _load_hf(spec, cls.name, device, model_dtype(cls, dtype))
        with quiet_transformers(), reading_weights(spec):
            try:
                config = AutoConfig.from_pretrained(ckpt.path)
            except (OSError, ValueError, KeyError) as exc:
                raise InputError(f"checkpoint: {spec!r} has no readable config.json ({exc})") from None
            if config.model_type != "t5":
                raise InputError(f"checkpoint: {spec!r} is a {config.model_type!r} model, expected Vera's 't5' encoder")
            if int(config.vocab_size) <= max(HEAD_ROWS):
                raise InputError(
                    f"checkpoint: {spec!r} has {config.vocab_size} embedding rows; Vera's head reads rows "
                    f"{min(HEAD_ROWS)}..{max(HEAD_ROWS)} (a T5 vocabulary of 32,100)"
                )
            model, loading = from_pretrained_with_info(T5EncoderModel, ckpt.path, checkpoint=spec, dtype=torch_dtype)
            _refuse_new_weights(loading, spec, "a T5 encoder")
            tokenizer = AutoTokenizer.from_pretrained(ckpt.path)
        return cls(model.to(dev).eval(), tokenizer, ckpt, dev)

    def score_texts(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        torch = self._torch
        texts = _check_texts(texts, batch_size)
        single = self.model.dtype != torch.float32
        if single:
            batch_size = 1  # one statement per forward, as the reference's run (module docstring)
        out = np.empty(len(texts), dtype=np.float64)
        with torch.inference_mode():
            for start in range(0, len(texts), batch_size):
                batch = texts[start : start + batch_size]
                tok = self.tokenizer(batch, return_tensors="pt", padding="longest", truncation=True,
                                     max_length=MAX_LENGTH, padding_side="right")
                ids, mask = tok["input_ids"].to(self.device), tok["attention_mask"].to(self.device)
                # alone (16-bit), the statement runs without a mask, as the reference's run calls the model
                hidden = self.model(input_ids=ids, attention_mask=None if single else mask).last_hidden_state
                last = hidden[torch.arange(len(batch), device=hidden.device), mask.sum(dim=1) - 1]
                # one fused linear (addmm), as the reference's nn.Linear: the bias is added before the
                # result is rounded to the model's dtype
                logits = torch.nn.functional.linear(last, self.weight[None].to(last.device),
                                                    self.bias[None].to(last.device))[:, 0]
                calibrated = torch.sigmoid(logits / self.temperature)
                out[start : start + len(batch)] = calibrated.double().cpu().numpy()
        return out

    def describe(self) -> dict[str, Any]:
        return {"model_class": type(self.model).__name__, "head_rows": list(HEAD_ROWS), "max_length": MAX_LENGTH,
                "temperature": self.temperature, "dtype": str(self.model.dtype).removeprefix("torch."),
                "score": "sigmoid((shared[32099] . h_last + shared[32098, 0]) / shared[32097, 0])"}
