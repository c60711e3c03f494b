"""A stand-in for spaCy's tagger on the ARO fixture's grammar (the order perturbations tag captions)."""

from __future__ import annotations

import re

NOUNS = {"circle", "square", "triangle", "star"}
ADJECTIVES = {"red", "green", "blue", "yellow", "purple", "orange"}


def fake_tag(text: str) -> list[tuple[str, str]]:
    """Tag the fixture's captions: shapes NN, colours JJ, every other token DT."""
    tokens = re.findall(r"\w+|[^\w\s]", text)
    return [(t, "NN" if t.lower() in NOUNS else "JJ" if t.lower() in ADJECTIVES else "DT") for t in tokens]
