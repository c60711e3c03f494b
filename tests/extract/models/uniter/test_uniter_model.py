"""UNITER clean-room module: BERT oracle, official-format loading, golden shapes, padding, scores."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, BertConfig, BertModel

from vlprobe.extract.models.uniter.model import (
    IGNORED_PREFIXES,
    UniterConfig,
    UniterModel,
    load_official_state_dict,
    normalize_official_keys,
    official_key_shapes,
)
from vlprobe.fixtures.staging import FIXTURE_MARKER
from vlprobe.fixtures.uniter import write_tiny_uniter
from vlprobe.validation import InputError

CAPTIONS = ["a red circle left of a blue square", "in the picture, a big green star is above a small diamond"]


@pytest.fixture(scope="module")
def uniter_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_uniter(tmp_path_factory.mktemp("models") / "tiny-uniter", seed=0)


@pytest.fixture(scope="module")
def model(uniter_dir: Path) -> UniterModel:
    return UniterModel.from_official(uniter_dir / "uniter-base.pt", uniter_dir / "uniter-base.json")


@pytest.fixture(scope="module")
def tokenizer(uniter_dir: Path):
    return AutoTokenizer.from_pretrained(uniter_dir / "tokenizer")


def _regions(b: int, r: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random (b, r, 2048) features and valid pos7 boxes."""
    g = torch.Generator().manual_seed(seed)
    feat = torch.rand((b, r, 2048), generator=g) * 3
    xy = torch.rand((b, r, 2, 2), generator=g)
    lo, hi = xy.min(dim=2).values, xy.max(dim=2).values
    wh = hi - lo
    pos = torch.cat([lo, hi, wh, wh[..., :1] * wh[..., 1:]], dim=-1)[..., [0, 1, 2, 3, 4, 5, 6]]
    return feat, pos


# -- the BERT oracle -------------------------------------------------------------------------------


def _bert_oracle(model: UniterModel) -> BertModel:
    c = model.config
    bert = BertModel(
        BertConfig(
            vocab_size=c.vocab_size, hidden_size=c.hidden_size, num_hidden_layers=c.num_hidden_layers,
            num_attention_heads=c.num_attention_heads, intermediate_size=c.intermediate_size,
            hidden_act="gelu", layer_norm_eps=1e-12, max_position_embeddings=c.max_position_embeddings,
            type_vocab_size=c.type_vocab_size,
        )
    ).eval()
    text_side = {
        k.removeprefix("uniter."): v
        for k, v in model.state_dict().items()
        if k.startswith(("uniter.embeddings.", "uniter.encoder.", "uniter.pooler."))
    }
    result = bert.load_state_dict(text_side, strict=False)
    assert result.unexpected_keys == []
    assert set(result.missing_keys) <= {"embeddings.position_ids", "embeddings.token_type_ids"}
    return bert


def test_text_side_equals_transformers_bert(model: UniterModel, tokenizer) -> None:
    bert = _bert_oracle(model)
    enc = tokenizer(CAPTIONS, padding=True, return_tensors="pt")
    with torch.no_grad():
        ours = model(enc["input_ids"], enc["attention_mask"])  # R = 0: text only
        ref = bert(
            input_ids=enc["input_ids"], attention_mask=enc["attention_mask"],
            token_type_ids=torch.zeros_like(enc["input_ids"]), output_hidden_states=True,
        )
    assert len(ours.hidden_states) == len(ref.hidden_states) == model.num_layers + 1
    valid = enc["attention_mask"].bool()
    for layer, (a, b) in enumerate(zip(ours.hidden_states, ref.hidden_states, strict=True)):
        torch.testing.assert_close(a[valid], b[valid], rtol=0, atol=1e-6, msg=f"layer {layer}")
    torch.testing.assert_close(ours.pooled, ref.pooler_output, rtol=0, atol=1e-6)


def test_fully_masked_regions_leave_text_states_unchanged(model: UniterModel, tokenizer) -> None:
    # exp(-10000) underflows to 0 in float32: masked regions get no attention weight at all.
    enc = tokenizer(CAPTIONS, padding=True, return_tensors="pt")
    feat, pos = _regions(2, 5, seed=1)
    with torch.no_grad():
        alone = model(enc["input_ids"], enc["attention_mask"])
        masked = model(enc["input_ids"], enc["attention_mask"], feat, pos, torch.zeros(2, 5))
    t = enc["input_ids"].shape[1]
    for a, b in zip(alone.hidden_states, masked.hidden_states, strict=True):
        torch.testing.assert_close(b[:, :t], a, rtol=0, atol=1e-6)
    torch.testing.assert_close(masked.match_prob, alone.match_prob, rtol=0, atol=1e-6)


