"""Recall@k over the image x caption matrix of a cache (vlprobe.experiments.recall)."""

from __future__ import annotations

import csv
import json
import shutil
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from typer.testing import CliRunner

from vlprobe.cli import app
from vlprobe.experiments.recall import RecallConfig, run_recall
from vlprobe.extract.cache.reader import ActivationCache
from vlprobe.provenance import sha256_file
from vlprobe.runs.writing import TIDY_COLUMNS
from vlprobe.stats.metrics import recall_at_k

N_ITEMS = 12  # the session dataset of conftest.py


@pytest.fixture(scope="module")
def cache_path(reference_cache: Path) -> Path:
    """The session's complete cache (synthetic dataset with variants, tiny CLIP)."""
    return reference_cache


def original_matrix(path: Path) -> np.ndarray:
    """scores[image r, caption c] over the original captions, caption c = the positive of image c.

    Built from the ids: image "<item>/i<j>" goes with caption "<item>/c<j>".
    """
    with ActivationCache(path) as c:
        matrix, _ = c.scores()
        images, texts = c.table("images"), c.table("texts")
    text_ids = list(texts["id"])
    cols = []
    for image_id in images["id"]:
        item, j = image_id.rsplit("/i", 1)
        col = text_ids.index(f"{item}/c{j}")
        assert texts["parent"][col] == -1
        cols.append(col)
    assert len(cols) == 2 * N_ITEMS
    assert (texts["parent"] >= 0).sum() > 0  # variants exist and must be left out
    return matrix[:, cols]


def expected_rows(path: Path, ks: tuple[int, ...]) -> dict[tuple[str, str], float]:
    sub = original_matrix(path)
    positives = np.arange(sub.shape[0])
    out = {}
    for direction, scores in (("i2t", sub), ("t2i", sub.T)):
        for k, value in recall_at_k(scores, positives, ks).items():
            out[(direction, f"recall@{k}")] = 100.0 * value
        ranks = loop_ranks(scores)
        out[(direction, "median_rank")] = float(statistics.median(ranks))
        out[(direction, "mean_rank")] = sum(ranks) / len(ranks)
    return out


def loop_ranks(scores: np.ndarray) -> list[int]:
    """Rank of each row's positive (column r of row r), ties against the model, in plain Python."""
    rows = scores.tolist()
    return [sum(1 for v in row if v >= row[r]) for r, row in enumerate(rows)]


