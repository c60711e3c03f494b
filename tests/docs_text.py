"""The project's documentation as tests read it: README.md and the pages under docs/.

A code block is marked by an HTML comment on the line just before its fence (invisible on GitHub
and on the built site):

- ``<!-- runnable -->`` or ``<!-- runnable: fixtures=clip-cache,regions -->``: the documentation
  test runs it, on the named fixtures (``tests/test_docs_blocks.py``);
- ``<!-- not-runnable: REASON -->``: it needs what a test cannot have (real checkpoints or data,
  a GPU, minutes of training, a placeholder to fill in); the reason says which.

Command blocks (``bash``, ``sh``, ``shell``, ``console``, ``python``, or an untyped block with a
command line in it) must carry one of the two; data blocks (``json``, ``toml``, a file layout) need none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

#: Fence info strings of command blocks.
COMMAND_LANGS = frozenset({"bash", "sh", "shell", "console", "python", "py"})
#: The first word of a line that makes an untyped block a command block.
COMMAND_WORDS = ("probe ", "make ", "python ", "pip ", "export ")
MARKER = re.compile(r"^<!--\s*(runnable|not-runnable)\s*(?::\s*(.*?))?\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(`{3,})\s*([\w+-]*)[^`]*$")


def documentation_files() -> list[Path]:
    """README.md, then every Markdown page under docs/ (sorted)."""
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def doc_page(name: str) -> str:
    """The text of one page, ``name`` relative to docs/ (``"commands.md"``)."""
    return (DOCS / name).read_text(encoding="utf-8")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page.

    ``marker`` is ``"runnable"``, ``"not-runnable"`` or ``None``; ``note`` the text after the
    marker's colon (a not-runnable block's reason; a runnable block's ``fixtures=a,b``).
    """

    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    marker: str | None
    note: str = ""
    fixtures: tuple[str, ...] = field(default=())

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT).as_posix()}:{self.line}"

    @property
    def is_command(self) -> bool:
        if self.lang in COMMAND_LANGS:
            return True
        return not self.lang and any(ln.startswith(COMMAND_WORDS) for ln in self.text.splitlines())


def blocks_of(path: Path, text: str | None = None) -> list[Block]:
    """Every fenced block of a Markdown file, with the marker on the line before it."""
    lines = (path.read_text(encoding="utf-8") if text is None else text).splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, ticks, lang = m.group(1), m.group(2), m.group(3).lower()
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(ticks):
            j += 1
        body = "\n".join(ln[len(indent):] if ln.startswith(indent) else ln for ln in lines[i + 1:j]) + "\n"
        k = i - 1
        marker = note = None
        if k >= 0 and (mm := MARKER.match(lines[k].strip())):
            marker, note = mm.group(1), (mm.group(2) or "")
        fixtures: tuple[str, ...] = ()
        if marker == "runnable" and note:
            key, _, value = note.partition("=")
            if key.strip() != "fixtures":
                raise ValueError(f"{path}:{i + 1}: a runnable marker takes only fixtures=..., got {note!r}")
            fixtures = tuple(v.strip() for v in value.split(",") if v.strip())
        out.append(Block(path, i + 1, lang, body, marker, note or "", fixtures))
        i = j + 1
    return out


def command_blocks() -> list[Block]:
    """The command blocks of the README and the docs, in page order."""
    return [b for path in documentation_files() for b in blocks_of(path) if b.is_command]
