"""Every experiment on LXMERT and UNITER caches made from the fixtures, at its defaults.

Cross-encoder caches hold pair streams that lack some poolings (LXMERT ``vision`` and UNITER
``image`` have no ``cls`` or ``pooled``) and sweep different numbers of layers (LXMERT ``lang``
15, ``vision`` 11): the defaults must still run, read each stream with its own default pooling
when it lacks the asked one, say so, and record it.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.experiments.helpers import only_run
from vlprobe.experiments.recall import RecallConfig, run_recall
from vlprobe.experiments.separability import SeparabilityConfig, run_separability
from vlprobe.experiments.task_adaptation import TaskAdaptationConfig, run_task_adaptation
from vlprobe.experiments.variant_probe import VariantProbeConfig, run_variant_probe
from vlprobe.experiments.variant_similarity import VariantSimilarityConfig, run_variant_similarity
from vlprobe.experiments.winoground_scores import WinogroundScoresConfig, run_winoground_scores
from vlprobe.extract.cache.reader import ActivationCache
from vlprobe.extract.runner import extract
from vlprobe.validation import InputError

MODELS = ("lxmert", "uniter")
#: MLP settings that keep the runs short; everything else stays at the experiment's default.
SHORT = {"seeds": 1, "epochs": 1, "width": 8}


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _run(manifest_path: Path, model: str) -> dict[str, Any]:
    return only_run(manifest_path, model)


@pytest.mark.parametrize("model", MODELS)
def test_separability_defaults(model: str, cross_reference: Callable[[str], Path], tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    csv_path, manifest_path, rows = run_separability(SeparabilityConfig(
        cache=cross_reference(model), out=tmp_path, seeds=1, max_iter=200))
    run = _run(manifest_path, model)
    pooling = {s: info["pooling"] for s, info in run["streams"].items()}
    if model == "lxmert":  # no text stream: every pair stream; vision has no cls, so its default
        assert pooling == {"lang": "cls", "vision": "mean"}
        assert run["pooling_fallback"] == {"vision": {"asked": "cls", "used": "mean"}}
        assert "stream vision has no 'cls' states; using its default 'mean'" in capsys.readouterr().err
        assert len(run["streams"]["lang"]["layers"]) == 15 and len(run["streams"]["vision"]["layers"]) == 11
    else:  # UNITER: the text view of the joint sequence has its token 0
        assert pooling == {"text": "cls"} and run["pooling_fallback"] == {}
    written = {(r["stream"], r["pooling"]) for r in _csv(csv_path)}
    assert written == set(pooling.items())
    assert {(r["stream"], r["pooling"]) for r in rows} == written
    # The layer kind column: the model's declared kind of each stream's layer.
    with ActivationCache(cross_reference(model)) as cache:
        declared = {s: cache.model_layer_kinds(s) for s in cache.streams}
    for r in _csv(csv_path):
        assert r["kind"] == declared[r["stream"]][int(r["layer"])], r
    kinds = {r["kind"] for r in _csv(csv_path)}
    assert kinds == ({"embed", "lang", "rel", "cross"} if model == "lxmert" else {"embed", "joint"})


@pytest.mark.parametrize("model", MODELS)
def test_task_adaptation_defaults_use_the_pooled_output(model: str, cross_reference: Callable[[str], Path],
                                                        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The paper's default: the model's own pooled output (LXMERT lang, UNITER text) only."""
    pooled_stream = {"lxmert": "lang", "uniter": "text"}[model]
    csv_path, manifest_path, _ = run_task_adaptation(TaskAdaptationConfig(
        cache=cross_reference(model), out=tmp_path, **SHORT))
    run = _run(manifest_path, model)
    assert run["streams"] == [pooled_stream] and run["pooling"] == {pooled_stream: "pooled"}
    rows = _csv(csv_path)
    assert {(r["stream"], r["pooling"], r["layer"]) for r in rows} == {(pooled_stream, "pooled", "")}
    assert {r["subset"] for r in rows} == {"text-score", "image-score"}
    assert "left out" in capsys.readouterr().err


def test_task_adaptation_sweeps_of_unequal_length_pair_by_relative_depth(
    cross_reference: Callable[[str], Path], tmp_path: Path,
) -> None:
    """LXMERT with --pooling mean: lang sweeps 15 layers, vision 11; paired ends to ends."""
    csv_path, manifest_path, _ = run_task_adaptation(TaskAdaptationConfig(
        cache=cross_reference("lxmert"), out=tmp_path, pooling="mean", mode="text", **SHORT))
    run = _run(manifest_path, "lxmert")
    positions = run["layer_positions"]
    assert len(positions) == 15
    assert positions[0] == {"lang": 0, "vision": 0} and positions[-1] == {"lang": 14, "vision": 10}
    assert [p["lang"] for p in positions] == list(range(15))
    vision = [p["vision"] for p in positions]
    assert vision == sorted(vision) and set(vision) == set(range(11))  # every vision layer, in order
    assert positions[7]["vision"] == 5  # the middle with the middle
    assert "relative depth" in run["layer_pairing"]
    layers = sorted({int(r["layer"]) for r in _csv(csv_path)})
    assert layers == list(range(15))  # the layer column holds the longest sweep's layer
    # kind: both streams' kinds at the position, one where they agree (lang 3 meets vision rel 2).
    kind = {int(r["layer"]): r["kind"] for r in _csv(csv_path)}
    assert kind[0] == "embed" and kind[14] == "cross" and kind[3] == "lang+rel"


