"""Winoground text / image / group scores per subset (vlprobe.experiments.winoground_scores)."""

from __future__ import annotations

import csv
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from typer.testing import CliRunner

from vlprobe.cli import app
from vlprobe.experiments.winoground_scores import (
    WinogroundScoresConfig,
    item_scores_from_cache,
    read_model_scores,
    run_winoground_scores,
    subset_masks,
)
from vlprobe.extract.cache.reader import ActivationCache
from vlprobe.provenance import sha256_file
from vlprobe.runs.writing import TIDY_COLUMNS
from vlprobe.stats.metrics import winoground_outcomes

WWH_TAGS = ("Non Minimal", "Ambiguously Correct", "Visually Difficult", "Unusual Image",
            "Unusual Text", "Complex Reasoning")
TAG_COUNTS = {"Complex Reasoning": 78, "Unusual Image": 56, "Unusual Text": 50,
              "Ambiguously Correct": 46, "Visually Difficult": 38, "Non Minimal": 30}  # counts in the tag file
METRICS = ("text", "image", "group", "matching")
WWH_GROUPS = ("wwh=NoTag", "wwh=Easier", "wwh=Harder", "wwh=NoTag-corrected", "wwh=Easier-corrected",
              "wwh=Harder-corrected")


# --- helpers and fixtures -----------------------------------------------------------------------


def point_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The point estimates of a run's rows (without the bootstrap interval rows)."""
    return [r for r in rows if ".ci95_" not in r["metric"]]


@pytest.fixture(scope="module")
def real_tags(wwh_tags: Path) -> Path:
    return wwh_tags


def write_scores(path: Path, ids: list[int], s: np.ndarray, order: np.ndarray | None = None) -> Path:
    """A model_scores JSONL file: one line per (id, caption k, image j)."""
    lines = [
        json.dumps({"label": f"{wid}_c{k}_i{j}", "score": float(s[n, k, j])})
        for n, wid in enumerate(ids) for k in (0, 1) for j in (0, 1)
    ]
    if order is not None:
        lines = [lines[i] for i in order]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with open(path, encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames or []), list(reader)


def expected_mask(subset: str, ids: list[int], tags: list[dict[str, list[str]]]) -> np.ndarray:
    """The items of a subset, computed from the definitions (not from subset_masks)."""
    if subset == "all":
        return np.ones(len(ids), dtype=bool)
    family, value = subset.split("=", 1)
    if family != "wwh":
        if value == "(none)":
            return np.array([not t.get(family) for t in tags])
        return np.array([value in t.get(family, []) for t in tags])
    lists = [t.get("wwh", []) for t in tags]
    untagged = np.array([not w for w in lists])
    code_none = untagged & (np.asarray(ids) != 313)
    non_minimal = np.array(["Non Minimal" in w for w in lists])
    easier, code_easier = untagged | non_minimal, code_none | non_minimal
    return {
        "NoTag": code_none, "Easier": code_easier, "Harder": ~code_easier,
        "NoTag-corrected": untagged, "Easier-corrected": easier, "Harder-corrected": ~easier,
    }.get(value, np.array([value in w for w in lists]))


def expected_value(hit: np.ndarray, mask: np.ndarray) -> float:
    n = int(mask.sum())
    return 100.0 * int((hit & mask).sum()) / n if n else float("nan")


# Items with a known outcome, s[k, j]; every one is multiplied by a > 0 and shifted by b > 0.
TEMPLATES: dict[tuple[bool, bool], list[list[list[float]]]] = {
    (True, True): [[1.0, 0.0], [0.0, 1.0]],
    (True, False): [[0.5, 0.6], [0.1, 0.9]],
    (False, True): [[0.5, 0.1], [0.6, 0.9]],
    (False, False): [[0.1, 0.9], [0.8, 0.2]],
}
TIE = [[0.5, 0.5], [0.5, 0.5]]  # fails everything


