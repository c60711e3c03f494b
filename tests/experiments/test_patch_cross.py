"""Activation patching through the cross-encoders (tiny LXMERT and UNITER on the session dataset):
the known answers of the plain pass, per stream."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from vlprobe.experiments.patch import PatchConfig, run_patch
from vlprobe.validation import InputError

N_ITEMS = 4


@pytest.fixture(scope="module")
def equal_regions(tmp_path_factory: pytest.TempPathFactory, synthetic_dir: Path) -> Path:
    """Six boxes for every image (a cross-encoder's image side patches images with equal counts)."""
    from vlprobe.fixtures.regions import random_regions

    names = sorted(p.stem for p in (synthetic_dir / "images").glob("*.png"))
    return random_regions(tmp_path_factory.mktemp("regions") / "six.h5", names, n_boxes=6, seed=1)


def _recovered(rows: list[dict]) -> dict[tuple, float]:
    return {(r["stream"], r["layer"], r["probe"]): r["value"] for r in rows
            if r["metric"] == "recovered" and r["subset"] == "all"}


def test_lxmert_lang_and_vision(tiny_lxmert: Path, synthetic_dir: Path, equal_regions: Path, tmp_path: Path) -> None:
    csv_path, manifest_path, rows = run_patch(PatchConfig(
        out=tmp_path, model="lxmert", checkpoint=str(tiny_lxmert), data_dir=synthetic_dir, regions=equal_regions,
        limit=N_ITEMS, layers="0,1,-1", bootstrap=50, progress=False))
    rec = _recovered(rows)
    # the plain pass recomputes every layer from the patched one; tolerances cover the float32
    # difference between a row run in one batch and the same states copied into another row
    for group in ("all", "swapped"):
        assert rec[("lang", 0, f"positions={group}")] == pytest.approx(1.0, abs=1e-4)  # the words are the input
    assert rec[("lang", 0, "positions=rest")] == pytest.approx(0.0, abs=1e-4)  # identical there
    assert rec[("lang", 14, "positions=all")] == pytest.approx(1.0, abs=1e-4)
    assert rec[("lang", 14, "positions=cls")] == pytest.approx(1.0, abs=1e-4)  # the match head reads token 0
    assert rec[("vision", 0, "positions=all")] == pytest.approx(1.0, abs=1e-4)  # the whole image swapped
    # the last cross layer's vision side feeds nothing the score reads
    assert rec[("vision", 10, "positions=all")] == pytest.approx(0.0, abs=1e-6)
    assert {r["probe"] for r in rows if r["stream"] == "vision"} == {"positions=all"}
    n = {(r["stream"], r["probe"]): r["n"] for r in rows if r["metric"] == "recovered" and r["subset"] == "all"}
    assert n[("lang", "positions=all")] == N_ITEMS * 2 * 2 == n[("vision", "positions=all")]
    kinds = {(r["stream"], r["layer"]): r["kind"] for r in rows}
    assert kinds[("lang", 1)] == "lang" and kinds[("lang", 14)] == "cross" and kinds[("vision", 1)] == "rel"
    (run,) = json.loads(manifest_path.read_text())["runs"].values()
    assert run["inputs"]["regions"]["fingerprint"].startswith("sha256:")
    assert run["pass"].startswith("cross-encoder")
    assert csv_path.name.startswith("lxmert@")


def test_uniter_text_and_image_views(tiny_uniter: Path, synthetic_dir: Path, equal_regions: Path,
                                     tmp_path: Path) -> None:
    _, _, rows = run_patch(PatchConfig(
        out=tmp_path, model="uniter", checkpoint=str(tiny_uniter / "uniter-base.pt"), data_dir=synthetic_dir,
        regions=equal_regions, limit=N_ITEMS, layers="0,1,-1", bootstrap=50, progress=False))
    rec = _recovered(rows)
    assert {r["stream"] for r in rows} == {"text", "image"}  # Winoground: both views by default
    assert rec[("text", 0, "positions=swapped")] == pytest.approx(1.0, abs=1e-4)
    assert rec[("text", 0, "positions=rest")] == pytest.approx(0.0, abs=1e-4)
    last = max(r["layer"] for r in rows)
    # the pooler reads position 0 of the last block: the donor's state there is the donor's score
    assert rec[("text", last, "positions=cls")] == pytest.approx(1.0, abs=1e-4)
    assert rec[("text", last, "positions=all")] == pytest.approx(1.0, abs=1e-4)
    # the image view sits after the text, padded to each batch's longest caption: patching all its
    # regions at layer 0 is the other image's input, so its score (tolerance: float32 rows of
    # different batches); at the last layer the regions feed nothing the pooler reads
    assert rec[("image", 0, "positions=all")] == pytest.approx(1.0, abs=1e-4)
    assert rec[("image", last, "positions=all")] == pytest.approx(0.0, abs=1e-6)
    assert 0.0 < abs(rec[("image", 1, "positions=all")]) and {r["probe"] for r in rows if r["stream"] == "image"} \
        == {"positions=all"}
    assert np.isfinite([r["value"] for r in rows if r["metric"] == "full_change" and r["subset"] == "all"]).all()


def test_blip_itm_pair_stream(tiny_blip_itm: Path, synthetic_dir: Path, tmp_path: Path) -> None:
    _, _, rows = run_patch(PatchConfig(
        out=tmp_path, model="blip-itm", checkpoint=str(tiny_blip_itm), data_dir=synthetic_dir, limit=N_ITEMS,
        layers="0,-1", bootstrap=50, progress=False))
    rec = _recovered(rows)
    assert {r["stream"] for r in rows} == {"pair"}  # the unimodal streams feed only the ITC score
    assert rec[("pair", 0, "positions=swapped")] == pytest.approx(1.0, abs=1e-4)
    assert rec[("pair", 0, "positions=rest")] == pytest.approx(0.0, abs=1e-4)
    last = max(r["layer"] for r in rows)
    assert rec[("pair", last, "positions=cls")] == pytest.approx(1.0, abs=1e-4)  # the ITM head reads token 0


def test_blip_itc_towers(tiny_blip_itm: Path, synthetic_dir: Path, tmp_path: Path) -> None:
    """score_head=itc: the ITC cosine reads the unimodal text encoder and the vision tower, edited
    tower by tower as a dual encoder's."""
    _, manifest_path, rows = run_patch(PatchConfig(
        out=tmp_path, model="blip-itm", checkpoint=str(tiny_blip_itm), model_options=("score_head=itc",),
        data_dir=synthetic_dir, limit=N_ITEMS, layers="0,-1", bootstrap=50, progress=False))
    rec = _recovered(rows)
    assert {r["stream"] for r in rows} == {"text", "image"}
    # tolerance: float32 embeddings recomputed in another row
    assert rec[("text", 0, "positions=all")] == pytest.approx(1.0, abs=1e-4)
    assert rec[("text", 0, "positions=swapped")] == pytest.approx(1.0, abs=1e-4)
    assert rec[("text", 0, "positions=rest")] == pytest.approx(0.0, abs=1e-4)
    assert rec[("text", 3, "positions=cls")] == pytest.approx(1.0, abs=1e-4)  # text_proj reads token 0
    assert rec[("image", 0, "positions=all")] == pytest.approx(1.0, abs=1e-4)
    assert rec[("image", 2, "positions=cls")] == pytest.approx(1.0, abs=1e-4)  # vision_proj reads the class token
    (run,) = json.loads(manifest_path.read_text())["runs"].values()
    assert run["score_kind"] == "cosine" and run["pass"].startswith("dual encoder")
    assert run["inputs"]["model_options"]["score_head"] == "itc"


def test_cross_encoders_refuse_what_they_cannot_run(tiny_uniter: Path, tiny_lxmert: Path, tiny_blip_itm: Path,
                                                    synthetic_dir: Path,
                                                    synthetic_regions: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="streams: uniter has streams text, image, got 'pair'"):
        run_patch(PatchConfig(out=tmp_path, model="uniter", checkpoint=str(tiny_uniter / "uniter-base.pt"),
                              data_dir=synthetic_dir, regions=synthetic_regions, streams=("pair",), limit=1))
    with pytest.raises(InputError, match="the text stream feeds the ITC score: load with --model-option score_head=itc"):
        run_patch(PatchConfig(out=tmp_path, model="blip-itm", checkpoint=str(tiny_blip_itm), data_dir=synthetic_dir,
                              streams=("text",), limit=1))
    with pytest.raises(InputError, match="the pair stream feeds the ITM score"):
        run_patch(PatchConfig(out=tmp_path, model="blip-itm", checkpoint=str(tiny_blip_itm), data_dir=synthetic_dir,
                              streams=("pair",), model_options=("score_head=itc",), limit=1))
    with pytest.raises(InputError, match="regions: lxmert reads precomputed region features"):
        run_patch(PatchConfig(out=tmp_path, model="lxmert", checkpoint=str(tiny_lxmert), data_dir=synthetic_dir))
