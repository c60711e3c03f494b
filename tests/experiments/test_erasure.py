"""LEACE erasure fed back into the tiny CLIP: the erased concept is gone from the layer (equal
class means); the experiment writes the unedited, erased and control rows with intervals."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
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


def test_erasure_through_blip_itc(tiny_blip_itm: Path, synthetic_dir: Path, tmp_path: Path) -> None:
    """score_head=itc: the unimodal text tower erased, scored by the ITC cosine against the image tower."""
    _, manifest_path, rows = run_erasure(ErasureConfig(
        out=tmp_path, model="blip-itm", checkpoint=str(tiny_blip_itm), model_options=("score_head=itc",),
        data_dir=synthetic_dir, layers="0,-1", limit=6, bootstrap=50, progress=False))
    (manifest,) = json.loads(manifest_path.read_text())["runs"].values()
    assert manifest["stream"] == "text" and manifest["score_kind"] == "cosine"
    assert {r["pooling"] for r in rows} == {"pooled"}
    by = {(r["layer"], r["task"], r["metric"]): r["value"] for r in rows}
    for layer in (None, 0, 3):
        assert 0.0 <= by[(layer, "target", "group")] <= 100.0


@pytest.mark.parametrize("model", ["lxmert", "uniter", "blip-itm"])
def test_erasure_through_a_cross_encoder(model: str, request: pytest.FixtureRequest, synthetic_dir: Path,
                                         synthetic_regions: Path, tmp_path: Path) -> None:
    checkpoint = {"lxmert": lambda: request.getfixturevalue("tiny_lxmert"),
                  "uniter": lambda: request.getfixturevalue("tiny_uniter") / "uniter-base.pt",
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


def test_erasing_a_planted_concept_makes_the_two_captions_score_alike() -> None:
    """Planted states: each item's two captions share their tokens but one, and that one differs by
    the concept direction d alone (caption 1 = caption 0 + d there). LEACE removes, along the
    direction it erases, every difference that lies along d, so after erasure the two captions'
    states are identical token by token, and any score of them (here a linear read-out u . mean
    token) is too; before, the score gap is u . d / T exactly."""
    g = torch.Generator().manual_seed(0)
    n, t, h = 30, 6, 8
    d = torch.randn(h, generator=g, dtype=torch.float64)
    u = torch.randn(h, generator=g, dtype=torch.float64)
    shared = torch.randn(n, t, h, generator=g, dtype=torch.float64)  # an item's tokens, both captions
    where = torch.randint(0, t, (n,), generator=g)  # the differing token's position, per item
    cap1 = shared.clone()
    cap1[torch.arange(n), where] += d
    states = torch.cat([shared, cap1])  # caption 0 of every item, then caption 1
    labels = torch.tensor([0] * n + [1] * n)
    mask = torch.ones(2 * n, t, dtype=torch.long)

    def score(x: torch.Tensor) -> torch.Tensor:
        return x.mean(1) @ u

    before = score(states[n:]) - score(states[:n])
    torch.testing.assert_close(before, torch.full((n,), float(u @ d) / t, dtype=torch.float64))
    eraser = fit_token_eraser([states[:25], states[25:]], [mask[:25], mask[25:]], labels)
    erased = eraser(states)
    # float64 throughout: the tolerance is round-off of the fit's eigendecomposition
    torch.testing.assert_close(erased[n:], erased[:n], atol=1e-9, rtol=0)
    torch.testing.assert_close(score(erased[n:]) - score(erased[:n]), torch.zeros(n, dtype=torch.float64),
                               atol=1e-9, rtol=0)
    # the items' own variation stays: erasure removes one direction, not the states
    assert (erased[1:n] - erased[0]).abs().max() > 0.1
    # a control concept (half the items' captions trading classes) is no longer the difference: kept
    flip = torch.zeros(2 * n, dtype=torch.bool)
    flip[: n // 2] = flip[n: n + n // 2] = True
    control = fit_token_eraser([states], [mask], torch.where(flip, 1 - labels, labels))(states)
    assert (score(control[n:]) - score(control[:n])).abs().max() > 0.1 * abs(float(u @ d)) / t


def test_erasure_through_clip_equalises_a_planted_one_token_difference(tiny_clip: Path, synthetic_dir: Path,
                                                                       tmp_path: Path) -> None:
    """The same answer through the model: every item's caption 1 is its caption 0 with one token
    replaced by the same other token (``red`` -> ``blue`` at the end), so at CLIP's layer 0 (token
    + position embeddings, no norm) the two captions differ by that embedding difference alone,
    at one position. Erasing the caption-side concept there makes both captions' states equal,
    so the text tower gives both the same embedding and every image scores them alike."""
    import shutil

    from vlprobe.data.loading import load_dataset
    from vlprobe.experiments.erasure import _DualRuns
    from vlprobe.extract.models.clip import CLIPAdapter

    root = tmp_path / "one-token"
    shutil.copytree(synthetic_dir, root)
    rows = [json.loads(line) for line in (root / "examples.jsonl").read_text().splitlines() if line.strip()]
    for r in rows:
        r["caption_1"] = r["caption_0"] + " blue"
        r["caption_0"] = r["caption_0"] + " red"
    (root / "examples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    adapter = CLIPAdapter.load(str(tiny_clip))
    items = load_dataset("winoground", root).items
    ids0, _ = adapter.tokens([it.captions[0].text for it in items])
    ids1, _ = adapter.tokens([it.captions[1].text for it in items])
    assert ((ids0 != ids1).sum(1) == 1).all()  # the precondition: one token apart, the same two tokens
    assert len({(int(a), int(b)) for a, b in zip(ids0[ids0 != ids1], ids1[ids0 != ids1], strict=True)}) == 1
    runs = _DualRuns(adapter, items, 2, 8)
    states, masks = runs.states([0])
    base = runs.scores()  # s[i, k, j]: caption k of item i with image j
    erased = runs.scores(0, fit_token_eraser(states[0], masks, runs.labels))
    gap_before = np.abs(base[:, 1] - base[:, 0])
    gap_after = np.abs(erased[:, 1] - erased[:, 0])
    assert gap_before.min() > 1e-4
    # float32 states erased in float64 and cast back: the two captions' states agree to float32
    # round-off, and so do their scores
    assert gap_after.max() < 1e-5
