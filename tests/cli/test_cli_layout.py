"""The ``probe`` command tree: every command's --help renders, the documentation's command list
(docs/commands.md) and examples (README and docs/) are real, and the fast paths (``--help``,
``ls``, ``run --help``) import no torch and no numpy."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from typing import Any

import pytest
import typer
from typer.core import TyperGroup
from typer.testing import CliRunner

from tests.docs_text import ROOT, doc_page, documentation_files
from vlprobe.cli import app


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
    """The command's flags."""
    return {o for p in cmd.params for o in (*p.opts, *p.secondary_opts) if o.startswith("-")}


def test_tree_has_every_command() -> None:
    from vlprobe.experiments.benchmark_eval import BENCHMARKS
    from vlprobe.registry import EXPERIMENTS

    leaves = {" ".join(p) for p, c in TREE.items() if not isinstance(c, TyperGroup)}
    assert leaves == {
        "ls", "extract", "refine", "plot", "compare", "report", "collect", "augment",
        "fixtures dataset", "fixtures model", "fixtures hub-cache", "fixtures regions", "fixtures train clip", "fixtures train lxmert",
        "fixtures testbed", "fixtures known-answers", "cache info", "cache merge",
        *(f"run {name}" for name in EXPERIMENTS.names() if name not in {"refine", *BENCHMARKS}),
        *(f"eval {name}" for name in BENCHMARKS),
        "regions extract", "regions merge", "launch local", "launch slurm", "sweep", "regions import", "regions export", "regions info", "data info", "setup wordnet",
    }


def test_every_listed_experiment_has_one_command() -> None:
    """Every experiment `probe ls experiments` lists runs under exactly one command name:
    `probe run NAME`, `probe eval NAME` (the benchmarks) or `probe refine`."""
    from vlprobe.registry import EXPERIMENTS

    listed = CliRunner().invoke(app, ["ls", "experiments"]).stdout.split()
    assert set(EXPERIMENTS.names()) <= set(listed)
    commands: dict[str, list[tuple[str, ...]]] = {}
    for path, cmd in TREE.items():
        if getattr(cmd, "experiment", None) is not None:
            commands.setdefault(cmd.experiment, []).append(path)
    assert {name: len(paths) for name, paths in commands.items()} == dict.fromkeys(EXPERIMENTS.names(), 1)
    assert commands["refine"] == [("refine",)] and commands["sugarcrepe"] == [("eval", "sugarcrepe")]
    for name in ("sugarcrepe", "valse", "aro", "refine"):
        result = CliRunner().invoke(app, ["run", name, "--help"])
        assert result.exit_code == 2 and "No such command" in result.stderr, (name, result.output)