# -- the official on-disk format -------------------------------------------------------------------


def test_fixture_is_in_the_official_format(uniter_dir: Path, tokenizer) -> None:
    assert {p.name for p in uniter_dir.iterdir()} == {"uniter-base.pt", "uniter-base.json", "tokenizer", FIXTURE_MARKER}
    raw = torch.load(uniter_dir / "uniter-base.pt", map_location="cpu", weights_only=True)
    assert type(raw) is dict and all(isinstance(v, torch.Tensor) for v in raw.values())
    assert {v.dtype for v in raw.values()} == {torch.float16}
    assert any(k.endswith(".gamma") for k in raw) and any(k.endswith("LayerNorm.weight") for k in raw)
    assert any(k.startswith(p) for p in IGNORED_PREFIXES for k in raw)
    config = json.loads((uniter_dir / "uniter-base.json").read_text(encoding="utf-8"))
    assert set(config) == {
        "attention_probs_dropout_prob", "hidden_act", "hidden_dropout_prob", "hidden_size",
        "initializer_range", "intermediate_size", "max_position_embeddings", "num_attention_heads",
        "num_hidden_layers", "type_vocab_size", "vocab_size",
    }
    assert config["vocab_size"] == len(tokenizer) == raw["uniter.embeddings.word_embeddings.weight"].shape[0]
    assert raw["uniter.img_embeddings.img_linear.weight"].shape == (32, 2048)
    vocab = (uniter_dir / "tokenizer" / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert vocab[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] and len(vocab) == len(tokenizer)


def test_loads_fp16_and_gamma_beta_names(uniter_dir: Path, model: UniterModel) -> None:
    raw = load_official_state_dict(uniter_dir / "uniter-base.pt")
    report = model.load_report
    assert report is not None and report.score_head == "itm" and model.score_head == "itm"
    assert report.source_dtypes == ("float16",)
    assert report.renamed == sum(k.endswith((".gamma", ".beta")) for k in raw) > 0
    assert report.unexpected == ()
    assert set(report.ignored) == {k for k in raw if k.startswith(IGNORED_PREFIXES)}
    assert all(p.dtype == torch.float32 for p in model.parameters())
    # Every loaded tensor is the file's fp16 value, under its renamed key.
    renamed, _ = normalize_official_keys(raw)
    for k, v in model.state_dict().items():
        assert torch.equal(v, renamed[k].float()), k
    assert not model.training


def test_from_official_accepts_loaded_dicts(uniter_dir: Path, model: UniterModel) -> None:
    raw = torch.load(uniter_dir / "uniter-base.pt", weights_only=True)
    config = json.loads((uniter_dir / "uniter-base.json").read_text(encoding="utf-8"))
    again = UniterModel.from_official(raw, config)
    for (ka, a), (kb, b) in zip(model.state_dict().items(), again.state_dict().items(), strict=True):
        assert ka == kb and torch.equal(a, b)
    # A bare body (no "uniter." prefix) and a "bert."-prefixed text side load the same way.
    bare = {k.removeprefix("uniter."): v for k, v in raw.items()}
    bert_prefixed = {("bert." + k if k.startswith(("embeddings.", "encoder.")) else k): v for k, v in bare.items()}
    for variant in (bare, bert_prefixed):
        loaded = UniterModel.from_official(variant, config)
        assert torch.equal(loaded.uniter.encoder.layer[1].output.LayerNorm.weight,
                           model.uniter.encoder.layer[1].output.LayerNorm.weight)


def test_missing_keys_raise_one_line(uniter_dir: Path) -> None:
    raw = torch.load(uniter_dir / "uniter-base.pt", weights_only=True)
    gone = [k for k in raw if k.startswith("uniter.encoder.layer.1.")]
    broken = {k: v for k, v in raw.items() if k not in gone}
    with pytest.raises(ValueError, match=r"^checkpoint: \d+ key\(s\) .* missing: uniter\.encoder\.layer\.1\.") as exc:
        UniterModel.from_official(broken, uniter_dir / "uniter-base.json")
    assert "\n" not in str(exc.value) and f"({len(gone)} in all)" in str(exc.value)


def test_bad_inputs_name_the_parameter(uniter_dir: Path, tmp_path: Path) -> None:
    cfg = uniter_dir / "uniter-base.json"
    with pytest.raises(ValueError, match=r"checkpoint: .* is not a file"):
        UniterModel.from_official(tmp_path / "nope.pt", cfg)
    (tmp_path / "junk.pt").write_bytes(b"not a torch file")
    with pytest.raises(ValueError, match="checkpoint: cannot read"):
        UniterModel.from_official(tmp_path / "junk.pt", cfg)
    with pytest.raises(InputError, match="checkpoint must be a path or a state dict"):
        UniterModel.from_official(3, cfg)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="config is missing required key"):
        UniterModel.from_official(uniter_dir / "uniter-base.pt", {"hidden_size": 32})
    bigger = {**json.loads(cfg.read_text()), "intermediate_size": 128}
    with pytest.raises(ValueError, match=r"intermediate\.dense\.weight has shape"):
        UniterModel.from_official(uniter_dir / "uniter-base.pt", bigger)
    with pytest.raises(ValueError, match=r"config\.hidden_size"):
        UniterConfig(vocab_size=10, hidden_size=30, num_hidden_layers=1, num_attention_heads=4, intermediate_size=8)


