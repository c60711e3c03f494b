"""The adapter contract's per-model facts: a :class:`Case` per registered adapter.

Each model's own test module declares ``CONTRACT = Case(...)``; ``collect_cases`` finds them all,
so a new adapter adds its case beside its own tests, not in a central list.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Case", "collect_cases", "kinds"]


def kinds(first: str, *rest: tuple[str, int]) -> tuple[str, ...]:
    return (first, *(k for kind, n in rest for k in [kind] * n))


@dataclass(frozen=True)
class Case:
    """What the contract needs to know about one adapter.

    Attributes
    ----------
    name : str
        Registered model name (its fixture writer has the same name).
    kind : {"dual", "cross"}
    image_input : {"pixels", "regions"}
    streams : dict
        Golden streams: name -> (modality, layer kinds, cls rule).
    embeddings : dict
        Stream -> (attribute path of the module whose output is layer 0, what its rows are:
        ``"text"`` tokens, ``"image"`` tokens/regions, or, for a view of a joint sequence whose
        parts sit at per-pair positions (generative models, ``PairOutput.positions``), ``"caption"``:
        the module's output over the joint sequence at the caption's positions, ``"image_features"``:
        the module's output per image (``(N, n, H)``, or ``(sum n_i, H)`` split image by image), the
        features the image positions take).
    checkpoint : str
        The file inside the fixture folder to pass as ``checkpoint`` ("" = the folder).
    wrong : str
        Another fixture the adapter must refuse (a different model type).
    feature_dim : int
        Region-feature width (region models).
    """

    name: str
    kind: str
    image_input: str
    streams: dict[str, tuple[str, tuple[str, ...], str]]
    embeddings: dict[str, tuple[str, str]]
    checkpoint: str = ""
    wrong: str = "clip"
    feature_dim: int = 0
    weights: tuple[str, ...] = field(default=("model.safetensors",))


def collect_cases() -> dict[str, Case]:
    """Every ``CONTRACT`` case declared by a test module under ``tests/extract/models/``, by name."""
    here = Path(__file__).parent
    cases: dict[str, Case] = {}
    for path in sorted(here.rglob("test_*.py")):
        module = ".".join(("tests", "extract", "models", *path.relative_to(here).with_suffix("").parts))
        case = getattr(importlib.import_module(module), "CONTRACT", None)
        if case is not None:
            assert case.name not in cases, f"two contract cases for {case.name!r}"
            cases[case.name] = case
    return cases
