"""Every command block of the README and the docs either runs here, on fixtures, or says why not.

Blocks marked ``<!-- runnable -->`` run in page order in one fresh folder per page (a later block
sees what an earlier one wrote), with the fixtures their marker names copied in first. A ``probe``
line runs in-process through the command-line app (the console script's app: the same parsing,
errors and exit codes, without a torch import per line), and each ``--out`` it names must exist
afterwards; a block with any other shell command runs in ``bash -e`` with ``probe`` on ``PATH``.
``python`` blocks run with ``exec`` in one namespace per page. Blocks marked ``<!-- not-runnable:
REASON -->`` are counted, and their ``probe`` lines are still parsed by
``tests/cli/test_cli_layout.py``.
"""

from __future__ import annotations

import os
import shlex
import shutil
import stat
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.docs_text import ROOT, Block, blocks_of, command_blocks

#: Fixtures a runnable block may name: the path it gets in the page's folder.
FIXTURES = {
    "winoground": "data",        # synthetic Winoground-format dataset (16 items, variants, tags)
    "clip": "tiny-clip",         # tiny random CLIP (Hugging Face format)
    "clip-cache": "clip.h5",     # its cache of data/: every layer, cls/mean/max, the variants
    "regions": "regions.h5",     # random region features (36 x 2048) of data/'s images
    "results": "results",        # winoground-scores and separability of tiny CLIP and tiny LXMERT (runs clip, lxmert)
    "other-results": "other-results",  # recall of tiny CLIP
}
N_ITEMS = 16
SHELL_OPERATORS = set("|&;<>()")


def _by_page() -> dict[Path, list[Block]]:
    pages: dict[Path, list[Block]] = {}
    for block in command_blocks():
        if block.marker == "runnable":
            pages.setdefault(block.path, []).append(block)
    return pages


PAGES = _by_page()


# -- the marking ------------------------------------------------------------------------------------


def test_every_command_block_is_marked() -> None:
    """Each command block is runnable or says why not; the counts are printed (``-s``)."""
    blocks = command_blocks()
    unmarked = [b.where for b in blocks if b.marker is None]
    assert unmarked == [], "mark these blocks <!-- runnable --> or <!-- not-runnable: REASON -->:\n" + "\n".join(unmarked)
    assert [b.where for b in blocks if b.marker == "not-runnable" and len(b.note.split()) < 2] == [], \
        "a not-runnable block says why, in words"
    unknown = {f for b in blocks for f in b.fixtures} - set(FIXTURES)
    assert not unknown, f"unknown fixtures {sorted(unknown)}; known: {sorted(FIXTURES)}"
    counts = Counter(b.marker for b in blocks)
    print(f"\ndocumentation command blocks: {counts['runnable']} runnable, {counts['not-runnable']} not runnable")
    for b in blocks:
        if b.marker == "not-runnable":
            print(f"  not runnable {b.where}: {b.note}")
    readme = [b for b in blocks if b.path.name == "README.md" and b.marker == "runnable"]
    assert readme, "the README's walkthrough is runnable"
    assert counts["runnable"] >= 4, counts


@pytest.mark.parametrize(("text", "marker", "note", "fixtures"), [
    ("<!-- runnable -->\n```bash\nprobe ls models\n```\n", "runnable", "", ()),
    ("<!-- runnable: fixtures=clip-cache, regions -->\n```bash\nprobe ls models\n```\n", "runnable",
     "fixtures=clip-cache, regions", ("clip-cache", "regions")),
    ("<!-- not-runnable: needs a GPU -->\n```python\nimport vlprobe\n```\n", "not-runnable", "needs a GPU", ()),
    ("text\n\n```bash\nprobe ls models\n```\n", None, "", ()),
])
def test_markers_are_read(tmp_path: Path, text: str, marker: str | None, note: str, fixtures: tuple[str, ...]) -> None:
    [block] = blocks_of(tmp_path / "page.md", text)
    assert (block.marker, block.note, block.fixtures) == (marker, note, fixtures)
    assert block.text == next(line for line in text.splitlines() if not line.startswith(("<", "`", "text"))
                              and line) + "\n"
    assert block.is_command


