"""Faults during an extraction: SIGKILL at exact write calls, Ctrl-C, two runs on one file, a full disk.

Kill points are exact, not timed: the run is a forked child whose every write call (an HDF5
dataset or attribute write, a flush, a rename) is counted, and which SIGKILLs itself just before
the N-th. Each kill point is then resumed by a fresh run, which must give the identical cache.
Runs that wait for each other synchronise through files, never through sleeps.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from typer.testing import CliRunner

from vlprobe.cli import app
from vlprobe.data.synthetic import make_synthetic_winoground
from vlprobe.extract.cache.reader import ActivationCache

WAIT_S = 600  # generous: a loaded 2-core machine may be slow, and nothing here is timed


# -- the instrumented child -------------------------------------------------------------------


def _instrument(hook: Callable[[str], None]) -> None:
    """Call ``hook(label)`` before every write call of h5py and before every os.replace."""
    def wrap(owner: Any, name: str, label: Callable[..., str]) -> None:
        real = getattr(owner, name)

        def patched(*args: Any, **kwargs: Any) -> Any:
            hook(label(*args))
            return real(*args, **kwargs)

        setattr(owner, name, patched)

    wrap(h5py.Dataset, "__setitem__", lambda ds, *a: f"write {ds.name}")
    wrap(h5py.File, "flush", lambda f, *a: "flush")
    wrap(h5py.AttributeManager, "__setitem__", lambda am, key, *a: f"attr {key}")
    wrap(h5py.AttributeManager, "modify", lambda am, key, *a: f"attr {key}")
    wrap(os, "replace", lambda src, dst, *a: f"rename {Path(dst).name}")


def _child(argv: list[str], at: int, action: str, report: str, flags: str) -> None:
    """Run the CLI; before write call number ``at`` (1-based; 0: never) do ``action``."""
    labels: list[str] = []

    def hook(label: str) -> None:
        labels.append(label)
        if len(labels) != at:
            return
        if action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif action == "interrupt":
            signal.raise_signal(signal.SIGINT)  # as Ctrl-C would: KeyboardInterrupt right here
        elif action == "pause":
            Path(flags, "paused").write_text(str(os.getpid()))
            while not Path(flags, "go").exists():
                time.sleep(0.01)

    _instrument(hook)
    # Ctrl-C as a shell's foreground process gets it: Python's handler, SIGINT not blocked (a
    # forked child inherits the forking thread's mask and handlers, which pytest's plugins may change).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    result = CliRunner().invoke(app, argv)
    Path(report).write_text(json.dumps({"exit": result.exit_code, "stderr": result.stderr, "labels": labels}))
    os._exit(0)


def _start(argv: list[Any], at: int, action: str, tmp: Path) -> tuple[multiprocessing.process.BaseProcess, Path]:
    report = tmp / f"report-{action}-{at}.json"
    ctx = multiprocessing.get_context("fork")  # no re-import of torch per kill point
    proc = ctx.Process(target=_child, args=([str(a) for a in argv], at, action, str(report), str(tmp)))
    proc.start()
    return proc, report


def _run_child(argv: list[Any], at: int, action: str, tmp: Path) -> tuple[int | None, dict[str, Any] | None]:
    proc, report = _start(argv, at, action, tmp)
    proc.join(WAIT_S)
    assert proc.exitcode is not None, "the instrumented run hung"
    return proc.exitcode, json.loads(report.read_text()) if report.exists() else None


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory, tiny_clip: Path) -> dict[str, Any]:
    """A 2-item dataset and the instrumented reference run on it (its write calls, in order)."""
    root = tmp_path_factory.mktemp("faults")
    data = make_synthetic_winoground(root / "data", n_items=2, seed=0)

    def argv(out: Path) -> list[Any]:
        return ["extract", "--model", "clip", "--checkpoint", tiny_clip, "--dataset", "winoground",
                "--data-dir", data, "--variants", data / "variants.jsonl", "--poolings", "cls,mean",
                "--batch-size", 3, "--device", "cpu", "--quiet", "--out", out]

    ref = root / "reference.h5"
    code, report = _run_child(argv(ref), 0, "none", root)
    assert code == 0 and report is not None and report["exit"] == 0, report
    return {"argv": argv, "reference": ref, "labels": report["labels"], "data": data}


def _final_phase(labels: list[str]) -> list[int]:
    """Write calls (1-based) from the first score-matrix write to the end: the score matrix, its
    done mask, the record, every flush and the closing writes."""
    first = next(i for i, lab in enumerate(labels) if lab.startswith("write /scores"))
    return list(range(first + 1, len(labels) + 1))


def _stray(folder: Path, keep: set[str]) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name not in keep)


def _assert_identical(out: Path, reference: Path, assert_caches_equal: Callable[..., None]) -> None:
    # Exact (atol=0): a resumed run computes each missing batch with the same rows and shapes as
    # the uninterrupted one (done is set per batch), so the same floats come out on this CPU.
    assert_caches_equal(out, reference, atol=0)
    with ActivationCache(out) as c:
        assert c.complete


# -- SIGKILL ----------------------------------------------------------------------------------


def _kill_points(labels: list[str]) -> list[int]:
    final = _final_phase(labels)
    rng = np.random.default_rng(12)  # a few mid-run points too, seeded
    early = sorted(int(x) for x in rng.choice(np.arange(1, final[0]), size=min(4, final[0] - 1), replace=False))
    renames = [i + 1 for i, lab in enumerate(labels) if lab.startswith("rename")]  # the file moved into place
    return sorted({1, *renames, *(r + 1 for r in renames), *early, *final})


def _kill_and_resume(points: list[int], small: dict[str, Any], tmp_path: Path,
                     assert_caches_equal: Callable[..., None]) -> list[tuple[int, str]]:
    """SIGKILL the run before each write call of ``points``, resume it, check the cache; returns
    the points with their labels."""
    labels = small["labels"]
    resumed = []
    for at in points:
        folder = tmp_path / f"kill-{at}"
        folder.mkdir()
        out = folder / "c.h5"
        code, report = _run_child(small["argv"](out), at, "kill", tmp_path)
        assert code == -signal.SIGKILL and report is None, (at, labels[at - 1], code, report)
        result = CliRunner().invoke(app, [str(a) for a in small["argv"](out)])
        assert result.exit_code == 0, (at, labels[at - 1], result.output)
        _assert_identical(out, small["reference"], assert_caches_equal)
        assert _stray(folder, {"c.h5"}) == [], (at, labels[at - 1])  # no temporary or lock file left
        resumed.append((at, labels[at - 1]))
    return resumed


def test_every_write_of_the_final_phase_is_a_kill_point_that_resumes_identical(
    small: dict[str, Any], tmp_path: Path, assert_caches_equal: Callable[..., None],
) -> None:
    labels = small["labels"]
    assert any(lab.startswith("rename") for lab in labels) and labels[-1] != labels[0]
    resumed = _kill_and_resume(_kill_points(labels), small, tmp_path, assert_caches_equal)
    final = _final_phase(labels)
    print(f"SIGKILL: {len(resumed)} kill points ({len(final)} in the final phase, every rename, "
          f"{len(labels)} writes in all), all resumed identical: {resumed}")


def _every_kind_of_write(labels: list[str]) -> list[int]:
    """Write calls (1-based) from the rename that puts the cache in place to the end at which the
    pair (previous call, this call) occurs for the first time: every kind of write at every
    position of a chunk's cycle (states, flush, done mask, flush) of each stream, the crossing
    from one stream to the next, and the whole final phase."""
    start = next(i for i, lab in enumerate(labels) if lab.startswith("rename"))
    seen: set[tuple[str, str]] = set()
    points = []
    for i in range(start, len(labels)):
        pair = (labels[i - 1], labels[i])
        if pair not in seen:
            seen.add(pair)
            points.append(i + 1)
    return points


@pytest.mark.slow
def test_a_kill_before_every_kind_of_write_call_resumes_identical(
    small: dict[str, Any], tmp_path: Path, assert_caches_equal: Callable[..., None],
) -> None:
    labels = small["labels"]
    points = sorted(set(_every_kind_of_write(labels)) - set(_kill_points(labels)))  # the rest the test above does
    resumed = _kill_and_resume(points, small, tmp_path, assert_caches_equal)
    print(f"SIGKILL: {len(resumed)} more kill points (every kind of write call after the rename), all resumed "
          f"identical: {resumed}")


# -- Ctrl-C -----------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["mid-run", "final phase"])
def test_ctrl_c_is_one_line_130_and_resumes_identical(
    where: str, small: dict[str, Any], tmp_path: Path, assert_caches_equal: Callable[..., None],
) -> None:
    labels = small["labels"]
    at = len(labels) // 3 if where == "mid-run" else _final_phase(labels)[1]
    out = tmp_path / "c.h5"
    code, report = _run_child(small["argv"](out), at, "interrupt", tmp_path)
    assert code == 0 and report is not None
    assert report["exit"] == 130, (at, labels[at - 1], len(report["labels"]), report["labels"][at - 2 : at + 1],
                                   report["stderr"])
    assert report["stderr"].splitlines() == [
        "error: interrupted; finished chunks are kept, rerun the same command to resume"
    ]
    result = CliRunner().invoke(app, [str(a) for a in small["argv"](out)])
    assert result.exit_code == 0, result.output
    _assert_identical(out, small["reference"], assert_caches_equal)
    assert [n for n in _stray(tmp_path, {"c.h5"}) if not n.startswith("report-")] == []


# -- two runs on one file ---------------------------------------------------------------------


def test_a_second_extraction_on_the_same_out_is_refused_and_the_first_finishes(
    small: dict[str, Any], tmp_path: Path, assert_caches_equal: Callable[..., None],
    one_error_line: Callable[..., str],
) -> None:
    out = tmp_path / "c.h5"
    labels = small["labels"]
    first, report = _start(small["argv"](out), len(labels) // 2, "pause", tmp_path)
    try:
        deadline = time.monotonic() + WAIT_S
        while not (tmp_path / "paused").exists():  # the first run is mid-way, holding the file
            assert first.is_alive() and time.monotonic() < deadline, "the first run did not get going"
            time.sleep(0.01)
        second = CliRunner().invoke(app, [str(a) for a in small["argv"](out)])
        one_error_line(second, str(out), "being written by another vlprobe process")
    finally:
        (tmp_path / "go").write_text("")
        first.join(WAIT_S)
    assert first.exitcode == 0 and json.loads(report.read_text())["exit"] == 0
    _assert_identical(out, small["reference"], assert_caches_equal)
    assert _stray(tmp_path, {"c.h5", "paused", "go", report.name}) == []


# -- a full disk ------------------------------------------------------------------------------


@contextlib.contextmanager
def _small_disk(base: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (root here; elsewhere the test skips, saying why)."""
    folder = base / "disk"
    folder.mkdir()
    if os.geteuid() != 0:
        pytest.skip("a small tmpfs needs root (mount); this machine runs the tests as another user")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()})")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], capture_output=True, check=False)


