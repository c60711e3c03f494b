"""LLaVA: VQAScore (both answer modes) and the caption log-probability against the model's own
forward and logits (tolerances in ``generative_checks``), the positions, the image padding, the
load options' input checks (the contract suite covers streams, layers, batching, float16 and
loading)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from tests.extract.models import generative_checks as checks
from tests.extract.models.contract import Case, kinds
from vlprobe.extract.models.llava import (
    T2V_LLAVA_QUESTION,
    T2V_LLAVA_SYSTEM,
    LlavaAdapter,
    pad_to_square,
)
from vlprobe.validation import InputError

# The adapter contract (tests/extract/models/test_adapter_contract.py) checks this adapter with these facts.
CONTRACT = Case(
    "llava", "cross", "pixels",
    {"caption": ("pair", kinds("embed", ("joint", 3)), "last"), "image": ("pair", kinds("embed", ("joint", 3)), "none"),
     "joint": ("pair", kinds("embed", ("joint", 3)), "answer")},
    {"caption": ("model.language_model.embed_tokens", "caption"),
     "image": ("model.multi_modal_projector", "image_features")},
    weights=("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"),  # the release's shards
)


@pytest.fixture(scope="module")
def adapter(tiny_llava: Path) -> LlavaAdapter:
    return LlavaAdapter.load(str(tiny_llava), device="cpu")


def _pixels(adapter: LlavaAdapter) -> Any:
    def pixels(image: Image.Image) -> dict[str, Any]:
        if adapter.options["image_pad"] == "square":
            image = pad_to_square(image, adapter.processor.image_mean)
        return {"pixel_values": adapter.processor(images=[image], return_tensors="pt")["pixel_values"]}
    return pixels


def test_defaults_are_t2v_metrics_llava_prompt(adapter: LlavaAdapter) -> None:
    prompt, span = adapter.render("a dog")
    assert prompt == (
        "A chat between a curious user and an artificial intelligence assistant. The assistant gives helpful, "
        "detailed, and polite answers to the user's questions. USER: <image>\nDoes this figure show \"a dog\"? "
        "Please answer yes or no. ASSISTANT:"
    )
    assert span is not None and prompt[span[0]:span[1]] == "a dog"
    assert adapter.model_options()["answer_tokens"] == "all+eos" and adapter.score_kind == "vqascore"
    # the scored tokens: "▁Yes" then </s>, as t2v_metrics' labels over "Yes</s>"
    assert adapter.tokenizer.convert_ids_to_tokens(adapter._answer_ids) == ["\u2581Yes", "</s>"]


def test_vqascore_all_eos_equals_the_models_own_logits(adapter: LlavaAdapter) -> None:
    got = checks.check_scores_match_reference(adapter, _pixels(adapter))
    assert ((got > 0) & (got < 1)).all()


@pytest.mark.parametrize("options", [
    {"answer_tokens": "first"},
    {"score": "caption-logprob"},
    {"score": "caption-logprob", "caption_prompt": "Describe the image.", "system": ""},
    {"answer_tokens": "first", "image_pad": "none", "question": "Is it {}?", "answer": "No"},
])
def test_other_scores_equal_the_models_own_logits(tiny_llava: Path, options: dict[str, str]) -> None:
    adapter = LlavaAdapter.load(str(tiny_llava), device="cpu", **options)
    got = checks.check_scores_match_reference(adapter, _pixels(adapter))
    if adapter.score == "caption-logprob":
        assert adapter.score_kind == "mean_caption_logprob" and (got < 0).all()


def test_first_token_score_is_p_yes_from_the_next_token_distribution(tiny_llava: Path) -> None:
    adapter = LlavaAdapter.load(str(tiny_llava), device="cpu", answer_tokens="first")
    assert adapter.tokenizer.convert_ids_to_tokens(adapter._answer_ids) == ["\u2581Yes"]


def test_positions(adapter: LlavaAdapter) -> None:
    checks.check_positions(adapter)


def test_pad_to_square_centres_the_image_on_the_mean_colour() -> None:
    image = Image.new("RGB", (4, 2), (255, 0, 0))
    out = pad_to_square(image, (0.5, 0.25, 1.0))
    assert out.size == (4, 4)
    px = np.asarray(out)
    assert (px[0] == (127, 63, 255)).all() and (px[3] == (127, 63, 255)).all()  # int(x * 255), truncated
    assert (px[1:3] == (255, 0, 0)).all()
    assert pad_to_square(Image.new("RGB", (3, 3)), (0, 0, 0)).size == (3, 3)


def test_image_pad_changes_the_features_of_a_non_square_image(tiny_llava: Path, adapter: LlavaAdapter) -> None:
    plain = LlavaAdapter.load(str(tiny_llava), device="cpu", image_pad="none")
    wide, square = checks.images(3)[0], checks.images(2)[1]
    a, b = adapter.prepare_images([wide, square]), plain.prepare_images([wide, square])
    assert not torch.allclose(a.features[0], b.features[0])
    torch.testing.assert_close(a.features[1], b.features[1])  # a square image is not padded


@pytest.mark.parametrize(("options", "needle"), [
    ({"question": "Does it show the caption?"}, "question must be a template with exactly one {}"),
    ({"question": "{} or {}"}, "question must be a template with exactly one {}"),
    ({"answer_tokens": "all"}, "answer_tokens"),
    ({"score": "itm"}, "score"),
    ({"image_pad": "edge"}, "image_pad"),
    ({"answer": "  "}, "answer must be a non-empty text"),
    ({"score_head": "itm"}, "score_head: llava does not take the load option"),
    ({"device_map": "everywhere"}, "device_map must be one of auto"),
])
def test_bad_load_options_are_refused_in_one_line(tiny_llava: Path, options: dict[str, str], needle: str) -> None:
    with pytest.raises(InputError) as err:
        LlavaAdapter.load(str(tiny_llava), device="cpu", **options)
    msg = str(err.value)
    assert "\n" not in msg and needle in msg, msg


def test_device_map_without_accelerate_says_how_to_install_it(tiny_llava: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "accelerate" else real(name, *a))
    with pytest.raises(InputError) as err:
        LlavaAdapter.load(str(tiny_llava), device="cpu", device_map="auto")
    msg = str(err.value)
    assert "\n" not in msg and "accelerate" in msg and "pip install" in msg, msg


def test_a_checkpoint_without_a_chat_template_is_refused(tiny_llava: Path, tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    shutil.copytree(tiny_llava, bare)
    (bare / "chat_template.json").unlink()
    with pytest.raises(InputError) as err:
        LlavaAdapter.load(str(bare), device="cpu")
    assert "no chat template" in str(err.value)


def test_the_template_is_read_from_each_of_its_files(tiny_llava: Path, tmp_path: Path, adapter: LlavaAdapter) -> None:
    folder = tmp_path / "jinja"
    shutil.copytree(tiny_llava, folder)
    template = json.loads((folder / "chat_template.json").read_text())["chat_template"]
    (folder / "chat_template.json").unlink()
    (folder / "chat_template.jinja").write_text(template)
    assert LlavaAdapter.load(str(folder), device="cpu").render("a dog") == adapter.render("a dog")


def test_empty_caption_is_refused(adapter: LlavaAdapter) -> None:
    with pytest.raises(InputError, match="texts: a caption must be a non-empty string"):
        adapter.prepare_texts(["a dog", " "])


# -- scores and tokens as t2v_metrics' LLaVA-1.5 (the original model and code) ---------------------


def _original_ids(folder: Path, prompt: str, image_index: int) -> list[int]:
    """The token ids LLaVA's ``tokenizer_image_token`` (``llava/mm_utils.py``, vendored by
    t2v_metrics) makes of a prompt, written here from what it does: the prompt is cut at each
    ``<image>``, each piece tokenised alone by the slow SentencePiece tokenizer (``tokenizer.model``;
    BOS first, the dummy ``▁`` prefix before its text, ``</s>`` a special token), the first piece's
    BOS kept and the others' dropped, the image index put between."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(folder / "tokenizer.model"))

    def piece(text: str) -> list[int]:
        ids = [1]
        for k, part in enumerate(text.split("</s>")):
            ids += ([2] if k else []) + (sp.encode(part) if part else [])
        return ids

    first, *rest = prompt.split("<image>")
    out = piece(first)
    for chunk in rest:
        out += [image_index, *piece(chunk)[1:]]
    return out


