"""``probe fixtures dataset|model|regions``: synthetic data and tiny random models for tests and demos."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from vlprobe.cli._common import AllItems, Dataset, Limit, RegionOut, Subsets, _dataset_options
from vlprobe.cli.app import guarded
from vlprobe.validation import InputError

fixtures_app = typer.Typer(
    name="fixtures", help="Write synthetic datasets and tiny random models for tests and demos.", no_args_is_help=True
)
Seed = Annotated[int, typer.Option(help="Random seed.")]


@fixtures_app.command("dataset")
@guarded
def fixtures_dataset(
    out: Annotated[Path, typer.Option(help="Directory to write (new, or a previous synthetic dataset).")],
    items: Annotated[int, typer.Option(help="Number of items.")] = 40,
    seed: Seed = 0,
    image_size: Annotated[int, typer.Option(help="Image side in pixels.")] = 64,
) -> None:
    """Write a deterministic synthetic dataset in Winoground's on-disk format."""
    from vlprobe.data.synthetic import make_synthetic_winoground

    path = make_synthetic_winoground(out, n_items=items, seed=seed, image_size=image_size)
    typer.echo(f"wrote {items} synthetic Winoground-format items to {path} (variants: {path / 'variants.jsonl'})")


@fixtures_app.command("model")
@guarded
def fixtures_model(
    name: Annotated[str, typer.Argument(help="Model family (clip, siglip, lxmert, uniter, blip-itm, frcnn, blind-lm, blind-grammar).")],
    out: Annotated[Path, typer.Option(help="Directory to write the checkpoint into.")],
    seed: Annotated[int, typer.Option(help="Random seed for the weights.")] = 0,
) -> None:
    """Write a tiny random-initialised checkpoint in the model's real on-disk format."""
    from vlprobe.fixtures.models import FIXTURE_WRITERS

    if name not in FIXTURE_WRITERS:
        raise InputError(f"model: no fixture writer for {name!r} (available: {', '.join(sorted(FIXTURE_WRITERS))})")
    path = FIXTURE_WRITERS[name](out, seed)
    typer.echo(f"wrote a tiny random {name} checkpoint to {path}")


@fixtures_app.command("regions")
@guarded
def fixtures_regions(
    data_dir: Annotated[Path, typer.Option(help="Local dataset copy (e.g. from `probe fixtures dataset`).")],
    out: RegionOut,
    dataset: Dataset = "winoground",
    boxes: Annotated[int, typer.Option(help="Boxes per image (the maximum with --min-boxes).")] = 36,
    dim: Annotated[int, typer.Option(help="Feature width.")] = 2048,
    seed: Seed = 0,
    min_boxes: Annotated[int | None, typer.Option(help="Vary the box count per image from this to --boxes.")] = None,
    dtype: Annotated[str, typer.Option(help="float32 | float16")] = "float32",
    subsets: Subsets = None,
    limit: Limit = None,
    all_items: AllItems = False,
) -> None:
    """Write seeded random region features for every image of a dataset (SugarCrepe/VALSE: no image files needed)."""
    from vlprobe.extract.regions.store import RegionStore
    from vlprobe.fixtures.regions import random_regions_for_dataset

    path = random_regions_for_dataset(
        out, data_dir, dataset=dataset, n_boxes=boxes, dim=dim, seed=seed, min_boxes=min_boxes, dtype=dtype,
        options=_dataset_options(subsets=subsets, limit=limit, all_items=all_items),
    )
    with RegionStore(path) as store:
        n = len(store)
    typer.echo(f"wrote random region features for {n} images to {path} ({boxes} boxes max, dim {dim}, seed {seed})")
