"""Options that several commands share, and the parsers and printers behind them.

An alias here is one option with one help text; a command that means something else by the same
flag (another help) declares its own. Defaults stay at each command, where they differ.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from vlprobe.validation import InputError

# -- models and devices ------------------------------------------------------------------------------
Device = Annotated[str, typer.Option(help="cpu, cuda, cuda:N or auto.")]
UniterConfig = Annotated[Path | None, typer.Option(help="UNITER model config JSON (uniter-base.json).")]
Tokenizer = Annotated[
    str | None, typer.Option(help="UNITER tokenizer dir or hub id (default: tokenizer/ beside the checkpoint).")
]
ModelOption = Annotated[
    list[str] | None,
    typer.Option(help="A load option the model declares, NAME=VALUE, repeatable (e.g. blip-itm: score_head=itc)."),
]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress output.")]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON.")]

# -- datasets ----------------------------------------------------------------------------------------
Dataset = Annotated[str, typer.Option(help="Registered dataset (see `probe ls datasets`).")]
DataDir = Annotated[Path | None, typer.Option(help="Local copy of the dataset; without it, the hub.")]
Subsets = Annotated[str | None, typer.Option(help="SugarCrepe/VALSE: comma-separated subsets (file stems).")]
Limit = Annotated[int | None, typer.Option(help="SugarCrepe/VALSE: first N items per subset.")]
AllItems = Annotated[bool, typer.Option("--all-items", help="VALSE: keep invalid items too.")]
RegionOut = Annotated[Path, typer.Option(help="Region file to write (.h5).")]
RegionFile = Annotated[Path, typer.Argument(help="vlprobe region file (.h5).")]

# -- results -----------------------------------------------------------------------------------------
Bootstrap = Annotated[int, typer.Option(help="Bootstrap resamples for the 95% intervals.")]
BootstrapSeed = Annotated[int, typer.Option(help="Bootstrap seed.")]
CsvModelName = Annotated[str | None, typer.Option(help="Model name in the CSV (default: from the input).")]
OutputsModelName = Annotated[
    str | None, typer.Option(help="Model name in the outputs (default: the cache's).")
]

# -- probing experiments -----------------------------------------------------------------------------
VariantsCache = Annotated[Path, typer.Option(help="A vlprobe cache with caption variants.")]
StoredLayers = Annotated[str, typer.Option(help="all (stored) | 0,4,-1 | 2:6")]
MLPSeeds = Annotated[int | None, typer.Option(help="Number of seeds (0..N-1); default 11, --quick 3.")]
Quick = Annotated[
    bool, typer.Option("--quick", help="The quick preset for CPU smoke runs (fewer seeds and epochs, a narrower MLP) "
                                       "instead of the paper's settings; explicit options still win.")
]
TestSize = Annotated[str, typer.Option(help="Test items: a count (100) or a fraction (0.25).")]
Stratify = Annotated[
    str | None, typer.Option(help="Tag families to stratify on (default: collapsed_tag,num_main_preds).")
]
SplitFile = Annotated[
    Path | None, typer.Option(help='JSON {"train": [ids], "test": [ids]} instead of a seeded split.')
]
Depth = Annotated[int, typer.Option(help="Linear layers of the MLP.")]
Width = Annotated[int | None, typer.Option(help="Hidden width; default 1024, --quick 128.")]
LearningRate = Annotated[float, typer.Option(help="Adam learning rate.")]
Epochs = Annotated[int | None, typer.Option(help="Training epochs; default 200, --quick 30.")]
BatchSize = Annotated[int, typer.Option(help="Batch size.")]


def _names(text: str | None) -> tuple[str, ...] | None:
    """``"a, b,"`` -> ``("a", "b")``; None or empty -> None (the library's default)."""
    return tuple(x.strip() for x in text.split(",") if x.strip()) if text else None


def _preset(quick: bool) -> str:
    """``--quick`` -> the ``quick`` preset, else ``paper``."""
    return "quick" if quick else "paper"


def _test_size(text: str) -> int | float:
    """``"100"`` -> 100 items, ``"0.25"`` -> a fraction."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise InputError(f"test_size must be a number of items (100) or a fraction (0.25), got {text!r}") from None


def _model_options(given: list[str] | None) -> dict[str, str]:
    """``["score_head=itc"]`` -> ``{"score_head": "itc"}`` (``--model-option``, repeatable)."""
    out: dict[str, str] = {}
    for text in given or ():
        name, sep, value = text.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or not name or not value.strip():
            raise InputError(f"model_option must look like NAME=VALUE (e.g. score_head=itc), got {text!r}")
        if name in out:
            raise InputError(f"model_option: {name!r} is given twice")
        out[name] = value.strip()
    return out


def _dataset_options(**options: Any) -> dict[str, Any]:
    """Dataset loader options the user gave: None and False (the loader's default) left out."""
    return {k: v for k, v in options.items() if v is not None and v is not False}


def _print_rows(rows: list[dict[str, Any]], subsets: tuple[str, ...], csv_path: Path) -> None:
    """Print the metric rows of ``subsets`` with their 95% intervals, then the files written."""
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


def _print_summary(summary: list[dict[str, Any]], metric: str, split: str, path: Path) -> None:
    """Print target vs control per stream and layer from an experiment summary."""
    for rec in summary:
        if rec["metric"] == metric and rec["split"] == split and rec["subset"] in ("all", "text-score", "image-score"):
            sub = "" if rec["subset"] == "all" else f" {rec['subset']:<12}"
            typer.echo(
                f"{rec['stream']:<12} layer {rec['layer'] or '-':>3}{sub} {metric} ({split}): target "
                f"{rec['target_mean']:6.2f}  control {rec['control_mean']:6.2f} "
                f"[{rec['control_min']:.2f}, {rec['control_max']:.2f}]  selectivity {rec['selectivity']:6.2f}"
            )
    typer.echo(f"wrote {path}, {path.with_name(path.stem + '.summary.csv').name} and manifest.json")
