"""``probe eval``, ``probe refine`` and ``probe data info``: SugarCrepe and VALSE scoring."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from vlprobe.cli._common import (
    AllItems,
    AsJson,
    Bootstrap,
    BootstrapSeed,
    Device,
    ModelOption,
    Quiet,
    Tokenizer,
    UniterConfig,
    _model_options,
    _print_rows,
)
from vlprobe.cli.app import app, guarded
from vlprobe.validation import InputError

data_app = typer.Typer(name="data", help="Validate and count benchmark files.", no_args_is_help=True)
Benchmark = Annotated[str, typer.Argument(help="sugarcrepe or valse.")]


@app.command("eval")
@guarded
def eval_cmd(
    benchmark: Benchmark,
    out: Annotated[Path, typer.Option(help="Results folder; writes OUT/<benchmark>/<model>.csv (+ .scores.jsonl).")],
    model: Annotated[str | None, typer.Option(help="Registered model (clip, blind-lm, blind-grammar, caption-length, ...).")] = None,
    checkpoint: Annotated[str | None, typer.Option(help="Checkpoint directory or hub id.")] = None,
    data_dir: Annotated[Path | None, typer.Option(help="Folder of the benchmark's JSON files.")] = None,
    image_dir: Annotated[Path | None, typer.Option(help="SugarCrepe: the COCO val2017 image folder.")] = None,
    image_root: Annotated[
        list[str] | None, typer.Option(help="VALSE: SOURCE=DIR per image source (visual7w, coco2017, coco2014, swig, visdial), repeatable; a bare DIR for all.")
    ] = None,
    scores: Annotated[Path | None, typer.Option(
        "--scores", "--scores-file", help="Recompute the metrics from a saved per-item score file instead of a model.",
    )] = None,
    subsets: Annotated[str | None, typer.Option(help="Comma-separated subsets (file stems); default all.")] = None,
    limit: Annotated[int | None, typer.Option(help="First N items per subset (quick runs).")] = None,
    all_items: AllItems = False,
    items: Annotated[Path | None, typer.Option(help="Only these items (a JSONL of {item: id}, e.g. from probe refine).")] = None,
    name: Annotated[str | None, typer.Option(help="Model name in the outputs (default: the model or score file).")] = None,
    threshold: Annotated[float | None, typer.Option(help="VALSE: match threshold of the score (default: from the score kind).")] = None,
    acceptable_label: Annotated[str | None, typer.Option(help="blind-grammar: the label (name or index) meaning acceptable.")] = None,
    batch_size: Annotated[int, typer.Option(help="Pairs or texts per forward pass.")] = 32,
    device: Device = "auto",
    dtype: Annotated[str, typer.Option(help="float32 or float16.")] = "float32",
    bootstrap: Bootstrap = 1000,
    seed: BootstrapSeed = 0,
    regions: Annotated[Path | None, typer.Option(help="lxmert/uniter: region features (vlprobe HDF5) keyed by the benchmark's image names.")] = None,
    uniter_config: UniterConfig = None,
    tokenizer: Tokenizer = None,
    model_option: ModelOption = None,
    quiet: Quiet = False,
) -> None:
    """Score SugarCrepe or VALSE with a model (or re-read saved scores): tidy CSV, per-item scores, manifest."""
    from vlprobe.experiments.benchmark_eval import EvalConfig, run_eval

    csv_path, _, rows = run_eval(EvalConfig(
        benchmark=benchmark, out=out, model=model, checkpoint=checkpoint, scores=scores, data_dir=data_dir,
        image_dir=image_dir, image_root=tuple(image_root or ()), subsets=subsets, limit=limit,
        all_items=all_items, items=items, name=name, batch_size=batch_size, device=device, dtype=dtype,
        bootstrap=bootstrap, seed=seed, threshold=threshold, acceptable_label=acceptable_label,
        regions=regions, model_config=uniter_config, tokenizer=tokenizer, model_options=_model_options(model_option),
        progress=not quiet,
    ))
    shown = {r["subset"] for r in rows}
    _print_rows(rows, tuple(shown), csv_path)
    typer.echo(f"per-item scores: {csv_path.with_suffix('.scores.jsonl')}")


@app.command("refine")
@guarded
def refine_cmd(
    scores_a: Annotated[Path, typer.Option(help="Per-item score file of blind scorer A.")],
    scores_b: Annotated[Path, typer.Option(help="Per-item score file of blind scorer B.")],
    out: Annotated[Path, typer.Option(help="JSONL of kept item ids to write (+ <stem>.manifest.json).")],
    grid: Annotated[int, typer.Option(help="Cells per axis of the 2-D gap grid (even).")] = 100,
    axis_bins: Annotated[int, typer.Option(help="Bins per sign for items with one zero gap.")] = 10,
    seed: Annotated[int, typer.Option(help="Seed of the balancing subsamples.")] = 0,
    transform_a: Annotated[str, typer.Option(help="Map A's scores into [0, 1]: none, exp, sigmoid, rank.")] = "none",
    transform_b: Annotated[str, typer.Option(help="Map B's scores into [0, 1]: none, exp, sigmoid, rank.")] = "none",
) -> None:
    """SugarCrepe's adversarial refinement: keep items on which neither blind scorer beats chance."""
    from vlprobe.experiments.refine import RefineConfig, run_refine

    path, manifest_path, _ = run_refine(RefineConfig(
        scores_a=scores_a, scores_b=scores_b, out=out, grid=grid, axis_bins=axis_bins, seed=seed,
        transform_a=transform_a, transform_b=transform_b,
    ))
    m = json.loads(manifest_path.read_text(encoding="utf-8"))
    acc = m["accuracy_percent"]
    typer.echo(f"kept {m['items_kept']} of {m['items_before']} items")
    for key in ("scores_a", "scores_b"):
        typer.echo(f"{key}: accuracy {acc[key]['before']:.2f}% before, {acc[key]['after']:.2f}% on the kept items")
    typer.echo(f"wrote {path} and {manifest_path}")


