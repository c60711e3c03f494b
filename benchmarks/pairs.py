"""Cross-encoder pair scoring (``--pair-plan all`` style): vlprobe's batched/shared pass vs one full
forward per pair, on base-size LXMERT and UNITER architectures (random init), CPU.

For every image x every caption (default 8 x 16 = 128 pairs, 36 boxes of 2048-d features):

- ``shared``  what ``probe extract`` and ``probe eval`` run, the pair-scoring engine
              (``vlprobe.extract.scoring.score_pairs``): captions tokenised once, regions read once,
              pairs in batches through the adapter's ``encode_pairs`` (LXMERT: the 9 language
              layers once per caption, the 5 relation layers once per image, only the 5 cross
              layers per pair; UNITER: embeddings once per caption/image, the joint blocks over
              the batch);
- ``per-pair`` one plain forward per pair (``LxmertForPreTraining(...)`` / ``UniterModel(...)``),
              the same token and region tensors, batch size 1.

Each (model, path) runs in its own process, so the peak resident memory (``ru_maxrss``) is that
path's; "extra" is the peak minus the resident size once the model was built. Prints pairs per
second by wall clock and by the process's CPU time (with one thread, CPU time hardly depends on
what else the machine runs, so its ratio is the steadier figure on a shared machine), the
speed-up ratios and the largest score difference between the two paths (printed, never
asserted). ``--repeats N`` keeps the fastest of N runs of each path.

Usage: python benchmarks/pairs.py [--images 8] [--captions 16] [--boxes 36] [--batch 32]
       [--threads 1] [--repeats 1] [--models lxmert,uniter]
"""

from __future__ import annotations

import argparse
import os
import resource
import time
from typing import Any

import numpy as np
from _common import in_fresh_process

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _captions(n: int, seed: int) -> list[str]:
    from vlprobe.data.synthetic import COLORS, RELATIONS, SHAPES

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        c0, c1 = rng.choice(list(COLORS), 2, replace=False)
        s0, s1 = rng.choice(list(SHAPES), 2, replace=False)
        rel = RELATIONS[int(rng.integers(len(RELATIONS)))]
        size = rng.choice(["big ", "small ", ""])
        out.append(f"a {size}{c0} {s0} {rel} a {c1} {s1}")
    return out


