"""The patch experiment on the tiny CLIP: tidy rows, the last layer recovers everything, layer 0
at every position too, no hook left behind, bad input."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from vlprobe.experiments.patch import PatchConfig, run_patch
from vlprobe.validation import InputError


def _by(rows: list[dict], metric: str) -> dict[tuple, float]:
    return {(r["stream"], r["layer"], r["probe"], r["subset"]): r["value"] for r in rows if r["metric"] == metric}


def test_patch_winoground_text_and_image_towers(tiny_clip: Path, synthetic_dir: Path, tmp_path: Path) -> None:
    csv_path, manifest_path, rows = run_patch(PatchConfig(
        out=tmp_path, model="clip", checkpoint=str(tiny_clip), data_dir=synthetic_dir, layers="0,1,-1",
        bootstrap=100, progress=False, limit=6))
    # named by the settings it changed (the swept layers too), one column per setting
    assert csv_path.name == "clip@layers=0+1+-1,bootstrap=100.csv"  # the item selection is an input
    with open(csv_path, encoding="utf-8", newline="") as fh:
        lines = list(csv.DictReader(fh))
    assert {(r["dtype"], r["bootstrap"], r["bootstrap_seed"]) for r in lines} == {("float32", "100", "0")}
    assert {(r["layer"], r["kind"]) for r in lines if r["stream"] == "text"} == {("0", "embed"), ("1", "self"),
                                                                                 ("3", "self")}
    rec = _by(rows, "recovered")
    n_text = 3  # tiny CLIP: 3 text blocks, 2 vision blocks
    for stream, last in (("text", n_text), ("image", 2)):
        # the last layer at every position is the donor's whole state, so the donor's score; compared
        # with a tolerance (the pooled embedding is recomputed from copied floats in another row)
        assert rec[(stream, last, "positions=all", "all")] == pytest.approx(1.0, abs=1e-4)
        assert rec[(stream, 0, "positions=all", "all")] == pytest.approx(1.0, abs=1e-3)
    # the text tower's last layer at the EOS position alone is what CLIP pools: everything
    assert rec[("text", n_text, "positions=cls", "all")] == pytest.approx(1.0, abs=1e-4)
    # at layer 0 the captions differ only at the swapped tokens: patching those gives the donor,
    # patching the rest (identical states there) nothing; later, context mixes into every token
    assert rec[("text", 0, "positions=swapped", "all")] == pytest.approx(1.0, abs=1e-3)
    assert rec[("text", 0, "positions=rest", "all")] == pytest.approx(0.0, abs=1e-3)
    assert rec[("text", 1, "positions=rest", "all")] != pytest.approx(0.0, abs=1e-3)
    full = _by(rows, "full_change")
    change = _by(rows, "score_change")
    np.testing.assert_allclose(change[("text", n_text, "positions=all", "all")],
                               full[("text", n_text, "positions=all", "all")], rtol=1e-3, atol=1e-6)
    low = _by(rows, "score_change.ci95_low")
    high = _by(rows, "score_change.ci95_high")
    key = ("text", 1, "positions=swapped", "all")
    assert low[key] <= change[key] <= high[key]
    n = {(r["stream"], r["probe"]): r["n"] for r in rows if r["metric"] == "recovered" and r["subset"] == "all"}
    assert n[("text", "positions=all")] == 6 * 2 * 2  # items x directions x images
    assert "bow=same" in {r["subset"] for r in rows}
    (manifest,) = json.loads(manifest_path.read_text())["runs"].values()  # the one run (named by its settings)
    assert manifest["streams"] == {"text": [0, 1, 3], "image": [0, 1, 2]}
    assert manifest["units"]["recovered"].startswith("fraction")


def test_patch_refuses_what_it_cannot_run(tiny_clip: Path, synthetic_dir: Path, tmp_path: Path,
                                          sugarcrepe_dir: Path) -> None:
    with pytest.raises(InputError, match="groups: unknown groups 'swaped'"):
        run_patch(PatchConfig(out=tmp_path, model="clip", checkpoint=str(tiny_clip), data_dir=synthetic_dir,
                              groups=("swaped",)))
    with pytest.raises(InputError, match="runs dual encoders and cross-encoders; 'caption-length' is neither"):
        run_patch(PatchConfig(out=tmp_path, model="caption-length", checkpoint="x", data_dir=synthetic_dir))
    with pytest.raises(InputError, match="sugarcrepe has one"):
        run_patch(PatchConfig(out=tmp_path, model="clip", checkpoint=str(tiny_clip), dataset="sugarcrepe",
                              data_dir=sugarcrepe_dir, streams=("image",), limit=1))


def test_patch_siglip_towers_score_with_its_sigmoid(tiny_siglip: Path, synthetic_dir: Path, tmp_path: Path) -> None:
    _, manifest_path, rows = run_patch(PatchConfig(
        out=tmp_path, model="siglip", checkpoint=str(tiny_siglip), data_dir=synthetic_dir, layers="0,1,-1",
        bootstrap=50, progress=False, limit=4))
    rec = _by(rows, "recovered")
    n_text, n_image = 3, 2  # tiny SigLIP: 3 text blocks, 2 vision blocks
    # every position (padding too: SigLIP attends to it) at any one layer is the donor's input or
    # state, so the donor's score; tolerance: float32 embeddings recomputed in another row
    for layer in (0, n_text):
        assert rec[("text", layer, "positions=all", "all")] == pytest.approx(1.0, abs=1e-4)
    for layer in (0, n_image):
        assert rec[("image", layer, "positions=all", "all")] == pytest.approx(1.0, abs=1e-4)
    assert rec[("text", n_text, "positions=cls", "all")] == pytest.approx(1.0, abs=1e-4)  # the head reads the last
    assert rec[("text", 0, "positions=swapped", "all")] == pytest.approx(1.0, abs=1e-4)
    assert rec[("text", 0, "positions=rest", "all")] == pytest.approx(0.0, abs=1e-4)
    # no class token in SigLIP's image tower: its only group is all
    assert {r["probe"] for r in rows if r["stream"] == "image"} == {"positions=all"}
    # the scores are SigLIP's own (a sigmoid of the scaled cosine, in (0, 1)), not the cosine
    (manifest,) = json.loads(manifest_path.read_text())["runs"].values()
    assert manifest["score_kind"] == "match_probability"
    full = _by(rows, "full_change")
    assert 0.0 < full[("text", 0, "positions=all", "all")] < 1.0


def test_tower_scores_are_each_models_own(tiny_siglip: Path, tiny_clip: Path) -> None:
    from vlprobe.experiments.minimal_pairs import tower_scores
    from vlprobe.extract.models.clip import CLIPAdapter
    from vlprobe.extract.models.siglip import SiglipAdapter

    rng = np.random.default_rng(0)
    img, txt = rng.normal(size=(3, 8)), rng.normal(size=(5, 8))
    for adapter in (SiglipAdapter.load(str(tiny_siglip)), CLIPAdapter.load(str(tiny_clip))):
        want = adapter.scores_from_pooled(img, txt, adapter.describe())  # (3, 5), float32
        got = tower_scores(adapter, img[:, None, :], txt[None, :, :])  # row-wise, broadcast
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)  # float32 vs float64