def test_config_keeps_unknown_keys_and_defaults(uniter_dir: Path) -> None:
    data = {**json.loads((uniter_dir / "uniter-base.json").read_text()), "some_future_key": [1, 2]}
    config = UniterConfig.from_dict(data)
    assert config.layer_norm_eps == 1e-12 and config.img_dim == 2048
    assert config.extra == {"some_future_key": [1, 2]}
    assert config.to_dict()["some_future_key"] == [1, 2]
    assert UniterConfig.from_dict(config.to_dict()) == config


def test_unexpected_keys_are_reported(uniter_dir: Path) -> None:
    raw = torch.load(uniter_dir / "uniter-base.pt", weights_only=True)
    raw["uniter.embeddings.position_ids"] = torch.arange(512)
    with pytest.warns(UserWarning, match="1 unexpected key"):
        loaded = UniterModel.from_official(raw, uniter_dir / "uniter-base.json")
    assert loaded.load_report.unexpected == ("uniter.embeddings.position_ids",)


# -- golden shapes ------------------------------------------------------------------------------------


def test_golden_layers_and_shapes(model: UniterModel, tokenizer) -> None:
    enc = tokenizer(CAPTIONS, padding=True, return_tensors="pt")
    b, t = enc["input_ids"].shape
    feat, pos = _regions(b, 4, seed=2)
    with torch.no_grad():
        out = model(enc["input_ids"], enc["attention_mask"], feat, pos, torch.ones(b, 4))
    assert model.num_layers == 2 and len(out.hidden_states) == 3
    assert all(h.shape == (b, t + 4, 32) for h in out.hidden_states)
    assert out.text_length == t and out.text_states(1).shape == (b, t, 32) and out.image_states(2).shape == (b, 4, 32)
    assert out.pooled.shape == (b, 32) and out.itm_logits.shape == (b, 2) and out.rank_logits is None
    assert out.match_prob.shape == (b,) and out.match_prob.dtype == torch.float32
    assert torch.equal(out.last_hidden_state, out.hidden_states[-1])
    torch.testing.assert_close(out.pooled, torch.tanh(model.uniter.pooler.dense(out.hidden_states[-1][:, 0])))
    # Layer 0 is the embedding output: text and region embeddings side by side.
    torch.testing.assert_close(out.hidden_states[0][:, :t], model.embed_text(enc["input_ids"]))
    torch.testing.assert_close(out.hidden_states[0][:, t:], model.embed_image(feat, pos))
    assert out.joint_mask.shape == (b, t + 4) and out.joint_mask.dtype == torch.bool
    scores_only = model(enc["input_ids"], enc["attention_mask"], feat, pos, torch.ones(b, 4), output_hidden_states=False)
    assert scores_only.hidden_states is None
    # The scores-only pass may take another path through the last block (only the [CLS] query).
    torch.testing.assert_close(scores_only.match_prob, out.match_prob, rtol=0, atol=1e-6)


