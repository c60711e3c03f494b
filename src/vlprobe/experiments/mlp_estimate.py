"""How long the MLP probes of a run will train, said before they start, with the cheaper choices.

The paper's settings (11 seeds, width 1024, 200 epochs) on every layer of a stream are hours of
CPU time: ``probe run variant-probe --cache X`` on a CLIP-B cache trains 286 probes. Before the
first one trains, :func:`estimate_lines` measures one training step of a chunk of them here
(:func:`~vlprobe.probes.ensemble.step_seconds`: the trainer's own step, on the device and thread
count the run uses) and multiplies it out; when the run would take longer than :data:`LONG_RUN` it
names the cheaper choices with their own estimates: fewer layers (``--layers``), ``--preset quick``,
a GPU (``--device cuda``). It asks nothing: the run goes on.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["LONG_RUN", "estimate_lines", "format_duration", "training_seconds"]

#: A run estimated longer than this (seconds) is told its cheaper choices.
LONG_RUN = 600.0


def format_duration(seconds: float) -> str:
    """``45 s``, ``12 min``, ``3 h 05 min``, ``2 d 4 h``."""
    s = max(0.0, float(seconds))
    if s < 90:
        return f"{s:.0f} s"
    minutes = round(s / 60)
    if minutes < 90:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes:02d} min"
    days, hours = divmod(round(s / 3600), 24)
    return f"{days} d {hours} h"


def training_seconds(n_models: int, dims: Sequence[int], n_rows: int, epochs: int, batch_size: int,
                     device: Any, memory_budget: int | None = None) -> float:
    """Seconds ``n_models`` MLPs of layer widths ``dims`` take to train ``epochs`` epochs on
    ``n_rows`` rows, in the chunks the trainer makes (one measured step per chunk size, times
    the steps)."""
    from vlprobe.probes.ensemble import models_per_chunk, step_seconds

    rows = max(1, min(batch_size, n_rows))
    chunk = min(models_per_chunk(dims, rows, device, memory_budget), n_models)
    steps = epochs * math.ceil(n_rows / rows)
    full, rest = divmod(n_models, chunk)
    seconds = full * steps * step_seconds(dims, chunk, rows, device)
    if rest:
        seconds += steps * step_seconds(dims, rest, rows, device)
    return seconds


def estimate_lines(experiment: str, n_groups: int, n_seeds: int, n_features: int, n_rows: int, settings: Any,
                   device: Any, memory_budget: int | None = None) -> list[str]:
    """What to say before the probes train: the estimate, and for a long run the cheaper choices.

    Parameters
    ----------
    experiment : str
        The experiment (its ``quick`` preset is looked up by this name).
    n_groups : int
        Feature groups (layers) trained apart; each trains a target and a control per seed.
    n_seeds, n_features, n_rows : int
        Seeds, input width and training rows.
    settings : MLPOptions
        ``depth``, ``width``, ``epochs``, ``batch_size``.
    device : torch.device
    """
    from vlprobe.probes.ensemble import mlp_dims
    from vlprobe.runs.presets import PRESET_VALUES

    def seconds(seeds: int, width: int, epochs: int, groups: int = n_groups) -> float:
        return training_seconds(groups * 2 * seeds, mlp_dims(n_features, settings.depth, width), n_rows, epochs,
                                settings.batch_size, device, memory_budget)

    total = seconds(n_seeds, settings.width, settings.epochs)
    where = "the GPU" if device.type == "cuda" else f"the {device.type.upper()}"
    lines = [f"{experiment}: about {format_duration(total)} on {where} for {n_groups * 2 * n_seeds} probes "
             f"(measured: one training step here, times the steps of {settings.epochs} epoch{'s' if settings.epochs != 1 else ''})"]
    if total <= LONG_RUN:
        return lines
    cheaper = []
    if n_groups > 1:
        cheaper.append(f"--layers -1 (one layer of {n_groups}: about {format_duration(total / n_groups)})")
    quick = PRESET_VALUES.get(experiment, {}).get("quick")
    if quick and (quick["seeds"], quick["width"], quick["epochs"]) != (n_seeds, settings.width, settings.epochs):
        cheaper.append(f"--preset quick ({quick['seeds']} seeds, width {quick['width']}, {quick['epochs']} epochs: "
                       f"about {format_duration(seconds(quick['seeds'], quick['width'], quick['epochs']))})")
    if device.type != "cuda":
        cheaper.append("--device cuda (on a GPU)")
    if cheaper:
        lines.append(f"{experiment}: a long run; cheaper: " + "; ".join(cheaper) + " (this one goes on)")
    return lines
