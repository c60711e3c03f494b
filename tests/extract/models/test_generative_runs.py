"""The generative models end to end on their tiny fixtures: ``probe extract`` (item plan with caption
variants; bfloat16; shards and merge), the cache's scores and positions, the probing experiments
on the cache, and ``probe eval sugarcrepe`` with both scores."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.extract.helpers import SC_SELECTION, sugarcrepe_pictures
from vlprobe.cli import app
from vlprobe.data.loading import load_dataset
from vlprobe.extract.cache.merge import merge_shards
from vlprobe.extract.cache.reader import ActivationCache
from vlprobe.extract.models.generative import POSITION_COLUMNS
from vlprobe.extract.scoring import ImageSource, score_pairs
from vlprobe.registry import MODELS

GENERATIVE = ("llava", "qwen2-vl")
STREAMS = ("caption", "image", "joint")
MLP = {"depth": 2, "width": 8, "lr": 1e-2, "epochs": 2, "batch_size": 32}


@pytest.fixture(scope="module")
def checkpoints(tiny_llava: Path, tiny_qwen2_vl: Path) -> dict[str, Path]:
    return {"llava": tiny_llava, "qwen2-vl": tiny_qwen2_vl}


@pytest.fixture(scope="module")
def item_caches(tmp_path_factory: pytest.TempPathFactory, checkpoints: dict[str, Path], synthetic_dir: Path) -> Callable[[str], Path]:
    """``item_caches(model)``: ``probe extract`` of the synthetic Winoground with its variants, every
    layer, cls/mean/max (item plan), made once."""
    made: dict[str, Path] = {}

    def get(model: str) -> Path:
        if model not in made:
            out = tmp_path_factory.mktemp(f"gen-{model}") / "item.h5"
            res = CliRunner().invoke(app, [
                "extract", "--model", model, "--checkpoint", str(checkpoints[model]), "--data-dir", str(synthetic_dir),
                "--variants", str(synthetic_dir / "variants.jsonl"), "--layers", "all", "--poolings", "cls,mean,max",
                "--device", "cpu", "--batch-size", "16", "--out", str(out), "--quiet",
            ])
            assert res.exit_code == 0, res.output
            made[model] = out
        return made[model]

    return get


@pytest.mark.parametrize("model", GENERATIVE)
def test_extract_stores_streams_scores_and_positions(model: str, item_caches: Callable[[str], Path],
                                                     checkpoints: dict[str, Path], synthetic_dir: Path) -> None:
    with ActivationCache(item_caches(model)) as c:
        assert c.complete and c.streams == sorted(STREAMS) and c.score_kind == "vqascore"
        pairs = c.pairs()
        assert pairs["done"].all() and ((pairs["score"] > 0) & (pairs["score"] < 1)).all()
        for s in STREAMS:
            assert c.done(s).all()
            assert set(c.poolings(s)) == ({"mean", "max"} if s == "image" else {"cls", "mean", "max"})
            for p in c.poolings(s):
                assert np.isfinite(c.states(s, p)).all()
        assert c.position_columns() == POSITION_COLUMNS
        pos = c.positions()
        assert (pos["image_stop"] > pos["image_start"]).all() and (pos["caption_stop"] > pos["caption_start"]).all()
        assert (pos["answer"] + 1 == pos["target_start"]).all() and (pos["target_stop"] == pos["length"]).all()
        assert json.loads(c.header.model_options)["score"] == "vqascore"
        texts = [str(t) for t in c.table("texts")["text"]]
        image_rows, text_rows, stored = pairs["image"], pairs["text"], pairs["score"]
    # a few pairs scored again through the engine (other batches, other padding): the same scores
    adapter = MODELS.get(model).load(str(checkpoints[model]), device="cpu")
    dataset = load_dataset("winoground", synthetic_dir, variants=synthetic_dir / "variants.jsonl")
    pick = np.array([0, 5, 17, len(stored) - 1])
    got = np.empty(len(pick))
    for b in score_pairs(adapter, texts, ImageSource("pixels", dataset.images()), text_rows[pick], image_rows[pick],
                         batch_size=3):
        got[b.index] = b.scores
    # batched with other pairs vs again in other batches: float32 sums in other orders
    np.testing.assert_allclose(got, stored[pick], atol=1e-5, rtol=0)


@pytest.mark.parametrize("model", GENERATIVE)
def test_probing_experiments_run_on_the_cache(model: str, item_caches: Callable[[str], Path], tmp_path: Path) -> None:
    from vlprobe.experiments.separability import SeparabilityConfig, run_separability
    from vlprobe.experiments.task_adaptation import TaskAdaptationConfig, run_task_adaptation
    from vlprobe.experiments.variant_probe import VariantProbeConfig, run_variant_probe
    from vlprobe.experiments.variant_similarity import (
        VariantSimilarityConfig,
        run_variant_similarity,
    )
    from vlprobe.experiments.winoground_scores import WinogroundScoresConfig, run_winoground_scores

    cache, out = item_caches(model), tmp_path / "results"
    runs = [
        run_winoground_scores(WinogroundScoresConfig(out=out, cache=cache, bootstrap=10)),
        run_variant_similarity(VariantSimilarityConfig(out=out, cache=cache, bootstrap=10)),
        run_separability(SeparabilityConfig(out=out, cache=cache, streams=("caption", "joint"), seeds=1,
                                            permutations=100, layers="0,-1")),
        run_task_adaptation(TaskAdaptationConfig(out=out, cache=cache, streams=("caption",), seeds=1, layers="-1",
                                                 **MLP)),
        run_variant_probe(VariantProbeConfig(out=out, cache=cache, streams=("caption",), seeds=1, draws=1,
                                             layers="0,-1", **MLP)),
    ]
    for csv_path, _manifest, rows in runs:
        assert csv_path.is_file() and rows, csv_path
        assert all(r["model"] == model for r in rows)
    sep = [r for r in runs[2][2] if r["metric"] == "separable"]
    assert {r["stream"] for r in sep} == {"caption", "joint"}


def test_shards_merge_with_their_positions(item_caches: Callable[[str], Path], checkpoints: dict[str, Path],
                                          synthetic_dir: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    base = ["extract", "--model", "qwen2-vl", "--checkpoint", str(checkpoints["qwen2-vl"]), "--data-dir",
            str(synthetic_dir), "--variants", str(synthetic_dir / "variants.jsonl"), "--device", "cpu", "--quiet",
            "--no-pair-states", "--batch-size", "16", "--dtype", "bfloat16"]
    shards = [tmp_path / f"s{k}.h5" for k in range(2)]
    for k, shard in enumerate(shards):
        res = runner.invoke(app, [*base, "--shard", f"{k}/2", "--out", str(shard)])
        assert res.exit_code == 0, res.output
    merged = merge_shards(shards, tmp_path / "merged.h5")
    with ActivationCache(merged) as m, ActivationCache(item_caches("qwen2-vl")) as ref:
        assert m.header.dtype == "bfloat16" and m.streams == []
        for col, values in ref.positions().items():
            np.testing.assert_array_equal(m.positions()[col], values)
        # bfloat16 weights against float32: a half-precision forward, compared loosely
        np.testing.assert_allclose(m.pairs()["score"], ref.pairs()["score"], atol=2e-3, rtol=0.1)


def _accuracy(path: Path) -> dict[str, float]:
    with open(path, encoding="utf-8", newline="") as fh:
        return {r["subset"]: float(r["value"]) for r in csv.DictReader(fh) if r["metric"] == "accuracy"}


@pytest.mark.parametrize("model", GENERATIVE)
def test_eval_sugarcrepe_with_both_scores(model: str, checkpoints: dict[str, Path], sugarcrepe_dir: Path,
                                          tmp_path: Path) -> None:
    from vlprobe.data.sugarcrepe import load_sugarcrepe

    coco = sugarcrepe_pictures(sugarcrepe_dir, tmp_path / "val2017")
    items = load_sugarcrepe(sugarcrepe_dir, **SC_SELECTION, image_dir=coco)
    runner = CliRunner()
    for score in ("vqascore", "caption-logprob"):
        out = tmp_path / score
        res = runner.invoke(app, [
            "eval", "sugarcrepe", "--model", model, "--checkpoint", str(checkpoints[model]), "--data-dir",
            str(sugarcrepe_dir), "--image-dir", str(coco), "--subsets", str(SC_SELECTION["subsets"]), "--limit",
            str(SC_SELECTION["limit"]), "--bootstrap", "10", "--device", "cpu", "--out", str(out),
            "--model-option", f"score={score}",
        ])
        assert res.exit_code == 0, res.output
        adapter = MODELS.get(model).load(str(checkpoints[model]), device="cpu", score=score)
        texts = [it.texts[k].text for it in items for k in (0, 1)]
        images = [it.images[0] for it in items for _ in (0, 1)]
        idx = np.arange(len(texts))
        scores = np.empty(len(texts))
        for b in score_pairs(adapter, texts, ImageSource("pixels", images), idx, idx):
            scores[b.index] = b.scores
        by_subset: dict[str, list[bool]] = {}
        for it, (pos, neg) in zip(items, scores.reshape(-1, 2), strict=True):
            by_subset.setdefault(it.meta["subset"], []).append(bool(pos > neg))
        got = _accuracy(next((out / "sugarcrepe").glob("*.csv")))
        for subset, wins in by_subset.items():
            assert got[subset] == pytest.approx(100.0 * np.mean(wins)), subset


@pytest.mark.parametrize("model", GENERATIVE)
def test_patch_refuses_the_caption_logprob_score_in_one_line(
    model: str, checkpoints: dict[str, Path], synthetic_dir: Path, tmp_path: Path, one_error_line: Callable[..., str],
) -> None:
    """With score=caption-logprob each caption scores its own tokens: a donor's states cannot give
    the donor's score, so patching refuses it (erasure runs on either score)."""
    out = tmp_path / "results"
    res = CliRunner().invoke(app, [
        "run", "patch", "--model", model, "--checkpoint", str(checkpoints[model]), "--model-option",
        "score=caption-logprob", "--dataset", "winoground", "--data-dir", str(synthetic_dir), "--limit", "1",
        "--device", "cpu", "--out", str(out),
    ])
    one_error_line(res, f"model_options: patch reads {model}'s VQAScore (score=vqascore)",
                   "score=caption-logprob", "cannot give the donor's score")
    assert not list(out.glob("patch/*.csv"))


