"""Word-level strategies: WordNet synonyms, hypernyms, hyponyms, and slang.

Each variant replaces **one** word, found by its token position (so a word that occurs twice is
replaced where it was chosen, never everywhere), with a WordNet relative of the word's most
frequent sense (the first synset WordNet lists for the spaCy lemma and POS), re-inflected to the
replaced word's Penn tag so number and tense are kept ("dogs" -> "puppies", "chased" -> "trailed").
Candidate lemmas seen in the sense-tagged corpus (``Lemma.count() > 0``) come first. Relations
are direct: synonyms are the synset's other lemmas; hypernyms the lemmas of its direct (and
instance) hypernyms; hyponyms those of its direct (and instance) hyponyms. A preceding "a"/"an"
is adjusted to the new word. Capitalised lemmas (proper names, Latin binomials) are skipped, and
an inflected form is kept only when WordNet's ``morphy`` leads it back to its lemma. Captions are
tagged in batches with spaCy's ``nlp.pipe``; strategies with the same spaCy components share the
parsed docs.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from vlprobe.augment.base import Availability, Proposal, Strategy
from vlprobe.augment.inflect import a_or_an, inflect
from vlprobe.augment.nlp import load_spacy, spacy_status
from vlprobe.augment.slang_words import SLANG, SLANG_VERSION
from vlprobe.augment.wordnet import default_root, load_wordnet, wordnet_status

__all__ = ["HypernymStrategy", "HyponymStrategy", "SlangStrategy", "SpacyStrategy", "SynonymStrategy"]

_WN_POS = {"NOUN": "n", "VERB": "v", "ADJ": "a", "ADV": "r"}
# Penn tags whose form inflect() can reproduce; other forms (comparatives, ...) are left alone.
_TAGS = {"NOUN": ("NN", "NNS"), "VERB": ("VB", "VBP", "VBZ", "VBD", "VBN", "VBG"), "ADJ": ("JJ",), "ADV": ("RB",)}
_WORD = re.compile(r"^[A-Za-z][A-Za-z'-]*$")


class SpacyStrategy(Strategy):
    """A strategy that reads spaCy docs; batches captions with ``nlp.pipe``."""

    resources: tuple[str, ...] = ("spacy",)
    pipes: ClassVar[tuple[str, ...]] = ("tok2vec", "tagger", "attribute_ruler", "lemmatizer")
    batch_size: ClassVar[int] = 256

    @classmethod
    def option_names(cls) -> tuple[str, ...]:
        return ("spacy_model",)

    def available(self) -> Availability:
        return Availability(*spacy_status(self.options.get("spacy_model")))

    def nlp(self) -> tuple[Any, dict[str, str]]:
        return load_spacy(self.options.get("spacy_model"))

    def docs(self, texts: Sequence[str], batched: bool = True, share: bool = True) -> list[Any]:
        """spaCy docs of ``texts``, with only the components this strategy needs.

        ``batched``: one ``nlp.pipe`` over all texts, else one ``nlp()`` call per text. ``share``:
        reuse docs that another strategy with the same components already parsed (the lexical
        strategies of a preset parse each caption once instead of once each).
        """
        nlp, _ = self.nlp()
        cache = _doc_cache(nlp, self.pipes) if share else {}
        todo = list(dict.fromkeys(t for t in texts if t not in cache))
        if todo:
            disable = [p for p in nlp.pipe_names if p not in self.pipes]
            if batched:
                parsed = list(nlp.pipe(todo, disable=disable, batch_size=self.batch_size))
            else:
                with nlp.select_pipes(disable=disable):
                    parsed = [nlp(t) for t in todo]
            if share and len(cache) + len(parsed) > _DOC_CACHE_SIZE:
                cache.clear()
            cache.update(zip(todo, parsed, strict=True))
        return [cache[t] for t in texts]

    def propose(self, text: str, rng: np.random.Generator) -> list[Proposal]:
        return self.propose_docs([text], self.docs([text]), [rng])[0]

    def propose_batch(self, texts: Sequence[str], rngs: Sequence[np.random.Generator],
                      batched: bool = True, share: bool = True) -> list[list[Proposal]]:
        return self.propose_docs(texts, self.docs(texts, batched, share), rngs)

    def propose_docs(self, texts: Sequence[str], docs: Sequence[Any], rngs: Sequence[np.random.Generator]) -> list[list[Proposal]]:
        return [self._finish(t, self.propose_doc(t, d, r)) for t, d, r in zip(texts, docs, rngs, strict=True)]

    def propose_doc(self, text: str, doc: Any, rng: np.random.Generator) -> list[Proposal]:
        raise NotImplementedError

    def provenance(self) -> dict[str, Any]:
        out = super().provenance()
        try:
            _, info = self.nlp()
            out["spacy"] = {k: info[k] for k in ("model", "model_version", "spacy_version")}
        except ValueError:
            pass
        return out


_DOC_CACHE_SIZE = 50_000
_DOC_CACHES: dict[tuple[int, tuple[str, ...]], dict[str, Any]] = {}


def _doc_cache(nlp: Any, pipes: tuple[str, ...]) -> dict[str, Any]:
    """Parsed docs by text, per pipeline and component set (docs are read, never changed)."""
    return _DOC_CACHES.setdefault((id(nlp), pipes), {})


def _replace(doc: Any, i: int, new: str) -> tuple[str, dict[str, Any]]:
    """``doc``'s text with token ``i`` replaced by ``new``; a preceding "a"/"an" follows suit."""
    tok = doc[i]
    text = doc.text
    if tok.text[:1].isupper():
        new = new[:1].upper() + new[1:]
    out = text[: tok.idx] + new + text[tok.idx + len(tok.text):]
    extra: dict[str, Any] = {}
    if i > 0 and doc[i - 1].lower_ in ("a", "an"):
        art = doc[i - 1]
        want = a_or_an(new)
        if art.lower_ != want:
            want = want.capitalize() if art.text[:1].isupper() else want
            out = out[: art.idx] + want + out[art.idx + len(art.text):]
            extra["article"] = want
    return out, extra


