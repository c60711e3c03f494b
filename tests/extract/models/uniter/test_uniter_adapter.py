"""UNITER adapter: golden streams, batched pairs against one plain forward per pair, padding
invariance, config/tokenizer defaults and their errors."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.extract.helpers import random_region_arrays, random_region_batch, region_batch
from tests.extract.models.contract import Case, kinds
from vlprobe.extract.models.pooling import pool_states
from vlprobe.extract.models.uniter.adapter import UniterAdapter
from vlprobe.extract.regions.boxes import boxes_to_7d
from vlprobe.registry import MODELS

# The adapter contract (tests/extract/models/test_adapter_contract.py) checks this adapter with these facts.
CONTRACT = Case(
    "uniter", "cross", "regions",
    {"text": ("pair", kinds("embed", ("joint", 2)), "token0"), "image": ("pair", kinds("embed", ("joint", 2)), "none")},
    {"text": ("uniter.embeddings", "text"), "image": ("uniter.img_embeddings", "image")},
    checkpoint="uniter-base.pt", wrong="lxmert", feature_dim=2048, weights=("uniter-base.pt",),
)

CAPTIONS = [
    "A red circle left of a blue square",
    "a big green star",
    "In the picture, a small yellow diamond is above a big purple triangle",
]
POOLINGS = ["cls", "mean", "max"]


@pytest.fixture(scope="module")
def adapter(tiny_uniter: Path) -> UniterAdapter:
    return UniterAdapter.load(str(tiny_uniter / "uniter-base.pt"))


def test_registered_lazily() -> None:
    assert MODELS.get("uniter") is UniterAdapter
    assert UniterAdapter.load_options == ("model_config", "tokenizer")


def test_golden_streams(adapter: UniterAdapter) -> None:
    text, image = adapter.streams["text"], adapter.streams["image"]
    assert list(adapter.streams) == ["text", "image"]
    assert text.layer_kinds == image.layer_kinds == ("embed", "joint", "joint")  # the tiny model: 2 blocks
    assert (text.modality, image.modality) == ("pair", "pair")
    assert (text.cls_rule, image.cls_rule) == ("token0", "none")
    assert text.poolings == ("cls", "mean", "max", "pooled") and image.poolings == ("mean", "max")


def test_base_config_has_13_layers(tiny_uniter: Path, tmp_path: Path) -> None:
    """uniter-base's shape: 12 blocks -> layers 0..12 (random weights, never saved)."""
    from vlprobe.extract.models.uniter.model import UniterModel

    base = {"vocab_size": 28996, "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
            "intermediate_size": 3072}
    model = UniterModel(base, _materialize=False)
    spec = UniterAdapter(model, None, None, torch.device("cpu"), torch.float32).streams  # type: ignore[arg-type]
    assert spec["text"].n_layers == spec["image"].n_layers == 13
    assert spec["text"].layer_kinds == ("embed",) + ("joint",) * 12


def test_batched_pairs_equal_one_forward_per_pair(adapter: UniterAdapter) -> None:
    texts = adapter.prepare_texts(CAPTIONS)
    images = adapter.prepare_images(random_region_batch(2, 6, [6, 3]))
    t_idx, i_idx = np.array([0, 1, 2, 0, 1, 2, 2]), np.array([0, 0, 0, 1, 1, 1, 0])
    layers = {"text": [0, 1, 2], "image": [0, 1, 2]}
    out = adapter.encode_pairs(texts, images, t_idx, i_idx, layers, POOLINGS)
    for j in range(len(t_idx)):
        ref = adapter.full_forward(texts, images, t_idx[j : j + 1], i_idx[j : j + 1])
        torch.testing.assert_close(out.scores[j : j + 1], ref.match_prob, rtol=0, atol=1e-6)
        torch.testing.assert_close(out.logits[j : j + 1], ref.itm_logits, rtol=0, atol=1e-5)  # two paths
        torch.testing.assert_close(out.pooled["text"][j : j + 1], ref.pooled, rtol=0, atol=1e-5)
        t = int(texts.lengths[t_idx[j]])
        text_h = torch.stack([ref.text_states(k) for k in range(3)], 1)
        img_h = torch.stack([ref.image_states(k) for k in range(3)], 1)
        tm = torch.ones(1, t, dtype=torch.bool)
        im = images.mask[i_idx[j : j + 1]]
        exp_text = pool_states(text_h, tm, torch.zeros(1, dtype=torch.long), POOLINGS)
        exp_img = pool_states(img_h, im, None, ["mean", "max"])
        for p, v in exp_text.items():
            torch.testing.assert_close(out.states["text"][p][j : j + 1], v, rtol=0, atol=2e-5, msg=f"text/{p}")
        for p, v in exp_img.items():
            torch.testing.assert_close(out.states["image"][p][j : j + 1], v, rtol=0, atol=2e-5, msg=f"image/{p}")
    assert set(out.states["image"]) == {"mean", "max"}


