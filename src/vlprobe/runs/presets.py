"""Named settings of the probing experiments: ``paper`` (the defaults) and ``quick`` (CPU smoke runs).

``paper`` holds the values of "Why is Winoground Hard?" (11 seeds, width 1024, 200 epochs for the
MLPs; 3 control seeds for separability), which are also the configs' defaults; ``quick`` fewer
seeds and epochs and a narrower MLP, for a run that finishes in seconds on a laptop CPU and checks
the pipeline, not the science. Each experiment's declaration takes its presets from here
(:class:`~vlprobe.runs.declare.Experiment` ``presets``): ``probe run NAME --quick`` (or
``--preset quick``) starts from them, options given explicitly win, and the manifest names the
preset a run's settings match. In the library: ``EXPERIMENT.make_config(values, preset="quick")``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PRESETS", "PRESET_VALUES"]

PRESETS = ("paper", "quick")
_MLP = {
    "paper": {"seeds": 11, "epochs": 200, "width": 1024},
    "quick": {"seeds": 3, "epochs": 30, "width": 128},
}
#: experiment -> preset -> the settings it sets.
PRESET_VALUES: dict[str, dict[str, dict[str, Any]]] = {
    "task-adaptation": _MLP,
    "variant-probe": _MLP,
    "separability": {"paper": {"seeds": 3}, "quick": {"seeds": 1}},
}
