"""``probe fixtures dataset|model|regions|train``: synthetic data, tiny random models and the small
models trained on synthetic scenes (the known-answer testbed), for tests and demos."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path
from typing import Annotated, Any

import typer

from vlprobe.cli._common import (
    AllItems,
    Dataset,
    Device,
    Limit,
    Progress,
    RegionOut,
    Subsets,
    _dataset_options,
)
from vlprobe.cli.app import guarded
from vlprobe.validation import InputError

fixtures_app = typer.Typer(
    name="fixtures", help="Write synthetic datasets, tiny random models and trained testbed models.",
    no_args_is_help=True,
)
train_app = typer.Typer(
    name="train", help="Train the small testbed models on a synthetic training split.", no_args_is_help=True
)
fixtures_app.add_typer(train_app)
Seed = Annotated[int, typer.Option(help="Random seed.")]
TrainData = Annotated[Path, typer.Option(help="Synthetic training split (`probe fixtures dataset --split train`).")]
ModelOut = Annotated[
    Path, typer.Option(help="Model folder (new, or a previous one of this kind: reused if trained the same way).")
]
TextOrder = Annotated[str, typer.Option(help="keep, or shuffle (words shuffled every step: bag-of-words control).")]
Steps = Annotated[int, typer.Option(help="Optimiser steps.")]
Untrained = Annotated[
    bool, typer.Option("--untrained", help="Write the initial weights only: the random baseline of the same model.")
]


@fixtures_app.command("dataset")
@guarded
def fixtures_dataset(
    out: Annotated[Path, typer.Option(help="Directory to write (new, or a previous synthetic dataset).")],
    n_items: Annotated[int, typer.Option(help="Number of items.")] = 40,
    seed: Seed = 0,
    image_size: Annotated[int, typer.Option(help="Image side in pixels.")] = 64,
    split: Annotated[str, typer.Option(help="eval, or train (a seed stream no eval dataset uses).")] = "eval",
    fmt: Annotated[str, typer.Option(
        "--format", help="winoground, or a benchmark's own on-disk format: aro.")] = "winoground",
) -> None:
    """Write a deterministic synthetic dataset in Winoground's on-disk format, or in another
    benchmark's (``--format``: its annotation files and images, laid out as its authors distribute them)."""
    from vlprobe.data.synthetic import make_synthetic_winoground

    if fmt != "winoground":
        from vlprobe.data.benchmark_fixtures import write_benchmark_fixture

        if split != "eval":
            raise InputError("split: only the winoground format has a train split")
        path = write_benchmark_fixture(out, fmt, n_items=n_items, seed=seed, image_size=image_size)
        typer.echo(f"wrote a synthetic {fmt} fixture ({n_items} items per file) to {path} "
                   f"(files listed in {path / 'PROVENANCE.txt'})")
        return

    path = make_synthetic_winoground(out, n_items=n_items, seed=seed, image_size=image_size, split=split)
    typer.echo(
        f"wrote {n_items} synthetic Winoground-format items ({split} split) to {path} "
        f"(variants: {path / 'variants.jsonl'}, layouts: {path / 'scenes.jsonl'})"
    )


@fixtures_app.command("model")
@guarded
def fixtures_model(
    name: Annotated[str, typer.Argument(help="Model family with a fixture writer (`probe ls fixtures`).")],
    out: Annotated[Path, typer.Option(help="Directory to write the checkpoint into.")],
    seed: Annotated[int, typer.Option(help="Random seed for the weights.")] = 0,
    arch: Annotated[
        str | None, typer.Option(help="Architecture, for a model with several (openclip: vit, resnet, roberta; vilbert: pretrained, multitask).")
    ] = None,
) -> None:
    """Write a tiny random-initialised checkpoint in the model's real on-disk format."""
    from vlprobe.fixtures.model_fixture import write_model_fixture

    path = write_model_fixture(name, out, seed, arch)
    typer.echo(f"wrote a tiny random {name}{f' ({arch})' if arch else ''} checkpoint to {path}")


@fixtures_app.command("regions")
@guarded
def fixtures_regions(
    data_dir: Annotated[Path, typer.Option(help="Local dataset copy (e.g. from `probe fixtures dataset`).")],
    out: RegionOut,
    dataset: Dataset = "winoground",
    n_boxes: Annotated[int | None, typer.Option(help="Boxes per image (the maximum with --min-boxes); default 36.")] = None,
    dim: Annotated[int, typer.Option(help="Feature width.")] = 2048,
    seed: Seed = 0,
    min_boxes: Annotated[int | None, typer.Option(help="Vary the box count per image from this to --n-boxes.")] = None,
    dtype: Annotated[str, typer.Option(help="float32 | float16")] = "float32",
    subsets: Subsets = None,
    limit: Limit = None,
    all_items: AllItems = False,
    oracle: Annotated[
        bool, typer.Option("--oracle", help="Synthetic data: true shape boxes + background, features coding colour/shape/size.")
    ] = False,
    background_boxes: Annotated[int, typer.Option(help="With --oracle: background boxes per image.")] = 3,
    noise: Annotated[float, typer.Option(help="With --oracle: feature noise (standard deviation).")] = 0.1,
) -> None:
    """Write region features for every image of a dataset: seeded random ones (SugarCrepe/VALSE: no
    image files needed), or with --oracle those of a perfect detector on a synthetic dataset."""
    from vlprobe.extract.regions.store import RegionStore

    if oracle:
        from vlprobe.fixtures.oracle_regions import oracle_regions

        given = [name for name, v in (("--n-boxes", n_boxes), ("--min-boxes", min_boxes), ("--subsets", subsets),
                                      ("--limit", limit)) if v is not None]
        if given or all_items or dataset != "winoground":
            wrong = given[0] if given else "--all-items" if all_items else f"--dataset {dataset}"
            raise InputError(
                f"oracle: {wrong} does not apply; --oracle writes one box per drawn shape plus "
                "--background-boxes of a synthetic Winoground-format dataset"
            )
        path = oracle_regions(out, data_dir, background_boxes=background_boxes, noise=noise, seed=seed, dim=dim,
                              dtype=dtype)
        with RegionStore(path) as store:
            n = len(store)
        typer.echo(f"wrote oracle region features for {n} images to {path} (shapes + {background_boxes} "
                   f"background boxes, dim {dim}, noise {noise}, seed {seed})")
        return
    n_boxes = 36 if n_boxes is None else n_boxes
    from vlprobe.fixtures.regions import random_regions_for_dataset

    path = random_regions_for_dataset(
        out, data_dir, dataset=dataset, n_boxes=n_boxes, dim=dim, seed=seed, min_boxes=min_boxes, dtype=dtype,
        options=_dataset_options(subsets=subsets, limit=limit, all_items=all_items),
    )
    with RegionStore(path) as store:
        n = len(store)
    typer.echo(f"wrote random region features for {n} images to {path} ({n_boxes} boxes max, dim {dim}, seed {seed})")


