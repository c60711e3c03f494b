"""One self-contained page of a results folder (``probe report``): every run's figure and tables.

Per experiment folder of ``RESULTS_DIR`` (``<experiment>/manifest.json``) and per run in it:

* the figure of the run (:func:`~vlprobe.results.plots.make_figure`), and one overlaying
  every run of the experiment when it has several;
* the main table: per-layer summary rows (target and control mean, min, max over seeds,
  selectivity, 95% intervals, permutation p-value) for layer curves; the scores with their 95%
  intervals for bars and λ curves; the comparison rows of ``probe compare``;
* the per-tag breakdown: the same values per tag subset (``collapsed_tag=...``, ``wwh=...``,
  ``image=...``);
* the settings (the config fields that change the numbers) and the provenance: experiment
  version, vlprobe version and git revision, when, seeds, the device, package versions and the
  fingerprints of every input.

With ``known_answers`` (a testbed's ``known_answers.json``, :mod:`vlprobe.results.known_answers`)
the page opens with the known answers: each one's numbers and whether it held.

HTML (default): one file, figures embedded as base64 PNG, the style inline, no external asset
and no script. Markdown: the same sections, figures as ``data:`` image links.

This module decides what the page says (a list of blocks: headings, notes, figures, tables); the
page's layout and style live in one Jinja2 template, ``templates/report.html.jinja`` (Markdown:
``templates/report.md.jinja``), rendered with autoescaping (HTML) and undefined names as errors.
"""

from __future__ import annotations

import base64
import functools
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlprobe import __version__
from vlprobe.results.reading import RunResult, find_runs
from vlprobe.runs.charts import chart_of
from vlprobe.runs.summary import summarize
from vlprobe.runs.units import base_metric, metric_unit, short_unit
from vlprobe.validation import InputError, check_choice

__all__ = ["COLLAPSE_ROWS", "FORMATS", "MAX_ROWS", "build_report", "write_report"]

FORMATS = ("html", "md")
#: Most rows one table shows (the CSV holds them all; the page says how many are left out).
MAX_ROWS = 200
#: Tables of more rows than this are collapsed on the HTML page (a ``<details>`` to open); Markdown
#: shows every table open.
COLLAPSE_ROWS = 25
_DERIVED = (".ci95_low", ".ci95_high", ".p_value")


@dataclass(frozen=True)
class _Block:
    """One piece of the page, in page order; the templates lay each kind out."""

    kind: str  # "h", "p", "note", "table", "img", "details"
    level: int = 0
    text: str = ""
    headers: tuple[str, ...] = ()
    rows: tuple[tuple[str, ...], ...] = ()
    data: bytes = b""
    width: int = 0  # img: the width to show it at, in CSS pixels


def _fmt(value: Any) -> str:
    if value is None or value == "":
        return ""
    if isinstance(value, str):
        try:
            value = int(value)
        except ValueError:
            try:
                value = float(value)
            except ValueError:
                return value
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "–"
        # one rule for every number: two decimals (0.00, 0.83, 100.00); below 0.01 two significant
        # digits (0.0001, a p-value), never a bare "0" beside "100.00"
        if abs(value) < 1e-12:  # a difference of equal means, up to round-off
            return "0.00"
        if abs(value) < 0.005 or abs(value) >= 1e6:
            return f"{value:.2g}"
        return f"{value:.2f}"
    return str(value)


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]], keys: int = 0) -> list[_Block]:
    """A table block (at most :data:`MAX_ROWS` rows). Of the first ``keys`` columns (what the rows
    are: stream, layer, pooling, split...), those with one value in every row are said once in a
    line above the table instead of repeated in a column of their own, so the table fits the page."""
    headers, rows = list(headers), [list(r) for r in rows]
    same = [c for c in range(min(keys, len(headers))) if len(rows) > 1 and len({_fmt(r[c]) for r in rows}) == 1
            and _fmt(rows[0][c]) != ""] if rows else []
    out = []
    if same and len(same) < len(headers):
        out.append(_Block("p", text="; ".join(f"{headers[c]}: {_fmt(rows[0][c])}" for c in same)))
        headers = [h for c, h in enumerate(headers) if c not in same]
        rows = [[v for c, v in enumerate(r) if c not in same] for r in rows]
    shown = [tuple(_fmt(v) for v in r) for r in rows[:MAX_ROWS]]
    out.append(_Block("table", headers=tuple(headers), rows=tuple(shown)))
    if len(rows) > MAX_ROWS:
        out.append(_Block("p", text=f"{len(rows) - MAX_ROWS} more rows are in the CSV."))
    return out


