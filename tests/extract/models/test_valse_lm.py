"""VALSE's GPT-1/GPT-2 perplexity baselines against a literal re-implementation of VALSE's
``compute_ppl`` (one forward per window, transformers' own label loss) on tiny models.

Tolerance: the scorer reads every window starting at 0 off one forward pass of the whole text
and computes the log-softmax itself; VALSE runs one forward per window and transformers' loss.
Both float32: 1e-5 relative on the perplexity.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from vlprobe.extract.models.valse_lm import GPT1Scorer, GPT2Scorer, ValsePerplexityScorer
from vlprobe.fixtures.text_models import write_tiny_gpt2, write_tiny_openai_gpt
from vlprobe.validation import InputError

TEXTS = ["a", "a red", "a red circle", "a red circle left", "a red circle left of a blue square",
         "there is an orange star above a small green triangle in the picture",
         "two", "A cat sits on the mat."]


def valse_compute_ppl(model: Any, tokenizer: Any, sentence: str, max_length: int, stride: int = 3) -> float:
    """VALSE's ``compute_ppl`` (``unimodal_valse_eval.py``), written out as it runs."""
    encodings = tokenizer(sentence, return_tensors="pt")
    lls = []
    i = 0
    for i in range(0, encodings.input_ids.size(1), stride):
        begin_loc = max(i + stride - max_length, 0)
        end_loc = i + stride
        input_ids = encodings.input_ids[:, begin_loc:end_loc]
        target_ids = input_ids.clone()
        target_ids[:, :-stride] = -100
        with torch.no_grad():
            outputs = model(input_ids, labels=target_ids)
            lls.append(outputs[0] * stride)
    return float(torch.exp(torch.stack(lls).sum() / i))


def _agree(got: float, want: float) -> None:
    if math.isnan(want):
        assert math.isnan(got)
    elif math.isinf(want):
        assert got == want
    else:
        assert got == pytest.approx(want, rel=1e-5)


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gpt2(tmp_path_factory.mktemp("lm") / "gpt2", 0)


@pytest.fixture(scope="module")
def gpt1_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_openai_gpt(tmp_path_factory.mktemp("lm") / "gpt1", 0)


@pytest.mark.parametrize("which", ["gpt2", "openai-gpt"])
def test_valse_perplexity_matches_valse_code(which: str, gpt2_dir: Path, gpt1_dir: Path) -> None:
    cls: type[ValsePerplexityScorer] = GPT2Scorer if which == "gpt2" else GPT1Scorer
    scorer = cls.load(str(gpt2_dir if which == "gpt2" else gpt1_dir), device="cpu")
    got = scorer.perplexities(TEXTS, batch_size=3)
    for text, value in zip(TEXTS, got, strict=True):
        want = valse_compute_ppl(scorer.model, scorer.tokenizer, text, scorer.max_length)
        _agree(float(value), want)
    n_tokens = [len(scorer.tokenizer(t)["input_ids"]) for t in TEXTS]
    # texts of at most 3 tokens divide by the last window start, 0: never finite
    assert all(not np.isfinite(v) for v, n in zip(got, n_tokens, strict=True) if n <= 3)
    assert any(np.isfinite(v) for v in got)
    scores = scorer.score_texts(TEXTS)
    assert np.all(np.isfinite(scores)) and np.all(scores[np.isfinite(got)] == -got[np.isfinite(got)])


def test_windows_that_do_not_start_at_zero(gpt2_dir: Path, tmp_path: Path) -> None:
    """A text longer than the model's positions: VALSE's later windows drop the start of the text."""
    from transformers import GPT2Config, GPT2LMHeadModel, GPT2Tokenizer

    tok = GPT2Tokenizer.from_pretrained(gpt2_dir)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=8, n_embd=16, n_layer=1, n_head=2,
                                           bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id)).eval()
    short = tmp_path / "short"
    model.save_pretrained(short)
    tok.save_pretrained(short)
    scorer = GPT2Scorer.load(str(short), device="cpu")
    text = "there is an orange star above a small green triangle in the picture"
    assert len(tok(text)["input_ids"]) > 8
    _agree(float(scorer.perplexities([text])[0]), valse_compute_ppl(model, tok, text, 8))


def test_token_mean_is_the_plain_perplexity(gpt2_dir: Path) -> None:
    scorer = GPT2Scorer.load(str(gpt2_dir), device="cpu", perplexity="token-mean")
    assert scorer.model_options() == {"perplexity": "token-mean"}
    text = "a red circle left of a blue square"
    ids = torch.tensor([scorer.tokenizer(text)["input_ids"]])
    with torch.no_grad():
        loss = scorer.model(ids, labels=ids).loss  # mean NLL of tokens 1..N-1
    assert float(scorer.perplexities([text])[0]) == pytest.approx(math.exp(float(loss)), rel=1e-5)


def test_refusals(gpt2_dir: Path, gpt1_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InputError, match=r"^checkpoint: .*'gpt2' model, expected 'openai-gpt'"):
        GPT1Scorer.load(str(gpt2_dir), device="cpu")
    with pytest.raises(InputError, match=r"^perplexity: "):
        GPT2Scorer.load(str(gpt2_dir), device="cpu", perplexity="exact")
    with pytest.raises(InputError, match=r"takes only perplexity"):
        GPT2Scorer.load(str(gpt2_dir), device="cpu", stride=3)
    import huggingface_hub.constants as hc

    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(InputError, match=r"^checkpoint: 'gpt2-large' is not in the local hub cache"):
        GPT2Scorer.load(None, device="cpu")  # VALSE's checkpoint is the default


def test_cli_eval_valse(gpt1_dir: Path, valse_dir: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from vlprobe.cli import app

    res = CliRunner().invoke(app, [
        "eval", "valse", "--data-dir", str(valse_dir), "--subsets", "existence", "--limit", "5", "--model",
        "openai-gpt", "--checkpoint", str(gpt1_dir), "--device", "cpu", "--bootstrap", "0", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "acc_r" in res.stdout