def test_image_embedding_formula(model: UniterModel) -> None:
    feat, pos = _regions(1, 3, seed=3)
    e = model.uniter.img_embeddings
    type1 = model.uniter.embeddings.token_type_embeddings.weight[1]
    with torch.no_grad():
        expect = e.LayerNorm(e.img_layer_norm(e.img_linear(feat)) + e.pos_layer_norm(e.pos_linear(pos)) + type1)
        # The formula written out again: the same operations, but a tolerance rather than relying
        # on BLAS picking the same kernel for both calls.
        torch.testing.assert_close(model.embed_image(feat, pos), expect, rtol=0, atol=1e-6)


# -- padding invariance ---------------------------------------------------------------------------------


def test_caption_states_do_not_depend_on_batch_padding(model: UniterModel, tokenizer) -> None:
    feat, pos = _regions(1, 5, seed=4)
    short = tokenizer(CAPTIONS[:1], return_tensors="pt")
    both = tokenizer(CAPTIONS, padding=True, return_tensors="pt")
    n = short["input_ids"].shape[1]
    assert both["input_ids"].shape[1] > n
    with torch.no_grad():
        alone = model(short["input_ids"], short["attention_mask"], feat, pos, torch.ones(1, 5))
        batched = model(both["input_ids"], both["attention_mask"], feat.expand(2, -1, -1), pos.expand(2, -1, -1),
                        torch.ones(2, 5))
    t = both["input_ids"].shape[1]
    for a, b in zip(alone.hidden_states, batched.hidden_states, strict=True):
        torch.testing.assert_close(b[0, :n], a[0, :n], rtol=0, atol=1e-5)  # text tokens
        torch.testing.assert_close(b[0, t:], a[0, n:], rtol=0, atol=1e-5)  # regions
    torch.testing.assert_close(batched.match_prob[0], alone.match_prob[0], rtol=0, atol=1e-6)


def test_region_states_do_not_depend_on_masked_padding_boxes(model: UniterModel, tokenizer) -> None:
    enc = tokenizer(CAPTIONS[:1], return_tensors="pt")
    feat, pos = _regions(1, 3, seed=5)
    pad_feat, pad_pos = _regions(1, 4, seed=6)  # arbitrary content in the padded slots
    with torch.no_grad():
        alone = model(enc["input_ids"], enc["attention_mask"], feat, pos, torch.ones(1, 3))
        padded = model(
            enc["input_ids"], enc["attention_mask"], torch.cat([feat, pad_feat], 1), torch.cat([pos, pad_pos], 1),
            torch.tensor([[1, 1, 1, 0, 0, 0, 0]]),
        )
    t = enc["input_ids"].shape[1]
    for a, b in zip(alone.hidden_states, padded.hidden_states, strict=True):
        torch.testing.assert_close(b[:, : t + 3], a, rtol=0, atol=1e-5)
    torch.testing.assert_close(padded.match_prob, alone.match_prob, rtol=0, atol=1e-6)


# -- scores ---------------------------------------------------------------------------------------------------


def test_match_prob_is_softmax_of_itm_logits(model: UniterModel, tokenizer) -> None:
    enc = tokenizer(CAPTIONS, padding=True, return_tensors="pt")
    feat, pos = _regions(2, 6, seed=7)
    with torch.no_grad():
        out = model(enc["input_ids"], enc["attention_mask"], feat, pos, torch.ones(2, 6))
    assert ((out.match_prob > 0) & (out.match_prob < 1)).all()
    torch.testing.assert_close(out.match_prob, torch.softmax(out.itm_logits, -1)[:, 1])
    torch.testing.assert_close(out.itm_logits, model.itm_output(out.pooled))
    assert out.match_prob[0] != out.match_prob[1]


