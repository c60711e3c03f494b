"""A stream's declaration (:class:`StreamSpec`), apart from the adapter contract.

Kept free of torch: the cache schema and reader (and so every ``probe run``) need a stream's
declaration, never a model.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["StreamSpec"]


@dataclass(frozen=True)
class StreamSpec:
    """One stream of hidden states.

    Attributes
    ----------
    name : str
    modality : {"text", "image", "pair"}
        What one row of the stream is.
    layer_kinds : tuple of str
        One entry per layer, layer 0 first (``embed``, ``self``, ``cross``, ...).
    hidden_size : int
    cls_rule : str
        Where ``cls`` pooling reads (``eos``, ``token0``, ``patch0``) or ``none``.
    pooled_size : int or None
        Width of the model's own pooled output, None when the stream has none.
    """

    name: str
    modality: str
    layer_kinds: tuple[str, ...]
    hidden_size: int
    cls_rule: str
    pooled_size: int | None

    @classmethod
    def blocks(
        cls, name: str, modality: str, n_blocks: int, hidden_size: int, cls_rule: str, pooled_size: int | None,
        kind: str = "self",
    ) -> StreamSpec:
        """The embedding output (layer 0) then ``n_blocks`` blocks of one ``kind``."""
        return cls(name, modality, ("embed",) + (kind,) * int(n_blocks), int(hidden_size), cls_rule, pooled_size)

    @property
    def n_layers(self) -> int:
        return len(self.layer_kinds)

    @property
    def poolings(self) -> tuple[str, ...]:
        out: tuple[str, ...] = ("cls",) if self.cls_rule != "none" else ()
        out += ("mean", "max")
        return out + (("pooled",) if self.pooled_size else ())
