"""Neural strategies: back-translation and paraphrase with seq2seq models (transformers).

Models are a local directory (any ``AutoModelForSeq2SeqLM`` checkpoint with its tokenizer:
Marian, FSMT, BART, T5, ...) or a hub id already in the local hub cache; vlprobe never
downloads one. When a model is absent the strategy is unavailable and says which model id and
how to provide it (``hf download <id>`` where the hub is reachable, or a directory through the
strategy's option, e.g. ``--option back-translation.forward=DIR``).

* ``back-translation``: en -> pivot greedy, pivot -> en beam search (default
  ``facebook/wmt19-en-de`` / ``facebook/wmt19-de-en``, beam 2, as the paper's BackTranslation;
  ``Helsinki-NLP/opus-mt-en-de`` / ``opus-mt-de-en`` work too).
* ``diverse-back-translation``: the same pair, 15 pivot -> en beams, then a greedy pick of
  faithful and mutually different outputs (the paper's DiverseParaphrase used DiPS with GloVe
  vectors; vlprobe scores fidelity and diversity with word n-grams only).
* ``paraphrase``: any seq2seq paraphraser (default ``tdopierre/ProtAugment-ParaphraseGenerator``,
  as the paper's ProtAugment) with vlprobe's diverse (group) beam search (:mod:`.beam`): 20
  beams in 5 groups, penalty 0.5; from each group the hypothesis least like the source (lowest
  smoothed sentence BLEU, vlprobe's own, not sacreBLEU).
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from vlprobe.augment.base import Availability, Proposal, Strategy
from vlprobe.validation import InputError

__all__ = [
    "BackTranslationStrategy", "DiverseBackTranslationStrategy", "ParaphraseStrategy", "model_status",
    "sentence_bleu",
]


def model_status(spec: str, option: str) -> tuple[bool, str, str]:
    """(usable, reason, hint) for a model directory or a cached hub id; nothing is loaded."""
    p = Path(spec)
    if p.is_dir():
        if (p / "config.json").is_file():
            return True, f"local model {p}", ""
        return False, f"model directory {str(p)!r} has no config.json", f"point {option} at a saved checkpoint"
    hint = (f"download {spec!r} once where the hub is reachable (`hf download {spec}`), "
            f"or pass a local checkpoint directory with --option {option}=DIR")
    if p.is_absolute() or spec.startswith((".", "~")) or spec.count("/") > 1:
        return False, f"model directory {spec!r} does not exist", hint
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False, "huggingface_hub is not installed", "pip install huggingface_hub"
    try:
        found = try_to_load_from_cache(spec, "config.json")
    except Exception as exc:  # invalid repo id
        return False, f"model {spec!r}: {exc}", hint
    if isinstance(found, str):
        return True, f"hub model {spec} (cached)", ""
    return False, f"model {spec!r} is not in the local hub cache (vlprobe never downloads models)", hint


def _load(spec: str, device: str) -> tuple[Any, Any, str]:
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    if Path(spec).is_dir():
        path = spec
    else:
        from huggingface_hub import snapshot_download

        path = snapshot_download(spec, local_files_only=True)
    from vlprobe.devices import device_name, resolve_device
    from vlprobe.extract.models.hf import quiet_transformers, reading_weights

    device = device_name(resolve_device(device))
    with quiet_transformers(), reading_weights(spec):
        tok = AutoTokenizer.from_pretrained(path)
        model = AutoModelForSeq2SeqLM.from_pretrained(path).to(device).eval()
    return tok, model, device


def _ngrams(words: Sequence[str], n: int) -> Counter:
    return Counter(tuple(words[i:i + n]) for i in range(len(words) - n + 1))


def sentence_bleu(hypothesis: str, reference: str, max_n: int = 4) -> float:
    """Smoothed sentence BLEU in [0, 1] (add-one smoothing for n > 1, brevity penalty), on lower-cased words."""
    h, r = hypothesis.lower().split(), reference.lower().split()
    if not h or not r:
        return 0.0
    logs = 0.0
    for n in range(1, max_n + 1):
        hn, rn = _ngrams(h, n), _ngrams(r, n)
        match = sum(min(c, rn[g]) for g, c in hn.items())
        total = max(sum(hn.values()), 0)
        if n == 1:
            if match == 0:
                return 0.0
            logs += math.log(match / total)
        else:
            logs += math.log((match + 1) / (total + 1))
    bp = 1.0 if len(h) > len(r) else math.exp(1 - len(r) / len(h))
    return bp * math.exp(logs / max_n)


class _Seq2SeqStrategy(Strategy):
    group: ClassVar[str] = "neural"
    model_options: ClassVar[tuple[str, ...]] = ()
    defaults: ClassVar[dict[str, Any]] = {}

    def __init__(self, max_outputs: int | None = None, **options: Any) -> None:
        super().__init__(max_outputs, **options)
        self.settings = {**self.defaults, **self.options}
        self.resources = tuple(f"model:{self.settings[o]}" for o in self.model_options)
        self._models: dict[str, tuple[Any, Any, str]] = {}

    @classmethod
    def option_names(cls) -> tuple[str, ...]:
        return tuple(cls.defaults)

    def available(self) -> Availability:
        for opt in self.model_options:
            ok, reason, hint = model_status(str(self.settings[opt]), f"{self.name}.{opt}")
            if not ok:
                return Availability(False, reason, hint)
        return Availability(True, ", ".join(str(self.settings[o]) for o in self.model_options))

    def load(self) -> None:
        """Load the models (once); errors name the model."""
        for opt in self.model_options:
            spec = str(self.settings[opt])
            if opt not in self._models:
                try:
                    self._models[opt] = _load(spec, str(self.settings.get("device", "auto")))
                except Exception as exc:
                    raise InputError(f"strategy {self.name!r}: cannot load model {spec!r}: {exc}") from exc

    def _translate(self, opt: str, texts: Sequence[str], **gen: Any) -> list[list[str]]:
        """Outputs per input (``num_return_sequences`` each) with transformers' own generate."""
        import torch

        from vlprobe.extract.models.hf import quiet_transformers

        self.load()
        tok, model, device = self._models[opt]
        n_ret = int(gen.get("num_return_sequences", 1))
        out: list[list[str]] = []
        bs = int(self.settings.get("batch_size", 16))
        for start in range(0, len(texts), bs):
            chunk = list(texts[start:start + bs])
            enc = tok(chunk, return_tensors="pt", padding=True, truncation=True).to(device)
            with torch.no_grad(), quiet_transformers():
                ids = model.generate(**enc, max_new_tokens=int(self.settings["max_new_tokens"]), do_sample=False, **gen)
            dec = tok.batch_decode(ids, skip_special_tokens=True)
            out.extend(dec[i * n_ret:(i + 1) * n_ret] for i in range(len(chunk)))
        return out

    def propose(self, text: str, rng: np.random.Generator) -> list[Proposal]:
        return self.propose_batch([text], [rng])[0]

    def provenance(self) -> dict[str, Any]:
        out = super().provenance()
        out["models"] = {o: _model_id(str(self.settings[o])) for o in self.model_options}
        out["settings"] = {k: v for k, v in self.settings.items() if k not in self.model_options}
        used = sorted({m[2] for m in self._models.values()})
        if used:  # the device the models ran on (settings say what was asked for: "auto")
            out["device"] = ", ".join(used)
        return out