@pytest.mark.parametrize("caption", [*checks.CAPTIONS, 'a "quoted" word', "café au lait", "UPPER case, 3 dots..."])
def test_the_joint_sequence_has_the_original_models_tokens(adapter: LlavaAdapter, tiny_llava: Path, caption: str) -> None:
    """t2v_metrics' prompt (``llava_model.py``: system message, `` USER: <image>\\n``, the question,
    `` ASSISTANT: `` then ``Yes</s>``) tokenised as the original LLaVA code does it: the text after
    ``<image>`` starts with ``▁`` (its piece gets SentencePiece's dummy prefix). The release's
    ``tokenizer.json`` normalizer gives the same (transformers 5 loads ``llava`` tokenizers with
    ``TokenizersBackend``, which keeps it)."""
    question = T2V_LLAVA_QUESTION.format(caption)
    prompt = f"{T2V_LLAVA_SYSTEM} USER: <image>\n{question} ASSISTANT: Yes</s>"
    want = _original_ids(tiny_llava, prompt, adapter.image_token_id)
    got = adapter.prepare_texts([caption]).sequences[0].tolist()
    assert got == want
    after = adapter.tokenizer.convert_ids_to_tokens(got[got.index(adapter.image_token_id) + 1:][:2])
    assert after == ["\u2581", "<0x0A>"]


