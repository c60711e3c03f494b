"""Options that the hand-written commands share (extract, augment, fixtures, regions, data).

An alias here is one option with one help text; a command that means something else by the same
flag (another help) declares its own. Defaults stay at each command, where they differ. The
experiments' options are declared on their configs instead (:mod:`vlprobe.cli.declared`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

# -- models and devices ------------------------------------------------------------------------------
Device = Annotated[str, typer.Option(help="cpu, cuda, cuda:N, mps or auto (the output records the one used).")]
ModelConfig = Annotated[Path | None, typer.Option(help="UNITER: the model config JSON (uniter-base.json).")]
Tokenizer = Annotated[
    str | None, typer.Option(help="UNITER tokenizer dir or hub id (default: tokenizer/ beside the checkpoint).")
]
Progress = Annotated[bool, typer.Option("--progress/--quiet", " /-q", help="Progress on stderr (off with --quiet).")]
ModelOption = Annotated[
    list[str] | None,
    typer.Option("--model-option", metavar="NAME=VALUE",
                 help="A load option the model declares, NAME=VALUE, repeatable (e.g. blip-itm: score_head=itc)."),
]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON.")]

# -- datasets ----------------------------------------------------------------------------------------
Dataset = Annotated[str, typer.Option(help="Registered dataset (see `probe ls datasets`).")]
DataDir = Annotated[
    Path | None, typer.Option(help="Local copy of the dataset (default: $VLPROBE_<DATASET>, e.g. VLPROBE_WINOGROUND; else the hub).")
]
Subsets = Annotated[str | None, typer.Option(help="SugarCrepe/VALSE: comma-separated subsets (file stems).")]
Limit = Annotated[int | None, typer.Option(help="SugarCrepe/VALSE: first N items per subset.")]
AllItems = Annotated[bool, typer.Option("--all-items", help="VALSE: keep invalid items too.")]
RegionOut = Annotated[Path, typer.Option(help="Region file to write (.h5).")]
RegionFile = Annotated[Path, typer.Argument(help="vlprobe region file (.h5).")]


def _names(text: str | None) -> tuple[str, ...]:
    """``"a, b,"`` -> ``("a", "b")``; None or empty -> ``()``."""
    return tuple(x.strip() for x in text.split(",") if x.strip()) if text else ()


def _model_options(given: list[str] | None) -> dict[str, str]:
    """``["score_head=itc"]`` -> ``{"score_head": "itc"}`` (``--model-option``, repeatable)."""
    from vlprobe.runs.declare import key_values

    return key_values(given or (), "model_options")


def _dataset_options(**options: Any) -> dict[str, Any]:
    """Dataset loader options the user gave: None and False (the loader's default) left out."""
    return {k: v for k, v in options.items() if v is not None and v is not False}
