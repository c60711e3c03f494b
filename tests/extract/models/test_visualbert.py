"""VisualBERT adapter against transformers' own ``VisualBertForPreTraining`` forward on the same
tiny weights fed as the original pretraining code feeds them (regions with visual token type 0,
index 1 = match); the fixture in the hub repository's files and laid out as the hub cache holds
them; tokenizer default, refusals, the end-to-end command.

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
from vlprobe.fixtures.visualbert import VISUALBERT_HUB_FILES, write_tiny_visualbert
from vlprobe.validation import InputError

# The adapter contract (tests/extract/models/test_adapter_contract.py) checks this adapter with these facts.
CONTRACT = Case(
    "visualbert", "cross", "regions",
    {"text": ("pair", kinds("embed", ("joint", 2)), "token0"), "image": ("pair", kinds("embed", ("joint", 2)), "none")},
    {"text": ("text_embeddings", "text"), "image": ("image_embeddings", "image")},
    wrong="lxmert", feature_dim=2048, weights=("pytorch_model.bin",),
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
                               visual_token_type_ids=torch.zeros_like(vmask), output_hidden_states=True)
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


def _with_head(adapter: VisualBertAdapter, match_column: int) -> VisualBertAdapter:
    """The adapter whose sentence-image head says "match" loudly in ``match_column`` for every pair."""
    import copy

    out = copy.deepcopy(adapter)
    head = out.model.hf.cls.seq_relationship
    with torch.no_grad():
        head.weight.zero_()
        head.bias.copy_(torch.tensor([10.0, 0.0] if match_column == 0 else [0.0, 10.0]))
    return out


def test_column_1_is_match_as_the_original_trained_it(adapter: VisualBertAdapter) -> None:
    """uclanlp/visualbert's dataloaders/coco_dataset.py sets flag = True when the second caption
    comes from the same image, and dataloaders/bert_data_utils.py makes it the loss target
    is_random_next = int(is_next): label 1 = the matching caption (transformers' docstring says
    0, as BERT's next-sentence labels). A head whose column 1 says "match" scores ~1, one whose
    column 0 does ~0."""
    regions = random_region_batch(2, 4, [4, 3], seed=1, dim=2048)
    t_idx, i_idx = np.array([0, 1]), np.array([0, 1])
    assert MATCH_INDEX == 1
    for column, want in ((1, 1.0), (0, 0.0)):
        scored = _with_head(adapter, column)
        got = scored.encode_pairs(scored.prepare_texts(CAPTIONS[:2]), scored.prepare_images(regions), t_idx, i_idx,
                                  None, [])
        np.testing.assert_allclose(got.scores.numpy(), want, atol=1e-4)
        assert got.logits is not None and bool((got.logits[:, 1] > got.logits[:, 0]).all()) == (column == 1)


def test_regions_take_visual_token_type_0_as_the_original_feeds_them(adapter: VisualBertAdapter) -> None:
    """TrainVisualBERTObjective.forward (pytorch_pretrained_bert/modeling.py) sets
    visual_embeddings_type to zeros when the data gives none, and the COCO pretraining data gives
    none: regions are embedded with row 0 of visual_token_type_embeddings (transformers defaults
    to row 1). The region embedding is LayerNorm(projection + visual position 0 + that row)."""
    e = adapter.model.hf.visual_bert.embeddings
    feats = torch.from_numpy(random_region_batch(1, 3, [3], seed=2, dim=2048).features).float()
    with torch.no_grad():
        got = adapter.model.embed_image(feats)
        zero = torch.zeros(1, 3, dtype=torch.long)
        base = e.visual_projection(feats) + e.visual_position_embeddings(zero)
        want = e.LayerNorm(base + e.visual_token_type_embeddings(zero))
        other = e.LayerNorm(base + e.visual_token_type_embeddings(zero + 1))
    _close(got, want, "region embedding with visual token type 0")
    assert (got - other).abs().max() > 1e-2  # the fixture's two rows differ: the test tells them apart


def test_the_fixture_is_the_hub_repositorys_files(folder: Path) -> None:
    """config.json with the hub file's 21 keys (uclanlp/visualbert-vqa-coco-pre, written by
    transformers 4.7: pad 1, bos 0, eos 2, special_visual_initialize), the weights as
    pytorch_model.bin under the conversion's key names."""
    cfg = json.loads((folder / "config.json").read_text())
    assert sorted(cfg) == ["architectures", "attention_probs_dropout_prob", "bos_token_id", "bypass_transformer",
                           "eos_token_id", "hidden_act", "hidden_dropout_prob", "hidden_size", "initializer_range",
                           "intermediate_size", "layer_norm_eps", "max_position_embeddings", "model_type",
                           "num_attention_heads", "num_hidden_layers", "pad_token_id", "special_visual_initialize",
                           "transformers_version", "type_vocab_size", "visual_embedding_dim", "vocab_size"]
    assert (cfg["architectures"], cfg["visual_embedding_dim"], cfg["pad_token_id"]) == (["VisualBertForPreTraining"], 2048, 1)
    assert not (folder / "model.safetensors").exists() and (folder / "pytorch_model.bin").is_file()
    state = torch.load(folder / "pytorch_model.bin", weights_only=True)
    for key in ("visual_bert.embeddings.visual_token_type_embeddings.weight",
                "visual_bert.embeddings.visual_position_embeddings.weight", "visual_bert.embeddings.visual_projection.weight",
                "visual_bert.embeddings.position_ids", "cls.seq_relationship.weight", "cls.predictions.decoder.bias"):
        assert key in state, key