def test_pair_layers_are_checked(adapter: UniterAdapter) -> None:
    """Negative layers count from the last, order is kept; a missing stream is one ValueError."""
    texts = adapter.prepare_texts(CAPTIONS[:2])
    images = adapter.prepare_images(random_region_batch(1, 4, [4]))
    t_idx, i_idx = np.array([0, 1]), np.array([0, 0])
    full = adapter.encode_pairs(texts, images, t_idx, i_idx, {"text": [0, 1, 2], "image": [0, 1, 2]}, POOLINGS)
    out = adapter.encode_pairs(texts, images, t_idx, i_idx, {"text": [-1, 0], "image": [1]}, POOLINGS)
    torch.testing.assert_close(out.states["text"]["mean"], full.states["text"]["mean"][:, [2, 0]])
    with pytest.raises(ValueError, match=r"layers.*image"):
        adapter.encode_pairs(texts, images, t_idx, i_idx, {"text": [0]}, POOLINGS)
    with pytest.raises(ValueError, match=r"layers\[image\].*0\.\.2"):
        adapter.encode_pairs(texts, images, t_idx, i_idx, {"text": [0], "image": [3]}, POOLINGS)


def test_padding_invariance(adapter: UniterAdapter) -> None:
    feats, boxes, mask = random_region_arrays(1, 4, [4], seed=2)
    layers = {"text": [0, 1, 2], "image": [0, 2]}
    alone = adapter.prepare_texts([CAPTIONS[1]])
    padded = adapter.prepare_texts([CAPTIONS[1], CAPTIONS[2]])
    images = adapter.prepare_images(region_batch(feats, boxes, mask))
    a = adapter.encode_pairs(alone, images, np.array([0]), np.array([0]), layers, POOLINGS)
    b = adapter.encode_pairs(padded, images, np.array([0, 1]), np.array([0, 0]), layers, POOLINGS)
    rng = np.random.default_rng(4)
    feats_p = np.concatenate([feats, rng.random((1, 3, 2048), dtype=np.float32)], axis=1)
    boxes_p = np.concatenate([boxes, np.full((1, 3, 4), 0.25, np.float32)], axis=1)
    mask_p = np.concatenate([mask, np.zeros((1, 3), bool)], axis=1)
    c = adapter.encode_pairs(alone, adapter.prepare_images(region_batch(feats_p, boxes_p, mask_p)), np.array([0]), np.array([0]), layers, POOLINGS)
    for other in (b, c):
        torch.testing.assert_close(other.scores[:1], a.scores, rtol=0, atol=1e-6)
        for stream in ("text", "image"):
            for p, v in a.states[stream].items():
                torch.testing.assert_close(other.states[stream][p][:1], v, rtol=0, atol=1e-5, msg=f"{stream}/{p}")


