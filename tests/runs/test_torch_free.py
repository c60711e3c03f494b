"""``probe run`` of an experiment that fits no neural network never imports torch.

torch costs about a second of CPU and 270 MB at start-up; the cache schema once imported it
(through the adapter contract) and the run framework asked it for its thread count. Checked in a
fresh interpreter: the test process itself has torch loaded.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from vlprobe.fixtures.caches import planted_cache

_RUN = """
import json, sys
from vlprobe.cli.app import main
for argv in json.loads(sys.argv[1]):
    sys.argv = ["probe", *argv]
    try:
        main()
    except SystemExit as exc:
        if exc.code:
            raise
print(json.dumps(sorted(m for m in ("torch", "transformers") if m in sys.modules)))
"""


def _loaded_after(runs: list[list[str]]) -> list[str]:
    done = subprocess.run([sys.executable, "-c", _RUN, json.dumps(runs)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_cache_experiments_never_import_torch(reference_cache: Path, tmp_path: Path) -> None:
    planted = planted_cache(tmp_path / "planted.h5", n_items=6, n_variants=3, n_layers=3, hidden=6, model="clip")
    out = str(tmp_path / "out")
    runs = [["run", "separability", "--cache", str(planted), "--out", out, "--quiet"],
            ["run", "separability", "--cache", str(reference_cache), "--out", out, "--quiet", "--seeds", "1"],
            *[["run", name, "--cache", str(reference_cache), "--out", out, "--quiet"]
              for name in ("recall", "winoground-scores", "variant-similarity")]]
    assert _loaded_after(runs) == []
    manifest = json.loads((tmp_path / "out" / "separability" / "manifest.json").read_text(encoding="utf-8"))
    assert {r["cpu_threads"] for r in manifest["runs"].values()} == {None}  # torch never loaded: no count
