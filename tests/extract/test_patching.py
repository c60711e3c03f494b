"""Activation patching through the adapters' layer sites: patching every layer gives the donor's
output, patching none changes nothing, no hook is left behind."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from vlprobe.data.loading import load_dataset
from vlprobe.extract.models.clip import CLIPAdapter
from vlprobe.extract.models.hooks import edited_layers, hook_count
from vlprobe.extract.patching import patched_run, position_sources


@pytest.fixture(scope="module")
def clip(tiny_clip: Path) -> CLIPAdapter:
    return CLIPAdapter.load(str(tiny_clip))


@pytest.fixture(scope="module")
def pairs(synthetic_dir: Path) -> tuple[list[str], list[str]]:
    ds = load_dataset("winoground", synthetic_dir)
    a = [it.texts[0].text for it in ds.items[:6]]
    b = [it.texts[1].text for it in ds.items[:6]]
    return a + b, b + a  # both directions


def _text_run(clip: CLIPAdapter, texts: list[str]) -> Callable[[], torch.Tensor]:
    return lambda: clip.encode("text", texts, layers=[0]).pooled


def _sources(clip: CLIPAdapter, rec: list[str], don: list[str], group: str) -> tuple[torch.Tensor, torch.Tensor]:
    ids, mask = clip.tokens(rec + don)
    n = len(rec)
    cls = clip.eos_index(ids)
    return position_sources(ids[:n], ids[n:], mask[:n], mask[n:], group, cls[:n], cls[n:])


def test_patching_every_layer_gives_the_donor_output_and_none_changes_nothing(clip: CLIPAdapter, pairs: tuple[list[str], list[str]]) -> None:
    rec, don = pairs
    n = len(rec)
    run = _text_run(clip, rec + don)
    base = run()
    before = hook_count(clip.model)  # transformers keeps hooks of its own (output capture)
    sites = clip.layer_sites("text")
    source, defined = _sources(clip, rec, don, "all")
    assert defined.all()  # the synthetic captions swap words: equal token counts
    every = patched_run(run, sites, range(len(sites)), source)
    # the last layer's states are the donor's, so the pooled embedding is too; compared with a
    # tolerance because the two rows go through the final norm and projection as different rows
    torch.testing.assert_close(every[:n], base[n:], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(every[n:], base[n:], rtol=1e-5, atol=1e-6)  # donors untouched
    # the last layer alone, or layer 0 alone (everything after runs on the donor's input), too
    torch.testing.assert_close(patched_run(run, sites, [len(sites) - 1], source)[:n], base[n:], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(patched_run(run, sites, [0], source)[:n], base[n:], rtol=1e-4, atol=1e-5)
    # no layer, or no position: the recipient's own output
    torch.testing.assert_close(patched_run(run, sites, [], source), base, rtol=1e-5, atol=1e-6)
    none = torch.full_like(source, -1)
    torch.testing.assert_close(patched_run(run, sites, [3], none), base, rtol=1e-5, atol=1e-6)
    # a middle layer at the swapped positions moves the output, but not all the way
    swapped, _ = _sources(clip, rec, don, "swapped")
    mid = patched_run(run, sites, [2], swapped)[:n]
    assert not torch.allclose(mid, base[:n])
    assert hook_count(clip.model) == before


def test_position_groups_partition_the_tokens(clip: CLIPAdapter, pairs: tuple[list[str], list[str]]) -> None:
    rec, don = pairs
    allp, _ = _sources(clip, rec, don, "all")
    sw, _ = _sources(clip, rec, don, "swapped")
    rest, _ = _sources(clip, rec, don, "rest")
    assert not ((sw >= 0) & (rest >= 0)).any()
    assert torch.equal((sw >= 0) | (rest >= 0), allp >= 0)
    assert (sw >= 0).any(1).all()  # every pair differs somewhere
    cls, defined = _sources(clip, rec, don, "cls")
    assert defined.all() and ((cls >= 0).sum(1) == 1).all()
    # different token counts: the token-wise groups are undefined, cls still works
    ids, m = clip.tokens(["a red circle", "a red circle left of a blue square"])
    src, ok = position_sources(ids[:1], ids[1:], m[:1], m[1:], "all")
    assert not ok.any() and (src < 0).all()


def test_no_hook_is_left_behind_even_when_the_run_fails(clip: CLIPAdapter) -> None:
    sites = clip.layer_sites("text")
    before = hook_count(clip.model)
    with pytest.raises(RuntimeError, match="boom"):
        with edited_layers(sites, {1: lambda h: h, 2: lambda h: h}):
            assert hook_count(clip.model) == before + 2
            raise RuntimeError("boom")
    assert hook_count(clip.model) == before
    with pytest.raises(IndexError, match="outside"):
        with edited_layers(sites, {len(sites): lambda h: h}):
            pass
    assert hook_count(clip.model) == before


def test_image_tower_patching(clip: CLIPAdapter, synthetic_dir: Path) -> None:
    ds = load_dataset("winoground", synthetic_dir)
    imgs = [ds.items[0].images[0].load(), ds.items[0].images[1].load()]
    run = lambda: clip.encode("image", imgs + imgs[::-1], layers=[0]).pooled  # noqa: E731
    base = run()
    before = hook_count(clip.model)
    sites = clip.layer_sites("image")
    t = clip.encode("image", imgs[:1], layers=[0]).hidden.shape[2]
    every = torch.arange(t).expand(2, t).clone()
    torch.testing.assert_close(patched_run(run, sites, range(len(sites)), every)[:2], base[2:], rtol=1e-5, atol=1e-6)
    assert hook_count(clip.model) == before


def test_uniter_image_view_after_padded_text(tiny_uniter: Path, synthetic_dir: Path, synthetic_regions: Path) -> None:
    """The regions follow the text padded to the batch's longest caption: patching the image view
    must find them at that offset for every row, also rows whose own caption is shorter."""
    from vlprobe.extract.models.uniter.adapter import UniterAdapter
    from vlprobe.extract.regions.store import RegionStore
    from vlprobe.extract.scoring import ImageSource
    from vlprobe.fixtures.regions import random_regions

    adapter = UniterAdapter.load(str(tiny_uniter / "uniter-base.pt"))
    ds = load_dataset("winoground", synthetic_dir)
    refs = [ds.items[0].images[0], ds.items[0].images[1]]
    regions = random_regions(synthetic_regions.parent / "five.h5", [r.name for r in refs], n_boxes=5, seed=3)
    with RegionStore(regions) as store:
        images = adapter.prepare_images(ImageSource("regions", refs, store).read([0, 1]))
    texts = adapter.prepare_texts(["a cat", "a red circle left of a blue square above a green triangle"])
    assert texts.lengths[0] < texts.lengths[1]  # row 0's regions start after padding
    # recipients: (short caption, image 0), (long caption, image 1); donors: the same captions, other image
    t_idx, i_idx = np.array([0, 1, 0, 1]), np.array([0, 1, 1, 0])
    run = lambda: adapter.plain_pair_scores(texts, images, t_idx, i_idx)  # noqa: E731
    base = run()
    sites = adapter.layer_sites("image")
    every = torch.arange(5).expand(2, 5).clone()
    before = hook_count(adapter.model)
    # the text is the same, the regions the donor's: the donor's score (float32 tolerance: the
    # copied states run again in another row)
    for layers in ([0], range(len(sites))):
        torch.testing.assert_close(patched_run(run, sites, layers, every)[:2], base[2:], rtol=1e-5, atol=1e-6)
    # at block 1 the text positions have already read the recipient's regions: part of the way
    mid = patched_run(run, sites, [1], every)[:2]
    assert not torch.allclose(mid, base[:2]) and not torch.allclose(mid, base[2:])
    torch.testing.assert_close(patched_run(run, sites, [len(sites) - 1], every), base, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(patched_run(run, sites, [0], torch.full_like(every, -1)), base, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(base[:2], base[2:])  # the two images score differently
    assert hook_count(adapter.model) == before


@pytest.mark.parametrize("stream", ["text", "image"])
def test_siglip_towers(stream: str, tiny_siglip: Path, synthetic_dir: Path) -> None:
    """SigLIP's text runs unmasked over 64 positions (padding computed and read by the head):
    every position aligns, so patching all of them at any one layer gives the donor's embedding."""
    from vlprobe.extract.models.siglip import SiglipAdapter

    siglip = SiglipAdapter.load(str(tiny_siglip))
    ds = load_dataset("winoground", synthetic_dir)
    if stream == "text":
        rec = [it.texts[0].text for it in ds.items[:4]] + ["a cat"]
        don = [it.texts[1].text for it in ds.items[:4]] + ["a red circle left of a blue square"]
        ids, mask = siglip.tokens(rec + don)
        assert mask.all() and ids.shape[1] == siglip.max_length
        n = len(rec)
        source, defined = position_sources(ids[:n], ids[n:], mask[:n], mask[n:], "all")
        assert defined.all()  # fixed length: also captions of different token counts
        inputs = rec + don
    else:
        imgs = [ds.items[0].images[0].load(), ds.items[0].images[1].load()]
        inputs, n = imgs + imgs[::-1], 2
        t = siglip.encode("image", imgs[:1], layers=[0]).hidden.shape[2]
        source = torch.arange(t).expand(n, t).clone()
    run = lambda: siglip.encode(stream, inputs, layers=[0]).pooled  # noqa: E731
    base = run()
    sites = siglip.layer_sites(stream)
    assert len(sites) == siglip.streams[stream].n_layers
    before = hook_count(siglip.model)
    # float32 tolerance: the donor's states run again (or through the head) in another row
    for layers in ([0], [len(sites) - 1], range(len(sites))):
        torch.testing.assert_close(patched_run(run, sites, layers, source)[:n], base[n:], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(patched_run(run, sites, [], source), base, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(patched_run(run, sites, [1], torch.full_like(source, -1)), base, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(base[:n], base[n:], atol=1e-4)
    assert hook_count(siglip.model) == before


def test_joint_sources_move_a_stream_map_into_the_sequence() -> None:
    """A stream at varying offsets of a joint sequence (a generative model's caption after the image
    tokens): stream position p of recipient r takes stream position q of its donor, i.e. sequence
    position index_r[p] takes the donor's index_d[q]; padding and unmapped positions keep."""
    from vlprobe.extract.patching import joint_sources

    source = torch.tensor([[0, 1, -1], [-1, 2, 0]])
    rec = torch.tensor([[5, 6, -1], [3, 4, 5]])
    don = torch.tensor([[7, 8, 9], [2, 3, 4]])
    out = joint_sources(source, rec, don, width=10)
    want = torch.full((2, 10), -1)
    want[0, 5], want[0, 6] = 7, 8
    want[1, 4], want[1, 5] = 4, 2
    assert torch.equal(out, want)
    with pytest.raises(ValueError, match="outside the stream's tokens"):
        joint_sources(torch.tensor([[0, 0, 2]]), rec[:1], don[:1], width=10)  # recipient position 2 is padding
