"""``probe extract`` and ``probe cache info|merge``: layer-wise states and scores in HDF5."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from vlprobe.cli._common import AsJson
from vlprobe.cli.app import app, guarded
from vlprobe.cli.declared import declared_options_of
from vlprobe.runs.declare import key_values, names, option
from vlprobe.runs.option_groups import (
    DatasetOptions,
    ModelOptions,
    ProgressOption,
    ShardOption,
    check_layer_spec,
)

cache_app = typer.Typer(name="cache", help="Inspect and merge activation caches.", no_args_is_help=True)


@dataclass(frozen=True, kw_only=True)
class ExtractOptions(ModelOptions, DatasetOptions, ProgressOption):
    """``probe extract``'s options: the model-loading group, the dataset and its items, and what
    to store (:class:`~vlprobe.extract.runner.ExtractConfig` is the library side)."""

    model: str | None = ModelOptions.redeclare(  # type: ignore[assignment]  # optional here: or --models
        "model", None, help="Registered model adapter (see `probe ls models`); or give --models.",
    )
    models: Path | None = option(
        None, role="input",
        help="A models file (TOML, [models.NAME] with model, checkpoint, options) instead of --model: each model "
             "extracted into OUT/<name>-<dataset>.h5 (OUT: a folder, default caches/), each resumed as one run is.",
    )
    checkpoint: str | None = ModelOptions.redeclare(
        "checkpoint", help="Local checkpoint directory or hub id (default: $VLPROBE_<MODEL>_CHECKPOINT, else the "
                           "checkpoint the papers used, e.g. unc-nlp/lxmert-base-uncased; UNITER's uniter-base.pt "
                           "is not on the hub).",
    )
    regions: Path | None = ModelOptions.redeclare(
        "regions", help="Region features (vlprobe HDF5) for lxmert/uniter (default: made from the dataset's images "
                        "by the built-in detector into <dataset>-<preset>-regions.h5 beside the cache, then reused).",
    )
    dtype: str = ModelOptions.redeclare(
        "dtype", help="Weights' and stored states' dtype; auto: the one the model's reference code loads it in.")
    batch_size: int = ModelOptions.redeclare("batch_size", help="Rows per forward pass.")
    out: Path | None = option(
        None, role="output", help="Cache file to write or resume (.h5; default caches/<model>-<dataset>.h5), or a folder for that name "
             "in it (--out shards/: shards/<model>-<dataset>.shard-K-of-N.h5).",
    )
    tags: Path | None = option(None, role="input", help="'Why is Winoground Hard?' tag file.")
    variants: Path | None = option(
        None, role="input",
        help="Caption variants file (JSONL; default: variants.jsonl in the folder $VLPROBE_<DATASET> names, if any).",
    )
    layers: str = option("all", check=check_layer_spec, help="Layers: all | 0,4,-1 | 2:6 | text=all;image=-1")
    poolings: tuple[str, ...] = option(
        ("cls", "mean", "max"), parse=names, metavar="A,B", help="Poolings: any of cls,mean,max,pooled.",
    )
    shard: str = ShardOption.redeclare("shard", help=(
        "Run block K of N (K/N), or auto: K/N from Slurm, torchrun, accelerate or MPI, written to "
        "OUT's <stem>.shard-K-of-N.h5; join with `probe cache merge`."))
    pair_plan: str = option("item", help="Pair plan for cross-encoders: item or all.")
    pair_states: bool | None = option(
        None, help="Cross-encoders: store pair states besides scores (default: yes for --pair-plan item, no for all).",
    )


@app.command("extract")
@guarded
@declared_options_of(ExtractOptions)
def extract_cmd(options: ExtractOptions) -> None:
    """Run a model over a dataset and cache layer-wise states and scores to HDF5."""
    from vlprobe.extract.runner import ExtractConfig, extract
    from vlprobe.validation import InputError

    o = options
    if (o.model is None) == (o.models is None):
        raise InputError("model: give a registered model (--model) or a models file (--models), one of them")
    if o.models is not None:
        given = [n for n in ("checkpoint", "regions", "model_config", "tokenizer", "model_options") if getattr(o, n)]
        if given:
            raise InputError(f"{given[0]}: give it per model in the models file ({o.models}), not beside models")
    config = ExtractConfig(
        model=o.model or "", checkpoint=o.checkpoint, out=o.out, dataset=o.dataset, data_dir=o.data_dir, tags=o.tags,
        variants=o.variants, layers=o.layers, poolings=o.poolings, batch_size=o.batch_size,
        device=o.device, dtype=o.dtype, shard=o.shard, pair_plan=o.pair_plan, progress=o.progress,
        regions=o.regions, model_config=o.model_config, tokenizer=o.tokenizer, pair_states=o.pair_states,
        model_options=key_values(o.model_options, "model_options"), dataset_options=o.loader_options(),
    )
    if o.models is not None:
        from vlprobe.runs.model_lists import extract_models

        for result in extract_models(o.models, config, o.out, echo=typer.echo if o.progress else None):
            _echo_result(result)
        return
    _echo_result(extract(config))


def _echo_result(result: Any) -> None:
    done = ", ".join(f"{s} {result.rows_written[s]}/{result.rows_total[s]} rows" for s in result.rows_total)
    typer.echo(f"wrote {result.path} ({done} computed this run, {result.seconds:.1f} s)")
    if result.defaults:
        typer.echo(f"defaults taken: {', '.join(result.defaults)} (probe cache info {result.path} shows what each was)")


@cache_app.command("info")
@guarded
def cache_info(
    path: Annotated[Path, typer.Argument(help="Cache file.")],
    as_json: AsJson = False,
) -> None:
    """Describe a cache: settings, fingerprints, streams, layers, progress."""
    from vlprobe.extract.cache.reader import ActivationCache

    with ActivationCache(path) as cache:
        info = cache.info()
    if as_json:
        typer.echo(json.dumps(info, indent=2, sort_keys=True))
        return
    typer.echo(format_cache_info(info))


def format_cache_info(info: dict) -> str:
    """``probe cache info``'s text: every declared root attribute (compared ones marked ``*``),
    then tables, streams, scores and pairs."""
    from vlprobe.extract.cache.schema import ROOT_ATTRS

    state = "complete" if info["complete"] else "INCOMPLETE (rerun the extract command to resume)"
    lines = [
        f"{info['path']}  {info['size_bytes'] / 1e6:.1f} MB  schema {info['schema']} "
        f"version {info['schema_version']}  {state}",
        f"tables     {info['items']} items, {info['images']} images, {info['texts']} texts ({info['variants']} variants)",
        "header     (* = compared on resume and merge)",
    ]
    width = max(len(a.name) for a in ROOT_ATTRS)
    values = {**info["header"], **info["recorded"]}
    for group, title in (("CacheHeader", None), ("CacheRecord", "recorded")):
        if title:
            lines.append(title)
        for a in ROOT_ATTRS:
            if a.owner != group or a.name == "complete":
                continue
            v = values[a.name]
            shown = json.dumps(v, sort_keys=True) if isinstance(v, (list, dict)) else str(v) or "\"\""
            lines.append(f"  {'*' if a.compared else ' '} {a.name:<{width}}  {shown}")
    for name, s in info["streams"].items():
        kinds = ",".join(s["layer_kinds"])
        lines.append(
            f"stream     {name} ({s['modality']}): {s['done']}/{s['rows'][1] - s['rows'][0]} rows done; "
            f"layers {s['layers']} [{kinds}]; cls = {s['cls_rule']}"
        )
        lines += [f"             {p:<7} {tuple(shape)}" for p, shape in s["poolings"].items()]
    if "scores" in info:
        sc = info["scores"]
        lines.append(f"scores     {sc['kind']} {sc['orientation']} {tuple(sc['shape'])}, {sc['done']} computed")
    if "pairs" in info:
        pr = info["pairs"]
        states = "with pair states" if info["header"]["pair_states"] else "scores only"
        lines.append(f"pairs      {pr['done']}/{pr['rows'][1] - pr['rows'][0]} done ({states})")
    return "\n".join(lines)


@cache_app.command("merge")
@guarded
def cache_merge(
    out: Annotated[Path, typer.Option(help="Merged cache file to write.")],
    shards: Annotated[list[Path] | None, typer.Argument(
        help="The N shard files of one run (default: OUT's <stem>.shard-K-of-N.h5 files, as --shard auto names them).",
        show_default=False)] = None,
) -> None:
    """Join the shard files of a `--shard K/N` (or `--shard auto`) run into one cache."""
    from vlprobe.extract.cache.merge import merge_shards, shard_state
    from vlprobe.shards import files_to_merge

    files = files_to_merge(out, shards, shard_state)
    if files is None:
        typer.echo(f"{out} is the whole run already (one process wrote it): nothing to merge")
        return
    path = merge_shards(files, out)
    typer.echo(f"merged {len(files)} shards into {path}")