@pytest.mark.parametrize("path", sorted(TREE), ids=lambda p: " ".join(p) or "probe")
def test_help_renders(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(app, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage: probe" in result.stdout and result.stderr == ""
    for flag in _flags(TREE[path]):
        assert flag in result.stdout, f"{flag} missing from `probe {' '.join(path)} --help`"
    # a flag takes no value: no placeholder; a repeatable option shows what one value looks like
    assert "<bool>" not in result.stdout and "<list[str]>" not in result.stdout, result.stdout
    if "--image-root" in _flags(TREE[path]):
        assert "[SOURCE=]DIR" in result.stdout


def test_a_closed_pipe_ends_quietly() -> None:
    """`probe ... | head`: the reader closes the pipe before the command has written; no
    traceback, exit code 141 (SIGPIPE's, as a shell shows it); help, which rich writes, ends with
    rich's own quiet exit code 1."""
    for args, code in ((("ls", "models"), 141), (("--help",), 1)):
        proc = subprocess.Popen([sys.executable, "-m", "vlprobe", *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()  # long before the interpreter has started and written anything
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=60) == code, err
        assert err == "", err


def _probe_lines(block: str) -> list[str]:
    """The ``probe ...`` lines of a code block, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", block)
    return [line.split("  #", 1)[0].strip() for line in joined.splitlines() if line.startswith("probe ")]


def _commands_block() -> str:
    """The "Commands" block of docs/commands.md."""
    return doc_page("commands.md").split("## Commands", 1)[1].split("```", 2)[1]


def _readme_commands() -> list[str]:
    """The lines of the documentation's "Commands" block."""
    return _probe_lines(_commands_block())


def _readme_examples() -> list[str]:
    """Every other ``probe ...`` line of the README's and the docs' code blocks: examples meant to be run."""
    commands = _commands_block()
    blocks = [b for path in documentation_files() for b in path.read_text(encoding="utf-8").split("```")[1::2]]
    return [line for block in blocks if block != commands for line in _probe_lines(block)]


def _command_of(words: list[str], line: str) -> tuple[list[tuple[str, ...]], list[str]]:
    """The command paths a line names (``eval sugarcrepe|valse``: both) and its other words."""
    paths: list[tuple[str, ...]] = [()]
    while isinstance(TREE[paths[0]], TyperGroup):
        assert words, f"the docs name no command of `probe {' '.join(paths[0])}`: {line}"
        paths = [(*paths[0], word) for word in words[0].split("|")]
        for path in paths:
            assert path in TREE, f"the docs name no command `probe {' '.join(path)}`: {line}"
        words = words[1:]
    return paths, words


def test_readme_commands_exist() -> None:
    documented = set()
    for line in _readme_commands():
        paths, _ = _command_of(line.split()[1:], line)
        documented.update(paths)
        flags = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", line))
        for path in paths:
            unknown = flags - _flags(TREE[path])
            assert not unknown, f"docs: `probe {' '.join(path)}` has no {sorted(unknown)}: {line}"
    undocumented = {p for p, c in TREE.items() if not isinstance(c, TyperGroup)} - documented
    assert not undocumented, f"the Commands list (docs/commands.md) lacks {sorted(' '.join(p) for p in undocumented)}"


def _example_words(line: str) -> list[str]:
    """The words of an example: optional parts ``[--x V]`` taken, ``a|b`` alternatives the first."""
    return [w.strip("[]").split("|")[0] if "|" in w and not w.startswith("-") else w.strip("[]")
            for w in shlex.split(line)[1:] if w.strip("[]")]


def test_readme_examples_parse() -> None:
    """Every example line parses as its command would (options exist, values convert, required
    options given); lines with a ``...`` placeholder only name real flags."""
    examples = _readme_examples()
    assert len(examples) > 20, examples
    for line in examples:
        paths, args = _command_of(_example_words(line), line)
        path = paths[0]
        cmd = TREE[path]
        flags = {w.split("=", 1)[0] for w in args if w.startswith("--")}
        if "..." in args:
            unknown = flags - _flags(cmd)
            assert not unknown, f"docs: `probe {' '.join(path)}` has no {sorted(unknown)}: {line}"
            continue
        ctx = cmd.make_context(" ".join(("probe", *path)), list(args))
        assert ctx.params, line


@pytest.mark.parametrize(("args", "banned"), [
    *((a, ("torch", "transformers", "h5py", "numpy", "sklearn"))
      for a in (("--help",), ("ls", "models"), ("ls", "experiments"), ("run", "--help"), ("eval", "--help"))),
    (("ls", "strategies"), ("torch", "transformers", "h5py")),  # availability checks import numpy
])
def test_fast_paths_import_no_torch_and_no_experiment(args: tuple[str, ...], banned: tuple[str, ...]) -> None:
    """Listing commands reads the registry's help lines; no declaration (and no numpy) is imported."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "vlprobe", *args],
        env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    heavy = {m for m in imported if m.split(".")[0] in banned}
    assert not heavy, (args, sorted(heavy)[:5])
    # The declaration machinery (light: it imports vlprobe.validation only) is fine; an experiment is not.
    assert not {m for m in imported if m.startswith("vlprobe.experiments.")} - {"vlprobe.runs.declare"}, args


def test_make_demo_commands_parse() -> None:
    """Every command `make demo` runs parses."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    lines = re.sub(r"\\\n\s*", " ", makefile).splitlines()
    demo = [line.split("$(PROBE) ", 1)[1].split(";")[0].split(" > ")[0] for line in lines if "$(PROBE) " in line]
    assert len(demo) > 10, demo
    for line in demo:
        paths, args = _command_of(_example_words("probe " + line), line)
        cmd = TREE[paths[0]]
        assert cmd.make_context(" ".join(("probe", *paths[0])), list(args)).params, line
