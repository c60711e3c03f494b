"""Figures of tidy results CSVs (``probe plot``): each experiment drawn with the chart that fits it.

The chart is the one declared by the experiment named in the CSV (``Experiment.chart``,
:mod:`vlprobe.runs.charts`):
layer curves for the probing experiments (target and control per layer: mean over seeds,
min–max band over seeds, 95% item-bootstrap intervals as error bars, chance line, layer kinds
shaded), bars with 95% intervals for scores (Winoground, recall@k, SugarCrepe, VALSE), λ curves
for variant similarity. Several CSVs of one experiment overlay (one colour per run, the legend
naming each by its name and, where two share a name, by the settings that differ).
Percentages are drawn on 0–100. A CSV that no chart fits (per-item results, summaries, an
experiment without a chart) is refused with one line naming what it is.

Layer kinds come from a ``layer_kind`` column where the CSV has one, else from the kinds of the
cache the run read (recorded in its manifest).

Writes a PNG and a PDF (matplotlib, Agg backend), both marked as vlprobe's in their metadata; an
existing figure vlprobe did not write is never replaced.
"""

from __future__ import annotations

import io
import math
import os
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from vlprobe import __version__
from vlprobe.io.atomic import atomic_write
from vlprobe.io.ownership import check_output
from vlprobe.results.reading import RunResult, read_result
from vlprobe.runs.charts import Chart, chart_for
from vlprobe.runs.summary import summarize
from vlprobe.runs.units import PERCENT, metric_unit, short_unit
from vlprobe.validation import InputError, check_choice

__all__ = [
    "FORMATS",
    "KIND_COLORS",
    "MAX_PANELS",
    "STYLES",
    "TASK_COLORS",
    "TASK_STYLES",
    "figure_bytes",
    "make_figure",
    "plot_folder",
    "plot_results",
    "series_labels",
]

#: Most panels one figure holds; more are refused (choose subsets or a metric).
MAX_PANELS = 12
#: Background shade per layer kind: light tints, none of them grey (grey is the seed band's).
KIND_COLORS = {
    "embed": "#fbf3dc", "self": "#ecf3fa", "lang": "#eef8ea", "rel": "#fef1e4", "cross": "#f4f2f8",
    "joint": "#fdeeec",
}
#: Figure file formats ``probe plot --format`` writes.
FORMATS = ("png", "pdf", "svg")
#: Figure styles: ``screen`` (panels 4.4 x 3.3 in) and ``paper`` (a column 3.4 in wide, two
#: columns 7 in; 7-8 pt text), as ``probe plot --style`` names them.
STYLES = ("screen", "paper")
_style = {"name": "screen"}
#: Target and control: Okabe and Ito's blue and vermillion (told apart with every colour vision
#: deficiency), and apart in greyscale too by line and marker: target solid with filled circles,
#: control dashed with open squares (:data:`TASK_STYLES`).
TASK_COLORS = {"target": "#0072B2", "control": "#D55E00"}
#: ``task -> (line style, marker, marker face)``; a face of None: filled in the line's colour.
TASK_STYLES: dict[str, tuple[str, str, str | None]] = {"target": ("-", "o", None), "control": ("--", "s", "white")}
SERIES_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f")
_DERIVED = (".ci95_low", ".ci95_high", ".p_value")
_MARK = f"vlprobe {__version__}"
#: What figures are listed as among the files vlprobe wrote (:mod:`vlprobe.io`).
PLOT_KIND = "plot"


def _wrap(text: str, width: int) -> str:
    return "\n".join(textwrap.wrap(text, width=width, break_long_words=False, break_on_hyphens=False)) or text


def series_labels(results: Sequence[RunResult]) -> list[str]:
    """Legend names: each run's name; runs sharing one name get the settings that differ (``C=10``)."""
    labels = [r.name for r in results]
    for name in {n for n in labels if labels.count(n) > 1}:
        same = [i for i, r in enumerate(results) if r.name == name]
        settings = [results[i].settings for i in same]
        keys = sorted({k for s in settings for k in s if len({repr(t.get(k)) for t in settings}) > 1})
        for i, s in zip(same, settings, strict=True):
            diff = ", ".join(f"{k}={_short(s.get(k))}" for k in keys)
            labels[i] = f"{name} ({diff})" if diff else f"{name} ({results[i].csv.parent.parent.name})"
    return labels


