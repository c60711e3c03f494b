"""VisualBERT adapter against transformers' own ``VisualBertForPreTraining`` forward on the same
tiny weights; tokenizer default, refusals, the end-to-end command.

Tolerance: the adapter embeds each caption and image once and concatenates (the embedding layer
norm acts per token), the oracle embeds the joint sequence; float32 sums in other orders:
1e-5 absolute / 1e-4 relative.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tests.extract.helpers import random_region_batch
from tests.extract.models.contract import Case, kinds
from vlprobe.extract.models.visualbert import MATCH_INDEX, VisualBertAdapter
from vlprobe.fixtures.visualbert import write_tiny_visualbert
from vlprobe.validation import InputError

# The adapter contract (tests/extract/models/test_adapter_contract.py) checks this adapter with these facts.
CONTRACT = Case(
    "visualbert", "cross", "regions",
    {"text": ("pair", kinds("embed", ("joint", 2)), "token0"), "image": ("pair", kinds("embed", ("joint", 2)), "none")},
    {"text": ("text_embeddings", "text"), "image": ("image_embeddings", "image")},
    wrong="lxmert", feature_dim=2048,
)

CAPTIONS = ["a red circle left of a blue square", "a big green star",
            "in the picture a small yellow diamond is above a big purple triangle"]


def _close(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    torch.testing.assert_close(a.float(), b.float(), atol=1e-5, rtol=1e-4, msg=lambda m: f"{what}: {m}")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_visualbert(tmp_path_factory.mktemp("vb") / "visualbert", 0)


@pytest.fixture(scope="module")
def adapter(folder: Path) -> VisualBertAdapter:
    return VisualBertAdapter.load(str(folder), device="cpu")


def test_matches_transformers_forward(adapter: VisualBertAdapter) -> None:
    regions = random_region_batch(3, 6, [6, 4, 2], seed=3, dim=2048)
    texts, images = adapter.prepare_texts(CAPTIONS), adapter.prepare_images(regions)
    t_idx, i_idx = np.array([0, 1, 2, 0, 2]), np.array([0, 0, 1, 2, 2])
    n = adapter.streams["text"].n_layers
    got = adapter.encode_pairs(texts, images, t_idx, i_idx, {"text": list(range(n)), "image": list(range(n))},
                               ["cls", "mean", "max"])
    ids, mask = texts.take(t_idx)
    feats = torch.from_numpy(regions.features[i_idx]).float()
    vmask = torch.from_numpy(regions.mask[i_idx]).long()
    with torch.no_grad():
        out = adapter.model.hf(input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids),
                               visual_embeds=feats, visual_attention_mask=vmask,
                               visual_token_type_ids=torch.ones_like(vmask), output_hidden_states=True)
    t = ids.shape[1]
    want_logits = out.seq_relationship_logits.float()
    _close(got.logits, want_logits[:, [1 - MATCH_INDEX, MATCH_INDEX]], "logits as (no match, match)")
    _close(got.scores, torch.softmax(want_logits, -1)[:, MATCH_INDEX], "match probability")
    _close(adapter.plain_pair_scores(texts, images, t_idx, i_idx), got.scores, "plain pass")
    hidden = out.hidden_states  # joint sequence, embeddings first
    assert len(hidden) == n
    for layer in range(n):
        h = hidden[layer]
        m = mask.bool()
        _close(got.states["text"]["cls"][:, layer], h[:, 0], f"text cls layer {layer}")
        text_mean = (h[:, :t] * m[..., None]).sum(1) / m.sum(1, keepdim=True)
        _close(got.states["text"]["mean"][:, layer], text_mean, f"text mean layer {layer}")
        v = vmask.bool()
        img_mean = (h[:, t:] * v[..., None]).sum(1) / v.sum(1, keepdim=True)
        _close(got.states["image"]["mean"][:, layer], img_mean, f"image mean layer {layer}")
        img_max = h[:, t:].masked_fill(~v[..., None], float("-inf")).amax(1)
        _close(got.states["image"]["max"][:, layer], img_max, f"image max layer {layer}")
    _close(got.pooled["text"], adapter.model.hf.visual_bert.pooler(hidden[-1]), "pooled [CLS]")


def test_match_index_is_documented_as_transformers_labels_it() -> None:
    """transformers' VisualBertForPreTraining: sentence_image_labels 0 = matching caption."""
    import inspect

    from transformers import VisualBertForPreTraining

    doc = inspect.getsource(VisualBertForPreTraining.forward)
    assert "0 indicates sequence B is a matching pair" in doc and MATCH_INDEX == 0


def test_tokenizer_default_and_refusals(folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub.constants as hc

    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(tmp_path / "hub"))
    bare = tmp_path / "bare"  # as the hub's uclanlp checkpoints: config and weights only
    bare.mkdir()
    for f in ("config.json", "model.safetensors"):
        shutil.copy(folder / f, bare / f)
    with pytest.raises(InputError, match=r"^tokenizer: .*bert-base-uncased.*--tokenizer DIR"):
        VisualBertAdapter.load(str(bare), device="cpu")
    loaded = VisualBertAdapter.load(str(bare), device="cpu", tokenizer=str(folder))
    assert loaded.tokenizer_source == str(folder)
    # a region file of another width
    with pytest.raises(InputError, match=r"^regions: VisualBERT expects features of shape \(N, R, 2048\)"):
        loaded.prepare_images(random_region_batch(1, 3, [3], dim=1024))
    # the VCR variant that bypasses the transformer for regions
    cfg = json.loads((bare / "config.json").read_text())
    (bare / "config.json").write_text(json.dumps({**cfg, "bypass_transformer": True}))
    with pytest.raises(InputError, match=r"^checkpoint: .*bypass_transformer"):
        VisualBertAdapter.load(str(bare), device="cpu", tokenizer=str(folder))


def test_cli_eval_valse(folder: Path, valse_dir: Path, tmp_path: Path, one_error_line: Any) -> None:
    """`probe fixtures model visualbert`, `probe fixtures regions`, `probe eval valse --model visualbert`."""
    from typer.testing import CliRunner

    from vlprobe.cli import app

    runner = CliRunner()
    regions = tmp_path / "valse-regions.h5"
    res = runner.invoke(app, ["fixtures", "regions", "--dataset", "valse", "--data-dir", str(valse_dir), "--out",
                              str(regions), "--subsets", "existence", "--limit", "4", "--boxes", "5"])
    assert res.exit_code == 0, res.output
    base = ["eval", "valse", "--data-dir", str(valse_dir), "--subsets", "existence", "--limit", "4",
            "--model", "visualbert", "--checkpoint", str(folder), "--device", "cpu", "--bootstrap", "0"]
    res = runner.invoke(app, [*base, "--regions", str(regions), "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    assert "acc_r" in res.stdout
    one_error_line(runner.invoke(app, [*base, "--out", str(tmp_path / "o2")]), "regions: visualbert reads precomputed")