def _model_id(spec: str) -> dict[str, str]:
    """A model's identity for provenance: the hub id and its cached commit, or the directory's hash."""
    p = Path(spec)
    if p.is_dir():
        from vlprobe.provenance import fingerprint_files

        files = sorted(f for f in p.rglob("*") if f.is_file())
        return {"path": str(p), "sha256": fingerprint_files(files, p)}
    try:
        from huggingface_hub import snapshot_download

        path = snapshot_download(spec, local_files_only=True)
        return {"hub": spec, "revision": os.path.basename(path)}
    except Exception:
        return {"hub": spec}


class BackTranslationStrategy(_Seq2SeqStrategy):
    """Translate to a pivot language (greedy) and back (beam search)."""

    name: str = "back-translation"
    default_max_outputs: ClassVar[int] = 1
    model_options: ClassVar[tuple[str, ...]] = ("forward", "backward")
    defaults: ClassVar[dict[str, Any]] = {
        "forward": "facebook/wmt19-en-de", "backward": "facebook/wmt19-de-en", "num_beams": 2,
        "max_new_tokens": 64, "batch_size": 16, "device": "auto",
    }

    def _back(self, pivots: Sequence[str], n: int) -> list[list[str]]:
        beams = max(int(self.settings["num_beams"]), n)
        return self._translate("backward", pivots, num_beams=beams, num_return_sequences=n)

    def propose_batch(self, texts: Sequence[str], rngs: Sequence[np.random.Generator]) -> list[list[Proposal]]:
        pivots = [p[0] for p in self._translate("forward", texts, num_beams=1)]
        backs = self._back(pivots, self.max_outputs)
        return [self._finish(t, [Proposal(b, {"pivot": p}) for b in bs])
                for t, p, bs in zip(texts, pivots, backs, strict=True)]


