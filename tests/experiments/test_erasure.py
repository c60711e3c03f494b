"""LEACE erasure fed back into the tiny CLIP: the erased concept is gone from the layer (equal
class means); the experiment writes the unedited, erased and control rows with intervals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from vlprobe.experiments.erasure import ErasureConfig, fit_token_eraser, run_erasure


def test_the_eraser_leaves_no_linear_trace_of_the_concept() -> None:
    g = torch.Generator().manual_seed(0)
    labels = torch.tensor([0, 1] * 20)
    states = torch.randn(40, 5, 6, generator=g)
    states[:, :, 2] += 3.0 * (2 * labels[:, None] - 1)  # planted: the concept on one axis
    mask = torch.ones(40, 5, dtype=torch.long)
    mask[::3, 4] = 0
    eraser = fit_token_eraser([states[:25], states[25:]], [mask[:25], mask[25:]], labels)
    erased = eraser(states.double())
    keep = mask.bool()
    z = labels[:, None].expand(keep.shape)[keep]
    x = erased[keep]
    # LEACE: the class-conditional means of the erased states coincide (to float64 round-off)
    torch.testing.assert_close(x[z == 0].mean(0), x[z == 1].mean(0), atol=1e-8, rtol=0)
    assert (states[keep][z == 0].mean(0) - states[keep][z == 1].mean(0)).abs().max() > 5.0


def test_erasure_on_the_tiny_clip(tiny_clip: Path, synthetic_dir: Path, tmp_path: Path) -> None:
    _, manifest_path, rows = run_erasure(ErasureConfig(
        out=tmp_path, model="clip", checkpoint=str(tiny_clip), data_dir=synthetic_dir, layers="1,-1",
        bootstrap=50, progress=False))
    by = {(r["layer"], r["probe"], r["task"], r["seed"], r["metric"]): r["value"] for r in rows}
    for metric in ("text", "image", "group"):
        assert (None, "none", "target", None, metric) in by
        for layer in (1, 3):
            assert 0.0 <= by[(layer, "leace", "target", None, metric)] <= 100.0
            assert (layer, "leace", "control", 0, metric) in by
            assert f"{metric}.ci95_low" in {r["metric"] for r in rows if r["layer"] == layer}
    (manifest,) = json.loads(manifest_path.read_text())["runs"].values()  # the one run (named by its settings)
    assert manifest["layers"] == [1, 3] and "LEACE" in manifest["eraser"]
    assert manifest["units"]["text"] == "percent"


def test_erasure_on_the_tiny_siglip(tiny_siglip: Path, synthetic_dir: Path, tmp_path: Path) -> None:
    _, manifest_path, rows = run_erasure(ErasureConfig(
        out=tmp_path, model="siglip", checkpoint=str(tiny_siglip), data_dir=synthetic_dir, layers="0,-1", limit=6,
        bootstrap=50, progress=False))
    by = {(r["layer"], r["task"], r["metric"]): r["value"] for r in rows}
    (manifest,) = json.loads(manifest_path.read_text())["runs"].values()
    assert manifest["stream"] == "text" and manifest["layers"] == [0, 3]
    for layer in (None, 0, 3):
        for metric in ("text", "image", "group"):
            assert 0.0 <= by[(layer, "target", metric)] <= 100.0


@pytest.mark.parametrize("model", ["lxmert", "uniter", "blip-itm"])
def test_erasure_through_a_cross_encoder(model: str, request: pytest.FixtureRequest, synthetic_dir: Path,
                                         synthetic_regions: Path, tmp_path: Path) -> None:
    checkpoint = {"lxmert": lambda: request.getfixturevalue("tiny_lxmert"),
                  "uniter": lambda: request.getfixturevalue("tiny_uniter") / "uniter.pt",
                  "blip-itm": lambda: request.getfixturevalue("tiny_blip_itm")}[model]()
    regions = None if model == "blip-itm" else synthetic_regions
    _, manifest_path, rows = run_erasure(ErasureConfig(
        out=tmp_path, model=model, checkpoint=str(checkpoint), data_dir=synthetic_dir, regions=regions, limit=6,
        layers="0,-1", bootstrap=50, progress=False))
    by = {(r["layer"], r["task"], r["metric"]): r["value"] for r in rows}
    (manifest,) = json.loads(manifest_path.read_text())["runs"].values()
    stream = {"lxmert": "lang", "uniter": "text", "blip-itm": "pair"}[model]
    assert manifest["stream"] == stream and {r["stream"] for r in rows} == {stream}
    assert "pair" in manifest["eraser"]
    for layer in manifest["layers"]:
        for metric in ("text", "image", "group"):
            assert 0.0 <= by[(layer, "target", metric)] <= 100.0 and (layer, "control", metric) in by
    assert (None, "target", "group") in by  # the unedited model's row


def test_the_cross_encoder_eraser_removes_the_concept_from_the_pair_states(
        tiny_lxmert: Path, synthetic_dir: Path, synthetic_regions: Path) -> None:
    from vlprobe.data.loading import load_dataset
    from vlprobe.experiments.erasure import _CrossRuns
    from vlprobe.extract.models.lxmert import LxmertAdapter
    from vlprobe.extract.regions.store import RegionStore

    adapter = LxmertAdapter.load(str(tiny_lxmert))
    items = load_dataset("winoground", synthetic_dir).items[:6]
    with RegionStore(synthetic_regions) as store:
        runs = _CrossRuns(adapter, items, 2, 5, store, "lang")
    states, masks = runs.states([3])
    eraser = fit_token_eraser(states[3], masks, runs.labels)
    from vlprobe.extract.models.hooks import edited_layers, hook_count

    recorded: dict[int, torch.Tensor] = {}  # the erased states the later layers run on, per batch

    def erase_and_keep(h: torch.Tensor) -> torch.Tensor:
        out = eraser(h.double()).to(h.dtype)
        recorded[len(recorded)] = out
        return out

    with torch.inference_mode(), edited_layers(runs.sites, {3: erase_and_keep}):
        for sl in runs._batches():
            adapter.plain_pair_scores(runs.text_table, runs.image_table, runs.t_idx[sl], runs.i_idx[sl])
    x = torch.cat([h[m.bool()] for h, m in zip(recorded.values(), masks, strict=True)]).double()
    z = torch.cat([runs.labels[sl, None].expand(m.shape)[m.bool()] for sl, m in zip(runs._batches(), masks,
                                                                                    strict=True)])
    # LEACE: equal class means after erasure (float32 states: tolerance of their round-off)
    torch.testing.assert_close(x[z == 0].mean(0), x[z == 1].mean(0), atol=1e-5, rtol=0)
    assert hook_count(adapter.model) == 0
    assert runs.scores().shape == (6, 2, 2)
