"""Neural strategies and vlprobe's diverse beam search, on tiny random seq2seq models vlprobe writes.

The outputs are gibberish (random weights): these tests check the mechanics — counts,
deduplication, determinism, that diverse beam groups differ, and how absent models are reported.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from vlprobe.augment.beam import diverse_beam_search
from vlprobe.augment.neural import (
    BackTranslationStrategy,
    DiverseBackTranslationStrategy,
    ParaphraseStrategy,
    model_status,
    sentence_bleu,
)
from vlprobe.augment.runner import augment_texts

TEXTS = ["a dog sits on the grass", "two cats near a tree", "a red circle left of a blue square"]


def _load(path: Path):
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    return AutoTokenizer.from_pretrained(path), AutoModelForSeq2SeqLM.from_pretrained(path).eval()


def test_diverse_beam_search_groups_differ_and_are_deterministic(tiny_bart: Path) -> None:
    tok, model = _load(tiny_bart)
    enc = tok(["a dog sits on the grass"], return_tensors="pt")
    kw = dict(num_beams=6, num_beam_groups=3, max_new_tokens=6)
    diverse = diverse_beam_search(model, enc["input_ids"], enc["attention_mask"], diversity_penalty=100.0, **kw)
    assert len(diverse) == 6 and [h.group for h in diverse] == [0, 0, 1, 1, 2, 2]
    again = diverse_beam_search(model, enc["input_ids"], enc["attention_mask"], diversity_penalty=100.0, **kw)
    assert diverse == again
    # a large Hamming penalty makes each group open with a token no earlier group chose
    firsts = [h.tokens[0] for h in diverse]
    assert len({firsts[0], firsts[2], firsts[4]}) == 3
    plain = diverse_beam_search(model, enc["input_ids"], enc["attention_mask"], diversity_penalty=0.0, **kw)
    # without the penalty every group runs the same beam search
    assert [h.tokens for h in plain[:2]] == [h.tokens for h in plain[2:4]] == [h.tokens for h in plain[4:]]
    with pytest.raises(ValueError, match="multiple of num_beam_groups"):
        diverse_beam_search(model, enc["input_ids"], num_beams=5, num_beam_groups=2)


def test_one_beam_equals_transformers_greedy_search(tiny_bart: Path) -> None:
    tok, model = _load(tiny_bart)
    for text in TEXTS:
        enc = tok([text], return_tensors="pt")
        ours = diverse_beam_search(model, enc["input_ids"], enc["attention_mask"], num_beams=1, num_beam_groups=1,
                                   diversity_penalty=0.0, max_new_tokens=6)
        with torch.no_grad():
            ref = model.generate(**enc, num_beams=1, max_new_tokens=6, do_sample=False, min_new_tokens=1,
                                 suppress_tokens=[model.config.pad_token_id])
        special = {model.config.eos_token_id, model.config.pad_token_id, model.config.decoder_start_token_id}
        assert ours[0].tokens == tuple(t for t in ref[0].tolist()[1:] if t not in special)


def test_paraphrase_counts_dedup_determinism(tiny_bart: Path) -> None:
    s = ParaphraseStrategy(max_outputs=3, model=str(tiny_bart), device="cpu", max_new_tokens=6,
                           num_beams=8, num_beam_groups=4)
    assert s.available().ok
    out = s.propose_batch(TEXTS, [np.random.default_rng(0)] * 3)
    for text, props in zip(TEXTS, out, strict=True):
        texts = [p.text for p in props]
        assert 1 <= len(texts) <= 3 and len(set(texts)) == len(texts) and text not in texts
        assert len({p.params["group"] for p in props}) == len(props)  # one per beam group
    assert out == s.propose_batch(TEXTS, [np.random.default_rng(1)] * 3)


def test_back_translation_mechanics(tiny_marian: tuple[Path, Path]) -> None:
    fwd, bwd = tiny_marian
    bt = BackTranslationStrategy(forward=str(fwd), backward=str(bwd), device="cpu", max_new_tokens=6)
    out = bt.propose_batch(TEXTS, [np.random.default_rng(0)] * 3)
    assert all(len(p) <= 1 for p in out) and any(out)
    assert all("pivot" in p.params for ps in out for p in ps)
    dbt = DiverseBackTranslationStrategy(forward=str(fwd), backward=str(bwd), device="cpu", max_new_tokens=6, num_beams=6)
    div = dbt.propose_batch(TEXTS, [np.random.default_rng(0)] * 3)
    for text, props in zip(TEXTS, div, strict=True):
        texts = [p.text for p in props]
        assert len(texts) <= 3 and len(set(texts)) == len(texts) and text not in texts
    assert div == dbt.propose_batch(TEXTS, [np.random.default_rng(0)] * 3)
    prov = dbt.provenance()
    assert set(prov["models"]) == {"forward", "backward"} and "sha256" in prov["models"]["forward"]


def test_absent_models_are_unavailable_with_the_model_id_and_the_fix(tmp_path: Path) -> None:
    ok, reason, hint = ParaphraseStrategy().available()
    assert not ok and "tdopierre/ProtAugment-ParaphraseGenerator" in reason
    assert "hf download tdopierre/ProtAugment-ParaphraseGenerator" in hint and "paraphrase.model=DIR" in hint
    ok, reason, _ = model_status(str(tmp_path), "x.model")
    assert not ok and "config.json" in reason
    ok, reason, _ = BackTranslationStrategy(forward="Helsinki-NLP/opus-mt-en-de").available()
    assert not ok and "Helsinki-NLP/opus-mt-en-de" in reason


def test_run_goes_on_without_an_absent_model_or_fails_when_strict(tiny_bart: Path, nlp) -> None:
    res = augment_texts(["a dog chases a cat."], strategies=["paraphrase", "role-rewrite"])
    assert "paraphrase" in res.skipped and "not in the local hub cache" in res.skipped["paraphrase"]
    assert [v.strategy for v in res.sets[0].variants] == ["role-rewrite"]
    with pytest.raises(ValueError, match="strict: unavailable strategies: paraphrase"):
        augment_texts(["a dog chases a cat."], strategies=["paraphrase", "role-rewrite"], strict=True)
    res = augment_texts(["a dog chases a cat."], strategies=["paraphrase"], options={
        "paraphrase": {"model": str(tiny_bart), "device": "cpu", "max_new_tokens": 5, "num_beams": 4, "num_beam_groups": 2}})
    assert not res.skipped and 1 <= res.n_variants <= 2


def test_sentence_bleu() -> None:
    assert sentence_bleu("a dog on the grass", "a dog on the grass") == pytest.approx(1.0)
    assert sentence_bleu("cat", "a dog on the grass") == 0.0
    assert 0 < sentence_bleu("a dog on grass", "a dog on the grass") < 1
