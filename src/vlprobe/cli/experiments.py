"""``probe run <experiment>``: scores, recall and probing experiments over caches."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from vlprobe.cli._common import (
    BatchSize,
    Bootstrap,
    BootstrapSeed,
    CsvModelName,
    Depth,
    Device,
    Epochs,
    LearningRate,
    MLPSeeds,
    OutputsModelName,
    Quick,
    Quiet,
    SplitFile,
    StoredLayers,
    Stratify,
    TestSize,
    VariantsCache,
    Width,
    _names,
    _preset,
    _print_rows,
    _print_summary,
    _test_size,
)
from vlprobe.cli.app import guarded
from vlprobe.validation import InputError

run_app = typer.Typer(name="run", help="Run a registered experiment (see `probe ls experiments`).", no_args_is_help=True)
WinogroundCache = Annotated[Path, typer.Option(help="A vlprobe cache of Winoground.")]


# -- scores and recall -------------------------------------------------------------------------------


@run_app.command("winoground-scores")
@guarded
def run_winoground_scores_cmd(
    out: Annotated[Path, typer.Option(help="Results folder; writes OUT/winoground-scores/<model>.csv.")],
    cache: Annotated[Path | None, typer.Option(help="A vlprobe cache of Winoground.")] = None,
    scores_file: Annotated[
        Path | None, typer.Option(
            "--scores", "--scores-file",
            help="Official model_scores JSONL ({label: <id>_c<k>_i<j>, score}), a vlprobe per-item score "
                 "file, or a 2N x 2N caption x image .npy/.npz matrix.",
        ),
    ] = None,
    model: CsvModelName = None,
    data_dir: Annotated[Path | None, typer.Option(help="Winoground copy, for tags of a scores file.")] = None,
    tags: Annotated[Path | None, typer.Option(help="'Why is Winoground Hard?' tag file (overrides a cache's).")] = None,
    bootstrap: Bootstrap = 1000,
    seed: BootstrapSeed = 0,
    quiet: Quiet = False,
) -> None:
    """Winoground text, image and group scores, overall and per tag."""
    from vlprobe.experiments.winoground_scores import WinogroundScoresConfig, run_winoground_scores

    csv_path, _, rows = run_winoground_scores(WinogroundScoresConfig(
        out=out, cache=cache, scores_file=scores_file, model=model, data_dir=data_dir, tags=tags,
        bootstrap=bootstrap, seed=seed, progress=not quiet,
    ))
    _print_rows(rows, ("all",), csv_path)


@run_app.command("recall")
@guarded
def run_recall_cmd(
    out: Annotated[Path, typer.Option(help="Results folder; writes OUT/recall/<model>.csv.")],
    cache: Annotated[Path | None, typer.Option(help="A vlprobe cache with the full score matrix.")] = None,
    scores: Annotated[
        Path | None, typer.Option(
            "--scores", "--scores-file",
            help="Caption x image matrix (.npy/.npz), canonical order, instead of a cache.",
        ),
    ] = None,
    ks: Annotated[str, typer.Option(help="Comma-separated k values.")] = "1,2,5,10",
    model: CsvModelName = None,
    bootstrap: Bootstrap = 1000,
    seed: BootstrapSeed = 0,
    quiet: Quiet = False,
) -> None:
    """Recall@k, image-to-text and text-to-image, ties counted against the model."""
    from vlprobe.experiments.recall import RecallConfig, run_recall

    try:
        k_values = tuple(int(k) for k in ks.split(","))
    except ValueError:
        raise InputError(f"ks must be comma-separated integers, got {ks!r}") from None
    csv_path, _, rows = run_recall(RecallConfig(
        out=out, cache=cache, scores=scores, ks=k_values, model=model, bootstrap=bootstrap, seed=seed, progress=not quiet,
    ))
    _print_rows(rows, ("i2t", "t2i"), csv_path)


# -- probing experiments -----------------------------------------------------------------------------


@run_app.command("separability")
@guarded
def run_separability_cmd(
    cache: VariantsCache,
    out: Annotated[Path, typer.Option(help="Results folder; writes OUT/separability/<model>*.csv.")],
    stream: Annotated[
        str | None, typer.Option(
            "--stream", "--streams", help="Comma-separated text or pair streams (default: text, else all such)."
        ),
    ] = None,
    pooling: Annotated[str, typer.Option(help="cls, mean, max or pooled.")] = "cls",
    layers: StoredLayers = "all",
    scale: Annotated[str, typer.Option(help="Feature scaling: none or standard (per layer).")] = "none",
    seeds: Annotated[
        int | None, typer.Option(help="Number of control shuffles (seeds 0..N-1); default 3, --quick 1.")
    ] = None,
    c: Annotated[float, typer.Option("--C", help="SVM C.")] = 100.0,
    max_iter: Annotated[int, typer.Option(help="SVM iterations.")] = 100_000,
    tol: Annotated[float, typer.Option(help="SVM stopping tolerance (libsvm).")] = 1e-3,
    jobs: Annotated[int, typer.Option(help="Parallel workers (-1: all cores).")] = 1,
    model: OutputsModelName = None,
    quick: Quick = False,
    quiet: Quiet = False,
) -> None:
    """Per-item linear separability of caption-0 vs caption-1 variants, per layer, vs control."""
    from vlprobe.experiments.separability import SeparabilityConfig, run_separability
    from vlprobe.experiments.summary import summarize

    csv_path, _, rows = run_separability(SeparabilityConfig(
        cache=cache, out=out, streams=_names(stream), pooling=pooling, layers=layers, scale=scale, seeds=seeds,
        C=c, max_iter=max_iter, tol=tol, jobs=jobs, model=model, progress=not quiet, preset=_preset(quick),
    ))
    _print_summary(summarize(rows), "separable", "train", csv_path)


@run_app.command("task-adaptation")
@guarded
def run_task_adaptation_cmd(
    cache: WinogroundCache,
    out: Annotated[Path, typer.Option(help="Results folder; writes OUT/task-adaptation/<model>*.csv.")],
    mode: Annotated[str, typer.Option(help="text, image or both (text-score / image-score examples).")] = "both",
    pooling: Annotated[str, typer.Option(help="pooled, cls, mean or max.")] = "pooled",
    layers: Annotated[str, typer.Option(help="all | 0,4,-1 | 2:6 | lang=all;vision=-1 (ignored for pooled)")] = "all",
    streams: Annotated[str | None, typer.Option(help="Comma-separated streams to concatenate (default: all).")] = None,
    seeds: MLPSeeds = None,
    test_size: TestSize = "0.25",
    split_seed: Annotated[int, typer.Option(help="Seed of the item split.")] = 0,
    stratify: Stratify = None,
    split_file: SplitFile = None,
    depth: Depth = 4,
    width: Width = None,
    lr: LearningRate = 1e-4,
    epochs: Epochs = None,
    batch_size: BatchSize = 200,
    device: Device = "auto",
    model: OutputsModelName = None,
    quick: Quick = False,
    quiet: Quiet = False,
) -> None:
    """MLP on fused pair embeddings (paper §3.2): target vs flipped-item control over seeds."""
    from vlprobe.experiments.summary import summarize
    from vlprobe.experiments.task_adaptation import TaskAdaptationConfig, run_task_adaptation

    csv_path, _, rows = run_task_adaptation(TaskAdaptationConfig(
        cache=cache, out=out, mode=mode, streams=_names(streams), pooling=pooling, layers=layers, seeds=seeds,
        test_size=_test_size(test_size), split_seed=split_seed, stratify=_names(stratify), split_file=split_file,
        depth=depth, width=width, lr=lr, epochs=epochs, batch_size=batch_size, device=device, model=model,
        progress=not quiet, preset=_preset(quick),
    ))
    _print_summary(summarize(rows), "accuracy", "test", csv_path)


@run_app.command("variant-probe")
@guarded
def run_variant_probe_cmd(
    cache: VariantsCache,
    out: Annotated[Path, typer.Option(help="Results folder; writes OUT/variant-probe/<model>*.csv.")],
    stream: Annotated[str | None, typer.Option(help="Stream of texts or pairs (default: text, else the first).")] = None,
    pooling: Annotated[str, typer.Option(help="cls, mean, max or pooled.")] = "cls",
    layers: StoredLayers = "all",
    seeds: MLPSeeds = None,
    draws: Annotated[int, typer.Option(help="Examples per item and (caption, order).")] = 4,
    test_size: TestSize = "0.25",
    split_seed: Annotated[int, typer.Option(help="Seed of the item split and of the examples.")] = 0,
    stratify: Stratify = None,
    split_file: SplitFile = None,
    depth: Depth = 3,
    width: Width = None,
    lr: LearningRate = 5e-5,
    epochs: Epochs = None,
    batch_size: BatchSize = 128,
    device: Device = "auto",
    model: OutputsModelName = None,
    quick: Quick = False,
    quiet: Quiet = False,
) -> None:
    """MLP over (reference, option 1, option 2) variants (paper §5.3), per layer, vs control."""
    from vlprobe.experiments.summary import summarize
    from vlprobe.experiments.variant_probe import VariantProbeConfig, run_variant_probe

    csv_path, _, rows = run_variant_probe(VariantProbeConfig(
        cache=cache, out=out, stream=stream, pooling=pooling, layers=layers, seeds=seeds, draws=draws,
        test_size=_test_size(test_size), split_seed=split_seed, stratify=_names(stratify), split_file=split_file,
        depth=depth, width=width, lr=lr, epochs=epochs, batch_size=batch_size, device=device, model=model,
        progress=not quiet, preset=_preset(quick),
    ))
    _print_summary(summarize(rows), "accuracy", "test", csv_path)


@run_app.command("variant-similarity")
@guarded
def run_variant_similarity_cmd(
    cache: Annotated[Path, typer.Option(help="A vlprobe Winoground cache extracted with --variants.")],
    out: Annotated[Path, typer.Option(help="Results folder; writes OUT/variant-similarity/<model>.csv.")],
    agg: Annotated[str, typer.Option(help="Aggregations over variants: mean, max.")] = "mean,max",
    lambdas: Annotated[str, typer.Option(help="Comma-separated weights in [0, 1].")] = "0,.25,.5,.75,1",
    no_original: Annotated[
        bool, typer.Option("--no-original", help="Aggregate over variants only (the paper includes the caption).")
    ] = False,
    model: Annotated[str | None, typer.Option(help="Model name in the CSV (default: from the cache).")] = None,
    quiet: Quiet = False,
) -> None:
    """Winoground scores with each caption's score blended with its variants' (paper 5.2)."""
    from vlprobe.experiments.variant_similarity import (
        VariantSimilarityConfig,
        parse_lambdas,
        run_variant_similarity,
    )

    csv_path, _, rows = run_variant_similarity(VariantSimilarityConfig(
        cache=cache, out=out, aggs=_names(agg) or (), lambdas=parse_lambdas(lambdas),
        include_original=not no_original, model=model, progress=not quiet,
    ))
    for row in rows:
        if row["subset"] == "all":
            setting = f"agg={row['agg']} lambda={row['lambda']:g}"
            typer.echo(f"{row['model']:<12} {setting:<22} {row['metric']:<6} {row['value']:7.2f}  (n={row['n']})")
    typer.echo(f"wrote {csv_path} and {csv_path.parent / 'manifest.json'}")