def _units(run: RunResult) -> dict[str, str]:
    """``{metric: short unit}`` of a run: the tidy CSV's ``unit`` column, else the declared unit
    (:mod:`vlprobe.runs.units`); intervals in their metric's unit, p-values left out."""
    out: dict[str, str] = {}
    for r in run.rows:
        m = str(r.get("metric", ""))
        if not m or m.endswith(".p_value") or base_metric(m) in out:
            continue
        unit = r.get("unit") if not m.endswith((".ci95_low", ".ci95_high")) else None
        if not unit:
            try:
                unit = metric_unit(m)
            except KeyError:
                unit = ""
        out[base_metric(m)] = short_unit(unit) if unit else ""
    return out


def _with_unit(header: str, unit: str) -> str:
    """A column header with its unit, ``value (%)``; unchanged without one."""
    return f"{header} ({unit})" if unit else header


def _unit_columns(recs: Sequence[Mapping[str, Any]], units: Mapping[str, str]) -> tuple[str, bool]:
    """The unit the value columns of a table share (for their headers), or ``("", True)``: the
    metrics differ in unit, so the table takes a ``unit`` column."""
    found = {units.get(str(r.get("metric", "")), "") for r in recs}
    if len(found) == 1:
        return next(iter(found)), False
    return "", bool(found)


def _is_tag(subset: str) -> bool:
    return "=" in subset


def _span(low: Any, high: Any) -> str:
    """``low – high`` as one cell; a dash without either bound."""
    lo, hi = _fmt(low), _fmt(high)
    return "–" if lo in ("", "–") or hi in ("", "–") else f"{lo} – {hi}"


#: The per-layer table: (heading, summary column, or a pair of columns shown as one range cell).
_LAYER_COLUMNS: tuple[tuple[str, str | tuple[str, str]], ...] = (
    ("target", "target_mean"), ("target min–max", ("target_min", "target_max")),
    ("target 95% CI", ("target_ci95_low", "target_ci95_high")),
    ("control", "control_mean"), ("control min–max", ("control_min", "control_max")),
    ("control 95% CI", ("control_ci95_low", "control_ci95_high")),
    ("selectivity", "selectivity"), ("selectivity 95% CI", ("selectivity_ci95_low", "selectivity_ci95_high")),
    ("p_value", "p_value"),
)


#: The per-layer columns in the metric's unit (their intervals, beside them, are too).
_POINT_COLUMNS = ("target", "control", "selectivity")


def _layer_headers(keys: Sequence[str], unit: str, unit_column: bool) -> tuple[str, ...]:
    values = [_with_unit(h, unit) if h in _POINT_COLUMNS else h for h, _ in _LAYER_COLUMNS]
    return (*keys, *(("unit",) if unit_column else ()), *values)


def _layer_cells(rec: dict[str, Any], keys: Sequence[str], units: Mapping[str, str] | None = None) -> list[Any]:
    cells: list[Any] = [rec.get(c) for c in keys]
    if units is not None:
        cells.append(units.get(str(rec.get("metric", "")), ""))
    for _, col in _LAYER_COLUMNS:
        cells.append(_span(rec.get(col[0]), rec.get(col[1])) if isinstance(col, tuple) else rec.get(col))
    return cells


