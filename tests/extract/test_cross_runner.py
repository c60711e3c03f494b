"""Extraction with cross-encoders (LXMERT, UNITER): pair plans, one pass for streams and scores,
the cache's /pairs, resume (also after SIGKILL), shards + merge, refusals, CLI errors."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from typer.testing import CliRunner

from tests.extract.helpers import kill_when
from vlprobe.cli import app
from vlprobe.data.loading import load_dataset
from vlprobe.extract.cache.merge import merge_shards
from vlprobe.extract.cache.reader import ActivationCache
from vlprobe.extract.runner import ExtractConfig, extract, pair_rows, tables_from_dataset

MODELS = ("lxmert", "uniter")
STREAMS = {"lxmert": ("lang", "vision"), "uniter": ("text", "image")}
N_ITEMS, N_IMAGES, N_TEXTS = 12, 24, 141


def _item_pairs(synthetic_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    dataset = load_dataset("winoground", synthetic_dir, variants=synthetic_dir / "variants.jsonl")
    return pair_rows(tables_from_dataset(dataset), "item")


# -- the item plan ---------------------------------------------------------------------------------


@pytest.mark.parametrize("model", MODELS)
def test_item_plan_holds_every_pair_of_every_item(
    model: str, cross_reference: Callable[[str], Path], synthetic_dir: Path, synthetic_regions: Path,
) -> None:
    image, text = _item_pairs(synthetic_dir)
    n_pairs = len(image)
    with ActivationCache(cross_reference(model)) as c:
        assert c.complete and c.header.pair_plan == "item" and c.header.pair_states is True
        from vlprobe.extract.regions.store import RegionStore

        with RegionStore(synthetic_regions) as store:
            assert c.header.regions_fingerprint == store.fingerprint
        pairs = c.pairs()
        np.testing.assert_array_equal(pairs["image"], image)
        np.testing.assert_array_equal(pairs["text"], text)
        assert pairs["done"].all() and np.isfinite(pairs["score"]).all()
        assert ((pairs["score"] > 0) & (pairs["score"] < 1)).all()
        images, texts = c.table("images"), c.table("texts")
        assert (images["item"][pairs["image"]] == texts["item"][pairs["text"]]).all()
        per_item = np.bincount(images["item"][pairs["image"]], minlength=N_ITEMS)
        texts_per_item = np.bincount(texts["item"], minlength=N_ITEMS)
        np.testing.assert_array_equal(per_item, 2 * texts_per_item)  # 2 images x (2 captions + variants)
        matrix, done = c.scores()
        assert done.sum() == n_pairs
        np.testing.assert_array_equal(matrix[pairs["image"], pairs["text"]], pairs["score"])
        assert np.isnan(matrix[~done]).all()
        assert c.f["scores"].attrs["kind"] == "match_probability"
        assert c.streams == sorted(STREAMS[model])
        for s in STREAMS[model]:
            assert c.done(s).all() and len(c.done(s)) == n_pairs
            np.testing.assert_array_equal(c.rows(s)["image"], image)
            np.testing.assert_array_equal(c.rows(s)["text"], text)
            for p in c.poolings(s):
                assert np.isfinite(c.states(s, p)).all()


def test_lxmert_cache_golden_tree(cross_reference: Callable[[str], Path], h5_tree: Callable[[Path], Any], synthetic_dir: Path) -> None:
    n = len(_item_pairs(synthetic_dir)[0])
    tree = {k: v for k, v in h5_tree(cross_reference("lxmert")).items() if k.startswith(("pairs", "streams", "scores"))}
    assert tree == {
        "pairs": "group",
        "pairs/done": ("bool", (n,)),
        "pairs/image": ("int32", (n,)),
        "pairs/score": ("float32", (n,)),
        "pairs/text": ("int32", (n,)),
        "scores": "group",
        "scores/done": ("bool", (N_IMAGES, N_TEXTS)),
        "scores/matrix": ("float32", (N_IMAGES, N_TEXTS)),
        "streams": "group",
        "streams/lang": "group",
        "streams/lang/cls": ("float32", (n, 15, 32)),
        "streams/lang/done": ("bool", (n,)),
        "streams/lang/image": ("int32", (n,)),
        "streams/lang/layers": ("int16", (15,)),
        "streams/lang/max": ("float32", (n, 15, 32)),
        "streams/lang/mean": ("float32", (n, 15, 32)),
        "streams/lang/pooled": ("float32", (n, 32)),
        "streams/lang/text": ("int32", (n,)),
        "streams/vision": "group",
        "streams/vision/done": ("bool", (n,)),
        "streams/vision/image": ("int32", (n,)),
        "streams/vision/layers": ("int16", (11,)),
        "streams/vision/max": ("float32", (n, 11, 32)),
        "streams/vision/mean": ("float32", (n, 11, 32)),
        "streams/vision/text": ("int32", (n,)),
    }
    with ActivationCache(cross_reference("lxmert")) as c:
        assert c.layer_kinds("lang") == ["embed"] + ["lang"] * 9 + ["cross"] * 5
        assert c.layer_kinds("vision") == ["embed"] + ["rel"] * 5 + ["cross"] * 5
        assert set(c.f["pairs"].attrs) == {"n_rows", "row_start", "row_stop"}


def test_uniter_cache_golden_header(
    cross_reference: Callable[[str], Path], tiny_uniter: Path, synthetic_regions: Path,
) -> None:
    """The header fields cross-encoders add (cache.py's schema and docs/caches.md)."""
    from vlprobe.extract.cache.schema import COMPARED_FIELDS
    from vlprobe.provenance import sha256_file

    with h5py.File(cross_reference("uniter"), "r") as f:
        a = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
        assert a["pair_plan"] == "item" and bool(a["pair_states"]) is True
        assert a["regions_fingerprint"] == "sha256:" + sha256_file(synthetic_regions)
        assert a["config_fingerprint"] == "sha256:" + sha256_file(tiny_uniter / "uniter-base.json")
        assert a["tokenizer_fingerprint"].startswith("sha256:") and len(a["tokenizer_fingerprint"]) == 7 + 64
        assert a["checkpoint_fingerprint"] == "sha256:" + sha256_file(tiny_uniter / "uniter-base.pt")
        assert a["dataset_selection"] == ""  # no loader option chooses items
        assert json.loads(a["dataset_options"]) == {}
        assert json.loads(a["layers"]) == {"image": [0, 1, 2], "text": [0, 1, 2]}
        assert set(COMPARED_FIELDS) <= set(a)
        n = len(f["pairs/done"])
        assert {k: int(v) for k, v in f["pairs"].attrs.items()} == {"n_rows": n, "row_start": 0, "row_stop": n}
        assert {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f["scores"].attrs.items()} == {
            "kind": "match_probability", "orientation": "image x text",
        }
    with ActivationCache(cross_reference("uniter")) as c:  # what manifests record about it as an input
        prov = c.provenance()
        for name in ("regions_fingerprint", "config_fingerprint", "tokenizer_fingerprint", "dataset_selection"):
            assert prov[name] == a[name]
        assert prov["pair_states"] is True and prov["score_kind"] == "match_probability"


def test_cached_states_equal_the_adapter(cross_reference: Callable[[str], Path], tiny_lxmert: Path, synthetic_regions: Path) -> None:
    """Rows of the cache are the pairs they claim to be: recompute a few with a plain forward."""
    import torch

    from vlprobe.extract.models.lxmert import LxmertAdapter
    from vlprobe.extract.models.pooling import pool_states
    from vlprobe.extract.regions.store import RegionStore

    adapter = LxmertAdapter.load(str(tiny_lxmert))
    with ActivationCache(cross_reference("lxmert")) as c:
        pairs, texts, names = c.pairs(), c.table("texts")["text"], c.table("images")["name"]
        rows = np.array([0, 7, len(pairs["image"]) - 1])
        with RegionStore(synthetic_regions) as store:
            reg = store.get([names[i] for i in pairs["image"][rows]])
        t_tab = adapter.prepare_texts([texts[t] for t in pairs["text"][rows]])
        i_tab = adapter.prepare_images(reg)
        scores, lang, vision, lmask, vmask = adapter.full_forward(t_tab, i_tab, np.arange(3), np.arange(3))
        np.testing.assert_allclose(pairs["score"][rows], scores.numpy(), rtol=0, atol=1e-6)
        ref_lang = pool_states(torch.stack(lang, 1), lmask, torch.zeros(3, dtype=torch.long), ["cls", "mean"])
        ref_vis = pool_states(torch.stack(vision, 1), vmask, None, ["max"])
        np.testing.assert_allclose(c.states("lang", "cls")[rows], ref_lang["cls"].numpy(), rtol=0, atol=2e-5)
        np.testing.assert_allclose(c.states("lang", "mean")[rows], ref_lang["mean"].numpy(), rtol=0, atol=2e-5)
        np.testing.assert_allclose(c.states("vision", "max")[rows], ref_vis["max"].numpy(), rtol=0, atol=2e-5)


# -- the all plan ----------------------------------------------------------------------------------


@pytest.mark.parametrize("model", MODELS)
def test_all_plan_scores_every_pair_without_states_by_default(
    model: str, cross_config: Callable[..., ExtractConfig], cross_reference: Callable[[str], Path],
    synthetic_dir: Path, tmp_path: Path,
) -> None:
    out = tmp_path / "all.h5"
    result = extract(cross_config(model, out, variants=None, pair_plan="all", batch_size=64))
    assert result.rows_total == {"pairs": N_IMAGES * N_IMAGES}
    with ActivationCache(out) as c, ActivationCache(cross_reference(model)) as ref:
        assert c.header.pair_states is False and c.header.layers == {}
        assert c.streams == [] and "streams" not in c.f
        matrix, done = c.scores()
        assert done.all() and matrix.shape == (N_IMAGES, N_IMAGES)
        # the item plan's scores of the original captions are the same numbers
        r_matrix, r_done = ref.scores()
        originals = np.flatnonzero(ref.table("texts")["parent"] < 0)
        sub_done = r_done[:, originals]
        np.testing.assert_allclose(matrix[sub_done], r_matrix[:, originals][sub_done], rtol=0, atol=1e-6)
    from vlprobe.experiments.recall import RecallConfig, run_recall

    _, _, rows = run_recall(RecallConfig(cache=out, out=tmp_path / "results"))
    assert {r["subset"] for r in rows} == {"i2t", "t2i"} and all(0 <= r["value"] <= 100 for r in rows)


def test_all_plan_with_pair_states(cross_config: Callable[..., ExtractConfig], tmp_path: Path) -> None:
    out = tmp_path / "all-states.h5"
    extract(cross_config("uniter", out, variants=None, pair_plan="all", pair_states=True, layers="-1", poolings=("mean",)))
    with ActivationCache(out) as c:
        assert c.header.pair_states is True
        assert c.states("text", "mean").shape == (N_IMAGES * N_IMAGES, 1, 32)
        assert c.poolings("image") == ["mean"]
        assert c.layers("image") == [2]


def test_winoground_scores_from_an_lxmert_cache(cross_reference: Callable[[str], Path], tmp_path: Path) -> None:
    from vlprobe.experiments.winoground_scores import WinogroundScoresConfig, run_winoground_scores

    _, _, rows = run_winoground_scores(WinogroundScoresConfig(out=tmp_path, cache=cross_reference("lxmert")))
    assert {r["metric"] for r in rows if r["subset"] == "all"} >= {"text", "image", "group"}


# -- resume, kill, shards --------------------------------------------------------------------------


@pytest.mark.parametrize("model", MODELS)
def test_resume_recomputes_exactly_the_pairs_not_done(
    model: str, cross_config: Callable[..., ExtractConfig], cross_reference: Callable[[str], Path],
    copy_cache: Callable[[Path, Path], Path], assert_caches_equal: Callable[..., None], tmp_path: Path,
) -> None:
    out = copy_cache(cross_reference(model), tmp_path / "partial.h5")
    lost, sentinel = [1, 2, 40, 41, 42, 100], 5
    with h5py.File(out, "r+") as f:
        f.attrs["complete"] = False
        f["pairs/done"][lost] = False
        f["pairs/score"][lost] = np.nan
        f["pairs/score"][sentinel] = 0.25
        for s in STREAMS[model]:
            f[f"streams/{s}/done"][lost] = False
            f[f"streams/{s}/mean"][lost] = np.nan
    result = extract(cross_config(model, out, batch_size=4))
    assert result.rows_written["pairs"] == len(lost)
    with h5py.File(out, "r+") as f, h5py.File(cross_reference(model), "r") as ref:
        assert f["pairs/score"][sentinel] == np.float32(0.25)  # a done pair is left alone
        f["pairs/score"][sentinel] = ref["pairs/score"][sentinel]
        f["scores/matrix"][...] = ref["scores/matrix"][()]
    assert_caches_equal(out, cross_reference(model))


def _pairs_done(path: Path) -> int | None:
    try:
        with h5py.File(path, "r", locking=False) as f:
            return int(f["pairs/done"][()].sum())
    except (OSError, KeyError):
        return None


@pytest.mark.parametrize("model", MODELS)
def test_resume_after_sigkill(
    model: str, cross_config: Callable[..., ExtractConfig], cross_reference: Callable[[str], Path],
    assert_caches_equal: Callable[..., None], tmp_path: Path,
) -> None:
    out = tmp_path / "killed.h5"
    cfg = cross_config(model, out)
    cmd = [
        sys.executable, "-m", "vlprobe", "extract", "--model", model, "--checkpoint", cfg.checkpoint,
        "--data-dir", str(cfg.data_dir), "--variants", str(cfg.variants), "--regions", str(cfg.regions),
        "--out", str(out), "--batch-size", "1", "--device", "cpu", "--quiet",
    ]
    seen, returncode, stderr = kill_when(cmd, out, _pairs_done, lambda done: done >= 5)
    assert seen is not None, f"the run ended before it could be killed (rc {returncode}): {stderr[-500:]}"
    with ActivationCache(out) as c:
        assert not c.complete
        n_done = int(c.pairs()["done"].sum())
        assert n_done >= seen and n_done < len(c.pairs()["done"])
        for s in STREAMS[model]:
            assert (c.done(s) >= c.pairs()["done"]).all()  # a pair is done only once its states are
    result = extract(cross_config(model, out))
    assert result.rows_written["pairs"] == result.rows_total["pairs"] - n_done
    assert_caches_equal(out, cross_reference(model))


@pytest.mark.parametrize("model", MODELS)
def test_shards_merge_into_the_unsharded_run(
    model: str, cross_config: Callable[..., ExtractConfig], cross_reference: Callable[[str], Path],
    assert_caches_equal: Callable[..., None], tmp_path: Path,
) -> None:
    shards = [tmp_path / f"s{k}.h5" for k in range(3)]
    for k, p in enumerate(shards):
        extract(cross_config(model, p, shard=f"{k}/3", batch_size=7))
    blocks = []
    for p in shards:
        with ActivationCache(p) as c:
            g = c.f["pairs"]
            blocks.append((int(g.attrs["row_start"]), int(g.attrs["row_stop"])))
            m, d = c.scores()  # a shard scores its own block
            assert d.sum() == blocks[-1][1] - blocks[-1][0]
    assert blocks[0][0] == 0 and blocks[0][1] == blocks[1][0] and blocks[1][1] == blocks[2][0]
    merged = tmp_path / "merged.h5"
    merge_shards([shards[1], shards[2], shards[0]], merged)
    assert_caches_equal(merged, cross_reference(model))
    with ActivationCache(merged) as m, ActivationCache(cross_reference(model)) as r:
        assert m.header == r.header and m.complete
        assert m.f["scores"].attrs["kind"] == "match_probability"


def test_scores_only_shards_merge_and_refuse_pairs_not_done(
    cross_config: Callable[..., ExtractConfig], assert_caches_equal: Callable[..., None], tmp_path: Path,
) -> None:
    whole = tmp_path / "whole.h5"
    extract(cross_config("uniter", whole, variants=None, pair_plan="all"))
    shards = [tmp_path / f"s{k}.h5" for k in range(2)]
    for k, p in enumerate(shards):
        extract(cross_config("uniter", p, shard=f"{k}/2", variants=None, pair_plan="all"))
    merge_shards(shards, tmp_path / "merged.h5")
    assert_caches_equal(tmp_path / "merged.h5", whole)
    with ActivationCache(tmp_path / "merged.h5") as m:
        assert m.streams == [] and m.scores()[1].all()
    with h5py.File(shards[1], "r+") as f:
        f["pairs/done"][3] = False
    with pytest.raises(ValueError, match=r"s1\.h5 is incomplete in its pairs"):
        merge_shards(shards, tmp_path / "m.h5")
    assert not (tmp_path / "m.h5").exists()


# -- refusals --------------------------------------------------------------------------------------


def test_resume_with_other_regions_is_refused(
    cross_config: Callable[..., ExtractConfig], cross_reference: Callable[[str], Path],
    copy_cache: Callable[[Path, Path], Path], synthetic_dir: Path, tmp_path: Path,
) -> None:
    from vlprobe.fixtures.regions import random_regions

    names = sorted(p.stem for p in (synthetic_dir / "images").glob("*.png"))
    other = random_regions(tmp_path / "other.h5", names, n_boxes=8, min_boxes=3, seed=1)
    out = copy_cache(cross_reference("lxmert"), tmp_path / "c.h5")
    with pytest.raises(ValueError, match=r"other settings .*regions_fingerprint"):
        extract(cross_config("lxmert", out, regions=other))


def test_resume_with_other_uniter_config_or_plan_is_refused(
    cross_config: Callable[..., ExtractConfig], cross_reference: Callable[[str], Path],
    copy_cache: Callable[[Path, Path], Path], tiny_uniter: Path, tmp_path: Path,
) -> None:
    import json

    out = copy_cache(cross_reference("uniter"), tmp_path / "c.h5")
    config = json.loads((tiny_uniter / "uniter-base.json").read_text())
    (tmp_path / "cfg.json").write_text(json.dumps({**config, "note": "edited"}))
    with pytest.raises(ValueError, match="config_fingerprint"):
        extract(cross_config("uniter", out, model_config=tmp_path / "cfg.json"))
    with pytest.raises(ValueError, match="pair_states"):
        extract(cross_config("uniter", out, pair_states=False))


def test_missing_image_features_are_refused(cross_config: Callable[..., ExtractConfig], synthetic_dir: Path, tmp_path: Path) -> None:
    from vlprobe.fixtures.regions import random_regions

    names = sorted(p.stem for p in (synthetic_dir / "images").glob("*.png"))
    partial = random_regions(tmp_path / "partial.h5", [n for n in names if n != "ex_3_img_1"], n_boxes=4)
    with pytest.raises(ValueError, match=r"regions: no features for image 'ex_3_img_1' in partial\.h5 \(1 of the dataset's 24"):
        extract(cross_config("lxmert", tmp_path / "c.h5", regions=partial))
    assert not (tmp_path / "c.h5").exists()


@pytest.mark.parametrize("model", MODELS)
def test_regions_of_another_width_are_refused_before_the_cache_is_made(
    model: str, cross_config: Callable[..., ExtractConfig], synthetic_dir: Path, tmp_path: Path,
) -> None:
    """Otherwise the run stops inside the pair pass, leaving a cache stamped with the wrong regions."""
    from vlprobe.fixtures.regions import random_regions

    names = sorted(p.stem for p in (synthetic_dir / "images").glob("*.png"))
    narrow = random_regions(tmp_path / "narrow.h5", names, n_boxes=4, dim=16)
    with pytest.raises(ValueError, match=r"regions: narrow\.h5 holds 16-d features; .* reads 2048-d"):
        extract(cross_config(model, tmp_path / "c.h5", regions=narrow))
    assert not (tmp_path / "c.h5").exists()


def _cli(args: list[str]) -> Any:
    return CliRunner().invoke(app, args)


def test_cli_errors_are_one_line(
    cross_config: Callable[..., ExtractConfig], tiny_clip: Path, synthetic_dir: Path, synthetic_regions: Path,
    one_error_line: Callable[..., str], tmp_path: Path,
) -> None:
    cfg = cross_config("lxmert", tmp_path / "c.h5")
    base = ["extract", "--model", "lxmert", "--checkpoint", cfg.checkpoint, "--data-dir", str(synthetic_dir),
            "--out", str(tmp_path / "c.h5"), "--device", "cpu", "-q"]
    # no region file: made by the built-in detector, whose reference checkpoint is not in the (empty) hub cache
    one_error_line(_cli(base), "detector (not given: the reference detector): 'unc-nlp/frcnn-vg-finetuned'",
                   "--detector DIR")
    one_error_line(_cli([*base, "--regions", str(tmp_path / "none.h5")]), "regions: no such file")
    one_error_line(_cli([*base, "--regions", str(synthetic_regions), "--tokenizer", "x"]), "tokenizer: lxmert does not take the load option tokenizer")
    one_error_line(_cli([*base, "--regions", str(synthetic_regions), "--pair-plan", "some"]), "pair_plan")
    clip = ["extract", "--model", "clip", "--checkpoint", str(tiny_clip), "--data-dir", str(synthetic_dir),
            "--out", str(tmp_path / "clip.h5"), "--device", "cpu", "-q"]
    one_error_line(_cli([*clip, "--regions", str(synthetic_regions)]), "regions: clip reads pixels")
    one_error_line(_cli([*clip, "--model-config", "u.json"]), "model_config: clip does not take the load option model_config")
    assert not list(tmp_path.glob("*.h5"))


def test_cli_extract_lxmert_all_with_states(
    cross_config: Callable[..., ExtractConfig], synthetic_dir: Path, synthetic_regions: Path, tmp_path: Path,
) -> None:
    cfg = cross_config("lxmert", tmp_path / "c.h5")
    out = tmp_path / "all.h5"
    result = _cli(["extract", "--model", "lxmert", "--checkpoint", cfg.checkpoint, "--data-dir", str(synthetic_dir),
                   "--regions", str(synthetic_regions), "--pair-plan", "all", "--pair-states", "--layers", "lang=0,-1;vision=-1",
                   "--poolings", "cls", "--out", str(out), "--device", "cpu", "-q"])
    assert result.exit_code == 0, result.output
    assert "pairs 576/576" in result.stdout
    info = _cli(["cache", "info", str(out)])
    assert info.exit_code == 0 and "pairs      576/576 done (with pair states)" in info.stdout
    with ActivationCache(out) as c:
        assert c.layers("lang") == [0, 14] and c.layers("vision") == [10]
        assert c.poolings("lang") == ["cls", "pooled"] and c.poolings("vision") == []
