"""The pair-scoring engine (vlprobe.extract.scoring): one engine behind `probe extract` and `probe eval`.

Equal scores from both commands for CLIP, LXMERT and UNITER; distinct texts and images encoded
once, pairs in batches (never one forward per pair), dual encoders scored on batch-sized blocks
(never the full matrix), blind scorers; ``probe eval``'s scorer (vlprobe.extract.eval_scorer) reads
each distinct text and image once.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.extract.helpers import SC_SELECTION, sugarcrepe_pictures
from vlprobe.cli import app
from vlprobe.data.loading import load_dataset
from vlprobe.extract.cache.reader import ActivationCache
from vlprobe.extract.eval_scorer import load_scorer
from vlprobe.extract.models.clip import CLIPAdapter
from vlprobe.extract.models.lxmert import LxmertAdapter
from vlprobe.extract.models.uniter.adapter import UniterAdapter
from vlprobe.extract.regions.store import RegionStore
from vlprobe.extract.scoring import ImageSource, PairBatch, score_pairs
from vlprobe.registry import MODELS
from vlprobe.runs.score_files import caption_foil_scores, read_item_scores
from vlprobe.validation import InputError

SC = SC_SELECTION
# Scores of the same pairs computed in batches of other compositions: equal up to float32 rounding
# (BLAS may sum in another order for another batch shape), never bit for bit.
ATOL = 1e-5


def _cli(args: list[str]) -> Any:
    return CliRunner().invoke(app, args)


def _collect(batches: Any, n: int) -> np.ndarray:
    out = np.full(n, np.nan)
    seen = np.zeros(n, dtype=int)
    for got in batches:
        assert isinstance(got, PairBatch)
        assert np.all(np.diff(got.index) > 0), "a batch's pairs come in ascending order"
        out[got.index] = got.scores
        seen[got.index] += 1
    assert np.all(seen == 1), "every pair exactly once"
    return out


@pytest.fixture(scope="module")
def sc_images(sugarcrepe_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Synthetic pictures saved under the chosen SugarCrepe items' COCO file names."""
    return sugarcrepe_pictures(sugarcrepe_dir, tmp_path_factory.mktemp("sc-images") / "val2017")


@pytest.mark.parametrize("model", ["clip", "lxmert", "uniter"])
def test_extract_and_eval_give_the_same_scores(
    model: str, sugarcrepe_dir: Path, sc_images: Path, sugarcrepe_regions: Path, tiny_clip: Path, tiny_lxmert: Path,
    tiny_uniter: Path, tmp_path: Path,
) -> None:
    checkpoint = {"clip": tiny_clip, "lxmert": tiny_lxmert, "uniter": tiny_uniter / "uniter-base.pt"}[model]
    reads = MODELS.get(model).image_input
    inputs = ["--image-dir", str(sc_images)] if reads == "pixels" else ["--regions", str(sugarcrepe_regions)]
    common = ["--model", model, "--checkpoint", str(checkpoint), "--data-dir", str(sugarcrepe_dir), "--device", "cpu",
              "--subsets", SC["subsets"], "--limit", str(SC["limit"]), *inputs]
    cache = tmp_path / f"{model}.h5"
    res = _cli(["extract", *common, "--dataset", "sugarcrepe", "--out", str(cache), "-q", "--batch-size", "3",
                "--layers", "-1", "--poolings", "cls"])
    assert res.exit_code == 0, res.output
    res = _cli(["eval", "sugarcrepe", *common, "--out", str(tmp_path / "eval"), "--bootstrap", "20", "--batch-size", "4"])
    assert res.exit_code == 0, res.output
    # The run is named by the model and the settings it changed (the bootstrap count).
    ids, pos, neg = caption_foil_scores(read_item_scores(tmp_path / "eval" / "sugarcrepe" / f"{model}@bootstrap=20.scores.jsonl"))
    with ActivationCache(cache) as c:
        matrix, done = c.scores()
        assert list(c.table("items")["id"]) == ids
        kind = c.f["scores"].attrs["kind"]
    n = len(ids)
    rows, pos_cols = np.arange(n), 2 * np.arange(n)  # SugarCrepe: image i, texts 2i (positive) and 2i + 1
    assert n == 6 and done[rows, pos_cols].all() and done[rows, pos_cols + 1].all()
    np.testing.assert_allclose(pos, matrix[rows, pos_cols], rtol=0, atol=ATOL)
    np.testing.assert_allclose(neg, matrix[rows, pos_cols + 1], rtol=0, atol=ATOL)
    run = json.loads((tmp_path / "eval" / "sugarcrepe" / "manifest.json").read_text(encoding="utf-8"))["runs"][f"{model}@bootstrap=20"]
    assert run["score_kind"] == kind == {"clip": "cosine"}.get(model, "match_probability")
    if reads == "regions":
        with RegionStore(sugarcrepe_regions) as store:
            assert run["inputs"]["regions"]["fingerprint"] == store.fingerprint
    if model == "uniter":
        assert run["inputs"]["model_config"]["fingerprint"].startswith("sha256:")


