"""The identity strategy: the caption itself (the paper's "original" variant)."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from vlprobe.augment.base import Proposal, Strategy

__all__ = ["OriginalStrategy"]


class OriginalStrategy(Strategy):
    """The caption itself, as the paper's variant lists begin.

    ``probe augment`` does not write it into the variants file (the caption is already there as
    the variants' parent); experiments that aggregate over variants include the original
    themselves (``variant-similarity`` includes the caption unless ``variants_only``).
    """

    name: str = "original"
    group: ClassVar[str] = "identity"
    default_max_outputs: ClassVar[int] = 1

    def propose(self, text: str, rng: np.random.Generator) -> list[Proposal]:
        return [Proposal(text)]
