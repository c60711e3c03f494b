"""Adapter for NL-Augmenter operations (``nlaugmenter:<module>.<Class>``).

NL-Augmenter is not on PyPI and its pins do not install on current Python; users who have it
from source pass its checkout with ``--nl-augmenter PATH`` (put on ``sys.path``) and name an
operation by dotted path, e.g.
``nlaugmenter:nlaugmenter.transformations.butter_fingers_perturbation.transformation.ButterFingersPerturbation``
or the short form ``nlaugmenter:butter_fingers_perturbation.ButterFingersPerturbation``. Any class
with NL-Augmenter's ``SentenceOperation`` interface works: ``generate(sentence) -> list[str]``.

Normalisation: a returned string becomes a one-element list; empty, unchanged and repeated
outputs are dropped; at most ``max_outputs`` are kept (the operations' own count arguments
differ: ``max_outputs``, ``max_output``, ``num_outputs``; the one the constructor accepts is set).
Before each caption the operation's ``seed`` attribute is set from the caption's generator, and
the global ``random``/``numpy``/``torch`` states the operations reseed are restored afterwards.
Exceptions are not swallowed here: the runner records them in that caption's ``errors``.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import random
import sys
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from vlprobe.augment.base import Availability, Proposal, Strategy, normalise_outputs
from vlprobe.validation import InputError

__all__ = ["NLAugmenterStrategy"]

_COUNT_ARGS = ("max_outputs", "max_output", "num_outputs")
_HINT = ("install NL-Augmenter from source (github.com/GEM-benchmark/NL-Augmenter) and pass its "
         "checkout with --nl-augmenter PATH")


class NLAugmenterStrategy(Strategy):
    """Any NL-Augmenter ``SentenceOperation`` by dotted path, outputs normalised."""

    group: ClassVar[str] = "external"
    default_max_outputs: ClassVar[int] = 1
    resources: tuple[str, ...] = ("nl-augmenter",)

    def __init__(self, path: str, max_outputs: int | None = None, *, source: str | None = None,
                 **kwargs: Any) -> None:
        if not isinstance(path, str) or not path or any(c.isspace() for c in path) or "." not in path:
            raise InputError(f"nl-augmenter operation must be a dotted path module.Class, got {path!r}")
        self.path = path
        self.name = f"nlaugmenter:{path}"
        self.source = source
        self.kwargs = dict(kwargs)
        super().__init__(max_outputs)
        self.options = {**({"source": source} if source else {}), **self.kwargs}
        self._op: Any = None
        self._cls: Any = None

    def _candidates(self) -> list[tuple[str, str]]:
        module, _, cls = self.path.rpartition(".")
        out = [(module, cls)]
        if "." not in module:  # folder.Class
            out.append((f"nlaugmenter.transformations.{module}.transformation", cls))
        return out

    def _import(self) -> Any:
        if self._cls is not None:
            return self._cls
        if self.source:
            src = str(Path(self.source).resolve())
            if not Path(src).is_dir():
                raise InputError(f"nl_augmenter: no such directory {self.source!r}")
            if src not in sys.path:
                sys.path.insert(0, src)
        errors = []
        for module, cls in self._candidates():
            try:
                found = importlib.util.find_spec(module.split(".")[0]) is not None
            except (ImportError, ValueError):
                found = False
            if not found:
                errors.append(f"no module {module!r}")
                continue
            try:
                obj = getattr(importlib.import_module(module), cls)
            except (ImportError, AttributeError) as exc:
                errors.append(f"{module}.{cls}: {type(exc).__name__}: {exc}")
                continue
            if not callable(getattr(obj, "generate", None)):
                raise InputError(f"nl-augmenter: {module}.{cls} has no generate(sentence) method")
            self._cls = obj
            return obj
        raise InputError("; ".join(errors))

    def available(self) -> Availability:
        try:
            self._import()
        except ValueError as exc:
            return Availability(False, f"cannot import {self.path!r} ({exc})", _HINT)
        except Exception as exc:  # the operation's own imports failed
            return Availability(False, f"importing {self.path!r} failed: {type(exc).__name__}: {exc}", _HINT)
        return Availability(True, f"{self._cls.__module__}.{self._cls.__qualname__}")

    def load(self) -> None:
        if self._op is not None:
            return
        cls = self._import()
        params = inspect.signature(cls).parameters
        kwargs = dict(self.kwargs)
        for arg in _COUNT_ARGS:
            if arg in params and arg not in kwargs:
                kwargs[arg] = self.max_outputs
                break
        self._op = cls(**kwargs)
        self.constructed_with = kwargs

    def propose(self, text: str, rng: np.random.Generator) -> list[Proposal]:
        self.load()
        seed = int(rng.integers(0, 2**31 - 1))
        if hasattr(self._op, "seed"):
            self._op.seed = seed
        states = _save_global_rng()
        try:
            raw = self._op.generate(text)
        finally:
            _restore_global_rng(states)
        if isinstance(raw, str):
            raw = [raw]
        if not isinstance(raw, list | tuple):
            raise InputError(f"{self.path}.generate returned {type(raw).__name__}, expected a list of strings")
        bad = [type(r).__name__ for r in raw if not isinstance(r, str)]
        if bad:
            raise InputError(f"{self.path}.generate returned non-strings ({', '.join(sorted(set(bad)))})")
        cls = f"{self._cls.__module__}.{self._cls.__qualname__}"
        return normalise_outputs(text, [Proposal(r, {"class": cls, "seed": seed}) for r in raw], self.max_outputs)

    def provenance(self) -> dict[str, Any]:
        out = super().provenance()
        out["class"] = f"{self._cls.__module__}.{self._cls.__qualname__}" if self._cls is not None else self.path
        out["kwargs"] = dict(getattr(self, "constructed_with", self.kwargs))
        return out


def _save_global_rng() -> tuple[Any, Any, Any]:
    torch_state = None
    if "torch" in sys.modules:
        torch_state = sys.modules["torch"].random.get_rng_state()
    return random.getstate(), np.random.get_state(), torch_state


def _restore_global_rng(states: tuple[Any, Any, Any]) -> None:
    random.setstate(states[0])
    np.random.set_state(states[1])
    if states[2] is not None:
        sys.modules["torch"].random.set_rng_state(states[2])