def test_retrieval_checkpoint_scores_with_the_rank_head(tmp_path: Path, tokenizer) -> None:
    path = write_tiny_uniter(tmp_path / "tiny-uniter-rank", seed=1, score_head="rank")
    raw = torch.load(path / "uniter-base.pt", weights_only=True)
    assert "rank_output.weight" in raw and "itm_output.weight" in raw
    assert not any(k.startswith(IGNORED_PREFIXES) for k in raw)
    rank = UniterModel.from_official(raw, path / "uniter-base.json")
    assert rank.score_head == "rank" and rank.load_report.ignored == ("itm_output.weight", "itm_output.bias")
    assert not hasattr(rank, "itm_output")
    enc = tokenizer(CAPTIONS, padding=True, return_tensors="pt")
    feat, pos = _regions(2, 4, seed=8)
    with torch.no_grad():
        out = rank(enc["input_ids"], enc["attention_mask"], feat, pos, torch.ones(2, 4))
        itm = UniterModel.from_official(raw, path / "uniter-base.json", score_head="itm")
        out_itm = itm(enc["input_ids"], enc["attention_mask"], feat, pos, torch.ones(2, 4))
    assert out.itm_logits is None and out.rank_logits.shape == (2,)
    torch.testing.assert_close(out.match_prob, torch.sigmoid(rank.rank_output(out.pooled)[:, 0]))
    assert ((out.match_prob > 0) & (out.match_prob < 1)).all()
    assert itm.score_head == "itm" and itm.load_report.ignored == ("rank_output.weight", "rank_output.bias")
    # Same body either way; two model instances, so a float tolerance, not bit equality.
    torch.testing.assert_close(out_itm.pooled, out.pooled, rtol=0, atol=1e-6)


def test_forward_validates_shapes(model: UniterModel) -> None:
    ids, mask = torch.tensor([[2, 10, 3]]), torch.ones(1, 3)
    feat, pos = _regions(1, 2, seed=9)
    with pytest.raises(ValueError, match="img_feat must have shape"):
        model(ids, mask, feat[..., :100], pos, torch.ones(1, 2))
    with pytest.raises(ValueError, match="img_pos_feat must have shape"):
        model(ids, mask, feat, pos[..., :4], torch.ones(1, 2))
    with pytest.raises(ValueError, match="img_mask must have shape"):
        model(ids, mask, feat, pos, torch.ones(1, 3))
    with pytest.raises(ValueError, match="attention_mask must have shape"):
        model(ids, torch.ones(1, 4))
    with pytest.raises(ValueError, match="given together"):
        model(ids, mask, feat)
    with pytest.raises(InputError, match="input_ids must hold integer"):
        model(ids.float(), mask)


def test_random_init_is_seeded_and_leaves_the_global_rng_alone() -> None:
    config = dict(vocab_size=20, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16)
    state = torch.random.get_rng_state()
    a, b, c = UniterModel(config, seed=5), UniterModel(config, seed=5), UniterModel(config, seed=6)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))
    assert not torch.equal(a.uniter.pooler.dense.weight, c.uniter.pooler.dense.weight)


