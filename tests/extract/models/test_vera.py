"""SugarCrepe's blind baselines: Vera against a literal re-implementation of SugarCrepe's
``Vera.run`` (one statement at a time, the head built from the shared embedding), and the
grammar model's P(LABEL_1) against transformers' text-classification pipeline.

Tolerance: batched right-padded statements vs one at a time (T5's masked attention; other
summation orders): 1e-5 absolute on probabilities.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from vlprobe.extract.models.blind import GrammarScorer
from vlprobe.extract.models.vera import VeraScorer
from vlprobe.fixtures.text_models import (
    write_tiny_bert_classifier,
    write_tiny_cola_distilbert,
    write_tiny_vera,
)
from vlprobe.validation import InputError

TEXTS = ["a red circle left of a blue square", "two", "A cat sits on the mat, next to a big green star.",
         "there is an orange star above a small green triangle in the picture " * 12]


@pytest.fixture(scope="module")
def vera_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_vera(tmp_path_factory.mktemp("vera") / "vera", 0)


def sugarcrepe_vera_run(model: object, tokenizer: object, statement: str) -> float:
    """SugarCrepe's ``Vera.run``, written out (the head a Linear in the model's dtype)."""
    shared = model.shared.weight  # type: ignore[attr-defined]
    linear = torch.nn.Linear(shared.shape[1], 1, dtype=shared.dtype)
    linear.weight = torch.nn.Parameter(shared[32099, :].unsqueeze(0))
    linear.bias = torch.nn.Parameter(shared[32098, 0].unsqueeze(0))
    t = shared[32097, 0].item()
    # batch_encode_plus in the reference; transformers 5 has only the call, which it was an alias of
    ids = tokenizer([statement], return_tensors="pt", padding="longest",  # type: ignore[operator]
                    truncation="longest_first", max_length=128).input_ids
    with torch.no_grad():
        hidden = model(ids).last_hidden_state[0, -1, :]  # type: ignore[operator]
        return float((linear(hidden).squeeze(-1) / t).sigmoid())


def test_vera_matches_sugarcrepes_code(vera_dir: Path) -> None:
    """The float32 correction: batched, right-padded rows read at each row's last token."""
    scorer = VeraScorer.load(str(vera_dir), device="cpu", dtype="float32")
    got = scorer.score_texts(TEXTS, batch_size=3)
    want = [sugarcrepe_vera_run(scorer.model, scorer.tokenizer, t) for t in TEXTS]
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert len(set(np.round(got, 6))) == len(TEXTS)  # the fixture's scores do not saturate
    assert len(scorer.tokenizer(TEXTS[-1], truncation=True, max_length=128)["input_ids"]) == 128


def test_vera_in_bfloat16_as_sugarcrepe_ran_it(vera_dir: Path) -> None:
    """SugarCrepe's text_model_eval.py loads Vera with T5EncoderModel.from_pretrained(...,
    torch_dtype='auto'): bfloat16, the dtype liujch1998/vera's config.json names, and builds its
    head as a Linear of the model's dtype. The default (``dtype="auto"``: Vera's reference_dtype,
    bfloat16) reproduces it: every score a bfloat16 value, as the reference's, and
    equal to it: in 16 bits each statement is encoded alone without a mask and the head is one
    fused linear, the reference's operations in its order (batched rows or a separate bias add
    round differently and move scores by a bfloat16 step, breaking or making ties)."""
    from transformers import T5EncoderModel

    assert VeraScorer.reference_dtype == "bfloat16"
    scorer = VeraScorer.load(str(vera_dir), device="cpu")  # the default: as SugarCrepe loads it
    assert scorer.model.dtype == torch.bfloat16 and scorer.describe()["dtype"] == "bfloat16"
    got = scorer.score_texts(TEXTS[:3], batch_size=3)
    ref_model = T5EncoderModel.from_pretrained(str(vera_dir), dtype="auto").eval()
    assert ref_model.dtype == torch.bfloat16
    want = np.array([sugarcrepe_vera_run(ref_model, scorer.tokenizer, t) for t in TEXTS[:3]])
    np.testing.assert_array_equal(got, want)
    assert _bf16_values(got), got  # bfloat16 scores, as the reference's .item() of a bf16 tensor
    full = VeraScorer.load(str(vera_dir), device="cpu", dtype="float32").score_texts(TEXTS[:3])
    assert not _bf16_values(full), full  # float32: finer


def _bf16_values(values: np.ndarray) -> bool:
    """Whether every value is a bfloat16 value (unchanged by a round trip through bfloat16)."""
    return bool(np.array_equal(values, torch.tensor(values).to(torch.bfloat16).double().numpy()))


