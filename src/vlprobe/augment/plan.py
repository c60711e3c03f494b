"""Which strategies run, how many variants each: presets, plug-ins, construction.

Presets
-------
``why-winoground-hard`` reproduces the strategy list and per-caption counts of "Why is
Winoground Hard?" (``augmentations/text_augmentations.py``: at most 23 variants per caption):

============================  =====  ==========================================================
paper (NL-Augmenter class)    count  vlprobe strategy
============================  =====  ==========================================================
original (Identity)           1      ``original`` (the caption itself; not repeated in the file)
BackTranslation               1      ``back-translation`` (en->de greedy, de->en beam 2)
DiverseParaphrase             3      ``diverse-back-translation`` (15 de->en beams, diverse pick)
ProtaugmentDiverseParaphrase  5      ``paraphrase`` (group beam search 20 beams / 5 groups)
CheckSrl (PropbankSrlRoles)   3      ``role-rewrite`` (dependency rules instead of SRL-BERT)
ReplaceHyponyms               2      ``hyponym``
ReplaceHypernyms              2      ``hypernym``
Slangificator                 3      ``slang`` (vlprobe's own list)
SynonymSubstitution           3      ``synonym``
============================  =====  ==========================================================

``lexical`` is the offline subset: synonym 3, hypernym 2, hyponym 2, slang 3.

Third-party strategies register through the entry-point group ``vlprobe.strategies``
(``name = "package.module:StrategyClass"``); NL-Augmenter operations are used by dotted path,
``nlaugmenter:<module>.<Class>`` (see :mod:`vlprobe.augment.nlaugmenter`).
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vlprobe.augment.base import Availability, Strategy
from vlprobe.validation import InputError, check_positive_int

__all__ = [
    "DEFAULT_PRESET",
    "PRESETS",
    "StrategyStatus",
    "build_strategy",
    "chosen_preset",
    "load_plugins",
    "resolve_plan",
    "strategy_statuses",
]

ENTRY_POINT_GROUP = "vlprobe.strategies"
NLAUGMENTER_PREFIX = "nlaugmenter:"

PRESETS: dict[str, tuple[tuple[str, int], ...]] = {
    "why-winoground-hard": (
        ("original", 1), ("back-translation", 1), ("diverse-back-translation", 3), ("paraphrase", 5),
        ("role-rewrite", 3), ("hyponym", 2), ("hypernym", 2), ("slang", 3), ("synonym", 3),
    ),
    "lexical": (("synonym", 3), ("hypernym", 2), ("hyponym", 2), ("slang", 3)),
}

#: The preset run when neither a preset nor strategies are given: the paper's variants.
DEFAULT_PRESET = "why-winoground-hard"

_plugins_loaded = False


def chosen_preset(preset: str | None, strategies: Sequence[str] | None) -> str | None:
    """The preset a run uses: ``preset``; :data:`DEFAULT_PRESET` when neither it nor ``strategies``
    is given; None when strategies are. Both given are refused."""
    if preset is not None and strategies:
        raise InputError("preset: give --preset or --strategies, not both")
    return DEFAULT_PRESET if preset is None and not strategies else preset


def load_plugins() -> list[str]:
    """Register strategies advertised under the ``vlprobe.strategies`` entry-point group (once).

    Returns the names added. Entries stay lazy: the plug-in is imported when first used.
    """
    global _plugins_loaded
    from vlprobe.registry import STRATEGIES

    added: list[str] = []
    if _plugins_loaded:
        return added
    _plugins_loaded = True
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in STRATEGIES:
            continue
        STRATEGIES.register(ep.name, ep.value, help=f"plug-in strategy from {ep.value}")
        added.append(ep.name)
    return added


def resolve_plan(
    preset: str | None, strategies: Sequence[str] | None, max_per_strategy: int | None,
) -> list[tuple[str, int | None]]:
    """(strategy spec, max outputs or None for the strategy's default), in run order.

    Raises
    ------
    InputError
        Both ``preset`` and ``strategies``; unknown preset; a repeated strategy. Neither given:
        :data:`DEFAULT_PRESET`.
    """
    preset = chosen_preset(preset, strategies)
    if max_per_strategy is not None:
        check_positive_int(max_per_strategy, "max_per_strategy")
    if preset is not None:
        if preset not in PRESETS:
            raise InputError(f"preset: unknown preset {preset!r} (known: {', '.join(sorted(PRESETS))})")
        plan: list[tuple[str, int | None]] = [
            (name, min(n, max_per_strategy) if max_per_strategy else n) for name, n in PRESETS[preset]
        ]
    else:
        names = [s.strip() for s in strategies or () if s.strip()]
        if not names:
            raise InputError(f"strategies: expected strategy names, got {strategies!r}")
        plan = [(n, max_per_strategy) for n in names]
    seen = [n for n, _ in plan]
    dup = sorted({n for n in seen if seen.count(n) > 1})
    if dup:
        raise InputError(f"strategies: {dup} listed more than once")
    return plan


def build_strategy(spec: str, max_outputs: int | None = None, options: Mapping[str, Any] | None = None) -> Strategy:
    """Construct the strategy named ``spec`` (registry name or ``nlaugmenter:<dotted.path>``)."""
    from vlprobe.registry import STRATEGIES

    options = dict(options or {})
    if spec.startswith(NLAUGMENTER_PREFIX):
        from vlprobe.augment.nlaugmenter import NLAugmenterStrategy

        return NLAugmenterStrategy(spec[len(NLAUGMENTER_PREFIX):], max_outputs=max_outputs, **options)
    load_plugins()
    cls = STRATEGIES.get(spec)
    strategy = cls(max_outputs=max_outputs, **options)
    if not isinstance(strategy, Strategy):
        raise InputError(f"strategy {spec!r}: {cls!r} does not build a vlprobe.augment.base.Strategy")
    return strategy


@dataclass(frozen=True)
class StrategyStatus:
    """One line of ``probe ls strategies``."""

    name: str
    group: str
    max_outputs: int
    may_alter_meaning: bool
    resources: tuple[str, ...]
    availability: Availability
    description: str


def strategy_statuses(options: Mapping[str, Mapping[str, Any]] | None = None) -> list[StrategyStatus]:
    """Every registered strategy with its availability (no model is loaded)."""
    from vlprobe.registry import STRATEGIES

    load_plugins()
    out = []
    for name in STRATEGIES.names():
        try:
            s = build_strategy(name, None, (options or {}).get(name))
            avail = s.available()
            out.append(StrategyStatus(name, s.group, s.max_outputs, s.may_alter_meaning, s.resources, avail,
                                      STRATEGIES.describe(name)))
        except Exception as exc:  # a broken plug-in is listed, not fatal
            out.append(StrategyStatus(name, "?", 0, False, (), Availability(False, f"cannot be built: {exc}"),
                                      STRATEGIES.describe(name)))
    return out