# -- the engine itself ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def synthetic(synthetic_dir: Path) -> Any:
    return load_dataset("winoground", synthetic_dir, variants=synthetic_dir / "variants.jsonl")


def _all_pairs(n_images: int, n_texts: int) -> tuple[np.ndarray, np.ndarray]:
    img, txt = np.meshgrid(np.arange(n_images), np.arange(n_texts), indexing="ij")
    return txt.ravel(), img.ravel()


@pytest.mark.parametrize("model", ["lxmert", "uniter"])
def test_cross_encoder_prepares_each_text_and_image_once_and_batches_pairs(
    model: str, synthetic: Any, synthetic_regions: Path, tiny_lxmert: Path, tiny_uniter: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    adapter = (LxmertAdapter.load(str(tiny_lxmert)) if model == "lxmert"
               else UniterAdapter.load(str(tiny_uniter / "uniter-base.pt")))
    texts = [t.text for t in synthetic.texts()][:10]
    images = synthetic.images()[:5]
    t_idx, i_idx = _all_pairs(len(images), len(texts))
    t_idx, i_idx = t_idx[::-1].copy(), i_idx[::-1].copy()  # any order
    calls: dict[str, list[int]] = {"texts": [], "images": [], "pairs": []}
    for name in ("prepare_texts", "prepare_images", "encode_pairs"):
        original = getattr(adapter, name)

        def spy(*args: Any, _original: Any = original, _name: str = name, **kwargs: Any) -> Any:
            key = {"prepare_texts": "texts", "prepare_images": "images", "encode_pairs": "pairs"}[_name]
            calls[key].append(len(args[2]) if _name == "encode_pairs" else len(args[0]))
            return _original(*args, **kwargs)

        monkeypatch.setattr(adapter, name, spy)
    monkeypatch.setattr(adapter, "image_block", 2)
    with RegionStore(synthetic_regions) as store:
        source = ImageSource("regions", images, store)
        got = _collect(score_pairs(adapter, texts, source, t_idx, i_idx, batch_size=7), len(t_idx))
        monkeypatch.undo()
        everything = adapter.encode_pairs(adapter.prepare_texts(texts), adapter.prepare_images(store.get(
            [im.name for im in images])), t_idx, i_idx, None, ()).scores.numpy()
    assert calls["texts"] == [len(texts)]  # every text tokenised once
    assert calls["images"] == [2, 2, 1]  # every image prepared once, in blocks of image_block
    # pairs in batches of at most 7 inside each block of 2 images (20 pairs per block): never one per pair
    assert calls["pairs"] == [7, 7, 6, 7, 7, 6, 7, 3]
    np.testing.assert_allclose(got, everything, rtol=0, atol=ATOL)


def test_cross_encoder_pair_states_equal_the_adapter(synthetic: Any, synthetic_regions: Path, tiny_lxmert: Path) -> None:
    adapter = LxmertAdapter.load(str(tiny_lxmert))
    texts = [t.text for t in synthetic.texts()][:4]
    images = synthetic.images()[:3]
    t_idx, i_idx = _all_pairs(len(images), len(texts))
    layers = {"lang": [0, -1, 10], "vision": [3]}
    with RegionStore(synthetic_regions) as store:
        batches = list(score_pairs(adapter, texts, ImageSource("regions", images, store), t_idx, i_idx,
                                   layers=layers, poolings=("mean", "cls"), batch_size=5))
        want = adapter.encode_pairs(adapter.prepare_texts(texts), adapter.prepare_images(store.get([im.name for im in images])),
                                    t_idx, i_idx, layers, ("cls", "mean"))
    for stream, pools in want.states.items():
        for pooling, value in pools.items():
            got = np.concatenate([b.states[stream][pooling] for b in batches])
            assert got.shape == (len(t_idx), len(layers[stream]), 32)
            np.testing.assert_allclose(got, value.numpy(), rtol=0, atol=ATOL)
    np.testing.assert_allclose(np.concatenate([b.pooled["lang"] for b in batches]), want.pooled["lang"].numpy(), atol=ATOL)


def test_dual_encoder_encodes_once_and_scores_batch_blocks(synthetic: Any, tiny_clip: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    adapter = CLIPAdapter.load(str(tiny_clip))
    texts = [t.text for t in synthetic.texts()][:9]
    images = synthetic.images()[:6]
    t_idx, i_idx = _all_pairs(len(images), len(texts))
    encoded: dict[str, int] = {"text": 0, "image": 0}
    shapes: list[tuple[int, int]] = []
    encode, scores_from_pooled = adapter.encode, CLIPAdapter.scores_from_pooled

    def count(stream: str, inputs: Any, layers: Any) -> Any:
        encoded[stream] += len(inputs)
        return encode(stream, inputs, layers)

    def record(img: np.ndarray, txt: np.ndarray, info: Any = None) -> np.ndarray:
        shapes.append((len(img), len(txt)))
        return scores_from_pooled(img, txt, info)

    monkeypatch.setattr(adapter, "encode", count)
    monkeypatch.setattr(CLIPAdapter, "scores_from_pooled", record)
    got = _collect(score_pairs(adapter, texts, ImageSource("pixels", images), t_idx, i_idx, batch_size=8), len(t_idx))
    monkeypatch.undo()
    assert encoded == {"text": len(texts), "image": len(images)}
    assert max(r * c for r, c in shapes) <= 8 * 8 and len(shapes) == -(-len(t_idx) // 8)  # never the 6 x 9 matrix
    img = adapter.encode("image", [im.load() for im in images], [0]).pooled.numpy()
    txt = adapter.encode("text", texts, [0]).pooled.numpy()
    np.testing.assert_allclose(got, CLIPAdapter.scores_from_pooled(img, txt)[i_idx, t_idx], rtol=0, atol=ATOL)


def test_text_scorer_scores_each_distinct_text_once(monkeypatch: pytest.MonkeyPatch) -> None:
    scorer = MODELS.get("caption-length").load(None)
    seen: list[list[str]] = []
    original = scorer.score_texts
    monkeypatch.setattr(scorer, "score_texts", lambda texts, batch_size=32: seen.append(list(texts)) or original(texts, batch_size))
    texts = ["a b", "ccc", "d"]
    t_idx = np.array([2, 0, 0, 1, 2])
    got = _collect(score_pairs(scorer, texts, None, t_idx, np.zeros(5, dtype=int), batch_size=2), 5)
    assert seen == [["a b", "ccc", "d"]]
    np.testing.assert_array_equal(got, [-1, -3, -3, -3, -1])


def test_pair_scorer_dedupes_images_and_texts(synthetic: Any, tiny_clip: Path) -> None:
    scorer = load_scorer("clip", str(tiny_clip))
    images = synthetic.images()[:2]
    texts = [t.text for t in synthetic.texts()][:2]
    pairs = [(images[0], texts[1]), (images[1], texts[1]), (images[0], texts[1]), (images[0], texts[0])]
    got = scorer.score([p[0] for p in pairs], [p[1] for p in pairs])
    assert got.dtype == np.float64 and got[0] == got[2]  # the same pair read once: the same number
    one = scorer.score([images[1]], [texts[1]])
    np.testing.assert_allclose(got[1], one[0], rtol=0, atol=ATOL)
    assert scorer.image_input == "pixels" and scorer.score_kind == "cosine" and scorer.model_options == {}


def test_score_pairs_checks_its_arguments(tiny_clip: Path, synthetic: Any) -> None:
    adapter = CLIPAdapter.load(str(tiny_clip))
    source = ImageSource("pixels", synthetic.images()[:2])
    with pytest.raises(InputError, match="batch_size must be a positive integer"):
        list(score_pairs(adapter, ["a"], source, [0], [0], batch_size=0))
    with pytest.raises(InputError, match=r"text_idx: rows must lie in 0\.\.0"):
        list(score_pairs(adapter, ["a"], source, [1], [0]))
    with pytest.raises(InputError, match=r"image_idx: rows must lie in 0\.\.1"):
        list(score_pairs(adapter, ["a"], source, [0], [2]))
    with pytest.raises(InputError, match="equal length"):
        list(score_pairs(adapter, ["a"], source, [0, 0], [0]))
    with pytest.raises(InputError, match="layers: clip has no pair streams"):
        list(score_pairs(adapter, ["a"], source, [0], [0], layers={"text": [0]}))
    with pytest.raises(InputError, match="region store is needed"):
        ImageSource("regions", synthetic.images())
    with pytest.raises(InputError, match=r"image_input: unknown image_input .rgb.* \(known: pixels, regions, none\)"):
        ImageSource("rgb", synthetic.images())
