"""`probe eval` with the cross-encoders (tiny LXMERT, UNITER) on real SugarCrepe / VALSE items with
random region features, and `probe extract` on SugarCrepe / VALSE (dataset options, no pixels for
region models, tiny CLIP on synthetic images named as the real ones)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from tests.extract.helpers import SC_SELECTION
from vlprobe.cli import app
from vlprobe.data.sugarcrepe import load_sugarcrepe
from vlprobe.data.valse import load_valse
from vlprobe.experiments.benchmark_eval import EvalConfig, run_eval
from vlprobe.extract.cache.reader import ActivationCache
from vlprobe.extract.regions.store import RegionStore
from vlprobe.fixtures.regions import random_regions_for_dataset
from vlprobe.runs.score_files import caption_foil_scores, read_item_scores

SC = SC_SELECTION
VA = {"subsets": "existence,actant-swap", "limit": 3}
MODELS = ("lxmert", "uniter")


def _cli(args: list[str]) -> Any:
    return CliRunner().invoke(app, args)


def _checkpoint(model: str, tiny_lxmert: Path, tiny_uniter: Path) -> str:
    return {"lxmert": str(tiny_lxmert), "uniter": str(tiny_uniter / "uniter-base.pt")}[model]


@pytest.fixture(scope="module")
def va_regions(valse_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return random_regions_for_dataset(tmp_path_factory.mktemp("va-regions") / "va.h5", valse_dir, dataset="valse",
                                      options=VA, n_boxes=8, min_boxes=3, seed=1)


def test_fixture_regions_use_the_normalised_benchmark_names(sugarcrepe_regions: Path, va_regions: Path, sugarcrepe_dir: Path,
                                                             valse_dir: Path) -> None:
    sc = load_sugarcrepe(sugarcrepe_dir, **SC)
    va = load_valse(valse_dir, **VA)
    with RegionStore(sugarcrepe_regions) as s, RegionStore(va_regions) as v:
        # COCO 2017 file names lose their extension: "000000397133.jpg" -> "000000397133".
        assert sorted(s.image_ids) == sorted({it.images[0].name.removesuffix(".jpg") for it in sc})
        assert sorted(v.image_ids) == sorted({Path(it.images[0].name).stem for it in va})
        assert all(it.images[0].name in v for it in va)
        assert set(s.image_w.tolist()) == {640} and set(s.image_h.tolist()) == {480}


@pytest.mark.parametrize("model", MODELS)
def test_eval_valse_scores_equal_encode_pairs_and_use_the_match_threshold(
    model: str, valse_dir: Path, va_regions: Path, tiny_lxmert: Path, tiny_uniter: Path, tmp_path: Path,
) -> None:
    from vlprobe.registry import MODELS as REGISTRY
    from vlprobe.stats.metrics import valse_metrics

    ckpt = _checkpoint(model, tiny_lxmert, tiny_uniter)
    csv_path, manifest_path, rows = run_eval(EvalConfig(
        benchmark="valse", out=tmp_path, model=model, checkpoint=ckpt, data_dir=valse_dir, regions=va_regions,
        batch_size=5, bootstrap=50, **VA,
    ))
    ids, cap, foil = caption_foil_scores(read_item_scores(csv_path.with_suffix(".scores.jsonl")))
    # The same pairs straight through the adapter: one text table, one image table, one encode_pairs call.
    ds = load_valse(valse_dir, **VA)
    assert ids == [it.id for it in ds]
    adapter = REGISTRY.get(model).load(ckpt)
    texts = [it.texts[k].text for it in ds for k in (0, 1)]
    with RegionStore(va_regions) as store:
        regions = store.get([it.images[0].name for it in ds])
    out = adapter.encode_pairs(adapter.prepare_texts(texts), adapter.prepare_images(regions),
                               np.arange(len(texts)), np.repeat(np.arange(len(ds)), 2), None, ())
    want = out.scores.float().numpy()
    np.testing.assert_allclose(np.column_stack([cap, foil]).ravel(), want, atol=1e-5)
    # match_probability declares 0.5: VALSE's thresholded metrics appear, computed at 0.5.
    run = json.loads(manifest_path.read_text(encoding="utf-8"))["runs"][f"{model}@bootstrap=50"]
    assert run["match_threshold"] == 0.5 and run["score_kind"] == "match_probability"
    got = {(r["subset"], r["metric"]): r["value"] for r in rows}
    expect = valse_metrics(cap[:3], foil[:3], threshold=0.5)
    for metric in ("caption_tpr", "foil_tnr", "acc", "min_precision", "acc_r", "auroc"):
        assert got[("existence", metric)] == pytest.approx(100 * expect[metric], nan_ok=True)
    # The matching head's raw logits are kept beside P(match), and VALSE's own acc_r uses them.
    saved = read_item_scores(csv_path.with_suffix(".scores.jsonl"))
    np.testing.assert_allclose(saved.logits, out.logits.float().numpy(), atol=1e-5)
    np.testing.assert_allclose(np.exp(saved.logits[:, 1]) / np.exp(saved.logits).sum(1), saved.score, atol=1e-6)
    cap_l, foil_l = saved.logits[0::2], saved.logits[1::2]
    first = slice(0, 3)  # the existence items
    kept = foil_l[first, 0] != foil_l[first, 1]
    want_valse = 100 * float(((cap_l[first, 1] > foil_l[first, 1]) & kept).sum() / kept.sum())
    assert got[("existence", "acc_r_valse")] == pytest.approx(want_valse)
    assert {r["n"] for r in rows if r["subset"] == "existence" and r["metric"] == "acc_r_valse"} == {int(kept.sum())}
    assert set(run["definitions"]) == {"acc_r", "acc_r_valse"}


def test_eval_cross_errors_are_one_line(sugarcrepe_dir: Path, sugarcrepe_regions: Path, tiny_lxmert: Path, tiny_uniter: Path,
                                        tiny_clip: Path, tmp_path: Path, one_error_line: Callable[..., str]) -> None:
    base = ["eval", "sugarcrepe", "--data-dir", str(sugarcrepe_dir), "--out", str(tmp_path), "--bootstrap", "20",
            "--device", "cpu", "--limit", "3"]
    lx = [*base, "--model", "lxmert", "--checkpoint", str(tiny_lxmert)]
    # Regions written for swap_obj and add_att only: a replace_obj image has none.
    line = one_error_line(_cli([*lx, "--subsets", "replace_obj", "--regions", str(sugarcrepe_regions)]),
                          "regions: no features for image '", ".jpg' in sc.h5")
    first = load_sugarcrepe(sugarcrepe_dir, subsets="replace_obj", limit=1).items[0].images[0].name
    assert f"'{first}'" in line
    one_error_line(_cli([*lx, "--subsets", "swap_obj"]), "regions: lxmert reads precomputed region features", "give regions")
    one_error_line(_cli([*lx, "--subsets", "swap_obj", "--regions", str(sugarcrepe_regions), "--image-dir", str(tmp_path)]),
                   "image_dir: lxmert reads region features", "leave image_dir unset")
    one_error_line(_cli([*lx, "--subsets", "swap_obj", "--regions", str(sugarcrepe_regions), "--tokenizer", "x"]),
                   "tokenizer: lxmert does not take the load option tokenizer")
    one_error_line(_cli([*base, "--model", "clip", "--checkpoint", str(tiny_clip), "--regions", str(sugarcrepe_regions)]),
                   "regions: clip reads pixels")
    one_error_line(_cli([*base, "--model", "caption-length", "--regions", str(sugarcrepe_regions)]),
                   "regions: caption-length scores captions only")
    res = _cli(["eval", "sugarcrepe", "--data-dir", str(sugarcrepe_dir), "--out", str(tmp_path), "--bootstrap", "20",
                "--device", "cpu", "--model", "uniter", "--checkpoint", str(tiny_uniter / "uniter-base.pt"),
                "--model-config", str(tiny_uniter / "uniter-base.json"), "--tokenizer", str(tiny_uniter / "tokenizer"),
                "--regions", str(sugarcrepe_regions), "--subsets", "add_att", "--limit", "3"])
    assert res.exit_code == 0, res.output
    assert "add_att" in res.stdout


# -- probe extract on SugarCrepe / VALSE ------------------------------------------------------------


def _draw(names: list[str], folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for n, name in enumerate(sorted(set(names))):
        rng = np.random.default_rng(n)
        Image.fromarray(rng.integers(0, 256, size=(40, 48, 3), dtype=np.uint8)).save(folder / name)


def test_extract_sugarcrepe_with_clip_matches_eval(sugarcrepe_dir: Path, tiny_clip: Path, tmp_path: Path,
                                                   one_error_line: Callable[..., str]) -> None:
    coco = tmp_path / "val2017"
    _draw([it.images[0].name for it in load_sugarcrepe(sugarcrepe_dir, **SC)], coco)
    out = tmp_path / "clip.h5"
    args = ["extract", "--model", "clip", "--checkpoint", str(tiny_clip), "--dataset", "sugarcrepe", "--data-dir",
            str(sugarcrepe_dir), "--out", str(out), "--device", "cpu", "-q", "--layers", "-1", "--poolings", "cls"]
    sel = ["--subsets", SC["subsets"], "--limit", str(SC["limit"])]
    res = _cli([*args, *sel, "--image-dir", str(coco)])
    assert res.exit_code == 0, res.output
    csv_path, _, _ = run_eval(EvalConfig(benchmark="sugarcrepe", out=tmp_path / "eval", model="clip", checkpoint=str(tiny_clip),
                                         data_dir=sugarcrepe_dir, image_dir=coco, bootstrap=20, **SC))
    ids, pos, neg = caption_foil_scores(read_item_scores(csv_path.with_suffix(".scores.jsonl")))
    with ActivationCache(out) as c:
        matrix, _ = c.scores()
        assert list(c.table("items")["id"]) == ids
        assert c.record.dataset_options == {"image_dir": str(coco), **SC}
        assert json.loads(c.header.dataset_selection) == SC
        assert c.header.dataset_fingerprint == load_sugarcrepe(sugarcrepe_dir, image_dir=coco, **SC).fingerprint
    n = len(ids)
    np.testing.assert_allclose(pos, matrix[np.arange(n), 2 * np.arange(n)], atol=1e-5)
    np.testing.assert_allclose(neg, matrix[np.arange(n), 2 * np.arange(n) + 1], atol=1e-5)
    # Resuming with another selection is refused; pixels are needed; options the loader lacks are named.
    one_error_line(_cli([*args, "--subsets", SC["subsets"], "--limit", "2", "--image-dir", str(coco)]),
                   "other settings", "dataset_fingerprint")
    other = ["--out", str(tmp_path / "x.h5")]
    one_error_line(_cli([*args, *sel, *other]), "clip reads pixels", "has no file", "give image_dir")
    one_error_line(_cli([*args, *sel, *other, "--image-root", str(coco)]),
                   "image_root: dataset 'sugarcrepe' does not take --image-root")
    one_error_line(_cli([*args, *other, "--dataset", "winoground", "--limit", "2"]),
                   "limit: dataset 'winoground' does not take --limit")
    one_error_line(_cli(["extract", "--model", "clip", "--checkpoint", str(tiny_clip), "--dataset", "valse",
                         "--out", str(tmp_path / "v.h5"), "-q"]), "data_dir: dataset 'valse' needs --data-dir")
    assert not (tmp_path / "x.h5").exists()


def test_extract_valse_with_lxmert_needs_no_images(valse_dir: Path, va_regions: Path, tiny_lxmert: Path, tmp_path: Path,
                                                   one_error_line: Callable[..., str]) -> None:
    out = tmp_path / "lx.h5"
    args = ["extract", "--model", "lxmert", "--checkpoint", str(tiny_lxmert), "--dataset", "valse", "--data-dir",
            str(valse_dir), "--regions", str(va_regions), "--device", "cpu", "-q", "--subsets", VA["subsets"],
            "--limit", str(VA["limit"]), "--no-pair-states"]
    res = _cli([*args, "--out", str(out)])
    assert res.exit_code == 0, res.output
    with ActivationCache(out) as c:
        _, done = c.scores()
        assert len(c.table("items")["id"]) == 6 and int(done.sum()) == 12
    # Without image files the JSONs alone fix the fingerprint: the selection is what tells runs apart.
    one_error_line(_cli([*args[:-3], "--limit", "2", "--no-pair-states", "--out", str(out)]),
                   "other settings", "dataset_selection")
    one_error_line(_cli([*args, "--out", str(tmp_path / "y.h5"), "--image-root", str(tmp_path)]),
                   "image_root: lxmert reads region features", "leave image_root unset")
