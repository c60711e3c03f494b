"""A step's key: what it reads by content, its outputs and what other steps write by place, its
options as they are; never the spelling of a path."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vlprobe.launch.identity import ContentMemo, canonical, read_contents, step_keys
from vlprobe.launch.records import write_record
from vlprobe.launch.steps import Step, finished_before


def _plan(ckpt: str, root: str, data: str = "data") -> list[Step]:
    return [Step("extract", ("extract", "--checkpoint", ckpt, "--data-dir", data, "--out", f"{root}/caches/c.h5")),
            Step("run", ("run", "recall", "--cache", f"{root}/caches/c.h5", "--out", f"{root}/results"), ("extract",)),
            Step("collect", ("collect", f"{root}/results", "--out", f"{root}/results.csv"), ("run",))]


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "model.safetensors").write_bytes(b"weights v1")
    (tmp_path / "ckpt" / ".cache").write_text("ignored")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "examples.jsonl").write_text("{}\n")
    return tmp_path


def test_keys_do_not_depend_on_how_paths_are_spelled(here: Path) -> None:
    rel = step_keys(_plan("ckpt", "out"), Path("out"))
    absolute = step_keys(_plan(str(here / "ckpt"), str(here / "out"), str(here / "data")), here / "out")
    dotted = step_keys(_plan("./ckpt/", "./out/../out", "data/"), Path("out"))
    assert rel == absolute == dotted


def test_keys_follow_the_content_of_what_a_step_reads(here: Path) -> None:
    memo = ContentMemo(None)
    before = step_keys(_plan("ckpt", "out"), Path("out"), memo)
    (here / "ckpt" / "model.safetensors").touch()  # touched, same bytes: same key
    assert step_keys(_plan("ckpt", "out"), Path("out"), memo) == before
    (here / "ckpt" / ".cache").write_text("other")  # dot files are no content
    assert step_keys(_plan("ckpt", "out"), Path("out"), memo) == before
    (here / "ckpt" / "model.safetensors").write_bytes(b"weights v2")  # overwritten in place
    after = step_keys(_plan("ckpt", "out"), Path("out"), memo)
    assert all(after[n] != before[n] for n in before)  # the extraction, and every step after it
    (here / "ckpt2").mkdir()
    (here / "ckpt2" / "model.safetensors").write_bytes(b"weights v2")  # the same bytes elsewhere
    assert step_keys(_plan("ckpt2", "out"), Path("out"), memo) == after


def test_what_a_step_of_the_run_writes_is_named_by_place(here: Path) -> None:
    """The cache is the extraction's output: the run step's key names it by place whether or not it
    exists yet (Slurm's jobs are submitted before it does), and the options stay as they are."""
    before = step_keys(_plan("ckpt", "out"), Path("out"))
    (here / "out" / "caches").mkdir(parents=True)
    (here / "out" / "caches" / "c.h5").write_bytes(b"a cache")
    assert step_keys(_plan("ckpt", "out"), Path("out")) == before
    other = [*_plan("ckpt", "out")[:1], Step("run", ("run", "recall", "--cache", "out/caches/c.h5", "--out",
                                                     "out/results", "--ks", "1,2"), ("extract",))]
    assert step_keys(other, Path("out"))["run"] != before["run"]


def test_a_finished_step_whose_input_was_overwritten_is_not_done(here: Path) -> None:
    """What a step read is kept in its record by content: a cache overwritten in place after the
    run that read it makes that run not done (its key, by place, is unchanged)."""
    steps = _plan("ckpt", "out")
    keys = step_keys(steps, Path("out"))
    (here / "out" / "caches").mkdir(parents=True)
    cache = here / "out" / "caches" / "c.h5"
    cache.write_bytes(b"a cache")
    run = steps[1]
    write_record(Path("out"), "run", keys["run"], run.args, read=read_contents(run.args, Path("out")))
    assert finished_before(run, Path("out"), keys["run"])
    assert set(read_contents(run.args, Path("out"))) == {"caches/c.h5"}  # (the output folder is not read)
    cache.write_bytes(b"another cache")
    assert not finished_before(run, Path("out"), keys["run"])


def test_the_memo_reads_a_file_once(here: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from vlprobe import provenance

    state = here / "state"
    state.mkdir()
    ContentMemo(state).content(here / "ckpt")
    memo = ContentMemo(state)
    memo.content(here / "ckpt")
    memo.save()
    assert (state / "fingerprints.json").is_file()
    read: list[str] = []
    monkeypatch.setattr(provenance, "sha256_file", lambda p, *a: read.append(str(p)) or "x")
    again = ContentMemo(state)
    again.content(here / "ckpt")
    assert read == []  # known from the memo: size, times and inode unchanged
    (here / "ckpt" / "model.safetensors").write_bytes(b"weights v3")
    again.content(here / "ckpt")
    assert read == [os.path.realpath(here / "ckpt" / "model.safetensors")]


def test_canonical(tmp_path: Path) -> None:
    assert canonical(tmp_path / "out" / "a" / ".." / "b", tmp_path / "out") == "b"
    assert canonical(tmp_path / "out", tmp_path / "out") == "."
    assert canonical("/x/y", tmp_path) == "/x/y"
