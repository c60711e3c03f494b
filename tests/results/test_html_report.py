"""probe report: one self-contained page (checked with an HTML parser, and in headless chromium where installed)."""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from vlprobe.cli import app
from vlprobe.results.html_report import build_report, write_report


class Page(HTMLParser):
    """What the tests look at: headings, images, tables, links, and every external reference."""

    def __init__(self) -> None:
        super().__init__()
        self.headings: list[tuple[str, str]] = []
        self.images: list[str] = []
        self.tables = 0
        self.cells: list[str] = []
        self.external: list[str] = []
        self.scripts = 0
        self._in: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag in ("h1", "h2", "h3", "h4", "td", "th"):
            self._in, self._text = tag, []
        if tag == "img":
            self.images.append(a.get("src") or "")
        if tag == "table":
            self.tables += 1
        if tag == "script":
            self.scripts += 1
        for key in ("src", "href"):
            value = a.get(key)
            if value and not (value.startswith("data:") or value.startswith("#")):
                self.external.append(value)
        if tag == "link":
            self.external.append(a.get("href") or "link")

    def handle_data(self, data: str) -> None:
        if self._in:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == self._in:
            text = "".join(self._text).strip()
            if tag in ("td", "th"):
                self.cells.append(text)
            else:
                self.headings.append((tag, text))
            self._in = None


def parse(text: str) -> Page:
    page = Page()
    page.feed(text)
    page.close()
    return page


@pytest.fixture(scope="module")
def report_html(every_experiment: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_report(every_experiment, tmp_path_factory.mktemp("report") / "report.html")


def test_the_page_holds_every_experiment_its_figures_tables_and_provenance(every_experiment: Path, report_html: Path) -> None:
    page = parse(report_html.read_text(encoding="utf-8"))
    experiments = sorted(d.name for d in every_experiment.iterdir() if (d / "manifest.json").is_file())
    # the paper's experiments first, in the paper's order; then the others by name
    paper = ["winoground-scores", "recall", "task-adaptation", "separability", "variant-similarity", "variant-probe"]
    expected = [e for e in paper if e in experiments] + [e for e in experiments if e not in paper]
    assert [t for h, t in page.headings if h == "h2"] == expected
    runs = [t for h, t in page.headings if h == "h3"]
    assert len(runs) == len(experiments)  # one run each
    assert len(page.images) == len(experiments)  # every experiment here has a chart
    assert page.external == [] and page.scripts == 0  # self-contained
    from PIL import Image

    for src in page.images:
        assert src.startswith("data:image/png;base64,")
        with Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1]))) as im:
            assert im.format == "PNG" and im.size[0] > 200
    h4 = [t for h, t in page.headings if h == "h4"]
    assert h4.count("Provenance") == len(experiments) and h4.count("Settings") == len(experiments)
    assert "Per layer (subset all; means over seeds, 95% intervals over items)" in h4
    assert "Scores (95% intervals over items)" in h4
    # Task-adaptation's modes are its groups: named in the heading and in a subset column.
    assert "Per layer (text-score, image-score; means over seeds, 95% intervals over items)" in h4
    assert "image-score" in page.cells
    assert {"control 95% CI", "selectivity 95% CI", "p_value"} <= set(page.cells)  # header cells
    # An interval is one cell, "low – high".
    assert any(re.fullmatch(r"-?[\d.]+ – -?[\d.]+", c) for c in page.cells)
    assert any(t.startswith("Per tag") for t in h4)  # the session dataset carries tags
    manifest = json.loads((every_experiment / "separability" / "manifest.json").read_text())
    (entry,) = manifest["runs"].values()
    assert entry["git_revision"] in page.cells and entry["vlprobe_version"] in page.cells
    assert "cache computed on cpu" in page.cells
    assert page.tables >= 3 * len(experiments)


def test_markdown_has_the_same_sections_and_embedded_figures(every_experiment: Path, tmp_path: Path) -> None:
    text = build_report(every_experiment, "md")
    assert text.count("\n## ") == sum(1 for d in every_experiment.iterdir() if (d / "manifest.json").is_file())
    assert "](data:image/png;base64," in text and "| setting | value |" in text
    path = write_report(every_experiment, tmp_path / "r.md")
    assert path.read_text(encoding="utf-8").startswith("<!-- vlprobe-report -->")


