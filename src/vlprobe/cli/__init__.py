"""The ``probe`` command: parse, build a frozen config, call one library function.

Bad input ends with one line on stderr (``error: ...``) and exit code 2, never a traceback.
:mod:`.app` holds the typer app and its error handling; the commands live in one module per
group (``ls``, ``extract``, ``fixtures``, ``regions``, ``experiments``, ``benchmarks``,
``augment``, ``results``), each registering itself on the app when imported here. ``probe run NAME``,
``probe eval NAME`` and ``probe refine`` are generated from the experiments' declarations
(:mod:`.declared`). Command modules import the library lazily, inside the commands, so that
``probe --help`` and ``probe ls`` stay fast (no torch, no numpy).
"""

from __future__ import annotations

# Registration: top-level commands in import order (ls, extract, augment, plot, compare, report,
# collect, refine), then the command groups in the order `probe --help` lists them.
from vlprobe.cli import (  # noqa: F401
    augment,
    benchmarks,
    experiments,
    extract,
    fixtures,
    launch,
    ls,
    regions,
    results,
)
from vlprobe.cli.app import OneLineErrors, app, guarded, main

for _group in (fixtures.fixtures_app, extract.cache_app, experiments.run_app, benchmarks.eval_app,
               regions.regions_app, launch.launch_app, benchmarks.data_app, augment.setup_app):
    app.add_typer(_group)
del _group


__all__ = ["OneLineErrors", "app", "guarded", "main"]
