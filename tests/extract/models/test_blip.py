"""BLIP-ITM: ITM and ITC scores against ``BlipForImageTextRetrieval.forward``; ``probe extract``
-> Winoground scores and recall from the cache; ``probe eval sugarcrepe --model blip-itm`` (the
contract suite covers streams, layers, batching, padding, float16 and loading)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from tests.extract.helpers import (
    SC_SELECTION,
    assert_winoground_item_scores,
    recall_i2t_at_1,
    sugarcrepe_pictures,
    winoground_percentages,
)
from tests.extract.models.contract import Case, kinds
from vlprobe.cli import app
from vlprobe.data.sugarcrepe import load_sugarcrepe
from vlprobe.data.winoground import load_winoground
from vlprobe.extract.cache.reader import ActivationCache
from vlprobe.extract.models.blip import BlipItmAdapter
from vlprobe.extract.scoring import ImageSource, score_pairs
from vlprobe.validation import InputError

# The adapter contract (tests/extract/models/test_adapter_contract.py) checks this adapter with these facts.
CONTRACT = Case(
    "blip-itm", "cross", "pixels",
    {"text": ("text", kinds("embed", ("self", 3)), "token0"), "image": ("image", kinds("embed", ("self", 2)), "patch0"),
     "pair": ("pair", kinds("embed", ("cross", 3)), "token0")},
    {"text": ("text_encoder.embeddings", "text"), "image": ("vision_model.embeddings", "image"),
     "pair": ("text_encoder.embeddings", "text")},
)


@pytest.fixture(scope="module")
def adapter(tiny_blip_itm: Path) -> BlipItmAdapter:
    return BlipItmAdapter.load(str(tiny_blip_itm), device="cpu")


def forward_scores(
    adapter: BlipItmAdapter, images: list, texts: list[str], *, itm: bool = True, first: int | None = None,
) -> np.ndarray:
    """Each pair (images[p], texts[p]) through one plain ``BlipForImageTextRetrieval.forward``:
    softmax(itm_score)[:, 1], or the ITC cosine (``use_itm_head=False``); ``first``: a token id put
    in place of [CLS]."""
    out = []
    with torch.no_grad():
        for image, text in zip(images, texts, strict=True):
            tok = adapter.tokenizer([text], return_tensors="pt")
            if first is not None:
                tok["input_ids"][:, 0] = first
            pixels = adapter.processor(images=[image], return_tensors="pt")["pixel_values"]
            got = adapter.model(input_ids=tok["input_ids"], attention_mask=tok["attention_mask"], pixel_values=pixels,
                                use_itm_head=itm).itm_score
            out.append(torch.softmax(got, dim=-1)[0, 1].item() if itm else got[0, 0].item())
    return np.array(out)


def forward_matrix(adapter: BlipItmAdapter, data_dir: Path) -> np.ndarray:
    ds = load_winoground(data_dir)
    images = [im.load() for im in ds.images()]
    texts = [t.text for t in ds.texts()]
    rows = [(i, t) for i in range(len(images)) for t in range(len(texts))]
    flat = forward_scores(adapter, [images[i] for i, _ in rows], [texts[t] for _, t in rows])
    return flat.reshape(len(images), len(texts))


@pytest.mark.parametrize("head", ["itm", "itc"])
def test_engine_scores_equal_the_retrieval_forward(head: str, tiny_blip_itm: Path, synthetic_dir: Path) -> None:
    scorer = BlipItmAdapter.load(str(tiny_blip_itm), score_head=head)
    assert scorer.score_kind == ("match_probability" if head == "itm" else "cosine")
    ds = load_winoground(synthetic_dir)
    images, texts = ds.images(), [t.text for t in ds.texts()]
    t_idx = np.array([0, 1, 2, 3, 1, 0, 5, 4])
    i_idx = np.array([0, 0, 1, 1, 2, 3, 5, 4])
    got = np.empty(len(t_idx))
    logits = []
    for batch in score_pairs(scorer, texts, ImageSource("pixels", images), t_idx, i_idx, batch_size=3):
        got[batch.index] = batch.scores
        logits.append(batch.logits)
    want = forward_scores(scorer, [images[i].load() for i in i_idx], [texts[t] for t in t_idx], itm=head == "itm")
    # batched pairs vs one forward per pair: a tolerance (BLAS kernels differ with the shapes)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    assert all(x is None for x in logits) == (head == "itc")


def test_first_token_enc_is_blips_retrieval_input(tiny_blip_itm: Path, synthetic_dir: Path) -> None:
    scorer = BlipItmAdapter.load(str(tiny_blip_itm), first_token="enc")
    enc = scorer.tokenizer.convert_tokens_to_ids("[ENC]")
    assert scorer.enc_token_id == enc and scorer.model_options() == {"score_head": "itm", "first_token": "enc"}
    ds = load_winoground(synthetic_dir)
    images, texts = ds.images(), [t.text for t in ds.texts()]
    idx = np.arange(4)
    got = np.concatenate([b.scores for b in score_pairs(scorer, texts, ImageSource("pixels", images), idx, idx)])
    pil = [images[i].load() for i in idx]
    np.testing.assert_allclose(got, forward_scores(scorer, pil, texts[:4], first=enc), rtol=1e-4, atol=1e-6)
    assert not np.allclose(got, forward_scores(scorer, pil, texts[:4]), rtol=1e-4, atol=1e-6)
    with pytest.raises(InputError, match="first_token: unknown first token 'ENC'"):
        BlipItmAdapter.load(str(tiny_blip_itm), first_token="ENC")


def test_pair_layer_0_is_the_text_embedding_and_the_last_feeds_the_itm_head(adapter: BlipItmAdapter) -> None:
    from PIL import Image

    texts = adapter.prepare_texts(["a red circle", "a blue square left of a star"])
    images = adapter.prepare_images([Image.new("RGB", (40, 30), (200, 20, 20)), Image.new("RGB", (30, 30), (0, 0, 255))])
    idx = np.array([0, 1])
    last = adapter.streams["pair"].n_layers - 1
    out = adapter.encode_pairs(texts, images, idx, idx, {"pair": [0, last]}, ["cls"])
    ids, _ = texts.take(idx)
    with torch.no_grad():
        emb = adapter.model.text_encoder.embeddings(input_ids=ids)
        itm = adapter.model.itm_head(out.states["pair"]["cls"][:, 1])
    torch.testing.assert_close(out.states["pair"]["cls"][:, 0], emb[:, 0])
    torch.testing.assert_close(out.logits, itm.float())
    assert out.pooled == {}


def test_bad_score_head_and_pixels_only(tiny_blip_itm: Path, adapter: BlipItmAdapter) -> None:
    with pytest.raises(InputError, match="score_head: unknown score head 'itx'; did you mean 'itm'"):
        BlipItmAdapter.load(str(tiny_blip_itm), score_head="itx")
    with pytest.raises(TypeError, match="reads pixels"):
        adapter.prepare_images(np.zeros((2, 3)))
    with pytest.raises(InputError, match="stream: blip-itm encodes text and image alone"):
        adapter.encode("pair", ["a"], [0])


def _csv_values(path: Path, key: str = "subset") -> dict[tuple[str, str], float]:
    with open(path, encoding="utf-8", newline="") as fh:
        return {(r[key], r["metric"]): float(r["value"]) for r in csv.DictReader(fh)}


def test_cli_extract_then_winoground_scores_and_recall(
    tiny_blip_itm: Path, synthetic_dir: Path, tmp_path: Path, adapter: BlipItmAdapter, one_error_line,
) -> None:
    runner = CliRunner()
    base = ["extract", "--model", "blip-itm", "--checkpoint", str(tiny_blip_itm), "--data-dir", str(synthetic_dir),
            "--device", "cpu", "--quiet"]
    item, full = tmp_path / "item.h5", tmp_path / "all.h5"
    layers = ["--layers", "text=all;image=all;pair=0,-1"]
    res = runner.invoke(app, [*base, "--out", str(item), *layers])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, [*base, "--out", str(full), "--pair-plan", "all", "--layers", "text=-1;image=-1"])
    assert res.exit_code == 0, res.output
    want = forward_matrix(adapter, synthetic_dir)
    with ActivationCache(full) as c:
        matrix, done = c.scores()
        assert c.score_kind == "match_probability" and done.all()
    np.testing.assert_allclose(matrix, want, rtol=1e-4, atol=1e-6)
    with ActivationCache(item) as c:
        assert set(c.header.layers) == {"text", "image", "pair"}
        assert json.loads(c.header.model_options) == {"score_head": "itm", "first_token": "cls"}

    out = tmp_path / "results"
    res = runner.invoke(app, ["run", "winoground-scores", "--cache", str(item), "--out", str(out), "--bootstrap", "10"])
    assert res.exit_code == 0, res.output
    assert_winoground_item_scores(out / "winoground-scores" / "blip-itm@bootstrap=10.scores.jsonl", want, atol=1e-6)
    wino = _csv_values(out / "winoground-scores" / "blip-itm@bootstrap=10.csv")
    for metric, value in winoground_percentages(want).items():
        assert wino[("all", metric)] == pytest.approx(value), metric
    res = runner.invoke(app, ["run", "recall", "--cache", str(full), "--out", str(out), "--bootstrap", "10"])
    assert res.exit_code == 0, res.output
    assert _csv_values(out / "recall" / "blip-itm@bootstrap=10.csv")[("i2t", "recall@1")] == pytest.approx(recall_i2t_at_1(want))

    # resuming the cache with the other score head is refused, naming the field
    one_error_line(runner.invoke(app, [*base, "--out", str(item), *layers, "--model-option", "score_head=itc"]), "model_options")


def test_cli_eval_sugarcrepe(
    tiny_blip_itm: Path, sugarcrepe_dir: Path, tmp_path: Path, adapter: BlipItmAdapter,
) -> None:
    coco = sugarcrepe_pictures(sugarcrepe_dir, tmp_path / "val2017")
    runner = CliRunner()
    base = ["eval", "sugarcrepe", "--model", "blip-itm", "--checkpoint", str(tiny_blip_itm), "--data-dir",
            str(sugarcrepe_dir), "--image-dir", str(coco), "--subsets", str(SC_SELECTION["subsets"]),
            "--limit", str(SC_SELECTION["limit"]), "--bootstrap", "10", "--device", "cpu"]
    items = load_sugarcrepe(sugarcrepe_dir, **SC_SELECTION, image_dir=coco)
    for head in ("itm", "itc"):
        out = tmp_path / head
        res = runner.invoke(app, [*base, "--out", str(out), "--model-option", f"score_head={head}"])
        assert res.exit_code == 0, res.output
        images = [it.images[0].load() for it in items for _ in (0, 1)]
        texts = [it.texts[k].text for it in items for k in (0, 1)]
        pos_neg = forward_scores(adapter, images, texts, itm=head == "itm").reshape(-1, 2)
        by_subset: dict[str, list[bool]] = {}
        for it, (pos, neg) in zip(items, pos_neg, strict=True):
            by_subset.setdefault(it.meta["subset"], []).append(bool(pos > neg))
        got = _csv_values(out / "sugarcrepe" / "blip-itm@bootstrap=10.csv")
        for subset, wins in by_subset.items():
            assert got[(subset, "accuracy")] == pytest.approx(100.0 * np.mean(wins)), subset
        manifest = json.loads((out / "sugarcrepe" / "manifest.json").read_text())
        run = next(iter(manifest["runs"].values())) if "runs" in manifest else manifest
        assert json.dumps(run).count("cosine" if head == "itc" else "match_probability") >= 1
