"""``probe run <experiment>``: every registered experiment, generated from its declaration."""

from __future__ import annotations

import typer

from vlprobe.cli.app import guarded
from vlprobe.cli.declared import declared_group

run_app = typer.Typer(
    name="run", cls=declared_group(None, guarded), no_args_is_help=True,
    help="Run a registered experiment (see `probe ls experiments`).",
)