def designed_scores(n: int, seed: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(s, outcomes) for n items whose text/image outcomes are drawn from a seeded RNG."""
    rng = np.random.default_rng(seed)
    text = rng.random(n) < 0.4
    image = rng.random(n) < 0.5
    tie = rng.random(n) < 0.05
    s = np.empty((n, 2, 2))
    for i in range(n):
        base = np.array(TIE if tie[i] else TEMPLATES[(bool(text[i]), bool(image[i]))])
        s[i] = rng.uniform(0.5, 3.0) * base + rng.uniform(0.01, 1.0)
    text &= ~tie
    image &= ~tie
    matching = s[:, 0, 0] * s[:, 1, 1] > s[:, 0, 1] * s[:, 1, 0]
    return s, {"text": text, "image": image, "group": text & image, "matching": matching}


@pytest.fixture(scope="module")
def cache_setup(synthetic_dir: Path, reference_cache: Path) -> dict[str, Path]:
    """The session's synthetic dataset (12 items, with variants) and its complete tiny-CLIP cache."""
    return {"data": synthetic_dir, "cache": reference_cache}


def cache_tables(path: Path) -> dict[str, Any]:
    with ActivationCache(path) as c:
        matrix, _ = c.scores()
        return {"matrix": matrix, "items": c.table("items"), "images": c.table("images"),
                "texts": c.table("texts")}


# --- read_model_scores --------------------------------------------------------------------------


def test_read_model_scores_exact(tmp_path: Path) -> None:
    ids = [7, 0, 399, 12]
    rng = np.random.default_rng(1)
    s = rng.normal(size=(4, 2, 2)) * 30
    path = write_scores(tmp_path / "m.jsonl", ids, s, order=rng.permutation(16))
    got_ids, got = read_model_scores(path)
    assert got_ids == [0, 7, 12, 399]  # ascending
    order = [ids.index(w) for w in got_ids]
    assert got.shape == (4, 2, 2)
    np.testing.assert_array_equal(got, s[order])


def test_read_model_scores_layout_and_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text(
        '{"label": "3_c0_i0", "score": 1}\n\n'
        '{"label": "3_c0_i1", "score": 2.5}\n'
        '{"score": -3, "label": "3_c1_i0"}\n'
        '{"label": "3_c1_i1", "score": 4e1}\n\n',
        encoding="utf-8",
    )
    ids, s = read_model_scores(path)
    assert ids == [3]
    np.testing.assert_array_equal(s, [[[1.0, 2.5], [-3.0, 40.0]]])  # s[n, caption, image]


def _four(wid: int) -> list[str]:
    return [json.dumps({"label": f"{wid}_c{k}_i{j}", "score": 1.0}) for k in (0, 1) for j in (0, 1)]


@pytest.mark.parametrize(
    ("lines", "match"),
    [
        (['{"score": 1.0}'], "line 1"),  # missing label
        (['{"label": "0_c0_i0"}'], "line 1"),  # missing score
        (["not json"], "line 1"),
        (['["0_c0_i0", 1.0]'], "line 1"),
        (['{"label": "0_c0_i0", "score": "high"}'], "line 1"),
        # Scores must be JSON numbers: NaN, infinities, booleans and numeric strings were taken before.
        (['{"label": "0_c0_i0", "score": NaN}'], "line 1 has score nan, expected a finite number"),
        (['{"label": "0_c0_i0", "score": Infinity}'], "line 1 has score inf"),
        (['{"label": "0_c0_i0", "score": true}'], "line 1 has score True"),
        (['{"label": "0_c0_i0", "score": "0.5"}'], "line 1 has score '0.5'"),
        ([*_four(0)[:3], '{"label": "0_c0_i2", "score": 1}'], "line 4.*0_c0_i2"),
        (['{"label": "0-c0-i0", "score": 1}'], "0-c0-i0"),
        (['{"label": "ex_0_c0_i0", "score": 1}'], "ex_0_c0_i0"),
        (['{"label": "0_c2_i0", "score": 1}'], "0_c2_i0"),
        ([*_four(0), _four(0)[2]], "line 5 repeats.*0_c1_i0"),
        ([*_four(0), *_four(1)[:3]], "3 of 4 scores for id 1"),
        ([], "no scores"),
        (["", "   "], "no scores"),
    ],
)
def test_read_model_scores_errors(tmp_path: Path, lines: list[str], match: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines), encoding="utf-8")
    with pytest.raises(ValueError, match=match):
        read_model_scores(path)


def test_read_model_scores_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="scores"):
        read_model_scores(tmp_path / "absent.jsonl")


# --- subset_masks -------------------------------------------------------------------------------


