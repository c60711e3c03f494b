"""Known answers of the probes beyond the paper, on the testbed's CLIP models.

The testbed's three CLIP models (:func:`testbed_clip`: trained with word order kept, trained on
shuffled words, random initial weights; default settings, seed 0) are probed by each method
through its library entry on their caches of the evaluation set (100 items), with small settings
(below, per method), and each method's known answer is checked:

* held-out separability: the trained model's leave-one-out accuracy is above its control task at
  the last text layers; random weights show no gap;
* mdl: the trained model's labels compress better than its control task's, the shuffle
  control's and random weights';
* conditional: information over the bag-of-words baseline > 0 at the trained model's later text
  layers, about 0 for the shuffle control;
* erasure: erasing the caption-side concept moves the trained model's text score toward chance
  more than the control concept does; random weights barely move;
* patch: the trained model's score gap, where in the text tower it sits;
* bag-of-words slices: on same-words items the shuffle control is at or below chance while the
  trained model is not.

Each floor was measured on this machine (the value is in the comment beside it) and leaves a
margin; none was tuned to pass. Where a known answer does not come out, the measured figure is
pinned with the reason: a finding about the probe, kept visible. The measured table is printed
(``-s``).

Marked ``testbed`` (minutes on 2 cores: the two CLIP trainings take most of it): deselected
unless pytest gets ``--testbed``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pytest

from tests.experiments.helpers import BEYOND_MODELS, CLIPTestbed
from vlprobe.experiments.conditional import ConditionalConfig, run_conditional
from vlprobe.experiments.erasure import ErasureConfig, run_erasure
from vlprobe.experiments.mdl import MDLConfig, run_mdl
from vlprobe.experiments.patch import PatchConfig, run_patch
from vlprobe.experiments.separability import SeparabilityConfig, run_separability
from vlprobe.results.known_answers import run_file
from vlprobe.runs.summary import read_tidy_csv

pytestmark = [pytest.mark.slow, pytest.mark.testbed]

TRAINED, SHUFFLE, RANDOM = BEYOND_MODELS
Rows = dict[str, list[dict[str, Any]]]


def value(rows: Iterable[dict[str, Any]], metric: str, **where: Any) -> float:
    """The mean value of the rows with ``metric`` and every ``where`` field (subset ``all`` unless
    given); an error when none matches (a test must not pass on a missing figure)."""
    where.setdefault("subset", "all")
    got = [float(r["value"]) for r in rows
           if r["metric"] == metric and all(str(r.get(k)) == str(v) for k, v in where.items())]
    if not got:
        raise LookupError(f"no row with metric {metric!r} and {where}")
    return float(np.mean(got))


def _print(title: str, lines: Iterable[str]) -> None:
    print(f"\n{title}")
    for line in lines:
        print(f"  {line}")


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return tmp_path_factory.mktemp("beyond-results")


# -- held-out separability ------------------------------------------------------------------------------

SEP_LAYERS = (3, 4)  # the last two of the text tower's layers 0..4


@pytest.fixture(scope="module")
def separability(testbed_clip: CLIPTestbed, out: Any) -> Rows:
    """``separability --held-out`` at the last two text layers, EOS pooling, 1 control seed."""
    rows = {}
    for m in BEYOND_MODELS:
        config = SeparabilityConfig(cache=testbed_clip.caches[m], out=out, name=m, layers=",".join(map(str, SEP_LAYERS)),
                                    seeds=1, held_out=True, bootstrap=100, permutations=100, progress=False)
        rows[m] = run_separability(config)[2]
    _print("held-out separability (leave-one-out accuracy %, target / control)", [
        f"{m:<13} layer {layer}: {value(rows[m], 'heldout_accuracy', layer=layer, task='target'):6.2f} / "
        f"{value(rows[m], 'heldout_accuracy', layer=layer, task='control'):6.2f}"
        for m in BEYOND_MODELS for layer in SEP_LAYERS])
    return rows


def _heldout_gap(rows: list[dict[str, Any]], layer: int) -> float:
    return (value(rows, "heldout_accuracy", layer=layer, task="target")
            - value(rows, "heldout_accuracy", layer=layer, task="control"))


def test_heldout_separability(separability: Rows) -> None:
    for layer in SEP_LAYERS:
        # Measured (layers 3 / 4): trained 82.3 / 82.0 against its control 44.2 / 45.1 (gap 38.1 /
        # 36.9); random weights 46.4 / 45.0 against 46.1 / 45.4 (gap 0.3 / -0.4). The control
        # lies below 50: leaving a point out of a shuffled labelling tips the rest against its
        # class, so the control, not 50, is the chance level.
        assert value(separability[TRAINED], "heldout_accuracy", layer=layer, task="target") >= 70
        assert _heldout_gap(separability[TRAINED], layer) >= 25
        assert abs(_heldout_gap(separability[RANDOM], layer)) <= 8
        # Finding: the shuffle control keeps a gap, half the trained model's: 63.0 / 61.8 against
        # 45.9 / 44.9 (gap 17.1 / 16.9), not "no gap". Its text tower (a causal transformer with
        # position embeddings, trained on shuffled words) is only approximately order-blind (its
        # same-words Winoground text score is 14, not 0), and held-out accuracy reads that residue.
        # Pinned: well below the trained model's gap, well above random weights'.
        assert 8 <= _heldout_gap(separability[SHUFFLE], layer) <= 27
        assert _heldout_gap(separability[TRAINED], layer) >= _heldout_gap(separability[SHUFFLE], layer) + 10


# -- mdl -------------------------------------------------------------------------------------------------------

MDL_LAYERS = (3, 4)


@pytest.fixture(scope="module")
def mdl(testbed_clip: CLIPTestbed, out: Any) -> dict[str, Rows]:
    """Online code length: variant labels at the last two text layers (2 draws), and task
    adaptation's text-score labels at the last layer; 1 item order, the default MLP (2 layers,
    width 128, 50 epochs)."""
    rows: dict[str, Rows] = {"variant": {}, "text-score": {}}
    for m in BEYOND_MODELS:
        cache = testbed_clip.caches[m]
        rows["variant"][m] = run_mdl(MDLConfig(cache=cache, out=out, name=m, labels="variant", draws=2, seeds=1,
                                               layers=",".join(map(str, MDL_LAYERS)), progress=False))[2]
        rows["text-score"][m] = run_mdl(MDLConfig(cache=cache, out=out, name=m, labels="text-score", seeds=1,
                                                  layers="-1", progress=False))[2]
    lines = [f"{m:<13} variant layer {layer}: {value(rows['variant'][m], 'compression', layer=layer, task='target'):5.3f}"
             f" / {value(rows['variant'][m], 'compression', layer=layer, task='control'):5.3f}"
             for m in BEYOND_MODELS for layer in MDL_LAYERS]
    lines += [f"{m:<13} text-score last layer: {value(rows['text-score'][m], 'compression', subset='text-score', task='target'):5.3f}"
              f" / {value(rows['text-score'][m], 'compression', subset='text-score', task='control'):5.3f}"
              for m in BEYOND_MODELS]
    _print("mdl (compression = uniform / online code, target / control)", lines)
    return rows


def test_mdl_variant_labels(mdl: dict[str, Rows]) -> None:
    rows = mdl["variant"]

    def comp(m: str, layer: int, task: str = "target") -> float:
        return value(rows[m], "compression", layer=layer, task=task)

    for layer in MDL_LAYERS:
        # Measured (layers 3 / 4): trained 1.273 / 1.294 against its control 0.852 / 0.828, the
        # shuffle control 0.787 / 0.813 and random weights 0.673 / 0.665; the shuffle control and
        # random weights compress their target no better than their control task (0.787 vs 0.789,
        # 0.813 vs 0.800; 0.673 vs 0.644, 0.665 vs 0.649). Below 1: the probe's early blocks
        # cost more than the uniform code.
        assert comp(TRAINED, layer) >= 1.1
        assert comp(TRAINED, layer) >= comp(TRAINED, layer, "control") + 0.25
        assert comp(TRAINED, layer) >= comp(SHUFFLE, layer) + 0.25
        assert comp(TRAINED, layer) >= comp(RANDOM, layer) + 0.35
        for m in (SHUFFLE, RANDOM):
            assert abs(comp(m, layer) - comp(m, layer, "control")) <= 0.1


def test_mdl_text_score_labels(mdl: dict[str, Rows]) -> None:
    rows = mdl["text-score"]

    def comp(m: str, task: str = "target") -> float:
        return value(rows[m], "compression", subset="text-score", task=task)

    # Measured (last layer): trained 1.225 against its control 0.944; shuffle control 0.820 / 0.819,
    # random weights 0.817 / 0.819.
    assert comp(TRAINED) >= comp(TRAINED, "control") + 0.12
    assert comp(TRAINED) >= comp(RANDOM) + 0.2
    assert comp(TRAINED) >= comp(SHUFFLE) + 0.2
    for m in (SHUFFLE, RANDOM):
        assert abs(comp(m) - comp(m, "control")) <= 0.08


# -- conditional ---------------------------------------------------------------------------------------------

COND_LAYERS = (2, 3, 4)


@pytest.fixture(scope="module")
def conditional(testbed_clip: CLIPTestbed, out: Any) -> Rows:
    """Information gain over the bag-of-words baseline (layer-0 mean) at the later text layers;
    1 probe seed, 2 draws, the default MLP."""
    rows = {m: run_conditional(ConditionalConfig(cache=testbed_clip.caches[m], out=out, name=m, seeds=1, draws=2,
                                                 layers=",".join(map(str, COND_LAYERS)), bootstrap=100,
                                                 progress=False))[2] for m in BEYOND_MODELS}
    _print("conditional (information gain over bag of words, bits per example)", [
        f"{m:<13} " + "  ".join(f"layer {layer}: {value(rows[m], 'information_gain', layer=layer, seed=0):+.3f}"
                                for layer in COND_LAYERS) for m in BEYOND_MODELS])
    return rows


def test_conditional_information_over_bag_of_words(conditional: Rows) -> None:
    def gain(m: str, layer: int) -> float:
        return value(conditional[m], "information_gain", layer=layer, seed=0)

    for layer in COND_LAYERS:
        # Measured (layers 2 / 3 / 4): trained +0.529 / +0.430 / +0.414; shuffle control -0.124 /
        # -0.036 / -0.055 (about 0: its text tower adds (almost) no order beyond the bag of words).
        assert gain(TRAINED, layer) >= 0.2
        assert abs(gain(SHUFFLE, layer)) <= 0.25
        assert gain(TRAINED, layer) >= gain(SHUFFLE, layer) + 0.3
        # Finding: random weights' gain is negative (-0.375 / -0.404 / -0.375), not 0: the joint
        # probe, twice as wide, overfits the layer's random features and its held-out
        # cross-entropy rises. The information gain is bounded below by the probe's overfitting,
        # not by 0.
        assert gain(RANDOM, layer) <= 0.1


# -- erasure -------------------------------------------------------------------------------------------------

ERASE_LAYERS = (1, 2, 3, 4)


@pytest.fixture(scope="module")
def erasure(testbed_clip: CLIPTestbed, out: Any) -> Rows:
    """LEACE at every text layer (the unedited model too), target concept and 1 control concept."""
    rows = {m: run_erasure(ErasureConfig(out=out, model="clip", checkpoint=str(testbed_clip.models / m),
                                         data_dir=testbed_clip.data, name=m, seeds=1, bootstrap=100,
                                         device="cpu", progress=False))[2] for m in BEYOND_MODELS}
    _print("erasure (Winoground text score %: unedited; erased at layer L, target / control)", [
        f"{m:<13} {value(rows[m], 'text', probe='none'):5.1f};  " + "  ".join(
            f"L{layer} {value(rows[m], 'text', layer=layer, task='target'):4.1f} / "
            f"{value(rows[m], 'text', layer=layer, task='control'):4.1f}" for layer in (0, *ERASE_LAYERS))
        for m in BEYOND_MODELS])
    return rows


def test_erasure(erasure: Rows) -> None:
    def drop(m: str, layer: int, task: str = "target") -> float:
        return value(erasure[m], "text", probe="none") - value(erasure[m], "text", layer=layer, task=task)

    # Measured: trained 65 unedited; erased at layers 1..4, target 58 / 60 / 59 / 59 (drop 6.0 on
    # average), control 60 / 65 / 64 / 64 (drop 1.75); random weights 1, erased 0 / 2 / 0 / 2.
    target = np.mean([drop(TRAINED, layer) for layer in ERASE_LAYERS])
    control = np.mean([drop(TRAINED, layer, "control") for layer in ERASE_LAYERS])
    assert target >= 3
    assert target >= control + 2
    for layer in ERASE_LAYERS:
        assert abs(drop(RANDOM, layer)) <= 3
    # Finding: the scores move toward chance (25) by a few points only and stay far from it. The
    # concept is the caption's side of its pair (caption 0 / caption 1), which is not one property
    # across items (which caption is 0 is arbitrary per item): LEACE removes the one direction
    # that separates the two sides on average, and most of each item's difference lies elsewhere
    # (measured on the cache: the mean over items of caption 0 minus caption 1, mean-pooled at
    # layers 1..4, holds 1.7 to 2.2% of the differences' mean squared norm, about what 100 items
    # of unrelated directions would give).
    # At layer 0 nothing moves (65): both captions hold the same tokens, so their mean token
    # embeddings agree up to the positions.
    for layer in ERASE_LAYERS:
        assert value(erasure[TRAINED], "text", layer=layer, task="target") >= 45
    assert abs(drop(TRAINED, 0)) <= 2


# -- patch -----------------------------------------------------------------------------------------------------

PATCH_LAYERS = (0, 1, 3)


@pytest.fixture(scope="module")
def patch(testbed_clip: CLIPTestbed, out: Any) -> Rows:
    """Activation patching in the text tower at layers 0, 1 and 3, every position group."""
    rows = {m: run_patch(PatchConfig(out=out, model="clip", checkpoint=str(testbed_clip.models / m),
                                     data_dir=testbed_clip.data, name=m, streams=("text",),
                                     layers=",".join(map(str, PATCH_LAYERS)), bootstrap=100, device="cpu",
                                     progress=False))[2] for m in BEYOND_MODELS}
    lines = []
    for m in BEYOND_MODELS:
        lines.append(f"{m:<13} full change {value(rows[m], 'full_change', layer=0, probe='positions=all'):.4f}")
        lines += [f"{'':<13} layer {layer}: " + "  ".join(
            f"{g} {value(rows[m], 'recovered', layer=layer, probe=f'positions={g}'):+.3f}"
            for g in ("all", "swapped", "rest", "cls")) for layer in PATCH_LAYERS]
    _print("patch (text tower: recovered fraction of the score gap per position group)", lines)
    return rows


def test_patch(patch: Rows) -> None:
    def rec(m: str, layer: int, group: str) -> float:
        return value(patch[m], "recovered", layer=layer, probe=f"positions={group}")

    # The score gap between an item's two captions (mean |score difference|): trained 0.149, shuffle
    # control 0.009, random weights 0.008.
    gap = {m: value(patch[m], "full_change", layer=0, probe="positions=all") for m in BEYOND_MODELS}
    assert gap[TRAINED] >= 5 * gap[SHUFFLE] and gap[TRAINED] >= 5 * gap[RANDOM]
    for m in BEYOND_MODELS:
        for layer in PATCH_LAYERS:
            # Every position at one layer: the donor's run from there on (tolerance: the patched
            # run batches differently from the donor's own).
            assert rec(m, layer, "all") == pytest.approx(1.0, abs=1e-3)
        # Layer 0 (the embeddings): the captions differ only at the swapped words' positions, so
        # patching those recovers all, the rest nothing, in every model (by construction).
        assert rec(m, 0, "swapped") == pytest.approx(1.0, abs=1e-3)
        assert abs(rec(m, 0, "rest")) <= 1e-3
    # Finding: "the swapped positions at early layers recover most of the gap" holds at the
    # embeddings only. After one block (layer 1) the trained model's swapped positions recover
    # 0.145 and the rest 0.855: causal attention has already carried the difference into the
    # later tokens (random weights: 0.564 / 0.436, the shuffle control 0.321 / 0.679).
    assert rec(TRAINED, 1, "swapped") <= 0.4 and rec(TRAINED, 1, "rest") >= 0.6
    # The trained model gathers the difference into the summary token (EOS) by layer 3: 0.926,
    # against 0.223 for random weights (the shuffle control, trained too, 0.837).
    assert rec(TRAINED, 3, "cls") >= 0.75
    assert rec(TRAINED, 3, "cls") >= rec(RANDOM, 3, "cls") + 0.4


# -- bag-of-words slices ----------------------------------------------------------------------------------------

def test_bag_of_words_slices(testbed_clip: CLIPTestbed) -> None:
    """``winoground-scores``' bow slices, from the testbed's own run of it."""
    rows = {}
    for m in BEYOND_MODELS:
        path = run_file(testbed_clip.results, "winoground-scores", m)
        assert path is not None
        rows[m] = read_tidy_csv(path)
    _print("bag-of-words slices (Winoground text / image score %, bow=same)", [
        f"{m:<13} {value(rows[m], 'text', subset='bow=same'):5.1f} / {value(rows[m], 'image', subset='bow=same'):5.1f}"
        for m in BEYOND_MODELS])
    # Every synthetic item's two captions hold the same words: bow=same is every item, bow=different empty.
    for m in BEYOND_MODELS:
        n = {r["subset"]: int(r["n"]) for r in rows[m] if r["metric"] == "text" and r["subset"].startswith("bow=")}
        assert n == {"bow=same": 100, "bow=different": 0}
    same = {m: value(rows[m], "text", subset="bow=same") for m in BEYOND_MODELS}
    # Measured: trained 65, shuffle control 14, random weights 1. Chance for the text score is 25
    # (two coin flips); an order-blind text tower ties the two captions and scores 0. The shuffle
    # control's 14 lies between (it is approximately order-blind).
    assert same[TRAINED] >= 55
    assert same[SHUFFLE] <= 25
    assert same[TRAINED] >= same[SHUFFLE] + 30
