"""The CLI's one error rule: bad input and file-system errors are one ``error:`` line and exit 2;
Ctrl-C one line and exit 130; anything else is a bug: its traceback, one line saying so, exit 1."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from vlprobe.cli import app
from vlprobe.cli.app import error_line, is_file_system_error
from vlprobe.validation import InputError


def _run(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def _dataset_raises(monkeypatch: pytest.MonkeyPatch, exc: BaseException) -> None:
    def fail(*args: Any, **kwargs: Any) -> None:
        raise exc

    monkeypatch.setattr("vlprobe.data.synthetic.make_synthetic_winoground", fail)


def test_input_error_is_one_line(one_error_line: Any, tmp_path: Path) -> None:
    one_error_line(_run("fixtures", "dataset", "--out", str(tmp_path / "d"), "--n-items", "0"),
                   "n_items must be a positive integer, got 0")


def test_internal_value_error_shows_its_traceback_and_says_bug(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _dataset_raises(monkeypatch, ValueError("operands could not be broadcast together"))
    result = _run("fixtures", "dataset", "--out", str(tmp_path / "d"))
    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert "ValueError: operands could not be broadcast together" in result.stderr
    assert lines[-1].startswith("bug: this ValueError is a bug in vlprobe")
    assert "report it" in lines[-1] and "traceback above" in lines[-1]
    assert result.stdout == ""


@pytest.mark.parametrize("exc", [KeyError("texts"), TypeError("unsupported operand"), RuntimeError("x")])
def test_other_exceptions_are_bugs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, exc: Exception) -> None:
    _dataset_raises(monkeypatch, exc)
    result = _run("fixtures", "dataset", "--out", str(tmp_path / "d"))
    assert result.exit_code == 1
    assert "Traceback (most recent call last):" in result.stderr
    assert result.stderr.splitlines()[-1].startswith(f"bug: this {type(exc).__name__} is a bug in vlprobe")


def test_permission_error_is_one_line_with_the_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, one_error_line: Any,
) -> None:
    target = tmp_path / "ro" / "examples.jsonl"
    # Tests may run as root, where chmod does not refuse anything: raise what the OS would.
    _dataset_raises(monkeypatch, PermissionError(errno.EACCES, "Permission denied", str(target)))
    line = one_error_line(_run("fixtures", "dataset", "--out", str(tmp_path / "ro")))
    assert line == f"error: cannot write {target}: Permission denied"


@pytest.mark.parametrize(("exc", "want"), [
    (OSError(errno.ENOSPC, "No space left on device"), "error: no space left on device (free some space, then rerun the same command)"),
    (OSError(errno.ENOSPC, "No space left on device", "/d/x.csv"), "error: no space left on device: /d/x.csv (free some space, then rerun the same command)"),
    (OSError("Can't write data (file write failed: time = x, filename = '/d/.c.h5.vlprobe-tmp', file descriptor = 5, errno = 28, error message = 'No space left on device', buf = 0x1, total write size = 8, bytes this sub-write = 8, bytes actually written = 18446744073709551615, offset = 0)"), "error: no space left on device: /d/c.h5 (free some space, then rerun the same command)"),
    (OSError(errno.EROFS, "Read-only file system", "/mnt/ro/x.h5"), "error: cannot write /mnt/ro/x.h5: Read-only file system"),
    (FileNotFoundError(errno.ENOENT, "No such file or directory", "/no/such"), "error: cannot open /no/such: No such file or directory"),
    (FileNotFoundError("cache: no such file '/x.h5'"), "error: cache: no such file '/x.h5'"),
])
def test_file_system_errors_are_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, one_error_line: Any, exc: OSError, want: str,
) -> None:
    _dataset_raises(monkeypatch, exc)
    assert one_error_line(_run("fixtures", "dataset", "--out", str(tmp_path / "d"))) == want


def test_a_real_file_system_refusal(tmp_path: Path, one_error_line: Any) -> None:
    """No monkeypatch: the output folder's parent is a file, so the folder cannot be made (with the path)."""
    (tmp_path / "file").write_text("not a folder")
    line = one_error_line(_run("fixtures", "dataset", "--out", str(tmp_path / "file" / "d")))
    assert str(tmp_path / "file") in line and "cannot create folder" in line and "is a file, not a folder" in line


def test_keyboard_interrupt_is_one_line_and_130(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _dataset_raises(monkeypatch, KeyboardInterrupt())
    result = _run("fixtures", "dataset", "--out", str(tmp_path / "d"))
    assert result.exit_code == 130
    assert result.stderr.splitlines() == [
        "error: interrupted; finished chunks are kept, rerun the same command to resume"
    ]


def test_error_helpers() -> None:
    assert is_file_system_error(PermissionError("x")) and is_file_system_error(OSError(errno.ENOSPC, "full"))
    assert not is_file_system_error(OSError("HDF5 said something")) and not is_file_system_error(InputError("x"))
    assert error_line(InputError("batch_size must be a positive integer, got 0")) == (
        "batch_size must be a positive integer, got 0"
    )
