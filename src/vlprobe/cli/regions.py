"""``probe regions import|export|info``: precomputed region features (LXMERT, UNITER)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from vlprobe.cli._common import AsJson, RegionFile, RegionOut
from vlprobe.cli.app import guarded

regions_app = typer.Typer(
    name="regions", help="Import and inspect region features (LXMERT, UNITER).", no_args_is_help=True
)


@regions_app.command("import")
@guarded
def regions_import(
    path: Annotated[Path, typer.Argument(help="TSV file, UNITER npz directory, or vlprobe region .h5.")],
    out: RegionOut,
    fmt: Annotated[str, typer.Option("--format", help="butd-tsv | lxmert-tsv | uniter-npz | h5")],
    dtype: Annotated[
        str | None, typer.Option(help="Feature storage: float32 | float16 (default: float16 for uniter-npz).")
    ] = None,
    feature_dim: Annotated[int | None, typer.Option(help="Required feature width (e.g. 2048).")] = None,
    box_rule: Annotated[
        str, typer.Option(help="uniter-npz: all | uniter (first clip(#(conf>0.2), 10, 100) boxes).")
    ] = "all",
    image_dir: Annotated[Path | None, typer.Option(help="uniter-npz: images, for their pixel sizes.")] = None,
) -> None:
    """Convert precomputed region features into vlprobe's HDF5 (validated, streamed)."""
    from vlprobe.extract.regions.formats import import_regions

    s = import_regions(fmt, path, out, dtype=dtype, feature_dim=feature_dim, box_rule=box_rule, image_dir=image_dir)
    typer.echo(
        f"wrote {s.path}: {s.images} images, boxes min {s.boxes_min} / mean {s.boxes_mean:.1f} / "
        f"max {s.boxes_max}, feature dim {s.feature_dim} ({s.dtype})"
    )


@regions_app.command("export")
@guarded
def regions_export(
    path: RegionFile,
    out: Annotated[Path, typer.Option(help="TSV file, or directory for uniter-npz.")],
    fmt: Annotated[str, typer.Option("--format", help="butd-tsv | lxmert-tsv | uniter-npz")],
) -> None:
    """Write a region file in one of the precomputed formats (for other tools)."""
    from vlprobe.extract.regions.formats import export_regions

    n = export_regions(path, fmt, out)
    typer.echo(f"wrote {n} images to {out} ({fmt})")


@regions_app.command("info")
@guarded
def regions_info(path: RegionFile, as_json: AsJson = False) -> None:
    """Describe a region file: images, boxes per image, feature width and dtype, source, fingerprint."""
    from vlprobe.extract.regions.formats import region_info

    info = region_info(path)
    if as_json:
        typer.echo(json.dumps(info, indent=2, sort_keys=True))
        return
    b = info["boxes"]
    typer.echo(f"{info['path']}  {info['size_bytes'] / 1e6:.1f} MB  {info['fingerprint'][:23]}")
    typer.echo(f"images     {info['images']} ({info['images_without_size']} without a recorded size)")
    typer.echo(f"boxes      min {b['min']} / mean {b['mean']:.1f} / max {b['max']} (padded to {info['max_boxes']})")
    typer.echo(f"features   dim {info['feature_dim']}, {info['dtype']}; extras: {', '.join(info['extras']) or 'none'}")
    typer.echo(f"meta       {json.dumps(info['meta'], sort_keys=True)}")