def test_pos7_of_the_boxes(adapter: UniterAdapter) -> None:
    feats, boxes, mask = random_region_arrays(1, 3, [2])
    images = adapter.prepare_images(region_batch(feats, boxes, mask))
    np.testing.assert_allclose(images.pos7[0, :2].numpy(), boxes_to_7d(boxes[0, :2]), rtol=0, atol=1e-7)
    assert float(images.pos7[0, 2].abs().sum()) == 0.0


def test_inputs_are_fingerprinted(adapter: UniterAdapter, tiny_uniter: Path) -> None:
    fp = adapter.input_fingerprints()
    assert fp["config"].startswith("sha256:") and fp["tokenizer"].startswith("sha256:")
    assert adapter.checkpoint.fingerprint.startswith("sha256:")
    assert adapter.tokenizer_source == str(tiny_uniter / "tokenizer")
    assert adapter.describe()["score"] == "softmax(itm_output(pooled))[:, 1]"


def test_config_and_tokenizer_defaults_and_errors(tiny_uniter: Path, tmp_path: Path) -> None:
    lone = tmp_path / "lone"
    lone.mkdir()
    shutil.copy(tiny_uniter / "uniter-base.pt", lone / "uniter-base.pt")
    with pytest.raises(ValueError, match=r"model_config: UNITER needs its config JSON.*--model-config"):
        UniterAdapter.load(str(lone / "uniter-base.pt"))
    shutil.copy(tiny_uniter / "uniter-base.json", lone / "uniter-base.json")  # found by its stem
    with pytest.raises(ValueError, match=r"tokenizer: 'bert-base-cased' is not in the local hub cache.*--tokenizer DIR"):
        UniterAdapter.load(str(lone / "uniter-base.pt"))
    a = UniterAdapter.load(str(lone / "uniter-base.pt"), tokenizer=str(tiny_uniter / "tokenizer"))
    assert a.input_fingerprints()["config"].startswith("sha256:")
    with pytest.raises(ValueError, match="is not a file"):
        UniterAdapter.load(str(tiny_uniter))
    with pytest.raises(ValueError, match=r"model_config: 'nope.json' is not a file"):
        UniterAdapter.load(str(tiny_uniter / "uniter-base.pt"), model_config="nope.json")
    from transformers import BertTokenizer

    big = tmp_path / "big-tokenizer"
    BertTokenizer(vocab={f"w{i}": i for i in range(5000)} | {"[UNK]": 5000}, unk_token="[UNK]").save_pretrained(big)
    with pytest.raises(ValueError, match="vocab_size"):
        UniterAdapter.load(str(tiny_uniter / "uniter-base.pt"), tokenizer=str(big))


def test_scores_only_and_early_layers_match_the_whole_pass(adapter: UniterAdapter) -> None:
    """Without the last layer's states, the last block runs at [CLS] only: same scores and states."""
    texts = adapter.prepare_texts(CAPTIONS)
    images = adapter.prepare_images(random_region_batch(2, 5, [5, 2]))
    t_idx, i_idx = np.array([0, 1, 2, 2]), np.array([0, 1, 0, 1])
    whole = adapter.encode_pairs(texts, images, t_idx, i_idx, {"text": [0, 1, 2], "image": [0, 1, 2]}, POOLINGS)
    scores_only = adapter.encode_pairs(texts, images, t_idx, i_idx, None, POOLINGS)
    early = adapter.encode_pairs(texts, images, t_idx, i_idx, {"text": [0, 1], "image": [1]}, POOLINGS)
    for out in (scores_only, early):
        torch.testing.assert_close(out.scores, whole.scores, rtol=0, atol=1e-6)
        torch.testing.assert_close(out.pooled["text"], whole.pooled["text"], rtol=0, atol=1e-6)
    assert scores_only.states == {}
    for p in POOLINGS:
        torch.testing.assert_close(early.states["text"][p], whole.states["text"][p][:, :2], rtol=0, atol=1e-6)
    torch.testing.assert_close(early.states["image"]["max"], whole.states["image"]["max"][:, [1]], rtol=0, atol=1e-6)
