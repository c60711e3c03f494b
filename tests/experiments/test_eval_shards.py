"""``probe eval ... --shard K/N|auto`` and ``--merge-shards``: the merged run equals one process's
run (tiny CLIP on SugarCrepe's real items and on the CREPE fixture), ``--shard auto`` under a
simulated Slurm array, and the refusals (one line, exit 2)."""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.experiments.test_benchmark_eval import SC_SUBSETS, draw_images
from vlprobe.cli import app
from vlprobe.data.benchmark_fixtures import write_benchmark_fixture
from vlprobe.data.sugarcrepe import load_sugarcrepe
from vlprobe.provenance import sha256_file
from vlprobe.runs.score_files import caption_foil_scores, read_item_scores, read_shard_scores
from vlprobe.shards import LAUNCHER_PREFIXES, LAUNCHER_VARIABLES

#: Scores of one pair computed in batches of other shapes (a shard's batches are cut at its block's
#: edges) differ in the last float32 bits of the matrix products: compared to these tolerances,
#: never bit for bit (a relative 1e-5, and 1e-6 absolute for cosines near zero, whose relative
#: error means nothing; measured on 360 pairs of tiny CLIP: 5e-8 at most). The metrics then agree
#: exactly where no item's two scores are within TIE of a tie (checked, so the equality below is
#: no accident).
RTOL, ATOL = 1e-5, 1e-6
TIE = 1e-4


