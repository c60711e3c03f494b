"""LXMERT adapter: golden streams, the shared single-modality pass against a full forward, padding
invariance, the match index, loading errors, the tiny fixture."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.extract.helpers import random_region_arrays, random_region_batch, region_batch
from tests.extract.models.contract import Case, kinds
from vlprobe.extract.models.base import CrossEncoder
from vlprobe.extract.models.lxmert import MATCH_INDEX, LxmertAdapter
from vlprobe.extract.models.pooling import pool_states
from vlprobe.fixtures.lxmert import write_tiny_lxmert
from vlprobe.fixtures.staging import FIXTURE_MARKER
from vlprobe.registry import FIXTURES, MODELS

# The adapter contract (tests/extract/models/test_adapter_contract.py) checks this adapter with these facts.
CONTRACT = Case(
    "lxmert", "cross", "regions",
    {"lang": ("pair", kinds("embed", ("lang", 9), ("cross", 5)), "token0"),
     "vision": ("pair", kinds("embed", ("rel", 5), ("cross", 5)), "none")},
    {"lang": ("lxmert.embeddings", "text"), "vision": ("lxmert.encoder.visn_fc", "image")},
    feature_dim=2048, weights=("pytorch_model.bin",),
)

CAPTIONS = [
    "a red circle left of a blue square",
    "a big green star",
    "in the picture, a small yellow diamond is above a big purple triangle",
    "the blue square is right of the red circle",
]
ALL = {"lang": list(range(15)), "vision": list(range(11))}
POOLINGS = ["cls", "mean", "max"]


@pytest.fixture(scope="module")
def adapter(tiny_lxmert: Path) -> LxmertAdapter:
    return LxmertAdapter.load(str(tiny_lxmert))


def _reference(adapter: LxmertAdapter, texts, images, t_idx, i_idx) -> tuple[torch.Tensor, dict]:
    """Scores and pooled states from one plain ``model(...)`` call, pooled by the shared code."""
    scores, lang, vision, lmask, vmask = adapter.full_forward(texts, images, t_idx, i_idx)
    b = len(t_idx)
    states = {
        "lang": pool_states(torch.stack(lang, 1), lmask, torch.zeros(b, dtype=torch.long), POOLINGS),
        "vision": pool_states(torch.stack(vision, 1), vmask, None, ["mean", "max"]),
    }
    return scores, states


def test_registered_lazily() -> None:
    assert "lxmert" in MODELS
    assert MODELS.get("lxmert") is LxmertAdapter
    assert FIXTURES.get("lxmert") is write_tiny_lxmert


def test_golden_streams(adapter: LxmertAdapter) -> None:
    lang, vision = adapter.streams["lang"], adapter.streams["vision"]
    assert list(adapter.streams) == ["lang", "vision"]
    assert lang.layer_kinds == ("embed",) + ("lang",) * 9 + ("cross",) * 5
    assert vision.layer_kinds == ("embed",) + ("rel",) * 5 + ("cross",) * 5
    assert (lang.n_layers, vision.n_layers) == (15, 11)
    assert (lang.modality, vision.modality) == ("pair", "pair")
    assert (lang.cls_rule, vision.cls_rule) == ("token0", "none")
    assert lang.poolings == ("cls", "mean", "max", "pooled")
    assert vision.poolings == ("mean", "max")
    assert (lang.hidden_size, lang.pooled_size, vision.pooled_size) == (32, 32, None)
    assert isinstance(adapter, CrossEncoder) and adapter.image_input == "regions"


def test_full_forward_has_the_documented_layers(adapter: LxmertAdapter) -> None:
    """transformers returns 14 + 10 states; the hooks add the embeddings in front."""
    texts = adapter.prepare_texts(CAPTIONS[:2])
    images = adapter.prepare_images(random_region_batch(1, 5, [5]))
    scores, lang, vision, _, _ = adapter.full_forward(texts, images, np.array([0, 1]), np.array([0, 0]))
    assert (len(lang), len(vision)) == (15, 11)
    with torch.inference_mode():
        ids = texts.input_ids[:2, : int(texts.lengths.max())]
        emb = adapter.model.lxmert.embeddings(ids, torch.zeros_like(ids))
    torch.testing.assert_close(lang[0], emb)
    assert scores.shape == (2,)


def test_shared_pass_equals_full_forward(adapter: LxmertAdapter) -> None:
    """Language/relation layers once per caption/image, cross layers per pair == model(...)."""
    texts = adapter.prepare_texts(CAPTIONS)
    images = adapter.prepare_images(random_region_batch(3, 7, [7, 4, 2]))
    t_idx = np.array([0, 1, 2, 3, 0, 2, 1, 3, 3])
    i_idx = np.array([0, 0, 0, 0, 1, 1, 2, 2, 1])
    out = adapter.encode_pairs(texts, images, t_idx, i_idx, ALL, POOLINGS)
    scores, ref = _reference(adapter, texts, images, t_idx, i_idx)
    torch.testing.assert_close(out.scores, scores, rtol=0, atol=1e-6)
    assert set(out.states) == {"lang", "vision"}
    assert set(out.states["vision"]) == {"mean", "max"}
    for stream in ("lang", "vision"):
        for p, expected in ref[stream].items():
            assert out.states[stream][p].shape == expected.shape
            torch.testing.assert_close(out.states[stream][p], expected, rtol=0, atol=2e-5, msg=f"{stream}/{p}")
    with torch.inference_mode():
        t = int(texts.lengths.max())
        full = adapter.model.lxmert(
            input_ids=texts.input_ids[t_idx, :t], attention_mask=texts.attention_mask[t_idx, :t],
            visual_feats=images.features[i_idx], visual_pos=images.boxes[i_idx],
            visual_attention_mask=images.mask[i_idx].float(),
        )
    torch.testing.assert_close(out.pooled["lang"], full.pooled_output, rtol=0, atol=1e-6)


def test_layer_subsets_and_memo_reuse(adapter: LxmertAdapter) -> None:
    texts = adapter.prepare_texts(CAPTIONS)
    images = adapter.prepare_images(random_region_batch(2, 5, [5, 3]))
    t_idx, i_idx = np.array([0, 1, 2, 3]), np.array([0, 1, 1, 0])
    full = adapter.encode_pairs(texts, images, t_idx, i_idx, ALL, POOLINGS)
    some = {"lang": [0, 9, 10, 14], "vision": [5, 6]}
    part = adapter.encode_pairs(texts, images, t_idx, i_idx, some, ["mean"])
    for stream, layers in some.items():
        torch.testing.assert_close(part.states[stream]["mean"], full.states[stream]["mean"][:, layers], rtol=0, atol=1e-6)
    only_cross = adapter.encode_pairs(texts, images, t_idx, i_idx, {"lang": [12], "vision": [1]}, ["max"])
    torch.testing.assert_close(only_cross.states["lang"]["max"], full.states["lang"]["max"][:, [12]], rtol=0, atol=1e-6)
    torch.testing.assert_close(only_cross.states["vision"]["max"], full.states["vision"]["max"][:, [1]], rtol=0, atol=1e-6)
    # one pair at a time, through a memo that can hold almost nothing: same results
    small = LxmertAdapter(adapter.model, adapter.tokenizer, adapter.checkpoint, adapter.device, adapter.dtype, memo_capacity=1)
    texts2, images2 = small.prepare_texts(CAPTIONS), small.prepare_images(random_region_batch(2, 5, [5, 3]))
    for j in range(4):
        one = small.encode_pairs(texts2, images2, t_idx[j : j + 1], i_idx[j : j + 1], ALL, POOLINGS)
        torch.testing.assert_close(one.scores, full.scores[j : j + 1], rtol=0, atol=1e-6)
        torch.testing.assert_close(one.states["lang"]["cls"], full.states["lang"]["cls"][j : j + 1], rtol=0, atol=2e-5)
        assert len(texts2.memo) <= 2 and len(images2.memo) <= 2
    scores_only = adapter.encode_pairs(texts, images, t_idx, i_idx, None, POOLINGS)
    assert scores_only.states == {}
    torch.testing.assert_close(scores_only.scores, full.scores, rtol=0, atol=1e-6)


def test_layers_come_back_in_the_order_asked(adapter: LxmertAdapter) -> None:
    """encode_pairs is public: layers out of order or negative are honoured, not silently sorted."""
    texts = adapter.prepare_texts(CAPTIONS[:2])
    images = adapter.prepare_images(random_region_batch(2, 5, [5, 3]))
    t_idx, i_idx = np.array([0, 1]), np.array([1, 0])
    full = adapter.encode_pairs(texts, images, t_idx, i_idx, ALL, POOLINGS)
    asked = {"lang": [14, 0, 9, -5], "vision": [-1, 2]}
    want = {"lang": [14, 0, 9, 10], "vision": [10, 2]}
    out = adapter.encode_pairs(texts, images, t_idx, i_idx, asked, ["mean"])
    for stream, layers in want.items():
        torch.testing.assert_close(out.states[stream]["mean"], full.states[stream]["mean"][:, layers], rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match=r"layers\[lang\].*15"):
        adapter.encode_pairs(texts, images, t_idx, i_idx, {"lang": [15], "vision": [0]}, ["mean"])
    with pytest.raises(ValueError, match=r"layers.*vision"):
        adapter.encode_pairs(texts, images, t_idx, i_idx, {"lang": [0]}, ["mean"])


def test_a_left_padding_tokenizer_gives_the_same_states(adapter: LxmertAdapter) -> None:
    """The text tables trim padding off the right: a tokenizer saved with padding_side="left"
    must not shift captions (token 0 would no longer be [CLS])."""
    images = adapter.prepare_images(random_region_batch(1, 5, [5]))
    t_idx, i_idx = np.array([0, 1, 2]), np.array([0, 0, 0])
    right = adapter.encode_pairs(adapter.prepare_texts(CAPTIONS[:3]), images, t_idx, i_idx, ALL, POOLINGS)
    side = adapter.tokenizer.padding_side
    adapter.tokenizer.padding_side = "left"
    try:
        texts = adapter.prepare_texts(CAPTIONS[:3])
    finally:
        adapter.tokenizer.padding_side = side
    left = adapter.encode_pairs(texts, images, t_idx, i_idx, ALL, POOLINGS)
    torch.testing.assert_close(left.scores, right.scores, rtol=0, atol=1e-6)
    torch.testing.assert_close(left.states["lang"]["cls"], right.states["lang"]["cls"], rtol=0, atol=1e-6)


def test_padding_invariance_of_captions(adapter: LxmertAdapter) -> None:
    """A caption's states do not change when it is batched with a longer caption."""
    images = adapter.prepare_images(random_region_batch(1, 6, [6]))
    alone = adapter.prepare_texts([CAPTIONS[1]])
    padded = adapter.prepare_texts([CAPTIONS[1], CAPTIONS[2]])
    assert padded.input_ids.shape[1] > int(padded.lengths[0])
    a = adapter.encode_pairs(alone, images, np.array([0]), np.array([0]), ALL, POOLINGS)
    b = adapter.encode_pairs(padded, images, np.array([0, 1]), np.array([0, 0]), ALL, POOLINGS)
    torch.testing.assert_close(b.scores[:1], a.scores, rtol=0, atol=1e-6)
    for stream in ("lang", "vision"):
        for p, v in a.states[stream].items():
            torch.testing.assert_close(b.states[stream][p][:1], v, rtol=0, atol=1e-5, msg=f"{stream}/{p}")
    # the plain forward agrees, padding included
    s_alone, _ = _reference(adapter, alone, images, np.array([0]), np.array([0]))
    s_padded, _ = _reference(adapter, padded, images, np.array([0, 1]), np.array([0, 0]))
    torch.testing.assert_close(s_padded[:1], s_alone, rtol=0, atol=1e-6)