def test_subset_masks_real_tag_file(real_tags: Path) -> None:
    raw = json.loads(real_tags.read_text(encoding="utf-8"))
    ids = list(range(400))
    tags = [{"wwh": raw[str(i)]} for i in ids]
    masks = subset_masks(ids, tags)
    assert next(iter(masks)) == "all"
    assert set(masks) == {"all", *(f"wwh={t}" for t in WWH_TAGS), *WWH_GROUPS}
    counts = {k: int(v.sum()) for k, v in masks.items()}
    assert counts["all"] == 400
    # The plain names are the paper's sets, as its code builds them (171 / 201 / 199).
    assert counts["wwh=NoTag"] == 171
    assert counts["wwh=Easier"] == 201 and counts["wwh=Harder"] == 199
    assert counts["wwh=NoTag-corrected"] == 172
    assert counts["wwh=Easier-corrected"] == 202 and counts["wwh=Harder-corrected"] == 198
    for tag, n in TAG_COUNTS.items():
        assert counts[f"wwh={tag}"] == n, tag
    # The one id that separates the two NoTag lists, and where it lands: untagged, so easier,
    # except in the paper code's split.
    assert masks["wwh=NoTag-corrected"][313] and not masks["wwh=NoTag"][313]
    assert raw["313"] == [] and masks["wwh=Easier-corrected"][313] and masks["wwh=Harder"][313]
    assert (masks["wwh=Easier"] != masks["wwh=Easier-corrected"]).sum() == 1
    np.testing.assert_array_equal(masks["wwh=Easier"], ~masks["wwh=Harder"])
    np.testing.assert_array_equal(masks["wwh=Easier-corrected"], ~masks["wwh=Harder-corrected"])
    for name, mask in masks.items():
        assert mask.dtype == bool and mask.shape == (400,), name
        np.testing.assert_array_equal(mask, expected_mask(name, ids, tags), err_msg=name)


def test_subset_masks_other_families() -> None:
    ids = [0, 1, 2, 3]
    tags = [
        {"tag": ["Noun"], "collapsed_tag": ["Object"], "secondary_tag": [], "num_main_preds": ["1"]},
        {"tag": ["Verb"], "collapsed_tag": ["Relation"], "secondary_tag": ["Symbolic", "Series"],
         "num_main_preds": ["2"]},
        {"tag": ["Noun"], "collapsed_tag": ["Object"], "secondary_tag": ["Series"], "num_main_preds": ["1"]},
        {"tag": ["Adjective-Color"], "collapsed_tag": ["Relation"], "secondary_tag": [],
         "num_main_preds": ["1"]},
    ]
    masks = subset_masks(ids, tags)
    assert not any(k.startswith("wwh=") for k in masks)  # no tag file, no wwh subsets
    expected = {
        "all": [1, 1, 1, 1],
        "collapsed_tag=Object": [1, 0, 1, 0], "collapsed_tag=Relation": [0, 1, 0, 1],
        "num_main_preds=1": [1, 0, 1, 1], "num_main_preds=2": [0, 1, 0, 0],
        "secondary_tag=Series": [0, 1, 1, 0], "secondary_tag=Symbolic": [0, 1, 0, 0],
        "secondary_tag=(none)": [1, 0, 0, 1],
        "tag=Adjective-Color": [0, 0, 0, 1], "tag=Noun": [1, 0, 1, 0], "tag=Verb": [0, 1, 0, 0],
    }
    assert set(masks) == set(expected)
    for name, want in expected.items():
        np.testing.assert_array_equal(masks[name], np.array(want, dtype=bool), err_msg=name)


def test_subset_masks_without_tags() -> None:
    masks = subset_masks([5, 6], [{}, {}])
    assert list(masks) == ["all"]
    np.testing.assert_array_equal(masks["all"], [True, True])


# --- run from a model_scores file ----------------------------------------------------------------


