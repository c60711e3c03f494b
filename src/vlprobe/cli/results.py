"""``probe plot``, ``probe report``, ``probe collect``, ``probe compare``: figures, pages and tables of results."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from vlprobe.cli.app import app, guarded
from vlprobe.cli.declared import declared_options_of
from vlprobe.runs.option_groups import ProgressOption


@app.command("plot")
@guarded
def plot_cmd(
    csvs: Annotated[
        list[Path], typer.Argument(help="Tidy results CSVs (OUT/<experiment>/<name>.csv) of one experiment; several "
                                        "overlay. Or a results folder (OUT or OUT/<experiment>): one figure per run.")
    ],
    out: Annotated[Path | None, typer.Option(
        help="Figure to write (.png; a .pdf is written beside it); default <name>.png beside one CSV. "
             "For a results folder: the folder the figures go to (default: beside each CSV).")] = None,
    metric: Annotated[str | None, typer.Option(help="Metric(s) to draw, comma-separated (default: the experiment's).")] = None,
    split: Annotated[str | None, typer.Option(help="Split of layer curves (default: the experiment's, e.g. test).")] = None,
    subset: Annotated[
        str | None, typer.Option(help="Subsets, comma-separated: names (collapsed_tag=Object, image=0) or a tag family (wwh, image).")
    ] = None,
    title: Annotated[str | None, typer.Option(help="Figure title.")] = None,
    formats: Annotated[str, typer.Option(
        "--format", metavar="png,pdf,svg", help="Figure formats, comma-separated, each written under --out's stem.",
    )] = "png,pdf",
    style: Annotated[str, typer.Option(
        metavar="screen|paper", help="paper: one journal column (3.4 in) for one panel, two (7 in) for more; small text.",
    )] = "screen",
) -> None:
    """Draw results with the chart that fits the experiment: layer curves, bars with intervals, λ curves (PNG and PDF).

    A results folder gets one figure per run (``probe plot results/separability/``: one per model).
    """
    from vlprobe.results.plots import _check_formats, plot_results

    fmts = _check_formats(formats)
    paths = plot_results(csvs, out, metric=metric, split=split, subset=subset, title=title, formats=fmts,
                         style=style)
    for k in range(0, len(paths), len(fmts)):  # each figure: its files, one per format
        files = [str(p) for p in paths[k:k + len(fmts)]]
        typer.echo(f"wrote {' and '.join(files) if len(files) <= 2 else ', '.join(files)}")


@app.command("compare")
@guarded
def compare_cmd(
    a: Annotated[Path, typer.Argument(help="Run A: its tidy CSV (per-item side file beside it), .items.csv or .scores.jsonl.")],
    b: Annotated[Path, typer.Argument(help="Run B, on the same items.")],
    out: Annotated[Path, typer.Option(help="Results folder (writes OUT/compare/<name>.csv and manifest.json).")],
    name: Annotated[str | None, typer.Option(help="Name of the comparison in the outputs (default: <a>-vs-<b>).")] = None,
    bootstrap: Annotated[int, typer.Option(help="Resamples of the paired bootstrap.")] = 1000,
    bootstrap_seed: Annotated[int, typer.Option(help="Seed of the bootstrap resamples.")] = 0,
) -> None:
    """Paired tests of two runs on the same items: McNemar for 0/1 outcomes, paired bootstrap otherwise."""
    from vlprobe.results.compare import CompareConfig, run_compare

    csv_path, manifest_path, rows = run_compare(
        CompareConfig(a=a, b=b, out=out, name=name, bootstrap=bootstrap, bootstrap_seed=bootstrap_seed)
    )
    shown = 0
    for row in rows:
        if row["metric"].endswith(".p_value") and shown < 20:
            where = " ".join(str(row[k]) for k in ("stream", "layer", "pooling", "task", "seed") if row.get(k) not in (None, ""))
            typer.echo(f"{row['metric'][:-8]:<18} {where:<28} {row['test']:<16} p = {row['value']:.4g}  (n={row['n']})")
            shown += 1
    more = sum(r["metric"].endswith(".p_value") for r in rows) - shown
    if more > 0:
        typer.echo(f"... and {more} more comparisons")
    typer.echo(f"wrote {csv_path} and {manifest_path}")


@app.command("report")
@guarded
@declared_options_of(ProgressOption, param="shown")
def report_cmd(
    results_dir: Annotated[Path, typer.Argument(help="A results folder (OUT, holding OUT/<experiment>/manifest.json).")],
    out: Annotated[Path, typer.Option(help="Page to write (report.html, or .md for Markdown).")],
    fmt: Annotated[str | None, typer.Option("--format", help="html or md (default: from the file name).")] = None,
    title: Annotated[str | None, typer.Option(
        help="The page's title (default: vlprobe report: <the runs' names> on <their datasets>).")] = None,
    known_answers: Annotated[Path | None, typer.Option(
        help="A testbed's known_answers.json (probe fixtures known-answers): its verdicts open the page.")] = None,
    *,
    shown: ProgressOption,
) -> None:
    """One self-contained page of a results folder: every figure and table, settings and provenance."""
    from vlprobe.results.html_report import write_report

    path = write_report(results_dir, out, fmt, progress=shown.progress, title=title,  # a line per figure drawn
                        known_answers=known_answers)
    typer.echo(f"wrote {path}")


@app.command("collect")
@guarded
def collect_cmd(
    results_dirs: Annotated[list[Path], typer.Argument(help="Results folders (or experiment folders) to gather.")],
    out: Annotated[Path, typer.Option(help="CSV to write: every run's rows with its settings columns.")],
) -> None:
    """Gather the runs of results folders into one CSV with the settings as columns."""
    from vlprobe.results.collect import write_collected

    path, runs, rows = write_collected(results_dirs, out)
    typer.echo(f"wrote {path} ({runs} runs, {rows} rows)")
