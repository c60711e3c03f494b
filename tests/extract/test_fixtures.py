"""Tiny CLIP fixture: real on-disk format, offline loading, tokenizer layout, determinism."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from PIL import Image
from transformers import (
    AutoImageProcessor,
    AutoTokenizer,
    CLIPModel,
    CLIPTokenizer,
)

from vlprobe.extract.fixtures import (
    FIXTURE_MARKER,
    FIXTURE_WRITERS,
    bytes_to_unicode,
    learn_bpe,
    write_tiny_clip,
)

CAPTION = "a red circle left of a blue square"
EXPECTED_FILES = {
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.json",
    "merges.txt",
    "preprocessor_config.json",
    FIXTURE_MARKER,
}


@pytest.fixture(scope="module")
def clip_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_clip(tmp_path_factory.mktemp("fixtures") / "tiny-clip", seed=0)


@pytest.fixture(scope="module")
def loaded(clip_dir: Path):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        model = CLIPModel.from_pretrained(clip_dir)
        tokenizer = AutoTokenizer.from_pretrained(clip_dir)
        processor = AutoImageProcessor.from_pretrained(clip_dir)
    return model, tokenizer, processor


# -- files and loading ---------------------------------------------------------------------------


def test_writes_the_real_checkpoint_files(clip_dir: Path) -> None:
    assert {p.name for p in clip_dir.iterdir()} == EXPECTED_FILES
    marker = json.loads((clip_dir / FIXTURE_MARKER).read_text(encoding="utf-8"))
    assert marker["kind"] == "clip"
    assert marker["seed"] == 0
    assert marker["note"] == "random weights; for tests only"
    assert isinstance(marker["vlprobe"], str) and marker["vlprobe"]
    preproc = json.loads((clip_dir / "preprocessor_config.json").read_text(encoding="utf-8"))
    assert preproc["image_processor_type"] == "CLIPImageProcessor"
    assert preproc["size"] == {"shortest_edge": 32}
    assert preproc["crop_size"] == {"height": 32, "width": 32}
    assert preproc["image_mean"] == pytest.approx([0.48145466, 0.4578275, 0.40821073])
    assert preproc["image_std"] == pytest.approx([0.26862954, 0.26130258, 0.27577711])
    config = json.loads((clip_dir / "config.json").read_text(encoding="utf-8"))
    assert config["model_type"] == "clip"
    assert config["architectures"] == ["CLIPModel"]
    assert config["dtype"] == "float32"


def test_loads_offline_through_from_pretrained(clip_dir: Path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = CLIPModel.from_pretrained(clip_dir)
    tokenizer = AutoTokenizer.from_pretrained(clip_dir)
    processor = AutoImageProcessor.from_pretrained(clip_dir)
    assert isinstance(tokenizer, CLIPTokenizer)
    assert type(processor).__name__.startswith("CLIPImageProcessor")
    assert not model.training
    assert all(p.dtype == torch.float32 for p in model.parameters())
    tc, vc = model.config.text_config, model.config.vision_config
    assert (tc.hidden_size, tc.num_hidden_layers, tc.num_attention_heads) == (32, 3, 4)
    assert (tc.intermediate_size, tc.max_position_embeddings) == (64, 77)
    assert (vc.hidden_size, vc.num_hidden_layers, vc.num_attention_heads) == (32, 2, 4)
    assert (vc.intermediate_size, vc.image_size, vc.patch_size) == (64, 32, 8)
    assert model.config.projection_dim == 16
    assert model.text_projection.weight.shape == (16, 32)
    assert model.visual_projection.weight.shape == (16, 32)


def test_text_tower_gives_four_hidden_states_of_width_32(loaded) -> None:
    model, tokenizer, _ = loaded
    batch = tokenizer([CAPTION, "a dog"], padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model.text_model(**batch, output_hidden_states=True)
    n, t = batch["input_ids"].shape
    assert len(out.hidden_states) == 4
    assert all(h.shape == (n, t, 32) for h in out.hidden_states)
    assert all(torch.isfinite(h).all() for h in out.hidden_states)
    # causal attention: the BOS position is the same for every text
    assert torch.allclose(out.hidden_states[-1][0, 0], out.hidden_states[-1][1, 0])


def test_vision_tower_gives_three_hidden_states(loaded) -> None:
    model, _, _ = loaded
    pixels = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        out = model.vision_model(pixel_values=pixels, output_hidden_states=True)
    assert len(out.hidden_states) == 3
    assert all(h.shape == (2, 1 + (32 // 8) ** 2, 32) for h in out.hidden_states)


def test_full_model_scores_image_text_pairs(loaded) -> None:
    model, tokenizer, processor = loaded
    images = [Image.new("RGB", (48, 40), c) for c in ("red", "blue")]
    inputs = tokenizer([CAPTION, "a blue square left of a red circle"], padding=True,
                       return_tensors="pt")
    pixels = processor(images=images, return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        out = model(**inputs, pixel_values=pixels)
    assert out.logits_per_image.shape == (2, 2)
    assert out.text_embeds.shape == out.image_embeds.shape == (2, 16)


def test_image_processor_resizes_other_sizes_to_32(loaded) -> None:
    _, _, processor = loaded
    images = [Image.new("RGB", (64, 48), (200, 30, 30)), Image.new("RGB", (20, 50), (0, 0, 255))]
    pixels = processor(images=images, return_tensors="pt")["pixel_values"]
    assert tuple(pixels.shape) == (2, 3, 32, 32)
    single = processor(images=Image.new("L", (70, 33)), return_tensors="pt")["pixel_values"]
    assert tuple(single.shape) == (1, 3, 32, 32)


# -- tokenizer ---------------------------------------------------------------------------------


def test_caption_starts_with_bos_ends_with_eos_and_uses_whole_words(loaded) -> None:
    model, tokenizer, _ = loaded
    ids = tokenizer(CAPTION)["input_ids"]
    tokens = tokenizer.convert_ids_to_tokens(ids)
    assert ids[0] == tokenizer.bos_token_id == model.config.text_config.bos_token_id
    assert ids[-1] == tokenizer.eos_token_id == model.config.text_config.eos_token_id
    assert tokens[1:-1] == [w + "</w>" for w in CAPTION.split()]
    assert tokenizer.decode(ids, skip_special_tokens=True) == CAPTION
    # CLIP lower-cases
    assert tokenizer("A RED Circle")["input_ids"] == tokenizer("a red circle")["input_ids"]


def test_special_ids_sit_at_the_top_of_the_vocabulary(loaded) -> None:
    model, tokenizer, _ = loaded
    vocab_size = model.config.text_config.vocab_size
    assert len(tokenizer) == vocab_size
    assert tokenizer.eos_token_id == model.config.text_config.eos_token_id == vocab_size - 1
    assert tokenizer.bos_token_id == model.config.text_config.bos_token_id == vocab_size - 2
    assert tokenizer.pad_token_id == tokenizer.eos_token_id
    assert model.config.text_config.pad_token_id == vocab_size - 1
    assert tokenizer.convert_ids_to_tokens([vocab_size - 2, vocab_size - 1]) == [
        "<|startoftext|>", "<|endoftext|>",
    ]
    assert tokenizer.model_max_length == 77


def test_unknown_words_fall_back_to_bytes(loaded) -> None:
    _, tokenizer, _ = loaded
    for text in ["a xylophone beside the quokka", "café 😀 naïve", "x2 #@! 3.5"]:
        ids = tokenizer(text)["input_ids"]
        inner = ids[1:-1]
        assert inner, text
        # the unknown token is <|endoftext|>: it must occur only as the final EOS
        assert tokenizer.eos_token_id not in inner
        assert tokenizer.bos_token_id not in inner
        # CLIP splits digits and punctuation into words of their own; compare without spaces
        decoded = tokenizer.decode(ids, skip_special_tokens=True)
        assert decoded.replace(" ", "") == text.replace(" ", "")
    quokka = tokenizer.tokenize("quokka")
    assert len(quokka) > 1 and quokka[-1].endswith("</w>")


def test_padding_uses_eos_and_masks_it(loaded) -> None:
    _, tokenizer, _ = loaded
    batch = tokenizer(["a dog", CAPTION], padding=True)
    short, long_ = batch["input_ids"]
    assert len(short) == len(long_)
    n_real = sum(batch["attention_mask"][0])
    assert n_real == 4  # bos, a, dog, eos
    assert short[n_real:] == [tokenizer.eos_token_id] * (len(short) - n_real)
    assert batch["attention_mask"][0][n_real:] == [0] * (len(short) - n_real)
    assert all(batch["attention_mask"][1])


def test_vocab_and_merges_files_match_the_tokenizer(clip_dir: Path, loaded) -> None:
    _, tokenizer, _ = loaded
    lines = (clip_dir / "merges.txt").read_text(encoding="utf-8").splitlines()
    assert lines[0] == "#version: 0.2"
    merges = [tuple(line.split(" ")) for line in lines[1:]]
    assert 150 <= len(merges) <= 300
    assert all(len(m) == 2 for m in merges)
    vocab = json.loads((clip_dir / "vocab.json").read_text(encoding="utf-8"))
    assert vocab == tokenizer.get_vocab()
    chars = list(bytes_to_unicode().values())
    by_id = sorted(vocab, key=vocab.__getitem__)
    assert sorted(vocab.values()) == list(range(len(vocab)))
    assert by_id[:256] == chars
    assert by_id[256:512] == [c + "</w>" for c in chars]
    assert by_id[512:-2] == [a + b for a, b in merges]
    assert by_id[-2:] == ["<|startoftext|>", "<|endoftext|>"]


def test_slow_path_files_alone_give_the_same_tokenizer(clip_dir: Path, tmp_path: Path,
                                                       monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name in ("vocab.json", "merges.txt", "tokenizer_config.json"):
        (tmp_path / name).write_bytes((clip_dir / name).read_bytes())
    from_files = AutoTokenizer.from_pretrained(tmp_path)
    full = AutoTokenizer.from_pretrained(clip_dir)
    for text in [CAPTION, "there is a xylophone in the picture", "café 😀"]:
        assert from_files(text)["input_ids"] == full(text)["input_ids"]


def test_bytes_to_unicode_is_the_clip_map() -> None:
    table = bytes_to_unicode()
    assert sorted(table) == list(range(256))
    assert len(set(table.values())) == 256
    assert all(table[b] == chr(b) for b in range(ord("!"), ord("~") + 1))
    assert table[ord(" ")] == "Ġ"
    assert not any(c.isspace() for c in table.values())


def test_learn_bpe_is_deterministic_and_bounded() -> None:
    words = ["red", "red", "blue", "circle", "left", "right"]
    first = learn_bpe(words)
    assert first == learn_bpe(list(reversed(words)))
    # ("e", "d</w>") and ("r", "e") both occur twice (in "red" x2); ties go to the smaller pair
    assert first[:2] == [("e", "d</w>"), ("r", "ed</w>")]
    # run to completion, every word is one symbol: its merges end in the word itself
    assert {a + b for a, b in first} >= {w + "</w>" for w in words}
    assert learn_bpe(words, max_merges=3) == first[:3]
    assert learn_bpe([]) == []


# -- determinism, RNG hygiene --------------------------------------------------------------------


def test_same_seed_is_byte_identical_and_other_seeds_differ(clip_dir: Path, tmp_path: Path) -> None:
    again = write_tiny_clip(tmp_path / "again", seed=0)
    other = write_tiny_clip(tmp_path / "other", seed=1)
    for name in EXPECTED_FILES:
        if name in {"model.safetensors", FIXTURE_MARKER}:
            continue
        assert (again / name).read_bytes() == (clip_dir / name).read_bytes(), name
    assert (again / "model.safetensors").read_bytes() == (
        clip_dir / "model.safetensors"
    ).read_bytes()
    assert (other / "model.safetensors").read_bytes() != (
        clip_dir / "model.safetensors"
    ).read_bytes()
    a = CLIPModel.from_pretrained(again).state_dict()
    b = CLIPModel.from_pretrained(other).state_dict()
    assert a.keys() == b.keys()
    assert not torch.equal(a["text_model.embeddings.token_embedding.weight"],
                           b["text_model.embeddings.token_embedding.weight"])


def test_leaves_the_global_rng_alone(tmp_path: Path) -> None:
    torch.manual_seed(1234)
    expected = torch.rand(5)
    torch.manual_seed(1234)
    write_tiny_clip(tmp_path / "clip", seed=7)
    assert torch.equal(torch.rand(5), expected)


# -- target directory and arguments ------------------------------------------------------------


def test_accepts_new_nested_and_empty_dirs(tmp_path: Path) -> None:
    nested = write_tiny_clip(str(tmp_path / "a" / "b" / "clip"))
    assert isinstance(nested, Path)
    assert (nested / "config.json").is_file()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert (write_tiny_clip(empty) / "config.json").is_file()
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert leftovers == []


def test_rewrites_a_previous_fixture_in_place(tmp_path: Path) -> None:
    out = write_tiny_clip(tmp_path / "clip", seed=0)
    before = (out / "model.safetensors").read_bytes()
    write_tiny_clip(out, seed=3)
    marker = json.loads((out / FIXTURE_MARKER).read_text(encoding="utf-8"))
    assert marker["seed"] == 3
    assert (out / "model.safetensors").read_bytes() != before
    write_tiny_clip(out, seed=0)
    assert (out / "model.safetensors").read_bytes() == before
    assert {p.name for p in out.iterdir()} == EXPECTED_FILES


def test_refuses_a_non_empty_directory_that_is_not_a_fixture(tmp_path: Path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me", encoding="utf-8")
    with pytest.raises(ValueError, match="mine"):
        write_tiny_clip(out)
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


@pytest.mark.parametrize("marker", ['{"kind": "lxmert"}', "not json", "[1, 2]"])
def test_refuses_a_fixture_of_another_kind_or_a_bad_marker(tmp_path: Path, marker: str) -> None:
    out = tmp_path / "other"
    out.mkdir()
    (out / FIXTURE_MARKER).write_text(marker, encoding="utf-8")
    with pytest.raises(ValueError, match="other"):
        write_tiny_clip(out)


def test_refuses_a_file(tmp_path: Path) -> None:
    target = tmp_path / "file.bin"
    target.write_bytes(b"x")
    with pytest.raises(ValueError, match=re.escape("file.bin")):
        write_tiny_clip(target)


@pytest.mark.parametrize("seed", [-1, 1.5, True, "3", None, 2**63])
def test_refuses_bad_seeds(tmp_path: Path, seed: object) -> None:
    with pytest.raises(ValueError, match="seed"):
        write_tiny_clip(tmp_path / "clip", seed=seed)  # type: ignore[arg-type]
    assert not (tmp_path / "clip").exists()


def test_writer_registry_dispatches_by_name(tmp_path: Path) -> None:
    assert FIXTURE_WRITERS["clip"] is write_tiny_clip
    out = FIXTURE_WRITERS["clip"](tmp_path / "clip", 2)
    assert json.loads((out / FIXTURE_MARKER).read_text(encoding="utf-8"))["seed"] == 2