def test_padding_invariance_ofrandom_region_arrays(adapter: LxmertAdapter) -> None:
    """A region set's states do not change when padded with masked boxes."""
    texts = adapter.prepare_texts(CAPTIONS[:2])
    feats, boxes, mask = random_region_arrays(1, 5, [5], seed=3)
    pad = 4
    rng = np.random.default_rng(9)
    feats_p = np.concatenate([feats, rng.random((1, pad, 2048), dtype=np.float32)], axis=1)  # junk behind the mask
    boxes_p = np.concatenate([boxes, np.full((1, pad, 4), 0.5, np.float32)], axis=1)
    mask_p = np.concatenate([mask, np.zeros((1, pad), bool)], axis=1)
    a = adapter.encode_pairs(texts, adapter.prepare_images(region_batch(feats, boxes, mask)), np.array([0, 1]), np.array([0, 0]), ALL, POOLINGS)
    b = adapter.encode_pairs(texts, adapter.prepare_images(region_batch(feats_p, boxes_p, mask_p)), np.array([0, 1]), np.array([0, 0]), ALL, POOLINGS)
    torch.testing.assert_close(b.scores, a.scores, rtol=0, atol=1e-6)
    for stream in ("lang", "vision"):
        for p, v in a.states[stream].items():
            torch.testing.assert_close(b.states[stream][p], v, rtol=0, atol=1e-5, msg=f"{stream}/{p}")