def test_task_adaptation_cls_given_is_refused_on_a_stream_without_cls(
    cross_reference: Callable[[str], Path], tmp_path: Path,
) -> None:
    """--pooling cls over LXMERT's lang and vision (vision has no cls): refused in one line, not run
    with vision's mean under cls's name; the §3.2 CLS recipe names lang only and runs."""
    with pytest.raises(InputError, match=r"pooling: stream 'vision' of .* has no 'cls' states .*leave --pooling out"):
        run_task_adaptation(TaskAdaptationConfig(
            cache=cross_reference("lxmert"), out=tmp_path, pooling="cls", layers="lang=14;vision=10", **SHORT))
    assert not (tmp_path / "task-adaptation").exists()
    _, manifest_path, _ = run_task_adaptation(TaskAdaptationConfig(
        cache=cross_reference("lxmert"), out=tmp_path, pooling="cls", streams=("lang",), layers="14", **SHORT))
    run = _run(manifest_path, "lxmert")
    assert run["pooling"] == {"lang": "cls"} and run["pooling_fallback"] == {}


def test_task_adaptation_named_stream_without_pooled_reads_its_last_layer(
    cross_reference: Callable[[str], Path], tmp_path: Path,
) -> None:
    _, manifest_path, _ = run_task_adaptation(TaskAdaptationConfig(
        cache=cross_reference("uniter"), out=tmp_path, streams=("text", "image"), **SHORT))
    run = _run(manifest_path, "uniter")
    assert run["pooling"] == {"text": "pooled", "image": "mean"}
    assert run["pooling_fallback"] == {"image": {"asked": "pooled", "used": "mean", "layers": [2]}}


@pytest.mark.parametrize("model", MODELS)
def test_variant_probe_defaults(model: str, cross_reference: Callable[[str], Path], tmp_path: Path) -> None:
    csv_path, manifest_path, _ = run_variant_probe(VariantProbeConfig(
        cache=cross_reference(model), out=tmp_path, **SHORT))
    run = _run(manifest_path, model)
    stream = {"lxmert": "lang", "uniter": "text"}[model]
    assert list(run["streams"]) == [stream] and run["streams"][stream]["pooling"] == "cls"
    assert run["pooling_fallback"] == {}
    assert {r["stream"] for r in _csv(csv_path)} == {stream}


def test_variant_probe_on_a_stream_without_cls(cross_reference: Callable[[str], Path], tmp_path: Path) -> None:
    csv_path, manifest_path, _ = run_variant_probe(VariantProbeConfig(
        cache=cross_reference("lxmert"), out=tmp_path, streams=("vision",), layers="-1", **SHORT))
    run = _run(manifest_path, "lxmert")
    assert run["pooling_fallback"] == {"vision": {"asked": "cls", "used": "mean"}}
    assert {(r["stream"], r["pooling"], r["layer"]) for r in _csv(csv_path)} == {("vision", "mean", "10")}


@pytest.mark.parametrize("model", MODELS)
def test_variant_similarity_and_winoground_scores_defaults(model: str, cross_reference: Callable[[str], Path],
                                                           tmp_path: Path) -> None:
    _, _, rows = run_variant_similarity(VariantSimilarityConfig(cache=cross_reference(model), out=tmp_path))
    assert {r["metric"].split(".")[0] for r in rows} == {"text", "image", "group"} and rows  # with .ci95_* rows
    _, _, rows = run_winoground_scores(WinogroundScoresConfig(cache=cross_reference(model), out=tmp_path))
    assert {"text", "image", "group"} <= {r["metric"] for r in rows}


@pytest.fixture(scope="module")
def all_pairs(tmp_path_factory: pytest.TempPathFactory, cross_config: Callable[..., Any]) -> Callable[[str], Path]:
    """``all_pairs(model)``: a scores-only cache of every image x every caption (no variants)."""
    made: dict[str, Path] = {}

    def get(model: str) -> Path:
        if model not in made:
            out = tmp_path_factory.mktemp(f"all-{model}") / f"{model}.h5"
            assert extract(cross_config(model, out, pair_plan="all", variants=None)).complete
            made[model] = out
        return made[model]

    return get


@pytest.mark.parametrize("model", MODELS)
def test_recall_defaults(model: str, all_pairs: Callable[[str], Path], cross_reference: Callable[[str], Path],
                         tmp_path: Path) -> None:
    _, _, rows = run_recall(RecallConfig(cache=all_pairs(model), out=tmp_path))
    assert {r["subset"] for r in rows} == {"i2t", "t2i"}
    assert {f"recall@{k}" for k in (1, 2, 5, 10)} <= {r["metric"] for r in rows}
    # An item-plan cache has no full matrix: one input error naming the fix.
    with pytest.raises(ValueError, match="extract with --pair-plan all"):
        run_recall(RecallConfig(cache=cross_reference(model), out=tmp_path / "item"))
