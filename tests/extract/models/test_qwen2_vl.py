"""Qwen2-VL: VQAScore and the caption log-probability against the model's own forward and logits
(tolerances in ``generative_checks``), with images of different token counts in one batch, the
positions, the defaults (the contract suite covers streams, layers, batching, float16 and
loading)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from tests.extract.models import generative_checks as checks
from tests.extract.models.contract import Case, kinds
from vlprobe.extract.models.qwen2_vl import Qwen2VLAdapter
from vlprobe.validation import InputError

# The adapter contract (tests/extract/models/test_adapter_contract.py) checks this adapter with these facts.
CONTRACT = Case(
    "qwen2-vl", "cross", "pixels",
    {"caption": ("pair", kinds("embed", ("joint", 3)), "last"), "image": ("pair", kinds("embed", ("joint", 3)), "none"),
     "joint": ("pair", kinds("embed", ("joint", 3)), "answer")},
    {"caption": ("model.language_model.embed_tokens", "caption"),
     "image": ("model.visual.merger", "image_features")},
    wrong="llava",
)


@pytest.fixture(scope="module")
def adapter(tiny_qwen2_vl: Path) -> Qwen2VLAdapter:
    return Qwen2VLAdapter.load(str(tiny_qwen2_vl), device="cpu")


def _pixels(adapter: Qwen2VLAdapter) -> Any:
    def pixels(image: Image.Image) -> dict[str, Any]:
        got = adapter.processor(images=[image], return_tensors="pt")
        return {"pixel_values": got["pixel_values"], "image_grid_thw": got["image_grid_thw"]}
    return pixels


def test_defaults_are_t2v_metrics_qwen2_vl_prompt(adapter: Qwen2VLAdapter) -> None:
    prompt, span = adapter.render("a dog")
    assert prompt == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
        "<|vision_start|><|image_pad|><|vision_end|>Does this image show \"a dog\"?<|im_end|>\n<|im_start|>assistant\n"
    )
    assert span is not None and prompt[span[0]:span[1]] == "a dog"
    assert adapter.answer_tokens == "first" and adapter.tokenizer.decode(adapter._answer_ids) == "Yes"


def test_images_have_their_own_token_counts(adapter: Qwen2VLAdapter) -> None:
    table = adapter.prepare_images(checks.images(3))
    assert table.n_tokens.tolist() == [12, 16, 12]  # 40x48 -> 24x32, 32x32, 50x36 -> 32x24 pixels
    assert table.extra["image_grid_thw"].tolist() == [[1, 6, 8], [1, 8, 8], [1, 8, 6]]


def test_vqascore_is_p_yes_from_the_models_own_logits(adapter: Qwen2VLAdapter) -> None:
    got = checks.check_scores_match_reference(adapter, _pixels(adapter))
    assert ((got > 0) & (got < 1)).all()


@pytest.mark.parametrize("options", [
    {"answer_tokens": "all+eos"},
    {"score": "caption-logprob"},
    {"score": "caption-logprob", "caption_prompt": "Describe the image.", "system": "Be brief."},
])
def test_other_scores_equal_the_models_own_logits(tiny_qwen2_vl: Path, options: dict[str, str]) -> None:
    adapter = Qwen2VLAdapter.load(str(tiny_qwen2_vl), device="cpu", **options)
    got = checks.check_scores_match_reference(adapter, _pixels(adapter))
    if adapter.score == "caption-logprob":
        assert (got < 0).all()


def test_positions(adapter: Qwen2VLAdapter) -> None:
    checks.check_positions(adapter)


def test_rope_positions_of_a_padded_batch_equal_each_pair_alone(adapter: Qwen2VLAdapter) -> None:
    texts = adapter.prepare_texts(checks.CAPTIONS)
    table = adapter.prepare_images(checks.images(3))
    t, i = np.array([0, 1, 2]), np.array([0, 1, 2])
    batch = adapter._batch(texts, table, t, i)
    together = adapter._position_ids(batch, table, adapter.device)
    assert together is not None
    for r in range(3):
        alone = adapter._position_ids(adapter._batch(texts, table, t[r:r + 1], i[r:r + 1]), table, adapter.device)
        assert alone is not None
        n = int(batch.positions[r, 0])
        assert (together[:, r, :n] == alone[:, 0, :n]).all()


def test_llava_only_options_are_refused(tiny_qwen2_vl: Path) -> None:
    with pytest.raises(InputError, match="image_pad: qwen2-vl does not take the load option"):
        Qwen2VLAdapter.load(str(tiny_qwen2_vl), device="cpu", image_pad="none")