def test_run_from_scores_file_with_real_tags(tmp_path: Path, real_tags: Path) -> None:
    ids = list(range(400))
    s, outcomes = designed_scores(400, seed=3)
    np.testing.assert_array_equal(winoground_outcomes(s)["text"], outcomes["text"])  # design check
    scores_file = write_scores(tmp_path / "designed.jsonl", ids, s,
                               order=np.random.default_rng(4).permutation(1600))
    out = tmp_path / "out"
    csv_path, manifest_path, written = run_winoground_scores(
        WinogroundScoresConfig(out=out, scores=scores_file, tags=real_tags)
    )
    rows = point_rows(written)
    assert csv_path == out / "winoground-scores" / "designed.csv"
    assert manifest_path == out / "winoground-scores" / "manifest.json"

    raw = json.loads(real_tags.read_text(encoding="utf-8"))
    tags = [{"wwh": raw[str(i)]} for i in ids]
    subsets = ["all", *(f"wwh={t}" for t in WWH_TAGS), *WWH_GROUPS]
    assert {r["subset"] for r in rows} == set(subsets)
    assert len(rows) == len(subsets) * len(METRICS)
    by_key = {(r["subset"], r["metric"]): r for r in rows}
    assert len(by_key) == len(rows)
    for subset in subsets:
        mask = expected_mask(subset, ids, tags)
        for metric in METRICS:
            row = by_key[(subset, metric)]
            assert row["n"] == int(mask.sum())
            assert row["value"] == pytest.approx(expected_value(outcomes[metric], mask), rel=1e-12, abs=1e-12), (
                subset, metric)
            assert (row["experiment"], row["model"], row["task"], row["split"]) == (
                "winoground-scores", "designed", "target", "all")
    assert by_key[("all", "text")]["value"] == pytest.approx(100.0 * outcomes["text"].mean())

    # The CSV holds exactly these rows.
    header, got = read_csv(csv_path)
    assert header == [*TIDY_COLUMNS, "bootstrap", "bootstrap_seed"]  # the setting columns
    assert len(got) == len(written)
    for row, line in zip(written, got, strict=True):
        assert line["subset"] == row["subset"] and line["metric"] == row["metric"]
        assert float(line["value"]) == row["value"]
        assert int(line["n"]) == row["n"]
        assert line["stream"] == line["layer"] == ""
        assert line["seed"] == ""  # no probe seed; the intervals' resampling seed is the bootstrap_seed column
        assert line["bootstrap_seed"] == "0" and line["unit"] == "percent"

    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    assert manifest["experiment"] == "winoground-scores"
    run = manifest["runs"]["designed"]
    assert run["experiment"] == "winoground-scores"
    assert run["n_items"] == 400
    assert run["model"] == "designed"
    assert run["config"]["scores"] == str(scores_file)
    assert run["config"]["tags"] == str(real_tags)
    assert run["config"]["cache"] is None
    assert run["inputs"]["scores"] == {"path": str(scores_file), "sha256": sha256_file(scores_file)}
    assert run["inputs"]["tags"] == {"tags": sha256_file(real_tags)}
    assert {"git_revision", "versions", "seeds"} <= set(run)


def test_run_from_scores_file_without_tags(tmp_path: Path) -> None:
    s, outcomes = designed_scores(30, seed=5)
    ids = list(range(100, 130))
    scores_file = write_scores(tmp_path / "plain.jsonl", ids, s)
    _, _, rows = run_winoground_scores(
        WinogroundScoresConfig(out=tmp_path / "o", scores=scores_file, name="my-model")
    )
    rows = point_rows(rows)
    assert {r["subset"] for r in rows} == {"all"}
    assert {r["model"] for r in rows} == {"my-model"}
    assert (tmp_path / "o" / "winoground-scores" / "my-model.csv").is_file()
    for r in rows:
        assert r["n"] == 30
        assert r["value"] == pytest.approx(100.0 * outcomes[r["metric"]].mean())


def test_matching_is_nan_and_explained_when_a_score_is_negative(tmp_path: Path) -> None:
    s, _ = designed_scores(8, seed=6)
    s[3, 0, 1] = -1.0
    scores_file = write_scores(tmp_path / "neg.jsonl", list(range(8)), s)
    csv_path, manifest_path, rows = run_winoground_scores(WinogroundScoresConfig(out=tmp_path / "o", scores=scores_file))
    assert {r["metric"] for r in point_rows(rows)} == set(METRICS)
    matching = [r for r in rows if r["metric"].startswith("matching")]
    assert len(matching) == 3 and all(np.isnan(r["value"]) for r in matching)  # value and interval
    assert all(not np.isnan(r["value"]) for r in rows if not r["metric"].startswith("matching"))
    _, lines = read_csv(csv_path)
    assert {line["value"] for line in lines if line["metric"] == "matching"} == {"nan"}
    # The reason is in the CSV itself, on the metric's own rows; the other metrics carry no note.
    assert all("non-negative" in line["note"] for line in lines if line["metric"] == "matching")
    assert {line["note"] for line in lines if line["metric"] in ("text", "image", "group")} == {""}
    run = json.loads(manifest_path.read_text(encoding="utf-8"))["runs"]["neg"]
    assert set(run["undefined_metrics"]) == {"matching"} and "non-negative" in run["undefined_metrics"]["matching"]


