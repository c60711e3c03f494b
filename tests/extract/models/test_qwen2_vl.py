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
    wrong="llava", weights=("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"),
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
    # 40x48 -> 56x84, 32x32 -> 56x56, 50x36 -> 84x56 pixels: 28-pixel multiples, at least 3136 pixels
    assert table.n_tokens.tolist() == [6, 4, 6]
    assert table.extra["image_grid_thw"].tolist() == [[1, 4, 6], [1, 4, 4], [1, 6, 4]]


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


# -- scores as t2v_metrics reports them ----------------------------------------------------------


@pytest.fixture(scope="module")
def sharp_qwen(tmp_path_factory: pytest.TempPathFactory, tiny_qwen2_vl: Path) -> Path:
    return checks.sharpened(tiny_qwen2_vl, tmp_path_factory.mktemp("sharp") / "qwen2-vl", 60.0)


def _generate_p_answer(adapter: Qwen2VLAdapter, caption: str, image: Image.Image) -> float:
    """P(first answer token) as t2v_metrics reads it (its ``models/vqascore_models/qwen2vl_model.py``:
    ``generate(max_new_tokens=1, do_sample=False, output_scores=True, return_dict_in_generate=True)``,
    the softmax of ``scores[0]``) from the model's own ``generate`` on the prompt."""
    import torch

    pixels = _pixels(adapter)(image)
    n = int(pixels["image_grid_thw"].prod()) // adapter.model.config.vision_config.spatial_merge_size ** 2
    ids, extra = checks.prompt_only(checks.reference_inputs(adapter, caption, image, n, lambda _im: pixels))
    with torch.no_grad():
        out = adapter.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **extra, max_new_tokens=1,
                                     do_sample=False, output_scores=True, return_dict_in_generate=True)
    return float(torch.softmax(out.scores[0][0].float(), dim=-1)[adapter._answer_ids[0]])


@pytest.mark.parametrize("version", ["3.0", "2.1"])
def test_default_p_yes_is_what_generate_reports(sharp_qwen: Path, version: str) -> None:
    """The default score is generate's P(Yes), its logits through the checkpoint's generation config
    (repetition_penalty 1.05, as Qwen2-VL-Instruct's); ``softmax=raw`` is the plain softmax, which
    differs from it by far more than float32 noise (version 2.1's question holds "Yes" itself)."""
    adapter = Qwen2VLAdapter.load(str(sharp_qwen), device="cpu", t2v_metrics=version)
    raw = Qwen2VLAdapter.load(str(sharp_qwen), device="cpu", t2v_metrics=version, softmax="raw")
    assert adapter.options["softmax"] == "t2v_metrics" and adapter.repetition_penalty == 1.05
    pics = checks.images(3)
    pairs = [(0, 0), (1, 0), (2, 2), (1, 1)]
    got, _ = checks.adapter_scores(adapter, pairs, pics)
    plain, _ = checks.adapter_scores(raw, pairs, pics)
    want = np.asarray([_generate_p_answer(adapter, checks.CAPTIONS[t], pics[i]) for t, i in pairs])
    # log-probabilities of two float32 paths (a padded batch; generate on one sequence): 1e-4
    np.testing.assert_allclose(np.log(got), np.log(want), atol=1e-4, rtol=0)
    assert np.abs(np.log(plain) - np.log(want)).max() > 0.05  # the penalty moves P(Yes) by 5% and more


def test_the_versions_questions_and_the_manifest(tiny_qwen2_vl: Path) -> None:
    """t2v_metrics' Qwen2-VL question per version (its ``qwen2vl_model.py`` at the PyPI release 3.0,
    git c4c68fa (2.1) and 74c7208 (3.1)); the version is a recorded load option."""
    expect = {"3.0": 'Does this image show "a dog"?',
              "2.1": 'Does this image show "a dog"? Answer the question with Yes or No',
              "3.1": 'Does this figure show "a dog"? Please answer Yes or No.'}
    for version, question in expect.items():
        adapter = Qwen2VLAdapter.load(str(tiny_qwen2_vl), device="cpu", t2v_metrics=version)
        assert question in adapter.render("a dog")[0]
        assert adapter.model_options()["t2v_metrics"] == version
    assert Qwen2VLAdapter.check_options()["t2v_metrics"] == "3.0"
    own = Qwen2VLAdapter.check_options(question="Is it {}?", t2v_metrics="2.1")
    assert own["question"] == "Is it {}?" and own["t2v_metrics"] == "2.1"
    with pytest.raises(InputError, match="t2v_metrics") as err:
        Qwen2VLAdapter.check_options(t2v_metrics="2.9")
    assert "\n" not in str(err.value)


def test_describe_records_the_pixel_bounds_applied(adapter: Qwen2VLAdapter) -> None:
    """transformers 5 keeps Qwen2-VL's min_pixels/max_pixels in the processor's ``size``
    (shortest_edge/longest_edge), not as attributes: the cache records the bounds applied."""
    info = adapter.describe()
    assert (info["min_pixels"], info["max_pixels"]) == (3136, 12845056)
    assert "repetition_penalty=1.05" in info["softmax_over"]


def test_other_greedy_processors_are_refused(tiny_qwen2_vl: Path, tmp_path: Path) -> None:
    import json
    import shutil

    folder = tmp_path / "ngram"
    shutil.copytree(tiny_qwen2_vl, folder)
    gen = json.loads((folder / "generation_config.json").read_text())
    (folder / "generation_config.json").write_text(json.dumps({**gen, "no_repeat_ngram_size": 3}))
    with pytest.raises(InputError, match="no_repeat_ngram_size=3") as err:
        Qwen2VLAdapter.load(str(folder), device="cpu")
    assert "\n" not in str(err.value)
    assert Qwen2VLAdapter.load(str(folder), device="cpu", softmax="raw").repetition_penalty == 1.05


def test_rope_index_is_called_by_keyword(adapter: Qwen2VLAdapter, monkeypatch: pytest.MonkeyPatch) -> None:
    """``get_rope_index``'s parameters moved within transformers 5 (``mm_token_type_ids`` came in
    second place): positions through a version without it equal those through today's."""
    import inspect

    texts = adapter.prepare_texts(checks.CAPTIONS)
    table = adapter.prepare_images(checks.images(3))
    batch = adapter._batch(texts, table, np.array([0, 1, 2]), np.array([0, 1, 2]))
    today = adapter._position_ids(batch, table, adapter.device)
    real = adapter.model.model.get_rope_index
    assert "mm_token_type_ids" in inspect.signature(real).parameters

    def older(input_ids: Any = None, image_grid_thw: Any = None, video_grid_thw: Any = None,
              attention_mask: Any = None) -> Any:
        return real(input_ids=input_ids, mm_token_type_ids=(input_ids == adapter.image_token_id).int(),
                    image_grid_thw=image_grid_thw, video_grid_thw=video_grid_thw, attention_mask=attention_mask)

    monkeypatch.setattr(adapter.model.model, "get_rope_index", older)
    assert today is not None and (adapter._position_ids(batch, table, adapter.device) == today).all()
