"""Role rewrites on the spaCy parse, and the re-inflection rules they and the lexical strategies use."""

from __future__ import annotations

import numpy as np
import pytest

from vlprobe.augment.inflect import a_or_an, inflect, lemma_for
from vlprobe.augment.roles import RoleRewriteStrategy


def rules(text: str, k: int = 5) -> dict[str, str]:
    return {p.params["rule"]: p.text for p in RoleRewriteStrategy(max_outputs=k).propose(text, np.random.default_rng(0))}


@pytest.mark.parametrize(("text", "rule", "expected"), [
    ("a dog chases a cat.", "active-to-passive", "a cat is chased by a dog."),
    ("The man is riding a horse on the beach", "active-to-passive", "A horse is being ridden by the man on the beach"),
    ("the kid hugs her", "active-to-passive", "she is hugged by the kid"),
    ("the old man will feed the dogs", "active-to-passive", "the dogs will be fed by the old man"),
    ("the cake was eaten by the boys", "passive-to-active", "the boys ate the cake"),
    ("a cat is being chased by two dogs", "passive-to-active", "two dogs are chasing a cat"),
    ("a man is bitten by a dog", "passive-to-active", "a dog bites a man"),
    ("The man is riding a horse on the beach", "front-adjunct", "On the beach, the man is riding a horse"),
    ("a mug in some grass", "front-adjunct", "in some grass, a mug"),
    ("In the morning, the cat chased the mice.", "adjunct-to-end", "The cat chased the mice in the morning."),
])
def test_rewrites(nlp, text: str, rule: str, expected: str) -> None:
    assert rules(text)[rule] == expected


def test_object_modifier_stays_with_the_object(nlp) -> None:
    out = rules("The person with short hair is pushing the person with long hair")
    assert out["active-to-passive"] == "The person with long hair is being pushed by the person with short hair"
    assert "front-adjunct" not in out  # "with long hair" modifies a noun


def test_negated_clauses_are_left_alone_and_flag_is_set(nlp) -> None:
    assert "active-to-passive" not in rules("the dog does not chase the cat")
    assert RoleRewriteStrategy.may_alter_meaning and RoleRewriteStrategy.group == "rule-based"


def test_max_outputs_and_determinism(nlp) -> None:
    text = "The man is riding a horse on the beach"
    s = RoleRewriteStrategy(max_outputs=1)
    a = s.generate(text, np.random.default_rng(3))
    assert len(a) == 1 and a == s.generate(text, np.random.default_rng(3)) and a[0] != text


@pytest.mark.parametrize(("lemma", "tag", "form"), [
    ("dog", "NNS", "dogs"), ("puppy", "NNS", "puppies"), ("box", "NNS", "boxes"), ("mouse", "NNS", "mice"),
    ("young_woman", "NNS", "young women"), ("hot_dog", "NNS", "hot dogs"), ("dog", "NN", "dog"),
    ("run", "VBD", "ran"), ("run", "VBN", "run"), ("run", "VBG", "running"), ("stop", "VBD", "stopped"),
    ("visit", "VBD", "visited"), ("ride", "VBN", "ridden"), ("ride", "VBG", "riding"), ("lie", "VBG", "lying"),
    ("carry", "VBZ", "carries"), ("carry", "VBD", "carried"), ("go", "VBZ", "goes"), ("have", "VBZ", "has"),
    ("take_off", "VBD", "took off"), ("see", "VBG", "seeing"), ("play", "VBD", "played"),
])
def test_inflect(lemma: str, tag: str, form: str, wordnet_root) -> None:
    assert inflect(lemma, tag, wordnet_root / "corpora" / "wordnet") == form


def test_lemma_for_repairs_spacy_lemmas() -> None:
    assert lemma_for("riding", "VBG", "rid") == "ride"
    assert lemma_for("stopped", "VBD", "stop") == "stop"
    assert lemma_for("ran", "VBD", "ran") == "run"


@pytest.mark.parametrize(("word", "article"), [("equine", "an"), ("dog", "a"), ("hour", "an"), ("unicorn", "a"), ("apple", "an")])
def test_a_or_an(word: str, article: str) -> None:
    assert a_or_an(word) == article
