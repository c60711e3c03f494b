"""The shared config-versus-weights check (:mod:`vlprobe.extract.models.fit`): the first weight
whose shape differs, named in one line with the config fields that hold the size the weights lack."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from vlprobe.extract.models.fit import (
    ShapeMismatch,
    config_fields_of,
    first_mismatch,
    lacking_size,
    refuse_mismatch,
)
from vlprobe.validation import InputError


def test_first_mismatch_follows_the_order_given_and_skips_keys_one_side_lacks() -> None:
    config = {"a": (4, 2), "b": (3,), "c": (5,)}
    weights = {"b": (2,), "c": (6,), "z": (1,)}
    assert first_mismatch(config, weights) == ShapeMismatch("b", (2,), (3,))
    assert first_mismatch(config, weights, order=["c", "b"]) == ShapeMismatch("c", (6,), (5,))
    assert first_mismatch({"a": (1,)}, {"a": (1,)}) is None


def test_the_message_names_the_key_both_shapes_and_the_fields_of_the_size() -> None:
    mismatch = ShapeMismatch("transformer.wte.weight", (100, 32), (100, 64))
    assert lacking_size(mismatch) == 64
    config = {"n_embd": 64, "n_positions": 128, "nested": {"hidden_size": 64}, "flag": True}
    assert config_fields_of(config, 64) == ["n_embd", "nested.hidden_size"]
    err = refuse_mismatch("ckpt", mismatch, config=config)
    assert isinstance(err, InputError)
    assert str(err) == ("checkpoint: 'ckpt' does not fit its config (config.json): transformer.wte.weight is "
                        "(100, 32) in the weights, (100, 64) by the config (the config's 64: n_embd, nested.hidden_size)")
    assert "\n" not in str(err)
    assert lacking_size(ShapeMismatch("k", (3,), (3, 4))) == 4  # another rank: the size the weights lack


def test_every_hugging_face_load_refuses_a_config_that_does_not_fit(tmp_path: Path) -> None:
    """``from_pretrained_with_info`` (every Hugging Face family loads through it): a GPT-2 whose
    config says n_embd 64 over weights of width 32 is one InputError, not transformers' report
    and RuntimeError."""
    import json

    from transformers import GPT2Config, GPT2LMHeadModel

    from vlprobe.extract.models.hf import from_pretrained_with_info, quiet_transformers

    config = GPT2Config(n_embd=32, n_layer=1, n_head=4, vocab_size=50, n_positions=16, bos_token_id=0, eos_token_id=0)
    with quiet_transformers():
        GPT2LMHeadModel(config).save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**data, "n_embd": 64}))
    with quiet_transformers(), pytest.raises(InputError, match=r"'tiny' does not fit its config .*transformer\.wte\.weight"
                                                                r" is \(50, 32\) in the weights, \(50, 64\) by the config "
                                                                r"\(the config's 64: n_embd\)"):
        from_pretrained_with_info(GPT2LMHeadModel, tmp_path, checkpoint="tiny", dtype=torch.float32)


def test_checkpoint_shapes_reads_headers_of_both_weight_formats(tmp_path: Path) -> None:
    """safetensors (one file or shards) and pytorch_model.bin give the same key -> shape map, read
    without the tensors; a file of another kind gives {} (the loader reports it)."""
    from safetensors.torch import save_file

    from vlprobe.extract.models.fit import align_keys, checkpoint_shapes

    state = {"a.weight": torch.zeros(3, 4), "b.bias": torch.zeros(5)}
    (tmp_path / "st").mkdir()
    save_file({"a.weight": state["a.weight"]}, str(tmp_path / "st" / "model-00001-of-00002.safetensors"))
    save_file({"b.bias": state["b.bias"]}, str(tmp_path / "st" / "model-00002-of-00002.safetensors"))
    (tmp_path / "bin").mkdir()
    torch.save(state, tmp_path / "bin" / "pytorch_model.bin")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "pytorch_model.bin").write_bytes(b"not a torch file")
    want = {"a.weight": (3, 4), "b.bias": (5,)}
    assert checkpoint_shapes(tmp_path / "st") == want == checkpoint_shapes(tmp_path / "bin")
    assert checkpoint_shapes(tmp_path / "bad") == {} == checkpoint_shapes(tmp_path / "none")
    model = {"model.a.weight": (3, 4), "head.weight": (2, 2)}
    assert align_keys(want, model, "model") == {"model.a.weight": (3, 4), "b.bias": (5,)}
