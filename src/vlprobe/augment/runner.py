"""Make caption variants for a dataset or a few texts (``probe augment``).

Determinism: every (item, caption, strategy) gets its own generator from
:func:`vlprobe.augment.base.caption_rng` (seed + ids), so a caption's variants do not depend on the
order of captions, on which other captions or strategies run, or on batching; nothing reads
global random state and the file has no timestamp: the same inputs and seed give a byte-identical
file. Failures of a strategy on a caption are recorded in that caption's ``errors``; strategies
that cannot run here are skipped with their reason (or stop the run with ``strict``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vlprobe import __version__
from vlprobe.augment.base import Proposal, Strategy, caption_rng
from vlprobe.augment.plan import build_strategy, chosen_preset, resolve_plan
from vlprobe.data.loading import load_dataset, loader_options
from vlprobe.data.variants import VARIANTS_KIND, Variant, VariantSet, write_variants
from vlprobe.io.ownership import check_output
from vlprobe.validation import InputError, check_positive_int, check_seed

__all__ = ["AugmentConfig", "AugmentResult", "augment", "augment_texts", "prepare_strategies"]

FORMAT_NOTE = "the original caption counts as a variant where the paper's lists include it; it is not repeated here"


@dataclass(frozen=True)
class AugmentConfig:
    """One ``probe augment`` run over a dataset.

    ``options`` maps a strategy name to its keyword options (``{"synonym": {"spacy_model": ...}}``).
    ``dataset_options`` are the dataset loader's selection options (``subsets``, ``limit``,
    ``all_items``), ``items`` a JSONL of ``{"item": id}`` lines keeping only those items.
    """

    out: Path
    dataset: str = "winoground"
    data_dir: Path | None = None
    preset: str | None = None
    strategies: tuple[str, ...] = ()
    max_per_strategy: int | None = None
    seed: int = 0
    strict: bool = False
    options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    batch_size: int = 256
    dataset_options: Mapping[str, Any] = field(default_factory=dict)
    items: Path | None = None


@dataclass(frozen=True)
class AugmentResult:
    """What a run did: the file, counts, and the strategies it skipped (name -> reason)."""

    path: Path | None
    sets: list[VariantSet]
    skipped: dict[str, str]
    n_variants: int
    n_errors: int
    provenance: dict[str, Any]


def prepare_strategies(
    preset: str | None, strategies: Sequence[str] | None, max_per_strategy: int | None,
    options: Mapping[str, Mapping[str, Any]] | None = None, strict: bool = False,
) -> tuple[list[Strategy], dict[str, str]]:
    """Build the planned strategies; unavailable ones are skipped (name -> reason + hint).

    Raises
    ------
    InputError
        With ``strict``, when any planned strategy is unavailable (all of them are named).
    """
    options = dict(options or {})
    unknown = set(options) - {n for n, _ in resolve_plan(preset, strategies, max_per_strategy)}
    if unknown:
        raise InputError(f"options: given for strategies that do not run: {sorted(unknown)}")
    built, skipped = [], {}
    for spec, count in resolve_plan(preset, strategies, max_per_strategy):
        s = build_strategy(spec, count, options.get(spec))
        ok, reason, hint = s.available()
        if ok:
            try:
                s.load()
            except Exception as exc:
                ok, reason, hint = False, f"{type(exc).__name__}: {exc}", ""
        if ok:
            built.append(s)
        else:
            skipped[spec] = reason + (f" (to provide it: {hint})" if hint else "")
    if skipped and strict:
        raise InputError("strict: unavailable strategies: " + "; ".join(f"{k}: {v}" for k, v in skipped.items()))
    if not built:
        raise InputError("no strategy can run here: " + "; ".join(f"{k}: {v}" for k, v in skipped.items()))
    return built, skipped


def _run_strategy(
    strategy: Strategy, texts: Sequence[str], keys: Sequence[tuple[str, int]], seed: int, batch_size: int,
) -> tuple[list[list[Proposal]], list[str | None]]:
    """Proposals per caption and the error per caption (None when it worked)."""
    props: list[list[Proposal]] = [[] for _ in texts]
    errors: list[str | None] = [None] * len(texts)
    for start in range(0, len(texts), batch_size):
        idx = range(start, min(start + batch_size, len(texts)))
        rngs = [caption_rng(seed, keys[i][0], keys[i][1], strategy.name) for i in idx]
        try:
            out = strategy.propose_batch([texts[i] for i in idx], rngs)
            for i, p in zip(idx, out, strict=True):
                props[i] = p
        except Exception:
            # One bad caption must not hide the rest: redo the batch one by one, fresh generators.
            for i in idx:
                try:
                    props[i] = strategy.propose(texts[i], caption_rng(seed, keys[i][0], keys[i][1], strategy.name))
                except Exception as exc:
                    errors[i] = f"{type(exc).__name__}: {exc}"
    return props, errors


def _variant_sets(
    strategies: Sequence[Strategy], captions: Sequence[tuple[str, int, str]], seed: int, batch_size: int,
    progress: Callable[[str], None] | None = None,
) -> list[VariantSet]:
    texts = [c[2] for c in captions]
    keys = [(c[0], c[1]) for c in captions]
    variants: list[list[Variant]] = [[] for _ in captions]
    errors: list[list[dict[str, str]]] = [[] for _ in captions]
    seen: list[set[str]] = [{" ".join(t.split())} for t in texts]
    for s in strategies:
        if progress:
            progress(f"{s.name}: {len(texts)} captions")
        if s.group == "identity":
            continue
        props, errs = _run_strategy(s, texts, keys, seed, batch_size)
        for i, (plist, err) in enumerate(zip(props, errs, strict=True)):
            if err is not None:
                errors[i].append({"strategy": s.name, "error": err})
            for p in plist:
                if p.text in seen[i]:  # no cross-strategy duplicates; the first strategy keeps it
                    continue
                seen[i].add(p.text)
                variants[i].append(Variant(p.text, s.name, dict(p.params)))
    return [
        VariantSet(item, cap, tuple(v), original=text, errors=tuple(e))
        for (item, cap, text), v, e in zip(captions, variants, errors, strict=True)
    ]


def _provenance(strategies: Sequence[Strategy], skipped: Mapping[str, str], seed: int,
                extra: Mapping[str, Any]) -> dict[str, Any]:
    per = {s.name: s.provenance() for s in strategies}
    wordnet = sorted({p["wordnet"] for p in per.values() if "wordnet" in p})
    spacy = [p["spacy"] for p in per.values() if "spacy" in p]
    return {
        "tool": "vlprobe augment", "vlprobe_version": __version__, "seed": seed,
        "plan": [{"strategy": s.name, "max_outputs": s.max_outputs} for s in strategies],
        "strategies": per, "skipped": dict(skipped),
        "wordnet": wordnet[0] if len(wordnet) == 1 else wordnet or None,
        "spacy": spacy[0] if spacy else None,
        "identity": FORMAT_NOTE if any(s.group == "identity" for s in strategies) else None,
        **dict(extra),
    }


def augment(config: AugmentConfig, progress: Callable[[str], None] | None = None) -> AugmentResult:
    """Make variants of every caption of a dataset and write the variants file."""
    seed = check_seed(config.seed)
    check_positive_int(config.batch_size, "batch_size")
    check_output(config.out, VARIANTS_KIND)  # before any work: writable, and not another file
    strategies, skipped = prepare_strategies(
        config.preset, config.strategies, config.max_per_strategy, config.options, config.strict,
    )
    # variants do not depend on tags: no tag-file lookup or download
    no_tags = {"tags": False} if "tags" in loader_options(config.dataset) else {}
    ds = load_dataset(config.dataset, config.data_dir, options={**config.dataset_options, **no_tags}, items=config.items)
    captions = [(it.id, k, t.text) for it in ds.items for k, t in enumerate(it.captions)]
    sets = _variant_sets(strategies, captions, seed, config.batch_size, progress)
    prov = _provenance(strategies, skipped, seed, {
        "dataset": ds.name, "dataset_fingerprint": ds.fingerprint,
        "preset": chosen_preset(config.preset, config.strategies),
        "selection": {**{k: v for k, v in config.dataset_options.items() if v is not None},
                      **({"items": str(config.items)} if config.items is not None else {})},
        "n_items": len(ds.items),
    })
    path = write_variants(config.out, sets, provenance=prov)
    return AugmentResult(
        path, sets, skipped, sum(len(s.variants) for s in sets), sum(len(s.errors) for s in sets), prov,
    )


def augment_texts(
    texts: Sequence[str], *, preset: str | None = None, strategies: Sequence[str] | None = None,
    max_per_strategy: int | None = None, seed: int = 0, strict: bool = False,
    options: Mapping[str, Mapping[str, Any]] | None = None,
) -> AugmentResult:
    """Variants of free texts (item ids ``text/<n>``), nothing written."""
    seed = check_seed(seed)
    if isinstance(texts, str | os.PathLike) or not all(isinstance(t, str) and t.strip() for t in texts):
        raise InputError(f"texts must be a list of non-empty strings, got {texts!r}")
    built, skipped = prepare_strategies(preset, strategies, max_per_strategy, options, strict)
    captions = [(f"text/{i}", 0, t) for i, t in enumerate(texts)]
    sets = _variant_sets(built, captions, seed, 256)
    prov = _provenance(built, skipped, seed, {"preset": chosen_preset(preset, strategies)})
    return AugmentResult(None, sets, skipped, sum(len(s.variants) for s in sets),
                         sum(len(s.errors) for s in sets), prov)
