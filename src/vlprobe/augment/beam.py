"""Diverse (group) beam search for encoder-decoder models, in vlprobe.

transformers 5 moved group beam search out of the library (``generate(num_beam_groups=...)``
now wants ``trust_remote_code`` and a hub download), so vlprobe carries its own: Vijayakumar et
al. (2016), "Diverse Beam Search", with the Hamming diversity term. The ``num_beams`` beams are
split into ``num_beam_groups`` groups; at every step the groups are extended in order, and a
token's log-probability in group g is lowered by ``diversity_penalty`` times the number of
beams of groups 0..g-1 that chose that token at this step. Finished hypotheses are scored by
``sum log p / length ** length_penalty``. Deterministic: no sampling.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from vlprobe.validation import InputError, check_positive_int

__all__ = ["Hypothesis", "diverse_beam_search"]


@dataclass(frozen=True)
class Hypothesis:
    """One output: decoder token ids (without the start token), its score and its group."""

    tokens: tuple[int, ...]
    score: float
    group: int


@torch.no_grad()
def diverse_beam_search(
    model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, *,
    num_beams: int = 4, num_beam_groups: int = 2, diversity_penalty: float = 0.5,
    max_new_tokens: int = 40, length_penalty: float = 1.0, min_new_tokens: int = 1,
) -> list[Hypothesis]:
    """Group beam search for one source sequence.

    Parameters
    ----------
    model : transformers encoder-decoder model (``get_encoder()``, ``decoder_input_ids``)
    input_ids : LongTensor, shape (1, S)
    attention_mask : LongTensor, shape (1, S), optional
    num_beams, num_beam_groups : int
        ``num_beams`` must be a multiple of ``num_beam_groups``.

    Returns
    -------
    list of Hypothesis
        ``num_beams`` hypotheses, group by group, best first within a group.
    """
    check_positive_int(num_beams, "num_beams")
    check_positive_int(num_beam_groups, "num_beam_groups")
    check_positive_int(max_new_tokens, "max_new_tokens")
    if num_beams % num_beam_groups:
        raise InputError(f"num_beams ({num_beams}) must be a multiple of num_beam_groups ({num_beam_groups})")
    if input_ids.ndim != 2 or input_ids.shape[0] != 1:
        raise InputError(f"input_ids must have shape (1, S), got {tuple(input_ids.shape)}")
    cfg = model.generation_config
    start = cfg.decoder_start_token_id if cfg.decoder_start_token_id is not None else model.config.decoder_start_token_id
    eos = cfg.eos_token_id if cfg.eos_token_id is not None else model.config.eos_token_id
    eos_ids = set(eos if isinstance(eos, list) else [eos]) - {None}
    pad = cfg.pad_token_id if cfg.pad_token_id is not None else model.config.pad_token_id
    per_group = num_beams // num_beam_groups
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    enc = model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    alive: list[list[tuple[tuple[int, ...], float]]] = [[((start,), 0.0)] for _ in range(num_beam_groups)]
    finished: list[list[tuple[tuple[int, ...], float]]] = [[] for _ in range(num_beam_groups)]

    def norm(tokens: tuple[int, ...], score: float) -> float:
        return score / (max(len(tokens) - 1, 1) ** length_penalty)

    for step in range(max_new_tokens):
        chosen: torch.Tensor | None = None  # beams per token chosen by earlier groups this step
        for g in range(num_beam_groups):
            beams = alive[g]
            if not beams or len(finished[g]) >= per_group:
                alive[g] = []
                continue
            dec = torch.tensor([b[0] for b in beams], dtype=torch.long, device=input_ids.device)
            n = len(beams)
            out = model(
                encoder_outputs=(enc.expand(n, -1, -1),), attention_mask=attention_mask.expand(n, -1),
                decoder_input_ids=dec,
            )
            logp = torch.log_softmax(out.logits[:, -1, :].float(), dim=-1).cpu()
            vocab = logp.shape[-1]
            if chosen is None:
                chosen = torch.zeros(vocab)
            logp = logp - diversity_penalty * chosen[None, :]
            if pad is not None and pad not in eos_ids:
                logp[:, pad] = -float("inf")
            if step < min_new_tokens:
                for e in eos_ids:
                    logp[:, e] = -float("inf")
            if start is not None and start not in eos_ids:
                logp[:, start] = -float("inf")
            total = torch.tensor([b[1] for b in beams])[:, None] + logp
            flat = total.flatten()
            k = min(2 * per_group, int(torch.isfinite(flat).sum()))
            scores, idx = torch.topk(flat, k)
            new: list[tuple[tuple[int, ...], float]] = []
            for rank, (sc, ix) in enumerate(zip(scores.tolist(), idx.tolist(), strict=True)):
                b, tok = divmod(ix, vocab)
                seq = (*beams[b][0], tok)
                if tok in eos_ids:
                    if rank < per_group:
                        finished[g].append((seq, sc))
                    continue
                new.append((seq, sc))
                if len(new) == per_group:
                    break
            alive[g] = new
            for seq, _ in new:
                chosen[seq[-1]] += 1.0
        if all(not a for a in alive):
            break
    out_h: list[Hypothesis] = []
    for g in range(num_beam_groups):
        pool = finished[g] + alive[g]
        ranked = sorted(pool, key=lambda h: -norm(*h))[:per_group]
        for seq, sc in ranked:
            toks = tuple(t for t in seq[1:] if t not in eos_ids)
            out_h.append(Hypothesis(toks, norm(seq, sc), g))
    return out_h
