"""``probe regions extract|merge|import|export|info``: region features for LXMERT and UNITER."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from vlprobe.cli._common import AsJson, RegionFile, RegionOut
from vlprobe.cli.app import guarded
from vlprobe.cli.declared import declared_options_of
from vlprobe.runs.declare import option
from vlprobe.runs.option_groups import DatasetOptions, ModelOptions, ProgressOption, ShardOption

regions_app = typer.Typer(
    name="regions", help="Extract, import and inspect region features (LXMERT, UNITER).", no_args_is_help=True
)


@dataclass(frozen=True, kw_only=True)
class RegionExtractOptions(DatasetOptions, ProgressOption):
    """``probe regions extract``'s options: the images (a folder, or a dataset and its items), the
    detector and its box selection, and the device, dtype and batch size of the model-loading
    group (:class:`~vlprobe.extract.regions.extraction.RegionExtractConfig` is the library side)."""

    detector: str = option(role="input", help="Faster R-CNN folder (config.yaml + pytorch_model.bin) or hub id.")
    images: Path | None = option(None, role="input", help="Folder of images (every image file in it).")
    dataset: str | None = DatasetOptions.redeclare(  # type: ignore[assignment]  # optional here: or --images
        "dataset", None, help="Registered dataset whose images to use (instead of --images).",
    )
    data_dir: Path | None = DatasetOptions.redeclare("data_dir", help="Local copy of the dataset (with --dataset).")
    preset: str = option("lxmert-36", help="Box selection: lxmert-36 | uniter-10-100 | hf-frcnn.")
    boxes: str | None = option(None, help="Boxes per image: N (exactly) or MIN:MAX (default: the preset's).")
    min_score: float | None = option(
        None, help="Confidence a box needs beyond the minimum count, in [0, 1] (default: the preset's).",
    )
    batch_size: int = ModelOptions.redeclare("batch_size", 4, help="Images per detector pass.")
    device: str = ModelOptions.redeclare("device")
    dtype: str = ModelOptions.redeclare("dtype", "float32", choices=("float32", "float16"),
                                        help="Detector's and stored features' dtype.")
    shard: str = ShardOption.redeclare("shard", help=(
        "Run block K of N (K/N), or auto: K/N from Slurm, torchrun, accelerate or MPI, written to "
        "OUT's <stem>.shard-K-of-N.h5; join with `probe regions merge`."))
    out: Path = option(role="output", help="Region file to write or resume (.h5).")


@regions_app.command("extract")
@guarded
@declared_options_of(RegionExtractOptions, omit=("strip_captions",))  # no caption is read
def regions_extract(options: RegionExtractOptions) -> None:
    """Detect boxes and extract 2048-d region features from images (resumable, shardable)."""
    from vlprobe.extract.regions.extraction import RegionExtractConfig, extract_regions

    o = options
    config = RegionExtractConfig(
        detector=o.detector, out=o.out, images=o.images, dataset=o.dataset, data_dir=o.data_dir,
        dataset_options=o.loader_options(), preset=o.preset, boxes=o.boxes, min_score=o.min_score,
        batch_size=o.batch_size, device=o.device, dtype=o.dtype, shard=o.shard, progress=o.progress,
    )
    r = extract_regions(config)
    rate = f", {r.images_written / r.seconds:.2f} images/s" if r.images_written and r.seconds > 0 else ""
    typer.echo(
        f"wrote {r.path}: {r.images_total} images ({r.images_written} computed this run, {r.seconds:.1f} s{rate})"
    )


@regions_app.command("merge")
@guarded
def regions_merge(
    out: RegionOut,
    shards: Annotated[list[Path] | None, typer.Argument(
        help="The N shard files of one `probe regions extract` run (default: OUT's <stem>.shard-K-of-N.h5 files, "
             "as --shard auto names them).", show_default=False)] = None,
) -> None:
    """Join the shard files of a `probe regions extract --shard K/N` (or `--shard auto`) run into one region file."""
    from vlprobe.extract.regions.merge import merge_region_shards, region_shard_state
    from vlprobe.shards import files_to_merge

    files = files_to_merge(out, shards, region_shard_state)
    if files is None:
        typer.echo(f"{out} is the whole run already (one process wrote it): nothing to merge")
        return
    path = merge_region_shards(files, out)
    typer.echo(f"merged {len(files)} shards into {path}")


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
def regions_info(
    path: RegionFile,
    labels: Annotated[
        str | None, typer.Option(help="The detector's object/attribute names (folder, file or hub id): show the top detections per image.")
    ] = None,
    top: Annotated[int, typer.Option(help="With --labels: detections shown per image.")] = 5,
    as_json: AsJson = False,
) -> None:
    """Describe a region file: images, boxes, features, detector and preset, progress, fingerprint."""
    from vlprobe.extract.regions.formats import region_info, top_detections

    info = region_info(path)
    if labels is not None:
        from vlprobe.extract.regions.detector import load_labels

        objects, attributes = load_labels(labels)
        info["detections"] = top_detections(path, objects, attributes, top=top)
    if as_json:
        typer.echo(json.dumps(info, indent=2, sort_keys=True))
        return
    b, meta = info["boxes"], dict(info["meta"])
    state = "complete" if info["complete"] else (
        f"INCOMPLETE: {info['done']} of {info['images']} images written (rerun the extract command to resume)"
    )
    typer.echo(f"{info['path']}  {info['size_bytes'] / 1e6:.1f} MB  schema {info['schema_version']}  {state}")
    typer.echo(f"images     {info['images']} ({info['images_without_size']} without a recorded size)")
    typer.echo(f"boxes      min {b['min']} / mean {b['mean']:.1f} / max {b['max']} (padded to {info['max_boxes']})")
    typer.echo(f"features   dim {info['feature_dim']}, {info['dtype']}; extras: {', '.join(info['extras']) or 'none'}")
    if meta.get("source_format") == "detector":
        det, preset, images = meta.pop("detector"), meta.pop("preset"), meta.pop("images")
        typer.echo(f"detector   {det.get('spec')}  {str(det.get('fingerprint'))[:23]}  colour order {meta.pop('colour_order', None)}")
        typer.echo("preset     " + "  ".join(f"{k}={v}" for k, v in sorted(preset.items())))
        where = images.get("folder") or f"{images.get('dataset')} {images.get('data_dir') or ''}".strip()
        typer.echo(f"source     {images.get('source')} {where}  shard {meta.pop('shard', '0/1')}")
        run = meta.pop("run", {})
        typer.echo(
            f"run        device {run.get('device')}  batch {run.get('batch_size')}  vlprobe {run.get('vlprobe_version')} "
            f"at git {run.get('git_revision')}, {run.get('created')}"
        )
    typer.echo(f"meta       {json.dumps(meta, sort_keys=True)}")
    for image_id, dets in info.get("detections", {}).items():
        typer.echo(f"{image_id}: " + ", ".join(f"{d['name']} {d['object_conf']:.2f}" for d in dets))
