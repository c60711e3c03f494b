"""The adapter contract's per-model facts: a :class:`Case` per registered adapter.

Each model's own test module declares ``CONTRACT = Case(...)``; ``collect_cases`` finds them all,
so a new adapter adds its case beside its own tests, not in a central list.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Case", "collect_cases", "kinds"]


def kinds(first: str, *rest: tuple[str, int]) -> tuple[str, ...]:
    return (first, *(k for kind, n in rest for k in [kind] * n))


@dataclass(frozen=True)
class Case:
    """What the contract needs to know about one adapter.

    Attributes
    ----------
    name : str
        The case's name: the registered model name, or for a model with several checkpoint
        families (OpenCLIP) ``<model>-<family>``.
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
    model : str
        The registered model ("" = ``name``); its fixture writer has that name.
    fixture_options : dict
        Keyword arguments of the fixture writer (OpenCLIP's ``arch``).
    load_options : dict
        Load options the checkpoint needs (12-in-1's ``task_id``).
    text_prefix, image_prefix : int
        Positions the model puts before the caption's tokens or the regions that are not in
        their masks (12-in-1's task token after [CLS] counts here as one more valid token;
        ViLBERT's global image region before the regions).
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
    model: str = ""
    fixture_options: dict[str, Any] = field(default_factory=dict)
    load_options: dict[str, Any] = field(default_factory=dict)
    text_prefix: int = 0
    image_prefix: int = 0

    @property
    def registered(self) -> str:
        """The registered model the case loads."""
        return self.model or self.name


def collect_cases() -> dict[str, Case]:
    """Every ``CONTRACT`` case (or list of ``CONTRACTS``, one per checkpoint family) declared by
    a test module under ``tests/extract/models/``, by name."""
    here = Path(__file__).parent
    cases: dict[str, Case] = {}
    for path in sorted(here.rglob("test_*.py")):
        module = importlib.import_module(".".join(("tests", "extract", "models", *path.relative_to(here).with_suffix("").parts)))
        one = getattr(module, "CONTRACT", None)
        for case in [*([one] if one is not None else []), *getattr(module, "CONTRACTS", ())]:
            assert case.name not in cases, f"two contract cases for {case.name!r}"
            cases[case.name] = case
    return cases
