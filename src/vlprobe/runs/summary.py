"""Per-layer summaries of tidy rows: target and control over seeds, and selectivity.

One summary row per (experiment, model, stream, layer, pooling, probe, split, subset, metric):
mean, min and max of the target values over seeds, the same for the control, and the
Hewitt–Liang selectivity ``target_mean - control_mean``. Where the tidy rows carry them, the
item-bootstrap intervals (``<metric>.ci95_low`` / ``.ci95_high`` of ``task`` target, control
and selectivity) and the permutation test's ``<metric>.p_value`` (``task`` selectivity) become
the columns ``target_ci95_low`` ... ``selectivity_ci95_high`` and ``p_value`` (NaN without).
Aggregation is kept apart from the experiments: it works on rows in memory or read back from a
tidy CSV.
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from vlprobe.io.atomic import atomic_write
from vlprobe.probes.splits import selectivity
from vlprobe.runs.writing import LATER_TIDY_COLUMNS, RESULTS_KIND, TIDY_COLUMNS, format_cell
from vlprobe.validation import InputError, check_file

__all__ = ["KEY_COLUMNS", "SUMMARY_COLUMNS", "read_tidy_csv", "summarize", "write_summary_csv"]

KEY_COLUMNS: tuple[str, ...] = (
    "experiment", "model", "stream", "layer", "kind", "pooling", "probe", "split", "subset", "metric",
)
SUMMARY_COLUMNS: tuple[str, ...] = (
    *KEY_COLUMNS,
    "target_mean", "target_min", "target_max", "target_seeds",
    "control_mean", "control_min", "control_max", "control_seeds",
    "selectivity",
    "target_ci95_low", "target_ci95_high", "control_ci95_low", "control_ci95_high",
    "selectivity_ci95_low", "selectivity_ci95_high", "p_value",
)
#: Summary columns filled from derived tidy rows: (task, metric suffix) -> column.
DERIVED: dict[tuple[str, str], str] = {
    **{(task, f".ci95_{bound}"): f"{task}_ci95_{bound}"
       for task in ("target", "control", "selectivity") for bound in ("low", "high")},
    ("selectivity", ".p_value"): "p_value",
}


def _key(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def summarize(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Aggregate tidy rows (``task`` = target | control) over seeds, in first-seen order.

    Returns
    -------
    list of dict
        Keyed by :data:`SUMMARY_COLUMNS`; NaN where a task has no finite value.
    """
    groups: dict[tuple[str, ...], dict[str, list[float]]] = {}
    derived: dict[tuple[str, ...], dict[str, float]] = {}
    for row in rows:
        task = _key(row.get("task"))
        metric = _key(row.get("metric"))
        raw = row.get("value")
        value = float("nan") if raw is None or raw == "" else float(raw)
        found = next(((suffix, col) for (t, suffix), col in DERIVED.items()
                      if t == task and metric.endswith(suffix)), None)
        if found is not None:
            suffix, column = found
            base = {**row, "metric": metric[: -len(suffix)]}
            derived.setdefault(tuple(_key(base.get(c)) for c in KEY_COLUMNS), {})[column] = value
            continue
        if task not in ("target", "control"):
            continue
        key = tuple(_key(row.get(c)) for c in KEY_COLUMNS)
        groups.setdefault(key, {"target": [], "control": []})[task].append(value)
    out = []
    for key, by_task in groups.items():
        rec: dict[str, Any] = dict(zip(KEY_COLUMNS, key, strict=True))
        for task, values in by_task.items():
            finite = [v for v in values if math.isfinite(v)]
            rec[f"{task}_mean"] = sum(finite) / len(finite) if finite else float("nan")
            rec[f"{task}_min"] = min(finite) if finite else float("nan")
            rec[f"{task}_max"] = max(finite) if finite else float("nan")
            rec[f"{task}_seeds"] = len(values)
        rec["selectivity"] = selectivity(rec["target_mean"], rec["control_mean"])
        extra = derived.get(key, {})
        for column in DERIVED.values():
            rec[column] = extra.get(column, float("nan"))
        out.append(rec)
    return out


def write_summary_csv(path: str | os.PathLike[str], summary: Iterable[Mapping[str, Any]]) -> Path:
    """Write summary rows (from :func:`summarize`) as CSV, atomically."""
    target = Path(path)
    with atomic_write(target, kind=RESULTS_KIND) as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(SUMMARY_COLUMNS)
        for rec in summary:
            writer.writerow([format_cell(rec.get(c)) for c in SUMMARY_COLUMNS])
    return target


def read_tidy_csv(path: str | os.PathLike[str]) -> list[dict[str, str]]:
    """Read a tidy results CSV (``OUT/<experiment>/<model>.csv``).

    Raises
    ------
    InputError
        The file is not a tidy CSV (wrong or missing columns) or holds no rows.
    """
    p = check_file(path, "csv")
    try:
        with open(p, encoding="utf-8", newline="") as fh:
            reader = csv.reader(fh)
            header = next(reader, [])
            # ``kind`` and ``note`` came later: results written before them read with the column empty.
            missing = [c for c in TIDY_COLUMNS if c not in header and c not in LATER_TIDY_COLUMNS]
            if missing:
                raise InputError(
                    f"csv: {p.name} is not a vlprobe tidy results CSV (missing column(s) {', '.join(missing)})"
                )
            rows = []
            for fields in reader:
                if not fields:  # a blank line (as csv.DictReader skips it)
                    continue
                if len(fields) != len(header):  # a row cut short (or run into the next one)
                    raise InputError(
                        f"csv: {p.name} line {reader.line_num} has {len(fields)} fields where the header has "
                        f"{len(header)}: the file is cut short or damaged"
                    )
                rows.append({"kind": "", "note": "", **dict(zip(header, fields, strict=True))})
        with open(p, "rb") as fb:  # a cut inside the last field leaves the right number of fields
            fb.seek(0, os.SEEK_END)
            if fb.tell() > 0:
                fb.seek(-1, os.SEEK_END)
                if fb.read(1) not in (b"\n", b"\r"):
                    raise InputError(
                        f"csv: {p.name} ends in the middle of a row (no line end after its last row): "
                        "the file is cut short"
                    )
    except UnicodeDecodeError:
        raise InputError(f"csv: {p.name} is not a text CSV file") from None
    except csv.Error as exc:
        raise InputError(f"csv: {p.name} is not a readable CSV ({exc})") from None
    if not rows:
        raise InputError(f"csv: {p.name} holds no result rows")
    return rows
