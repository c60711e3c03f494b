"""The package's import structure: every module imports on its own, there are no import cycles
(function-local imports included), and the layers only look downwards.

The static scan reads every ``import`` statement of every module, wherever it stands: a
function-local import that dodges a cycle at import time is still a cycle of the design.
"""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import vlprobe

SRC = Path(vlprobe.__file__).resolve().parent
#: Top-level modules and packages every layer may use; they import nothing of vlprobe but each
#: other (a base package's modules: each other and the base modules).
BASE_PACKAGES = {"vlprobe.io"}
BASE_MODULES = {"vlprobe", "vlprobe.registry", "vlprobe.layers", "vlprobe.provenance",
                "vlprobe.devices", "vlprobe.validation", "vlprobe.progress", "vlprobe.shards"}
#: subpackage -> subpackages it must never import (anywhere in a module, function-local too).
FORBIDDEN = {
    "data": {"extract", "probes", "augment", "stats", "runs", "experiments", "results", "launch", "fixtures", "cli"},
    "extract": {"probes", "augment", "stats", "runs", "experiments", "results", "launch", "fixtures", "cli"},
    "probes": {"data", "extract", "augment", "stats", "runs", "experiments", "results", "launch", "fixtures",
               "cli"},
    "augment": {"probes", "stats", "runs", "experiments", "results", "launch", "fixtures", "cli"},
    "stats": {"data", "extract", "probes", "augment", "runs", "experiments", "results", "launch", "fixtures",
              "cli"},
    "runs": {"experiments", "results", "launch", "fixtures", "cli"},
    "experiments": {"results", "launch", "fixtures", "cli"},
    "results": {"experiments", "launch", "fixtures", "cli"},
    "fixtures": {"stats", "runs", "experiments", "results", "launch", "cli"},
}
#: What augment may use from extract: the one Hugging Face loading helper.
AUGMENT_FROM_EXTRACT = {"vlprobe.extract.models.hf"}
DEVICE_HELPERS = {"resolve_device", "resolve_dtype", "DTYPES"}


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = ("vlprobe", *path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()
BASE = BASE_MODULES | {m for m in MODULES if any(m == p or m.startswith(p + ".") for p in BASE_PACKAGES)}


def _imports(name: str, path: Path) -> list[tuple[str, tuple[str, ...], int]]:
    """(imported vlprobe module, names taken from it, line) of every import statement in ``path``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(a.name, (), node.lineno) for a in node.names if a.name.split(".")[0] == "vlprobe"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            if module.split(".")[0] != "vlprobe":
                continue
            names = tuple(a.name for a in node.names)
            submodules = [f"{module}.{n}" for n in names if f"{module}.{n}" in MODULES]
            found += [(s, (), node.lineno) for s in submodules]
            if len(submodules) < len(names):
                found.append((module, tuple(n for n in names if f"{module}.{n}" not in MODULES), node.lineno))
    return found


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), in the import graph."""
    edges = {m: sorted({d for d, _, _ in deps if d in MODULES and d != m}) for m, deps in GRAPH.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in edges:
        if v not in index:
            visit(v)
    return out


def test_the_scan_sees_every_module() -> None:
    walked = {m.name for m in pkgutil.walk_packages(vlprobe.__path__, "vlprobe.")} | {"vlprobe"}
    assert walked == set(MODULES)
    # `probe extract` imports the runner inside the command: function-local imports are read.
    assert "vlprobe.extract.runner" in {d for d, _, _ in GRAPH["vlprobe.cli.extract"]}


def test_no_import_cycles() -> None:
    assert _cycles() == []


def test_base_packages_are_scanned() -> None:
    assert {"vlprobe.io", "vlprobe.io.atomic", "vlprobe.io.ownership", "vlprobe.io.locks"} <= BASE


def test_layers_only_import_downwards() -> None:
    bad = []
    for name, deps in GRAPH.items():
        parts = name.split(".")
        layer = parts[1] if len(parts) > 1 and name not in BASE else None
        for dep, _, line in deps:
            dep_layer = dep.split(".")[1] if len(dep.split(".")) > 1 else None
            if name in BASE and dep not in BASE:
                bad.append(f"{name}:{line} imports {dep} (a base module imports no subpackage)")
            if layer in FORBIDDEN and dep_layer in FORBIDDEN[layer]:
                bad.append(f"{name}:{line} imports {dep} ({layer} never imports {dep_layer})")
            if layer == "augment" and dep_layer == "extract" and dep not in AUGMENT_FROM_EXTRACT:
                bad.append(f"{name}:{line} imports {dep} (augment uses only {', '.join(AUGMENT_FROM_EXTRACT)})")
    assert bad == []


def test_device_helpers_come_from_devices() -> None:
    bad = [
        f"{name}:{line} imports {', '.join(sorted(DEVICE_HELPERS & set(names)))} from {dep}"
        for name, deps in GRAPH.items() for dep, names, line in deps
        if DEVICE_HELPERS & set(names) and dep != "vlprobe.devices"
    ]
    assert bad == []
    assert any(dep == "vlprobe.devices" for dep, _, _ in GRAPH["vlprobe.probes.ensemble"])
    assert any(dep == "vlprobe.devices" for dep, _, _ in GRAPH["vlprobe.augment.neural"])


_IMPORT_EACH_FIRST = """
import importlib, json, sys
failed = {}
for name in json.loads(sys.argv[1]):
    for loaded in [m for m in sys.modules if m == "vlprobe" or m.startswith("vlprobe.")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed[name] = f"{type(exc).__name__}: {exc}"
print(json.dumps(failed))
"""


def _importable() -> list[str]:
    return [m for m in MODULES if not m.endswith("__main__")]


def test_every_module_imports_first() -> None:
    """In one fresh interpreter, each module is imported with no other vlprobe module loaded
    (third-party packages stay loaded, so this is fast); any import-order cycle would fail."""
    result = subprocess.run(
        [sys.executable, "-c", _IMPORT_EACH_FIRST, json.dumps(_importable())],
        capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {}


@pytest.mark.slow
@pytest.mark.parametrize("name", _importable())
def test_module_imports_in_a_fresh_process(name: str) -> None:
    result = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr


def test_every_registered_target_resolves() -> None:
    """The registries' lazy ``"module:attr"`` targets name modules and attributes that exist (a
    stale path after a move would otherwise fail only when that name is used), and each is what
    its registry holds (``get`` checks it against the registry's ``expects``)."""
    from vlprobe import registry

    for reg in (registry.MODELS, registry.DATASETS, registry.STRATEGIES, registry.EXPERIMENTS):
        assert reg.expects is not None, reg.kind
        for name in reg.names():
            obj = reg.get(name)
            assert reg.expects.fits(obj), (reg.kind, name)