@pytest.fixture(scope="module")
def raw(tiny_llava: Path) -> LlavaAdapter:
    return LlavaAdapter.load(str(tiny_llava), device="cpu", softmax="raw")


def test_the_default_softmax_runs_over_the_original_vocabulary(adapter: LlavaAdapter, raw: LlavaAdapter) -> None:
    """t2v_metrics scores LLaVA-1.5 with the original model, whose head has the text vocabulary's
    rows only; the llava-hf head has the rows the conversion added (``<image>``, ``<pad>``, padding to
    64, drawn around the mean embedding): the default leaves them out, ``softmax=raw`` keeps them."""
    rows = adapter.model.lm_head.weight.shape[0]
    assert adapter.text_vocabulary == adapter.image_token_id == rows - 32 and rows % 64 == 0
    assert adapter.describe()["softmax_over"] == f"the first {adapter.text_vocabulary} of the head's {rows} rows " \
        "(the original model's vocabulary)"
    checks.check_scores_match_reference(raw, _pixels(raw))  # the raw softmax over every row
    got, _ = checks.adapter_scores(adapter, [(0, 0), (1, 1)], checks.images(2))
    plain, _ = checks.adapter_scores(raw, [(0, 0), (1, 1)], checks.images(2))
    assert (got > plain * 1.01).all()  # the added rows take more than 1% of the mass


def test_the_version_option(tiny_llava: Path) -> None:
    """LLaVA-1.5's question is the same in every t2v_metrics version that has it; 3.1 dropped it."""
    assert LlavaAdapter.check_options(t2v_metrics="2.1")["question"] == T2V_LLAVA_QUESTION
    with pytest.raises(InputError, match="t2v_metrics") as err:
        LlavaAdapter.check_options(t2v_metrics="3.1")
    assert "\n" not in str(err.value)


def test_a_config_that_does_not_fit_the_weights_is_one_line(tiny_llava: Path, synthetic_dir: Path, tmp_path: Path,
                                                            one_error_line: Any) -> None:
    """A text hidden size the weights do not have: the first weight that differs named in one line,
    exit 2, not the loader's traceback."""
    from typer.testing import CliRunner

    from vlprobe.cli import app

    folder = tmp_path / "wide"
    shutil.copytree(tiny_llava, folder)
    config = json.loads((folder / "config.json").read_text())
    config["text_config"]["hidden_size"] = 64
    (folder / "config.json").write_text(json.dumps(config))
    res = CliRunner().invoke(app, ["extract", "--model", "llava", "--checkpoint", str(folder), "--dataset", "winoground",
                                   "--data-dir", str(synthetic_dir), "--device", "cpu", "--out", str(tmp_path / "c.h5")])
    one_error_line(res, "does not fit its config (config.json)", "in the weights", "text_config.hidden_size")
    assert not (tmp_path / "c.h5").exists()
