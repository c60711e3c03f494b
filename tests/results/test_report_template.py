"""The report's layout lives in its Jinja2 templates; the module only says what the page holds.

The page as a whole is tested in ``test_html_report.py``; here: escaping, the two formats from one
list of blocks, and the templates shipped with the package.
"""

from __future__ import annotations

import ast
from html.parser import HTMLParser
from pathlib import Path

import pytest

from vlprobe.results import html_report
from vlprobe.results.html_report import _Block, _render

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = Path(html_report.__file__).with_name("templates")
NASTY = "<script>alert('x') & \"y\"</script>"


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.data: list[str] = []
        self.attrs: list[tuple[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs += attrs

    def handle_data(self, data: str) -> None:
        self.data.append(data)


BLOCKS = [
    _Block("h", 1, "vlprobe results: demo"),
    _Block("p", text=NASTY),
    _Block("h", 2, "separability"),
    _Block("h", 3, f"run {NASTY}"),
    _Block("img", text=NASTY, data=b"\x89PNG\r\n\x1a\n"),
    _Block("table", headers=("subset", "value"), rows=(("all", "0.25"), (NASTY, "–"), ("a|b", "1"))),
    _Block("details", text="Package versions", headers=("package", "version"), rows=(("numpy", "2.0"),)),
]


def test_text_is_escaped_and_reads_back_unchanged() -> None:
    """Every text of the blocks (headings, notes, alt text, cells) is escaped: no tag but the
    layout's, and the parsed text is the text given."""
    page = _render("report.html.jinja", BLOCKS, "t")
    parser = _Text()
    parser.feed(page)
    assert "script" not in parser.tags
    assert parser.data.count(NASTY) == 2  # the note and the cell (the heading: below)
    assert any(d == f"run {NASTY}" for d in parser.data)
    assert ("alt", NASTY) in parser.attrs
    assert ("id", "separability") in parser.attrs and ("href", "#separability") in parser.attrs
    assert page.startswith("<!DOCTYPE html>\n") and page.endswith("</html>\n")


def test_markdown_and_html_come_from_the_same_blocks() -> None:
    md = _render("report.md.jinja", BLOCKS, "t")
    assert md.startswith("# vlprobe results: demo\n\n") and md.endswith("\n") and not md.endswith("\n\n")
    assert "\n## separability\n" in md and "![" in md and "](data:image/png;base64,iVBORw0KGgo=)" in md
    assert "| subset | value |\n|---|---|\n| all | 0.25 |\n" in md
    assert "| a\\|b | 1 |" in md  # a pipe in a cell is escaped
    assert "**Package versions**\n\n| package | version |" in md


def test_the_module_writes_no_markup_and_the_templates_ship() -> None:
    """The layout is only in the templates: the module's string literals hold no tag or style, and
    the package data names the templates (a wheel carries them)."""
    tree = ast.parse(Path(html_report.__file__).read_text(encoding="utf-8"))
    literals = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    markup = [s for s in literals if any(t in s for t in ("<table", "<td", "<h1", "<style", "<img", "{ font"))]
    assert markup == []
    assert sorted(p.name for p in TEMPLATES.glob("*.jinja")) == ["report.html.jinja", "report.md.jinja"]
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert '[tool.setuptools.package-data]\n"vlprobe.results" = ["templates/*.jinja"]' in pyproject


def test_an_unknown_name_in_a_template_is_an_error() -> None:
    """StrictUndefined: a template that names something the module does not pass fails loudly."""
    import jinja2

    with pytest.raises(jinja2.UndefinedError):
        html_report._templates().from_string("{{ nothing_passed }}").render()


def test_long_tables_are_collapsed_on_the_page_and_open_in_markdown() -> None:
    long = _Block("table", headers=("layer", "value (%)"),
                  rows=tuple((str(k), "50.00") for k in range(html_report.COLLAPSE_ROWS + 1)))
    short = _Block("table", headers=("subset", "value (%)"),
                   rows=tuple(("s", "1.00") for _ in range(html_report.COLLAPSE_ROWS)))
    page = _render("report.html.jinja", [short, long], "t")
    parser = _Text()
    parser.feed(page)
    assert parser.tags.count("table") == 2 and parser.tags.count("details") == 1
    assert page.index("<details") > page.index("subset")  # the short one stays open, the long one folds
    assert f"<summary>Table of {html_report.COLLAPSE_ROWS + 1} rows</summary><div class=\"wide\"><table>" in page
    md = _render("report.md.jinja", [short, long], "t")
    assert "details" not in md and md.count("| 50.00 |") == html_report.COLLAPSE_ROWS + 1
