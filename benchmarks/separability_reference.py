"""``probe run separability`` vs the "Why is Winoground Hard?" reference loop on the same states.

The reference is ``SVC_linear_separability_by_example/probe_clip.py`` of
github.com/ajd12342/why-winoground-hard (commit 7069ff6). What it does, rewritten here (its code is
not copied): it unpickles per item the CLS states of caption 0's and caption 1's variants, one
array per layer; then for every item, for control in (False, True), for every layer, it divides
the states by 100, labels caption 0's variants 0 and caption 1's 1 (the control shuffles the labels
with ``np.random.shuffle``), fits ``SVC(kernel='linear', max_iter=100000, C=100)``, scores it on
the same points (training accuracy) and takes the margin ``2 / ||w||`` (1000 when ``w = 0``), and
writes one CSV line ``Winoground Set,Control?,Layer,Score,Margin``. :func:`reference_loop` does
exactly that on states exported from the cache, as a script of its own (``--reference-loop``).

Both sides run as their own process on one thread (OMP/OpenBLAS/MKL), and each is measured by
its CPU seconds (user + system, ``os.wait4``): interpreter start-up, imports, reading the states,
the fits and writing included, so the figure is what a user waits for on an idle core.

1. ``probe run separability --cache CACHE`` at its defaults (target + 3 control seeds: twice the
   reference's fits, plus bootstrap intervals and permutation tests), and with ``--seeds 1`` (as
   many fits as the reference), against the reference script: CPU seconds and ratios.
2. Agreement: the reference's target rows against vlprobe's per-item rows (``items.csv``):
   training accuracy on every (item, layer), and the margin where the item is separable.
3. Start-up of ``probe run``: CPU seconds and peak memory of ``probe run separability`` on a
   2-item cache, whether torch was imported, and the same run with torch imported first (what
   every ``probe run`` paid before the cache schema stopped importing it).

The default cache is planted (:func:`~vlprobe.fixtures.caches.planted_cache`): Winoground's 400
items, 13 layers of 512 dims (ViT-B/32's text tower), 7 variants per caption, model ``clip`` (so
``--scale paper`` divides by 100 as the reference does). ``--cache`` takes any cache with variants
(a real ``probe extract --variants`` cache of CLIP: the text stream's ``cls`` states).

Usage: python benchmarks/separability_reference.py [--cache CLIP.h5] [--items 400] [--repeats 1]
"""

from __future__ import annotations

import argparse
import csv
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def reference_loop(states_file: Path, out_csv: Path) -> None:
    """The reference script's loop (module docstring), reading the states it would unpickle."""
    from sklearn.svm import SVC

    with open(states_file, "rb") as fh:
        feats = pickle.load(fh)  # list per item of {"cap0": [layer arrays], "cap1": [...]}
    with open(out_csv, "w", encoding="utf-8") as table:
        print("Winoground Set,Control?,Layer,Score,Margin", file=table)
        for item, both in enumerate(feats):
            for control in (False, True):
                for layer in range(len(both["cap0"])):
                    label0, label1 = both["cap0"][layer], both["cap1"][layer]
                    samples = np.concatenate((label0, label1), axis=0) / 100.0
                    labels = np.concatenate((np.zeros(len(label0)), np.ones(len(label1))), axis=0)
                    if control:
                        np.random.shuffle(labels)
                    svc = SVC(kernel="linear", max_iter=100000, C=100)
                    svc.fit(samples, labels)
                    score = svc.score(samples, labels)
                    norm = np.linalg.norm(svc.coef_)
                    margin = 1000 if norm == 0 else 2 / norm
                    print(f"{item},{control},{layer},{score},{margin}", file=table)


def export_states(cache: Path, out: Path) -> list[str]:
    """The states vlprobe fits, per item and layer, in the reference's layout (float32, as its
    pickled tensors' ``.float().numpy()``); returns the item ids in order."""
    from vlprobe.experiments.cache_features import load_index, read_stream
    from vlprobe.experiments.separability import separability_cases
    from vlprobe.extract.cache.reader import ActivationCache

    with ActivationCache(cache) as c:
        index = load_index(c)
        read = read_stream(c, None, ("text",), "cls", "all")
    cases, _ = separability_cases(index, read.modality, read.lookup)
    feats = []
    for case in cases:
        rows = read.states[case.rows].astype(np.float32)  # (points, layers, hidden)
        feats.append({f"cap{k}": [rows[case.labels == k, li] for li in range(rows.shape[1])] for k in (0, 1)})
    with open(out, "wb") as fh:
        pickle.dump(feats, fh)
    return [case.name for case in cases]


