"""``probe ls``: what the registries hold."""

from __future__ import annotations

from typing import Annotated

import typer

from vlprobe.cli.app import app, guarded
from vlprobe.validation import InputError


@app.command("ls")
@guarded
def ls(what: Annotated[str, typer.Argument(help="models, datasets, experiments, strategies or fixtures")]) -> None:
    """List registered models, datasets, experiments, strategies or model fixtures."""
    from vlprobe import registry

    registries = {
        "models": registry.MODELS, "datasets": registry.DATASETS, "experiments": registry.EXPERIMENTS,
        "strategies": registry.STRATEGIES, "fixtures": registry.FIXTURES,
    }
    if what not in registries:
        raise InputError(f"ls: expected one of {', '.join(registries)}, got {what!r}")
    if what == "strategies":  # with availability, reason and install hint
        from vlprobe.cli.augment import ls_strategies

        ls_strategies()
        return
    reg = registries[what]
    if not len(reg):
        typer.echo(f"(no {what} registered yet)")
    for name in reg.names():
        typer.echo(f"{name:<20} {reg.describe(name)}")