class _WordReplacement(SpacyStrategy):
    """One word replaced per variant; subclasses list the candidates of a token."""

    group: ClassVar[str] = "lexical"
    pos_allowed: ClassVar[tuple[str, ...]] = ("NOUN", "VERB", "ADJ", "ADV")

    def candidates(self, tok: Any) -> list[tuple[str, dict[str, Any]]]:
        """(lemma name with ``_`` for spaces, params) for one token, best first."""
        raise NotImplementedError

    def _eligible(self, tok: Any) -> bool:
        return (tok.pos_ in self.pos_allowed and tok.tag_ in _TAGS[tok.pos_] and not tok.is_stop
                and bool(_WORD.match(tok.text)))

    def propose_doc(self, text: str, doc: Any, rng: np.random.Generator) -> list[Proposal]:
        options = []
        for tok in doc:
            if self._eligible(tok):
                cands = self.candidates(tok)
                if cands:
                    options.append([(tok, lemma, params) for lemma, params in cands])

        def make(choice: tuple[Any, str, dict[str, Any]]) -> Proposal | None:
            tok, lemma, params = choice
            form = self.inflect(lemma, tok)
            if form is None or form.lower() == tok.lower_:
                return None
            new_text, extra = _replace(doc, tok.i, form)
            return Proposal(new_text, {
                "position": tok.i, "word": tok.text, "tag": tok.tag_, "replacement": form, **params, **extra,
            })

        return _interleave(options, rng, self.max_outputs, make)

    def inflect(self, lemma: str, tok: Any) -> str | None:
        return inflect(lemma, tok.tag_)


