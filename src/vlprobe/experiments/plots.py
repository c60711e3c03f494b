"""Target vs control per layer, with the min–max band over seeds (``probe plot``).

One panel per stream (and pooling, and subset, where a CSV holds several); in each, the mean over
seeds of the target and of the control task per layer as lines and their min–max over seeds as
bands. Reads the tidy CSV an experiment wrote and aggregates it with
:func:`vlprobe.experiments.summary.summarize`. Writes a PNG and a PDF (matplotlib, Agg backend).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vlprobe.experiments.summary import read_tidy_csv, summarize
from vlprobe.validation import InputError

__all__ = ["DEFAULT_METRICS", "plot_results"]

#: Metric drawn when none is asked for: the first of these the CSV holds.
DEFAULT_METRICS = ("separable", "accuracy")
COLORS = {"target": "#1f77b4", "control": "#d62728"}


def _choose(values: Sequence[str], wanted: str | None, preferred: Sequence[str], what: str) -> str:
    present = list(dict.fromkeys(values))
    if wanted is not None:
        if wanted not in present:
            raise InputError(f"{what} {wanted!r} is not in the CSV (has: {', '.join(present)})")
        return wanted
    return next((p for p in preferred if p in present), present[0])


def plot_results(
    csv_path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    metric: str | None = None,
    split: str | None = None,
    title: str | None = None,
) -> list[Path]:
    """Draw a tidy results CSV; write ``out`` (PNG) and the same name with ``.pdf``.

    Parameters
    ----------
    csv_path : path
        ``OUT/<experiment>/<model>.csv``.
    out : path
        Figure file; must end in ``.png``.
    metric : str, optional
        Default: ``separable`` or ``accuracy``, whichever the CSV holds.
    split : str, optional
        Default: ``test`` when present, else the first split of the metric.

    Returns
    -------
    list of Path
        The PNG and the PDF.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    out_png = Path(out)
    if out_png.suffix.lower() != ".png":
        raise InputError(f"out must be a .png file name (a .pdf is written beside it), got {str(out_png)!r}")
    rows = read_tidy_csv(csv_path)
    metric = _choose([r["metric"] for r in rows], metric, DEFAULT_METRICS, "metric")
    rows = [r for r in rows if r["metric"] == metric]
    split = _choose([r["split"] for r in rows], split, ("test",), "split")
    rows = [r for r in rows if r["split"] == split]
    subsets = list(dict.fromkeys(r["subset"] for r in rows))
    if "all" in subsets:
        rows = [r for r in rows if r["subset"] == "all"]
    summary = summarize(rows)
    if not summary:
        raise InputError(f"csv: {Path(csv_path).name} has no target/control rows for metric {metric!r}")

    panels: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for rec in summary:
        panels.setdefault((rec["stream"], rec["pooling"], rec["subset"]), []).append(rec)
    vary = [len({k[i] for k in panels}) > 1 for i in range(3)]
    n = len(panels)
    cols = min(n, 3)
    nrows = math.ceil(n / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.6 * cols, 3.4 * nrows), squeeze=False, sharey=True)
    for ax, (key, recs) in zip(axes.ravel(), panels.items(), strict=False):
        xs, labels = _positions([r["layer"] for r in recs])
        for task in ("target", "control"):
            mean = [r[f"{task}_mean"] for r in recs]
            lo = [r[f"{task}_min"] for r in recs]
            hi = [r[f"{task}_max"] for r in recs]
            ax.plot(xs, mean, marker="o", ms=3, color=COLORS[task], label=task)
            ax.fill_between(xs, lo, hi, color=COLORS[task], alpha=0.2, linewidth=0)
        name = key[0] + "".join(f" ({k})" for k, v in zip(key[1:], vary[1:], strict=True) if v)
        ax.set_title(name if any(vary) else f"{key[0]} ({key[1]})")
        ax.set_xlabel("layer")
        if labels is not None:
            ax.set_xticks(xs, labels)
        else:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    for ax in axes.ravel()[n:]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel(f"{metric} ({split})")
    axes.ravel()[0].legend(loc="best", fontsize=8)
    first = summary[0]
    fig.suptitle(title or f"{first['experiment']}: {first['model']}; mean, min–max over seeds")
    fig.tight_layout()
    out_png.parent.mkdir(parents=True, exist_ok=True)
    written = []
    from vlprobe.io import atomic_path

    try:
        for path in (out_png, out_png.with_suffix(".pdf")):
            with atomic_path(path) as tmp:
                fig.savefig(tmp, format=path.suffix[1:], dpi=150)
            written.append(path)
    finally:
        plt.close(fig)  # also when saving fails: pyplot keeps every open figure alive
    return written


def _positions(layers: Sequence[str]) -> tuple[list[float], list[str] | None]:
    """Numeric x per layer; a layer-less value (``pooled``) becomes a labelled category."""
    try:
        return [float(x) for x in layers], None
    except ValueError:
        return [float(i) for i in range(len(layers))], [x if x else "pooled" for x in layers]