def _layer_tables(run: RunResult) -> list[_Block]:
    summary = summarize(run.rows)
    keys: tuple[str, ...] = ("stream", "layer", "pooling", "split", "metric")
    main = [r for r in summary if r["subset"] == "all"] or [r for r in summary if not _is_tag(r["subset"])]
    groups = list(dict.fromkeys(r["subset"] for r in main))
    if groups == ["all"]:
        out = [_Block("h", 4, "Per layer (subset all; means over seeds, 95% intervals over items)")]
    else:  # the run's own groups (task-adaptation's modes): one column tells them apart
        keys = ("subset", *keys)
        out = [_Block("h", 4, f"Per layer ({', '.join(groups)}; means over seeds, 95% intervals over items)")]
    units = _units(run)
    unit, unit_column = _unit_columns(main, units)
    out += _table(_layer_headers(keys, unit, unit_column),
                  [_layer_cells(r, keys, units if unit_column else None) for r in main], keys=len(keys))
    chart = chart_of(run.experiment)
    metric = next((m for m in (chart.metrics if chart else ()) if any(r["metric"] == m for r in summary)), None)
    tags = [r for r in summary if _is_tag(r["subset"]) and (metric is None or r["metric"] == metric)]
    if tags:
        out.append(_Block("h", 4, f"Per tag ({metric or 'every metric'}: target mean over seeds, selectivity)"))
        tkeys: tuple[str, ...] = ("subset", "stream", "layer", "pooling", "split")
        tunit, tunit_column = _unit_columns(tags, units)
        if tunit_column:
            tkeys = (*tkeys, "metric")
        theads = (*tkeys, *(("unit",) if tunit_column else ()), _with_unit("target", tunit), "target 95% CI",
                  _with_unit("control", tunit), _with_unit("selectivity", tunit), "selectivity 95% CI", "p_value")
        out += _table(theads, [[*(r.get(c) for c in tkeys), *((units.get(r["metric"], ""),) if tunit_column else ()),
                                r.get("target_mean"),
                                _span(r.get("target_ci95_low"), r.get("target_ci95_high")), r.get("control_mean"),
                                r.get("selectivity"), _span(r.get("selectivity_ci95_low"), r.get("selectivity_ci95_high")),
                                r.get("p_value")] for r in tags], keys=len(tkeys))
    return out


def _score_rows(run: RunResult) -> list[dict[str, Any]]:
    """Target rows with their interval columns (bars, λ curves)."""
    point: dict[tuple[str, ...], dict[str, Any]] = {}
    keys = ("subset", "stream", "layer", "pooling", "probe", "split")
    for r in run.rows:
        if r.get("task", "") not in ("target", ""):
            continue
        m = r["metric"]
        base = next((m[: -len(s)] for s in _DERIVED if m.endswith(s)), m)
        k = (*(r.get(c, "") for c in keys), base)
        rec = point.setdefault(k, {**{c: r.get(c, "") for c in keys}, "metric": base, "value": "", "ci95_low": "",
                                   "ci95_high": "", "n": ""})
        if m == base:
            rec["value"], rec["n"] = r["value"], r["n"]
        else:
            rec[m[len(base) + 1:]] = r["value"]
    return list(point.values())


def _score_tables(run: RunResult) -> list[_Block]:
    recs = _score_rows(run)
    used = [c for c in ("stream", "layer", "pooling", "probe", "split") if any(r[c] for r in recs)]
    cols = ("subset", *used, "metric", "value", "ci95_low", "ci95_high", "n")
    if any(r.get("p_value") for r in recs):
        cols = (*cols, "p_value")
    main = [r for r in recs if not _is_tag(r["subset"])]
    units = _units(run)
    unit, unit_column = _unit_columns(main, units)
    if unit_column:
        at = cols.index("metric") + 1
        cols = (*cols[:at], "unit", *cols[at:])
    heads = tuple(_with_unit(c, unit) if c == "value" else c for c in cols)
    out = [_Block("h", 4, "Scores (95% intervals over items)")]
    out += _table(heads, [[units.get(r["metric"], "") if c == "unit" else r.get(c) for c in cols] for r in main],
                  keys=1 + len(used))
    tags = [r for r in recs if _is_tag(r["subset"])]
    if tags:
        metrics = list(dict.fromkeys(r["metric"] for r in tags))
        subsets = list(dict.fromkeys(r["subset"] for r in tags))
        settings = list(dict.fromkeys(tuple(r[c] for c in used) for r in tags))
        by = {(r["subset"], tuple(r[c] for c in used), r["metric"]): r for r in tags}
        out.append(_Block("h", 4, "Per tag"))
        rows = [[s, *st, *(by.get((s, st, m), {}).get("value", "") for m in metrics)] for st in settings for s in subsets]
        out += _table(("subset", *used, *(_with_unit(m, units.get(m, "")) for m in metrics)), rows, keys=1 + len(used))
    return out


