"""Generative models (LLaVA, Qwen2-VL) against CLIP: throughput and memory of ``probe extract`` on
the tiny fixtures (random weights), measured in one run (printed, never asserted).

Each case runs :func:`vlprobe.extract.runner.extract` (the whole path: the dataset, the model,
the pair batches, pooling, the HDF5 writes) on the synthetic Winoground with ``--items`` items
(the item plan: each item's 2 captions x 2 images), every layer, ``cls``/``mean``/``max``, in its
own spawned process, and prints:

- the marginal rate: items per second of CPU time between an extraction of ``--items`` items and
  one of ``--warm-items`` (run after a first, discarded one that warms the process: lazy imports,
  first loads), so that the fixed cost of loading the model and opening the cache, which
  dominates on fixtures this small, drops out; with one thread, CPU time hardly depends on what else the machine runs. Also the
  wall-clock seconds of the whole ``--items`` extraction. A generative model runs one forward of
  the joint sequence per pair (the chat prompt, the image tokens, the caption, the answer); CLIP
  encodes each caption and each image once and scores the pairs from the pooled embeddings;
- the weights (parameters x element size) and the peak resident memory above the process's size
  once torch, transformers and vlprobe were imported (``ru_maxrss``: the weights, the
  activations, the buffers of the writes); on CUDA also ``torch.cuda.max_memory_allocated``.
  At the fixtures' size that peak is mostly what every run allocates whatever the model (decoded
  images, HDF5 buffers, lazily imported modules), so its ratio stays near 1;
- the cache's size, and a generative model's mean joint-sequence length (from the positions
  the cache records);

and each as a ratio to CLIP's (float32). The generative cases run in float32 and in bfloat16
(``--dtypes``). The fixtures are tiny (3-4 layers of width 32), so the ratios measure
the cost of the generative path (one joint forward per pair, the image tokens in every sequence,
three streams) rather than of a 7B model's arithmetic; docs/models.md gives the memory a 7B model
needs.

Usage: python benchmarks/generative.py [--items 40] [--warm-items 4] [--batch 16] [--threads 1] [--device cpu]
       [--repeats 1] [--models llava,qwen2-vl] [--dtypes float32,bfloat16]
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import in_fresh_process

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _weights(adapter: Any) -> tuple[int, int]:
    """(parameter count, bytes) of the torch modules the adapter holds."""
    import torch

    params = {id(p): p for v in vars(adapter).values() if isinstance(v, torch.nn.Module) for p in v.parameters()}
    return (sum(p.numel() for p in params.values()),
            sum(p.numel() * p.element_size() for p in params.values()))


def _case(model: str, dtype: str, checkpoint: str, data: str, warm: str, out_dir: str, args: argparse.Namespace,
          queue: Any) -> None:
    import torch

    torch.set_num_threads(args.threads)
    import h5py  # noqa: F401  (imported before the base size is read, as the run imports it)
    import transformers  # noqa: F401

    from vlprobe.extract.cache.reader import ActivationCache
    from vlprobe.extract.runner import ExtractConfig, extract
    from vlprobe.registry import MODELS

    cls = MODELS.get(model)
    base = _rss_mb()
    cuda = args.device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()

    def run(data_dir: str, out: Path) -> tuple[float, float]:
        walls, cpus = [], []
        for _ in range(max(1, args.repeats)):
            out.unlink(missing_ok=True)
            t0, c0 = time.perf_counter(), time.process_time()
            extract(ExtractConfig(
                model=model, checkpoint=checkpoint, out=out, data_dir=Path(data_dir), layers="all",
                poolings=("cls", "mean", "max"), batch_size=args.batch, device=args.device, dtype=dtype,
                progress=False,
            ))
            if cuda:
                torch.cuda.synchronize()
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
        return min(walls), min(cpus)

    run(warm, Path(out_dir) / f"{model}-{dtype}-warm.h5")  # lazy imports, first loads
    _, warm_cpu = run(warm, Path(out_dir) / f"{model}-{dtype}-warm.h5")
    out = Path(out_dir) / f"{model}-{dtype}.h5"
    wall, cpu = run(data, out)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    gpu_peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else float("nan")
    with ActivationCache(out) as cache:
        pairs = len(cache.pairs()["score"]) if cache.has_pairs else 0
        tokens = float(cache.positions()["length"].mean()) if cache.position_columns() else float("nan")
        streams = {s: (len(cache.layers(s)), cache.info()["streams"][s]["hidden_size"]) for s in cache.streams}
    size = out.stat().st_size / 2**20
    n_params, n_bytes = _weights(cls.load(checkpoint, device=args.device, dtype=dtype))
    queue.put({"wall": wall, "marginal_cpu": cpu - warm_cpu, "extra_mb": peak - base, "gpu_mb": gpu_peak, "pairs": pairs,
               "tokens": tokens,
               "params": n_params, "weights_mb": n_bytes / 2**20, "cache_mb": size, "streams": streams})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=40)
    ap.add_argument("--warm-items", type=int, default=4)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeats", type=int, default=1, help="keep the fastest of N extractions per case")
    ap.add_argument("--models", default="llava,qwen2-vl")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    args = ap.parse_args()

    from vlprobe.data.synthetic import make_synthetic_winoground
    from vlprobe.fixtures.clip import write_tiny_clip
    from vlprobe.fixtures.llava import write_tiny_llava
    from vlprobe.fixtures.qwen2_vl import write_tiny_qwen2_vl

    writers = {"clip": write_tiny_clip, "llava": write_tiny_llava, "qwen2-vl": write_tiny_qwen2_vl}
    models = [m for m in args.models.split(",") if m]
    dtypes = [d for d in args.dtypes.split(",") if d]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_synthetic_winoground(root / "data", n_items=args.items, seed=0)
        make_synthetic_winoground(root / "warm", n_items=args.warm_items, seed=1)
        cases = [("clip", "float32")] + [(m, d) for m in models for d in dtypes]
        got = {}
        for model, dtype in cases:
            ckpt = root / model
            if not ckpt.exists():
                writers[model](ckpt, seed=0)
            got[model, dtype] = in_fresh_process(_case, model, dtype, str(ckpt), str(root / "data"), str(root / "warm"), tmp,
                                               args)

    ref = got["clip", "float32"]
    print(f"probe extract, {args.items} synthetic Winoground items (item plan), every layer, cls/mean/max, "
          f"tiny fixtures, {args.device}, {args.threads} thread(s), batch {args.batch}:")
    extra = args.items - args.warm_items
    print(f"{'model':9} {'dtype':8} {'params':>7} {'weights':>9} {'pairs':>5} {'wall s':>6} {'items/s (cpu)':>13} "
          f"{'peak above imports':>18} {'cache':>8}  {'time x CLIP':>11}  {'memory x CLIP':>13}")
    for (model, dtype), r in got.items():
        mem = f"{r['extra_mb']:.0f} MB" + (f" (GPU {r['gpu_mb']:.0f} MB)" if r["gpu_mb"] == r["gpu_mb"] else "")
        print(f"{model:9} {dtype:8} {r['params']:7d} {r['weights_mb']:6.2f} MB {r['pairs']:5d} {r['wall']:6.1f} "
              f"{extra / r['marginal_cpu']:13.1f} {mem:>18} {r['cache_mb']:5.1f} MB  "
              f"{r['marginal_cpu'] / ref['marginal_cpu']:10.1f}x  {r['extra_mb'] / ref['extra_mb']:12.2f}x")
    print(f"(items/s: {extra} items of CPU time over a {args.warm_items}-item run's; time x CLIP: that CPU time over "
          "CLIP's; memory x CLIP: the peak above imports over CLIP's)")
    for (model, dtype), r in got.items():
        shape = ", ".join(f"{s} {n} layers x {h}" for s, (n, h) in r["streams"].items())
        seq = f"; {r['tokens']:.0f} tokens per joint sequence (mean)" if r["tokens"] == r["tokens"] else ""
        print(f"  {model} {dtype}: {shape}{seq}")


if __name__ == "__main__":
    main()