def test_cli_report_replaces_its_own_page_only(every_experiment: Path, tmp_path: Path,
                                               one_error_line: Callable[..., str]) -> None:
    runner = CliRunner()
    out = tmp_path / "r.html"
    for _ in range(2):  # the second run replaces the page it wrote
        ok = runner.invoke(app, ["report", str(every_experiment), "--out", str(out)])
        assert ok.exit_code == 0, ok.output
    # drawing takes most of the time: a line per figure, numbered, on stderr (none with --quiet)
    drawing = [line for line in ok.stderr.splitlines() if line.startswith("report: drawing ")]
    assert drawing and drawing[-1].endswith(f"({len(drawing)}/{len(drawing)})"), ok.stderr
    quiet = runner.invoke(app, ["report", str(every_experiment), "--out", str(out), "--quiet"])
    assert quiet.exit_code == 0 and quiet.stderr == "", quiet.stderr
    md = runner.invoke(app, ["report", str(every_experiment), "--out", str(tmp_path / "r.txt"), "--format", "md"])
    assert md.exit_code == 0 and (tmp_path / "r.txt").read_text().removeprefix("<!-- vlprobe-report -->\n\n").startswith("# ")
    foreign = tmp_path / "mine.html"
    foreign.write_text("<html>mine</html>")
    one_error_line(runner.invoke(app, ["report", str(every_experiment), "--out", str(foreign)]), "not written by vlprobe")
    assert foreign.read_text() == "<html>mine</html>"
    one_error_line(runner.invoke(app, ["report", str(tmp_path), "--out", str(tmp_path / "x.html")]), "holds no vlprobe results")
    one_error_line(runner.invoke(app, ["report", str(every_experiment), "--out", str(tmp_path / "x.html"), "--format", "pdf"]),
                   "format")


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def test_the_page_renders_in_headless_chromium(report_html: Path, tmp_path: Path) -> None:
    browser = _chromium()
    if browser is None:
        pytest.skip("chromium is not installed (Debian: apt-get install --no-install-recommends chromium)")
    shot = tmp_path / "shot.png"
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
             f"--screenshot={shot}", "--window-size=1280,2000", report_html.resolve().as_uri()],
            check=True, capture_output=True, timeout=180,
        )
    from PIL import Image, ImageStat

    with Image.open(shot) as im:
        assert im.size == (1280, 2000)
        grey = im.convert("L")
        # Not blank: a page of text, tables and figures has many dark pixels and spread-out shades.
        dark = sum(grey.histogram()[:128]) / (1280 * 2000)
        assert dark > 0.01, dark
        assert ImageStat.Stat(grey).stddev[0] > 20
        assert len(im.convert("RGB").getcolors(1 << 20) or []) > 50  # the figures' colours, not just black on white


def test_numbers_in_report_tables_share_one_format() -> None:
    """Two decimals everywhere (no bare 0 beside 100.00, no 0.8333 beside 3.33); below 0.005 two
    significant digits, so a small p-value still reads; NaN as a dash."""
    from vlprobe.results.html_report import _fmt

    got = [_fmt(v) for v in (0.0, 1e-15, 100.0, 3.3333, 0.83333, 0.32241, -6.6667, 0.0001, 0.00123, float("nan"), "2.5")]
    assert got == ["0.00", "0.00", "100.00", "3.33", "0.83", "0.32", "-6.67", "0.0001", "0.0012", "–", "2.50"]
    assert _fmt(40) == "40" and _fmt("40") == "40"  # counts stay integers


def test_a_comparison_names_its_two_runs() -> None:
    from vlprobe.results.html_report import _compare_side

    manifest = {"config": {"a": "r/winoground-scores/clip.csv", "b": "s/x.csv"},
                "inputs": {"a": {"experiment": "winoground-scores", "run": "clip", "path": "r/winoground-scores/clip.scores.jsonl"}}}
    assert _compare_side(manifest, "a") == "a = winoground-scores run clip (r/winoground-scores/clip.scores.jsonl)"
    assert _compare_side(manifest, "b") == "b = s/x.csv"  # nothing more recorded: the file given


def test_settings_left_to_their_default_say_what_the_run_used() -> None:
    from vlprobe.results.html_report import _used

    manifest = {"streams": {"lang": {"pooling": "cls"}, "vision": {"pooling": "mean"}}}
    assert _used("streams", None, manifest) == "default (lang, vision)"
    assert _used("pooling", None, manifest) == "default (lang: cls, vision: mean)"
    assert _used("pooling", "mean", manifest) == "mean" and _used("split_file", None, {}) == "default"


def test_value_columns_name_their_unit(report_html: Path) -> None:
    """The unit of the tidy CSV's ``unit`` column in the header (``value (%)``)
    where a table's metrics share one; a ``unit`` column where they differ."""
    page = parse(report_html.read_text(encoding="utf-8"))
    assert "value (%)" in page.cells  # Winoground, SugarCrepe, VALSE scores: all percentages
    assert "value" not in page.cells or "unit" in page.cells
    assert "unit" in page.cells and "2/‖w‖, scaled states" in page.cells  # separability: % beside a margin
    assert "target (%)" in page.cells and "selectivity (%)" in page.cells  # a layer table of percentages
    assert "control 95% CI" in page.cells  # intervals sit beside their value, in its unit


# -- a page a reader can read: its title, width, figures and notes ------------------------------------