@data_app.command("info")
@guarded
def data_info(
    benchmark: Benchmark,
    data_dir: Annotated[Path, typer.Option(help="Folder of the benchmark's JSON files.")],
    image_dir: Annotated[Path | None, typer.Option(help="SugarCrepe: check the COCO val2017 images too.")] = None,
    image_root: Annotated[list[str] | None, typer.Option(help="VALSE: SOURCE=DIR (repeatable); check the images too.")] = None,
    as_json: AsJson = False,
) -> None:
    """Validate a benchmark's files and count items per subset, ids and problems found."""
    from dataclasses import asdict

    if benchmark == "sugarcrepe":
        from vlprobe.data.sugarcrepe import sugarcrepe_report

        if image_root:
            raise InputError("image_root applies to valse; SugarCrepe takes --image-dir")
        reports = sugarcrepe_report(data_dir, image_dir)
        kept_name = "kept"
    elif benchmark == "valse":
        from vlprobe.data.valse import valse_report

        if image_dir is not None:
            raise InputError("image_dir applies to sugarcrepe; VALSE takes --image-root SOURCE=DIR")
        reports = valse_report(data_dir, image_root)
        kept_name = "valid"
    else:
        raise InputError(f"benchmark must be sugarcrepe or valse, got {benchmark!r}")
    if as_json:
        typer.echo(json.dumps([asdict(r) for r in reports], indent=2))
        return
    typer.echo(f"{'subset':<22} {'items':>6} {kept_name:>6} {'images':>6}  ids  problems")
    for r in reports:
        problems = "; ".join(f"{k}: {v}" for k, v in r.problems.items()) or "none"
        typer.echo(f"{r.name:<22} {r.items:>6} {r.kept:>6} {r.images:>6}  {r.first_id} .. {r.last_id}  {problems}")
    total, kept = sum(r.items for r in reports), sum(r.kept for r in reports)
    typer.echo(f"{'total':<22} {total:>6} {kept:>6}")
