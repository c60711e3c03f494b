"""Captions per second of the lexical preset: spaCy batched with ``nlp.pipe`` vs one call per caption.

Each strategy parses the captions itself here (docs not shared), so the two settings differ only
in how spaCy is called; a last line adds the shared-doc cache ``probe augment`` uses.
Captions: the first N SugarCrepe captions (``$VLPROBE_SHARED_DATA``), else
synthetic ones. WordNet and spaCy are loaded (and warmed up) before timing. Prints the rates and
the ratio; asserts nothing.

    python benchmarks/augment.py [--n 1000] [--repeats 1]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from vlprobe.augment.base import caption_rng
from vlprobe.augment.plan import PRESETS, build_strategy


def captions(n: int) -> tuple[list[str], str]:
    root = Path(os.environ.get("VLPROBE_SHARED_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data")
    folder = root / "sugar-crepe" / "data"
    out: list[str] = []
    if folder.is_dir():
        for f in sorted(folder.glob("*.json")):
            for row in json.loads(f.read_text()).values():
                out.append(row["caption"])
        out = list(dict.fromkeys(out))
    if len(out) >= n:
        return out[:n], f"SugarCrepe captions ({folder})"
    rng = np.random.default_rng(0)
    nouns = "dog cat man woman child horse car tree table chair cup ball bird house".split()
    verbs = "sits stands runs rides holds looks".split()
    preps = "on near under behind beside".split()
    made = [f"a {rng.choice(nouns)} {rng.choice(verbs)} {rng.choice(preps)} the {rng.choice(nouns)}" for _ in range(n)]
    return made, "synthetic captions"


def run(strategies: list, texts: list[str], batched: bool, share: bool) -> float:
    from vlprobe.augment.lexical import _DOC_CACHES

    _DOC_CACHES.clear()
    start = time.perf_counter()
    for s in strategies:
        rngs = [caption_rng(0, f"bench/{i}", 0, s.name) for i in range(len(texts))]
        s.propose_batch(texts, rngs, batched=batched, share=share)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    texts, source = captions(args.n)
    strategies = [build_strategy(name, n) for name, n in PRESETS["lexical"]]
    for s in strategies:
        s.check_available()
    run(strategies, texts[:20], True, True)  # load WordNet and spaCy, warm caches
    nlp = strategies[0].nlp()[0]

    def spacy_only(batched: bool) -> float:
        start = time.perf_counter()
        strategies[0].docs(texts, batched=batched, share=False)
        return time.perf_counter() - start

    rows = []
    for label, batched in (("nlp.pipe (batched)", True), ("one nlp() per caption", False)):
        total = min(run(strategies, texts, batched, False) for _ in range(args.repeats))
        parse = min(spacy_only(batched) for _ in range(args.repeats))
        rows.append((label, total, parse))
    shared = min(run(strategies, texts, True, True) for _ in range(args.repeats))
    print(f"lexical preset ({', '.join(f'{n} {k}' for n, k in PRESETS['lexical'])}) over {len(texts)} {source}")
    print(f"spaCy {nlp.meta.get('name')} {nlp.meta.get('version')}; {os.cpu_count()} CPUs; best of {args.repeats}")
    for label, total, parse in rows:
        print(f"  {label:<24} {len(texts) / total:8.1f} captions/s (all 4 strategies)   "
              f"spaCy alone {len(texts) / parse:8.1f} captions/s")
    (_, tb, pb), (_, tu, pu) = rows
    print(f"ratio batched / per-caption: {tu / tb:.2f}x end to end, {pu / pb:.2f}x for the spaCy part")
    print(f"  nlp.pipe + docs shared by the 4 strategies (what `probe augment` does): "
          f"{len(texts) / shared:.1f} captions/s, {tu / shared:.2f}x the per-caption calls")


if __name__ == "__main__":
    main()
