"""variant-similarity (paper §5.2): S' = (1-λ)S + λ·agg S(variants), on planted scores and a real cache."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from vlprobe.cli import app
from vlprobe.experiments.variant_similarity import (
    VariantSimilarityConfig,
    blend,
    run_variant_similarity,
    variant_scores,
)
from vlprobe.stats.metrics import winoground_outcomes


def planted(n_items: int = 20, seed: int = 0, max_variants: int = 4):
    """Tables and a score matrix in cache layout: originals first, then variants (some captions have none)."""
    rng = np.random.default_rng(seed)
    items = [f"winoground/{i}" for i in range(n_items)]
    images = [f"{it}/i{j}" for it in items for j in (0, 1)]
    texts = [f"{it}/c{k}" for it in items for k in (0, 1)]
    parent = [-1] * len(texts)
    counts = rng.integers(0, max_variants + 1, size=(n_items, 2))
    for i, it in enumerate(items):
        for k in (0, 1):
            for v in range(counts[i, k]):
                texts.append(f"{it}/c{k}/v{v}")
                parent.append(2 * i + k)
    matrix = rng.normal(size=(len(images), len(texts))).astype(np.float32)
    return matrix, np.ones_like(matrix, dtype=bool), items, images, texts, np.array(parent), counts


def brute_force(matrix, items, images, texts, parent, agg, lam, include_original=True):
    """S' computed the slow, obvious way, per item, caption and image."""
    s = np.zeros((len(items), 2, 2))
    for n, it in enumerate(items):
        for k in (0, 1):
            c = texts.index(f"{it}/c{k}")
            kids = [r for r in range(len(texts)) if parent[r] == c]
            for j in (0, 1):
                i = images.index(f"{it}/i{j}")
                base = float(matrix[i, c])
                pool = ([base] if include_original else []) + [float(matrix[i, r]) for r in kids]
                a = (max(pool) if agg == "max" else sum(pool) / len(pool)) if pool else base
                s[n, k, j] = (1 - lam) * base + lam * a
    return s


def test_lambda_zero_is_the_plain_winoground_score() -> None:
    matrix, done, items, images, texts, parent, _ = planted()
    vs = variant_scores(matrix, done, items, images, texts, parent)
    for agg in ("mean", "max"):
        np.testing.assert_array_equal(blend(vs, agg, 0.0), vs.original)
        for m in ("text", "image", "group"):
            np.testing.assert_array_equal(winoground_outcomes(blend(vs, agg, 0.0))[m], winoground_outcomes(vs.original)[m])


def test_lambda_one_with_max_is_the_best_variant_score() -> None:
    matrix, done, items, images, texts, parent, counts = planted(seed=1)
    vs = variant_scores(matrix, done, items, images, texts, parent)
    best = np.empty((len(items), 2, 2))
    for n, it in enumerate(items):
        for k in (0, 1):
            rows = [texts.index(f"{it}/c{k}")] + [r for r in range(len(texts)) if texts[r].startswith(f"{it}/c{k}/v")]
            for j in (0, 1):
                best[n, k, j] = matrix[images.index(f"{it}/i{j}"), rows].max()
    np.testing.assert_allclose(blend(vs, "max", 1.0), best, rtol=0, atol=1e-6)
    assert (counts > 0).any() and (counts == 0).any()


@pytest.mark.parametrize("agg", ["mean", "max"])
@pytest.mark.parametrize("lam", [0.0, 0.25, 0.5, 0.75, 1.0])
@pytest.mark.parametrize("include_original", [True, False])
def test_blend_matches_the_definition(agg: str, lam: float, include_original: bool) -> None:
    matrix, done, items, images, texts, parent, _ = planted(seed=2)
    vs = variant_scores(matrix, done, items, images, texts, parent)
    np.testing.assert_allclose(blend(vs, agg, lam, include_original),
                               brute_force(matrix, items, images, texts, parent, agg, lam, include_original),
                               rtol=0, atol=1e-5)


def test_missing_variant_scores_and_bad_settings_are_refused() -> None:
    matrix, done, items, images, texts, parent, _counts = planted(seed=3)
    vs = variant_scores(matrix, done, items, images, texts, parent)
    with pytest.raises(ValueError, match=r"agg: unknown aggregation 'median'; did you mean 'mean'\? \(known: mean, max\)"):
        blend(vs, "median", 0.5)
    with pytest.raises(ValueError, match=r"lambdas must be a number in \[0, 1\] \(each lambda\), got 1.5"):
        blend(vs, "max", 1.5)
    done = done.copy()
    done[:, -1] = False  # the last variant is scored with no image
    with pytest.raises(ValueError, match="variant-image scores are missing"):
        variant_scores(matrix, done, items, images, texts, parent)


