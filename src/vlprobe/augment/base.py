"""The strategy interface every caption-variant maker implements.

A strategy is a class registered in :data:`vlprobe.registry.STRATEGIES` (built-ins lazily in
``registry.py``; third-party packages through the entry-point group ``vlprobe.strategies``, each
entry ``name = "package.module:Class"``). It is built with its options
(``Strategy(max_outputs=3, **options)``), says whether it can run here
(:meth:`Strategy.available`: ok, reason, install hint) and makes variants of one caption with a
caller-supplied ``numpy.random.Generator`` (:meth:`Strategy.generate`), never with global random
state. :meth:`Strategy.propose` returns the same variants with what the strategy records about each
(positions, synsets, ...); :meth:`Strategy.propose_batch` lets a strategy batch its work (spaCy's
``nlp.pipe``, one ``generate`` call per batch of captions).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from vlprobe.validation import InputError, check_positive_int

__all__ = ["GROUPS", "Availability", "Proposal", "Strategy", "caption_rng", "normalise_outputs"]

GROUPS = ("identity", "lexical", "rule-based", "neural", "external")


@dataclass(frozen=True)
class Availability:
    """Whether a strategy can run here; when not, why and how to fix it."""

    ok: bool
    reason: str = ""
    hint: str = ""

    def __iter__(self) -> Iterator[Any]:  # (ok, reason, hint) unpacking
        return iter((self.ok, self.reason, self.hint))


@dataclass(frozen=True)
class Proposal:
    """One variant text and what its strategy records about it (JSON-serialisable)."""

    text: str
    params: Mapping[str, Any] = field(default_factory=dict)


class Strategy:
    """Base class of caption-variant strategies.

    Class attributes
    ----------------
    name : str
        Registry name (an instance may refine it, e.g. ``nlaugmenter:<path>``).
    group : str
        One of :data:`GROUPS`.
    version : str
        Bumped when the same input and seed give other outputs.
    default_max_outputs : int
        Variants per caption when the caller does not say.
    resources : tuple of str
        What it needs ("wordnet", "spacy", "model:<id>", ...), for listings (an instance may
        name its own models).
    may_alter_meaning : bool
        True when a variant may not be a paraphrase (rule rewrites, hypernyms/hyponyms, slang).
    """

    name: str = ""
    group: ClassVar[str] = ""
    version: ClassVar[str] = "1"
    default_max_outputs: ClassVar[int] = 1
    resources: tuple[str, ...] = ()
    may_alter_meaning: ClassVar[bool] = False
    description: ClassVar[str] = ""

    def __init__(self, max_outputs: int | None = None, **options: Any) -> None:
        if max_outputs is None:
            max_outputs = self.default_max_outputs
        self.max_outputs = check_positive_int(max_outputs, "max_outputs", f" (of strategy {self.name!r})")
        unknown = set(options) - set(self.option_names())
        if unknown:
            known = ", ".join(sorted(self.option_names())) or "none"
            raise InputError(f"strategy {self.name!r}: unknown option(s) {sorted(unknown)} (known: {known})")
        self.options = dict(options)

    # -- to override --------------------------------------------------------------------------
    @classmethod
    def option_names(cls) -> tuple[str, ...]:
        """Names of the keyword options the constructor accepts besides ``max_outputs``."""
        return ()

    def available(self) -> Availability:
        """Cheap check of the resources (no model is loaded)."""
        return Availability(True)

    def load(self) -> None:
        """Load heavy resources (models) once, before the first caption; errors name the resource."""

    def propose(self, text: str, rng: np.random.Generator) -> list[Proposal]:
        """Variants of ``text`` with their parameters; at most ``max_outputs``, none equal to ``text``."""
        raise NotImplementedError

    def provenance(self) -> dict[str, Any]:
        """What the output file records about this strategy (versions of resources it used)."""
        return {"version": self.version, "group": self.group, "max_outputs": self.max_outputs,
                "may_alter_meaning": self.may_alter_meaning,
                **({"options": dict(self.options)} if self.options else {})}

    # -- provided -----------------------------------------------------------------------------
    def generate(self, text: str, rng: np.random.Generator) -> list[str]:
        """Variant texts of ``text`` (distinct, non-empty, different from ``text``)."""
        return [p.text for p in self.propose(text, rng)]

    def propose_batch(self, texts: Sequence[str], rngs: Sequence[np.random.Generator]) -> list[list[Proposal]]:
        """:meth:`propose` for many captions (override to batch); one list per caption."""
        return [self.propose(t, r) for t, r in zip(texts, rngs, strict=True)]

    def check_available(self) -> None:
        """Raise InputError with the reason and hint when the strategy cannot run."""
        a = self.available()
        if not a.ok:
            raise InputError(f"strategy {self.name!r} is unavailable: {a.reason}" + (f"; {a.hint}" if a.hint else ""))

    def _finish(self, text: str, proposals: Sequence[Proposal]) -> list[Proposal]:
        return normalise_outputs(text, proposals, self.max_outputs)


def normalise_outputs(source: str, outputs: Any, limit: int) -> list[Proposal]:
    """Strings or proposals -> proposals: str -> [str]; empty, unchanged and repeated ones dropped.

    Whitespace is collapsed before comparing; order is kept; at most ``limit`` are returned.
    """
    if outputs is None:
        return []
    if isinstance(outputs, str | Proposal):
        outputs = [outputs]
    key_source = " ".join(source.split())
    seen = {key_source}
    out: list[Proposal] = []
    for o in outputs:
        p = o if isinstance(o, Proposal) else Proposal(o) if isinstance(o, str) else None
        if p is None:
            continue
        text = " ".join(p.text.split())
        if not text or text in seen:
            continue
        seen.add(text)
        out.append(Proposal(text, p.params))
        if len(out) >= limit:
            break
    return out


def caption_rng(seed: int, *keys: str | int) -> np.random.Generator:
    """A generator for one (seed, item, caption, strategy): independent of order and subsets."""
    words = [int(seed)]
    for k in keys:
        digest = hashlib.sha256(str(k).encode("utf-8")).digest()
        words.append(int.from_bytes(digest[:8], "little"))
    return np.random.default_rng(np.random.SeedSequence(words))