#: Runs a child (``-m MODULE``, ``-c CODE`` or a script path, then its arguments) and writes its
#: peak resident memory to $BENCH_PEAK_FILE at exit. Read from /proc (Linux): ``ru_maxrss`` of a
#: child counts the parent's peak from before its exec.
_WRAP = r"""
import atexit, os, runpy, sys
def _peak():
    try:
        with open("/proc/self/status") as fh:
            kb = next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:"))
        with open(os.environ["BENCH_PEAK_FILE"], "w") as out:
            out.write(str(kb))
    except (OSError, StopIteration):
        pass
atexit.register(_peak)
kind, target, *rest = sys.argv[1:] if sys.argv[1] in ("-m", "-c") else ["path", *sys.argv[1:]]
sys.argv = [target, *rest]
if kind == "-m":
    runpy.run_module(target, run_name="__main__", alter_sys=True)
elif kind == "-c":
    exec(compile(target, "<benchmark>", "exec"), {"__name__": "__main__"})
else:
    runpy.run_path(target, run_name="__main__")
"""


def timed(argv: list[str], repeats: int) -> tuple[float, float, str]:
    """(CPU seconds, peak resident MiB, stdout) of ``python -m M ...`` / ``-c CODE ...`` / ``SCRIPT ...``
    run in a child; the fewest CPU seconds over ``repeats`` runs (a shared machine adds, never removes)."""
    best = None
    for _ in range(repeats):
        got = _run_child(argv)
        best = got if best is None or got[0] < best[0] else best
    assert best is not None
    return best


def _run_child(argv: list[str]) -> tuple[float, float, str]:
    with tempfile.TemporaryDirectory() as tmp:
        peak_file, out_file, err_file = (Path(tmp) / name for name in ("peak", "out", "err"))
        env = {**os.environ, **ONE_THREAD, "BENCH_PEAK_FILE": str(peak_file)}
        with open(out_file, "wb") as out, open(err_file, "wb") as err:
            proc = subprocess.Popen([sys.executable, "-c", _WRAP, *argv], env=env, stdout=out, stderr=err)
            _, status, usage = os.wait4(proc.pid, 0)  # this child's own CPU seconds
        proc.returncode = code = os.waitstatus_to_exitcode(status)
        if code:
            raise RuntimeError(f"{' '.join(argv[:5])} failed ({code}): {err_file.read_text()[-2000:]}")
        peak = int(peak_file.read_text()) / 1024 if peak_file.exists() else float("nan")
        return usage.ru_utime + usage.ru_stime, peak, out_file.read_text()


def agreement(reference_csv: Path, items_csv: Path, item_ids: list[str]) -> str:
    """The reference's target rows vs vlprobe's per-item rows, as one line."""
    ref = {}
    with open(reference_csv, encoding="utf-8") as fh:
        for r in csv.DictReader(fh):
            if r["Control?"] == "False":
                ref[(item_ids[int(r["Winoground Set"])], int(r["Layer"]))] = (float(r["Score"]), float(r["Margin"]))
    ours: dict[tuple[str, int], dict[str, float]] = {}
    with open(items_csv, encoding="utf-8") as fh:
        for r in csv.DictReader(fh):
            if r["task"] == "target" and r["metric"] in ("train_accuracy", "separable_margin"):
                ours.setdefault((r["subset"], int(r["layer"])), {})[r["metric"]] = float(r["value"])
    acc_diff, margin_rel, n_margin = 0.0, 0.0, 0
    for key, (score, margin) in ref.items():
        mine = ours[key]
        acc_diff = max(acc_diff, abs(100 * score - mine["train_accuracy"]))
        if np.isfinite(mine["separable_margin"]):
            margin_rel = max(margin_rel, abs(mine["separable_margin"] - margin) / margin)
            n_margin += 1
    return (f"{len(ref)} target fits compared: max |training accuracy difference| {acc_diff:.2g} points; "
            f"margins of the {n_margin} separable fits: max relative difference {margin_rel:.1e}")


