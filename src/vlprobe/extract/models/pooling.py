"""Poolings shared by every adapter: token states -> one vector per layer.

``cls``   the state at each row's CLS position (CLIP text: EOS; CLIP image: patch 0;
          LXMERT/UNITER: token 0). Streams without a CLS token do not offer it.
``mean``  mean over valid tokens (attention mask = 1).
``max``   element-wise max over valid tokens.
``pooled`` is not computed here: it is the model's own pooled/projected output.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from vlprobe.validation import InputError

__all__ = ["POOLINGS", "TOKEN_POOLINGS", "parse_poolings", "pool_states"]

TOKEN_POOLINGS: tuple[str, ...] = ("cls", "mean", "max")
POOLINGS: tuple[str, ...] = (*TOKEN_POOLINGS, "pooled")


def parse_poolings(spec: str | Sequence[str], *, param: str = "pooling") -> tuple[str, ...]:
    """Parse ``"cls,mean,max"`` (or a sequence) into known pooling names, in canonical order."""
    names = [s.strip().lower() for s in (spec.split(",") if isinstance(spec, str) else spec)]
    names = [n for n in names if n]
    if not names:
        raise InputError(f"{param} must name at least one of {', '.join(POOLINGS)}; got {spec!r}")
    for n in names:
        if n not in POOLINGS:
            raise InputError(f"{param}: unknown pooling {n!r} (expected some of {', '.join(POOLINGS)})")
    return tuple(p for p in POOLINGS if p in names)


def pool_states(
    hidden: torch.Tensor,
    mask: torch.Tensor,
    cls_index: torch.Tensor | None,
    poolings: Sequence[str],
) -> dict[str, torch.Tensor]:
    """Pool token states of several layers at once.

    Parameters
    ----------
    hidden : Tensor, shape (B, L, T, H)
        States of the L selected layers.
    mask : Tensor, shape (B, T)
        1 (or True) for valid tokens; every row needs at least one.
    cls_index : Tensor of int, shape (B,), or None
        CLS position per row; None for streams without CLS.
    poolings : sequence of str
        Any of ``cls``, ``mean``, ``max`` (others are ignored).

    Returns
    -------
    dict of str to Tensor, each of shape (B, L, H), float32
    """
    b, n_layers, t, h = hidden.shape
    if mask.shape != (b, t):
        raise InputError(f"mask must have shape {(b, t)}, got {tuple(mask.shape)}")
    valid = mask.to(device=hidden.device, dtype=torch.bool)
    if not bool(valid.any(dim=1).all()):
        raise InputError("mask: every row needs at least one valid token")
    states = hidden if hidden.dtype == torch.float32 else hidden.float()
    out: dict[str, torch.Tensor] = {}
    if "cls" in poolings:
        if cls_index is None:
            raise InputError("pooling 'cls' is not available for this stream (it has no CLS token)")
        idx = cls_index.to(device=states.device, dtype=torch.long).view(b, 1, 1, 1).expand(b, n_layers, 1, h)
        out["cls"] = states.gather(2, idx).squeeze(2)
    masked = {p for p in ("mean", "max") if p in poolings}
    if masked:
        fast = _masked_poolings(states, valid, masked)
        if not bool(valid.all()) and not all(bool(torch.isfinite(v).all()) for v in fast.values()):
            # The fast paths turn inf/NaN at padded positions into NaN (0 * inf, inf - inf);
            # redo them with padded positions zeroed, so only valid tokens count.
            fast = _masked_poolings(states.masked_fill(~valid.view(b, 1, t, 1), 0.0), valid, masked)
        out.update(fast)
    return out


def _masked_poolings(states: torch.Tensor, valid: torch.Tensor, names: set[str]) -> dict[str, torch.Tensor]:
    """Masked mean and max of (B, L, T, H) states over T without copying the states."""
    b, n_layers, t, _ = states.shape
    out: dict[str, torch.Tensor] = {}
    if "mean" in names:
        # (B, 1, 1, T) @ (B, L, T, H): a batched product with the mask weights.
        weights = valid.to(states.dtype)
        weights = weights / weights.sum(dim=1, keepdim=True)
        out["mean"] = torch.matmul(weights.view(b, 1, 1, t), states).squeeze(2)
    if "max" in names:
        if bool(valid.all()):
            out["max"] = states.amax(dim=2)
        else:
            # -inf bias on padded tokens, one layer at a time to stay cache-sized.
            bias = torch.zeros(b, t, 1, dtype=states.dtype, device=states.device)
            bias.masked_fill_(~valid.view(b, t, 1), float("-inf"))
            out["max"] = torch.stack([(states[:, i] + bias).amax(dim=1) for i in range(n_layers)], dim=1)
    return out