class DiverseBackTranslationStrategy(BackTranslationStrategy):
    """Back-translation with many beams, then a faithful and diverse subset."""

    name: str = "diverse-back-translation"
    default_max_outputs: ClassVar[int] = 3
    defaults: ClassVar[dict[str, Any]] = {
        **BackTranslationStrategy.defaults, "num_beams": 15, "fidelity_weight": 0.5,
    }

    def propose_batch(self, texts: Sequence[str], rngs: Sequence[np.random.Generator]) -> list[list[Proposal]]:
        pivots = [p[0] for p in self._translate("forward", texts, num_beams=1)]
        n = int(self.settings["num_beams"])
        backs = self._back(pivots, max(n, self.max_outputs))
        out = []
        for t, p, cands in zip(texts, pivots, backs, strict=True):
            picked = _diverse_pick(t, list(dict.fromkeys(c.strip() for c in cands)), self.max_outputs,
                                   float(self.settings["fidelity_weight"]))
            out.append(self._finish(t, [Proposal(c, {"pivot": p, "pick": k}) for k, c in enumerate(picked)]))
        return out


def _diverse_pick(source: str, cands: list[str], k: int, weight: float) -> list[str]:
    """Greedy: fidelity (BLEU-1/2 against the source) plus novelty against those picked so far."""
    src = " ".join(source.lower().split())
    cands = [c for c in cands if c and " ".join(c.lower().split()) != src]
    picked: list[str] = []
    while cands and len(picked) < k:
        def gain(c: str) -> float:
            fidelity = sentence_bleu(c, source, max_n=2)
            words = set(c.lower().split())
            seen = set(" ".join(picked).lower().split()) | set(source.lower().split())
            novelty = len(words - seen) / max(len(words), 1)
            return weight * fidelity + (1 - weight) * novelty

        best = max(cands, key=gain)  # first of equals: beam order breaks ties
        picked.append(best)
        cands.remove(best)
    return picked


class ParaphraseStrategy(_Seq2SeqStrategy):
    """A seq2seq paraphraser decoded with vlprobe's diverse (group) beam search."""

    name: str = "paraphrase"
    default_max_outputs: ClassVar[int] = 5
    model_options: ClassVar[tuple[str, ...]] = ("model",)
    defaults: ClassVar[dict[str, Any]] = {
        "model": "tdopierre/ProtAugment-ParaphraseGenerator", "num_beams": 20, "num_beam_groups": 5,
        "diversity_penalty": 0.5, "max_new_tokens": 64, "batch_size": 1, "device": "auto",
    }

    def propose_batch(self, texts: Sequence[str], rngs: Sequence[np.random.Generator]) -> list[list[Proposal]]:
        from vlprobe.augment.beam import diverse_beam_search

        self.load()
        tok, model, device = self._models["model"]
        out = []
        for t in texts:
            enc = tok([t], return_tensors="pt", truncation=True).to(device)
            hyps = diverse_beam_search(
                model, enc["input_ids"], enc.get("attention_mask"), num_beams=int(self.settings["num_beams"]),
                num_beam_groups=int(self.settings["num_beam_groups"]),
                diversity_penalty=float(self.settings["diversity_penalty"]),
                max_new_tokens=int(self.settings["max_new_tokens"]),
            )
            by_group: dict[int, list[tuple[str, float]]] = {}
            for h in hyps:
                by_group.setdefault(h.group, []).append((tok.decode(list(h.tokens), skip_special_tokens=True).strip(), h.score))
            props = []
            for g, members in sorted(by_group.items()):
                members = [m for m in members if m[0] and " ".join(m[0].split()) != " ".join(t.split())]
                if not members:
                    continue
                text, _ = min(members, key=lambda m: sentence_bleu(m[0], t))  # first of equals
                props.append(Proposal(text, {"group": g, "bleu": round(sentence_bleu(text, t), 6)}))
            out.append(self._finish(t, props))
        return out
