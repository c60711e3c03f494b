"""Named settings of the probing experiments: ``paper`` (the default) and ``quick`` (CPU smoke runs).

A preset fills the settings a run leaves unset (``None`` in its config): ``paper`` gives the
values of "Why is Winoground Hard?" (11 seeds, width 1024, 200 epochs for the MLPs; 3 control
seeds for separability), ``quick`` fewer seeds, epochs and a narrower MLP, for a run that
finishes in seconds on a laptop CPU and checks the pipeline, not the science. A setting given
explicitly wins over either preset. The manifest records the preset and the resolved values.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from vlprobe.validation import check_choice

__all__ = ["PRESETS", "PRESET_VALUES", "apply_preset"]

PRESETS = ("paper", "quick")
_MLP = {
    "paper": {"seeds": 11, "epochs": 200, "width": 1024},
    "quick": {"seeds": 3, "epochs": 30, "width": 128},
}
#: experiment -> preset -> the settings it fills.
PRESET_VALUES: dict[str, dict[str, dict[str, Any]]] = {
    "task-adaptation": _MLP,
    "variant-probe": _MLP,
    "separability": {"paper": {"seeds": 3}, "quick": {"seeds": 1}},
}

C = TypeVar("C")


def apply_preset(experiment: str, config: C) -> C:
    """``config`` with its unset (``None``) preset fields filled from ``config.preset``."""
    preset = check_choice(config.preset, "preset", PRESETS)  # type: ignore[attr-defined]
    values = PRESET_VALUES[experiment][preset]
    return dataclasses.replace(config, **{k: v for k, v in values.items() if getattr(config, k) is None})  # type: ignore[type-var]

