"""Reading back the results of an experiment run in tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def only_run(manifest_path: Path, model: str | None = None) -> dict[str, Any]:
    """The manifest entry of the one run (of ``model``) in ``manifest.json``.

    Runs are named by the model and the settings they changed (``planted@seeds=2``); tests that
    write one run per folder read it without spelling that name.
    """
    runs = json.loads(Path(manifest_path).read_text(encoding="utf-8"))["runs"]
    found = [r for r in runs.values() if model is None or r.get("model", r.get("run")) == model]
    assert len(found) == 1, sorted(runs)
    return found[0]