def _used(name: str, value: Any, manifest: Mapping[str, Any]) -> Any:
    """A setting as the report shows it: a value left to its default (None) says so, with what
    the run used where the manifest records it (the streams read and their pooling)."""
    if value is not None:
        return value
    streams = manifest.get("streams")
    used: list[str] = []
    if isinstance(streams, Mapping):
        if name == "streams":
            used = [str(s) for s in streams]
        elif name == "pooling":
            used = [f"{s}: {info['pooling']}" for s, info in streams.items()
                    if isinstance(info, Mapping) and info.get("pooling")]
    elif isinstance(streams, list) and name == "streams":
        used = [str(s) for s in streams]
    return f"default ({', '.join(used)})" if used else "default"


def _compare_side(manifest: Mapping[str, Any], side: str) -> str:
    """``a`` or ``b`` of a comparison named: its experiment, run and file (from the manifest)."""
    got = (manifest.get("inputs") or {}).get(side) or {}
    path = got.get("path") or (manifest.get("config") or {}).get(side) or "?"
    run = f"{got['experiment']} run {got['run']}" if got.get("experiment") and got.get("run") else ""
    return f"{side} = {run} ({path})" if run else f"{side} = {path}"


def _compare_tables(run: RunResult) -> list[_Block]:
    cols = ("stream", "layer", "pooling", "task", "seed", "split", "metric", "test", "value", "n")
    return [_Block("h", 4, "Paired comparison (a minus b)"),
            _Block("p", text=f"{_compare_side(run.manifest, 'a')}; {_compare_side(run.manifest, 'b')}."),
            *_table(cols, [[r.get(c, "") for c in cols] for r in run.rows])]


