"""`probe run sugarcrepe-pp-tot`: the text-only task from a cache's pooled text embeddings. Planted
embeddings with ties against the authors' counting (evaluate_ulms.py: unit embeddings, dot
products, strict >), a tiny CLIP cache whose pooled states are the model's text features, and
refusals (another dataset's cache)."""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from vlprobe.cli import app
from vlprobe.data.benchmark_fixtures import write_benchmark_fixture
from vlprobe.experiments.sugarcrepe_pp_tot import tot_outcomes
from vlprobe.extract.cache.reader import ActivationCache


def authors_tot(embeds: torch.Tensor) -> int:
    """evaluate_ulms.py's TOT of one triplet (rows: sent1 = P1, sent2 = P2, reference = negative)."""
    unit_embeds = embeds / embeds.norm(dim=-1, keepdim=True)
    p1_ref = torch.dot(unit_embeds[0], unit_embeds[2]).item()
    p2_ref = torch.dot(unit_embeds[1], unit_embeds[2]).item()
    p1_p2 = torch.dot(unit_embeds[0], unit_embeds[1]).item()
    return int(p1_p2 > p2_ref and p1_p2 > p1_ref)


def test_planted_embeddings_with_ties() -> None:
    rng = np.random.default_rng(0)
    e = rng.integers(-1, 2, size=(300, 3, 2)).astype(np.float64)  # 2-d integer vectors: many exact ties
    e[np.linalg.norm(e, axis=-1) == 0] = [1.0, 0.0]
    e[:5, 1] = e[:5, 2]  # P2 = negative: cos(P1, P2) = cos(P1, neg), a tie, wrong
    ours = tot_outcomes(e[:, 0], e[:, 1], e[:, 2])
    theirs = [authors_tot(torch.tensor(t, dtype=torch.float64)) for t in e]
    assert ours.tolist() == [bool(x) for x in theirs]
    assert not ours[:5].any() and 0 < ours.mean() < 1


@pytest.fixture(scope="module")
def pp_cache(tmp_path_factory: pytest.TempPathFactory, tiny_clip: Path) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("scpp-tot")
    data = write_benchmark_fixture(root / "scpp", "sugarcrepe-pp", n_items=6, seed=8, image_size=16)
    result = CliRunner().invoke(app, [
        "extract", "--model", "clip", "--checkpoint", str(tiny_clip), "--dataset", "sugarcrepe-pp", "--data-dir",
        str(data), "--image-dir", str(data / "val2017"), "--out", str(root / "clip.h5"), "--device", "cpu", "--quiet"])
    assert result.exit_code == 0, result.output
    return data, root / "clip.h5"


def test_tot_from_a_clip_cache(pp_cache: tuple[Path, Path], tiny_clip: Path, tmp_path: Path) -> None:
    from transformers import CLIPModel, CLIPTokenizer

    _, cache = pp_cache
    result = CliRunner().invoke(app, ["run", "sugarcrepe-pp-tot", "--cache", str(cache), "--out", str(tmp_path),
                                      "--bootstrap", "20", "--quiet"])
    assert result.exit_code == 0, result.output
    with open(tmp_path / "sugarcrepe-pp-tot" / "clip@bootstrap=20.csv", encoding="utf-8", newline="") as fh:
        got = {r["subset"]: r for r in csv.DictReader(fh) if r["metric"] == "tot"}
    with ActivationCache(cache) as c:
        pooled = c.states("text", "pooled")
        texts = c.table("texts")
        stored = c.rows("text")["text"]
    by_id = {str(texts["id"][int(r)]): k for k, r in enumerate(stored)}
    # the pooled states are the model's text features, text_projection(pooler_output) (each caption alone,
    # as the authors encode them)
    model = CLIPModel.from_pretrained(tiny_clip).eval()
    tok = CLIPTokenizer.from_pretrained(tiny_clip)
    for tid, text in list(zip(texts["id"], texts["text"], strict=True))[:9]:
        with torch.no_grad():
            out = model.text_model(**tok([str(text)], return_tensors="pt"))
            feats = model.text_projection(out.pooler_output)[0].numpy()  # CLIP's text features
        np.testing.assert_allclose(pooled[by_id[str(tid)]], feats, rtol=1e-4, atol=1e-5)  # float32, other batch
    for subset, row in got.items():
        ids = sorted({str(t).rsplit("/", 1)[0] for t in texts["id"] if str(t).split("/")[1] == subset})
        counts = [authors_tot(torch.tensor(np.stack([pooled[by_id[f"{i}/c{k}"]] for k in range(3)]))) for i in ids]
        assert float(row["value"]) == pytest.approx(100 * np.mean(counts), abs=1e-9)
        assert row["n"] == "6" and "the paper's TOT" in row["note"]


def test_refusals(tmp_path: Path, tiny_clip: Path, one_error_line: Callable[..., str]) -> None:
    data = write_benchmark_fixture(tmp_path / "cs", "colorswap", n_items=1, image_size=16)
    runner = CliRunner()
    made = runner.invoke(app, ["extract", "--model", "clip", "--checkpoint", str(tiny_clip), "--dataset", "colorswap",
                               "--data-dir", str(data), "--out", str(tmp_path / "cs.h5"), "--device", "cpu", "--quiet"])
    assert made.exit_code == 0, made.output
    one_error_line(runner.invoke(app, ["run", "sugarcrepe-pp-tot", "--cache", str(tmp_path / "cs.h5"),
                                       "--out", str(tmp_path / "o")]), "cache", "holds dataset 'colorswap'",
                   "not sugarcrepe-pp")
