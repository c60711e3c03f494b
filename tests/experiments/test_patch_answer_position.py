"""What patching a generative model's answer position at its last layer recovers, as
docs/beyond-the-paper.md states it: everything when the score reads only that position's state
(``answer_tokens=first``: P(first answer token) is the head applied to it), not with LLaVA's default
``answer_tokens=all+eos`` (t2v_metrics' exp(mean log P) of ``Yes</s>``: the ``</s>`` term is read at
the next position, whose state attends to the caption itself and is not patched)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.docs_text import doc_page
from tests.extract.models import generative_checks as checks
from vlprobe.cli import app


def _recovered(csv_path: Path) -> float:
    with csv_path.open() as f:
        (row,) = [r for r in csv.DictReader(f) if r["subset"] == "all" and r["metric"] == "recovered"
                  and r["stream"] == "joint" and r["probe"] == "positions=cls"]
    return float(row["value"])


@pytest.mark.slow  # two patch runs of the tiny LLaVA on CPU
def test_the_answer_position_at_the_last_layer(tiny_llava: Path, synthetic_dir: Path, tmp_path: Path) -> None:
    folder = checks.sharpened(tiny_llava, tmp_path / "llava", 30.0)
    got = {}
    for answer_tokens in ("first", "all+eos"):
        out = tmp_path / answer_tokens
        res = CliRunner().invoke(app, [
            "run", "patch", "--model", "llava", "--checkpoint", str(folder), "--dataset", "winoground",
            "--data-dir", str(synthetic_dir), "--limit", "3", "--layers", "-1", "--streams", "joint",
            "--groups", "cls", "--model-option", f"answer_tokens={answer_tokens}", "--bootstrap", "10",
            "--device", "cpu", "--out", str(out), "--quiet",
        ])
        assert res.exit_code == 0, res.output
        (csv_path,) = (out / "patch").glob("llava@*.csv")
        got[answer_tokens] = _recovered(csv_path)
    # the head reads only the patched state: the donor's first-token probability, to float32 noise
    assert got["first"] == pytest.approx(1.0, abs=1e-4)
    # the </s> term moves too, by its own amount: the ratio is not 1 (measured here: 1.67; over- or
    # undershooting as the two terms' changes add up or cancel)
    assert abs(got["all+eos"] - 1.0) > 0.1, got
    text = " ".join(doc_page("beyond-the-paper.md").split())
    assert "answer_tokens=all+eos" in text and "recovers everything" in text