def test_score_is_softmax_of_cross_relationship_score_at_index_1(adapter: LxmertAdapter) -> None:
    assert MATCH_INDEX == 1
    texts = adapter.prepare_texts(CAPTIONS[:2])
    images = adapter.prepare_images(random_region_batch(1, 4, [4]))
    out = adapter.encode_pairs(texts, images, np.array([0, 1]), np.array([0, 0]), None, [])
    t = int(texts.lengths.max())
    with torch.inference_mode():
        logits = adapter.model(
            input_ids=texts.input_ids[:, :t], attention_mask=texts.attention_mask[:, :t],
            visual_feats=images.features[[0, 0]], visual_pos=images.boxes[[0, 0]],
        ).cross_relationship_score
    expected = torch.exp(logits[:, 1]) / torch.exp(logits).sum(dim=1)
    torch.testing.assert_close(out.scores, expected, rtol=0, atol=1e-6)
    # The raw logits come out too (VALSE's code compares them): the full model's, two paths.
    torch.testing.assert_close(out.logits, logits, rtol=0, atol=1e-5)
    # steer the head so that index 1 clearly wins: the score follows
    head = adapter.model.cls.seq_relationship
    saved = head.bias.detach().clone()
    try:
        with torch.no_grad():
            head.bias.copy_(torch.tensor([-5.0, 5.0]))
        high = adapter.encode_pairs(texts, images, np.array([0, 1]), np.array([0, 0]), None, []).scores
    finally:
        with torch.no_grad():
            head.bias.copy_(saved)
    assert bool((high > 0.99).all())