def test_data_blocks_are_not_command_blocks(tmp_path: Path) -> None:
    text = '```json\n{"item": 1}\n```\n\n```\n/  attrs\n```\n\n```\nprobe ls models\n```\n'
    assert [b.is_command for b in blocks_of(tmp_path / "page.md", text)] == [False, False, True]


# -- running them -----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def docs_fixtures(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``make(name)``: the named fixture, built once per session (read-only: pages get copies)."""
    root = tmp_path_factory.mktemp("docs-fixtures")
    made: dict[str, Path] = {}

    def make(name: str) -> Path:
        if name in made:
            return made[name]
        out = root / FIXTURES[name]
        if name == "winoground":
            from vlprobe.data.synthetic import make_synthetic_winoground

            make_synthetic_winoground(out, n_items=N_ITEMS, seed=0)
        elif name == "clip":
            from vlprobe.fixtures.clip import write_tiny_clip

            write_tiny_clip(out, seed=0)
        elif name == "clip-cache":
            from vlprobe.extract.runner import ExtractConfig, extract

            data = make("winoground")
            extract(ExtractConfig(model="clip", checkpoint=str(make("clip")), dataset="winoground", data_dir=data,
                                  variants=data / "variants.jsonl", layers="all", poolings=("cls", "mean", "max"),
                                  device="cpu", out=out, progress=False))
        elif name == "regions":
            from vlprobe.fixtures.regions import random_regions_for_dataset

            random_regions_for_dataset(out, make("winoground"), seed=0)
        elif name == "results":
            from vlprobe.extract.runner import ExtractConfig, extract
            from vlprobe.fixtures.lxmert import write_tiny_lxmert

            data = make("winoground")
            lxmert = root / "lxmert.h5"
            extract(ExtractConfig(model="lxmert", checkpoint=str(write_tiny_lxmert(root / "tiny-lxmert", seed=0)),
                                  regions=make("regions"), dataset="winoground", data_dir=data,
                                  variants=data / "variants.jsonl", pair_plan="item", device="cpu", out=lxmert,
                                  progress=False))
            for cache in (make("clip-cache"), lxmert):
                _cli("run", "winoground-scores", "--cache", str(cache), "--out", str(out), "--quiet")
                _cli("run", "separability", "--cache", str(cache), "--out", str(out), "--quiet")
        elif name == "other-results":
            _cli("run", "recall", "--cache", str(make("clip-cache")), "--out", str(out), "--quiet")
        made[name] = out
        return out

    return make


def _cli(*args: str) -> None:
    from typer.testing import CliRunner

    from vlprobe.cli import app

    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, (args, result.output[-3000:], result.exception)


def _commands(block: Block) -> list[str]:
    """The block's command lines, continuation lines joined."""
    joined = block.text.replace("\\\n", " ")
    return [line for line in joined.splitlines() if shlex.split(line, comments=True)]


def _needs_shell(line: str) -> bool:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    words = list(lexer)
    if any(w and set(w) <= SHELL_OPERATORS for w in words) or "$" in line or "`" in line:
        return True
    first = words[0] if words else ""
    return first not in {"probe", "export"}


