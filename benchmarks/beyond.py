"""Runtime of the "beyond the paper" experiments on the demo's inputs, with progress bars on.

Inputs: with ``--testbed OUT``, the known-answer testbed's (``make demo`` / ``probe fixtures
testbed --out OUT``): the evaluation set ``OUT/data`` (100 items), a CLIP model of it
(``--testbed-model``, default the trained one: ``OUT/models/<model>``, or ``--models DIR``) and its
cache ``OUT/caches/<model>.h5``. Without, it builds (once per work folder) the 40-item synthetic
Winoground copy and the tiny random CLIP cache of ``benchmarks/experiments.py``.

Runs through the CLI, each in its own process with its progress bar on stderr: ``separability``
without and with ``--held-out``, ``mdl`` (variant and text-score labels), ``conditional``,
``patch`` (text and image towers, every layer and position group), ``erasure`` (LEACE at every
text layer, target and control) and ``winoground-scores`` (whose rows include the bag-of-words
slices). Prints per run the wall and CPU seconds, the peak resident memory, and the ratio to plain
``separability`` (the paper's cheapest probe) measured in the same run. Timings on a shared
machine are noisy: read the CPU seconds and the ratios.

Usage: python benchmarks/beyond.py [--testbed OUT [--testbed-model clip-trained] [--models DIR]]
       [--work DIR] [--seeds 1] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from experiments import SRC, THREADS, _probe, build_inputs


def runs(cache: Path, checkpoint: Path, data: Path, seeds: int) -> dict[str, list[str]]:
    """Name -> ``probe`` arguments (without ``--out``)."""
    s = str(seeds)
    return {
        "separability": ["run", "separability", "--cache", str(cache), "--seeds", s],
        "separability --held-out": ["run", "separability", "--cache", str(cache), "--seeds", s, "--held-out"],
        "mdl (variant)": ["run", "mdl", "--cache", str(cache), "--seeds", s],
        "mdl (text-score)": ["run", "mdl", "--cache", str(cache), "--seeds", s, "--labels", "text-score"],
        "conditional": ["run", "conditional", "--cache", str(cache), "--seeds", s],
        "patch (text + image)": ["run", "patch", "--model", "clip", "--checkpoint", str(checkpoint),
                                 "--data-dir", str(data)],
        "erasure (text)": ["run", "erasure", "--model", "clip", "--checkpoint", str(checkpoint),
                           "--data-dir", str(data), "--seeds", s],
        "winoground-scores (bow)": ["run", "winoground-scores", "--cache", str(cache)],
    }


def testbed_inputs(out: Path, model: str, models: Path | None) -> tuple[Path, Path, Path]:
    """(cache, checkpoint, data folder) of one CLIP model of a testbed run in ``out``."""
    cache, checkpoint, data = out / "caches" / f"{model}.h5", (models or out / "models") / model, out / "data"
    for path in (cache, checkpoint, data):
        if not path.exists():
            raise SystemExit(f"--testbed: {path} is missing (run `probe fixtures testbed --out {out}` first)")
    return cache, checkpoint, data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=None, help="Folder for the inputs (default: a temporary one).")
    parser.add_argument("--seeds", type=int, default=1, help="Seeds of the probing runs.")
    parser.add_argument("--threads", type=int, default=1, help="Threads per run (OMP/MKL/torch).")
    parser.add_argument("--testbed", type=Path, default=None, help="A testbed's output folder: use its inputs.")
    parser.add_argument("--testbed-model", default="clip-trained", help="The testbed's CLIP model to run.")
    parser.add_argument("--models", type=Path, default=None, help="The testbed's models folder (default OUT/models).")
    args = parser.parse_args()
    THREADS.update({k: str(args.threads) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")})
    work = args.work or Path(tempfile.mkdtemp(prefix="vlprobe-beyond-"))
    if args.testbed is not None:
        cache, checkpoint, data = testbed_inputs(args.testbed, args.testbed_model, args.models)
        print(f"inputs: testbed {args.testbed} ({args.testbed_model})")
    else:
        cache, checkpoint, data = build_inputs(work), work / "tiny-clip", work / "data"
        print(f"inputs: 40-item synthetic set, tiny random CLIP ({work})")
    results = {}
    for name, argv in runs(cache, checkpoint, data, args.seeds).items():
        out = work / "out" / name.split()[0]  # each experiment's own folder, cleared first
        shutil.rmtree(out, ignore_errors=True)
        r = _probe(SRC, [*argv, "--out", str(out)])
        results[name] = r
        sys.stderr.write(r["err"][-400:] + "\n")
        print(f"{name:<26} wall {r['wall']:7.1f} s  cpu {r['cpu']:7.1f} s  peak RSS {r['rss_mb']:6.0f} MB", flush=True)
    base = results["separability"]["cpu"]
    print(f"load average (1, 5, 15 min) at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"\nCPU seconds relative to plain separability ({base:.1f} s), one run, threads={args.threads}, "
          f"cpus={os.cpu_count()}:")
    for name, r in results.items():
        print(f"  {name:<26} x{r['cpu'] / base:6.1f}")


if __name__ == "__main__":
    main()