def test_matching_with_zero_scores_equals_the_definition(tmp_path: Path) -> None:
    # Binary 0/1 scores, like Winoground's human judgements (published matching score 97.25).
    rng = np.random.default_rng(12)
    s = rng.integers(0, 2, size=(200, 2, 2)).astype(float)
    scores_file = write_scores(tmp_path / "binary.jsonl", list(range(200)), s)
    _, manifest_path, rows = run_winoground_scores(WinogroundScoresConfig(out=tmp_path / "o", scores=scores_file))
    hits = sum(1 for n in range(200) if s[n, 0, 0] * s[n, 1, 1] > s[n, 0, 1] * s[n, 1, 0])
    got = next(r for r in rows if r["metric"] == "matching" and r["subset"] == "all")
    assert got["value"] == pytest.approx(100.0 * hits / 200, abs=1e-12)
    assert json.loads(manifest_path.read_text(encoding="utf-8"))["runs"]["binary"]["undefined_metrics"] == {}


def test_run_ids_missing_from_tag_file(tmp_path: Path, real_tags: Path) -> None:
    s, _ = designed_scores(2, seed=7)
    scores_file = write_scores(tmp_path / "far.jsonl", [399, 400], s)
    with pytest.raises(ValueError, match=r"tags: ids \[400\]"):
        run_winoground_scores(WinogroundScoresConfig(out=tmp_path / "o", scores=scores_file, tags=real_tags))
    assert not (tmp_path / "o").exists()


def test_run_needs_exactly_one_input(tmp_path: Path, cache_setup: dict[str, Path]) -> None:
    s, _ = designed_scores(2, seed=8)
    scores_file = write_scores(tmp_path / "x.jsonl", [0, 1], s)
    for inputs in ({}, {"cache": cache_setup["cache"], "scores": scores_file}):
        with pytest.raises(ValueError, match="exactly one of cache"):
            run_winoground_scores(WinogroundScoresConfig(out=tmp_path / "o", **inputs))
    assert not (tmp_path / "o").exists()


# --- run from a cache ---------------------------------------------------------------------------


def test_item_scores_from_cache(cache_setup: dict[str, Path]) -> None:
    path = cache_setup["cache"]
    t = cache_tables(path)
    model, ids, s, tags, prov = item_scores_from_cache(path)
    assert model == "clip"
    assert ids == list(range(12))
    assert s.shape == (12, 2, 2)
    image_ids, text_ids = list(t["images"]["id"]), list(t["texts"]["id"])
    for n, wid in enumerate(ids):
        for k in (0, 1):
            for j in (0, 1):
                row = image_ids.index(f"winoground/{wid}/i{j}")
                col = text_ids.index(f"winoground/{wid}/c{k}")
                assert t["texts"]["parent"][col] == -1
                assert s[n, k, j] == t["matrix"][row, col], (n, k, j)
    # the cache's tags, plus the bag-of-words tag computed from the item's two captions
    assert [{k: v for k, v in x.items() if k != "bow"} for x in tags] == [json.loads(x) for x in t["items"]["tags"]]
    assert all(x["bow"] == ["same"] for x in tags)  # the synthetic captions swap words
    assert all("wwh" in x for x in tags)
    assert prov["sha256"] == sha256_file(path)
    assert prov["model"] == "clip"
    assert prov["score_kind"] == "cosine"
    assert prov["path"] == str(path)


def test_item_scores_ignore_variants(cache_setup: dict[str, Path], tmp_path: Path) -> None:
    src = cache_setup["cache"]
    _, _, s, _, _ = item_scores_from_cache(src)
    copy = tmp_path / "c.h5"
    shutil.copyfile(src, copy)
    with h5py.File(copy, "r+") as f:
        variants = np.flatnonzero(f["texts/parent"][()] >= 0)
        assert len(variants) > 0  # the test needs a cache with variants
        matrix = f["scores/matrix"][()]
        matrix[:, variants] = 1e6
        f["scores/matrix"][...] = matrix
        done = f["scores/done"][()]
        done[:, variants] = False  # unscored variants do not matter either
        f["scores/done"][...] = done
    _, _, s2, _, _ = item_scores_from_cache(copy)
    np.testing.assert_array_equal(s2, s)


