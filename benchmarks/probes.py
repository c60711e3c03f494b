"""Probe training performance, as ratios measured in one run (printed, never asserted).

1. The §3.2 MLP for 11 seeds x 13 layers: one batched model (``fit_mlp_ensemble``, stacked
   weights, one ``baddbmm`` per layer and step) vs a Python loop of ``MLPProbe.fit`` calls with
   the same initialisations and orders. The data are Winoground-sized (400 items, 300 train items
   x 4 examples); the network is reduced (``--dim``, ``--width``, ``--epochs``) so the loop ends in
   about a minute on a small CPU. A check that both give the same predictions is printed too.
2. Separability (§5.1) at the demo's size, 40 items x 13 layers x (target + 3 controls), 12 texts
   per item (or the cache given with ``--cache``): the SVMs as the experiment fits them now
   (libsvm's ``SVC(kernel="linear")``, the paper's solver) vs the former solver (liblinear's
   ``LinearSVC``, hinge loss) on the same points, and the margins of both against a direct
   ``SVC(kernel="linear", C=100)`` call: the maximum relative difference (libsvm) and the median and
   maximum (liblinear).
3. Separability for 400 items x 13 layers (16 texts per item, 2 control seeds): the SVMs fitted in
   parallel (joblib, ``--jobs``) vs sequentially; the results must agree.

Usage: python benchmarks/probes.py [--items 400] [--layers 13] [--seeds 11] [--dim 32]
       [--width 32] [--epochs 4] [--jobs 2] [--threads 1] [--cache DEMO/clip.h5]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from joblib import Parallel, delayed

from vlprobe.experiments.separability import SeparabilityConfig, run_separability
from vlprobe.fixtures.caches import planted_cache
from vlprobe.probes.ensemble import fit_mlp_ensemble
from vlprobe.probes.mlp import MLPProbe


def bench_mlp(args: argparse.Namespace) -> None:
    rng = np.random.default_rng(0)
    n_train = 3 * args.items  # 300 of 400 items x 4 examples
    n_feat = 2 * 2 * args.dim  # concat(option 1, option 2), each concat(text, image) embedding
    X = rng.normal(size=(args.layers, n_train, n_feat)).astype(np.float32)
    y_layer = (X[:, :, 0] * X[:, :, 1] > 0).astype(np.int64)  # (L, N)
    seeds = [s for _ in range(args.layers) for s in range(args.seeds)]
    groups = [g for g in range(args.layers) for _ in range(args.seeds)]
    y = y_layer[groups]
    hp = {"depth": 4, "width": args.width, "lr": 1e-4, "epochs": args.epochs, "batch_size": 200}
    print(f"MLP (§3.2 shape, reduced): {args.seeds} seeds x {args.layers} layers = {len(seeds)} models; "
          f"{n_train} training examples x {n_feat} features; depth 4, width {args.width}, batch 200, "
          f"{args.epochs} epochs; torch threads {torch.get_num_threads()}")
    # Warm up both paths (torch's first optimizer step imports and compiles helpers).
    fit_mlp_ensemble(X[:1, :8], y[:1, :8], [0], **{**hp, "epochs": 1})
    MLPProbe(**{**hp, "epochs": 1}).fit(X[0, :8], y[0, :8])
    t0 = time.perf_counter()
    ens = fit_mlp_ensemble(X, y, seeds, groups=groups, **hp)
    batched = time.perf_counter() - t0
    print(f"  batched (one model, stacked weights): {batched:8.2f} s")
    t0 = time.perf_counter()
    loop_logits = []
    for m, (s, g) in enumerate(zip(seeds, groups, strict=True)):
        p = MLPProbe(random_state=s, **hp).fit(X[g], y[m])
        loop_logits.append(p.decision_function(X[g][:200]))
    loop = time.perf_counter() - t0
    print(f"  sequential loop of MLPProbe.fit:      {loop:8.2f} s")
    diff = np.abs(ens.decision_function(X[:, :200]) - np.stack(loop_logits)).max()
    print(f"  speed-up: {loop / batched:.1f}x   (max |logit difference| batched vs loop: {diff:.1e})")


def _spin(n: int) -> int:
    total = 0
    for i in range(n):
        total += i * i
    return total


def parallel_capacity(jobs: int) -> float:
    """Speed-up of the same pure-Python work on ``jobs`` joblib workers: what the machine allows."""
    work = [3_000_000] * (2 * jobs)
    t0 = time.perf_counter()
    for n in work:
        _spin(n)
    sequential = time.perf_counter() - t0
    with Parallel(n_jobs=jobs) as par:
        par(delayed(_spin)(10) for _ in range(jobs))  # start the workers first
        t0 = time.perf_counter()
        par(delayed(_spin)(n) for n in work)
        parallel = time.perf_counter() - t0
    return sequential / parallel


def _liblinear_fit(X: np.ndarray, y: np.ndarray) -> float:
    """2/||w|| of the former solver: liblinear, hinge loss, the intercept penalised like a weight."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.svm import LinearSVC

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        svc = LinearSVC(C=100.0, loss="hinge", dual=True, tol=1e-4, max_iter=100_000, random_state=0).fit(X, y)
    norm = float(np.linalg.norm(svc.coef_))
    return 2.0 / norm if norm > 0 else float("inf")


