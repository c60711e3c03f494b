"""VL-CheckList: the loader on the fixture (the 56 files, POS[0]/NEG[0], the 1,000-record cap),
the ITC accuracy per file and the radar's spokes against a literal re-implementation of the
authors' evaluate.py (itc) and radar.py on planted scores with ties, `probe eval vl-checklist`
with a tiny CLIP, `probe data info`, `probe run bias-gap`, and refused inputs."""

from __future__ import annotations

import csv
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from vlprobe.cli import app
from vlprobe.data.benchmark_fixtures import write_benchmark_fixture
from vlprobe.data.vl_checklist import VLC_FILES, VLC_SUBSETS, load_vl_checklist
from vlprobe.experiments.benchmark_eval import EvalConfig, run_eval
from vlprobe.runs.score_files import write_item_scores

N = 5
_SWIG = ("agent", "destination", "item", "tool")


def radar_structure() -> dict[str, dict[str, list[str]]]:
    """The spokes of the authors' corpus.json (radar.py's input): spoke -> corpus -> result files."""
    out: dict[str, dict[str, list[str]]] = {}
    for kind, values in (("Size", ("large", "medium", "small")), ("Location", ("center", "mid", "margin"))):
        for v in values:
            out[v] = {"vg": [f"Object_{kind}_{v}_vg_obj", f"Object_{kind}_{v}_vg_subj"],
                      "swig": [f"Object_{kind}_{v}_swig_{r}" for r in _SWIG], "hake": [f"Object_{kind}_{v}_hake"]}
    for a in ("color", "material", "action", "size", "state"):
        out[f"{a}_a" if a == "action" else a] = {"vg": [f"Attribute_{a}_vg"], "vaw": [f"Attribute_{a}_vaw"]}
    out["action_r"] = {"vg": ["Relation_action_vg"], "swig": ["Relation_action_swig"], "hake": ["Relation_action_hake"]}
    out["spatial"] = {"vg": ["Relation_spatial_vg"]}
    return out


def itc_total_acc(pos: list[float], neg: list[float]) -> float:
    """evaluate.py's itc branch after the model calls: num_t / (num_t + num_f)."""
    num_t = num_f = 0
    for p, n in zip(pos, neg, strict=True):
        if p > n:
            num_t += 1
        else:
            num_f += 1
    return float(num_t) / (num_t + num_f)


def radar_scores(total_acc: dict[str, float]) -> dict[str, float]:
    """radar.py's generate_chart score loop (one model)."""
    out = {}
    for item, corpora in radar_structure().items():
        data_score = []
        for files in corpora.values():
            data_score.append(sum(total_acc[f] for f in files) / len(files))
        out[item] = sum(data_score) / len(corpora)
    return out


@pytest.fixture(scope="module")
def vlc_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_benchmark_fixture(tmp_path_factory.mktemp("vlc") / "vlc", "vl-checklist", n_items=N, seed=4,
                                   image_size=24)


def test_loader_reads_the_authors_files(vlc_dir: Path) -> None:
    assert len(VLC_SUBSETS) == 56 and sum(len(f) for c in radar_structure().values() for f in c.values()) == 56
    ds = load_vl_checklist(vlc_dir, image_root=[str(vlc_dir)])
    assert len(ds) == 56 * N
    raw = json.loads((vlc_dir / "data" / VLC_FILES["Relation_action_swig"]).read_text(encoding="utf-8"))
    it = next(i for i in ds if i.id == "vl-checklist/Relation_action_swig/2")
    assert [t.text for t in it.captions] == [raw[2][1]["POS"][0], raw[2][1]["NEG"][0]]
    assert it.images[0].path == vlc_dir / "swig" / raw[2][0] and it.tags["aspect"] == ("Relation_action",)
    vaw = next(i for i in ds if i.meta["subset"] == "Attribute_color_vaw")
    assert vaw.images[0].path.is_relative_to(vlc_dir / "vg")  # VAW's images are Visual Genome's
    # the authors' itc run takes the first MAX_NUM / 2 = 1000 records per file: the default limit
    assert len(load_vl_checklist(vlc_dir, subsets="Attribute_size_vg", limit=2)) == 2
    assert load_vl_checklist(vlc_dir, subsets="Attribute_size_vg").source.endswith("first 1000 records each)")


