"""UNITER module throughput on pairs, as ratios measured in one run (printed, never asserted).

Scores every image x every caption (the ``all`` pair plan) with a random-initialised UNITER of
the chosen size (base: 768 hidden, 12 layers) on CPU, three ways:

1. one forward per pair (batch of 1);
2. batched ``forward`` over pairs;
3. batched ``forward_embeddings``: each caption and region set embedded once, indexed per batch.

Usage: python benchmarks/bench_uniter.py [--size base|tiny] [--images 6] [--captions 6]
       [--regions 36] [--tokens 16] [--batch 36] [--threads N]
"""

from __future__ import annotations

import argparse

import torch
from _common import best_of

from vlprobe.extract.models.uniter.model import UniterModel

SIZES = {
    "base": dict(vocab_size=28996, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072),
    "tiny": dict(vocab_size=300, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                 intermediate_size=64),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=sorted(SIZES), default="base")
    ap.add_argument("--images", type=int, default=6)
    ap.add_argument("--captions", type=int, default=6)
    ap.add_argument("--regions", type=int, default=36)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--batch", type=int, default=36)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    model = UniterModel(SIZES[args.size], seed=0)
    g = torch.Generator().manual_seed(0)
    n_img, n_cap, r, t = args.images, args.captions, args.regions, args.tokens
    ids = torch.randint(5, model.config.vocab_size, (n_cap, t), generator=g)
    ids[:, 0] = 2
    lengths = torch.randint(t // 2, t + 1, (n_cap,), generator=g)
    mask = (torch.arange(t)[None] < lengths[:, None]).long()
    feat = torch.rand((n_img, r, model.config.img_dim), generator=g)
    pos = torch.rand((n_img, r, 7), generator=g)
    img_mask = torch.ones(n_img, r, dtype=torch.long)
    img_idx = torch.arange(n_img).repeat_interleave(n_cap)
    cap_idx = torch.arange(n_cap).repeat(n_img)
    n_pairs = len(img_idx)

    def per_pair() -> torch.Tensor:
        return torch.stack([
            model(ids[c : c + 1], mask[c : c + 1], feat[i : i + 1], pos[i : i + 1], img_mask[i : i + 1],
                  output_hidden_states=False).match_prob[0]
            for i, c in zip(img_idx.tolist(), cap_idx.tolist(), strict=True)
        ])

    def batched() -> torch.Tensor:
        out = []
        for s in range(0, n_pairs, args.batch):
            i, c = img_idx[s : s + args.batch], cap_idx[s : s + args.batch]
            out.append(model(ids[c], mask[c], feat[i], pos[i], img_mask[i], output_hidden_states=False).match_prob)
        return torch.cat(out)

    def shared_embeddings() -> torch.Tensor:
        text, image = model.embed_text(ids), model.embed_image(feat, pos)
        out = []
        for s in range(0, n_pairs, args.batch):
            i, c = img_idx[s : s + args.batch], cap_idx[s : s + args.batch]
            out.append(model.forward_embeddings(text[c], mask[c], image[i], img_mask[i],
                                                output_hidden_states=False).match_prob)
        return torch.cat(out)

    with torch.inference_mode():
        a, b, c = per_pair(), batched(), shared_embeddings()  # warm-up and agreement
        diff = max((a - b).abs().max().item(), (a - c).abs().max().item())
        t_pair = best_of(per_pair, args.repeats)
        t_batch = best_of(batched, args.repeats)
        t_shared = best_of(shared_embeddings, args.repeats)
    print(f"UNITER-{args.size}, {n_pairs} pairs ({n_img} images x {n_cap} captions), {r} regions, "
          f"{t} tokens, batch {args.batch}, {torch.get_num_threads()} thread(s)")
    print(f"  one forward per pair   {n_pairs / t_pair:8.1f} pairs/s")
    print(f"  batched forward        {n_pairs / t_batch:8.1f} pairs/s   x{t_pair / t_batch:.2f}")
    print(f"  shared embeddings      {n_pairs / t_shared:8.1f} pairs/s   x{t_pair / t_shared:.2f}")
    print(f"  max |match_prob| difference between the three: {diff:.1e}")


if __name__ == "__main__":
    main()
