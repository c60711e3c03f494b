"""The known-answer testbed: the table (model x metric, with seeds) and where the time goes.

Runs :func:`vlprobe.cli.testbed.run_testbed` (the same run as ``probe fixtures testbed`` and
``make demo``) and prints

1. the known-answer table: one row per metric, one column per model (trained CLIP, its
   shuffled-words control, its random initial weights, LXMERT trained on oracle regions, its
   random initial weights), and the seeds every number comes from;
2. each known answer (the checks of :mod:`vlprobe.experiments.known_answers`) with its values;
3. the wall and CPU seconds of every stage and lane, and ratios measured in this run (training vs
   extraction and probing, one CLIP vs the whole run). Printed, never asserted: the machine may be
   shared, so compare ratios, not seconds.

Models and the training split go to ``--models`` (default: a folder under ``--out``) and are
reused by a second run with the same settings: run it twice to time the reuse path.

Usage: python benchmarks/testbed.py [--out DIR] [--models DIR] [--jobs 2] [--train-items 1500]
       [--eval-items 100] [--clip-steps 400] [--lxmert-steps 400] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from vlprobe.cli.testbed import KnownAnswerConfig, run_testbed
from vlprobe.experiments.known_answers import CLIP_MODELS, LXMERT_MODELS


def _table(rows: list[dict]) -> str:
    models = [m for m in (*CLIP_MODELS, *LXMERT_MODELS) if any(r["model"] == m for r in rows)]
    values = {(r["model"], r["metric"]): float(r["value"]) for r in rows}
    metrics = sorted({r["metric"] for r in rows})
    head = f"{'metric':<34}" + "".join(f"{m:>16}" for m in models)
    lines = [head, "-" * len(head)]
    for metric in metrics:
        cells = "".join(f"{values[(m, metric)]:16.2f}" if (m, metric) in values else f"{'-':>16}" for m in models)
        lines.append(f"{metric:<34}{cells}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--models", type=Path, default=None)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--train-items", type=int, default=1500)
    parser.add_argument("--eval-items", type=int, default=100)
    parser.add_argument("--clip-steps", type=int, default=400)
    parser.add_argument("--lxmert-steps", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="vlprobe-testbed-"))
    config = KnownAnswerConfig(
        out=out, models_dir=args.models, train_items=args.train_items, eval_items=args.eval_items, seed=args.seed,
        clip_steps=args.clip_steps, lxmert_steps=args.lxmert_steps, jobs=args.jobs,
    )
    result = run_testbed(config, echo=lambda text: None)
    report = result["report"]
    seeds = json.loads(report["table"][0]["seeds"]) if report["table"] else {}
    print(f"known-answer table ({out}); seeds: {json.dumps(seeds, sort_keys=True)}")
    print(_table(report["table"]))
    print()
    for check in report["checks"]:
        state = {True: "yes", False: "NO", None: "n/a"}[check["holds"]]
        values = "" if check["holds"] is None else f"  ({check['left_value']:.2f} {check['op']} {check['right_value']:.2f})"
        print(f"[{state:>3}] {check['claim']}{values}")
    print()
    total_wall = sum(lanes["(stage wall)"][0] for lanes in result["timings"].values())
    total_cpu = sum(cpu for lanes in result["timings"].values() for name, (_, cpu) in lanes.items()
                    if name != "(stage wall)")
    print(f"{'stage / lane':<36}{'wall s':>10}{'CPU s':>10}")
    for stage, lanes in result["timings"].items():
        for name, (wall, cpu) in lanes.items():
            label = f"{stage}" if name == "(stage wall)" else f"  {name}"
            print(f"{label:<36}{wall:10.1f}{'' if name == '(stage wall)' else f'{cpu:10.1f}'}")
    train_cpu = sum(cpu for name, (_, cpu) in result["timings"].get("train", {}).items() if name != "(stage wall)")
    probe_cpu = sum(cpu for name, (_, cpu) in result["timings"].get("extract and probe", {}).items()
                    if name != "(stage wall)")
    clip_cpu = result["timings"].get("train", {}).get("clip-trained", (0.0, 0.0))[1]
    print(f"\ntotal: {total_wall:.1f} s wall, {total_cpu:.1f} s CPU in the lanes ({args.jobs} workers)")
    if probe_cpu:
        print(f"ratio training / (extraction + probing) CPU: {train_cpu / probe_cpu:.2f}")
    if total_cpu:
        print(f"ratio one CLIP training / whole run CPU: {clip_cpu / total_cpu:.2f}")
    print(f"parallel efficiency (lane CPU / (wall x workers)): {total_cpu / (total_wall * args.jobs):.2f}")


if __name__ == "__main__":
    main()