def point_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Point estimates only (without the bootstrap interval rows)."""
    return [r for r in rows if ".ci95_" not in r["metric"]]


def read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with open(path, encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames or []), list(reader)


def test_recall_matches_independent_computation(cache_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    csv_path, manifest_path, written = run_recall(RecallConfig(cache=cache_path, out=out))
    rows = point_rows(written)
    assert csv_path == out / "recall" / "clip.csv"
    assert manifest_path == out / "recall" / "manifest.json"
    want = expected_rows(cache_path, (1, 2, 5, 10))
    got = {(r["subset"], r["metric"]): r["value"] for r in rows}
    assert list(got) == list(want)  # i2t first, k ascending
    for key, value in want.items():
        assert got[key] == pytest.approx(value), key
    for r in rows:
        assert r["n"] == 2 * N_ITEMS
        assert (r["experiment"], r["model"], r["task"], r["split"]) == ("recall", "clip", "target", "all")
    # Independent of recall_at_k: rank ties against the model by hand for I2T@1.
    sub = original_matrix(cache_path)
    hits = [all(sub[r, c] < sub[r, r] for c in range(sub.shape[1]) if c != r) for r in range(sub.shape[0])]
    assert got[("i2t", "recall@1")] == pytest.approx(100.0 * np.mean(hits))

    header, all_lines = read_csv(csv_path)
    lines = point_rows(all_lines)
    assert len(all_lines) == 3 * len(lines)  # each value with its 95% interval
    for line in all_lines:
        if ".ci95_" in line["metric"]:
            point = want[(line["subset"], line["metric"].split(".ci95_")[0])]
            bound = float(line["value"])
            assert bound <= point + 1e-9 if line["metric"].endswith("low") else bound >= point - 1e-9
    assert header == [*TIDY_COLUMNS, "bootstrap", "bootstrap_seed"]  # the setting columns
    assert {(line["bootstrap"], line["bootstrap_seed"]) for line in all_lines} == {("1000", "0")}
    assert [(line["subset"], line["metric"]) for line in lines] == list(want)
    assert {line["subset"] for line in lines} == {"i2t", "t2i"}
    for line in lines:
        assert float(line["value"]) == pytest.approx(want[(line["subset"], line["metric"])])
        assert line["n"] == str(2 * N_ITEMS)

    run = json.loads(manifest_path.read_text(encoding="utf-8"))["runs"]["clip"]
    assert run["experiment"] == "recall"
    assert run["config"]["ks"] == [1, 2, 5, 10]
    assert run["config"]["cache"] == str(cache_path)
    assert run["inputs"]["cache"]["sha256"] == sha256_file(cache_path)
    assert run["inputs"]["cache"]["score_kind"] == "cosine"


def test_recall_custom_ks_and_model(cache_path: Path, tmp_path: Path) -> None:
    _, _, rows = run_recall(RecallConfig(cache=cache_path, out=tmp_path, ks=(3, 1, 2 * N_ITEMS), name="tiny"))
    rows = point_rows(rows)
    assert [(r["subset"], r["metric"]) for r in rows] == [
        ("i2t", "recall@3"), ("i2t", "recall@1"), ("i2t", f"recall@{2 * N_ITEMS}"),
        ("i2t", "median_rank"), ("i2t", "mean_rank"),
        ("t2i", "recall@3"), ("t2i", "recall@1"), ("t2i", f"recall@{2 * N_ITEMS}"),
        ("t2i", "median_rank"), ("t2i", "mean_rank"),
    ]
    assert {r["model"] for r in rows} == {"tiny"}
    # mean_rank is vlprobe's (no reference computes it): its note says so; recall@k says how ties count.
    assert all("vlprobe's" in r["note"] for r in rows if r["metric"] == "mean_rank")
    assert all("ties count against" in r["note"] for r in rows if r["metric"].startswith("recall@"))
    assert all("note" not in r for r in rows if r["metric"] == "median_rank")
    # k = number of candidates: everything is found.
    assert all(r["value"] == 100.0 for r in rows if r["metric"] == f"recall@{2 * N_ITEMS}")
    # Other ks name another run of the same model.
    assert (tmp_path / "recall" / f"tiny@ks=3+1+{2 * N_ITEMS}.csv").is_file()


@pytest.mark.parametrize("ks", [(), (0,), (1, -1)])
def test_recall_bad_ks(cache_path: Path, tmp_path: Path, ks: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match="ks"):
        run_recall(RecallConfig(cache=cache_path, out=tmp_path / "o", ks=ks))
    assert not (tmp_path / "o").exists()


def test_recall_ignores_variant_scores(cache_path: Path, tmp_path: Path) -> None:
    copy = tmp_path / "c.h5"
    shutil.copyfile(cache_path, copy)
    with h5py.File(copy, "r+") as f:
        variants = np.flatnonzero(f["texts/parent"][()] >= 0)
        matrix = f["scores/matrix"][()]
        matrix[:, variants] = 1e6  # would win every I2T ranking if variants took part
        f["scores/matrix"][...] = matrix
        done = f["scores/done"][()]
        done[:, variants] = False
        f["scores/done"][...] = done
    _, _, a = run_recall(RecallConfig(cache=cache_path, out=tmp_path / "a"))
    _, _, b = run_recall(RecallConfig(cache=copy, out=tmp_path / "b"))
    assert [r["value"] for r in a] == [r["value"] for r in b]


def test_recall_ties_count_against_the_model(cache_path: Path, tmp_path: Path) -> None:
    copy = tmp_path / "c.h5"
    shutil.copyfile(cache_path, copy)
    with h5py.File(copy, "r+") as f:
        parent = f["texts/parent"][()]
        matrix = f["scores/matrix"][()]
        originals = np.flatnonzero(parent < 0)
        matrix[:, originals] = 0.5  # every image-caption pair ties
        f["scores/matrix"][...] = matrix
    _, _, rows = run_recall(RecallConfig(cache=copy, out=tmp_path / "o", ks=(1, 2 * N_ITEMS - 1, 2 * N_ITEMS)))
    values = {(r["subset"], r["metric"]): r["value"] for r in rows}
    for d in ("i2t", "t2i"):
        assert values[(d, "recall@1")] == 0.0
        assert values[(d, f"recall@{2 * N_ITEMS - 1}")] == 0.0
        assert values[(d, f"recall@{2 * N_ITEMS}")] == 100.0
        assert values[(d, "median_rank")] == values[(d, "mean_rank")] == 2 * N_ITEMS  # last of all


def test_ranks_of_a_known_matrix(tmp_path: Path) -> None:
    # Caption x image matrix (caption r matches image r); T2I ranks per row, I2T per column.
    m = np.array([[0.9, 0.1, 0.2, 0.3],    # caption 0: its image first -> rank 1
                  [0.8, 0.5, 0.1, 0.0],    # caption 1: one image above -> rank 2
                  [0.7, 0.7, 0.7, 0.1],    # caption 2: a three-way tie -> rank 3
                  [0.6, 0.9, 0.8, 0.2]])   # caption 3: last            -> rank 4
    np.save(tmp_path / "m.npy", m)
    _, manifest_path, rows = run_recall(RecallConfig(scores=tmp_path / "m.npy", out=tmp_path / "o", ks=(1,)))
    got = {(r["subset"], r["metric"]): r["value"] for r in rows}
    assert got[("t2i", "median_rank")] == 2.5 and got[("t2i", "mean_rank")] == 2.5
    # I2T, image j ranks the captions by column j: 0.9 first; 0.5 under 0.7, 0.9; 0.7 under 0.8;
    # 0.2 under 0.3.
    assert loop_ranks(m.T) == [1, 3, 2, 2]
    assert got[("i2t", "median_rank")] == 2.0 and got[("i2t", "mean_rank")] == 2.0
    units = json.loads(manifest_path.read_text(encoding="utf-8"))["runs"]["m@ks=1"]["units"]
    assert units["recall@1"] == "percent" and units["median_rank"].startswith("rank")


def test_recall_incomplete_matrix(cache_path: Path, tmp_path: Path) -> None:
    copy = tmp_path / "c.h5"
    shutil.copyfile(cache_path, copy)
    with h5py.File(copy, "r+") as f:
        f["scores/done"][5, 0] = False
    with pytest.raises(ValueError, match="recall needs the full matrix"):
        run_recall(RecallConfig(cache=copy, out=tmp_path / "o"))


def test_recall_missing_cache(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such file"):
        run_recall(RecallConfig(cache=tmp_path / "absent.h5", out=tmp_path / "o"))


# --- CLI ----------------------------------------------------------------------------------------


def test_cli_recall(cache_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app, ["run", "recall", "--cache", str(cache_path), "--out", str(out), "--ks", "1,5"]
    )
    assert result.exit_code == 0, result.output
    want = expected_rows(cache_path, (1, 5))
    printed = {}
    for line in result.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[1] in ("i2t", "t2i"):
            assert parts[0] == "clip"
            printed[(parts[1], parts[2])] = float(parts[3])
            assert f"(n={2 * N_ITEMS})" in line
    assert list(printed) == list(want)
    for key, value in want.items():
        assert printed[key] == pytest.approx(value, abs=0.005), key
    _, lines = read_csv(out / "recall" / "clip@ks=1+5.csv")
    assert [line["metric"] for line in point_rows(lines)] == ["recall@1", "recall@5", "median_rank", "mean_rank"] * 2


@pytest.mark.parametrize("ks", ["a,b", "1,,2", "0", ""])
def test_cli_recall_bad_ks(one_error_line: Callable[..., str], cache_path: Path, tmp_path: Path, ks: str) -> None:
    result = CliRunner().invoke(
        app, ["run", "recall", "--cache", str(cache_path), "--out", str(tmp_path / "o"), "--ks", ks]
    )
    one_error_line(result, "ks")
    assert not (tmp_path / "o").exists()


def test_cli_recall_missing_cache(one_error_line: Callable[..., str], tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["run", "recall", "--cache", str(tmp_path / "absent.h5"), "--out", str(tmp_path / "o")]
    )
    one_error_line(result, "no such file")
