"""Runtime of the "beyond the paper" experiments on the demo-sized inputs, with progress bars on.

Builds (once per work folder) the 40-item synthetic Winoground copy and the tiny random CLIP
cache of ``benchmarks/experiments.py`` (``make demo``'s sizes), then runs through the CLI, each in
its own process with its progress bar on stderr: ``separability`` without and with ``--held-out``,
``mdl`` (variant and text-score labels), ``conditional``, ``patch`` (text and image towers,
every layer and position group) and ``erasure`` (LEACE at every text layer, target and control). Prints per run the wall and CPU seconds, the peak resident
memory, and the ratio to plain ``separability`` (the paper's cheapest probe) measured in the same
run. Timings on a shared machine are noisy: read the CPU seconds and the ratios.

Usage: python benchmarks/beyond.py [--work DIR] [--seeds 1] [--threads 1]
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


def runs(cache: Path, work: Path, seeds: int) -> dict[str, list[str]]:
    """Name -> ``probe`` arguments (without ``--out``)."""
    s = str(seeds)
    return {
        "separability": ["run", "separability", "--cache", str(cache), "--seeds", s],
        "separability --held-out": ["run", "separability", "--cache", str(cache), "--seeds", s, "--held-out"],
        "mdl (variant)": ["run", "mdl", "--cache", str(cache), "--seeds", s],
        "mdl (text-score)": ["run", "mdl", "--cache", str(cache), "--seeds", s, "--labels", "text-score"],
        "conditional": ["run", "conditional", "--cache", str(cache), "--seeds", s],
        "patch (text + image)": ["run", "patch", "--model", "clip", "--checkpoint", str(work / "tiny-clip"),
                                 "--data-dir", str(work / "data")],
        "erasure (text)": ["run", "erasure", "--model", "clip", "--checkpoint", str(work / "tiny-clip"),
                           "--data-dir", str(work / "data"), "--seeds", s],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=None, help="Folder for the inputs (default: a temporary one).")
    parser.add_argument("--seeds", type=int, default=1, help="Seeds of the probing runs.")
    parser.add_argument("--threads", type=int, default=1, help="Threads per run (OMP/MKL/torch).")
    args = parser.parse_args()
    THREADS.update({k: str(args.threads) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")})
    work = args.work or Path(tempfile.mkdtemp(prefix="vlprobe-beyond-"))
    cache = build_inputs(work)
    results = {}
    for name, argv in runs(cache, work, args.seeds).items():
        out = work / "out" / name.split()[0]
        shutil.rmtree(out, ignore_errors=True)
        r = _probe(SRC, [*argv, "--out", str(out)])
        results[name] = r
        sys.stderr.write(r["err"][-400:] + "\n")
        print(f"{name:<26} wall {r['wall']:7.1f} s  cpu {r['cpu']:7.1f} s  peak RSS {r['rss_mb']:6.0f} MB", flush=True)
    base = results["separability"]["cpu"]
    print(f"\nCPU seconds relative to plain separability ({base:.1f} s), one run, threads={args.threads}, "
          f"cpus={os.cpu_count()}:")
    for name, r in results.items():
        print(f"  {name:<26} x{r['cpu'] / base:6.1f}")


if __name__ == "__main__":
    main()