def _regions(n: int, boxes: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    feats = np.maximum(rng.standard_normal((n, boxes, 2048), dtype=np.float32), 0)
    xy = rng.uniform(0, 0.7, (n, boxes, 2))
    xyxy = np.concatenate([xy, np.minimum(xy + rng.uniform(0.05, 0.3, (n, boxes, 2)), 1)], axis=-1)
    return feats, xyxy.astype(np.float32), np.ones((n, boxes), dtype=bool)


def _adapter(model: str) -> Any:
    """A base-size adapter with random weights (seeded; no files, no hub)."""
    import torch
    from transformers import BertTokenizer

    from vlprobe.extract.models.hf import ResolvedCheckpoint
    from vlprobe.fixtures.staging import seeded_model
    from vlprobe.fixtures.tokenizers import bert_fixture_vocab

    ckpt = ResolvedCheckpoint("random-init", __import__("pathlib").Path("."), "random")
    cpu = torch.device("cpu")
    if model == "lxmert":
        from transformers import LxmertConfig, LxmertForPreTraining

        from vlprobe.extract.models.lxmert import LxmertAdapter

        net = seeded_model(LxmertForPreTraining, LxmertConfig(), 0)  # 768 wide, 9 / 5 / 5 layers
        tok = BertTokenizer(vocab=bert_fixture_vocab(lowercase=True), do_lower_case=True)
        return LxmertAdapter(net, tok, ckpt, cpu, torch.float32)
    from vlprobe.extract.models.uniter.adapter import UniterAdapter
    from vlprobe.extract.models.uniter.model import UniterModel

    base = {"vocab_size": 28996, "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
            "intermediate_size": 3072}
    net = UniterModel(base, seed=0)
    tok = BertTokenizer(vocab=bert_fixture_vocab(lowercase=False), do_lower_case=False)
    return UniterAdapter(net, tok, ckpt, cpu, torch.float32)


def _case(model: str, path: str, args: argparse.Namespace, queue: Any) -> None:
    import torch

    torch.set_num_threads(args.threads)
    adapter = _adapter(model)
    captions = _captions(args.captions, seed=0)
    from vlprobe.data.items import ImageRef
    from vlprobe.extract.regions.store import RegionBatch
    from vlprobe.extract.scoring import ImageSource, score_pairs

    feats, boxes, mask = _regions(args.images, args.boxes, seed=0)
    sizes = np.zeros(args.images, dtype=np.int64)
    regions = RegionBatch(features=feats, boxes=boxes, mask=mask, image_w=sizes, image_h=sizes)
    image_idx, text_idx = (a.ravel() for a in np.meshgrid(np.arange(args.images), np.arange(args.captions), indexing="ij"))

    class HeldRegions:
        """The region store's ``get`` over the arrays in memory (no file: the same for both paths)."""

        def get(self, names: list[str]) -> RegionBatch:
            rows = np.array([int(n) for n in names])
            return RegionBatch(features=feats[rows], boxes=boxes[rows], mask=mask[rows], image_w=sizes[rows],
                               image_h=sizes[rows])

    refs = [ImageRef(id=f"bench/{i}", name=str(i)) for i in range(args.images)]

    def shared() -> np.ndarray:
        out = np.empty(len(text_idx))
        source = ImageSource("regions", refs, HeldRegions())
        for got in score_pairs(adapter, captions, source, text_idx, image_idx, batch_size=args.batch):
            out[got.index] = got.scores
        return out

    def per_pair() -> np.ndarray:
        texts, images = adapter.prepare_texts(captions), adapter.prepare_images(regions)
        out = []
        with torch.inference_mode():
            for t, i in zip(text_idx, image_idx, strict=True):
                n = int(texts.lengths[t])
                ids, am = texts.input_ids[t : t + 1, :n], texts.attention_mask[t : t + 1, :n]
                if model == "lxmert":
                    logits = adapter.model(
                        input_ids=ids, attention_mask=am, visual_feats=images.features[i : i + 1],
                        visual_pos=images.boxes[i : i + 1], visual_attention_mask=images.mask[i : i + 1].float(),
                    ).cross_relationship_score
                    out.append(torch.softmax(logits, -1)[:, 1].numpy())
                else:
                    res = adapter.model(ids, am, images.features[i : i + 1], images.pos7[i : i + 1],
                                        images.mask[i : i + 1], output_hidden_states=False)
                    out.append(res.match_prob.numpy())
        return np.concatenate(out)

    fn = shared if path == "shared" else per_pair
    rss0 = _rss_mb()
    walls, cpus = [], []
    for _ in range(args.repeats):
        w0, c0 = time.perf_counter(), time.process_time()
        scores = fn()
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    queue.put({"seconds": min(walls), "cpu_seconds": min(cpus), "pairs": len(text_idx), "rss_model_mb": rss0,
               "peak_mb": peak, "scores": scores})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=8)
    ap.add_argument("--captions", type=int, default=16)
    ap.add_argument("--boxes", type=int, default=36)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--models", default="lxmert,uniter")
    args = ap.parse_args()
    print(f"{args.images} images x {args.captions} captions = {args.images * args.captions} pairs, "
          f"{args.boxes} boxes x 2048-d, batch {args.batch}, {args.threads} thread(s), random base-size weights, CPU")
    for model in args.models.split(","):
        res = {path: in_fresh_process(_case, model, path, args) for path in ("shared", "per-pair")}
        for path, r in res.items():
            print(f"  {model:<7} {path:<9} {r['pairs'] / r['seconds']:7.2f} pairs/s wall ({r['seconds']:5.1f} s), "
                  f"{r['pairs'] / r['cpu_seconds']:7.2f} pairs/s CPU ({r['cpu_seconds']:5.1f} s)  peak RSS {r['peak_mb']:7.0f} MB (model built: {r['rss_model_mb']:6.0f} MB, "
                  f"extra {r['peak_mb'] - r['rss_model_mb']:6.0f} MB)")
        wall = res["per-pair"]["seconds"] / res["shared"]["seconds"]
        cpu = res["per-pair"]["cpu_seconds"] / res["shared"]["cpu_seconds"]
        diff = float(np.abs(res["shared"]["scores"] - res["per-pair"]["scores"]).max())
        print(f"  {model:<7} speed-up shared / per-pair: {wall:5.2f}x wall, {cpu:5.2f}x CPU time   "
              f"max |score difference| {diff:.1e}")


if __name__ == "__main__":
    main()