def _interleave(options: list[list[Any]], rng: np.random.Generator, limit: int,
                make: Any) -> list[Proposal]:
    """Spread variants over positions: a random order of positions, best candidates first.

    ``options`` holds, per position, candidates ``(token, lemma, params)``; ``make`` turns one
    into a proposal (or None when it cannot be inflected), only for those actually tried. Within
    a position corpus-attested candidates come first; ties are broken by ``rng`` so that
    different seeds pick different variants.
    """
    order = rng.permutation(len(options))
    queues = []
    for k in order:
        tiers: dict[bool, list[Any]] = {True: [], False: []}
        for c in options[k]:
            tiers[bool(c[2].get("attested", False))].append(c)
        queue: list[Any] = []
        for tier in (True, False):
            idx = rng.permutation(len(tiers[tier]))
            queue.extend(tiers[tier][j] for j in idx)
        queues.append(queue)
    out: list[Proposal] = []
    seen: set[str] = set()
    depth = 0
    while len(out) < limit and any(depth < len(q) for q in queues):
        for q in queues:
            if depth >= len(q):
                continue
            p = make(q[depth])
            if p is not None and p.text not in seen:
                seen.add(p.text)
                out.append(p)
                if len(out) >= limit:
                    break
        depth += 1
    return out


@functools.lru_cache(maxsize=4)
def sense_counts(folder: str) -> dict[str, int]:
    """Sense key -> tag count from ``index.sense`` (what ``Lemma.count()`` reads, one binary search each)."""
    out: dict[str, int] = {}
    with open(Path(folder) / "index.sense", encoding="utf-8") as fh:
        for line in fh:
            parts = line.split()
            if len(parts) >= 4:
                out[parts[0]] = int(parts[3])
    return out


class _WordNetStrategy(_WordReplacement):
    """Candidates from a WordNet relation of the token's most frequent sense."""

    resources: tuple[str, ...] = ("wordnet", "spacy")
    relation: ClassVar[str] = ""

    @classmethod
    def option_names(cls) -> tuple[str, ...]:
        return ("spacy_model", "wordnet_root")

    def available(self) -> Availability:
        ok, reason, hint = wordnet_status(self.options.get("wordnet_root"))
        if not ok:
            return Availability(False, reason, hint)
        return super().available()

    def wordnet(self) -> tuple[Any, str]:
        return load_wordnet(self.options.get("wordnet_root"))

    def _wn_dir(self) -> Path:
        if not hasattr(self, "_wn_dir_cached"):
            root = self.options.get("wordnet_root")
            self._wn_dir_cached = (Path(root) if root is not None else default_root()) / "corpora" / "wordnet"
        return self._wn_dir_cached

    def sense(self, tok: Any) -> tuple[Any, str] | None:
        """(most frequent synset, lemma) of a token, or None when WordNet lacks the word.

        The lemma is spaCy's or one of WordNet's ``morphy`` forms; for an inflected token the
        one whose re-inflection gives the token back wins (spaCy lemmatises "riding" as "rid").
        """
        wn, _ = self.wordnet()
        pos = _WN_POS[tok.pos_]
        lemmas = list(dict.fromkeys([tok.lemma_.lower(), *wn._morphy(tok.lower_, pos), tok.lower_]))
        lemmas = [lem for lem in lemmas if wn.synsets(lem.replace(" ", "_"), pos)]
        if tok.tag_ not in ("NN", "VB", "VBP", "JJ", "RB"):
            exact = [lem for lem in lemmas if inflect(lem, tok.tag_, self._wn_dir()).lower() == tok.lower_]
            lemmas = exact or lemmas
        if not lemmas:
            return None
        return wn.synsets(lemmas[0].replace(" ", "_"), pos)[0], lemmas[0]

    def related(self, synset: Any) -> list[Any]:
        raise NotImplementedError

    def candidates(self, tok: Any) -> list[tuple[str, dict[str, Any]]]:
        found = self.sense(tok)
        if found is None:
            return []
        synset, lemma = found
        counts = sense_counts(str(self._wn_dir()))
        out, seen = [], {lemma.lower()}
        # nltk builds relation lists from sets: their order changes between processes.
        for target in sorted(self.related(synset), key=lambda x: x.name()):
            for lem in target.lemmas():
                name = lem.name()
                if name[:1].isupper():
                    continue  # proper names and Latin binomials ("Canis_familiaris")
                if name.lower() in seen or name.replace("_", " ").lower() == lemma.replace("_", " ").lower():
                    continue
                seen.add(name.lower())
                count = counts.get(lem.key(), 0)
                out.append((name, {"lemma": lemma, "synset": synset.name(), "relation": self.relation,
                                   "target_synset": target.name(), "replacement_lemma": name,
                                   "attested": count > 0, "count": count}))
        out.sort(key=lambda c: -c[1]["count"])
        return out

    def inflect(self, lemma: str, tok: Any) -> str | None:
        form = inflect(lemma, tok.tag_, self._wn_dir())
        if tok.tag_ in ("NN", "VB", "VBP", "JJ", "RB") or " " in form:
            return form
        wn, _ = self.wordnet()
        back = wn._morphy(form.lower(), _WN_POS[tok.pos_])
        return form if lemma.lower() in back else None

    def provenance(self) -> dict[str, Any]:
        out = super().provenance()
        try:
            out["wordnet"] = self.wordnet()[1]
        except ValueError:
            pass
        return out


