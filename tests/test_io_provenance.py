"""Atomic writes, JSON output, file hashes, package versions and the git revision."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from vlprobe.io.atomic import atomic_path, atomic_write, write_json
from vlprobe.provenance import fingerprint_files, git_revision, package_versions, sha256_file

REPO = Path(__file__).resolve().parents[1]


def test_atomic_write_creates_parents_and_writes(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "out.txt"
    with atomic_write(target) as fh:
        fh.write("hello\n")
        assert not target.exists()  # nothing visible until the block ends
    assert target.read_text(encoding="utf-8") == "hello\n"
    assert [p.name for p in target.parent.iterdir()] == ["out.txt"]


def test_atomic_write_keeps_newlines_verbatim(tmp_path: Path) -> None:
    with atomic_write(tmp_path / "x.csv") as fh:
        fh.write("a\r\nb\n")
    assert (tmp_path / "x.csv").read_bytes() == b"a\r\nb\n"


def test_atomic_write_binary(tmp_path: Path) -> None:
    with atomic_write(tmp_path / "x.bin", "wb") as fh:
        fh.write(b"\x00\xff")
    assert (tmp_path / "x.bin").read_bytes() == b"\x00\xff"


def test_atomic_write_failure_leaves_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    target.write_text("old", encoding="utf-8")
    with pytest.raises(RuntimeError, match="boom"):
        with atomic_write(target) as fh:
            fh.write("new, half written")
            raise RuntimeError("boom")
    assert target.read_text(encoding="utf-8") == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]  # no temp files behind


def test_atomic_write_failure_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(KeyboardInterrupt):
        with atomic_write(tmp_path / "new.txt") as fh:
            fh.write("x")
            raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


def test_atomic_path_success_and_failure(tmp_path: Path) -> None:
    target = tmp_path / "t.bin"
    with atomic_path(target) as tmp:
        assert tmp.parent == tmp_path and tmp != target
        tmp.write_bytes(b"1")
    assert target.read_bytes() == b"1"
    with pytest.raises(ValueError):
        with atomic_path(target) as tmp:
            tmp.write_bytes(b"2")
            raise ValueError
    assert target.read_bytes() == b"1"
    # the block may remove or never write the temp file: still no leftovers on failure
    with pytest.raises(OSError):
        with atomic_path(target) as tmp:
            tmp.unlink()
            raise OSError
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.bin"]


def test_write_json_sorted_and_indented(tmp_path: Path) -> None:
    target = tmp_path / "m.json"
    obj = {"b": 1, "a": {"z": [1, 2], "y": "ü"}}
    write_json(target, obj)
    text = target.read_text(encoding="utf-8")
    assert json.loads(text) == obj
    assert text == json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    assert text.index('"a"') < text.index('"b"') and text.index('"y"') < text.index('"z"')


def test_write_json_unserialisable_leaves_no_file(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        write_json(tmp_path / "m.json", {"x": object()})
    assert list(tmp_path.iterdir()) == []


def test_sha256_file(tmp_path: Path) -> None:
    data = bytes(range(256)) * 5000  # 1.28 MB: more than one 1 MiB chunk
    p = tmp_path / "f"
    p.write_bytes(data)
    want = hashlib.sha256(data).hexdigest()
    assert sha256_file(p) == want
    assert sha256_file(p, chunk=7) == want
    assert sha256_file(str(p)) == want
    (tmp_path / "empty").write_bytes(b"")
    assert sha256_file(tmp_path / "empty") == hashlib.sha256(b"").hexdigest()


def test_fingerprint_files(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    a, b = tmp_path / "a.txt", tmp_path / "d" / "b.txt"
    a.write_text("A", encoding="utf-8")
    b.write_text("B", encoding="utf-8")
    fp = fingerprint_files([a, b], tmp_path)
    assert len(fp) == 64
    assert fingerprint_files([a, b], tmp_path) == fp
    assert fingerprint_files([b, a], tmp_path) != fp  # order matters
    other = tmp_path / "other"
    shutil.copytree(tmp_path / "d", other / "d")
    shutil.copyfile(a, other / "a.txt")
    assert fingerprint_files([other / "a.txt", other / "d" / "b.txt"], other) == fp
    b.write_text("C", encoding="utf-8")
    assert fingerprint_files([a, b], tmp_path) != fp


def test_package_versions() -> None:
    versions = package_versions()
    for name in ("python", "torch", "transformers", "h5py", "numpy", "vlprobe"):
        assert versions[name] not in ("", "not installed"), name
    import h5py
    import torch
    import transformers

    assert versions["torch"].split("+")[0] == torch.__version__.split("+")[0]
    assert versions["transformers"] == transformers.__version__
    assert versions["h5py"] == h5py.__version__
    assert all(isinstance(v, str) for v in versions.values())


def test_git_revision_inside_the_repo() -> None:
    rev = git_revision(REPO)
    assert re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", rev), rev
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True,
                          check=True).stdout.strip()
    assert rev.split("+")[0] == head
    import vlprobe

    if REPO in Path(vlprobe.__file__).resolve().parents:  # editable install
        assert git_revision() == rev  # default: the vlprobe source tree


def test_git_revision_outside_a_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    assert git_revision(tmp_path) == "unknown"
    assert git_revision(tmp_path / "does-not-exist") == "unknown"


def test_git_revision_without_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert git_revision(REPO) == "unknown"


def _git_repo(root: Path, package: Path) -> None:
    package.mkdir(parents=True)
    (package / "provenance.py").write_text("# stand-in\n", encoding="utf-8")
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "x"]):
        subprocess.run(["git", *args], cwd=root, check=True, env=env, capture_output=True)


def test_git_revision_ignores_an_installed_copy_inside_another_repo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import vlprobe.provenance as provenance

    package = tmp_path / "project" / ".venv" / "lib" / "site-packages" / "vlprobe"
    _git_repo(tmp_path / "project", package)
    monkeypatch.setattr(provenance, "__file__", str(package / "provenance.py"))
    assert provenance.git_revision() == "unknown"


def test_git_revision_of_a_source_checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import vlprobe.provenance as provenance

    package = tmp_path / "checkout" / "src" / "vlprobe"
    _git_repo(tmp_path / "checkout", package)
    monkeypatch.setattr(provenance, "__file__", str(package / "provenance.py"))
    assert re.fullmatch(r"[0-9a-f]{40}", provenance.git_revision())


def test_atomic_outputs_get_the_users_umask(tmp_path: Path) -> None:
    # mkstemp's 0600 would leave every result unreadable to the user's group.
    import os

    old = os.umask(0o027)
    try:
        with atomic_write(tmp_path / "a.csv") as fh:
            fh.write("x\n")
    finally:
        os.umask(old)
    assert (tmp_path / "a.csv").stat().st_mode & 0o777 == 0o640
