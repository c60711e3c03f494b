"""Extraction cost of the papers' model families against CLIP's, as ratios measured in one run
(printed, never asserted).

Every family runs on its tiny fixture (`probe fixtures model NAME [--arch A]`) over the same
inputs: the synthetic Winoground-format dataset (``--items`` items, 2 images and 2 captions each)
and, for the region readers, one random 36-box 2048-d feature set per image.

1. ``extract``: the whole path (data, model load, every layer, cls/mean/max pooling, HDF5 writes)
   for CLIP (the baseline), OpenCLIP (ViT, ModifiedResNet and roberta-text fixtures, loaded
   natively), VisualBERT and ViLBERT / 12-in-1 (cross-encoders: pair states for each item's 4
   pairs); then the model load alone, so the rest is the extraction proper.
2. The blind text scorers (GPT-2, GPT-1 with VALSE's perplexity, Vera, the grammar model) score
   the same captions (repeated to 256 texts); against CLIP's text stream encoding them (every
   layer, batches of 32 as the scorers').

The fixtures differ in size (the parameter column), so a ratio compares these tiny models' code
paths (loading, tokenising, pooling, pair plans, writes), not the released models' arithmetic.

Usage: python benchmarks/bench_families.py [--items 16] [--repeats 5] [--threads 1]  (one thread: steadier on a shared machine)
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from vlprobe.data.loading import load_dataset
from vlprobe.data.synthetic import make_synthetic_winoground
from vlprobe.extract.runner import ExtractConfig, extract
from vlprobe.fixtures.model_fixture import write_model_fixture
from vlprobe.fixtures.regions import random_regions_for_dataset
from vlprobe.registry import MODELS

#: (label, registered model, fixture name, fixture arch, the checkpoint inside the fixture, load options)
FAMILIES: list[tuple[str, str, str, str | None, str, dict[str, Any]]] = [
    ("CLIP (HF)", "clip", "clip", None, "", {}),
    ("OpenCLIP ViT", "openclip", "openclip", "vit", "", {}),
    ("OpenCLIP ResNet", "openclip", "openclip", "resnet", "", {}),
    ("OpenCLIP roberta", "openclip", "openclip", "roberta", "", {}),
    ("VisualBERT", "visualbert", "visualbert", None, "", {}),
    ("ViLBERT", "vilbert", "vilbert", "pretrained", "save/pretrained_model.bin", {}),
    ("ViLBERT 12-in-1", "vilbert", "vilbert", "multitask", "save/multi_task_model.bin", {}),
]
#: (label, registered blind scorer, fixture name)
BLIND: list[tuple[str, str, str]] = [
    ("GPT-2 (VALSE ppl)", "gpt2", "gpt2"), ("GPT-1 (VALSE ppl)", "openai-gpt", "openai-gpt"),
    ("Vera", "vera", "vera"), ("grammar (CoLA)", "grammar", "grammar"),
]


def _params(adapter: Any) -> int:
    model = getattr(adapter, "model", None)
    return sum(p.numel() for p in model.parameters()) if isinstance(model, torch.nn.Module) else 0


def paired(fn: Callable[[], object], base: Callable[[], object], repeats: int) -> tuple[float, float]:
    """Fastest seconds of ``fn`` and of ``base``, timed alternately (the baseline beside each case,
    so a load that drifts on a shared machine weighs on both)."""
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(max(1, repeats)):
        for out, f in zip(times, (fn, base), strict=True):
            t0 = time.perf_counter()
            f()
            out.append(time.perf_counter() - t0)
    return min(times[0]), min(times[1])


def bench_extract(root: Path, data: Path, regions: Path, repeats: int) -> Any:
    runs = iter(range(100_000))

    def runner(model: str, checkpoint: str, options: dict[str, Any]) -> Callable[[], None]:
        reads_regions = MODELS.get(model).image_input == "regions"

        def run() -> None:
            out = root / f"cache-{next(runs)}.h5"
            extract(ExtractConfig(model=model, checkpoint=checkpoint, out=out, data_dir=data, device="cpu",
                                  progress=False, model_options=options, regions=regions if reads_regions else None))
            out.unlink()
        return run

    def loader(model: str, checkpoint: str, options: dict[str, Any]) -> Callable[[], Any]:
        return lambda: MODELS.get(model).load(checkpoint, device="cpu", **options)

    cases = []
    for label, model, fixture, arch, inside, options in FAMILIES:
        folder = write_model_fixture(fixture, root / f"{fixture}-{arch or 'one'}", 0, arch)
        checkpoint = str(folder / inside) if inside else str(folder)
        cases.append((label, runner(model, checkpoint, options), loader(model, checkpoint, options)))
    _, clip_run, clip_load = cases[0]
    print(f"1. probe extract, every layer, cls/mean/max, CPU (best of {repeats}, each beside a CLIP run):")
    print(f"   {'family':<18} {'params':>9} {'extract s':>10} {'x CLIP':>7} {'load s':>8} {'x CLIP':>7} "
          f"{'rest s':>8} {'x CLIP':>7}")
    for label, run, load in cases:
        run(), clip_run()  # warm-up: imports, the first load of its code
        seconds, clip_seconds = paired(run, clip_run, repeats)
        load_s, clip_load_s = paired(load, clip_load, repeats)
        rest, clip_rest = seconds - load_s, clip_seconds - clip_load_s
        print(f"   {label:<18} {_params(load()):>9,} {seconds:>10.3f} {seconds / clip_seconds:>7.2f} {load_s:>8.3f} "
              f"{load_s / clip_load_s:>7.2f} {rest:>8.3f} {rest / clip_rest:>7.2f}")
    return clip_load()


def bench_blind(root: Path, data: Path, clip: Any, repeats: int) -> None:
    captions = sorted({t.text for it in load_dataset("winoground", data) for t in it.texts})
    texts = captions * max(1, -(-256 // len(captions)))  # at least 256 texts: milliseconds are all noise
    layers = list(range(clip.streams["text"].n_layers))

    def clip_text() -> None:
        for s in range(0, len(texts), 32):
            clip.encode("text", texts[s : s + 32], layers)

    print(f"2. blind scorers on the dataset's {len(captions)} captions, {len(texts)} texts in all, CPU "
          f"(best of {repeats}, each beside CLIP's text stream):")
    print(f"   {'scorer':<18} {'params':>9} {'seconds':>10} {'CLIP text s':>12} {'x CLIP text':>12}")
    for label, model, fixture in BLIND:
        folder = write_model_fixture(fixture, root / fixture, 0)
        scorer = MODELS.get(model).load(str(folder), device="cpu")
        scorer.score_texts(texts), clip_text()  # warm-up
        seconds, base = paired(lambda scorer=scorer: scorer.score_texts(texts), clip_text, repeats)
        print(f"   {label:<18} {_params(scorer):>9,} {seconds:>10.4f} {base:>12.4f} {seconds / base:>12.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="vlprobe-bench-families-") as tmp:
        root = Path(tmp)
        data = make_synthetic_winoground(root / "data", n_items=args.items, seed=0)
        regions = random_regions_for_dataset(root / "regions.h5", data, n_boxes=36, dim=2048, seed=0)
        print(f"{args.items} synthetic items ({2 * args.items} images, {2 * args.items} captions, "
              f"{4 * args.items} pairs), torch threads {torch.get_num_threads()}")
        clip = bench_extract(root, data, regions, args.repeats)
        bench_blind(root, data, clip, args.repeats)


if __name__ == "__main__":
    main()