def bench_solvers(args: argparse.Namespace, root: Path) -> None:
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.svm import SVC

    from vlprobe.experiments.cache_features import load_index, read_stream
    from vlprobe.experiments.separability import separability_cases
    from vlprobe.extract.cache.reader import ActivationCache
    from vlprobe.probes.linear import LinearSeparabilityProbe
    from vlprobe.probes.separability_cases import control_labels

    cache = Path(args.cache) if args.cache else planted_cache(
        root / "demo.h5", n_items=40, n_variants=5, n_layers=args.layers, signal_layer=args.layers // 2,
        hidden=args.svc_dim, seed=0)
    with ActivationCache(cache) as c:
        index = load_index(c)
        read = read_stream(c, None, ("text", "pair"), "cls", "all")
    cases, _ = separability_cases(index, read.modality, read.lookup)
    seeds = [0, 1, 2]
    problems = [(read.states[case.rows, li].astype(np.float64), y) for li in range(read.states.shape[1])
                for case in cases for y in [case.labels, *(control_labels(case, s) for s in seeds)]]
    print(f"Separability solvers, demo size: {len(cases)} cases x {read.states.shape[1]} layers x "
          f"(target + {len(seeds)} controls) = {len(problems)} SVMs, {problems[0][0].shape[0]} points in "
          f"{problems[0][0].shape[1]} dims ({'cache ' + str(cache) if args.cache else 'planted cache'})")
    t0 = time.perf_counter()
    new = [LinearSeparabilityProbe().fit_trusted(X, y) for X, y in problems]
    t_new = time.perf_counter() - t0
    t0 = time.perf_counter()
    old = [_liblinear_fit(X, y) for X, y in problems]
    t_old = time.perf_counter() - t0
    print(f"  libsvm SVC (now):          {t_new:8.2f} s")
    print(f"  liblinear LinearSVC (was): {t_old:8.2f} s   libsvm / liblinear time: {t_new / t_old:.2f}")
    t0 = time.perf_counter()
    run_separability(SeparabilityConfig(cache=cache, out=root / "demo-run", seeds=len(seeds)))
    print(f"  the whole experiment now (jobs=1, outputs written): {time.perf_counter() - t0:8.2f} s")
    rel_new, rel_old = [], []
    old_flat = []
    for (X, y), p, m_old in zip(problems, new, old, strict=True):
        if not p.has_hyperplane_:
            old_flat.append(m_old)
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            ref = SVC(kernel="linear", C=100.0, max_iter=100_000).fit(X, y)
        m_ref = 2.0 / float(np.linalg.norm(ref.coef_))
        rel_new.append(abs(p.margin_ - m_ref) / m_ref)
        rel_old.append(abs(m_old - m_ref) / m_ref)
    n_flat = sum(not p.has_hyperplane_ for p in new)
    print(f"  margins vs SVC(kernel='linear', C=100) on the same points ({len(rel_new)} fits with a "
          f"hyperplane; {n_flat} without, left out):")
    print(f"    libsvm (now):     max relative difference {max(rel_new):.1e}")
    print(f"    liblinear (was):  median {np.median(rel_old):.2%}, max {max(rel_old):.2%}")
    if old_flat:
        print(f"  fits without a hyperplane: the former solver's 2/||w|| there ranged "
              f"{min(old_flat):.1e} .. {max(old_flat):.1e} (now NaN, counted as no_hyperplane)")


def bench_svc(args: argparse.Namespace, root: Path) -> None:
    cache = planted_cache(root / "sep.h5", n_items=args.items, n_variants=7, n_layers=args.layers,
                          signal_layer=args.layers // 2, hidden=args.svc_dim, seed=0)
    cfg = {"cache": cache, "seeds": 2}
    n_fits = args.items * args.layers * 3
    print(f"Separability: {args.items} items x {args.layers} layers x (target + 2 controls) = {n_fits} SVMs, "
          f"16 points each in {args.svc_dim} dims")
    t0 = time.perf_counter()
    _, _, seq = run_separability(SeparabilityConfig(out=root / "seq", jobs=1, **cfg))
    sequential = time.perf_counter() - t0
    print(f"  sequential:             {sequential:8.2f} s")
    t0 = time.perf_counter()
    _, _, par = run_separability(SeparabilityConfig(out=root / "par", jobs=args.jobs, **cfg))
    parallel = time.perf_counter() - t0
    print(f"  parallel (jobs={args.jobs}):      {parallel:8.2f} s (includes starting the workers)")
    same = [{k: v for k, v in r.items() if k != "value"} for r in seq] == [
        {k: v for k, v in r.items() if k != "value"} for r in par]
    diff = np.nanmax(np.abs(np.array([r["value"] for r in seq]) - np.array([r["value"] for r in par])))
    print(f"  speed-up: {sequential / parallel:.2f}x   same rows: {same}, max |value difference|: {diff:.1e}")
    print(f"  (this machine's own parallel capacity, a pure-Python loop on {args.jobs} workers: "
          f"{parallel_capacity(args.jobs):.2f}x)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=400)
    ap.add_argument("--layers", type=int, default=13)
    ap.add_argument("--seeds", type=int, default=11)
    ap.add_argument("--dim", type=int, default=32, help="width of each stream's embedding")
    ap.add_argument("--width", type=int, default=32, help="MLP hidden width (the paper: 1024)")
    ap.add_argument("--epochs", type=int, default=4, help="the paper: 200")
    ap.add_argument("--svc-dim", type=int, default=64, help="state width for the SVMs")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (both sides)")
    ap.add_argument("--skip-mlp", action="store_true")
    ap.add_argument("--skip-svc", action="store_true")
    ap.add_argument("--cache", help="a cache with variants for the solver comparison (e.g. the demo's clip.h5)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"cpu cores: {os.cpu_count()} (timings on a shared machine are noisy)")
    if not args.skip_mlp:
        bench_mlp(args)
    if not args.skip_svc:
        with tempfile.TemporaryDirectory() as tmp:
            bench_solvers(args, Path(tmp))
            bench_svc(args, Path(tmp))


if __name__ == "__main__":
    main()