def test_fixture_cli_and_tokenizer_cover_the_synthetic_dataset(tmp_path: Path, synthetic_dir: Path, one_error_line) -> None:
    from typer.testing import CliRunner

    from vlprobe.cli import app

    runner = CliRunner()
    out = tmp_path / "cli-uniter"
    result = runner.invoke(app, ["fixtures", "model", "uniter", "--out", str(out), "--seed", "2"])
    assert result.exit_code == 0, result.output
    marker = json.loads((out / FIXTURE_MARKER).read_text(encoding="utf-8"))
    assert marker["kind"] == "uniter" and marker["seed"] == 2
    again = runner.invoke(app, ["fixtures", "model", "uniter", "--out", str(out), "--seed", "2"])  # overwrite
    assert again.exit_code == 0, again.output
    one_error_line(runner.invoke(app, ["fixtures", "model", "uniter", "--out", str(out / "uniter-base.pt")]),
                   "out must be a directory")

    tok = AutoTokenizer.from_pretrained(out / "tokenizer")
    texts = []
    for line in (synthetic_dir / "examples.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        texts += [row["caption_0"], row["caption_1"]]
    for line in (synthetic_dir / "variants.jsonl").read_text(encoding="utf-8").splitlines():
        texts += [v["text"] for v in json.loads(line).get("variants", [])]
    assert len(texts) > 24
    for text in texts:
        pieces = tok.tokenize(text)
        assert "[UNK]" not in pieces and not any(p.startswith("##") for p in pieces), (text, pieces)


def test_official_key_shapes_lists_what_loading_needs(uniter_dir: Path, model: UniterModel) -> None:
    shapes = official_key_shapes(uniter_dir / "uniter-base.json")
    assert shapes == {k: tuple(v.shape) for k, v in model.state_dict().items()}
    assert "itm_output.weight" in shapes and not any(k.startswith(IGNORED_PREFIXES) for k in shapes)
    assert official_key_shapes(uniter_dir / "uniter-base.json", "rank")["rank_output.weight"] == (1, 32)
    # uniter-base: 12 blocks of 16 tensors + 5 text + 11 image embedding tensors + pooler + head.
    base = dict(vocab_size=28996, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                intermediate_size=3072)
    base_shapes = official_key_shapes(base)
    assert len(base_shapes) == 12 * 16 + 5 + 11 + 2 + 2
    assert base_shapes["uniter.img_embeddings.mask_embedding.weight"] == (2, 2048)


def test_precomputed_embeddings_give_the_same_pairs(model: UniterModel, tokenizer) -> None:
    # Embed 2 captions and 3 region sets once, then score all 6 pairs in one batch.
    enc = tokenizer(CAPTIONS, padding=True, return_tensors="pt")
    feat, pos = _regions(3, 4, seed=10)
    img_mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]])
    ti, ii = torch.arange(2).repeat_interleave(3), torch.arange(3).repeat(2)
    with torch.no_grad():
        text, image = model.embed_text(enc["input_ids"]), model.embed_image(feat, pos)
        fast = model.forward_embeddings(text[ti], enc["attention_mask"][ti], image[ii], img_mask[ii])
        full = model(enc["input_ids"][ti], enc["attention_mask"][ti], feat[ii], pos[ii], img_mask[ii])
    # Two paths (embeddings gathered from a batch of 2 and 3 vs computed in a batch of 6): BLAS may
    # block the matmuls differently per batch shape and CPU (9.5e-7 seen), so not bit-exact.
    for a, b in zip(fast.hidden_states, full.hidden_states, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    torch.testing.assert_close(fast.match_prob, full.match_prob, rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="img_mask"):
        model.forward_embeddings(text, enc["attention_mask"], image[:2], None)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_runs_and_stays_close(uniter_dir: Path, model: UniterModel, tokenizer, dtype) -> None:
    half = UniterModel.from_official(uniter_dir / "uniter-base.pt", uniter_dir / "uniter-base.json", dtype=dtype)
    assert {p.dtype for p in half.parameters()} == {dtype}
    enc = tokenizer(CAPTIONS, padding=True, return_tensors="pt")
    feat, pos = _regions(2, 5, seed=11)  # float32 inputs are cast to the model's dtype
    img_mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    with torch.no_grad():
        ref = model(enc["input_ids"], enc["attention_mask"], feat, pos, img_mask)
        out = half(enc["input_ids"], enc["attention_mask"], feat, pos, img_mask)
    assert all(h.dtype == dtype and torch.isfinite(h).all() for h in out.hidden_states)
    assert out.match_prob.dtype == torch.float32
    torch.testing.assert_close(out.match_prob, ref.match_prob, rtol=0, atol=1e-2)
    torch.testing.assert_close(out.pooled.float(), ref.pooled, rtol=0, atol=5e-2)


def test_fixture_is_deterministic_per_seed(tmp_path: Path, uniter_dir: Path) -> None:
    again = write_tiny_uniter(tmp_path / "again", seed=0)
    other = write_tiny_uniter(tmp_path / "other", seed=1)
    a, b, c = (torch.load(p / "uniter-base.pt", weights_only=True) for p in (uniter_dir, again, other))
    assert list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["itm_output.weight"], c["itm_output.weight"])
    assert (uniter_dir / "uniter-base.json").read_bytes() == (again / "uniter-base.json").read_bytes()
    with pytest.raises(InputError, match="score_head: unknown score head 'vqa'"):
        write_tiny_uniter(tmp_path / "bad", score_head="vqa")
    modern = write_tiny_uniter(tmp_path / "modern", seed=0, legacy_layer_norm_names=False)
    raw = torch.load(modern / "uniter-base.pt", weights_only=True)
    assert not any(k.endswith((".gamma", ".beta")) for k in raw)
    loaded = UniterModel.from_official(raw, modern / "uniter-base.json")
    assert loaded.load_report.renamed == 0