def test_run_on_a_cache_lambda_zero_equals_winoground_scores(reference_cache: Path, tmp_path: Path) -> None:
    from vlprobe.experiments.winoground_scores import WinogroundScoresConfig, run_winoground_scores

    csv_path, manifest_path, rows = run_variant_similarity(VariantSimilarityConfig(cache=reference_cache, out=tmp_path))
    _, _, plain = run_winoground_scores(WinogroundScoresConfig(out=tmp_path, cache=reference_cache))
    want = {(r["subset"], r["metric"]): r["value"] for r in plain if r["metric"].split(".")[0] in ("text", "image", "group")}
    for agg in ("mean", "max"):
        got = {(r["subset"], r["metric"]): r["value"] for r in rows if r["agg"] == agg and r["lambda"] == 0}
        # Points and the intervals of subset all: the same items and bootstrap seed give the same resamples.
        # NaN == NaN here: the empty bow=different slice of the synthetic dataset
        np.testing.assert_equal({k: v for k, v in got.items() if "." not in k[1] or k[0] == "all"}, want)
        assert ("collapsed_tag=Object", "text.ci95_low") in got  # per-tag intervals too
    by_key = {(r["agg"], r["lambda"], r["subset"], r["metric"]): r["value"] for r in rows}
    for r in rows:
        if r["metric"].endswith(".ci95_low"):
            key = (r["agg"], r["lambda"], r["subset"])
            point, high = by_key[(*key, r["metric"][:-9])], by_key[(*key, r["metric"][:-3] + "high")]
            assert r["value"] <= point <= high and r.get("seed") is None  # no probe seed: the bootstrap seed is a setting
    with open(csv_path.with_name(csv_path.stem + ".items.csv"), newline="") as fh:
        items = list(csv.DictReader(fh))
    assert len(items) == 10 * 3 * len({r["subset"] for r in items})  # settings x metrics x items
    assert {r["value"] for r in items} <= {"0.0", "100.0"}
    assert {(r["agg"], float(r["lambda"])) for r in items} == {(r["agg"], r["lambda"]) for r in rows}
    settings = {(r["agg"], r["lambda"]) for r in rows}
    assert len(settings) == 10  # 2 aggs x 5 lambdas
    with open(csv_path, newline="") as fh:
        reader = csv.DictReader(fh)
        lines = list(reader)
    assert len(lines) == len(rows)
    # agg and lambda are setting columns of their own, beside variants_only and the bootstrap's;
    # probe stays empty.
    assert list(reader.fieldnames or [])[-2:] == ["agg", "lambda"]
    assert {"variants_only", "bootstrap", "bootstrap_seed"} <= set(reader.fieldnames or [])
    assert {(line["agg"], float(line["lambda"])) for line in lines} == settings
    assert {line["probe"] for line in lines} == {""} and {line["variants_only"] for line in lines} == {"False"}
    manifest = json.loads(manifest_path.read_text())
    run = next(iter(manifest["runs"].values()))
    assert run["config"]["lambdas"] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert run["variants_per_caption"]["max"] > 0 and run["inputs"]["cache"]["variants_fingerprint"]


def test_cli(reference_cache: Path, tmp_path: Path, one_error_line) -> None:
    runner = CliRunner()
    r = runner.invoke(app, ["run", "variant-similarity", "--cache", str(reference_cache), "--out", str(tmp_path),
                            "--aggs", "max", "--lambdas", "0,1"])
    assert r.exit_code == 0, r.output
    assert "agg=max lambda=1" in r.stdout and "wrote" in r.stdout
    assert (tmp_path / "variant-similarity" / "clip@aggs=max,lambdas=0+1.csv").is_file()
    one_error_line(runner.invoke(app, ["run", "variant-similarity", "--cache", str(reference_cache), "--out",
                                       str(tmp_path), "--lambdas", "0,2"]), "lambdas must be a number in [0, 1] (each lambda), got 2.0")
    one_error_line(runner.invoke(app, ["run", "variant-similarity", "--cache", str(reference_cache), "--out",
                                       str(tmp_path), "--aggs", "median"]), "aggs: unknown aggs 'median'")
    one_error_line(runner.invoke(app, ["run", "variant-similarity", "--cache", str(reference_cache), "--out",
                                       str(tmp_path), "--lambdas", "a"]), "lambdas must be comma-separated numbers")
