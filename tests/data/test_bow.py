"""Bag-of-words slices: the word multiset rule, the counts in the real files, and every benchmark
experiment reporting the slice and its complement."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

import numpy as np

from vlprobe.data.bow import bag_of_words, bow_masks, bow_tag, same_bag
from vlprobe.data.loading import load_dataset
from vlprobe.experiments.benchmark_eval import EvalConfig, run_eval
from vlprobe.experiments.winoground_scores import WinogroundScoresConfig, run_winoground_scores
from vlprobe.runs.score_files import write_item_scores


def test_bag_of_words_ignores_case_punctuation_and_order() -> None:
    assert bag_of_words("A dog's ball, and a CAT!") == Counter({"a": 2, "dog's": 1, "ball": 1, "and": 1, "cat": 1})
    assert same_bag("a red circle left of a blue square", "A blue square left of a red circle.")
    assert not same_bag("a red circle", "a red circle red")  # multiset, not set
    assert not same_bag("a dog", "a dogs")
    assert bow_tag(["x y", "y x"]) == ["same"] and bow_tag(["x y", "y z"]) == ["different"]
    assert bow_tag(["only one"]) == []


def test_bow_masks_give_both_slices_even_when_one_is_empty() -> None:
    masks = bow_masks([{"bow": ["same"]}, {"bow": ["same"]}])
    assert masks["bow=same"].tolist() == [True, True] and masks["bow=different"].tolist() == [False, False]
    assert bow_masks([{"tag": ["x"]}]) == {}


def _counts(ds: object) -> tuple[int, dict[str, int]]:
    same: Counter[str] = Counter()
    for it in ds.items:  # type: ignore[attr-defined]
        if bow_tag([t.text for t in it.texts]) == ["same"]:
            same[it.meta["subset"]] += 1
    return len(ds.items), dict(same)  # type: ignore[attr-defined]


def test_sugarcrepe_has_572_same_bag_pairs(sugarcrepe_dir: Path) -> None:
    # SugarCrepe's issue tracker counts 572 of 7,511 same-bag pairs; measured here on the pinned files.
    n, same = _counts(load_dataset("sugarcrepe", sugarcrepe_dir))
    assert n == 7511
    assert same == {"swap_obj": 164, "swap_att": 408}
    assert sum(same.values()) == 572


def test_valse_same_bag_items_are_actant_swaps(valse_dir: Path) -> None:
    # Valid items only (the loader's default): 271 of 7,702, every one an actant swap.
    n, same = _counts(load_dataset("valse", valse_dir))
    assert n == 7702
    assert same == {"actant-swap": 271}


def test_synthetic_winoground_is_all_same_bag(synthetic_dir: Path) -> None:
    ds = load_dataset("winoground", synthetic_dir)
    assert all(bow_tag([t.text for t in it.texts if not t.is_variant]) == ["same"] for it in ds.items)


def _csv(path: Path) -> dict[tuple[str, str], dict[str, str]]:
    with open(path, encoding="utf-8", newline="") as fh:
        return {(r["subset"], r["metric"]): r for r in csv.DictReader(fh)}


def test_sugarcrepe_eval_reports_both_slices_from_a_score_file(sugarcrepe_dir: Path, tmp_path: Path) -> None:
    ds = load_dataset("sugarcrepe", sugarcrepe_dir, options={"subsets": "swap_obj,add_obj", "limit": 40})
    ids = [it.id for it in ds.items]
    same = np.array([bow_tag([t.text for t in it.texts]) == ["same"] for it in ds.items])
    # planted: right on every same-bag pair, wrong on every other one
    pos = np.where(same, 1.0, 0.0)
    scores = tmp_path / "s.scores.jsonl"
    write_item_scores(scores, [i for i in ids for _ in (0, 1)], [f"{i}/i0" for i in ids for _ in (0, 1)],
                      [f"{i}/c{k}" for i in ids for k in (0, 1)], np.column_stack([pos, 0.5 * np.ones_like(pos)]).ravel())
    csv_path, manifest_path, _ = run_eval(EvalConfig(
        benchmark="sugarcrepe", out=tmp_path / "out", scores=scores, data_dir=sugarcrepe_dir,
        subsets="swap_obj,add_obj", limit=40, bootstrap=50,
    ))
    rows = _csv(csv_path)
    assert float(rows[("bow=same", "accuracy")]["value"]) == 100.0
    assert float(rows[("bow=different", "accuracy")]["value"]) == 0.0
    assert int(rows[("bow=same", "accuracy")]["n"]) == int(same.sum()) > 0
    assert int(rows[("bow=different", "accuracy")]["n"]) == int((~same).sum()) > 0
    # the slice's interval resamples within the slice: a constant outcome has a point interval
    assert float(rows[("bow=same", "accuracy.ci95_low")]["value"]) == 100.0
    (run,) = json.loads(manifest_path.read_text())["runs"].values()  # one run, named by its settings
    assert run["bow_slices"]["items"] == {"same": int(same.sum()), "different": int((~same).sum())}

    # without the captions there are no slices, and the manifest says how to get them
    csv2, manifest2, _ = run_eval(EvalConfig(benchmark="sugarcrepe", out=tmp_path / "out2", scores=scores, bootstrap=50))
    assert not any(s.startswith("bow=") for s, _ in _csv(csv2))
    (run2,) = json.loads(manifest2.read_text())["runs"].values()
    assert "data_dir" in run2["bow_slices"]


def test_valse_eval_reports_both_slices(valse_dir: Path, tmp_path: Path) -> None:
    ds = load_dataset("valse", valse_dir, options={"subsets": "actant-swap,existence", "limit": 30})
    ids = [it.id for it in ds.items]
    write_item_scores(tmp_path / "v.scores.jsonl", [i for i in ids for _ in (0, 1)], [f"{i}/i0" for i in ids for _ in (0, 1)],
                      [f"{i}/c{k}" for i in ids for k in (0, 1)], np.tile([0.9, 0.1], len(ids)))
    csv_path, _, _ = run_eval(EvalConfig(benchmark="valse", out=tmp_path / "out", scores=tmp_path / "v.scores.jsonl",
                                         data_dir=valse_dir, subsets="actant-swap,existence", limit=30, bootstrap=50))
    rows = _csv(csv_path)
    n_same = sum(bow_tag([t.text for t in it.texts]) == ["same"] for it in ds.items)
    assert int(rows[("bow=same", "acc_r")]["n"]) == n_same > 0
    assert float(rows[("bow=different", "acc_r")]["value"]) == 100.0
    # the slices are not subsets of their own: mean-of-subsets averages the two files only (its n
    # counts the subsets averaged)
    assert int(rows[("mean-of-subsets", "acc_r")]["n"]) == 2


def test_winoground_scores_slices_from_a_cache(reference_cache: Path, tmp_path: Path) -> None:
    csv_path, _, _ = run_winoground_scores(WinogroundScoresConfig(out=tmp_path, cache=reference_cache, bootstrap=20))
    rows = _csv(csv_path)
    n_all = int(rows[("all", "text")]["n"])
    # the synthetic dataset's captions always hold the same words
    assert int(rows[("bow=same", "text")]["n"]) == n_all
    assert int(rows[("bow=different", "text")]["n"]) == 0
    assert rows[("bow=same", "group")]["value"] == rows[("all", "group")]["value"]


def test_cache_index_carries_the_bow_tag(reference_cache: Path) -> None:
    from vlprobe.experiments.cache_features import load_index
    from vlprobe.extract.cache.reader import ActivationCache

    with ActivationCache(reference_cache) as cache:
        index = load_index(cache)
    assert all(t["bow"] == ["same"] for t in index.item_tags)
