"""How vlprobe writes outputs (vlprobe.io): ownership, the user's umask, locks, a full disk."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vlprobe.cli import app
from vlprobe.io.atomic import atomic_dir, atomic_write, write_json
from vlprobe.io.errors import is_disk_full, no_space_error
from vlprobe.io.locks import output_lock
from vlprobe.io.ownership import OUTPUTS_LIST, check_replaceable, claim_folder
from vlprobe.io.paths import temp_name
from vlprobe.validation import InputError


@contextlib.contextmanager
def _umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# -- ownership --------------------------------------------------------------------------------


def test_a_file_vlprobe_did_not_write_is_never_replaced(tmp_path: Path) -> None:
    target = tmp_path / "v.jsonl"
    target.write_bytes(b"mine\n")
    with pytest.raises(InputError, match="was not written by vlprobe; refusing to replace it"):
        with atomic_write(target, kind="variants") as fh:
            fh.write("theirs\n")
    assert target.read_bytes() == b"mine\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v.jsonl"]  # no list, no temporary file


def test_its_own_output_is_replaced_and_another_writers_is_not(tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    write_json(target, {"a": 1}, kind="results")
    write_json(target, {"a": 2}, kind="results")  # the same writer: replaced
    assert json.loads(target.read_text()) == {"a": 2}
    with pytest.raises(InputError, match="written by `results`, not by `variants`"):
        write_json(target, {"a": 3}, kind="variants")
    listed = json.loads((tmp_path / OUTPUTS_LIST).read_text())
    assert listed["format"] == "vlprobe-outputs" and list(listed["files"]) == ["out.json"]


def test_a_file_changed_since_vlprobe_wrote_it_is_not_replaced(tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    write_json(target, {"a": 1}, kind="results")
    target.write_text('{"a": "edited by hand"}\n')
    with pytest.raises(InputError, match="has changed since vlprobe wrote it"):
        write_json(target, {"a": 2}, kind="results")
    assert "edited by hand" in target.read_text()


def test_a_folder_or_link_at_the_output_is_refused(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    with pytest.raises(InputError, match="is a folder"):
        check_replaceable(tmp_path / "d", "results")
    (tmp_path / "real").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(InputError, match="symbolic link"):
        check_replaceable(tmp_path / "link", "results")


def test_atomic_dir_replaces_its_own_folder_only(tmp_path: Path) -> None:
    out = tmp_path / "npz"
    for n in (1, 2):
        with atomic_dir(out, kind="export") as staging:
            (staging / f"{n}.npz").write_bytes(b"x")
    assert sorted(p.name for p in out.iterdir()) == ["2.npz"]
    other = tmp_path / "mine"
    other.mkdir()
    (other / "keep.txt").write_text("keep")
    with pytest.raises(InputError, match="did not write and is not empty"):
        with atomic_dir(other, kind="export"):
            pass
    assert (other / "keep.txt").read_text() == "keep"


def test_a_killed_writers_temporary_file_is_reused_not_left(tmp_path: Path) -> None:
    target = tmp_path / "a.csv"
    temp_name(target).write_text("half a file from a killed run")
    with atomic_write(target, kind="results") as fh:
        fh.write("whole\n")
    assert target.read_text() == "whole\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [OUTPUTS_LIST, "a.csv"]


# -- the user's umask -------------------------------------------------------------------------


@pytest.mark.parametrize(("mask", "want"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_atomic_writers_honour_the_umask(tmp_path: Path, mask: int, want: int) -> None:
    with _umask(mask):
        with atomic_write(tmp_path / "a.csv") as fh:
            fh.write("x\n")
        write_json(tmp_path / "m.json", {}, kind="results")
        with atomic_dir(tmp_path / "d", kind="export") as staging:
            (staging / "f").write_text("x")
        plain = tmp_path / "plain"
        plain.write_text("x")  # what open() gives: the reference
    assert _mode(plain) == want
    for name in ("a.csv", "m.json", OUTPUTS_LIST, "d/f"):
        assert _mode(tmp_path / name) == want, name
    assert _mode(tmp_path / "d") == 0o777 & ~mask


def test_a_replaced_output_keeps_its_mode(tmp_path: Path) -> None:
    target = tmp_path / "a.csv"
    with atomic_write(target, kind="results") as fh:
        fh.write("1\n")
    target.chmod(0o640)
    with atomic_write(target, kind="results") as fh:
        fh.write("2\n")
    assert _mode(target) == 0o640


@pytest.mark.parametrize("mask", [0o022, 0o077])
def test_command_outputs_honour_the_umask(
    mask: int, tmp_path: Path, reference_cache: Path, synthetic_dir: Path,
) -> None:
    """Every file a few writing commands make has open()'s mode under the umask (the caches too)."""
    runner = CliRunner()
    with _umask(mask):
        for argv in (
            ["run", "winoground-scores", "--cache", reference_cache, "--out", tmp_path / "res"],
            ["run", "recall", "--cache", reference_cache, "--out", tmp_path / "res"],
            ["augment", "--dataset", "winoground", "--data-dir", synthetic_dir, "--strategies", "original",
             "--out", tmp_path / "v" / "v.jsonl", "--quiet"],
            ["fixtures", "dataset", "--out", tmp_path / "data", "--n-items", 2],
            ["fixtures", "model", "clip", "--out", tmp_path / "clip"],
            ["cache", "merge", reference_cache, "--out", tmp_path / "m.h5"],
        ):
            result = runner.invoke(app, [str(a) for a in argv])
            assert result.exit_code in (0, 2), result.output  # merge of one unsharded file: refused, fine
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(files) > 10
    for p in files:
        assert _mode(p) == 0o666 & ~mask, p
    for p in (p for p in tmp_path.rglob("*") if p.is_dir()):
        assert _mode(p) == 0o777 & ~mask, p


