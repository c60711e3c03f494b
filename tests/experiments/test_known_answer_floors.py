"""Known answers: the probes, run on models whose answers are known, must find them.

One testbed run (the same as ``probe fixtures testbed`` and ``make demo``: training split and
evaluation set, CLIP trained / shuffled-words control / random weights, LXMERT on oracle regions /
random weights, every experiment), then the known answers as floors. Each floor was measured on
this machine with the default settings (seed 0; the measured value is in the comment beside it)
and leaves a margin below it; none was tuned to pass. Where a known answer does not come out, the
test pins what was measured with a comment: those are findings about the probes, kept visible.

Marked ``testbed`` (minutes on 2 cores): deselected unless pytest gets ``--testbed``
(``make test-testbed``). The table is printed (``-s``) with its seeds.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.experiments.helpers import CLIPTestbed
from vlprobe.launch.testbed import KnownAnswerConfig, run_testbed

pytestmark = [pytest.mark.slow, pytest.mark.testbed]


@pytest.fixture(scope="module")
def testbed(tmp_path_factory: pytest.TempPathFactory, testbed_clip: CLIPTestbed) -> dict[str, Any]:
    # The session's CLIP models (and training split) are reused, as a second `probe fixtures
    # testbed` run on the same models folder reuses them: the CLIP trainings run once per session.
    out = tmp_path_factory.mktemp("testbed")
    result = run_testbed(KnownAnswerConfig(out=out, models_dir=testbed_clip.models, jobs=2), echo=lambda text: None)
    table = result["report"]["table"]
    print("\nknown-answer table (seeds: " + table[0]["seeds"] + ")")
    for r in table:
        print(f"{r['model']:<16} {r['metric']:<38} {float(r['value']):8.3f}")
    return result


@pytest.fixture(scope="module")
def v(testbed: dict[str, Any]) -> dict[tuple[str, str], float]:
    return {(r["model"], r["metric"]): float(r["value"]) for r in testbed["report"]["table"]}


def test_clip_winoground_scores(v: dict[tuple[str, str], float]) -> None:
    trained, shuffle, rand = "clip-trained", "clip-shuffle", "clip-random"
    # Measured: text / image / group trained 65 / 62 / 60, shuffle 14 / 6 / 1, random 1 / 4 / 1.
    assert v[trained, "winoground.text"] >= 55
    assert v[trained, "winoground.image"] >= 52
    for metric in ("winoground.text", "winoground.image"):
        assert v[trained, metric] >= v[shuffle, metric] + 30
        assert v[trained, metric] >= v[rand, metric] + 40


def test_bag_of_words_control_on_same_word_captions(v: dict[tuple[str, str], float]) -> None:
    # Every synthetic item's two captions hold the same words. Finding: the shuffle-trained CLIP
    # scores 14 there, not the "near 0" (< 10) an order-blind text tower would: its
    # causal transformer with position embeddings, trained on shuffled words, is only
    # approximately order-invariant, so the two captions' scores differ a little, at random.
    # Pinned at the measured level plus a margin, far below the trained model.
    assert v["clip-shuffle", "winoground.text.same_words"] <= 25
    assert v["clip-shuffle", "winoground.text.same_words"] <= v["clip-trained", "winoground.text.same_words"] - 30


def test_separability(v: dict[tuple[str, str], float]) -> None:
    # Mean SVM margin at the last text layer, target / control: trained 5.03 / 0.39 (ratio 12.8),
    # shuffle 0.54 / 0.31 (ratio 1.7).
    assert v["clip-trained", "separability.separable_margin.ratio"] >= 6
    assert v["clip-shuffle", "separability.separable_margin.ratio"] <= 3
    # Finding: % separable puts the target BELOW its control (measured 92 vs 98.5). With 8 to
    # 14 points per item in 64 dimensions every labelling without coinciding points is linearly
    # separable, so the shuffled-label control is separable almost always; the target fails where
    # a converse paraphrase of one caption ("a red diamond is below a blue star") lies next to
    # the other caption's copula paraphrase ("a red diamond is above a blue star"), a pair the
    # target always labels apart and shuffled labels only half the time. The metric saturates;
    # the margin is the informative one.
    assert v["clip-trained", "separability.separable.target"] < v["clip-trained", "separability.separable.control"]


def test_task_adaptation(v: dict[tuple[str, str], float]) -> None:
    # Measured (test accuracy, %): trained text 75.7 / image 74.3 vs control 54.7 / 52.7; random 49.3 / 49.7.
    for mode in ("text", "image"):
        assert v["clip-trained", f"task_adaptation.{mode}.target"] >= 65
        assert v["clip-trained", f"task_adaptation.{mode}.target"] >= v["clip-trained", f"task_adaptation.{mode}.control"] + 10
        assert 40 <= v["clip-random", f"task_adaptation.{mode}.target"] <= 60


def test_variant_probe(v: dict[tuple[str, str], float]) -> None:
    # Measured (last layer, test accuracy, %): trained 84.0 vs control 50.3.
    assert v["clip-trained", "variant_probe.target"] >= 70
    assert v["clip-trained", "variant_probe.target"] >= v["clip-trained", "variant_probe.control"] + 15


def test_lxmert_on_oracle_regions(v: dict[tuple[str, str], float]) -> None:
    # Finding: the known answer for swaps does not come out. Since the trainer initialises at
    # 1/sqrt(width) (BERT's 0.02 left the [CLS] state blind to the pair) the model learns which
    # objects a caption names (matches against another item's caption: AUROC 1.00 in a diagnostic
    # run, 0.67 before), but not which attribute goes with which shape or which shape is where.
    # Measured: AUROC matches vs swaps trained 0.503 vs random 0.505; Winoground text / image /
    # group trained 9 / 8 / 3 vs random 1 / 10 / 0. The text score is above random weights by the
    # report's 5-point margin, but below the 25 % of a scorer whose four scores are independent:
    # it is what little non-additive noise the scores hold, not learnt matching. Pinned as
    # measured, so that a trainer that learns swaps flips these visibly.
    assert abs(v["lxmert-trained", "match.auroc"] - v["lxmert-random", "match.auroc"]) < 0.05
    assert v["lxmert-trained", "winoground.text"] >= 5 and v["lxmert-trained", "winoground.text"] <= 20
    assert v["lxmert-trained", "winoground.image"] <= 20 and v["lxmert-random", "winoground.image"] <= 20


def test_report_files(testbed: dict[str, Any]) -> None:
    report = testbed["report"]
    assert report["figure"].is_file() and report["csv"].is_file()
    text = report["summary_path"].read_text(encoding="utf-8")
    assert "known answers come out as expected" in text and "not the paper defaults" in text