def _probe_shim(folder: Path) -> Path:
    """A ``probe`` on PATH that runs this interpreter's vlprobe (the tested source tree)."""
    import vlprobe

    bin_dir = folder / ".bin"
    bin_dir.mkdir()
    shim = bin_dir / "probe"
    src = Path(vlprobe.__file__).resolve().parents[1]
    shim.write_text(f'#!/bin/sh\nPYTHONPATH="{src}${{PYTHONPATH:+:$PYTHONPATH}}" exec "{sys.executable}" -m vlprobe "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    return bin_dir


def _run_shell_block(block: Block, folder: Path) -> None:
    bin_dir = _probe_shim(folder) if not (folder / ".bin").exists() else folder / ".bin"
    # probe, then this interpreter's own scripts (torchrun) and vlprobe: the tested source tree
    import vlprobe

    src = str(Path(vlprobe.__file__).resolve().parents[1])
    path = os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), os.environ["PATH"]])
    python_path = os.pathsep.join([src, *filter(None, [os.environ.get("PYTHONPATH")])])
    env = dict(os.environ, PATH=path, PYTHONPATH=python_path, HF_HUB_OFFLINE="1", MPLBACKEND="Agg")
    proc = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block.text], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{block.where} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"


def _out_of(words: list[str]) -> str | None:
    for i, w in enumerate(words):
        if w == "--out" and i + 1 < len(words):
            return words[i + 1]
        if w.startswith("--out="):
            return w.split("=", 1)[1]
    return None


def _run_probe_lines(block: Block, monkeypatch: pytest.MonkeyPatch) -> int:
    from typer.testing import CliRunner

    from vlprobe.cli import app

    ran = 0
    for line in _commands(block):
        words = shlex.split(line, comments=True)
        if words[0] == "export":
            for assignment in words[1:]:
                name, _, value = assignment.partition("=")
                monkeypatch.setenv(name, value)
            continue
        result = CliRunner().invoke(app, words[1:])
        assert result.exit_code == 0, (
            f"{block.where}: `{line.strip()}` exited {result.exit_code}:\n{result.output[-3000:]}\n"
            f"{result.stderr[-3000:] if result.stderr_bytes is not None else ''}\n{result.exception!r}")
        out = _out_of(words)
        assert out is None or Path(out).exists(), f"{block.where}: `{line.strip()}` wrote no {out}"
        ran += 1
    return ran


@pytest.mark.slow
@pytest.mark.parametrize("page", sorted(PAGES), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_runnable_blocks_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                             docs_fixtures: Callable[[str], Path]) -> None:
    """The page's runnable blocks run in order in one folder; every command succeeds."""
    blocks = PAGES[page]
    for name in dict.fromkeys(f for b in blocks for f in b.fixtures):
        src = docs_fixtures(name)
        dst = tmp_path / FIXTURES[name]
        shutil.copytree(src, dst) if src.is_dir() else shutil.copy2(src, dst)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    namespace: dict[str, object] = {"__name__": "__docs__"}
    ran = 0
    for block in blocks:
        if block.lang in {"python", "py"}:
            exec(compile(block.text, block.where, "exec"), namespace)  # the page's own example, as a reader runs it
            ran += 1
        elif any(_needs_shell(line) for line in _commands(block)):
            _run_shell_block(block, tmp_path)
            ran += 1
        else:
            ran += _run_probe_lines(block, monkeypatch)
    assert ran >= len(blocks)
    if page.name == "README.md":
        _check_the_first_figure(tmp_path / "demo")


def _check_the_first_figure(demo: Path) -> None:
    """The README's ten lines end in a figure where target and control differ (not a flat 0%):
    from layer 2 on the target is separable for at least 20 points more of the items than the
    shuffled-label control, beyond the permutation test's doubt, and the run notes nothing."""
    import json

    from vlprobe.runs.summary import read_tidy_csv, summarize

    folder = demo / "results" / "separability"
    (csv_path,) = [p for p in folder.glob("*.csv") if p.name.count(".") == 1]  # the tidy CSV of the one run
    assert list(folder.glob("*.png")), "the README plots the run"
    rows = [r for r in summarize(read_tidy_csv(csv_path)) if r["metric"] == "separable" and r["subset"] == "all"]
    later = [r for r in rows if int(r["layer"]) >= 2]
    assert later and all(r["target_mean"] - r["control_mean"] >= 20.0 and r["p_value"] < 0.01 for r in later), later
    (run,) = json.loads((folder / "manifest.json").read_text())["runs"].values()
    assert run["notes"] == []