def test_item_scores_incomplete_cache(cache_setup: dict[str, Path], tmp_path: Path) -> None:
    copy = tmp_path / "c.h5"
    shutil.copyfile(cache_setup["cache"], copy)
    with h5py.File(copy, "r+") as f:
        f["scores/done"][3, 3] = False  # image 1 of item 1 with caption 1 of item 1
    with pytest.raises(ValueError, match="lacks some caption-image scores"):
        item_scores_from_cache(copy)


def test_item_scores_refuses_other_datasets(cache_setup: dict[str, Path], tmp_path: Path) -> None:
    copy = tmp_path / "c.h5"
    shutil.copyfile(cache_setup["cache"], copy)
    with h5py.File(copy, "r+") as f:
        f.attrs["dataset"] = "sugarcrepe"
    with pytest.raises(ValueError, match="not winoground"):
        item_scores_from_cache(copy)


def test_run_from_cache(cache_setup: dict[str, Path], tmp_path: Path) -> None:
    path = cache_setup["cache"]
    _, ids, s, tags, _ = item_scores_from_cache(path)
    outcomes = winoground_outcomes(s)
    out = tmp_path / "out"
    csv_path, manifest_path, written = run_winoground_scores(WinogroundScoresConfig(out=out, cache=path))
    rows = point_rows(written)
    assert csv_path == out / "winoground-scores" / "clip.csv"
    all_rows = {r["metric"]: r for r in rows if r["subset"] == "all"}
    assert set(all_rows) == set(outcomes)
    for metric, hit in outcomes.items():
        assert all_rows[metric]["value"] == pytest.approx(100.0 * hit.mean())
        assert all_rows[metric]["n"] == 12
    # Every subset, including the cache's own tag families and the wwh tags.
    subsets = {r["subset"] for r in rows}
    assert {"collapsed_tag=Object", "collapsed_tag=Relation", "wwh=NoTag", "wwh=Harder"} <= subsets
    for r in rows:
        mask = expected_mask(r["subset"], ids, tags)
        assert r["n"] == int(mask.sum()), r["subset"]
        want = expected_value(outcomes[r["metric"]], mask)
        if np.isnan(want):
            assert np.isnan(r["value"]), r["subset"]
        else:
            assert r["value"] == pytest.approx(want), (r["subset"], r["metric"])
    run = json.loads(manifest_path.read_text(encoding="utf-8"))["runs"]["clip"]
    assert run["inputs"]["cache"]["sha256"] == sha256_file(path)
    assert run["config"]["cache"] == str(path)
    assert run["n_items"] == 12
    _, got = read_csv(csv_path)
    assert len(got) == len(written)


def test_run_from_cache_model_override(cache_setup: dict[str, Path], tmp_path: Path) -> None:
    csv_path, _, rows = run_winoground_scores(
        WinogroundScoresConfig(out=tmp_path, cache=cache_setup["cache"], name="tiny")
    )
    assert csv_path.name == "tiny.csv"
    assert {r["model"] for r in rows} == {"tiny"}


# --- CLI ----------------------------------------------------------------------------------------


def _all_lines(stdout: str) -> dict[str, str]:
    """metric -> printed line, for the 'all' rows."""
    out = {}
    for line in stdout.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[1] == "all":
            out[parts[2]] = line
    return out