# -- locks ------------------------------------------------------------------------------------


def test_a_second_writer_of_the_same_output_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "c.h5"
    code = (
        "import sys, time; from vlprobe.io.locks import output_lock\n"
        f"with output_lock({str(target)!r}):\n"
        "    print('locked', flush=True); sys.stdin.read()\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"  # synchronised, no sleep
        with pytest.raises(InputError, match=rf"being written by another vlprobe process \(pid {holder.pid}\)"):
            with output_lock(target, wait=False):
                pass
    finally:
        holder.communicate("", timeout=120)
    with output_lock(target, wait=False):  # released when the holder ended
        pass
    assert not list(tmp_path.iterdir())  # the lock file went with the lock


def test_another_thread_waits_for_the_lock_or_is_refused(tmp_path: Path) -> None:
    """The lock is re-entrant within a thread only: another thread of the process is another writer."""
    import threading

    target = tmp_path / "m.json"
    held, release = threading.Event(), threading.Event()

    def holder() -> None:
        with output_lock(target), output_lock(target):  # re-entrant in its own thread
            held.set()
            release.wait(60)

    t = threading.Thread(target=holder)
    t.start()
    try:
        assert held.wait(60)
        with pytest.raises(InputError, match=r"being written by another vlprobe process \(another thread of this one\)"):
            with output_lock(target, wait=False):
                pass
    finally:
        release.set()
        t.join(60)
    with output_lock(target, wait=False):
        pass
    assert not list(tmp_path.iterdir())


# -- a full disk ------------------------------------------------------------------------------


def test_disk_full_is_recognised_also_as_hdf5_says_it() -> None:
    hdf5 = OSError("Can't write data (file write failed: time = x, filename = '/d/.c.h5.vlprobe-tmp', "
                   "file descriptor = 5, errno = 28, error message = 'No space left on device', buf = 0x1)")
    assert is_disk_full(OSError(errno.ENOSPC, "No space left on device")) and is_disk_full(hdf5)
    assert not is_disk_full(OSError(errno.EACCES, "Permission denied")) and not is_disk_full(KeyError("x"))
    named = no_space_error(hdf5)
    assert named.errno == errno.ENOSPC and named.filename == "/d/c.h5"  # the output, not its temporary name


def test_a_full_disk_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "a.csv"
    with atomic_write(target, kind="results") as fh:
        fh.write("old\n")
    with pytest.raises(OSError) as info:
        with atomic_write(target, "wb", kind="results") as fh:
            fh.write(b"new" * 1000)
            raise OSError(errno.ENOSPC, "No space left on device")  # as the write of the rest would
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(target)
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [OUTPUTS_LIST, "a.csv"]


def test_claim_folder_takes_new_empty_or_its_own_folders_only(tmp_path: Path) -> None:
    new = claim_folder(tmp_path / "a" / "tb", kind="testbed")
    assert new.is_dir() and json.loads((tmp_path / "a" / OUTPUTS_LIST).read_text())["files"]["tb"] == {
        "kind": "testbed", "folder": True}
    (new / "results").mkdir()
    assert claim_folder(new, kind="testbed") == new  # its own, not empty: taken again
    with pytest.raises(InputError, match="folder vlprobe did not write and is not empty"):
        claim_folder(new, kind="other")  # another writer's folder
    empty = tmp_path / "empty"
    empty.mkdir()
    assert claim_folder(empty, kind="testbed") == empty
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    with pytest.raises(InputError, match="refusing to write into it"):
        claim_folder(mine, kind="testbed")
    assert claim_folder(mine, kind="testbed", recognise=lambda p: (p / "notes.txt").is_file()) == mine
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="is not a folder"):
        claim_folder(tmp_path / "file", kind="testbed")
    with pytest.raises(InputError, match="is a file, not a folder"):
        claim_folder(tmp_path / "file" / "tb", kind="testbed")
    assert (mine / "notes.txt").read_text() == "mine\n" and (tmp_path / "file").read_text() == "x"



def test_folders_made_by_a_failed_block_are_removed_when_empty(tmp_path: Path) -> None:
    from vlprobe.io.paths import ensure_folder, folders_removed_on_failure

    (tmp_path / "was-there").mkdir()
    with pytest.raises(OSError, match="disk full"):
        with folders_removed_on_failure():
            ensure_folder(tmp_path / "was-there" / "a" / "b")
            ensure_folder(tmp_path / "kept" / "c")
            (tmp_path / "kept" / "part.h5").write_bytes(b"resumable")  # a folder holding something stays
            with folders_removed_on_failure():  # nested: its folders are the outer block's too
                ensure_folder(tmp_path / "inner" / "d")
            raise OSError(errno.ENOSPC, "disk full")
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == [
        "kept", "kept/part.h5", "was-there"]
    with folders_removed_on_failure():  # success: everything made stays
        ensure_folder(tmp_path / "ok" / "e")
    assert (tmp_path / "ok" / "e").is_dir()
