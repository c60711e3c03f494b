"""``probe fixtures dataset|model|hub-cache|regions|train|testbed|known-answers``: synthetic data, tiny random models (also
laid out as a hub cache under the real repository names) and the small models trained on
synthetic scenes (the known-answer testbed), for tests and demos."""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from vlprobe.cli.app import guarded
from vlprobe.cli.declared import declared_options_of
from vlprobe.runs.declare import REQUIRED, option
from vlprobe.runs.option_groups import DatasetOptions, ModelOptions, ProgressOption
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
# The testbed's settings (KnownAnswerConfig), taken by `fixtures testbed` and, for its report's note,
# by `fixtures known-answers`.
TrainItems = Annotated[int, typer.Option(help="Items of the training split.")]
EvalItems = Annotated[int, typer.Option(help="Items of the evaluation dataset.")]
ClipSteps = Annotated[int, typer.Option(help="CLIP training steps.")]
LxmertSteps = Annotated[int, typer.Option(help="LXMERT training steps (the LXMERT that binds).")]
ObjectsSteps = Annotated[int, typer.Option(help="Training steps of the object-only LXMERT (other items' captions as negatives).")]


@fixtures_app.command("dataset")
@guarded
def fixtures_dataset(
    out: Annotated[Path, typer.Option(help="Directory to write (new, or a previous synthetic dataset).")],
    n_items: Annotated[int, typer.Option(help="Number of items.")] = 40,
    seed: Seed = 0,
    image_size: Annotated[int, typer.Option(help="Image side in pixels.")] = 64,
    split: Annotated[str, typer.Option(help="eval, or train (a seed stream no eval dataset uses).")] = "eval",
    fmt: Annotated[str, typer.Option(
        "--format", help="winoground, or a benchmark's own on-disk format: aro, mmvp-vlm, naturalbench, eqben, colorswap, sugarcrepe-pp, crepe, vl-checklist.")] = "winoground",
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


@fixtures_app.command("hub-cache")
@guarded
def fixtures_hub_cache(
    out: Annotated[Path, typer.Option(help="Hub cache folder to write into (what HF_HUB_CACHE will name).")],
    models: Annotated[str | None, typer.Option(
        help="Fixtures to write, comma-separated (default: every model whose reference checkpoint is on the hub, "
             "and the detector frcnn).")] = None,
    seed: Annotated[int, typer.Option(help="Random seed for the weights.")] = 0,
) -> None:
    """Write tiny random checkpoints into a hub cache under the real repository names
    (models--openai--clip-vit-base-patch32/snapshots/...), so that the defaults of `probe extract` run offline."""
    from vlprobe.cli._common import _names
    from vlprobe.fixtures.hub_cache import write_hub_cache

    written = write_hub_cache(out, _names(models) or None, seed)
    for repo_id, snapshot in written.items():
        typer.echo(f"wrote a tiny random {repo_id} into {snapshot}")
    typer.echo(f"use it with HF_HUB_CACHE={out} HF_HUB_OFFLINE=1 (random weights: for tests and demos only)")


@dataclass(frozen=True, kw_only=True)
class RegionFixtureOptions(DatasetOptions):
    """``probe fixtures regions``'s options: the dataset and its items (no image folders: no image
    is read), the file, and the random or (``--oracle``) perfect detector's settings."""

    data_dir: Path = DatasetOptions.redeclare(
        "data_dir", REQUIRED, help="Local dataset copy (e.g. from `probe fixtures dataset`).",
    )
    boxes: str | None = option(
        None, metavar="N|MIN:MAX", help="Boxes per image: N (exactly) or MIN:MAX (each image a seeded count); default 36.",
    )
    dim: int = option(2048, help="Feature width.")
    seed: int = option(0, help="Random seed.")
    dtype: str = ModelOptions.redeclare("dtype", "float32", choices=("float32", "float16"), help="Stored features' dtype.")
    oracle: bool = option(
        False, help="Synthetic data: true shape boxes + background, features coding colour/shape/size.",
    )
    background_boxes: int = option(3, help="With --oracle: background boxes per image.")
    noise: float = option(0.1, help="With --oracle: feature noise (standard deviation).")
    out: Path = option(role="output", help="Region file to write (.h5).")


@fixtures_app.command("regions")
@guarded
@declared_options_of(RegionFixtureOptions, omit=("image_dir", "image_root", "strip_captions"))
def fixtures_regions(options: RegionFixtureOptions) -> None:
    """Write region features for every image of a dataset: seeded random ones (SugarCrepe/VALSE: no
    image files needed), or with --oracle those of a perfect detector on a synthetic dataset."""
    from vlprobe.extract.regions.store import RegionStore

    o = options
    if o.oracle:
        from vlprobe.fixtures.oracle_regions import oracle_regions

        given = [name for name, v in (("--boxes", o.boxes), ("--subsets", o.subsets), ("--limit", o.limit))
                 if v is not None]
        if given or o.all_items or o.dataset != "winoground":
            wrong = given[0] if given else "--all-items" if o.all_items else f"--dataset {o.dataset}"
            raise InputError(
                f"oracle: {wrong} does not apply; --oracle writes one box per drawn shape plus "
                "--background-boxes of a synthetic Winoground-format dataset"
            )
        path = oracle_regions(o.out, o.data_dir, background_boxes=o.background_boxes, noise=o.noise, seed=o.seed,
                              dim=o.dim, dtype=o.dtype)
        with RegionStore(path) as store:
            n = len(store)
        typer.echo(f"wrote oracle region features for {n} images to {path} (shapes + {o.background_boxes} "
                   f"background boxes, dim {o.dim}, noise {o.noise}, seed {o.seed})")
        return
    from vlprobe.extract.regions.extraction import parse_boxes
    from vlprobe.fixtures.regions import random_regions_for_dataset

    least, n_boxes = parse_boxes(o.boxes) if o.boxes is not None else (36, 36)
    if not 1 <= least <= n_boxes:
        raise InputError(f"boxes: expected N >= 1 or MIN:MAX with 1 <= MIN <= MAX, got {o.boxes!r}")
    path = random_regions_for_dataset(
        o.out, o.data_dir, dataset=o.dataset, n_boxes=n_boxes, dim=o.dim, seed=o.seed,
        min_boxes=least if least != n_boxes else None,
        dtype=o.dtype, options=o.loader_options(),
    )
    with RegionStore(path) as store:
        n = len(store)
    typer.echo(f"wrote random region features for {n} images to {path} ({n_boxes} boxes max, dim {o.dim}, "
               f"seed {o.seed})")


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


@dataclass(frozen=True, kw_only=True)
class TrainOptions(ProgressOption):
    """The options of every ``probe fixtures train MODEL`` command, with the defaults of
    :class:`vlprobe.fixtures.training.TrainConfig` (the vocabulary test compares them)."""

    data_dir: Path = DatasetOptions.redeclare(
        "data_dir", REQUIRED, help="Synthetic training split (`probe fixtures dataset --split train`).",
    )
    text_order: str = option("keep", help="keep, or shuffle (words shuffled every step: bag-of-words control).")
    steps: int = option(400, help="Optimiser steps.")
    seed: int = option(0, help="Random seed.")
    device: str = ModelOptions.redeclare("device")
    untrained: bool = option(False, help="Write the initial weights only: the random baseline of the same model.")
    out: Path = option(
        role="output", help="Model folder (new, or a previous one of this kind: reused if trained the same way).",
    )


@dataclass(frozen=True, kw_only=True)
class ClipTrainOptions(TrainOptions):
    """``probe fixtures train clip``: the trainer options and the text tower."""

    text_tower: str = option("clip", choices=("clip", "bag-of-words"),
                             help="clip (CLIP's causal text tower), or bag-of-words: a text tower blind to word order "
                                  "by construction (no positions, attention both ways, mean-pooled; an OpenCLIP "
                                  "folder, --model openclip).")
    image_tower: Path | None = option(None, help="With --text-tower bag-of-words: a CLIP trained by this command whose "
                                                 "image tower the order-blind text tower learns to match, frozen (the two "
                                                 "models then differ in their text tower only).")


@dataclass(frozen=True, kw_only=True)
class LxmertTrainOptions(TrainOptions):
    """``probe fixtures train lxmert``: the trainer options and the training images' regions."""

    regions: Path = ModelOptions.redeclare(
        "regions", REQUIRED, help="Region features of the training images (--oracle ones).",
    )
    negatives: str = option("swaps", choices=("swaps", "other-items"),
                            help="swaps: the item's other caption (a hard negative) and other items' captions; "
                                 "other-items: other items' captions only (an LXMERT that learns which objects a "
                                 "caption names, not which attribute goes with which).")
    lr: float = option(2e-3, help="AdamW learning rate.")
    mlm_rate: float = option(0.0, help="Share of words masked for LXMERT's masked-word loss (0: none).")
    itc_weight: float = option(3.0, help="Weight of the contrastive loss between the language and vision encoders "
                                         "(0: none).")
    grounding_weight: float = option(1.0, help="Weight of the grounding loss: a phrase's words attend to its object's "
                                               "region in the first cross layer (0: none).")


def _train_command(model: str, label: str, config: str, help: str, options: type[TrainOptions] = TrainOptions) -> None:
    """Add ``probe fixtures train MODEL``: ``options`` make a ``config`` of
    ``vlprobe.fixtures.train_<model>``, its ``train_<model>`` runs, and the result is printed as
    ``label``'s."""

    def command(options: TrainOptions) -> None:
        module = importlib.import_module(f"vlprobe.fixtures.train_{model}")
        values = {f.name: getattr(options, f.name) for f in dataclasses.fields(options)}
        _report_training(label, getattr(module, f"train_{model}")(getattr(module, config)(**values)))

    command.__name__ = f"fixtures_train_{model}"
    command.__doc__ = help
    train_app.command(model)(guarded(declared_options_of(options)(command)))


_train_command("clip", "CLIP", "ClipTrainConfig", "Train a small CLIP (contrastive loss, swapped captions as hard negatives) on synthetic scenes.",
               options=ClipTrainOptions)
_train_command(
    "lxmert", "LXMERT", "LxmertTrainConfig",
    "Train a small LXMERT (matching with swapped captions as hard negatives, masked words, unimodal contrastive) "
    "on synthetic scenes.",
    options=LxmertTrainOptions,
)


@fixtures_app.command("testbed")
@guarded
def fixtures_testbed(
    out: Annotated[Path, typer.Option(help="Output folder (data, caches, results, report, logs).")],
    models_dir: Annotated[
        Path | None, typer.Option(help="Trained models and training data, reused between runs (default OUT/models).")
    ] = None,
    train_items: TrainItems = 1500,
    eval_items: EvalItems = 100,
    seed: Seed = 0,
    clip_steps: ClipSteps = 400,
    lxmert_steps: LxmertSteps = 400,
    objects_steps: ObjectsSteps = 100,
    shuffle_control: Annotated[bool, typer.Option(
        help="Also train and probe the shuffled-words CLIP (clip-shuffle), a second control beside the order-blind "
             "clip-bow.")] = False,
    jobs: Annotated[int, typer.Option(help="Steps at once (probe processes, one torch thread each).")] = 2,
    plan_only: Annotated[bool, typer.Option(
        help="Only write the run's plan, OUT/plan.toml, for `probe sweep OUT/plan.toml --jobs 2 --threads 1`.")] = False,
) -> None:
    """Known-answer testbed: train (or reuse) the small models, run every experiment, report."""
    from vlprobe.launch.testbed import KnownAnswerConfig, run_testbed, start_testbed

    config = KnownAnswerConfig(
        out=out, models_dir=models_dir, train_items=train_items, eval_items=eval_items, seed=seed,
        clip_steps=clip_steps, lxmert_steps=lxmert_steps, objects_steps=objects_steps, shuffle_control=shuffle_control,
        jobs=jobs,
    )
    if plan_only:
        plan = start_testbed(config, echo=typer.echo)
        typer.echo(f"wrote {plan}; run it with: probe sweep {plan} --jobs {jobs} --threads 1")
        return
    result = run_testbed(config, echo=typer.echo)
    report = result["report"]
    typer.echo("")
    typer.echo(report["summary"])
    typer.echo(f"wrote {report['csv']}, {report['summary_path']} and {report['figure']}; the run's plan: "
               f"{result['plan']} (probe sweep {result['plan']} runs it again, skipping the finished steps)")


@fixtures_app.command("known-answers")
@guarded
def fixtures_known_answers(
    out: Annotated[Path, typer.Option(help="A testbed run's output folder (its results/ and data/); the report "
                                           "goes to OUT/report.")],
    seed: Seed = 0,
    train_items: TrainItems = 1500,
    eval_items: EvalItems = 100,
    clip_steps: ClipSteps = 400,
    lxmert_steps: LxmertSteps = 400,
    objects_steps: ObjectsSteps = 100,
) -> None:
    """The known-answer report of a testbed run: the table, the checks, comparison.png, summary.txt
    (the last step of the testbed's plan). The run's settings are given for the report's note."""
    from vlprobe.launch.testbed import KnownAnswerConfig, write_known_answers

    report = write_known_answers(KnownAnswerConfig(
        out=out, seed=seed, train_items=train_items, eval_items=eval_items, clip_steps=clip_steps,
        lxmert_steps=lxmert_steps, objects_steps=objects_steps,
    ))
    typer.echo(report["summary"])
    typer.echo(f"wrote {report['csv']}, {report['summary_path']} and {report['figure']}")