def test_probe_eval_vera_defaults_to_bfloat16_as_sugarcrepe(vera_dir: Path, tmp_path: Path) -> None:
    """``probe eval sugarcrepe --model vera`` runs Vera in bfloat16, as SugarCrepe's
    text_model_eval.py loads it (``torch_dtype='auto'``); the manifest, the run's name and the CSV's
    dtype column hold the resolved dtype, never ``auto``; ``--dtype float32`` is the named
    correction, a run of its own (``vera@dtype=float32``; here with ``bootstrap=0`` too)."""
    from typer.testing import CliRunner

    from vlprobe.cli import app
    from vlprobe.runs.score_files import read_item_scores

    data = tmp_path / "sugarcrepe"  # SugarCrepe's own file format: <subset>.json, key -> record
    data.mkdir()
    words = ["red", "blue", "green", "small", "big", "striped", "wooden", "round"]
    records = {str(k): {"filename": f"000000{k:06d}.jpg", "caption": f"a {a} cat on a {b} mat",
                        "negative_caption": f"a {b} cat on a {a} mat"}
               for k, (a, b) in enumerate(zip(words, words[1:] + words[:1], strict=True))}
    (data / "swap_att.json").write_text(json.dumps(records), encoding="utf-8")
    base = ["eval", "sugarcrepe", "--data-dir", str(data), "--subsets", "swap_att", "--model", "vera", "--checkpoint", str(vera_dir),
            "--device", "cpu", "--bootstrap", "0", "--quiet", "--out", str(tmp_path / "out")]
    folder = tmp_path / "out" / "sugarcrepe"
    runs = (([], "vera@bootstrap=0", "bfloat16"), (["--dtype", "float32"], "vera@dtype=float32,bootstrap=0", "float32"))
    for extra, run, dtype in runs:
        res = CliRunner().invoke(app, [*base, *extra])
        assert res.exit_code == 0, res.output
        recorded = json.loads((folder / "manifest.json").read_text())["runs"]
        assert run in recorded, sorted(recorded)
        recorded = recorded[run]
        assert recorded["config"]["dtype"] == dtype and recorded["model_info"]["dtype"] == dtype
        with (folder / f"{run}.csv").open(newline="") as fh:
            assert {row["dtype"] for row in csv.DictReader(fh)} == {dtype}
        values = read_item_scores(folder / f"{run}.scores.jsonl").score
        assert len(values) == 16 and _bf16_values(values) == (dtype == "bfloat16")


def test_vera_refusals(vera_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gpt = write_tiny_bert_classifier(tmp_path / "bert", 0)
    with pytest.raises(InputError, match=r"^checkpoint: .*'bert' model, expected Vera's 't5' encoder"):
        VeraScorer.load(str(gpt), device="cpu")
    with pytest.raises(InputError, match=r"takes no options"):
        VeraScorer.load(str(vera_dir), device="cpu", max_length=64)
    import huggingface_hub.constants as hc

    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(InputError, match=r"^checkpoint: 'liujch1998/vera' is not in the local hub cache"):
        VeraScorer.load(None, device="cpu")


def test_grammar_is_the_pipelines_p_label_1(tmp_path: Path) -> None:
    """SugarCrepe's GrammarModel: the pipeline's score if LABEL_1 won, else 1 - score."""
    from transformers import pipeline

    folder = write_tiny_cola_distilbert(tmp_path / "cola", 0)
    scorer = GrammarScorer.load(str(folder), device="cpu")
    assert scorer.model.config.id2label == {0: "LABEL_0", 1: "LABEL_1"} and scorer.label_index == 1
    pipe = pipeline("text-classification", model=str(folder), device="cpu")
    acceptable = scorer.model.config.id2label[scorer.label_index]
    want = [o["score"] if o["label"] == acceptable else 1 - o["score"] for o in pipe(TEXTS[:3])]
    np.testing.assert_allclose(scorer.score_texts(TEXTS[:3]), want, atol=1e-5)


def test_cli_eval_sugarcrepe_blind(vera_dir: Path, sugarcrepe_dir: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from vlprobe.cli import app

    res = CliRunner().invoke(app, [
        "eval", "sugarcrepe", "--data-dir", str(sugarcrepe_dir), "--subsets", "swap_att", "--limit", "6", "--model",
        "vera", "--checkpoint", str(vera_dir), "--device", "cpu", "--bootstrap", "0", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "swap_att" in res.stdout