def _fill(disk: Path, leave_kib: int) -> Path:
    """Fill ``disk`` up to ``leave_kib`` KiB of free space; returns the filler file."""
    filler = disk / "filler"
    st = os.statvfs(disk)
    free = st.f_bavail * st.f_frsize
    filler.write_bytes(b"\0" * max(0, free - leave_kib * 1024))
    return filler


DISK_FULL_RUNS: dict[str, Callable[[dict[str, Any], Path, Path], list[Any]]] = {
    "extract": lambda s, k, disk: s["argv"](disk / "c.h5"),
    "score pass": lambda s, k, disk: ["extract", "--model", "clip", "--checkpoint", k / "clip", "--dataset",
                                      "winoground", "--data-dir", k / "data", "--pair-plan", "all", "--layers", "-1",
                                      "--quiet", "--out", disk / "scores.h5"],
    "separability": lambda s, k, disk: ["run", "separability", "--cache", s["reference"], "--out", disk / "res",
                                        "--seeds", 1, "--layers", -1],
    "regions import": lambda s, k, disk: ["regions", "import", k / "regions.h5", "--format", "h5",
                                          "--out", disk / "r.h5"],
    "augment": lambda s, k, disk: ["augment", "--dataset", "winoground", "--data-dir", k / "data", "--strategies",
                                   "original", "--out", disk / "v.jsonl", "--quiet"],
    "plot": lambda s, k, disk: ["plot", k / "res" / "winoground-scores" / "clip.csv", "--out", disk / "p.png"],
    "report": lambda s, k, disk: ["report", k / "res", "--out", disk / "report.html"],
    "collect": lambda s, k, disk: ["collect", k / "res", "--out", disk / "all.csv"],
    "compare": lambda s, k, disk: ["compare", k / "a.scores.jsonl", k / "b.scores.jsonl", "--out", disk / "cmp",
                                   "--bootstrap", 20],
    "eval": lambda s, k, disk: ["eval", "sugarcrepe", "--scores", k / "a.scores.jsonl", "--out", disk / "res",
                                "--bootstrap", 20],
    "refine": lambda s, k, disk: ["refine", "--scores-a", k / "a.scores.jsonl", "--scores-b", k / "b.scores.jsonl",
                                  "--transform-a", "sigmoid", "--transform-b", "sigmoid", "--out", disk / "keep.jsonl"],
    "cache merge": lambda s, k, disk: ["cache", "merge", *sorted(k.glob("shard-*.h5")), "--out", disk / "m.h5"],
    "regions export": lambda s, k, disk: ["regions", "export", k / "regions.h5", "--format", "butd-tsv",
                                          "--out", disk / "r.tsv"],
    "fixtures model": lambda s, k, disk: ["fixtures", "model", "clip", "--out", disk / "m"],
    "fixtures dataset": lambda s, k, disk: ["fixtures", "dataset", "--n-items", 4, "--out", disk / "d"],
    "fixtures regions": lambda s, k, disk: ["fixtures", "regions", "--data-dir", k / "data", "--boxes", 4, "--dim", 64,
                                            "--out", disk / "r.h5"],
    "regions extract": lambda s, k, disk: ["regions", "extract", "--detector", k / "detector", "--dataset", "winoground",
                                           "--data-dir", k / "data", "--out", disk / "r.h5", "--quiet"],
    "run task-adaptation": lambda s, k, disk: ["run", "task-adaptation", "--cache", s["reference"], "--out", disk / "res",
                                               "--epochs", 1, "--seeds", 1, "--width", 8, "--test-size", 1,
                                               "--device", "cpu"],
}


