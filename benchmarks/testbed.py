"""The known-answer testbed: the table (model x metric, with seeds) and where the time goes.

Runs :func:`vlprobe.launch.testbed.run_testbed` (the same run as ``probe fixtures testbed`` and
``make demo``) and prints

1. the known-answer table: one row per metric, one column per model (trained CLIP, its
   order-blind control, its random initial weights (and the shuffled-words CLIP with
   ``--shuffle-control``), LXMERT trained on oracle regions, the object-only LXMERT, their random
   initial weights), and the seeds every number comes from;
2. each known answer (the checks of :mod:`vlprobe.results.known_answers`) with its values;
3. the start, end, wall and CPU seconds of every step (grouped: data, training, extraction,
   experiments, collect, reports), the lower bound CPU / jobs, and ratios measured in this run
   (training vs extraction and probing, one CLIP vs the whole run). Printed, never asserted: the machine may be
   shared, so compare ratios, not seconds.

Models and the training split go to ``--models`` (default: a folder under ``--out``) and are
reused by a second run with the same settings: run it twice to time the reuse path.

Usage: python benchmarks/testbed.py [--out DIR] [--models DIR] [--jobs 2] [--train-items 1500]
       [--eval-items 100] [--clip-steps 400] [--lxmert-steps 400] [--objects-steps 100] [--seed 0]
       [--shuffle-control]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from vlprobe.launch.testbed import GROUPS, KnownAnswerConfig, run_testbed
from vlprobe.results.known_answers import CLIP_MODELS, LXMERT_MODELS


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
    parser.add_argument("--objects-steps", type=int, default=100)
    parser.add_argument("--shuffle-control", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="vlprobe-testbed-"))
    config = KnownAnswerConfig(
        out=out, models_dir=args.models, train_items=args.train_items, eval_items=args.eval_items, seed=args.seed,
        clip_steps=args.clip_steps, lxmert_steps=args.lxmert_steps, objects_steps=args.objects_steps,
        shuffle_control=args.shuffle_control, jobs=args.jobs,
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
    timings = result["timings"]
    tasks = timings["steps"]
    print(f"load average at the end: {os.getloadavg()[0]:.2f} (a shared machine's seconds are noisy; compare CPU)")
    print(f"{'group / step':<36}{'start s':>9}{'end s':>9}{'wall s':>9}{'CPU s':>9}")
    groups = {}
    for group in GROUPS:
        mine = {n: t for n, t in tasks.items() if t["group"] == group}
        if not mine:
            continue
        groups[group] = sum(t["cpu"] for t in mine.values())
        span = (min(t["start"] for t in mine.values()), max(t["end"] for t in mine.values()))
        print(f"{group:<36}{span[0]:9.1f}{span[1]:9.1f}{span[1] - span[0]:9.1f}{groups[group]:9.1f}")
        for name, t in sorted(mine.items(), key=lambda kv: kv[1]["start"]):
            print(f"  {name:<34}{t['start']:9.1f}{t['end']:9.1f}{t['wall']:9.1f}{t['cpu']:9.1f}")
    total_cpu = sum(groups.values())
    train_cpu, probe_cpu = groups.get("train", 0.0), groups.get("extract", 0.0) + groups.get("experiments", 0.0)
    clip_cpu = tasks.get("train clip-trained", {}).get("cpu", 0.0)
    print(f"\nsteps: {timings['wall']:.1f} s wall, {total_cpu:.1f} s CPU in the steps ({args.jobs} at once);"
          f" lower bound on {args.jobs} idle cores: {total_cpu / args.jobs:.1f} s")
    if probe_cpu:
        print(f"ratio training / (extraction + probing) CPU: {train_cpu / probe_cpu:.2f}")
    if total_cpu:
        print(f"ratio one CLIP training / all steps CPU: {clip_cpu / total_cpu:.2f}")
        print(f"parallel efficiency (step CPU / (wall x jobs)): {total_cpu / (timings['wall'] * args.jobs):.2f}")

if __name__ == "__main__":
    main()
