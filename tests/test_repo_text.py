"""The repository's own text stands alone: a clone has only what is in it.

Code, docstrings, messages, the README, the docs and CONTRIBUTING.md never point at documents outside the
repository (the team's notes beside the clone) or at this project's issue tracker by number.
References to a third-party project's issue that explain a workaround are fine when they name the
project (``transformers issue #7266``, ``RAIVNLab/sugar-crepe#3``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Files whose text is the project's own record.
SCANNED = ("src/**/*.py", "tests/**/*.py", "benchmarks/**/*.py", "README.md", "CONTRIBUTING.md",
           "docs/**/*.md", "docs/**/*.ipynb", "mkdocs.yml", "Makefile", "pyproject.toml", ".ci/run")
#: Documents outside the repository.
OUTSIDE = re.compile(r"\.\./shared|\b(?:DESIGN|REFERENCE|TEAM)\.md\b")
#: References to an issue by number, and the architecture steps' ``N/7`` labels.
TRACKER = re.compile(
    r"\b(?:issues?|tickets?|bugs?|PRs?|pull requests?)\s*#?\s*\d+\b"
    r"|(?<![\w&/#])#\d+\b"
    r"|\barch(?:itecture)? (?:step )?\d+/\d+\b",
    re.IGNORECASE,
)
#: Third-party projects whose issues may be cited (the name stands just before the reference).
UPSTREAM = ("transformers", "pytorch", "torch", "numpy", "scikit-learn", "sklearn", "h5py", "spacy",
            "nltk", "typer", "click", "tokenizers", "huggingface_hub", "safetensors", "pillow",
            "matplotlib", "mypy", "hypothesis", "pyarrow", "scipy", "sugar-crepe", "open_clip")


def _files() -> list[Path]:
    here = Path(__file__).resolve()
    found = {p for pattern in SCANNED for p in ROOT.glob(pattern) if p.is_file()}
    return sorted(p for p in found if p != here)


def _upstream(text: str, start: int) -> bool:
    before = " ".join(text[max(0, start - 60):start].split()).lower()
    return any(re.search(rf"\b{re.escape(name)}\b[\w\s'’-]{{0,20}}$", before) for name in UPSTREAM)


def _hits(path: Path, root: Path = ROOT) -> list[str]:
    text = path.read_text(encoding="utf-8")
    out = []
    for pattern, upstream_ok in ((OUTSIDE, False), (TRACKER, True)):
        for m in pattern.finditer(text):
            if upstream_ok and _upstream(text, m.start()):
                continue
            line = text.count("\n", 0, m.start()) + 1
            out.append(f"{path.relative_to(root)}:{line}: {m.group(0)!r}")
    return out


def test_the_scan_sees_the_sources() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in _files()}
    assert "README.md" in names
    assert "docs/commands.md" in names
    assert "src/vlprobe/registry.py" in names
    assert sum(n.startswith("src/") for n in names) > 50


def test_no_references_outside_the_repository() -> None:
    hits = [h for p in _files() for h in _hits(p)]
    assert hits == [], "text that points outside the repository or at the tracker:\n" + "\n".join(hits)


@pytest.mark.parametrize(
    ("text", "flagged"),
    [
        ("see ../shared/data for the files", True),
        ("as DESIGN.md says", True),
        ("facts in REFERENCE.md", True),
        ("fixed in issue #12", True),
        ("see issue 14", True),
        ("(#15)", True),
        ("done in arch 3/7", True),
        ("transformers issue #7266", False),
        ("empirically index 1 ranks true pairs higher, transformers\nissue #7266", False),
        ("RAIVNLab/sugar-crepe#3", False),
        ('COLORS = {"target": "#1f77b4"}', False),
        ("36 boxes x 2048-d", False),
    ],
)
def test_the_patterns(tmp_path: Path, text: str, flagged: bool) -> None:
    p = tmp_path / "x.py"
    p.write_text(text, encoding="utf-8")
    hits = _hits(p, tmp_path)
    assert bool(hits) is flagged, hits


#: A repository path in backticks; ``<name>`` parts are what a contributor creates.
PATH = re.compile(r"`((?:src|tests|benchmarks|requirements|docs|\.ci)/[^`\s]*|[\w-]+\.(?:toml|md)|Makefile)`")


def _missing(named: str, root: Path) -> bool:
    if "<" not in named:
        return not (root / named).exists()
    prefix = named.split("<", 1)[0]
    folder = root / prefix if prefix.endswith("/") else (root / prefix).parent
    return not folder.is_dir()


def test_contributing_names_paths_that_exist() -> None:
    """Every file CONTRIBUTING.md names exists (for a file to create, the folder it goes in)."""
    named = PATH.findall((ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8"))
    assert len(named) > 20
    assert [n for n in named if _missing(n, ROOT)] == []


@pytest.mark.parametrize(
    ("named", "missing"),
    [("src/vlprobe/registry.py", False), ("src/vlprobe/nothing.py", True),
     ("src/vlprobe/extract/models/<module>.py", False), ("tests/extract/models/test_<module>.py", False),
     ("src/vlprobe/nowhere/<module>.py", True)],
)
def test_the_path_check(named: str, missing: bool) -> None:
    assert _missing(named, ROOT) is missing
