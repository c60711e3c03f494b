"""The tutorial notebook ``docs/tutorial.ipynb`` runs, cell by cell, on the fixtures it makes.

Its code cells run in order with ``exec`` in one namespace, in a fresh working folder, as a
kernel would run them top to bottom: no Jupyter kernel (nbclient and ipykernel are not
dependencies of vlprobe or its tests), so the notebook uses no IPython magics and shows values as
a cell's last expression only. The notebook is read as the JSON file it is (nbformat 4, checked
here), and is stored without outputs so that it cannot show numbers the code no longer gives.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from tests.docs_text import DOCS

NOTEBOOK = DOCS / "tutorial.ipynb"


def _notebook() -> dict[str, Any]:
    notebook: dict[str, Any] = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    return notebook


def _code_cells(notebook: dict[str, Any]) -> list[tuple[str, str]]:
    return [(cell.get("id", str(k)), "".join(cell["source"]))
            for k, cell in enumerate(notebook["cells"]) if cell["cell_type"] == "code"]


def test_notebook_is_clean_nbformat_4() -> None:
    """nbformat 4 with ids, a Python kernel, no stored outputs or counts, no IPython-only syntax."""
    notebook = _notebook()
    assert notebook["nbformat"] == 4 and notebook["nbformat_minor"] >= 5
    assert notebook["metadata"]["kernelspec"]["language"] == "python"
    cells = notebook["cells"]
    assert cells[0]["cell_type"] == "markdown" and "".join(cells[0]["source"]).startswith("# ")
    ids = [cell["id"] for cell in cells]
    assert len(set(ids)) == len(ids)
    for cell in cells:
        assert cell["cell_type"] in {"markdown", "code"}
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None, f"{cell['id']}: stored output"
    for cell_id, source in _code_cells(notebook):
        for line in source.splitlines():
            assert not line.lstrip().startswith(("%", "!")), f"{cell_id}: IPython-only line {line!r}"
        compile(source, cell_id, "exec")


@pytest.mark.slow
def test_notebook_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every code cell runs; the tables, the figure and the report it shows are there and sane."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    namespace: dict[str, Any] = {"__name__": "__main__"}
    cells = _code_cells(_notebook())
    assert len(cells) >= 6
    for cell_id, source in cells:
        exec(compile(source, f"{NOTEBOOK.name}:{cell_id}", "exec"), namespace)  # the notebook's own code, as a kernel runs it

    work = tmp_path / "tutorial"
    # the cache: 16 items x 2 images; texts: 32 captions and their variants
    assert namespace["scores"].shape[0] == 32 and namespace["scores"].shape[1] > 32
    # the notebook's own check (its by-hand scores equal the experiment's) ran; the table has them
    by_subset = namespace["by_subset"]
    assert {"text", "image", "group"} <= set(by_subset.columns)
    for metric, value in namespace["by_hand"].items():
        assert by_subset.loc["all", metric] == pytest.approx(value, abs=1e-6)
    # separability: every stored text layer, shares in %, a p-value per layer
    separable = namespace["separable"]
    assert list(separable.index) == [0, 1, 2, 3]
    assert {"target", "control", "selectivity", "p_value"} <= set(separable.columns)
    assert ((separable[["target", "control"]] >= 0) & (separable[["target", "control"]] <= 100)).all().all()
    # selectivity is target minus the mean control (float rounding aside)
    for layer, row in separable.iterrows():
        assert row["selectivity"] == pytest.approx(row["target"] - row["control"], abs=1e-6), layer
    assert all(0 < p <= 1 for p in separable["p_value"] if not math.isnan(p))
    assert (work / "separability.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = (work / "report.html").read_text(encoding="utf-8")
    assert "separability" in html and "winoground-scores" in html