def test_cli_from_cache(cache_setup: dict[str, Path], tmp_path: Path) -> None:
    _, _, s, _, _ = item_scores_from_cache(cache_setup["cache"])
    outcomes = winoground_outcomes(s)
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app, ["run", "winoground-scores", "--cache", str(cache_setup["cache"]), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    lines = _all_lines(result.stdout)
    assert set(lines) == set(outcomes)
    for metric, hit in outcomes.items():
        parts = lines[metric].split()
        assert parts[0] == "clip"
        assert float(parts[3]) == pytest.approx(100.0 * hit.mean(), abs=0.005)
        assert "(n=12)" in lines[metric]
    assert "wwh=" not in result.stdout  # only the 'all' rows are printed
    assert (out / "winoground-scores" / "clip.csv").is_file()
    assert str(out / "winoground-scores" / "manifest.json") in result.stdout


def test_cli_from_scores_file(tmp_path: Path, real_tags: Path) -> None:
    s, outcomes = designed_scores(400, seed=9)
    scores_file = write_scores(tmp_path / "cli-model.jsonl", list(range(400)), s)
    out = tmp_path / "out"
    result = CliRunner().invoke(app, [
        "run", "winoground-scores", "--scores", str(scores_file), "--tags", str(real_tags),
        "--out", str(out),
    ])
    assert result.exit_code == 0, result.output
    lines = _all_lines(result.stdout)
    assert set(lines) == set(METRICS)
    for metric in METRICS:
        parts = lines[metric].split()
        assert parts[0] == "cli-model"
        assert float(parts[3]) == pytest.approx(100.0 * outcomes[metric].mean(), abs=0.005)
        assert "(n=400)" in lines[metric]
    _, rows = read_csv(out / "winoground-scores" / "cli-model.csv")
    assert {r["subset"] for r in rows} >= {"wwh=NoTag", "wwh=Non Minimal"}


def test_cli_both_inputs(one_error_line: Callable[..., str], cache_setup: dict[str, Path], tmp_path: Path) -> None:
    s, _ = designed_scores(2, seed=10)
    scores_file = write_scores(tmp_path / "x.jsonl", [0, 1], s)
    result = CliRunner().invoke(app, [
        "run", "winoground-scores", "--cache", str(cache_setup["cache"]),
        "--scores", str(scores_file), "--out", str(tmp_path / "o"),
    ])
    one_error_line(result, "exactly one of cache")


def test_cli_neither_input(one_error_line: Callable[..., str], tmp_path: Path,
                           monkeypatch: pytest.MonkeyPatch) -> None:
    # Neither given: the experiment looks for caches/ (runs/each_cache.py); none here, so the
    # message names both ways in.
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["run", "winoground-scores", "--out", str(tmp_path / "o")])
    one_error_line(result, "cache: not given, and 'caches' is not a folder of caches", "or --scores FILE")


def test_cli_missing_cache(one_error_line: Callable[..., str], tmp_path: Path) -> None:
    result = CliRunner().invoke(app, [
        "run", "winoground-scores", "--cache", str(tmp_path / "absent.h5"), "--out", str(tmp_path / "o"),
    ])
    one_error_line(result, "no such file")


