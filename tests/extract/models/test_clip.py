"""CLIPAdapter on the tiny CLIP fixture: streams, states against the model's own modules."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from tests.extract.models.contract import Case, kinds
from vlprobe.extract.models.base import DualEncoder, StreamSpec
from vlprobe.extract.models.clip import CLIPAdapter
from vlprobe.fixtures.clip import write_tiny_clip

# The adapter contract (tests/extract/models/test_adapter_contract.py) checks this adapter with these facts.
CONTRACT = Case(
    "clip", "dual", "pixels",
    {"text": ("text", kinds("embed", ("self", 3)), "eos"), "image": ("image", kinds("embed", ("self", 2)), "patch0")},
    {"text": ("text_model.embeddings", "text"), "image": ("vision_model.pre_layrnorm", "image")},
    wrong="siglip",
)

os.environ.setdefault("HF_HUB_OFFLINE", "1")

TEXTS = [
    "a red circle left of a blue square",
    "a cat",
    "there is an orange star above a small green triangle in the picture",
]


@pytest.fixture(scope="module")
def clip_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_clip(tmp_path_factory.mktemp("clip") / "tiny-clip", seed=0)


@pytest.fixture(scope="module")
def adapter(clip_dir: Path) -> CLIPAdapter:
    return CLIPAdapter.load(str(clip_dir))


@pytest.fixture(scope="module")
def images() -> list[Image.Image]:
    rng = np.random.default_rng(0)
    sizes = [(32, 32), (48, 40), (37, 61)]
    return [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for w, h in sizes]


def tokenize(adapter: CLIPAdapter, texts: list[str]) -> dict[str, torch.Tensor]:
    return dict(adapter.tokenizer(texts, padding=True, return_tensors="pt"))


def test_load_records_checkpoint(adapter: CLIPAdapter, clip_dir: Path) -> None:
    assert adapter.checkpoint.path == clip_dir.resolve()
    assert adapter.checkpoint.fingerprint.startswith("sha256:")
    assert adapter.device == torch.device("cpu")
    assert adapter.dtype == torch.float32
    assert not adapter.model.training
    assert adapter.name == "clip" and isinstance(adapter, DualEncoder) and adapter.score_kind == "cosine"
    assert adapter.image_input == "pixels"
    facts = adapter.describe()
    assert facts["model_class"] == "CLIPModel"
    assert facts["projection_dim"] == 16
    assert facts["eos_token_id"] == 2  # the hub config's legacy value: pool at the highest id (the tokenizer's EOS)
    assert facts["text_max_length"] == 77


def test_streams_golden(adapter: CLIPAdapter) -> None:
    assert adapter.streams == {
        "text": StreamSpec(
            name="text", modality="text", layer_kinds=("embed", "self", "self", "self"),
            hidden_size=32, cls_rule="eos", pooled_size=16,
        ),
        "image": StreamSpec(
            name="image", modality="image", layer_kinds=("embed", "self", "self"),
            hidden_size=32, cls_rule="patch0", pooled_size=16,
        ),
    }
    assert list(adapter.streams) == ["text", "image"]
    assert adapter.streams["text"].n_layers == 4
    assert adapter.streams["image"].n_layers == 3
    assert adapter.streams["text"].poolings == ("cls", "mean", "max", "pooled")
    assert adapter.streams["image"].poolings == ("cls", "mean", "max", "pooled")


def test_stream_spec_poolings_without_cls_or_pooled() -> None:
    spec = StreamSpec("vision", "image", ("embed", "rel"), 8, "none", None)
    assert spec.poolings == ("mean", "max")


def test_encode_text_shapes(adapter: CLIPAdapter) -> None:
    batch = adapter.encode("text", TEXTS, [0, 2, 3])
    tok = tokenize(adapter, TEXTS)
    b, t = tok["input_ids"].shape
    assert batch.hidden.shape == (b, 3, t, 32)
    assert batch.hidden.dtype == torch.float32
    assert torch.equal(batch.mask, tok["attention_mask"])
    assert batch.cls_index is not None and batch.cls_index.shape == (b,)
    assert batch.pooled is not None and batch.pooled.shape == (b, 16)


def test_text_layers_follow_the_request(adapter: CLIPAdapter) -> None:
    all_layers = adapter.encode("text", TEXTS, [0, 1, 2, 3]).hidden
    picked = adapter.encode("text", TEXTS, [3, 1]).hidden
    torch.testing.assert_close(picked[:, 0], all_layers[:, 3])
    torch.testing.assert_close(picked[:, 1], all_layers[:, 1])


def test_text_layer0_is_the_embedding_output(adapter: CLIPAdapter) -> None:
    batch = adapter.encode("text", TEXTS, [0])
    ids = tokenize(adapter, TEXTS)["input_ids"]
    with torch.inference_mode():
        emb = adapter.model.text_model.embeddings(input_ids=ids)
    # The embedding output through the adapter's path vs the module alone: a tolerance, since the
    # adapter may batch (and so round) differently.
    torch.testing.assert_close(batch.hidden[:, 0], emb, rtol=0, atol=1e-6)


def test_eos_index_is_the_first_eos_and_the_last_valid_token(adapter: CLIPAdapter) -> None:
    tok = tokenize(adapter, TEXTS)
    ids, mask = tok["input_ids"], tok["attention_mask"]
    assert adapter.tokenizer.padding_side == "right"
    assert adapter.tokenizer.pad_token_id == adapter.tokenizer.eos_token_id  # CLIP pads with EOS
    batch = adapter.encode("text", TEXTS, [0])
    eos = adapter.tokenizer.eos_token_id
    first_eos = torch.tensor([row.tolist().index(eos) for row in ids])
    assert torch.equal(batch.cls_index, first_eos)
    assert torch.equal(batch.cls_index, mask.sum(-1) - 1)
    assert len(set(mask.sum(-1).tolist())) > 1  # the batch really is padded


def test_long_text_is_truncated_with_eos_last(adapter: CLIPAdapter) -> None:
    batch = adapter.encode("text", ["red circle " * 60, "a cat"], [0])
    assert batch.hidden.shape[2] == adapter.max_length == 77
    assert batch.cls_index.tolist() == [76, int(batch.mask[1].sum()) - 1]
    assert batch.mask[0].all()


def test_legacy_eos_rule_uses_argmax(adapter: CLIPAdapter) -> None:
    ids = torch.tensor([[5, 9, 3, 9, 3], [3, 1, 2, 0, 0]])
    assert torch.equal(adapter_with_eos(adapter, 3).eos_index(ids), torch.tensor([2, 0]))
    # eos_token_id == 2 (old OpenAI hub configs): the highest id marks EOS, first occurrence
    assert torch.equal(adapter_with_eos(adapter, 2).eos_index(ids), torch.tensor([1, 0]))


def adapter_with_eos(adapter: CLIPAdapter, eos: int) -> CLIPAdapter:
    other = copy.copy(adapter)
    other.eos_token_id = eos
    return other


def test_text_cls_through_final_layer_norm_is_pooler_output(adapter: CLIPAdapter) -> None:
    batch = adapter.encode("text", TEXTS, [3])
    tok = tokenize(adapter, TEXTS)
    with torch.inference_mode():
        out = adapter.model.text_model(**tok)
        last = batch.hidden[:, 0]
        cls = last[torch.arange(len(TEXTS)), batch.cls_index]
        mine = adapter.model.text_model.final_layer_norm(cls)
    torch.testing.assert_close(mine, out.pooler_output, rtol=1e-5, atol=1e-6)
    # the raw last layer is *before* final_layer_norm
    assert not torch.allclose(last, out.last_hidden_state)


def test_text_pooled_is_get_text_features(adapter: CLIPAdapter) -> None:
    batch = adapter.encode("text", TEXTS, [0])
    with torch.inference_mode():
        feats = adapter.model.get_text_features(**tokenize(adapter, TEXTS))
    feats = getattr(feats, "pooler_output", feats)  # transformers 5: an output object
    assert feats.shape == (len(TEXTS), 16)
    torch.testing.assert_close(batch.pooled, feats, rtol=1e-5, atol=1e-6)


def test_text_states_do_not_depend_on_the_rest_of_the_batch(adapter: CLIPAdapter) -> None:
    layers = [0, 1, 2, 3]
    together = adapter.encode("text", TEXTS, layers)
    for i, text in enumerate(TEXTS):
        alone = adapter.encode("text", [text], layers)
        n = int(alone.mask.sum())
        assert int(together.mask[i].sum()) == n
        torch.testing.assert_close(
            together.hidden[i, :, :n], alone.hidden[0, :, :n], rtol=1e-5, atol=1e-5
        )
        torch.testing.assert_close(together.pooled[i], alone.pooled[0], rtol=1e-5, atol=1e-5)
        assert int(together.cls_index[i]) == int(alone.cls_index[0])


def test_a_left_padding_tokenizer_gives_the_same_states(adapter: CLIPAdapter) -> None:
    """CLIP's positions count from token 0 and its padding is EOS: texts are padded on the right
    whatever the tokenizer was saved with."""
    right = adapter.encode("text", TEXTS, [0, 3])
    side = adapter.tokenizer.padding_side
    adapter.tokenizer.padding_side = "left"
    try:
        left = adapter.encode("text", TEXTS, [0, 3])
    finally:
        adapter.tokenizer.padding_side = side
    torch.testing.assert_close(left.hidden, right.hidden)
    torch.testing.assert_close(left.pooled, right.pooled)
    assert torch.equal(left.cls_index, right.cls_index)


def test_image_stream(adapter: CLIPAdapter, images: list[Image.Image]) -> None:
    batch = adapter.encode("image", images, [0, 1, 2])
    n_tokens = (32 // 8) ** 2 + 1
    assert batch.hidden.shape == (3, 3, n_tokens, 32)
    assert torch.equal(batch.mask, torch.ones(3, n_tokens, dtype=batch.mask.dtype))
    assert torch.equal(batch.cls_index, torch.zeros(3, dtype=torch.long))
    pixels = adapter.processor(images=images, return_tensors="pt")["pixel_values"]
    vm = adapter.model.vision_model
    with torch.inference_mode():
        layer0 = vm.pre_layrnorm(vm.embeddings(pixels))
        feats = adapter.model.get_image_features(pixel_values=pixels)
        out = vm(pixel_values=pixels)
    feats = getattr(feats, "pooler_output", feats)
    torch.testing.assert_close(batch.hidden[:, 0], layer0, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(batch.hidden[:, 2], out.last_hidden_state, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(batch.pooled, feats, rtol=1e-5, atol=1e-6)


def test_image_states_do_not_depend_on_the_rest_of_the_batch(
    adapter: CLIPAdapter, images: list[Image.Image]
) -> None:
    together = adapter.encode("image", images, [0, 2])
    alone = adapter.encode("image", images[1:2], [0, 2])
    torch.testing.assert_close(together.hidden[1], alone.hidden[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(together.pooled[1], alone.pooled[0], rtol=1e-5, atol=1e-5)


def test_unknown_stream(adapter: CLIPAdapter) -> None:
    with pytest.raises(ValueError, match=r"^stream: CLIP has streams text and image, got 'vision'"):
        adapter.encode("vision", [], [0])


def test_scores_from_pooled_is_cosine(adapter: CLIPAdapter, images: list[Image.Image]) -> None:
    img = adapter.encode("image", images, [0]).pooled.numpy()
    txt = adapter.encode("text", TEXTS[:2], [0]).pooled.numpy()
    scores = CLIPAdapter.scores_from_pooled(img, txt)
    assert scores.shape == (3, 2) and scores.dtype == np.float32
    want = torch.nn.functional.cosine_similarity(
        torch.from_numpy(img)[:, None, :], torch.from_numpy(txt)[None, :, :], dim=-1
    )
    np.testing.assert_allclose(scores, want.numpy(), rtol=1e-5, atol=1e-6)
    # scale-invariant and the logits CLIP itself computes, divided by its logit scale
    np.testing.assert_allclose(CLIPAdapter.scores_from_pooled(img * 7.0, txt), scores, atol=1e-6)
    with torch.inference_mode():
        tok = tokenize(adapter, TEXTS[:2])
        pixels = adapter.processor(images=images, return_tensors="pt")["pixel_values"]
        logits = adapter.model(**tok, pixel_values=pixels).logits_per_image
    scale = adapter.model.logit_scale.exp().item()
    np.testing.assert_allclose(scores, logits.numpy() / scale, rtol=1e-5, atol=1e-5)


def test_scores_from_pooled_small_example() -> None:
    img = np.array([[1.0, 0.0], [1.0, 1.0]])
    txt = np.array([[2.0, 0.0], [0.0, 3.0], [-1.0, 0.0]])
    s = 1 / np.sqrt(2)
    np.testing.assert_allclose(
        CLIPAdapter.scores_from_pooled(img, txt), [[1, 0, -1], [s, s, -s]], atol=1e-7
    )


def test_float16_load(clip_dir: Path, images: list[Image.Image], adapter: CLIPAdapter) -> None:
    half = CLIPAdapter.load(str(clip_dir), dtype="float16")
    assert half.dtype == torch.float16
    text = half.encode("text", TEXTS, [0, 3])
    image = half.encode("image", images, [0, 2])
    for batch in (text, image):
        assert batch.hidden.dtype == torch.float16
        assert batch.pooled.dtype == torch.float16
        assert torch.isfinite(batch.hidden).all()
    full = adapter.encode("text", TEXTS, [0, 3])
    torch.testing.assert_close(text.hidden.float(), full.hidden, rtol=1e-2, atol=1e-2)


# -- load errors ---------------------------------------------------------------------------------


def test_load_refuses_a_non_clip_config(tmp_path: Path) -> None:
    from transformers import BertConfig

    BertConfig(
        vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=16,
    ).save_pretrained(tmp_path / "bert")
    with pytest.raises(ValueError, match=r"^checkpoint: .*bert.* is a 'bert' model, expected 'clip'"):
        CLIPAdapter.load(str(tmp_path / "bert"))


def test_load_refuses_a_directory_without_config(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("nothing here", encoding="utf-8")
    with pytest.raises(ValueError, match=r"^checkpoint: .* has no readable config.json"):
        CLIPAdapter.load(str(tmp_path / "empty"))


def test_load_refuses_a_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="is not a directory"):
        CLIPAdapter.load(str(tmp_path / "nope"))


@pytest.mark.parametrize("device", ["gpu", "tpu", "meta", "", "cuda x"])
def test_load_bad_device(clip_dir: Path, device: str) -> None:
    with pytest.raises(ValueError, match=r"^device must be cpu, cuda, cuda:N or auto"):
        CLIPAdapter.load(str(clip_dir), device=device)


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "float64", ""])
def test_load_bad_dtype(clip_dir: Path, dtype: str) -> None:
    with pytest.raises(ValueError, match=r"^dtype must be one of float32, float16"):
        CLIPAdapter.load(str(clip_dir), dtype=dtype)


@pytest.mark.parametrize("device", ["cuda", "cuda:0", "CUDA:1"])
def test_load_cuda_without_cuda(
    clip_dir: Path, device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match=r"torch sees no CUDA device here"):
        CLIPAdapter.load(str(clip_dir), device=device)


def test_load_auto_device_on_cpu(clip_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert CLIPAdapter.load(str(clip_dir), device="auto").device == torch.device("cpu")


def test_a_config_that_does_not_fit_its_weights_is_one_line(clip_dir: Path, tmp_path: Path, synthetic_dir: Path,
                                                            one_error_line: object) -> None:
    """text_config.hidden_size 64 over weights of width 32: one line naming the
    first weight that differs and the config field of the size, exit 2 (before: a 40-line
    traceback from transformers' loader)."""
    import json
    import shutil

    from typer.testing import CliRunner

    from vlprobe.cli import app
    from vlprobe.validation import InputError

    bad = tmp_path / "bad-clip"
    shutil.copytree(clip_dir, bad)
    config = json.loads((bad / "config.json").read_text())
    config["text_config"]["hidden_size"] = 64
    (bad / "config.json").write_text(json.dumps(config))
    with pytest.raises(InputError) as err:
        CLIPAdapter.load(str(bad), device="cpu")
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"checkpoint: {str(bad)!r} does not fit its config (config.json): ")
    assert "text_model." in msg and "text_config.hidden_size" in msg, msg
    res = CliRunner().invoke(app, ["extract", "--model", "clip", "--checkpoint", str(bad), "--dataset", "winoground",
                                   "--data-dir", str(synthetic_dir), "--out", str(tmp_path / "c.h5"), "--device", "cpu"])
    one_error_line(res, "does not fit its config", "text_config.hidden_size")  # type: ignore[operator]
