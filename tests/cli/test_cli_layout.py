"""The ``probe`` command tree: every command's --help renders, README's command list is real,
and the fast paths (``--help``, ``ls``) do not import torch."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.core import TyperGroup
from typer.testing import CliRunner

from vlprobe.cli import app

README = Path(__file__).resolve().parents[2] / "README.md"


def _tree() -> dict[tuple[str, ...], Any]:
    """Every command and group of ``probe`` by its path of names (the root is ``()``)."""
    out: dict[tuple[str, ...], Any] = {}

    def walk(cmd: Any, path: tuple[str, ...]) -> None:
        out[path] = cmd
        if isinstance(cmd, TyperGroup):
            for name in cmd.list_commands(None):  # type: ignore[arg-type]
                walk(cmd.get_command(None, name), (*path, name))  # type: ignore[arg-type]

    walk(typer.main.get_command(app), ())
    return out


TREE = _tree()


def _flags(cmd: Any) -> set[str]:
    return {o for p in cmd.params for o in (*p.opts, *p.secondary_opts) if o.startswith("-")}


def test_tree_has_every_command() -> None:
    leaves = {" ".join(p) for p, c in TREE.items() if not isinstance(c, TyperGroup)}
    assert leaves == {
        "ls", "extract", "eval", "refine", "plot", "compare", "report", "collect", "augment",
        "fixtures dataset", "fixtures model", "fixtures regions", "fixtures train clip", "fixtures train lxmert",
        "fixtures testbed", "cache info", "cache merge",
        "run winoground-scores", "run recall", "run separability", "run task-adaptation",
        "run variant-probe", "run variant-similarity", "regions extract", "regions merge", "regions import",
        "regions export", "regions info",
        "data info", "setup wordnet",
    }


@pytest.mark.parametrize("path", sorted(TREE), ids=lambda p: " ".join(p) or "probe")
def test_help_renders(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(app, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage: probe" in result.stdout and result.stderr == ""
    for flag in _flags(TREE[path]):
        assert flag in result.stdout, f"{flag} missing from `probe {' '.join(path)} --help`"


def _readme_commands() -> list[str]:
    """The lines of README's "Commands" block, continuation lines joined."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## Commands", 1)[1].split("\n## ", 1)[0]
    block = section.split("```", 2)[1]
    return [line for line in re.sub(r"\\\n\s*", " ", block).splitlines() if line.startswith("probe ")]


def test_readme_commands_exist() -> None:
    lines = _readme_commands()
    documented = set()
    for line in lines:
        words, path = line.split()[1:], ()
        while isinstance(TREE[path], TyperGroup):
            assert words and (*path, words[0]) in TREE, f"README names no command of `probe {' '.join(path)}`: {line}"
            path, words = (*path, words[0]), words[1:]
        documented.add(path)
        flags = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", line.split("#", 1)[0]))
        unknown = flags - _flags(TREE[path])
        assert not unknown, f"README: `probe {' '.join(path)}` has no {sorted(unknown)}: {line}"
    undocumented = {p for p, c in TREE.items() if not isinstance(c, TyperGroup)} - documented
    assert not undocumented, f"README's Commands list lacks {sorted(' '.join(p) for p in undocumented)}"


@pytest.mark.parametrize("args", [("--help",), ("ls", "models"), ("ls", "strategies"), ("run", "--help")])
def test_fast_paths_do_not_import_torch(args: tuple[str, ...]) -> None:
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "vlprobe", *args],
        env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert not {m for m in imported if m.split(".")[0] in ("torch", "transformers", "h5py")}, args


@pytest.mark.parametrize(("path", "args", "param", "value"), [
    (("run", "recall"), ["--scores-file", "m.npy", "--out", "o"], "scores", Path("m.npy")),
    (("run", "winoground-scores"), ["--scores-file", "m.jsonl", "--out", "o"], "scores_file", Path("m.jsonl")),
    (("eval",), ["sugarcrepe", "--scores-file", "s.jsonl", "--out", "o"], "scores", Path("s.jsonl")),
    (("run", "separability"), ["--cache", "c.h5", "--out", "o", "--streams", "text,lang"], "stream", "text,lang"),
])
def test_aliases_reach_the_same_parameter(path: tuple[str, ...], args: list[str], param: str, value: Any) -> None:
    """Alias spellings kept for consistency across commands (--scores-file, --streams)."""
    ctx = TREE[path].make_context(" ".join(path), args)
    assert ctx.params[param] == value
