"""Parameters that several hand-written commands share and that no declaration holds.

The model-loading, dataset and progress options are declared once, in
:mod:`vlprobe.runs.option_groups`; a hand-written command takes them with
:func:`vlprobe.cli.declared.declared_options_of`, an experiment's command is generated from its
config (:mod:`vlprobe.cli.declared`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

AsJson = Annotated[bool, typer.Option("--json", help="Print JSON.")]
RegionOut = Annotated[Path, typer.Option(help="Region file to write (.h5).")]
RegionFile = Annotated[Path, typer.Argument(help="vlprobe region file (.h5).")]


def _names(text: str | None) -> tuple[str, ...]:
    """``"a, b,"`` -> ``("a", "b")``; None or empty -> ``()``."""
    return tuple(x.strip() for x in text.split(",") if x.strip()) if text else ()