# free space left on the disk: none, and for the larger outputs some (the write fails part-way)
DISK_FULL_CASES = [(c, 0) for c in DISK_FULL_RUNS] + [
    (c, 24) for c in ("extract", "score pass", "regions import", "cache merge", "fixtures model", "regions extract")]


@pytest.mark.parametrize(("command", "leave_kib"), DISK_FULL_CASES)
def test_a_full_disk_is_one_line_leaves_nothing_half_written_and_resumes(
    command: str, leave_kib: int, small: dict[str, Any], tiny_clip: Path, tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    kit = tmp_path / "kit"
    kit.mkdir()
    (kit / "clip").symlink_to(tiny_clip)
    data = small["data"]
    (kit / "data").symlink_to(data)
    if command == "regions extract":
        from vlprobe.fixtures.frcnn import write_tiny_frcnn

        write_tiny_frcnn(kit / "detector", 0)
    if command == "cache merge":
        for shard in request.getfixturevalue("shard_files"):
            (kit / shard.name).symlink_to(shard)
    if command in ("regions import", "regions export"):
        assert CliRunner().invoke(app, ["fixtures", "regions", "--data-dir", str(data), "--out",
                                        str(kit / "regions.h5"), "--boxes", "4", "--dim", "64"]).exit_code == 0
    if command in ("plot", "report", "collect"):
        assert CliRunner().invoke(app, ["run", "winoground-scores", "--cache", str(small["reference"]), "--out",
                                        str(kit / "res")]).exit_code == 0
    if command in ("compare", "eval", "refine"):
        from vlprobe.runs.score_files import write_item_scores

        ids = [f"sugarcrepe/replace_att/{i}" for i in range(30)]
        for side, seed in (("a", 0), ("b", 1)):
            write_item_scores(kit / f"{side}.scores.jsonl", [i for i in ids for _ in (0, 1)],
                              [f"{i}/i0" for i in ids for _ in (0, 1)], [f"{i}/c{j}" for i in ids for j in (0, 1)],
                              np.random.default_rng(seed).normal(size=2 * len(ids)))
    with _small_disk(tmp_path, "2m") as disk:
        filler = _fill(disk, leave_kib)
        # under folders the command makes: a failed command must not leave them behind, empty
        argv = [str(a) for a in DISK_FULL_RUNS[command](small, kit, disk / "new" / "sub")]
        result = CliRunner().invoke(app, argv)
        assert result.exit_code == 2 and "Traceback" not in result.output, result.output
        # progress bars may precede it on stderr (separability has no --quiet); the error is one line, last
        lines = [ln.strip() for ln in re.split(r"[\r\n]", result.stderr) if ln.strip()]
        errors = [ln for ln in lines if "error:" in ln]
        assert len(errors) == 1 and lines[-1] == errors[0], result.stderr
        line = errors[0][errors[0].index("error:"):]
        assert line.startswith(f"error: no space left on device: {disk}"), line
        assert line.endswith("(free some space, then rerun the same command)"), line
        left = sorted(str(p.relative_to(disk)) for p in disk.rglob("*") if p.is_file() and p != filler)
        assert not [n for n in left if "vlprobe-tmp" in n or "vlprobe-lock" in n or "staging" in n], left
        # and no folder it made for outputs it never wrote (an empty --out folder, OUT/<experiment>/)
        empty = sorted(str(p.relative_to(disk)) for p in disk.rglob("*") if p.is_dir() and not any(p.iterdir()))
        assert not empty, f"empty folders left behind: {empty}"
        filler.unlink()  # space freed: the same command now finishes
        again = CliRunner().invoke(app, argv)
        assert again.exit_code == 0, again.output
        assert not [p for p in disk.rglob("*") if "vlprobe-tmp" in p.name or "vlprobe-lock" in p.name]
