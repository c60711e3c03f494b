"""``probe run <experiment>``: the registered experiments, generated from their declarations.

The benchmark scorers run as ``probe eval NAME`` and refine as ``probe refine``; each
experiment has one command name.
"""

from __future__ import annotations

import typer

from vlprobe.cli.app import OneLineErrors, guarded
from vlprobe.cli.benchmarks import EVAL_COMMANDS
from vlprobe.cli.declared import declared_group

#: Experiments with a command of their own (``probe refine``, ``probe eval NAME``), not under ``probe run``.
ELSEWHERE = frozenset({*(OneLineErrors.declared or {}).values(), *EVAL_COMMANDS.values()})

run_app = typer.Typer(
    name="run", cls=declared_group(None, guarded, ELSEWHERE), no_args_is_help=True,
    help="Run a registered experiment (see `probe ls experiments`; the benchmarks run as `probe eval NAME`, "
         "refine as `probe refine`).",
)