def test_loads_laid_out_as_the_hub_cache_holds_it(folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hub repository's two files (config.json, pytorch_model.bin) as huggingface_hub caches
    them, and bert-base-uncased's tokenizer repository beside it: ``--checkpoint
    uclanlp/visualbert-vqa-coco-pre`` offline with nothing else, the default tokenizer found,
    scores equal to the fixture folder's."""
    import huggingface_hub.constants as hc

    from vlprobe.fixtures.bert_uncased import BERT_UNCASED, write_bert_uncased_tokenizer
    from vlprobe.fixtures.hub_cache import lay_out_repo, repo_folder

    hub = tmp_path / "hub"
    files = tmp_path / "files"
    files.mkdir()
    for f in VISUALBERT_HUB_FILES:
        shutil.copy(folder / f, files / f)
    lay_out_repo(files, hub / repo_folder("uclanlp/visualbert-vqa-coco-pre"))
    write_bert_uncased_tokenizer(tmp_path / "tok")
    lay_out_repo(tmp_path / "tok", hub / repo_folder(BERT_UNCASED))
    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(hub))
    loaded = VisualBertAdapter.load("uclanlp/visualbert-vqa-coco-pre", device="cpu")
    assert loaded.tokenizer_source == BERT_UNCASED and loaded.checkpoint.fingerprint.startswith("hub:uclanlp/")
    regions = random_region_batch(2, 4, [4, 3], seed=1, dim=2048)
    here = VisualBertAdapter.load(str(folder), device="cpu")
    t_idx, i_idx = np.array([0, 1, 2]), np.array([0, 1, 1])
    a = loaded.encode_pairs(loaded.prepare_texts(CAPTIONS), loaded.prepare_images(regions), t_idx, i_idx, None, [])
    b = here.encode_pairs(here.prepare_texts(CAPTIONS), here.prepare_images(regions), t_idx, i_idx, None, [])
    _close(a.scores, b.scores, "hub-cache layout vs the fixture folder")


def test_tokenizer_default_and_refusals(folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub.constants as hc

    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(tmp_path / "hub"))
    bare = tmp_path / "bare"  # as the hub's uclanlp checkpoints: config and weights only
    bare.mkdir()
    for f in VISUALBERT_HUB_FILES:
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