def test_prepare_images_validates(adapter: LxmertAdapter) -> None:
    feats, boxes, mask = random_region_arrays(2, 3, [3, 3])
    with pytest.raises(ValueError, match=r"regions: LXMERT expects features of shape \(N, R, 2048\)"):
        adapter.prepare_images(region_batch(feats[..., :100], boxes, mask))
    with pytest.raises(ValueError, match="boxes must have shape"):
        adapter.prepare_images(region_batch(feats, boxes[..., :2], mask))
    mask[1] = False
    with pytest.raises(ValueError, match="at least one box"):
        adapter.prepare_images(region_batch(feats, boxes, mask))


def test_load_refuses_other_models_and_offline_hub_ids(tiny_clip: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"is a 'clip' model, expected 'lxmert'"):
        LxmertAdapter.load(str(tiny_clip))
    with pytest.raises(ValueError, match=r"not in the local hub cache.*--checkpoint DIR"):
        LxmertAdapter.load("unc-nlp/lxmert-base-uncased")
    with pytest.raises(ValueError, match="not a directory"):
        LxmertAdapter.load(str(tmp_path / "nothing" / "here"))


def test_load_refuses_a_checkpoint_without_the_match_head(tiny_lxmert: Path, tmp_path: Path) -> None:
    """An LxmertModel checkpoint (no pretraining heads) cannot give match scores."""
    from transformers import AutoTokenizer, LxmertModel

    bare = tmp_path / "bare"
    LxmertModel.from_pretrained(tiny_lxmert).save_pretrained(bare)
    AutoTokenizer.from_pretrained(tiny_lxmert).save_pretrained(bare)
    with pytest.raises(ValueError, match=r"lacks .* weights .*cls\.seq_relationship"):
        LxmertAdapter.load(str(bare))


def test_fixture_is_deterministic_and_marked(tiny_lxmert: Path, tmp_path: Path) -> None:
    again = write_tiny_lxmert(tmp_path / "again", seed=0)
    assert (again / "pytorch_model.bin").read_bytes() == (tiny_lxmert / "pytorch_model.bin").read_bytes()
    assert json.loads((again / FIXTURE_MARKER).read_text())["kind"] == "lxmert"
    config = json.loads((again / "config.json").read_text())
    assert config["visual_feat_dim"] == 2048 and config["architectures"] == ["LxmertModel"]  # as the release
    assert (config["l_layers"], config["r_layers"], config["x_layers"]) == (9, 5, 5)
    adapter = LxmertAdapter.load(str(again))
    ids = adapter.prepare_texts(["a red circle is left of a big blue square"]).input_ids[0].tolist()
    assert adapter.tokenizer.unk_token_id not in ids
    with pytest.raises(ValueError, match="tiny-lxmert fixture"):
        write_tiny_lxmert(_occupied_dir(tmp_path))


def _occupied_dir(tmp_path: Path) -> Path:
    d = tmp_path / "occupied"
    d.mkdir()
    (d / "notes.txt").write_text("keep")
    return d
