"""``probe plot``, ``probe report``, ``probe collect``, ``probe compare``: figures, pages and tables of results."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from vlprobe.cli.app import app, guarded


@app.command("plot")
@guarded
def plot_cmd(
    csvs: Annotated[
        list[Path], typer.Argument(help="Tidy results CSVs (OUT/<experiment>/<name>.csv) of one experiment; several overlay.")
    ],
    out: Annotated[Path, typer.Option(help="Figure to write (.png; a .pdf is written beside it).")],
    metric: Annotated[str | None, typer.Option(help="Metric(s) to draw, comma-separated (default: the experiment's).")] = None,
    split: Annotated[str | None, typer.Option(help="Split of layer curves (default: the experiment's, e.g. test).")] = None,
    subset: Annotated[
        str | None, typer.Option(help="Subsets, comma-separated: names (collapsed_tag=Object, image=0) or a tag family (wwh, image).")
    ] = None,
    title: Annotated[str | None, typer.Option(help="Figure title.")] = None,
) -> None:
    """Draw results with the chart that fits the experiment: layer curves, bars with intervals, λ curves (PNG and PDF)."""
    from vlprobe.experiments.plots import plot_results

    paths = plot_results(csvs, out, metric=metric, split=split, subset=subset, title=title)
    typer.echo("wrote " + " and ".join(str(p) for p in paths))
