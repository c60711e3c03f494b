"""VALSE's unimodal baselines: GPT-1 and GPT-2 perplexity of the caption against the foil.

Registered as ``gpt2`` (default checkpoint ``gpt2-large``, the model VALSE's
``unimodal_valse_eval.py`` loads for "gpt2") and ``openai-gpt`` (``openai-gpt``); any checkpoint
of the same family may be given. A pair is solved when the caption's perplexity is strictly
lower than the foil's; the score is minus the perplexity, so higher = more plausible.

``perplexity=valse`` (the default) is VALSE's code as it ran: the text tokenised without special
tokens; windows starting at ``i = 0, 3, 6, ...`` (stride 3) over ``ids[begin:i + 3]`` with
``begin = max(i + 3 - n_positions, 0)``; in each window only its last 3 tokens are targets (all
of them when it is shorter), and the first token of a window is never predicted; each window's
mean loss is multiplied by 3 whatever the number of its targets, the products summed and divided
by the *last window start* ``i``; the perplexity is ``exp`` of that (float32, as torch computed
it). So the last window re-scores tokens the previous one scored when the length is not a
multiple of 3, and texts of at most 3 tokens divide by zero: their perplexity is infinite (NaN
when the sum is 0), which loses every comparison as in VALSE. A caption/foil pair is compared on
these values; a non-finite perplexity becomes the lowest float as a score (a NaN foil against a
finite caption then counts as solved, where VALSE's ``<`` counted it as not).

``perplexity=token-mean`` is the correction: ``exp`` of the mean negative log-likelihood of
every token after the first, each once (one window; texts longer than the model's positions are
truncated).

Windows that start at position 0 (all of them unless a text is longer than the model's
positions) are read off one forward pass of the whole text: a causal model's logits for a
prefix are the same with or without the tokens after it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from vlprobe.extract.models.blind import CausalLMScorer, _check_texts
from vlprobe.validation import InputError, check_choice

__all__ = ["PERPLEXITIES", "GPT1Scorer", "GPT2Scorer", "ValsePerplexityScorer", "valse_perplexity"]

#: The perplexity definitions (the ``perplexity`` load option).
PERPLEXITIES: tuple[str, ...] = ("valse", "token-mean")
#: VALSE's window stride and the factor of every window's mean loss.
STRIDE = 3
_LOWEST = -np.finfo(np.float64).max


def valse_perplexity(n_tokens: int, n_positions: int, prefix_nll: Sequence[float], window_nll: Any = None) -> float:
    """VALSE's windowed perplexity of a text of ``n_tokens`` tokens.

    Parameters
    ----------
    n_tokens : int
    n_positions : int
        The model's context (``max_length`` in VALSE's code).
    prefix_nll : sequence of float
        ``prefix_nll[p]`` = -log p(token p | tokens 0..p-1) for 1 <= p < min(n_tokens,
        n_positions) (entry 0 unused): one forward pass from position 0.
    window_nll : callable, optional
        ``window_nll(begin, end)`` -> the losses (entry 0 unused) of a window that does not start
        at 0, from its own forward pass; needed only when ``n_tokens + 3 > n_positions``.

    Returns
    -------
    float
        The perplexity, possibly ``inf`` or ``nan`` (see the module docstring).
    """
    import torch

    lls = []
    i = 0
    for i in range(0, n_tokens, STRIDE):
        begin, end = max(i + STRIDE - n_positions, 0), min(i + STRIDE, n_tokens)
        length = end - begin
        first_target = max(length - STRIDE, 1)  # masked: all but the last 3; unpredicted: the window's first
        if begin == 0:
            losses = prefix_nll
        elif window_nll is None:
            raise ValueError("a window not starting at 0 needs window_nll")
        else:
            losses = window_nll(begin, end)
        window = torch.tensor([float(losses[j]) for j in range(first_target, length)], dtype=torch.float32)
        lls.append(window.mean() * STRIDE)  # nan when the window has no target, as CrossEntropyLoss gives
    return float(torch.exp(torch.stack(lls).sum() / i))


class ValsePerplexityScorer(CausalLMScorer):
    """Minus the perplexity of a text under a GPT model, as VALSE's unimodal baseline computes it."""

    score_kind = "minus_perplexity"
    load_options = ("perplexity",)
    #: The checkpoint VALSE used, taken when none is given.
    default_checkpoint: ClassVar[str] = ""
    #: The ``model_type`` a checkpoint of this family has.
    model_type: ClassVar[str] = ""

    def __init__(self, *args: Any, perplexity: str = "valse", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.perplexity = perplexity

    @classmethod
    def load(
        cls, checkpoint: str | None, *, device: str = "auto", dtype: str = "float32", perplexity: str = "valse",
        **options: Any,
    ) -> ValsePerplexityScorer:
        if options:
            raise InputError(f"model {cls.name!r} takes only perplexity, got {sorted(options)}")
        perplexity = check_choice(perplexity, "perplexity", PERPLEXITIES)
        model, tokenizer, ckpt, dev = cls.load_causal_lm(checkpoint or cls.default_checkpoint, device, dtype)
        kind = getattr(model.config, "model_type", "")
        if kind != cls.model_type:
            raise InputError(
                f"checkpoint: {ckpt.spec!r} is a {kind!r} model, expected {cls.model_type!r} for --model {cls.name} "
                "(any causal LM: --model blind-lm)"
            )
        return cls(model, tokenizer, ckpt, dev, perplexity=perplexity)

    def token_losses(self, texts: Sequence[str], batch_size: int) -> list[list[float]]:
        """Per text, ``[nan, nll_1, ..., nll_{N-1}]`` from one forward pass of its first
        ``n_positions`` tokens (no special tokens added, as VALSE's tokenizer call)."""
        import torch

        seqs = [list(self.tokenizer(t)["input_ids"])[: self.max_length] for t in texts]
        out: list[list[float]] = []
        with torch.inference_mode():
            for start in range(0, len(seqs), batch_size):
                batch = seqs[start : start + batch_size]
                width = max(1, *(len(s) for s in batch))
                ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long)
                mask = torch.zeros((len(batch), width), dtype=torch.long)
                for r, s in enumerate(batch):
                    ids[r, : len(s)] = torch.tensor(s, dtype=torch.long)
                    mask[r, : len(s)] = 1
                logits = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device)).logits.float()
                logp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None].to(self.device))[..., 0]
                for r, s in enumerate(batch):
                    out.append([math.nan, *(-logp[r, : len(s) - 1]).double().cpu().tolist()])
        return out

    def _window(self, ids: list[int]) -> Any:
        import torch

        def losses(begin: int, end: int) -> list[float]:
            window = torch.tensor([ids[begin:end]], dtype=torch.long, device=self.device)
            with torch.inference_mode():
                logp = torch.log_softmax(self.model(input_ids=window).logits.float()[:, :-1], -1)
                nll = -logp.gather(-1, window[:, 1:, None])[0, :, 0]
            return [math.nan, *nll.double().cpu().tolist()]

        return losses

    def perplexities(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """The perplexity of each text under :attr:`perplexity`'s definition (inf/nan kept)."""
        texts = _check_texts(texts, batch_size)
        losses = self.token_losses(texts, batch_size)
        out = np.empty(len(texts), dtype=np.float64)
        for k, (text, nll) in enumerate(zip(texts, losses, strict=True)):
            if self.perplexity == "token-mean":
                out[k] = math.exp(float(np.mean(nll[1:]))) if len(nll) > 1 else math.nan
                continue
            ids = list(self.tokenizer(text)["input_ids"])
            if not ids:
                out[k] = math.nan
                continue
            out[k] = valse_perplexity(len(ids), self.max_length, nll, self._window(ids))
        return out

    def score_texts(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """Minus the perplexity; a non-finite perplexity scores the lowest float (see the module docstring)."""
        ppl = self.perplexities(texts, batch_size)
        return np.where(np.isfinite(ppl), -ppl, _LOWEST)

    def describe(self) -> dict[str, Any]:
        how = ("VALSE's windows: stride 3, x3 per window, / last window start" if self.perplexity == "valse"
               else "exp(mean NLL of every token after the first)")
        return {"model_class": type(self.model).__name__, "perplexity": self.perplexity, "definition": how,
                "max_length": self.max_length, "score": "-perplexity (non-finite: the lowest float)"}

    def model_options(self) -> dict[str, Any]:
        return {"perplexity": self.perplexity}


class GPT2Scorer(ValsePerplexityScorer):
    """VALSE's GPT-2 baseline (gpt2-large by default): minus the caption's perplexity."""

    name = "gpt2"
    default_checkpoint = "gpt2-large"
    model_type = "gpt2"


class GPT1Scorer(ValsePerplexityScorer):
    """VALSE's GPT-1 baseline (openai-gpt by default): minus the caption's perplexity."""

    name = "openai-gpt"
    default_checkpoint = "openai-gpt"
    model_type = "openai-gpt"