def _report_training(name: str, result: object) -> None:
    rec = result.record  # type: ignore[attr-defined]
    if result.reused:  # type: ignore[attr-defined]
        typer.echo(f"{result.path} already holds this {name} (same settings and data): reused")  # type: ignore[attr-defined]
        return
    what = "untrained (initial weights)" if rec["untrained"] else f"{rec['steps']} steps, final loss {rec['final_loss']:.4f}"
    typer.echo(
        f"wrote {name} to {result.path}: {what}, text order {rec['text_order']}, seed {rec['seed']}, "  # type: ignore[attr-defined]
        f"{rec['seconds']:.1f} s ({rec['cpu_seconds']:.1f} s CPU) on {rec['device']}"
    )


#: The options of every ``probe fixtures train MODEL`` command, in ``--help`` order, with the defaults
#: of :class:`vlprobe.fixtures.training.TrainConfig` (the vocabulary test compares them): declared
#: once, here; a trainer's own options go after ``data_dir`` (LXMERT's ``regions``).
_TRAIN_OPTIONS: tuple[tuple[str, Any, Any], ...] = (
    ("data_dir", TrainData, inspect.Parameter.empty),
    ("out", ModelOut, inspect.Parameter.empty),
    ("text_order", TextOrder, "keep"),
    ("steps", Steps, 400),
    ("seed", Seed, 0),
    ("device", Device, "auto"),
    ("untrained", Untrained, False),
    ("progress", Progress, True),
)


def _train_command(model: str, label: str, config: str, help: str, extra: tuple[tuple[str, Any, Any], ...] = ()) -> None:
    """Add ``probe fixtures train MODEL``: the trainer options (``extra`` after ``data_dir``) make a
    ``config`` of ``vlprobe.fixtures.train_<model>``, its ``train_<model>`` runs, and the result is
    printed as ``label``'s."""
    options = (_TRAIN_OPTIONS[0], *extra, *_TRAIN_OPTIONS[1:])

    def command(**values: Any) -> None:
        module = importlib.import_module(f"vlprobe.fixtures.train_{model}")
        _report_training(label, getattr(module, f"train_{model}")(getattr(module, config)(**values)))

    command.__signature__ = inspect.Signature([  # type: ignore[attr-defined]
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=default)
        for name, annotation, default in options
    ])
    command.__annotations__ = {}
    command.__name__ = f"fixtures_train_{model}"
    command.__doc__ = help
    train_app.command(model)(guarded(command))


_train_command("clip", "CLIP", "ClipTrainConfig", "Train a small CLIP (contrastive loss, swapped captions as hard negatives) on synthetic scenes.")
_train_command(
    "lxmert", "LXMERT", "LxmertTrainConfig",
    "Train a small LXMERT (matching with swapped captions as hard negatives, masked words, unimodal contrastive) "
    "on synthetic scenes.",
    extra=(("regions", Annotated[Path, typer.Option(help="Region features of the training images (--oracle ones).")],
            inspect.Parameter.empty),),
)


@fixtures_app.command("testbed")
@guarded
def fixtures_testbed(
    out: Annotated[Path, typer.Option(help="Output folder (data, caches, results, report, logs).")],
    models_dir: Annotated[
        Path | None, typer.Option(help="Trained models and training data, reused between runs (default OUT/models).")
    ] = None,
    train_items: Annotated[int, typer.Option(help="Items of the training split.")] = 1500,
    eval_items: Annotated[int, typer.Option(help="Items of the evaluation dataset.")] = 100,
    seed: Seed = 0,
    clip_steps: Annotated[int, typer.Option(help="CLIP training steps.")] = 400,
    lxmert_steps: Annotated[int, typer.Option(help="LXMERT training steps.")] = 400,
    jobs: Annotated[int, typer.Option(help="Steps at once (probe processes, one torch thread each).")] = 2,
) -> None:
    """Known-answer testbed: train (or reuse) the small models, run every experiment, report."""
    from vlprobe.launch.testbed import KnownAnswerConfig, run_testbed

    result = run_testbed(KnownAnswerConfig(
        out=out, models_dir=models_dir, train_items=train_items, eval_items=eval_items, seed=seed,
        clip_steps=clip_steps, lxmert_steps=lxmert_steps, jobs=jobs,
    ), echo=typer.echo)
    report = result["report"]
    typer.echo("")
    typer.echo(report["summary"])
    typer.echo(f"wrote {report['csv']}, {report['summary_path']} and {report['figure']}")
