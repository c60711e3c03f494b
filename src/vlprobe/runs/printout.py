"""What ``probe run`` prints after a run: the headline rows of its results, then the files written.

Each function returns lines; the command line prints them (the library stays free of printing).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["metric_lines", "summary_lines", "wrote_line"]


def wrote_line(csv_path: Path, *side: str) -> str:
    """``wrote OUT/x/m.csv, m.summary.csv and manifest.json``."""
    if not side:
        return f"wrote {csv_path} and {csv_path.parent / 'manifest.json'}"
    return f"wrote {csv_path}, {', '.join(side)} and manifest.json"


def metric_lines(rows: Iterable[Mapping[str, Any]], subsets: Iterable[str] | None, csv_path: Path) -> list[str]:
    """The metric rows of ``subsets`` (None: every subset) with their 95% intervals, then the files.

    Parameters
    ----------
    rows : iterable of mapping
        Tidy rows; intervals are the rows of metric ``<metric>.ci95_low`` / ``.ci95_high``.
    """
    rows = list(rows)
    chosen = None if subsets is None else set(subsets)
    ci = {(r["subset"], r["metric"]): r["value"] for r in rows if ".ci95_" in r["metric"]}
    lines = []
    for row in rows:
        if (chosen is None or row["subset"] in chosen) and ".ci95_" not in row["metric"]:
            key = (row["subset"], row["metric"])
            low, high = ci.get((key[0], f"{key[1]}.ci95_low")), ci.get((key[0], f"{key[1]}.ci95_high"))
            interval = f"  [{low:6.2f}, {high:6.2f}]" if low is not None and high is not None else ""
            lines.append(
                f"{row['model']:<12} {row['subset']:<22} {row['metric']:<13} {row['value']:7.2f}{interval}  (n={row['n']})"
            )
    lines.append(wrote_line(csv_path))
    return lines


def summary_lines(rows: Iterable[Mapping[str, Any]], metric: str, split: str, csv_path: Path,
                  side: Iterable[str] = ()) -> list[str]:
    """Target vs control per stream and layer (from the rows' summary), then the files written.

    The control's min-max over seeds is in brackets; the selectivity comes with its 95%
    item-bootstrap interval and the permutation test's p-value where the run has them.
    """
    from vlprobe.runs.summary import summarize

    lines = []
    for rec in summarize(rows):
        if rec["metric"] == metric and rec["split"] == split and rec["subset"] in ("all", "text-score", "image-score"):
            sub = "" if rec["subset"] == "all" else f" {rec['subset']:<12}"
            low, high, p = (rec.get(k, math.nan) for k in ("selectivity_ci95_low", "selectivity_ci95_high", "p_value"))
            tested = f" 95% CI [{low:.2f}, {high:.2f}]" if math.isfinite(low) and math.isfinite(high) else ""
            tested += f" p={p:.3g}" if math.isfinite(p) else ""
            lines.append(
                f"{rec['stream']:<12} layer {rec['layer'] or '-':>3}{sub} {metric} ({split}): target "
                f"{rec['target_mean']:6.2f}  control {rec['control_mean']:6.2f} "
                f"[{rec['control_min']:.2f}, {rec['control_max']:.2f}]  selectivity {rec['selectivity']:6.2f}{tested}"
            )
    stem = csv_path.stem
    lines.append(wrote_line(csv_path, f"{stem}.summary.csv", *side))
    return lines
