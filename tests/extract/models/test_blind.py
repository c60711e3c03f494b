"""Blind text-only baselines (vlprobe.extract.models.blind) on tiny random models vlprobe writes."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from vlprobe.cli import app
from vlprobe.extract.models.blind import (
    CaptionLengthScorer,
    CausalLMScorer,
    SequenceClassifierScorer,
)
from vlprobe.fixtures.staging import FIXTURE_MARKER
from vlprobe.registry import FIXTURES, MODELS

TEXTS = ["a red circle left of a blue square", "a dog", "two people riding horses near a tree", "x"]


def test_registered_lazily() -> None:
    assert MODELS.get("blind-lm") is CausalLMScorer
    assert MODELS.get("blind-grammar") is SequenceClassifierScorer
    assert MODELS.get("caption-length") is CaptionLengthScorer


def test_lm_score_is_mean_token_log_likelihood(tiny_gpt2: Path) -> None:
    scorer = CausalLMScorer.load(str(tiny_gpt2))
    got = scorer.score_texts(TEXTS, batch_size=3)
    assert got.shape == (4,) and got.dtype == np.float64 and (got < 0).all()
    # Independent check: transformers' own LM loss (mean NLL of the shifted tokens), one text at a time.
    bos = scorer.tokenizer.bos_token_id
    for text, value in zip(TEXTS, got, strict=True):
        ids = torch.tensor([[bos, *scorer.tokenizer(text, add_special_tokens=False)["input_ids"]]])
        with torch.no_grad():
            loss = scorer.model(input_ids=ids, labels=ids).loss
        assert value == pytest.approx(-float(loss), abs=1e-5)
    # Batching and padding change nothing.
    np.testing.assert_allclose(scorer.score_texts(TEXTS, batch_size=1), got, atol=1e-5)
    np.testing.assert_allclose(scorer.score_texts(TEXTS[::-1], batch_size=4), got[::-1], atol=1e-5)


def test_grammar_picks_the_acceptable_label(tiny_bert_classifier: Path) -> None:
    scorer = SequenceClassifierScorer.load(str(tiny_bert_classifier))
    assert scorer.label_index == 1 and scorer.describe()["acceptable_label"] == "acceptable"
    p = scorer.score_texts(TEXTS, batch_size=2)
    assert ((p > 0) & (p < 1)).all()
    tok = scorer.tokenizer(TEXTS[:1], return_tensors="pt")
    with torch.no_grad():
        want = torch.softmax(scorer.model(**tok).logits, -1)[0, 1].item()
    assert p[0] == pytest.approx(want, abs=1e-6)
    # Naming class 0 explicitly scores its probability, 1 - P(class 1).
    other = SequenceClassifierScorer.load(str(tiny_bert_classifier), acceptable_label="unacceptable")
    np.testing.assert_allclose(other.score_texts(TEXTS), 1 - p, atol=1e-6)


def test_grammar_score_does_not_depend_on_the_batch(tiny_bert_classifier: Path) -> None:
    """Even with a tokenizer saved to pad on the left (BERT's positions count from token 0)."""
    scorer = SequenceClassifierScorer.load(str(tiny_bert_classifier))
    alone = np.array([scorer.score_texts([t])[0] for t in TEXTS])
    scorer.tokenizer.padding_side = "left"
    np.testing.assert_allclose(scorer.score_texts(TEXTS, batch_size=len(TEXTS)), alone, rtol=0, atol=1e-6)


@pytest.mark.parametrize(("labels", "given", "expected"), [
    ({0: "LABEL_0", 1: "LABEL_1"}, None, 1),              # generic two-label CoLA convention
    ({"0": "unacceptable", "1": "acceptable"}, None, 1),
    ({0: "Grammatical", 1: "Ungrammatical"}, None, 0),
    ({0: "a", 1: "b", 2: "c"}, "c", 2),
    ({0: "a", 1: "b", 2: "c"}, "1", 1),
])
def test_acceptable_index(labels: dict, given: str | None, expected: int) -> None:
    assert SequenceClassifierScorer.acceptable_index(labels, given) == expected


@pytest.mark.parametrize(("labels", "given"), [
    ({0: "a", 1: "b", 2: "c"}, None),
    ({0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"}, None),
    ({0: "a", 1: "b"}, "d"),
])
def test_acceptable_index_refuses_guessing(labels: dict, given: str | None) -> None:
    with pytest.raises(ValueError, match="acceptable_label"):
        SequenceClassifierScorer.acceptable_index(labels, given)


def test_grammar_unclear_labels_fail_at_load(tiny_bert_classifier: Path, tmp_path: Path) -> None:
    copy = tmp_path / "cls"
    shutil.copytree(tiny_bert_classifier, copy)
    cfg = json.loads((copy / "config.json").read_text(encoding="utf-8"))
    cfg["id2label"], cfg["label2id"] = {"0": "neg", "1": "pos2"}, {"neg": 0, "pos2": 1}
    (copy / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    with pytest.raises(ValueError, match=r"cannot tell which class means acceptable .*0: neg, 1: pos2"):
        SequenceClassifierScorer.load(str(copy))
    assert SequenceClassifierScorer.load(str(copy), acceptable_label="pos2").label_index == 1


def test_caption_length() -> None:
    scorer = CaptionLengthScorer.load(None)
    assert scorer.score_texts(["ab", "abcd", ""]).tolist() == [-2.0, -4.0, 0.0]
    with pytest.raises(ValueError, match="takes no checkpoint"):
        CaptionLengthScorer.load("gpt2")


def test_wrong_model_kind_and_offline_hub_id(tiny_clip: Path, tiny_gpt2: Path, tiny_bert_classifier: Path) -> None:
    with pytest.raises(ValueError, match="not a causal language model"):
        CausalLMScorer.load(str(tiny_clip))
    with pytest.raises(ValueError, match="not a causal language model: it lacks"):
        CausalLMScorer.load(str(tiny_bert_classifier))
    # A causal LM would load as a classifier with a random head: refused, naming a missing weight.
    with pytest.raises(ValueError, match=r"is not a trained sequence classifier: it lacks .*score"):
        SequenceClassifierScorer.load(str(tiny_gpt2), acceptable_label="0")
    with pytest.raises(ValueError, match="needs --checkpoint"):
        CausalLMScorer.load(None)
    # Offline (conftest sets HF_HUB_OFFLINE=1 and an empty hub cache): fails at once, says how.
    with pytest.raises(ValueError, match=r"'gpt2' is not in the local hub cache .*save_pretrained\(DIR\)"):
        CausalLMScorer.load("gpt2")
    with pytest.raises(ValueError, match="takes no options"):
        CausalLMScorer.load(str(tiny_gpt2), acceptable_label="x")


def test_fixture_writers_cli_and_determinism(tmp_path: Path) -> None:
    runner = CliRunner()
    for name, kind in (("blind-lm", "gpt2"), ("blind-grammar", "bert-classifier")):
        assert name in FIXTURES
        res = runner.invoke(app, ["fixtures", "model", name, "--out", str(tmp_path / name), "--seed", "3"])
        assert res.exit_code == 0, res.output
        marker = json.loads((tmp_path / name / FIXTURE_MARKER).read_text(encoding="utf-8"))
        assert marker["kind"] == kind and marker["seed"] == 3
        again = FIXTURES.get(name)(tmp_path / f"{name}-again", 3)
        assert (again / "model.safetensors").read_bytes() == (tmp_path / name / "model.safetensors").read_bytes()
    assert "clip" in FIXTURES  # the existing fixture stays


def test_extract_refuses_blind_models(one_error_line: Callable[..., str], synthetic_dir: Path, tmp_path: Path) -> None:
    res = CliRunner().invoke(app, [
        "extract", "--model", "caption-length", "--checkpoint", "", "--data-dir", str(synthetic_dir),
        "--out", str(tmp_path / "x.h5"), "--device", "cpu", "--quiet",
    ])
    one_error_line(res, "blind text-only baseline", "probe eval")


def test_lm_truncates_long_texts_quietly(tiny_gpt2: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scorer = CausalLMScorer.load(str(tiny_gpt2))
    long = " ".join(["red circle"] * 200)
    got = scorer.score_texts([long, long + " again"])
    assert np.isfinite(got).all() and got[0] == pytest.approx(got[1])  # same first 128 positions
    assert "longer than the specified maximum" not in capsys.readouterr().err