@pytest.fixture(scope="module")
def coco(sugarcrepe_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("coco-shards") / "val2017"
    draw_images([it.images[0].name for it in load_sugarcrepe(sugarcrepe_dir, subsets=SC_SUBSETS, limit=3)], folder)
    return folder


@pytest.fixture
def no_launcher(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """An environment without any launcher's variables (the test sets its own)."""
    for key in list(os.environ):
        if key in LAUNCHER_VARIABLES or key.startswith(LAUNCHER_PREFIXES):
            monkeypatch.delenv(key)
    return monkeypatch


def _ok(*args: str) -> str:
    result = CliRunner().invoke(app, [*args])
    assert result.exit_code == 0, result.output
    return result.stdout


def _rows(path: Path) -> dict[tuple[str, str], str]:
    with open(path, encoding="utf-8", newline="") as fh:
        return {(r["subset"], r["metric"]): r["value"] for r in csv.DictReader(fh)}


def _run(out: Path, bench: str = "sugarcrepe") -> dict:
    runs = json.loads((out / bench / "manifest.json").read_text(encoding="utf-8"))["runs"]
    (run,) = runs.values()
    return run


def test_two_shards_merged_equal_one_process(sugarcrepe_dir: Path, coco: Path, tiny_clip: Path, tmp_path: Path,
                                             no_launcher: pytest.MonkeyPatch) -> None:
    base = ["eval", "sugarcrepe", "--model", "clip", "--checkpoint", str(tiny_clip), "--data-dir", str(sugarcrepe_dir),
            "--image-dir", str(coco), "--subsets", SC_SUBSETS, "--limit", "3", "--bootstrap", "50", "--device", "cpu",
            "--quiet"]
    one, sharded = tmp_path / "one", tmp_path / "sharded"
    _ok(*base, "--out", str(one), "--batch-size", "32")
    folder = sharded / "sugarcrepe"
    for k in (0, 1):  # other batch shapes than the one-process run's: 7 pairs a batch
        said = _ok(*base, "--out", str(sharded), "--batch-size", "7", "--shard", f"{k}/2")
        shard_file = folder / f"clip@bootstrap=50.shard-{k}-of-2.scores.jsonl"
        assert said.strip() == (f"wrote shard {k}/2 of clip@bootstrap=50 ({4 if k == 0 else 5} of 9 items): "
                                f"{shard_file}; once all 2 are written, merge them: this command with "
                                "--merge-shards instead of --shard")
    assert sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) == [
        "clip@bootstrap=50.shard-0-of-2.scores.jsonl", "clip@bootstrap=50.shard-1-of-2.scores.jsonl"]  # no metrics
    record, part = read_shard_scores(folder / "clip@bootstrap=50.shard-0-of-2.scores.jsonl")
    assert record["shard"] == "0/2" and record["items"] == [0, 4] and record["of_items"] == 9 and len(part) == 8
    assert record["run"]["config"]["model"] == "clip" and "batch_size" not in record["run"]["config"]
    _ok(*base, "--out", str(sharded), "--merge-shards")

    a = read_item_scores(one / "sugarcrepe" / "clip@bootstrap=50.scores.jsonl")
    b = read_item_scores(folder / "clip@bootstrap=50.scores.jsonl")  # the merged file: a whole run's
    assert (a.item == b.item).all() and (a.text == b.text).all() and (a.image == b.image).all()
    np.testing.assert_allclose(b.score, a.score, rtol=RTOL, atol=ATOL)
    _, pos, neg = caption_foil_scores(a)
    assert np.abs(pos - neg).min() > TIE  # no near tie: every metric row must be equal
    assert _rows(folder / "clip@bootstrap=50.csv") == _rows(one / "sugarcrepe" / "clip@bootstrap=50.csv")

    merged, single = _run(sharded), _run(one)
    assert merged["inputs"] == single["inputs"]  # dataset and checkpoint fingerprints
    assert merged["score_kind"] == single["score_kind"] == "cosine" and merged["n_items"] == 9
    files = merged["shards"]["files"]
    assert merged["shards"]["n"] == 2 and [f["shard"] for f in files] == ["0/2", "1/2"]
    assert [f["items"] for f in files] == [[0, 4], [4, 9]] and all(f["job_ids"] == [] for f in files)
    assert all(f["sha256"] == sha256_file(folder / f["file"]) for f in files)
    # A rerun of the merge replaces its own outputs.
    _ok(*base, "--out", str(sharded), "--merge-shards")


def test_spec_benchmark_three_shards(tiny_clip: Path, tmp_path: Path, no_launcher: pytest.MonkeyPatch) -> None:
    """CREPE: items of different numbers of texts, so a shard's pairs are not a fixed stride."""
    crepe = write_benchmark_fixture(tmp_path / "crepe", "crepe", n_items=4, seed=3, image_size=32)
    base = ["eval", "crepe", "--model", "clip", "--checkpoint", str(tiny_clip), "--data-dir", str(crepe),
            "--image-root", f"vg={crepe / 'vg'}", "--subsets", "prod_atom_5,syst_cc12m_unseen_atom",
            "--bootstrap", "30", "--device", "cpu", "--quiet"]
    _ok(*base, "--out", str(tmp_path / "one"))
    for k in range(3):
        _ok(*base, "--out", str(tmp_path / "sh"), "--shard", f"{k}/3", "--batch-size", "5")
    _ok(*base, "--out", str(tmp_path / "sh"), "--merge-shards")
    a = read_item_scores(tmp_path / "one" / "crepe" / "clip@bootstrap=30.scores.jsonl")
    b = read_item_scores(tmp_path / "sh" / "crepe" / "clip@bootstrap=30.scores.jsonl")
    assert (a.text == b.text).all() and (a.image == b.image).all()
    np.testing.assert_allclose(b.score, a.score, rtol=RTOL, atol=ATOL)
    got, want = _rows(tmp_path / "sh" / "crepe" / "clip@bootstrap=30.csv"), _rows(tmp_path / "one" / "crepe" / "clip@bootstrap=30.csv")
    assert got.keys() == want.keys()
    for key, value in want.items():  # recall@k: ranks; equal unless two texts of an item sit within ATOL
        assert float(got[key]) == pytest.approx(float(value), abs=1e-9), key


def test_shard_auto_under_a_slurm_array(sugarcrepe_dir: Path, tmp_path: Path, no_launcher: pytest.MonkeyPatch) -> None:
    env = {"SLURM_JOB_ID": "1042", "SLURM_ARRAY_JOB_ID": "1040", "SLURM_ARRAY_TASK_ID": "3",
           "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_MAX": "3", "SLURM_ARRAY_TASK_COUNT": "3"}
    for key, value in env.items():
        no_launcher.setenv(key, value)
    base = ["eval", "sugarcrepe", "--model", "caption-length", "--data-dir", str(sugarcrepe_dir),
            "--subsets", "add_att", "--limit", "10", "--out", str(tmp_path), "--quiet"]
    said = _ok(*base, "--shard", "auto")
    path = tmp_path / "sugarcrepe" / "caption-length.shard-2-of-3.scores.jsonl"  # task 3 of 1..3: shard 2
    assert said.startswith(f"wrote shard 2/3 of caption-length (4 of 10 items): {path};")
    record, scores = read_shard_scores(path)
    assert record["items"] == [6, 10] and list(dict.fromkeys(scores.item)) == [f"sugarcrepe/add_att/{i}" for i in range(6, 10)]
    (job,) = record["job_ids"]
    assert job["shard"] == "2/3" and job["SLURM_ARRAY_JOB_ID"] == "1040" and job["SLURM_JOB_ID"] == "1042"
    assert job["source"] == "Slurm array task 2 of 3 (SLURM_ARRAY_TASK_ID=3)"
    # The other two tasks, then the merge (outside the array): their job ids in the manifest.
    for task in ("1", "2"):
        no_launcher.setenv("SLURM_ARRAY_TASK_ID", task)
        _ok(*base, "--shard", "auto")
    for key in env:
        no_launcher.delenv(key)
    _ok(*base, "--merge-shards")
    files = _run(tmp_path)["shards"]["files"]
    assert [f["job_ids"][0]["SLURM_ARRAY_TASK_ID"] for f in files] == ["1", "2", "3"]


def test_refusals(sugarcrepe_dir: Path, tmp_path: Path, one_error_line: Callable[..., str],
                  no_launcher: pytest.MonkeyPatch) -> None:
    runner = CliRunner()
    out = tmp_path / "out"
    base = ["eval", "sugarcrepe", "--model", "caption-length", "--data-dir", str(sugarcrepe_dir), "--subsets", "add_att",
            "--limit", "9", "--out", str(out), "--quiet"]
    folder = out / "sugarcrepe"

    def run(*extra: str) -> object:
        return runner.invoke(app, [*base, *extra])

    one_error_line(run("--shard", "auto"), "shard: auto reads the shard from a launcher", "give --shard K/N")
    one_error_line(run("--shard", "2/2"), "shard must satisfy 0 <= K < N")
    one_error_line(run("--shard", "0/2", "--merge-shards"), "merge_shards: give it without --shard")
    one_error_line(run("--merge-shards"), "shards: no shard files caption-length.shard-K-of-N.scores.jsonl")
    assert run("--shard", "0/3").exit_code == 0 and run("--shard", "2/3").exit_code == 0
    one_error_line(run("--merge-shards"), "shards: missing shard(s) 1/3 of caption-length")
    # shard 1/3 of another run (other items) under the same name
    other = [("8" if a == "9" else a) for a in base]
    assert runner.invoke(app, [*other, "--shard", "1/3"]).exit_code == 0
    one_error_line(run("--merge-shards"), "caption-length.shard-1-of-3.scores.jsonl is a shard of another run",
                   "config.limit=8 there, 9 here")
    # shard 1/3 scoring an item of shard 0/3 too
    assert run("--shard", "1/3").exit_code == 0
    lines = (folder / "caption-length.shard-1-of-3.scores.jsonl").read_text(encoding="utf-8").splitlines()
    first = (folder / "caption-length.shard-0-of-3.scores.jsonl").read_text(encoding="utf-8").splitlines()
    (folder / "caption-length.shard-1-of-3.scores.jsonl").write_text("\n".join(lines + first[1:3]) + "\n",
                                                                     encoding="utf-8")
    one_error_line(run("--merge-shards"), "caption-length.shard-0-of-3.scores.jsonl and",
                   "both score item 'sugarcrepe/add_att/0'")
    # a shard's block left out of its file: an item no shard scores
    (folder / "caption-length.shard-1-of-3.scores.jsonl").write_text("\n".join(lines[:-2]) + "\n", encoding="utf-8")
    one_error_line(run("--merge-shards"), "no shard scores item 'sugarcrepe/add_att/5'")
    # shards of two counts side by side (the edited file is no longer vlprobe's to replace: removed first)
    (folder / "caption-length.shard-1-of-3.scores.jsonl").unlink()
    assert run("--shard", "1/3").exit_code == 0 and run("--shard", "0/2").exit_code == 0
    one_error_line(run("--merge-shards"), "of different shard counts N", "2 (1 files), 3 (3 files)")
    # a shard's file is no run's score file
    shard = folder / "caption-length.shard-0-of-3.scores.jsonl"
    one_error_line(runner.invoke(app, ["eval", "sugarcrepe", "--scores", str(shard), "--out", str(tmp_path / "x")]),
                   "holds shard 0/3 of a run's scores", "--merge-shards")
    # shards split a model's scoring: not a score file's, nor a models file's
    one_error_line(runner.invoke(app, ["eval", "sugarcrepe", "--scores", str(shard), "--shard", "0/2",
                                       "--out", str(tmp_path / "x")]), "shard: shards split the scoring of a model")
    models = tmp_path / "models.toml"
    models.write_text('[models.len]\nmodel = "caption-length"\n', encoding="utf-8")
    one_error_line(runner.invoke(app, ["eval", "sugarcrepe", "--models", str(models), "--data-dir", str(sugarcrepe_dir),
                                       "--merge-shards", "--out", str(tmp_path / "x")]),
                   "merge_shards: shards split one model's run (--model), not a models file")
