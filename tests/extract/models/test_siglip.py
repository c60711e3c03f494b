"""SigLIP: scores against ``SiglipModel.forward``; ``probe extract`` -> Winoground scores and recall
from the cache, checked against the model's own matrix (the contract suite covers the rest)."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from tests.extract.helpers import (
    assert_winoground_item_scores,
    recall_i2t_at_1,
    winoground_percentages,
)
from tests.extract.models.contract import Case, kinds
from vlprobe.cli import app
from vlprobe.data.winoground import load_winoground
from vlprobe.extract.cache.reader import ActivationCache
from vlprobe.extract.models.siglip import SiglipAdapter
from vlprobe.validation import InputError

# The adapter contract (tests/extract/models/test_adapter_contract.py) checks this adapter with these facts.
CONTRACT = Case(
    "siglip", "dual", "pixels",
    {"text": ("text", kinds("embed", ("self", 3)), "last"), "image": ("image", kinds("embed", ("self", 2)), "none")},
    {"text": ("text_model.embeddings", "text"), "image": ("vision_model.embeddings", "image")},
)


@pytest.fixture(scope="module")
def adapter(tiny_siglip: Path) -> SiglipAdapter:
    return SiglipAdapter.load(str(tiny_siglip), device="cpu")


def forward_matrix(adapter: SiglipAdapter, data_dir: Path) -> np.ndarray:
    """sigmoid(logits_per_image) of one plain ``SiglipModel`` forward over the dataset's images and
    captions, texts padded to max_length without an attention mask (as SigLIP was trained)."""
    ds = load_winoground(data_dir)
    images = [im.load() for im in ds.images()]
    texts = [t.text for t in ds.texts()]
    ids = adapter.tokenizer(texts, padding="max_length", max_length=64, truncation=True, return_tensors="pt")["input_ids"]
    pixels = adapter.processor(images=images, return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        out = adapter.model(input_ids=ids, pixel_values=pixels)
    return torch.sigmoid(out.logits_per_image).numpy()


def test_scores_are_the_models_sigmoid(adapter: SiglipAdapter, synthetic_dir: Path) -> None:
    ds = load_winoground(synthetic_dir)
    img = adapter.encode("image", [im.load() for im in ds.images()], [0]).pooled.numpy()
    txt = adapter.encode("text", [t.text for t in ds.texts()], [0]).pooled.numpy()
    got = SiglipAdapter.scores_from_pooled(img, txt, adapter.describe())
    # two computation paths (batched towers vs one forward): a tolerance
    np.testing.assert_allclose(got, forward_matrix(adapter, synthetic_dir), rtol=1e-4, atol=1e-7)
    info = adapter.describe()
    assert info["logit_scale"] == pytest.approx(10.0) and info["logit_bias"] == pytest.approx(-10.0)


def test_text_pooled_reads_the_last_padded_position(adapter: SiglipAdapter) -> None:
    out = adapter.encode("text", ["a red circle", "a blue square left of a green star"], [-1 % 4])
    assert out.hidden.shape[2] == 64  # padded to the model's positions
    assert out.cls_index.tolist() == [63, 63]
    assert out.mask.sum(dim=1).tolist() == [4, 9]  # the caption's tokens and EOS
    with torch.no_grad():
        h = adapter.model.text_model(input_ids=adapter.tokenizer(
            ["a red circle"], padding="max_length", max_length=64, return_tensors="pt")["input_ids"]).last_hidden_state
    torch.testing.assert_close(out.pooled[:1], adapter.model.text_model.head(h[:, -1]), atol=1e-5, rtol=1e-4)


def test_scores_need_the_learned_constants() -> None:
    with pytest.raises(ValueError, match="logit_scale and logit_bias"):
        SiglipAdapter.scores_from_pooled(np.ones((1, 4)), np.ones((2, 4)), {"logit_scale": 1.0})


def test_a_checkpoint_without_the_pooling_head_is_refused(tiny_siglip: Path, tmp_path: Path) -> None:
    import json
    import shutil

    copy = tmp_path / "headless"
    shutil.copytree(tiny_siglip, copy)
    cfg = json.loads((copy / "config.json").read_text())
    cfg["vision_config"]["vision_use_head"] = False
    (copy / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(InputError, match="attention-pooling head"):
        SiglipAdapter.load(str(copy))


def _csv_values(path: Path) -> dict[tuple[str, str], float]:
    with open(path, encoding="utf-8", newline="") as fh:
        return {(r["subset"], r["metric"]): float(r["value"]) for r in csv.DictReader(fh)}


def test_cli_extract_then_winoground_scores_and_recall(
    tiny_siglip: Path, synthetic_dir: Path, tmp_path: Path, adapter: SiglipAdapter,
) -> None:
    runner = CliRunner()
    cache = tmp_path / "siglip.h5"
    res = runner.invoke(app, ["extract", "--model", "siglip", "--checkpoint", str(tiny_siglip), "--data-dir",
                              str(synthetic_dir), "--out", str(cache), "--device", "cpu", "--quiet"])
    assert res.exit_code == 0, res.output
    want = forward_matrix(adapter, synthetic_dir)
    with ActivationCache(cache) as c:
        matrix, done = c.scores()
        assert c.score_kind == "match_probability" and done.all()
    np.testing.assert_allclose(matrix, want, rtol=1e-4, atol=1e-7)

    out = tmp_path / "results"
    for experiment in ("winoground-scores", "recall"):
        res = runner.invoke(app, ["run", experiment, "--cache", str(cache), "--out", str(out), "--bootstrap", "10"])
        assert res.exit_code == 0, res.output
    assert_winoground_item_scores(out / "winoground-scores" / "siglip@bootstrap=10.scores.jsonl", want)
    wino = _csv_values(out / "winoground-scores" / "siglip@bootstrap=10.csv")
    for metric, value in winoground_percentages(want).items():
        assert wino[("all", metric)] == pytest.approx(value), metric
    recall = _csv_values(out / "recall" / "siglip@bootstrap=10.csv")
    assert recall[("i2t", "recall@1")] == pytest.approx(recall_i2t_at_1(want))
