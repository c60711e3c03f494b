"""Probes as scikit-learn estimators, splits and control tasks.

``LinearSeparabilityProbe`` (:mod:`.linear`), ``MLPProbe`` (:mod:`.mlp`), the batched
``fit_mlp_ensemble`` (:mod:`.ensemble`), item-level splits and control tasks (:mod:`.splits`).
Names are imported on first use, so ``import vlprobe.probes.splits`` does not load torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "ItemSplit",
    "LinearSeparabilityProbe",
    "MLPEnsemble",
    "MLPProbe",
    "control_flips",
    "fit_mlp_ensemble",
    "flip_labels",
    "selectivity",
    "stratified_item_split",
]

_WHERE = {
    "LinearSeparabilityProbe": "linear",
    "MLPProbe": "mlp", "MLPEnsemble": "ensemble", "fit_mlp_ensemble": "ensemble",
    "ItemSplit": "splits", "control_flips": "splits", "flip_labels": "splits",
    "selectivity": "splits", "stratified_item_split": "splits",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