def _flat(prefix: str, value: Any, out: list[tuple[str, str]]) -> None:
    if isinstance(value, Mapping):
        for k, v in value.items():
            _flat(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(value, list) and len(value) > 12:
        out.append((prefix, f"{len(value)} values: " + ", ".join(map(str, value[:12])) + ", ..."))
    elif isinstance(value, list):
        out.append((prefix, ", ".join(map(str, value))))
    else:
        out.append((prefix, "" if value is None else str(value)))


def _device(manifest: Mapping[str, Any]) -> str:
    found = []
    if manifest.get("config", {}).get("device"):
        found.append(f"probes on {manifest['config']['device']}")
    for name, inp in (manifest.get("inputs") or {}).items():
        if isinstance(inp, Mapping) and inp.get("device"):
            found.append(f"{name} computed on {inp['device']}")
    return "; ".join(found) or "not recorded (no model was run)"


def _provenance(run: RunResult) -> list[_Block]:
    m = run.manifest
    if not m:
        return [_Block("p", text="No manifest entry names this run.")]
    settings = sorted((k, _used(k, v, m)) for k, v in run.settings.items())
    out = [_Block("h", 4, "Settings")]
    out += _table(("setting", "value"), [(k, ", ".join(map(str, v)) if isinstance(v, list) else v) for k, v in settings]
                  or [("(none)", "")])
    prov = [("experiment version", m.get("experiment_version")), ("vlprobe", m.get("vlprobe_version")),
            ("git revision", m.get("git_revision")), ("created", m.get("created")),
            ("seeds", ", ".join(map(str, m.get("seeds", [])))), ("device", _device(m))]
    inputs: list[tuple[str, str]] = []
    _flat("", m.get("inputs") or {}, inputs)
    versions = sorted((m.get("versions") or {}).items())
    out.append(_Block("h", 4, "Provenance"))
    out += _table(("field", "value"), prov)
    if inputs:
        out.append(_Block("details", text="Inputs and their fingerprints",
                          rows=tuple((k, v) for k, v in inputs if k.split(".")[-1] != "layer_kinds"
                                     and "layer_kinds" not in k), headers=("input", "value")))
    if versions:
        out.append(_Block("details", text="Package versions", rows=tuple((k, str(v)) for k, v in versions),
                          headers=("package", "version")))
    return out


#: Figures are shown at this many CSS pixels per inch of the figure (a 4.4 in panel: 634 px, about
#: half the page), drawn at twice that for sharp lines on high-density screens; at most the page's width.
FIGURE_PPI = 144
PAGE_WIDTH = 1200


def _figure(runs: Sequence[RunResult]) -> list[_Block]:
    from vlprobe.results.plots import figure_bytes, make_figure

    try:
        fig = make_figure(list(runs))
    except InputError as exc:
        return [_Block("p", text=f"No figure: {exc}")]
    width = min(PAGE_WIDTH, round(fig.get_figwidth() * FIGURE_PPI))
    return [_Block("img", text=f"{runs[0].experiment}: {', '.join(r.name for r in runs)}",
                   data=figure_bytes(fig, "png", dpi=2 * FIGURE_PPI), width=width)]


#: The experiments of "Why is Winoground Hard?" in the paper's order (scores and recall, task
#: adaptation, separability, variant similarity, the variant probe); a report shows them first, in
#: this order, then any other experiment by name, then comparisons.
PAPER_ORDER = ("winoground-scores", "recall", "task-adaptation", "separability", "variant-similarity", "variant-probe")


def _in_order(experiments: Sequence[str]) -> list[str]:
    def key(name: str) -> tuple[int, str]:
        if name in PAPER_ORDER:
            return PAPER_ORDER.index(name), ""
        return (len(PAPER_ORDER) + (name == "compare" or chart_of(name) is None)), name

    return sorted(dict.fromkeys(experiments), key=key)


def _title(root: Path, runs: Sequence[RunResult]) -> str:
    """``vlprobe report: clip on winoground`` (the runs' names and the datasets of their caches),
    or the folder's path where the runs record no dataset."""
    names = list(dict.fromkeys(r.name.split("@", 1)[0] for r in runs))
    datasets = list(dict.fromkeys(str(d) for r in runs
                                  if (d := ((r.manifest.get("inputs") or {}).get("cache") or {}).get("dataset"))))
    shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    where = f" on {', '.join(datasets)}" if datasets else ""
    return f"vlprobe report: {shown}{where}" if names else f"vlprobe report: {root}"


def _notes(run: RunResult) -> list[_Block]:
    """What the run's manifest notes (separability's "no case is separable at any layer"): on the
    page beside its figure, not only on the terminal."""
    return [_Block("note", text=n) for n in run.notes]


def _verdict_blocks(path: Path) -> list[_Block]:
    """The known answers of ``path`` (a testbed's ``known_answers.json``): how many hold, then one
    row per answer with its numbers, whether it held and, where it did not, what that means."""
    from vlprobe.results.known_answers import read_checks, verdict_line, verdict_rows

    checks = read_checks(path)
    return [_Block("h", 2, "Known answers"),
            _Block("p", text=f"{verdict_line(checks)} (from {path.name}; the testbed's models, whose answers are known)"),
            _Block("table", headers=("known answer", "measured", "expected", "held"), rows=tuple(verdict_rows(checks)))]


def _blocks(root: Path, runs: Sequence[RunResult], progress: bool = False, title: str | None = None,
            known_answers: Path | None = None) -> list[_Block]:
    from vlprobe.progress import say

    experiments = _in_order([r.experiment for r in runs])
    charted = {e for e in experiments if chart_of(e) is not None}
    n_figures = sum(len(mine) + (len(mine) > 1) for e in charted for mine in [[r for r in runs if r.experiment == e]])
    drawn = 0

    def figure(of: Sequence[RunResult]) -> list[_Block]:  # a figure takes seconds: say which, and how many are left
        nonlocal drawn
        drawn += 1
        say(progress, f"report: drawing {of[0].experiment} · {', '.join(r.name for r in of)} ({drawn}/{n_figures})")
        return _figure(of)

    out = [_Block("h", 1, title or _title(root, runs)),
           _Block("p", text=f"{len(runs)} run(s) of {len(experiments)} experiment(s) in {root}; "
                            f"report by vlprobe {__version__} on {time.strftime('%Y-%m-%d %H:%M:%S %Z')}."),
           _Block("table", headers=("experiment", "runs"),
                  rows=tuple((e, ", ".join(r.name for r in runs if r.experiment == e)) for e in experiments))]
    if known_answers is not None:  # the verdicts first: what the rest of the page should show
        out[1:1] = _verdict_blocks(known_answers)
    for experiment in experiments:
        mine = [r for r in runs if r.experiment == experiment]
        out.append(_Block("h", 2, experiment))
        chart = chart_of(experiment)
        if len(mine) > 1 and chart is not None:
            out.append(_Block("h", 3, "All runs overlaid"))
            out += figure(mine)
        for run in mine:
            out.append(_Block("h", 3, f"{experiment} · {run.name}"))
            out.append(_Block("p", text=f"{run.csv.relative_to(root) if run.csv.is_relative_to(root) else run.csv}"
                                        f" ({len(run.rows)} rows)"))
            out += _notes(run)
            if chart is not None:
                out += figure([run])
            if experiment == "compare":
                out += _compare_tables(run)
            elif chart is not None and chart.kind == "layers":
                out += _layer_tables(run)
            else:
                out += _score_tables(run)
            out += _provenance(run)
    return out


def _anchor(text: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in text.lower()).strip("-")


@functools.cache
def _templates() -> Any:
    """The Jinja2 environment of the report's templates (``templates/`` beside this module)."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("vlprobe.results", "templates"),
        autoescape=lambda name: name is not None and name.endswith(".html.jinja"),
        undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
    )
    env.filters["anchor"] = _anchor
    env.filters["b64"] = lambda data: base64.b64encode(data).decode("ascii")
    env.filters["md_cell"] = _md_cell
    env.tests["numeric"] = _numeric
    return env


def _render(template: str, blocks: Sequence[_Block], title: str) -> str:
    sections = [b.text for b in blocks if b.kind == "h" and b.level == 2]
    text: str = _templates().get_template(template).render(title=title, sections=sections, blocks=blocks,
                                                           collapse_rows=COLLAPSE_ROWS)
    return text


def _numeric(v: str) -> bool:
    try:
        float(v)
    except ValueError:
        return v == "–"
    return True


def _md_cell(v: str) -> str:
    return v.replace("|", "\\|").replace("\n", " ")


def build_report(results_dir: str | os.PathLike[str], fmt: str = "html", *, progress: bool = False,
                 title: str | None = None, known_answers: str | os.PathLike[str] | None = None) -> str:
    """The report of a results folder as HTML or Markdown text (module docstring); ``progress``:
    a line on stderr per figure drawn; ``title``: the page's (default: ``vlprobe report: <the
    runs' names> on <their datasets>``); ``known_answers``: a testbed's ``known_answers.json``,
    whose verdicts open the page (each answer, its numbers, whether it held).

    Raises
    ------
    InputError
        Unknown format; the folder holds no vlprobe results.
    """
    check_choice(fmt, "format", FORMATS)
    root = Path(results_dir)
    runs = find_runs([root], param="results_dir")
    blocks = _blocks(root, runs, progress, title, None if known_answers is None else Path(known_answers))
    return _render(f"report.{fmt}.jinja", blocks, blocks[0].text)


#: What reports are listed as among the files vlprobe wrote (:mod:`vlprobe.io`).
REPORT_KIND = "report"
_REPORT_MARK = "<!-- vlprobe-report -->"


def _is_report(path: Path) -> bool:
    """Whether an existing file is a page of vlprobe's report (its first lines carry the mark)."""
    try:
        with open(path, "rb") as fh:
            return _REPORT_MARK.encode() in fh.read(4096)
    except OSError:
        return False


def write_report(results_dir: str | os.PathLike[str], out: str | os.PathLike[str], fmt: str | None = None,
                 progress: bool = True, title: str | None = None,
                 known_answers: str | os.PathLike[str] | None = None) -> Path:
    """Write the report; the format defaults to the file name's (``.md``: Markdown, else HTML);
    ``progress``: a line on stderr per figure drawn (drawing takes most of the time); ``title``,
    ``known_answers``: see :func:`build_report`.

    Raises
    ------
    InputError
        ``out`` exists and vlprobe did not write it (the report's first line carries its mark).
    """
    from vlprobe.io.atomic import atomic_write
    from vlprobe.io.ownership import check_output

    target = Path(out)
    chosen = fmt or ("md" if target.suffix.lower() in (".md", ".markdown") else "html")
    check_choice(chosen, "format", FORMATS)
    check_output(target, REPORT_KIND, recognise=_is_report)
    text = build_report(results_dir, chosen, progress=progress, title=title, known_answers=known_answers)
    mark = f"{_REPORT_MARK}\n" if chosen == "html" else f"{_REPORT_MARK}\n\n"
    with atomic_write(target, kind=REPORT_KIND, recognise=_is_report) as fh:
        fh.write(text.replace("<!DOCTYPE html>\n", "<!DOCTYPE html>\n" + mark, 1) if chosen == "html" else mark + text)
    return target