def test_accuracy_and_radar_equal_the_authors_code_with_ties(vlc_dir: Path, tmp_path: Path) -> None:
    ds = load_vl_checklist(vlc_dir)
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 3, size=(len(ds), 2)).astype(np.float64) * 0.5  # a third of the items tie
    path = write_item_scores(tmp_path / "planted.scores.jsonl", [it.id for it in ds for _ in (0, 1)],
                             [it.images[0].id for it in ds for _ in (0, 1)], [t.id for it in ds for t in it.captions],
                             scores.ravel())
    _, _, rows = run_eval(EvalConfig(benchmark="vl-checklist", out=tmp_path, scores=path, data_dir=vlc_dir,
                                     bootstrap=20))
    got = {(r["subset"], r["metric"]): r for r in rows}
    total = {}
    for subset in VLC_SUBSETS:
        mask = np.array([it.meta["subset"] == subset for it in ds])
        total[subset] = itc_total_acc(scores[mask, 0].tolist(), scores[mask, 1].tolist())
        assert got[(subset, "accuracy")]["value"] == pytest.approx(100 * total[subset], abs=1e-9)
    spokes = {"large": "Object_Size_large", "medium": "Object_Size_medium", "small": "Object_Size_small",
              "center": "Object_Location_center", "mid": "Object_Location_mid", "margin": "Object_Location_margin",
              "color": "Attribute_color", "material": "Attribute_material", "size": "Attribute_size",
              "state": "Attribute_state", "action_a": "Attribute_action", "action_r": "Relation_action",
              "spatial": "Relation_spatial"}
    radar = radar_scores(total)
    for key, scope in spokes.items():
        assert got[(scope, "accuracy")]["value"] == pytest.approx(100 * radar[key], abs=1e-9)
        assert got[(scope, "accuracy.ci95_low")]["value"] <= got[(scope, "accuracy")]["value"] + 1e-9
    assert got[("Relation", "accuracy")]["value"] == pytest.approx(50 * (radar["action_r"] + radar["spatial"]), abs=1e-9)
    assert got[("Object_Size_large_swig", "accuracy")]["n"] == 4 * N
    assert "radar" in got[("Object_Size_large", "accuracy")]["note"]
    # every row names its scope: no mean over every file under an empty subset name with a file's note
    assert all(r["subset"] for r in rows), sorted({r["metric"] for r in rows if not r["subset"]})


def test_eval_with_clip_data_info_and_bias_gap(vlc_dir: Path, tiny_clip: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    subsets = "Attribute_color_vg,Attribute_color_vaw,Relation_spatial_vg"
    result = runner.invoke(app, ["eval", "vl-checklist", "--model", "clip", "--checkpoint", str(tiny_clip),
                                 "--data-dir", str(vlc_dir), "--image-root", str(vlc_dir), "--subsets", subsets,
                                 "--out", str(tmp_path), "--bootstrap", "20", "--quiet"])
    assert result.exit_code == 0, result.output
    with open(tmp_path / "vl-checklist" / "clip@bootstrap=20.csv", encoding="utf-8", newline="") as fh:
        rows = {(r["subset"], r["metric"]): r for r in csv.DictReader(fh)}
    assert rows[("Attribute_color", "accuracy")]["n"] == str(2 * N)
    assert float(rows[("Attribute_color", "accuracy")]["value"]) == pytest.approx(
        (float(rows[("Attribute_color_vg", "accuracy")]["value"])
         + float(rows[("Attribute_color_vaw", "accuracy")]["value"])) / 2)
    assert ("Object", "accuracy") not in rows  # no Object file in the run
    result = runner.invoke(app, ["data", "info", "vl-checklist", "--data-dir", str(vlc_dir), "--json"])
    assert result.exit_code == 0, result.output
    reports = {r["name"]: r for r in json.loads(result.stdout)}
    assert len(reports) == 56 and reports["Relation_action_hake"]["items"] == N
    result = runner.invoke(app, ["run", "bias-gap", "--dataset", "vl-checklist", "--data-dir", str(vlc_dir),
                                 "--subsets", subsets, "--scorers", "caption-length", "--out", str(tmp_path),
                                 "--bootstrap", "10", "--quiet"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "bias-gap" / "vl-checklist@bootstrap=10.items.csv").is_file()


def test_refused_inputs(vlc_dir: Path, tiny_clip: Path, tmp_path: Path, one_error_line: Callable[..., str]) -> None:
    runner = CliRunner()
    crepe = write_benchmark_fixture(tmp_path / "crepe", "crepe", n_items=1)
    one_error_line(runner.invoke(app, ["data", "info", "vl-checklist", "--data-dir", str(crepe)]),
                   "data_dir:", "another benchmark's folder")
    broken = tmp_path / "broken"
    shutil.copytree(vlc_dir, broken)
    raw = json.loads((broken / "data" / VLC_FILES["Relation_spatial_vg"]).read_text(encoding="utf-8"))
    (broken / "vg" / raw[1][0]).unlink()
    one_error_line(runner.invoke(app, ["eval", "vl-checklist", "--model", "clip", "--checkpoint", str(tiny_clip),
                                       "--data-dir", str(broken), "--image-root", str(broken),
                                       "--subsets", "Relation_spatial_vg", "--out", str(tmp_path / "o"), "--quiet"]),
                   "Relation/vg/spatial.json record 1: field 'path'", raw[1][0])
    raw[3][1].pop("NEG")
    (broken / "data" / VLC_FILES["Relation_spatial_vg"]).write_text(json.dumps(raw), encoding="utf-8")
    one_error_line(runner.invoke(app, ["eval", "vl-checklist", "--model", "caption-length", "--data-dir", str(broken),
                                       "--subsets", "Relation_spatial_vg", "--out", str(tmp_path / "o"), "--quiet"]),
                   "spatial.json record 3: field 'NEG'")