def test_the_title_names_the_runs_and_their_dataset_not_the_folder(every_experiment: Path, report_html: Path,
                                                                   tmp_path: Path) -> None:
    page = parse(report_html.read_text(encoding="utf-8"))
    title = next(t for h, t in page.headings if h == "h1")
    assert title.startswith("vlprobe report: ") and " on winoground" in title, title
    assert title != f"vlprobe results: {every_experiment.name}"
    assert f"<title>{title}</title>" in report_html.read_text(encoding="utf-8")
    got = CliRunner().invoke(app, ["report", str(every_experiment / "separability"), "--out", str(tmp_path / "r.md"),
                                   "--title", "Separability of the planted cache", "--quiet"])
    assert got.exit_code == 0, got.output
    assert (tmp_path / "r.md").read_text(encoding="utf-8").split("\n")[2] == "# Separability of the planted cache"


def test_figures_are_shown_at_about_half_the_page_and_drawn_sharp(report_html: Path) -> None:
    from PIL import Image

    widths = re.findall(r'<img alt="[^"]*" width="(\d+)" src="data:image/png;base64,([^"]+)"', report_html.read_text())
    assert widths
    for width, data in widths:
        with Image.open(io.BytesIO(base64.b64decode(data))) as im:
            assert 600 <= int(width) <= 1200 and im.size[0] >= 2 * int(width) - 2, (width, im.size)


def _measured(page: Path, browser: str, tmp_path: Path) -> dict[str, Any]:
    """The page laid out by chromium in a 1280 px window: the document's width and how far the
    widest table runs past its box (a copy of the page with a script that writes both down)."""
    probe = tmp_path / "measured.html"
    probe.write_text(page.read_text(encoding="utf-8") + (
        "<script>var over = 0, which = ''; document.querySelectorAll('table').forEach(function (t) {"
        " var by = t.scrollWidth - t.parentElement.clientWidth; if (by > over) {"
        " over = by; which = t.rows[0].innerText.replace(/\\s+/g, ' '); } });"
        " document.body.setAttribute('data-measured', document.documentElement.scrollWidth + ' ' + over);"
        " document.body.setAttribute('data-widest', which);</script>"),
        encoding="utf-8")
    with tempfile.TemporaryDirectory() as profile:
        dom = subprocess.run(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
             "--window-size=1280,2000", "--dump-dom", probe.resolve().as_uri()],
            check=True, capture_output=True, text=True, timeout=180,
        ).stdout
    page_width, over = map(int, re.search(r'data-measured="(\d+) (-?\d+)"', dom).groups())
    return {"page": page_width, "over": over, "widest": re.search(r'data-widest="([^"]*)"', dom).group(1)}


def test_every_table_fits_a_1280_px_window(report_html: Path, tmp_path: Path) -> None:
    """Columns that hold one value in every row are said once above the table; what is left fits
    the page (at most 1200 px), so neither the page nor a table scrolls sideways."""
    browser = _chromium()
    if browser is None:
        pytest.skip("chromium is not installed (Debian: apt-get install --no-install-recommends chromium)")
    got = _measured(report_html, browser, tmp_path)
    assert got["page"] <= 1280 and got["over"] <= 0, got


def test_a_column_with_one_value_is_said_once_above_its_table() -> None:
    from vlprobe.results.html_report import _table

    blocks = _table(("stream", "layer", "pooling", "value"), [("text", 0, "cls", 1.0), ("text", 1, "cls", 2.0)], keys=3)
    assert [b.kind for b in blocks] == ["p", "table"]
    assert blocks[0].text == "stream: text; pooling: cls"
    assert blocks[1].headers == ("layer", "value") and blocks[1].rows == (("0", "1.00"), ("1", "2.00"))
    (alone,) = _table(("stream", "value"), [("text", 1.0)], keys=1)  # one row: nothing to shorten
    assert alone.headers == ("stream", "value")


def test_a_runs_note_is_on_the_page(tmp_path: Path) -> None:
    """A run's manifest notes (separability's "no case is separable at any layer") are set apart on
    the page above its figure, in HTML and Markdown."""
    from vlprobe.runs.writing import write_results

    note = "no case is separable at any layer of stream text (median state norm 0.0187 after scaling 'divide100', C=100)"
    rows = [{"experiment": "separability", "model": "m", "stream": "text", "layer": layer, "pooling": "cls",
             "probe": "linear-separability", "task": task, "seed": 0 if task == "control" else "", "split": "train",
             "subset": "all", "metric": "separable", "value": 0.0, "n": 4}
            for layer in (0, 1) for task in ("target", "control")]
    write_results(tmp_path / "results", "separability", "m", rows,
                  {"experiment": "separability", "experiment_version": 4, "config": {"seeds": 1}, "notes": [note],
                   "inputs": {"cache": {"path": "/nonexistent.h5", "dataset": "winoground"}}})
    html = build_report(tmp_path / "results")
    assert f'<p class="warn">{note.replace(chr(39), "&#39;")}</p>' in html
    assert html.index('class="warn"') < html.index("<img")
    assert f"> **Note:** {note}" in build_report(tmp_path / "results", "md")
