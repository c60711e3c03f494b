"""``probe eval sugarcrepe|valse|aro|mmvp-vlm|naturalbench|eqben|colorswap|sugarcrepe-pp|crepe|vl-checklist`` (generated from the experiments' declarations) and ``probe data info``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from vlprobe.cli._common import AsJson
from vlprobe.cli.app import guarded
from vlprobe.cli.declared import declared_group, declared_options_of
from vlprobe.runs.declare import REQUIRED
from vlprobe.runs.option_groups import ItemOptions
from vlprobe.validation import InputError

#: ``probe eval NAME`` -> the experiment it runs (these have no ``probe run NAME``).
EVAL_COMMANDS = {"sugarcrepe": "sugarcrepe", "valse": "valse", "aro": "aro", "mmvp-vlm": "mmvp-vlm",
                 "naturalbench": "naturalbench", "eqben": "eqben", "colorswap": "colorswap",
                 "sugarcrepe-pp": "sugarcrepe-pp", "crepe": "crepe",
                 "vl-checklist": "vl-checklist"}
eval_app = typer.Typer(
    name="eval", cls=declared_group(EVAL_COMMANDS, guarded), no_args_is_help=True,
    help="Score a benchmark (SugarCrepe, VALSE, ARO, MMVP-VLM, NaturalBench, EqBen, ColorSwap, SugarCrepe++, CREPE, VL-CheckList) with a model (or re-read saved scores): tidy CSV, per-item "
         "scores, manifest.",
)
#: ``probe data info NAME`` of the benchmarks beside SugarCrepe and VALSE: NAME -> "module:function"
#: taking (data_dir, image_root).
REPORTS = {"aro": "vlprobe.data.aro:aro_report", "mmvp-vlm": "vlprobe.data.mmvp_vlm:mmvp_vlm_report",
           "naturalbench": "vlprobe.data.naturalbench:naturalbench_report", "eqben": "vlprobe.data.eqben:eqben_report",
           "colorswap": "vlprobe.data.colorswap:colorswap_report",
           "sugarcrepe-pp": "vlprobe.data.sugarcrepe_pp:sugarcrepe_pp_report",
           "crepe": "vlprobe.data.crepe:crepe_report",
           "vl-checklist": "vlprobe.data.vl_checklist:vl_checklist_report"}
#: The benchmarks of REPORTS whose images are COCO files given by ``--image-dir``.
TAKES_IMAGE_DIR = frozenset({"sugarcrepe-pp"})
data_app = typer.Typer(name="data", help="Validate and count benchmark files.", no_args_is_help=True)
Benchmark = Annotated[str, typer.Argument(help="sugarcrepe, valse, aro, mmvp-vlm, naturalbench, eqben, colorswap, sugarcrepe-pp, crepe, vl-checklist.")]


@dataclass(frozen=True, kw_only=True)
class DataInfoOptions(ItemOptions):
    """``probe data info``'s benchmark folder and image folders (the items are all counted)."""

    data_dir: Path = ItemOptions.redeclare("data_dir", REQUIRED, help="Folder of the benchmark's JSON files.")
    image_dir: Path | None = ItemOptions.redeclare(
        "image_dir", help="SugarCrepe, SugarCrepe++: check the COCO val2017 images too.")
    image_root: tuple[str, ...] = ItemOptions.redeclare(
        "image_root", help="VALSE, ARO: SOURCE=DIR (repeatable); EqBen: DIR; check the images too.",
    )


@data_app.command("info")
@guarded
@declared_options_of(DataInfoOptions, omit=("subsets", "limit"), param="folders")
def data_info(benchmark: Benchmark, as_json: AsJson = False, *, folders: DataInfoOptions) -> None:
    """Validate a benchmark's files and count items per subset, ids and problems found."""
    from dataclasses import asdict

    data_dir, image_dir, image_root = folders.data_dir, folders.image_dir, list(folders.image_root) or None

    if benchmark == "sugarcrepe":
        from vlprobe.data.sugarcrepe import sugarcrepe_report

        if image_root:
            raise InputError("image_root applies to valse; SugarCrepe takes --image-dir")
        reports = sugarcrepe_report(data_dir, image_dir)
        kept_name = "kept"
    elif benchmark == "valse":
        from vlprobe.data.valse import valse_report

        if image_dir is not None:
            raise InputError("image_dir applies to sugarcrepe; VALSE takes --image-root SOURCE=DIR")
        reports = valse_report(data_dir, image_root)
        kept_name = "valid"
    elif benchmark in REPORTS:
        import importlib

        if image_dir is not None and benchmark not in TAKES_IMAGE_DIR:
            raise InputError(f"image_dir applies to sugarcrepe and sugarcrepe-pp; {benchmark} takes --image-root")
        module, func = REPORTS[benchmark].split(":")
        extra = {"image_dir": image_dir} if benchmark in TAKES_IMAGE_DIR else {}
        reports = getattr(importlib.import_module(module), func)(data_dir, image_root, **extra)
        kept_name = "kept"
    else:
        raise InputError(f"benchmark must be one of sugarcrepe, valse, {', '.join(REPORTS)}, got {benchmark!r}")
    if as_json:
        typer.echo(json.dumps([asdict(r) for r in reports], indent=2))
        return
    typer.echo(f"{'subset':<22} {'items':>6} {kept_name:>6} {'images':>6}  ids  problems")
    for r in reports:
        problems = "; ".join(f"{k}: {v}" for k, v in r.problems.items()) or "none"
        typer.echo(f"{r.name:<22} {r.items:>6} {r.kept:>6} {r.images:>6}  {r.first_id} .. {r.last_id}  {problems}")
    total, kept = sum(r.items for r in reports), sum(r.kept for r in reports)
    typer.echo(f"{'total':<22} {total:>6} {kept:>6}")