class SynonymStrategy(_WordNetStrategy):
    """Replace a noun, verb, adjective or adverb by a WordNet synonym (same synset)."""

    name: str = "synonym"
    relation: ClassVar[str] = "synonym"
    default_max_outputs: ClassVar[int] = 3

    def related(self, synset: Any) -> list[Any]:
        return [synset]


class HypernymStrategy(_WordNetStrategy):
    """Replace a noun by a direct WordNet hypernym ("dog" -> "canine")."""

    name: str = "hypernym"
    relation: ClassVar[str] = "hypernym"
    default_max_outputs: ClassVar[int] = 2
    may_alter_meaning: ClassVar[bool] = True
    pos_allowed: ClassVar[tuple[str, ...]] = ("NOUN",)

    def related(self, synset: Any) -> list[Any]:
        return list(synset.hypernyms()) + list(synset.instance_hypernyms())


class HyponymStrategy(_WordNetStrategy):
    """Replace a noun by a direct WordNet hyponym ("dogs" -> "puppies")."""

    name: str = "hyponym"
    relation: ClassVar[str] = "hyponym"
    default_max_outputs: ClassVar[int] = 2
    may_alter_meaning: ClassVar[bool] = True
    pos_allowed: ClassVar[tuple[str, ...]] = ("NOUN",)

    def related(self, synset: Any) -> list[Any]:
        return list(synset.hyponyms()) + list(synset.instance_hyponyms())


class SlangStrategy(_WordReplacement):
    """Replace a noun, adjective or adverb by an informal equivalent (vlprobe's slang list)."""

    name: str = "slang"
    version: ClassVar[str] = SLANG_VERSION
    default_max_outputs: ClassVar[int] = 3
    pos_allowed: ClassVar[tuple[str, ...]] = ("NOUN", "ADJ", "ADV")

    def _eligible(self, tok: Any) -> bool:  # slang words include stop words ("very")
        return (tok.pos_ in self.pos_allowed and tok.tag_ in _TAGS[tok.pos_]
                and bool(_WORD.match(tok.text)))

    def candidates(self, tok: Any) -> list[tuple[str, dict[str, Any]]]:
        for lemma in dict.fromkeys((tok.lemma_.lower(), tok.lower_)):
            words = SLANG.get((lemma, tok.pos_))
            if words:
                return [(w, {"lemma": lemma, "slang_list_version": SLANG_VERSION}) for w in words]
        return []