def test_cli_bad_scores_file(one_error_line: Callable[..., str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"label": "0_c0_i0", "score": 1}\n{"label": "oops", "score": 1}\n', encoding="utf-8")
    result = CliRunner().invoke(app, [
        "run", "winoground-scores", "--scores", str(bad), "--out", str(tmp_path / "o"),
    ])
    one_error_line(result, "line 2")


def test_cache_mode_refuses_data_dir(tmp_path: Path, reference_cache: Path) -> None:
    with pytest.raises(ValueError, match="data_dir applies to scores only"):
        run_winoground_scores(WinogroundScoresConfig(out=tmp_path / "o", cache=reference_cache, data_dir=tmp_path))
    assert not (tmp_path / "o").exists()


def test_cache_mode_tags_replace_the_wwh_tags(tmp_path: Path, reference_cache: Path) -> None:
    tag_file = tmp_path / "tags.json"
    tag_file.write_text(json.dumps({str(i): (["Unusual Text"] if i < 3 else []) for i in range(12)}))
    _, manifest_path, rows = run_winoground_scores(
        WinogroundScoresConfig(out=tmp_path / "o", cache=reference_cache, tags=tag_file)
    )
    n = {r["subset"]: r["n"] for r in rows}
    assert n["wwh=Unusual Text"] == 3 and n["wwh=NoTag"] == 9 and n["wwh=Non Minimal"] == 0
    assert "collapsed_tag=Object" in n  # the cache's own Winoground tags stay
    run = json.loads(manifest_path.read_text())["runs"]["clip"]
    assert run["inputs"]["cache"]["tags_override"] == {"tags": sha256_file(tag_file)}


def test_score_file_tags_from_a_data_dir_without_images(tmp_path: Path, synthetic_dir: Path) -> None:
    # Only captions and tags are read from data_dir: a copy without images/ serves as well.
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("examples.jsonl", "new_tag_assignments.json"):
        shutil.copy(synthetic_dir / name, bare / name)
    ids = [json.loads(line)["id"] for line in (bare / "examples.jsonl").read_text(encoding="utf-8").splitlines()]
    s, _ = designed_scores(len(ids), seed=3)
    scores_file = write_scores(tmp_path / "m.jsonl", ids, s)
    _, _, rows = run_winoground_scores(WinogroundScoresConfig(out=tmp_path / "o", scores=scores_file, data_dir=bare))
    _, _, full = run_winoground_scores(WinogroundScoresConfig(out=tmp_path / "o2", scores=scores_file,
                                                              data_dir=synthetic_dir))
    assert {"collapsed_tag=Object", "wwh=NoTag"} <= {r["subset"] for r in rows}
    assert ({(r["subset"], r["metric"]): r["value"] for r in rows}
            == pytest.approx({(r["subset"], r["metric"]): r["value"] for r in full}, nan_ok=True))


# --- the "Why is Winoground Hard?" tags: shipped, and missing ones said --------------------------


def test_a_dataset_without_a_tag_file_gets_the_shipped_tags_offline(
    tmp_path: Path, synthetic_dir: Path, make_config: Callable[..., Any], monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A Winoground folder as the hub's data/ holds it (no tag file), extracted offline: the items
    carry the tags vlprobe ships, and winoground-scores writes every wwh= subset, saying nothing."""
    from vlprobe.data.tags import WWH_TAGS_SHA256, load_tag_file, shipped_tag_file
    from vlprobe.extract.runner import extract

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    data = Path(shutil.copytree(synthetic_dir, tmp_path / "data"))
    (data / "new_tag_assignments.json").unlink()
    extract(make_config(tmp_path / "c.h5", data_dir=data, variants=None))
    capsys.readouterr()
    _, _, rows = run_winoground_scores(WinogroundScoresConfig(out=tmp_path / "o", cache=tmp_path / "c.h5"))
    assert "warning" not in capsys.readouterr().err
    n = {r["subset"]: r["n"] for r in point_rows(rows)}
    shipped = load_tag_file(shipped_tag_file())
    assert set(WWH_GROUPS) <= set(n)
    assert n["wwh=NoTag-corrected"] == sum(not shipped.tags[i] for i in range(n["all"]))  # ids 0..11
    with ActivationCache(tmp_path / "c.h5") as cache:
        assert cache.record.tags_fingerprint == WWH_TAGS_SHA256


def _without_wwh(src: Path, dst: Path) -> Path:
    """A copy of a cache whose items carry no wwh tags (a cache extracted with --no-tags, or before)."""
    shutil.copy(src, dst)
    dst.chmod(0o644)
    with h5py.File(dst, "r+") as f:
        tags = [json.loads(t) for t in f["items/tags"].asstr()[()]]
        del f["items/tags"]
        f.create_dataset("items/tags", data=[json.dumps({k: v for k, v in t.items() if k != "wwh"}) for t in tags],
                         dtype=h5py.string_dtype())
    return dst


@pytest.mark.parametrize("experiment", ["winoground-scores", "variant-similarity", "separability"])
def test_a_winoground_cache_without_wwh_tags_is_warned_about(
    experiment: str, tmp_path: Path, reference_cache: Path,
) -> None:
    cache = _without_wwh(reference_cache, tmp_path / "notags.h5")
    extra = ["--seeds", "1", "--layers", "-1", "--bootstrap", "0", "--permutations", "1"] if experiment == "separability" else []
    res = CliRunner().invoke(app, ["run", experiment, "--cache", str(cache), "--out", str(tmp_path / "o"), "--quiet",
                                   *extra])
    assert res.exit_code == 0, res.output
    warning = [line for line in res.stderr.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1, res.stderr
    assert "cache notags.h5 carries no 'Why is Winoground Hard?' tags, so no wwh= subsets are written" in warning[0]
    assert "new_tag_assignments.json" in warning[0]
    (csv_path,) = [p for p in (tmp_path / "o" / experiment).glob("*.csv") if p.name.count(".") == 1]  # the tidy CSV
    assert not any(r["subset"].startswith("wwh=") for r in read_csv(csv_path)[1])
    ok = CliRunner().invoke(app, ["run", experiment, "--cache", str(reference_cache), "--out", str(tmp_path / "p"),
                                  "--quiet", *extra])
    assert ok.exit_code == 0 and "warning" not in ok.stderr, ok.stderr