_STARTUP = """
import sys
from vlprobe.cli.app import main
sys.argv = ["probe", *sys.argv[1:]]
try:
    main()
except SystemExit as exc:
    if exc.code:
        raise
print("torch loaded:", "torch" in sys.modules)
"""


def bench_startup(root: Path, repeats: int) -> None:
    from vlprobe.fixtures.caches import planted_cache

    tiny = planted_cache(root / "tiny.h5", n_items=2, n_variants=1, n_layers=2, signal_layer=1, hidden=4,
                         model="clip")
    outs = iter(range(1000))

    def run(first: str) -> tuple[float, float, str]:
        return timed(["-c", first + _STARTUP, "run", "separability", "--cache", str(tiny), "--out",
                      str(root / f"tiny-{next(outs)}"), "--quiet", "--seeds", "1", "--bootstrap", "10"], repeats)

    cpu, rss, out = run("")
    with_torch, with_torch_rss, _ = run("import torch\n")
    bare, bare_rss, _ = timed(["-c", "import numpy, sklearn.svm"], repeats)
    print(f"probe run start-up (separability on a 2-item cache, whole process): {cpu:.2f} CPU s, "
          f"peak {rss:.0f} MiB; {out.strip().splitlines()[-1]}")
    print(f"  the same with torch imported first (as every probe run did): {with_torch:.2f} CPU s, peak "
          f"{with_torch_rss:.0f} MiB -> {cpu / with_torch:.2f}x; python -c 'import numpy, sklearn.svm': "
          f"{bare:.2f} CPU s, peak {bare_rss:.0f} MiB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, help="a cache with variants (default: a planted Winoground-sized one)")
    ap.add_argument("--items", type=int, default=400, help="items of the planted cache")
    ap.add_argument("--variants", type=int, default=7, help="variants per caption of the planted cache")
    ap.add_argument("--repeats", type=int, default=1, help="runs of each side (the fewest CPU seconds count)")
    ap.add_argument("--reference-loop", nargs=2, type=Path, metavar=("STATES", "CSV"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.reference_loop:
        reference_loop(*args.reference_loop)
        return
    from vlprobe.fixtures.caches import planted_cache

    print(f"cpu cores: {os.cpu_count()}; every figure is the CPU seconds of a one-thread process "
          f"(fewest of {args.repeats}); a shared machine adds noise")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cache = args.cache or planted_cache(root / "planted.h5", n_items=args.items, n_variants=args.variants,
                                            n_layers=13, signal_layer=6, hidden=512, streams={"text": "text"},
                                            model="clip", seed=0)
        states = root / "states.pkl"
        ids = export_states(cache, states)
        ref_csv = root / "reference.csv"
        ref, ref_rss, _ = timed([__file__, "--reference-loop", str(states), str(ref_csv)],
                                args.repeats)
        n_layers = len(pickle.loads(states.read_bytes())[0]["cap0"])
        print(f"states: {len(ids)} items x {n_layers} layers ({'cache ' + str(args.cache) if args.cache else 'planted'})")
        print(f"  reference loop (probe_clip.py's logic; target + 1 shuffled control = {2 * len(ids) * n_layers} "
              f"fits): {ref:7.2f} CPU s, peak {ref_rss:.0f} MiB")
        runs = {}
        for label, extra in (("defaults (target + 3 control seeds, intervals, permutation tests)", []),
                             ("--seeds 1 (as many fits as the reference)", ["--seeds", "1"])):
            out = root / f"out-{len(runs)}"
            cpu, rss, _ = timed(["-m", "vlprobe", "run", "separability", "--cache", str(cache),
                                 "--out", str(out), "--quiet", *extra], args.repeats)
            runs[label] = out
            print(f"  probe run separability, {label}: {cpu:7.2f} CPU s, peak {rss:.0f} MiB  "
                  f"-> {cpu / ref:.2f}x the reference")
        first = next(iter(runs.values())) / "separability"
        items_csv = next(first.glob("*.items.csv"))
        print(f"  agreement: {agreement(ref_csv, items_csv, ids)}")
        bench_startup(root, args.repeats)


if __name__ == "__main__":
    main()
