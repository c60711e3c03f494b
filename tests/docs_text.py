"""The project's documentation as tests read it: README.md and the pages under docs/."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def documentation_files() -> list[Path]:
    """README.md, then every Markdown page under docs/ (sorted)."""
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def doc_page(name: str) -> str:
    """The text of one page, ``name`` relative to docs/ (``"commands.md"``)."""
    return (DOCS / name).read_text(encoding="utf-8")