@pytest.mark.parametrize("model", GENERATIVE)
def test_layer_sites_are_the_language_models_layers(model: str, checkpoints: dict[str, Path], synthetic_dir: Path) -> None:
    """Every stream edits the same modules (the input embeddings, then each decoder block); its
    positions in each pair's joint sequence come with the batch (stream_positions)."""
    from vlprobe.experiments.minimal_pairs import editable_streams, text_side_streams
    from vlprobe.validation import InputError

    adapter = MODELS.get(model).load(str(checkpoints[model]), device="cpu")
    blocks = list(adapter.language_model.layers)
    for stream in STREAMS:
        sites = adapter.layer_sites(stream)
        assert len(sites) == adapter.streams[stream].n_layers == len(blocks) + 1
        assert sites[0].module is adapter.embedding_output and [s.module for s in sites[1:]] == blocks
        assert all(s.index is None and not s.tail for s in sites)
    with pytest.raises(InputError, match=rf"^stream: {model} has streams caption, image, joint, got 'pair'$"):
        adapter.layer_sites("pair")
    assert editable_streams(adapter) == list(STREAMS)
    assert text_side_streams(adapter, list(STREAMS)) == ["caption", "joint"]
    items = [it for it in load_dataset("winoground", synthetic_dir).items][:2]
    texts = adapter.prepare_texts([it.captions[k].text for it in items for k in (0, 1)])
    images = adapter.prepare_images([it.images[0].load() for it in items])
    t_idx, i_idx = np.array([0, 1, 2, 3]), np.array([0, 0, 1, 1])
    batch = adapter._batch(texts, images, t_idx, i_idx)
    col = {c: batch.positions[:, k] for k, c in enumerate(POSITION_COLUMNS)}
    for stream, (a, b, cls) in {"caption": ("caption_start", "caption_stop", "caption_stop"),
                                "image": ("image_start", "image_stop", None),
                                "joint": (None, "length", "answer")}.items():
        at = adapter.stream_positions(stream, texts, images, t_idx, i_idx)
        assert at.width == batch.ids.shape[1]
        for r in range(4):
            start = 0 if a is None else int(col[a][r])
            want = list(range(start, int(col[b][r])))
            assert at.index[r, : len(want)].tolist() == want and (at.index[r, len(want):] == -1).all()
            assert at.mask[r].sum() == len(want)
            assert at.ids[r, : len(want)].tolist() == batch.ids[r, want].tolist()
            if cls is None:
                assert at.cls is None
            else:  # caption: its last token; joint: the answer position
                assert int(at.index[r, int(at.cls[r])]) == int(col[cls][r]) - (cls == "caption_stop")