def _short(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(map(str, value))
    return str(value)


def _subsets_wanted(spec: str | Sequence[str] | None) -> list[str] | None:
    if spec is None:
        return None
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    return [s.strip() for s in items if s.strip()] or None


def _pick_subsets(present: Sequence[str], wanted: list[str] | None, chart: Chart) -> list[str]:
    """Subsets to draw: asked (a family name such as ``collapsed_tag`` or ``image`` takes all of its
    values) or the chart's defaults."""
    present = list(dict.fromkeys(present))
    if wanted is None:
        if chart.subsets is None:
            chosen = [s for s in present if "=" not in s]
        else:
            chosen = [s for s in chart.subsets if s in present]
        return chosen or present[:1]
    out: list[str] = []
    for w in wanted:
        family = [s for s in present if s.startswith(f"{w}=")]
        if w in present:
            out.append(w)
        elif family:
            out += family
        else:
            shown = ", ".join(present[:12]) + (", ..." if len(present) > 12 else "")
            raise InputError(f"subset {w!r} is not in the CSV (has: {shown})")
    return list(dict.fromkeys(out))


def _base_metrics(rows: Sequence[Mapping[str, str]]) -> list[str]:
    out = []
    for r in rows:
        m = r["metric"]
        if not any(m.endswith(s) for s in _DERIVED):
            out.append(m)
    return list(dict.fromkeys(out))


def _pick_metrics(results: Sequence[RunResult], wanted: str | None, chart: Chart) -> list[str]:
    present = list(dict.fromkeys(m for r in results for m in _base_metrics(r.rows)))
    if wanted is not None:
        names = [w.strip() for w in wanted.split(",") if w.strip()]
        missing = [w for w in names if w not in present]
        if missing:
            raise InputError(f"metric {missing[0]!r} is not in the CSV (has: {', '.join(present)})")
        return names
    chosen = [m for m in chart.metrics if m in present]
    if not chosen:
        raise InputError(f"csv: none of the metrics {', '.join(chart.metrics)} is in the CSV (has: {', '.join(present)})")
    return chosen[:1] if chart.kind == "layers" else chosen


def _pick_split(results: Sequence[RunResult], wanted: str | None, chart: Chart, metric: str) -> str:
    present = list(dict.fromkeys(r["split"] for res in results for r in res.rows if r["metric"] == metric))
    if wanted is not None:
        if wanted not in present:
            raise InputError(f"split {wanted!r} is not in the CSV for metric {metric!r} (has: {', '.join(present)})")
        return wanted
    return chart.split if chart.split in present else present[0]


def _of_metric(rows: Sequence[Mapping[str, str]], metric: str) -> list[Mapping[str, str]]:
    names = {metric, *(metric + s for s in _DERIVED)}
    return [r for r in rows if r["metric"] in names]


def _check_same_experiment(results: Sequence[RunResult]) -> str:
    experiments = list(dict.fromkeys(r.experiment for r in results))
    if len(experiments) > 1:
        listed = ", ".join(f"{r.csv.name}: {r.experiment}" for r in results)
        raise InputError(f"csv: overlay CSVs of one experiment, got several ({listed})")
    return experiments[0]


def _percent(metric: str) -> bool:
    try:
        return metric_unit(metric) == PERCENT
    except KeyError:
        return False


def _unit_label(metric: str) -> str:
    try:
        return short_unit(metric_unit(metric))
    except KeyError:
        return ""


def _grid(n: int, *, cols: int | None = None) -> tuple[int, int]:
    c = cols or min(n, 3)
    return math.ceil(n / c), c


def _new_figure(n_panels: int, *, cols: int | None = None, panel: tuple[float, float] = (4.4, 3.3),
                paper_height: float | None = None) -> tuple[Any, list[Any]]:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    nrows, ncols = _grid(n_panels, cols=cols)
    if _style["name"] == "paper":  # one column (3.4 in) for one panel, both (7 in) for more
        width = 3.4 if ncols == 1 else 7.0
        panel = (width / ncols, paper_height or min(2.6, 0.78 * width / ncols))
    fig = Figure(figsize=(panel[0] * ncols, panel[1] * nrows + 1.3), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel().tolist()
    for ax in axes[n_panels:]:
        ax.set_visible(False)
    return fig, axes[:n_panels]


def _too_many(n: int, what: str) -> None:
    if n > MAX_PANELS:
        raise InputError(f"subset: {n} panels ({what}) exceed the {MAX_PANELS} a figure holds; choose fewer with --subset or --metric")


def _finish(fig: Any, title: str, note: str, handles: list[Any], labels: list[str]) -> None:
    width = max(40, int(fig.get_figwidth() * 11))
    fig.suptitle(_wrap(title, width) + ("\n" + _wrap(note, int(width * 1.25)) if note else ""),
                 fontsize=8 if _style["name"] == "paper" else 10)
    if handles:
        size = 7 if _style["name"] == "paper" else 8
        longest = max(len(x) for x in labels)
        # entries that fit a row: a character is about 0.55 of the font size wide, plus the swatch
        per_row = max(1, int(fig.get_figwidth() * 72 / (0.55 * size * longest + 3.5 * size)))
        ncol = min(len(handles), per_row, 4)
        if ncol < len(handles) and len(handles) <= 2 * ncol:
            ncol = -(-len(handles) // 2)  # two even rows rather than a full row and a short one
        fig.legend(handles, labels, loc="outside lower center", ncol=ncol, fontsize=size, frameon=False,
                   handlelength=1.6, columnspacing=1.2)


def _float(value: str | None) -> float:
    try:
        return float(value) if value not in (None, "") else float("nan")
    except ValueError:
        return float("nan")


# -- layer curves -------------------------------------------------------------------------------------


def _layer_kinds(result: RunResult, stream: str) -> dict[str, str]:
    """Layer (as written in the CSV) -> kind, for one stream of a run ({} when unknown)."""
    column = {r["layer"]: r.get("kind") or r.get("layer_kind", "") for r in result.rows
              if r["stream"] == stream and (r.get("kind") or r.get("layer_kind"))}
    if column:
        return column
    cache = (result.manifest.get("inputs") or {}).get("cache") or {}
    kinds = cache.get("layer_kinds") or _kinds_from_cache(cache.get("path"))
    if stream in kinds:
        return {str(i): k for i, k in enumerate(kinds[stream])}
    parts = stream.split("+")
    positions = result.manifest.get("layer_positions") or []
    sweeping = [s for s in parts if len({str(p.get(s)) for p in positions}) > 1]
    if len(sweeping) >= 1 and sweeping[0] in kinds:
        return {str(i): k for i, k in enumerate(kinds[sweeping[0]])}
    return {}


def _kinds_from_cache(path: str | None) -> dict[str, list[str]]:
    """Layer kinds read from the cache a run names (runs recorded before manifests held them)."""
    if not path or not Path(path).is_file():
        return {}
    from vlprobe.extract.cache.reader import ActivationCache

    try:
        with ActivationCache(path) as cache:
            return {s: cache.model_layer_kinds(s) for s in cache.streams}
    except (OSError, InputError, KeyError, ValueError):
        return {}


def _x_positions(layers: Sequence[str]) -> tuple[dict[str, float], list[float], list[str]]:
    """x per layer label, and the ticks: numbers where every layer is one, else categories."""
    try:
        xs = {layer: float(int(layer)) for layer in layers}
    except ValueError:
        xs = {layer: float(i) for i, layer in enumerate(layers)}
        return xs, list(xs.values()), [layer or "pooled" for layer in layers]
    ordered = sorted(xs.values())
    return xs, ordered, [str(int(x)) for x in ordered]


def _shade_kinds(ax: Any, xs: Mapping[str, float], kinds: Mapping[str, str]) -> list[str]:
    from matplotlib.transforms import blended_transform_factory

    points = sorted((x, kinds.get(layer, "")) for layer, x in xs.items())
    runs: list[tuple[float, float, str]] = []
    for x, kind in points:
        if runs and runs[-1][2] == kind and x - runs[-1][1] <= 1.0:
            runs[-1] = (runs[-1][0], x, kind)
        else:
            runs.append((x, x, kind))
    trans = blended_transform_factory(ax.transData, ax.transAxes)
    shown = []
    for lo, hi, kind in runs:
        if not kind:
            continue
        ax.axvspan(lo - 0.5, hi + 0.5, color=KIND_COLORS.get(kind, "#f7f7f2"), zorder=0, lw=0)
        ax.text((lo + hi) / 2, 1.01, kind, transform=trans, ha="center", va="bottom", fontsize=7, color="0.33")
        shown.append(kind)
    return shown


def _draw_layers(results: Sequence[RunResult], labels: Sequence[str], chart: Chart, metric: str, split: str,
                 wanted: list[str] | None) -> tuple[Any, list[Any], list[str]]:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    per_result = []
    references: dict[tuple[int, str, str], float] = {}  # (result, stream, subset) -> the reference's value
    for i, res in enumerate(results):
        rows = [r for r in _of_metric(res.rows, metric) if r["split"] == split]
        if chart.reference is not None:
            for r in rows:
                if r["probe"] == chart.reference and r["metric"] == metric:
                    references[(i, r["stream"], r["subset"])] = _float(r["value"])
            rows = [r for r in rows if r["probe"] != chart.reference]
        per_result.append(rows)
    subsets = _pick_subsets([r["subset"] for rows in per_result for r in rows], wanted, chart)
    panels: dict[tuple[str, str, str], list[tuple[int, list[dict[str, Any]]]]] = {}
    for i, rows in enumerate(per_result):
        summary = summarize([r for r in rows if r["subset"] in subsets])
        by_panel: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
        for rec in summary:
            by_panel.setdefault((rec["stream"], rec[chart.panel], rec["subset"]), []).append(rec)
        for key, recs in by_panel.items():
            panels.setdefault(key, []).append((i, recs))
    if not panels:
        raise InputError(f"csv: {results[0].csv.name} has no target/control rows for metric {metric!r} ({split})")
    order = sorted(panels, key=lambda k: (subsets.index(k[2]), list(panels).index(k)))
    if all({rec["layer"] for _, recs in panels[k] for rec in recs} == {""} for k in order):
        # no layers (pooled outputs): one point per panel; the subsets side by side in one panel instead
        return _draw_points(results, labels, chart, metric, split, panels, subsets)
    _too_many(len(order), f"stream x {chart.panel} x subset")
    fig, axes = _new_figure(len(order))
    single = len(results) == 1
    percent = _percent(metric)
    kinds_seen: list[str] = []
    has_band = has_ci = False
    has_reference = False
    tasks_drawn: set[str] = set()  # a run without a control task gets no control in the legend
    missing_drawn = False
    for ax, key in zip(axes, order, strict=True):
        stream, pooling, subset = key  # pooling: the chart's panel column
        layers = list(dict.fromkeys(rec["layer"] for _, recs in panels[key] for rec in recs))
        xs, ticks, tick_labels = _x_positions(layers)
        kinds = next((k for i, _ in panels[key] if (k := _layer_kinds(results[i], stream))), {})
        kinds_seen += [k for k in _shade_kinds(ax, xs, kinds) if k not in kinds_seen]
        for i, recs in panels[key]:
            recs = sorted(recs, key=lambda r: xs[r["layer"]])
            x = [xs[r["layer"]] for r in recs]
            present = [any(math.isfinite(r[f"{t}_mean"]) for t in ("target", "control")) for r in recs]
            for task in ("target", "control"):
                color = TASK_COLORS[task] if single else SERIES_COLORS[i % len(SERIES_COLORS)]
                style, marker, face = TASK_STYLES[task]
                mean = [r[f"{task}_mean"] for r in recs]
                if any(math.isfinite(m) for m in mean):
                    tasks_drawn.add(task)
                # one layer: a point (larger), no line to draw
                ax.plot(x, mean, style, marker=marker, mfc=face or color, ms=3.5 if len(x) > 1 else 6.5,
                        color=color, lw=1.6, clip_on=False, zorder=3)
                gaps = [xx for xx, m, p in zip(x, mean, present, strict=True) if p and not math.isfinite(m)]
                if gaps and metric in chart.missing:  # the other task has a value there: say why this one has none
                    missing_drawn = True
                    ax.plot(gaps, [0.0] * len(gaps), ls="none", marker="x", ms=6, mew=1.5, color=color, clip_on=False,
                            zorder=4, transform=_bottom(ax))
                lo, hi = [r[f"{task}_min"] for r in recs], [r[f"{task}_max"] for r in recs]
                if any(h > m for h, m in zip(hi, lo, strict=True)):
                    has_band = True
                    ax.fill_between(x, lo, hi, color=color, alpha=0.18, lw=0, zorder=2)
                cl, ch = [r[f"{task}_ci95_low"] for r in recs], [r[f"{task}_ci95_high"] for r in recs]
                if any(math.isfinite(v) for v in cl):
                    has_ci = True
                    err = [[max(0.0, m - v) if math.isfinite(v) else 0.0 for m, v in zip(mean, cl, strict=True)],
                           [max(0.0, v - m) if math.isfinite(v) else 0.0 for m, v in zip(mean, ch, strict=True)]]
                    ax.errorbar(x, mean, yerr=err, fmt="none", ecolor=color, elinewidth=0.9, capsize=2.5, zorder=3,
                                clip_on=False)
        if metric in chart.chance:
            ax.axhline(chart.chance[metric], color="0.27", ls=":", lw=1.1, zorder=1)
        for i, _ in panels[key]:
            ref = references.get((i, stream, subset), math.nan)
            if math.isfinite(ref):
                has_reference = True
                color = "0.2" if single else SERIES_COLORS[i % len(SERIES_COLORS)]
                ax.axhline(ref, color=color, ls="-.", lw=1.2, zorder=2)
        ax.set_xticks(ticks, tick_labels if len(ticks) <= 16 else None)
        if len(ticks) > 16:
            from matplotlib.ticker import MaxNLocator

            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlim(min(ticks) - 0.5, max(ticks) + 0.5)
        if percent:
            ax.set_ylim(0, 100)
        elif chart.floor is not None:
            ax.set_ylim(bottom=chart.floor)
        else:
            ax.axhline(0.0, color="0.6", lw=0.8, zorder=1)
        ax.set_xlabel("layer")
        ax.set_ylabel(f"{metric} ({_unit_label(metric)}), {split}")
        title = f"{stream} · {pooling or f'no {chart.panel}'}" + ("" if subset == "all" else f" · {subset}")
        ax.set_title(_wrap(title, 44), fontsize=9, pad=12 if kinds else 6)
        ax.grid(alpha=0.3, zorder=1)
        said = [n for i, _ in panels[key] for n in results[i].notes if f"stream {stream} " in n or "stream" not in n]
        if said:  # e.g. separability's "no case is separable at any layer": in the figure, not only on stderr
            ax.text(0.5, 0.5, _wrap("; ".join(dict.fromkeys(said)), 46), transform=ax.transAxes, ha="center",
                    va="center", fontsize=7, color="0.15", zorder=6,
                    bbox={"boxstyle": "round", "facecolor": "#fff8e1", "edgecolor": "#c9a227", "lw": 0.8})
    handles, names = _task_handles(labels, single, tasks_drawn)
    if has_band:  # the swatch in the band's own colour (one run: the target's; several: grey)
        handles.append(Patch(color=TASK_COLORS["target"] if single else "0.53", alpha=0.18 if single else 0.3,
                             lw=0))
        names.append("min–max over seeds")
    if has_ci:
        handles.append(Line2D([], [], color=TASK_COLORS["target"] if single else "0.27", marker="|", ls="none",
                              ms=8))
        names.append("95% CI over items")
    if metric in chart.chance:
        handles.append(Line2D([], [], color="0.27", ls=":"))
        names.append(f"chance ({chart.chance[metric]:g})")
    if has_reference:
        handles.append(Line2D([], [], color="0.2", ls="-."))
        names.append(f"probe={chart.reference} (no layer edited)")
    if missing_drawn:
        handles.append(Line2D([], [], color="0.2", ls="none", marker="x", ms=6, mew=1.5))
        names.append(chart.missing[metric])
    for kind in kinds_seen:
        handles.append(Patch(facecolor=KIND_COLORS.get(kind, "#f7f7f2"), edgecolor="0.75", lw=0.5))
        names.append(f"{kind} layers")
    return fig, handles, names


def _task_handles(labels: Sequence[str], single: bool, tasks_drawn: set[str]) -> tuple[list[Any], list[str]]:
    """Legend entries of the target and control lines: one run's in the task colours, several
    runs' in each run's colour (line style and marker tell the task apart)."""
    from matplotlib.lines import Line2D

    handles: list[Any] = []
    names: list[str] = []
    runs = [(None, "")] if single else [(SERIES_COLORS[i % len(SERIES_COLORS)], f"{label}: ") for i, label in
                                       enumerate(labels)]
    for color, prefix in runs:
        for task in [t for t in ("target", "control") if t in tasks_drawn or (t == "target" and not single)]:
            style, marker, face = TASK_STYLES[task]
            c = color or TASK_COLORS[task]
            handles.append(Line2D([], [], color=c, ls=style, marker=marker, mfc=face or c, ms=4))
            names.append(prefix + task)
    return handles, names


def _bottom(ax: Any) -> Any:
    """x in data, y in axes units (0: the bottom of the axes)."""
    from matplotlib.transforms import blended_transform_factory

    return blended_transform_factory(ax.transData, ax.transAxes)


def _draw_points(results: Sequence[RunResult], labels: Sequence[str], chart: Chart, metric: str, split: str,
                 panels: Mapping[tuple[str, str, str], list[tuple[int, list[dict[str, Any]]]]],
                 subsets: Sequence[str]) -> tuple[Any, list[Any], list[str]]:
    """Layer curves of runs with one value per panel (no layers): the subsets side by side on the x
    axis of one panel per (stream, pooling), each run's target (filled circle) and control (open
    square) beside each other, with their 95% intervals and min–max over seeds."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    groups = list(dict.fromkeys((k[0], k[1]) for k in panels))
    _too_many(len(groups), f"stream x {chart.panel}")
    shown = [s for s in subsets if any(k[2] == s for k in panels)]
    # the runs each panel holds (an LXMERT's lang stream is not a CLIP's image+text): slots for those only
    held = {g: sorted({i for k, got in panels.items() if k[:2] == g for i, _ in got}) for g in groups}
    points = max(len(shown) * 2 * len(runs) for runs in held.values())
    width_in = max(4.4, 1.0 + 0.38 * points)
    fig, axes = _new_figure(len(groups), cols=1 if width_in > 6.5 else None, panel=(width_in, 3.4))
    single = len(results) == 1
    has_band = has_ci = False
    tasks_drawn: set[str] = set()
    for ax, (stream, pooling) in zip(axes, groups, strict=True):
        width = 0.8 / (2 * len(held[(stream, pooling)]))
        for c, subset in enumerate(shown):
            for i, recs in panels.get((stream, pooling, subset), []):
                rec = recs[0]
                slot = held[(stream, pooling)].index(i)
                for t, task in enumerate(("target", "control")):
                    mean = rec[f"{task}_mean"]
                    if not math.isfinite(mean):
                        continue
                    tasks_drawn.add(task)
                    x = c - 0.4 + width * (2 * slot + t + 0.5)
                    color = TASK_COLORS[task] if single else SERIES_COLORS[i % len(SERIES_COLORS)]
                    _, marker, face = TASK_STYLES[task]
                    lo, hi = rec[f"{task}_min"], rec[f"{task}_max"]
                    if math.isfinite(lo) and hi > lo:
                        has_band = True
                        ax.bar(x, hi - lo, width * 0.7, bottom=lo, color=color, alpha=0.2, lw=0, zorder=2)
                    cl, ch = rec[f"{task}_ci95_low"], rec[f"{task}_ci95_high"]
                    if math.isfinite(cl) and math.isfinite(ch):
                        has_ci = True
                        ax.errorbar([x], [mean], yerr=[[max(0.0, mean - cl)], [max(0.0, ch - mean)]], fmt="none",
                                    ecolor=color, elinewidth=0.9, capsize=2.5, zorder=3)
                    ax.plot([x], [mean], marker=marker, ms=6.5, color=color, mfc=face or color, ls="none", zorder=4)
        if metric in chart.chance:
            ax.axhline(chart.chance[metric], color="0.27", ls=":", lw=1.1, zorder=1)
        ax.set_xticks(range(len(shown)), shown, fontsize=8)
        ax.set_xlim(-0.6, len(shown) - 0.4)
        if _percent(metric):
            ax.set_ylim(0, 100)
        elif chart.floor is not None:
            ax.set_ylim(bottom=chart.floor)
        ax.set_ylabel(f"{metric} ({_unit_label(metric)}), {split}")
        ax.set_title(_wrap(f"{stream} · {pooling or f'no {chart.panel}'}", 44), fontsize=9)
        ax.grid(axis="y", alpha=0.3, zorder=1)
    handles, names = _task_handles(labels, single, tasks_drawn)
    if has_band:
        handles.append(Patch(color=TASK_COLORS["target"] if single else "0.53", alpha=0.2, lw=0))
        names.append("min–max over seeds")
    if has_ci:
        handles.append(Line2D([], [], color=TASK_COLORS["target"] if single else "0.27", marker="|", ls="none", ms=8))
        names.append("95% CI over items")
    if metric in chart.chance:
        handles.append(Line2D([], [], color="0.27", ls=":"))
        names.append(f"chance ({chart.chance[metric]:g})")
    return fig, handles, names


# -- bars ---------------------------------------------------------------------------------------------


def _values(rows: Sequence[Mapping[str, str]]) -> dict[tuple[str, str], tuple[float, float, float]]:
    """(subset, metric) -> (value, ci low, ci high) of target rows."""
    point: dict[tuple[str, str], float] = {}
    low: dict[tuple[str, str], float] = {}
    high: dict[tuple[str, str], float] = {}
    for r in rows:
        if r.get("task", "target") not in ("target", ""):
            continue
        m = r["metric"]
        if m.endswith(".ci95_low"):
            low[(r["subset"], m[: -len(".ci95_low")])] = _float(r["value"])
        elif m.endswith(".ci95_high"):
            high[(r["subset"], m[: -len(".ci95_high")])] = _float(r["value"])
        elif not m.endswith(".p_value"):
            point[(r["subset"], m)] = _float(r["value"])
    nan = float("nan")
    return {k: (v, low.get(k, nan), high.get(k, nan)) for k, v in point.items()}


def _draw_bars(results: Sequence[RunResult], labels: Sequence[str], chart: Chart, metrics: list[str],
               wanted: list[str] | None) -> tuple[Any, list[Any], list[str]]:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    values = [_values(_rows_of(r.rows, metrics)) for r in results]
    subsets = _pick_subsets([s for v in values for s, _ in v], wanted, chart)
    # aggregates (all, mean-of-subsets, SugarCrepe's replace/swap/add: rows whose note says they are
    # a mean over others) are set apart: hatched, after a separator
    aggregates = {r["subset"] for res in results for r in _rows_of(res.rows, metrics)
                  if r["subset"] in ("all", "mean-of-subsets") or "mean over" in (r.get("note") or "")}
    if chart.categories == "metric":
        panel_keys, categories = subsets, metrics
    else:
        panel_keys, categories = metrics, subsets
    _too_many(len(panel_keys), "subsets" if chart.categories == "metric" else "metrics")
    many = len(categories) > 5 or any(len(c) > 9 for c in categories)
    n = len(results)
    paper = _style["name"] == "paper"
    # several panels of many (or long) categories, e.g. VALSE's 13 pieces x 3 metrics: horizontal bars,
    # the panels side by side sharing the category axis, rather than wide panels stacked in a tower
    horizontal = many and len(panel_keys) > 1
    if horizontal:
        rows = len(categories) * max(1, n)
        fig, axes = _new_figure(len(panel_keys), cols=min(len(panel_keys), 3),
                                panel=(3.4, 0.26 * rows + 1.0), paper_height=0.15 * rows + 0.7)
    else:
        fig, axes = _new_figure(len(panel_keys), cols=1 if many else None,
                                panel=(max(4.4, 0.55 * len(categories) * max(1, n) + 1.5), 3.4))
    tick_size = 6.5 if paper else 8
    width = 0.8 / n
    has_ci = False
    chance_drawn = False
    for ax, pk in zip(axes, panel_keys, strict=True):
        for i, (vals, label) in enumerate(zip(values, labels, strict=True)):
            xs, heights, missing = [], [], []
            ci_x, ci_y = [], []
            errs: list[list[float]] = [[], []]
            for c, cat in enumerate(categories):
                key = (pk, cat) if chart.categories == "metric" else (cat, pk)
                v, lo, hi = vals.get(key, (float("nan"),) * 3)
                x = c - 0.4 + width * (i + 0.5)
                if not math.isfinite(v):
                    missing.append(x)
                    continue
                xs.append(x)
                heights.append(v)
                if math.isfinite(lo) and math.isfinite(hi):
                    ci_x.append(x)
                    ci_y.append(v)
                    errs[0].append(max(0.0, v - lo))
                    errs[1].append(max(0.0, hi - v))
            color = SERIES_COLORS[i % len(SERIES_COLORS)]
            if xs:
                if horizontal:  # categories down the y axis (first on top: the axis is inverted below)
                    bars = ax.barh(xs, heights, width * 0.92, color=color, label=label, zorder=2)
                else:
                    bars = ax.bar(xs, heights, width * 0.92, color=color, label=label, zorder=2)
                if chart.categories == "subset":
                    drawn = [cat for c, cat in enumerate(categories)
                             if math.isfinite(vals.get((cat, pk), (float("nan"),) * 3)[0])]
                    for bar, cat in zip(bars, drawn, strict=True):
                        if cat in aggregates:
                            bar.set_hatch("///")
                            bar.set_edgecolor("white")
                            bar.set_linewidth(0)
                if len(categories) * n <= 24:  # the value above the bar, or above its interval
                    tops = dict(zip(ci_x, (y + e for y, e in zip(ci_y, errs[1], strict=True)), strict=True))
                    label_size = 5.5 if paper else 6.5
                    for x, v in zip(xs, heights, strict=True):
                        if horizontal:  # right of the bar, or of its interval
                            ax.annotate(f"{v:.1f}", (tops.get(x, v), x), xytext=(2, 0), textcoords="offset points",
                                        ha="left", va="center", fontsize=label_size)
                        else:
                            ax.annotate(f"{v:.1f}", (x, tops.get(x, v)), xytext=(0, 2), textcoords="offset points",
                                        ha="center", va="bottom", fontsize=label_size)
            if ci_x:
                has_ci = True
                bar_errs = {"xerr": errs} if horizontal else {"yerr": errs}
                ax.errorbar(*((ci_y, ci_x) if horizontal else (ci_x, ci_y)), **bar_errs, fmt="none", elinewidth=0.9,
                            capsize=1.8 if horizontal else 2.5, ecolor="0.2", zorder=3)
            for x in missing:
                if horizontal:
                    ax.text(1, x, "n/a", ha="left", va="center", fontsize=6.5, color="0.47")
                else:
                    ax.text(x, 1, "n/a", ha="center", va="bottom", fontsize=6.5, color="0.47", rotation=90)
        for c, cat in enumerate(categories):
            metric = cat if chart.categories == "metric" else pk
            if metric in chart.chance:
                lines = ax.vlines if horizontal else ax.hlines
                lines(chart.chance[metric], c - 0.45, c + 0.45, colors="0.27", linestyles=":", lw=1.1, zorder=3)
                chance_drawn = True
        split_at = [c for c, cat in enumerate(categories) if cat in aggregates] if chart.categories == "subset" else []
        metric_of_axis = pk if chart.categories == "subset" else categories[0]
        percent = all(_percent(m) for m in (categories if chart.categories == "metric" else [pk]))
        value_label = (("%" if chart.categories == "metric" else f"{pk} (%)") if percent
                       else f"{metric_of_axis} ({_unit_label(metric_of_axis)})")
        if horizontal:
            first_column = axes.index(ax) % min(len(panel_keys), 3) == 0  # category names once per row
            ax.set_yticks(range(len(categories)), categories if first_column else [], fontsize=tick_size)
            ax.set_ylim(len(categories) - 0.4, -0.6)  # inverted: the first category on top
            if split_at and split_at[0] > 0:
                ax.axhline(split_at[0] - 0.5, color="0.4", ls="--", lw=0.8, zorder=1)
            if percent:
                ax.set_xlim(0, 122)  # room right of 100 for the value labels
                ax.set_xticks(range(0, 101, 20))
            else:
                ax.set_xlim(left=0)
                ax.margins(x=0.15)
            ax.set_xlabel(value_label)
            ax.grid(axis="x", alpha=0.3, zorder=0)
        else:
            ax.set_xticks(range(len(categories)), categories, rotation=35 if many else 0,
                          ha="right" if many else "center", fontsize=tick_size)
            ax.set_xlim(-0.6, len(categories) - 0.4)
            if split_at and split_at[0] > 0:
                ax.axvline(split_at[0] - 0.5, color="0.4", ls="--", lw=0.8, zorder=1)
            if percent:
                ax.set_ylim(0, 112)  # room above 100 for the value labels, below the panel's title
                ax.set_yticks(range(0, 101, 20))
            else:
                ax.set_ylim(bottom=0)
            ax.set_ylabel(value_label)
            ax.grid(axis="y", alpha=0.3, zorder=0)
        ax.set_title(_wrap(pk if chart.categories == "metric" else f"{pk}", 50), fontsize=8 if paper else 9)
    handles: list[Any] = [Patch(color=SERIES_COLORS[i % len(SERIES_COLORS)]) for i in range(n)]
    names = list(labels)
    if has_ci:
        handles.append(Line2D([], [], color="0.2", marker="_" if horizontal else "|", ls="none", ms=8))
        names.append("95% CI over items")
    if chance_drawn:
        handles.append(Line2D([], [], color="0.27", ls=":"))
        names.append("chance")
    return fig, handles, names


def _rows_of(rows: Sequence[Mapping[str, str]], metrics: Sequence[str]) -> list[Mapping[str, str]]:
    return [r for m in metrics for r in _of_metric(rows, m)]


# -- lambda curves ------------------------------------------------------------------------------------


def _setting(row: Mapping[str, str]) -> tuple[str, float] | None:
    """(agg, λ) of a variant-similarity row: from ``agg``/``lambda`` columns, else the ``probe`` column."""
    if row.get("agg") and row.get("lambda"):
        return row["agg"], _float(row["lambda"])
    parts = dict(p.split("=", 1) for p in row.get("probe", "").split(";") if "=" in p)
    if "agg" in parts and "lambda" in parts:
        return parts["agg"], _float(parts["lambda"])
    return None


def _draw_lambda(results: Sequence[RunResult], labels: Sequence[str], chart: Chart, metrics: list[str],
                 wanted: list[str] | None) -> tuple[Any, list[Any], list[str]]:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    rows = [_rows_of(r.rows, metrics) for r in results]
    subsets = _pick_subsets([r["subset"] for rs in rows for r in rs], wanted, chart)
    keys = [(s, m) for s in subsets for m in metrics]
    _too_many(len(keys), "subsets x metrics")
    fig, axes = _new_figure(len(keys), cols=len(metrics) if len(metrics) <= 3 else None)
    styles = {"mean": "-", "max": "--"}
    aggs_seen: list[str] = []
    has_ci = False
    for ax, (subset, metric) in zip(axes, keys, strict=True):
        for i, rs in enumerate(rows):
            lines: dict[str, dict[float, list[float]]] = {}
            for r in rs:
                st = _setting(r)
                if st is None or r["subset"] != subset:
                    continue
                agg, lam = st
                slot = lines.setdefault(agg, {}).setdefault(lam, [float("nan")] * 3)
                which = 1 if r["metric"].endswith(".ci95_low") else 2 if r["metric"].endswith(".ci95_high") else 0
                if r["metric"] in (metric, f"{metric}.ci95_low", f"{metric}.ci95_high"):
                    slot[which] = _float(r["value"])
            color = SERIES_COLORS[i % len(SERIES_COLORS)]
            for agg, by_lam in lines.items():
                if agg not in aggs_seen:
                    aggs_seen.append(agg)
                lams = sorted(by_lam)
                y = [by_lam[lam][0] for lam in lams]
                ax.plot(lams, y, styles.get(agg, "-."), marker="o", ms=3.5, color=color, clip_on=False, zorder=3)
                lo, hi = [by_lam[lam][1] for lam in lams], [by_lam[lam][2] for lam in lams]
                if all(math.isfinite(v) for v in lo + hi):
                    has_ci = True
                    ax.fill_between(lams, lo, hi, color=color, alpha=0.12, lw=0, zorder=2)
        if metric in chart.chance:
            ax.axhline(chart.chance[metric], color="0.27", ls=":", lw=1.1)
        lam_ticks = sorted({lam for rs in rows for r in rs if (st := _setting(r)) for lam in (st[1],)})
        ax.set_xticks(lam_ticks, [f"{t:g}" for t in lam_ticks])
        ax.set_xlim(-0.05, 1.05)
        ax.set_ylim(0, 100)
        ax.set_xlabel("λ (weight of the variants)")
        ax.set_ylabel(f"{metric} score (%)")
        ax.set_title(_wrap(metric + ("" if subset == "all" else f" · {subset}"), 44), fontsize=9)
        ax.grid(alpha=0.3)
    handles: list[Any] = []
    names: list[str] = []
    for i, label in enumerate(labels):
        handles.append(Patch(color=SERIES_COLORS[i % len(SERIES_COLORS)]))
        names.append(label)
    for agg in aggs_seen:
        handles.append(Line2D([], [], color="0.2", ls=styles.get(agg, "-.")))
        names.append(f"agg = {agg}")
    if has_ci:  # the band's colour: one run's own, several runs' a neutral grey
        handles.append(Patch(color=SERIES_COLORS[0] if len(labels) == 1 else "0.53",
                             alpha=0.2 if len(labels) == 1 else 0.3, lw=0))
        names.append("95% CI over items")
    if any(m in chart.chance for m in metrics):
        handles.append(Line2D([], [], color="0.27", ls=":"))
        names.append("chance")
    return fig, handles, names


# -- gap histograms (bias-gap) --------------------------------------------------------------------------


def _item_gaps(result: RunResult) -> dict[tuple[str, str], list[float]]:
    """(scorer, subset) -> the run's per-item gaps, read from its ``<run>.items.csv``."""
    import csv

    path = result.side_file(".items.csv")
    if not path.is_file():
        raise InputError(f"csv: the gap histograms of {result.csv.name} are drawn from {path.name}, which is missing")
    out: dict[tuple[str, str], list[float]] = {}
    with open(path, encoding="utf-8", newline="") as fh:
        for r in csv.DictReader(fh):
            if r.get("metric") != "gap":
                continue
            subset = r["subset"].split(":", 1)[0]  # <subset>:<item id>
            out.setdefault((r["probe"], subset), []).append(_float(r["value"]))
    return out


def _gap_bars(res: RunResult, present: list[str], wanted: list[str] | None, chart: Chart) -> list[dict[str, Any]]:
    """The run's bars (manifest ``bars``: label, scope, metric, member subsets, chance): those asked
    by label or scope, else Figure 1's where the run has some, else all; a version-1 run (no bars):
    one per subset, its share of gaps above 0."""
    bars = res.manifest.get("bars")
    if not isinstance(bars, list) or not bars:
        chance = res.manifest.get("chance_percent") or {}
        bars = [{"label": s, "subset": s, "metric": "accuracy", "members": [s], "chance": chance.get(s)}
                for s in _pick_subsets(present, None, chart)]
    if wanted is None:  # Figure 1's bars where the benchmark has some in the run, else every bar
        return [b for b in bars if b.get("figure1")] or bars
    known = {b["label"]: b for b in bars} | {b["subset"]: b for b in bars}
    for w in wanted:
        if w not in known:
            raise InputError(f"subset {w!r} is not a bar of the run (has: {', '.join(b['label'] for b in bars)})")
    return list({id(known[w]): known[w] for w in wanted}.values())


def _draw_gaps(results: Sequence[RunResult], labels: Sequence[str], chart: Chart, metrics: list[str],
               wanted: list[str] | None) -> tuple[Any, list[Any], list[str]]:
    """SugarCrepe's Figures 1 and 2: per bar (a scope of Figure 1: CREPE Atomic / Swap / Negate, ARO's
    tasks, VL-CheckList Object / Attribute / Relation; else a subset) the histogram of each blind
    scorer's gaps over its items (positive minus negative), then a panel of bars: each scorer's and
    each VLM run's value of the scope's headline metric, the same quantity for both."""
    import numpy as np
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    if len(results) > 1:
        raise InputError("csvs: bias-gap runs are drawn one at a time (each holds its scorers already)")
    res = results[0]
    gaps = _item_gaps(res)
    bars = _gap_bars(res, list(dict.fromkeys(s for _, s in gaps)), wanted, chart)
    scorers = list(dict.fromkeys(p for p, _ in gaps))
    _too_many(len(bars) + 1, "bars and their histograms")
    fig, axes = _new_figure(len(bars) + 1)
    every = [v for vals in gaps.values() for v in vals if math.isfinite(v)]
    half = 1.0 if all(abs(v) <= 1.0 for v in every) else max((abs(v) for v in every), default=1.0) or 1.0
    bins = int((res.manifest.get("config") or {}).get("bins") or 20)
    edges = np.linspace(-half, half, bins + 1)
    colors = {p: SERIES_COLORS[i % len(SERIES_COLORS)] for i, p in enumerate(scorers)}
    paper = _style["name"] == "paper"
    title_size = 8 if paper else 9
    for ax, bar in zip(axes, bars, strict=False):
        for p in scorers:
            vals = np.asarray([v for s in bar["members"] for v in gaps.get((p, s), [])], dtype=np.float64)
            if not len(vals):
                continue
            weights = np.full(len(vals), 100.0 / len(vals))
            ax.hist(vals, bins=edges, weights=weights, histtype="step", lw=1.5, color=colors[p], zorder=3)
            ax.hist(vals, bins=edges, weights=weights, histtype="stepfilled", alpha=0.12, color=colors[p], zorder=2)
        ax.axvline(0.0, color="0.27", ls=":", lw=1.1, zorder=4)
        ax.set_xlim(-half, half)
        ax.set_xticks(np.linspace(-half, half, 5))  # -1, -0.5, 0, 0.5, 1: not nine crowded ticks
        ax.set_xlabel("score gap (positive - negative)")
        ax.set_ylabel("% of items")
        ax.set_title(_wrap(bar["label"] or "all", 44), fontsize=title_size)
        ax.grid(alpha=0.3, zorder=0)
    # Figure 1: each bar's headline metric, blind scorers and the VLM runs compared
    values = {(r["probe"], r["subset"], r["metric"]): _float(r["value"]) for r in res.rows
              if r.get("task", "target") in ("target", "")}
    series = list(dict.fromkeys(r["probe"] for r in res.rows if r["probe"] in scorers or r["probe"].startswith("vlm:")))
    ax = axes[-1]
    width = 0.8 / max(1, len(series))
    for i, p in enumerate(series):
        color = colors.get(p, SERIES_COLORS[(len(scorers) + i) % len(SERIES_COLORS)])
        colors[p] = color
        xs = [c - 0.4 + width * (i + 0.5) for c in range(len(bars))]
        heights = [values.get((p, b["subset"], b["metric"]), float("nan")) for b in bars]
        ax.bar(xs, heights, width * 0.92, color=color, zorder=2, hatch="//" if p.startswith("vlm:") else None)
        if len(bars) * len(series) <= 24:  # the value above each bar: a 0 reads as 0, not as a missing bar
            for x, v in zip(xs, heights, strict=True):
                ax.annotate(f"{v:.1f}" if math.isfinite(v) else "n/a", (x, v if math.isfinite(v) else 0),
                            xytext=(0, 2), textcoords="offset points", ha="center", va="bottom",
                            fontsize=5 if paper else 6.5, color="0.1" if math.isfinite(v) else "0.47")
    for c, b in enumerate(bars):
        if isinstance(b.get("chance"), int | float):
            ax.hlines(b["chance"], c - 0.45, c + 0.45, colors="0.27", linestyles=":", lw=1.1, zorder=3)
    ax.set_xticks(range(len(bars)), [f"{b['label']}\n{b['metric']}" for b in bars],
                  rotation=35 if len(bars) > 3 else 0, ha="right" if len(bars) > 3 else "center",
                  fontsize=6.5 if paper else 8)
    ax.set_ylim(0, 112)  # room above 100 for the value labels
    ax.set_yticks(range(0, 101, 20))
    ax.set_ylabel("benchmark's metric (%)")
    ax.set_title("the benchmark's metric: blind scorers" + (" vs VLMs" if any(p.startswith("vlm:") for p in series)
                                                           else ""), fontsize=title_size)
    ax.grid(axis="y", alpha=0.3, zorder=0)
    handles: list[Any] = [Patch(facecolor=colors[p], hatch="//" if p.startswith("vlm:") else None)
                          for p in dict.fromkeys([*scorers, *series])]
    names = list(dict.fromkeys([*scorers, *series]))
    handles.append(Line2D([], [], color="0.27", ls=":"))
    names.append("gap 0; chance (random scores)")
    return fig, handles, names


# -- entry points -------------------------------------------------------------------------------------


def make_figure(
    results: Sequence[RunResult], *, metric: str | None = None, split: str | None = None,
    subset: str | Sequence[str] | None = None, title: str | None = None, style: str = "screen",
) -> Any:
    """The matplotlib Figure of one or several runs of one experiment (module docstring).

    Parameters
    ----------
    results : sequence of RunResult
        From :func:`~vlprobe.results.reading.read_result`.
    metric : str, optional
        Metric(s) to draw, comma-separated (default: the chart's).
    split : str, optional
        Layer curves: the split (default: the chart's, e.g. ``test``).
    subset : str or sequence of str, optional
        Subsets (comma-separated): exact names (``collapsed_tag=Object``, ``image=0``) or a tag
        family (``collapsed_tag``, ``wwh``, ``image``) for all of its values.
    title : str, optional
    style : {"screen", "paper"}
        ``paper``: one journal column (3.4 in) for one panel, two columns (7 in) for more, 7-8 pt text.

    Returns
    -------
    matplotlib.figure.Figure
    """
    from matplotlib import rc_context

    check_choice(style, "style", STYLES)
    if not results:
        raise InputError("csvs: give at least one CSV")
    paper = {"font.size": 7, "axes.titlesize": 8, "axes.labelsize": 7, "xtick.labelsize": 6.5,
             "ytick.labelsize": 6.5, "lines.linewidth": 1.2, "lines.markersize": 3}
    _style["name"] = style
    try:
        rc: Any = paper if style == "paper" else {}
        with rc_context(rc):
            return _make_figure(results, metric=metric, split=split, subset=subset, title=title)
    finally:
        _style["name"] = "screen"


def _make_figure(
    results: Sequence[RunResult], *, metric: str | None, split: str | None,
    subset: str | Sequence[str] | None, title: str | None,
) -> Any:
    experiment = _check_same_experiment(results)
    chart = chart_for(experiment, results[0].csv.name)
    labels = series_labels(results)
    metrics = _pick_metrics(results, metric, chart)
    wanted = _subsets_wanted(subset)
    if chart.kind == "layers":
        if len(metrics) > 1:
            raise InputError(f"metric: layer curves draw one metric, got {', '.join(metrics)}")
        chosen = _pick_split(results, split, chart, metrics[0])
        fig, handles, names = _draw_layers(results, labels, chart, metrics[0], chosen, wanted)
        note = "mean over seeds"
    elif chart.kind == "bars":
        fig, handles, names = _draw_bars(results, labels, chart, metrics, wanted)
        note = ""
    elif chart.kind == "gaps":
        fig, handles, names = _draw_gaps(results, labels, chart, metrics, wanted)
        note = ("histograms: each blind scorer's gaps per bar (SugarCrepe Fig. 2); bars: the benchmark's own metric, "
                "blind scorers and VLMs alike (Fig. 1)")
    else:
        fig, handles, names = _draw_lambda(results, labels, chart, metrics, wanted)
        note = "S'(I,T) = (1-λ) S(I,T) + λ agg over variants S(I,T_v)"
    _finish(fig, title or f"{experiment}: {', '.join(labels)}", note if title is None else "", handles, names)
    return fig


def figure_bytes(fig: Any, fmt: str = "png", dpi: int = 110) -> bytes:
    """The figure encoded as PNG, SVG or PDF, marked as written by vlprobe."""
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=dpi, metadata=_metadata(fmt))
    return buf.getvalue()


def _metadata(fmt: str) -> dict[str, str]:
    return {"png": {"Software": _MARK}, "pdf": {"Creator": _MARK}, "svg": {"Creator": _MARK}}.get(fmt, {})


def written_by_vlprobe(path: Path) -> bool:
    """Whether an existing figure file carries vlprobe's mark (PNG text chunk, PDF/SVG creator)."""
    try:
        if path.suffix.lower() == ".png":
            from PIL import Image

            with Image.open(path) as im:
                return str(im.info.get("Software", "")).startswith("vlprobe")
        return b"vlprobe" in path.read_bytes()[-200_000:] or b"vlprobe" in path.read_bytes()[:200_000]
    except (OSError, ValueError):
        return False


def plot_results(
    csvs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str] | None = None,
    *,
    metric: str | None = None,
    split: str | None = None,
    subset: str | None = None,
    title: str | None = None,
    formats: str | Sequence[str] = "png,pdf",
    style: str = "screen",
) -> list[Path]:
    """Draw tidy results CSVs; write ``out`` in each of ``formats`` (default PNG and PDF).

    Parameters
    ----------
    csvs : path or sequence of paths
        ``OUT/<experiment>/<name>.csv`` of one or several runs of one experiment (overlaid); or
        one results folder (``OUT``, or one experiment's ``OUT/<experiment>``): one figure per run
        (:func:`plot_folder`).
    out : path, optional
        Figure file, ending in ``.png``, ``.pdf`` or ``.svg``; each format is written under its
        stem. Default: ``<name>.png`` beside one CSV (several CSVs need it). For a folder, the
        folder the figures go to (default: beside each CSV).
    metric, split, subset, title, style
        See :func:`make_figure`.
    formats : str or sequence of str
        Any of :data:`FORMATS` (``"png,svg"`` or a list).

    Returns
    -------
    list of Path
        The files of each figure, in ``formats`` order.
    """
    fmts = _check_formats(formats)
    check_choice(style, "style", STYLES)
    paths = [Path(csvs)] if isinstance(csvs, str | os.PathLike) else [Path(p) for p in csvs]
    if any(p.is_dir() for p in paths):
        if len(paths) != 1:
            raise InputError("csvs: give one results folder, or tidy CSVs of one experiment (not both)")
        return plot_folder(paths[0], out, metric=metric, split=split, subset=subset, title=title, formats=fmts,
                           style=style)
    if out is None:
        if len(paths) != 1:
            raise InputError(f"out: {len(paths)} CSVs overlay in one figure; name it with --out FIG.png")
        out = paths[0].with_suffix(".png")
    out_path = Path(out)
    if out_path.suffix.lower().lstrip(".") not in FORMATS:
        raise InputError(f"out must be a figure file name ending in .png, .pdf or .svg (each --format is written "
                         f"under its stem), got {str(out_path)!r}")
    targets = [out_path.with_suffix(f".{f}") for f in fmts]
    for path in targets:
        check_output(path, PLOT_KIND, recognise=written_by_vlprobe)
    results = [read_result(p) for p in paths]
    fig = make_figure(results, metric=metric, split=split, subset=subset, title=title, style=style)

    written = []
    for path in targets:
        data = figure_bytes(fig, path.suffix[1:], dpi=300 if style == "paper" else 150)
        with atomic_write(path, "wb", kind=PLOT_KIND, recognise=written_by_vlprobe) as fh:
            fh.write(data)
        written.append(path)
    return written


def _check_formats(formats: str | Sequence[str]) -> tuple[str, ...]:
    """``"png,pdf"`` or a list -> the formats, each one of :data:`FORMATS`, none twice."""
    names = [f.strip().lower() for f in (formats.split(",") if isinstance(formats, str) else formats) if f.strip()]
    if not names:
        raise InputError(f"format: give one or more of {', '.join(FORMATS)}, got {formats!r}")
    for f in names:
        check_choice(f, "format", FORMATS)
    return tuple(dict.fromkeys(names))


def plot_folder(
    folder: str | os.PathLike[str],
    out: str | os.PathLike[str] | None = None,
    *,
    metric: str | None = None,
    split: str | None = None,
    subset: str | None = None,
    title: str | None = None,
    formats: str | Sequence[str] = "png,pdf",
    style: str = "screen",
) -> list[Path]:
    """One figure per run of a results folder: ``<name>.png`` (and ``.pdf``) of each run's tidy CSV.

    Parameters
    ----------
    folder : path
        A results folder (``OUT``, holding ``OUT/<experiment>/manifest.json``) or one experiment's
        folder (``OUT/<experiment>``). Runs of experiments without a chart are passed over.
    out : path, optional
        Where the figures go, laid out as the CSVs are under ``folder``
        (``probe plot results/separability --out figs`` writes ``figs/clip.png``); default beside each CSV.
    metric, split, subset, title, formats, style
        See :func:`plot_results`; applied to every figure.

    Returns
    -------
    list of Path
        The PNG and the PDF of each run, in run order.

    Raises
    ------
    InputError
        The folder holds no run of an experiment that has a chart.
    """
    from vlprobe.results.reading import find_runs
    from vlprobe.runs.charts import chart_of, charted_experiments

    root = Path(folder)
    runs = [r for r in find_runs([root], param="csvs") if chart_of(r.experiment) is not None]
    if out is not None and Path(out).suffix.lower() in (".png", ".pdf", ".svg"):
        raise InputError(f"out: for a results folder, out is the folder the figures go to (one per run), got {str(out)!r}")
    if not runs:
        raise InputError(f"csvs: {root} holds no run of an experiment with a chart "
                         f"(charts exist for {', '.join(charted_experiments())})")
    written: list[Path] = []
    for run in runs:
        where = run.csv.with_suffix(".png")
        target = where if out is None else Path(out) / where.relative_to(root)
        written += plot_results(run.csv, target, metric=metric, split=split, subset=subset, title=title,
                                formats=formats, style=style)
    return written
