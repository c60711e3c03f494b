"""Rule-based role rewrites on spaCy's dependency parse (``role-rewrite``).

A stand-in for the paper's CheckSrl (SRL-BERT + string rules, which needs allennlp 2.5): three
rules on the root clause of the caption.

* ``active-to-passive``: subject V object -> object be V-ed by subject
  ("a dog bites a man" -> "a man is bitten by a dog"); present, past, progressive, perfect and
  modal clauses; pronouns change case ("he sees them" -> "they are seen by him").
* ``passive-to-active``: the reverse, when the passive has a ``by`` agent.
* ``front-adjunct``: a prepositional / adverbial modifier of the root moved to the front with a
  comma ("a dog sleeps on the couch" -> "on the couch, a dog sleeps"); for verbless captions the
  root noun's modifier ("a mug in some grass" -> "in some grass, a mug"); a fronted one is moved
  back to the end.

Parses of short captions attach prepositional phrases wrongly often enough that a rewrite can
change who does what to whom: the strategy is flagged ``may_alter_meaning``. Clauses with
negation are left alone.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from vlprobe.augment.base import Proposal
from vlprobe.augment.inflect import inflect, lemma_for
from vlprobe.augment.lexical import SpacyStrategy

__all__ = ["RoleRewriteStrategy"]

_SUBJ_CASE = {"me": "I", "him": "he", "her": "she", "us": "we", "them": "they", "whom": "who"}
_OBJ_CASE = {v.lower(): k for k, v in _SUBJ_CASE.items()} | {"i": "me"}
_ADJUNCT_DEPS = ("prep", "advmod", "npadvmod", "advcl")
_BE_PRESENT = {"is", "are", "am", "'s", "'re"}
_BE_PAST = {"was", "were"}


def _span(tok: Any) -> tuple[int, int]:
    sub = list(tok.subtree)
    return sub[0].i, sub[-1].i + 1


def _plural(head: Any) -> bool:
    if head.lower_ in ("we", "they", "you", "these", "those", "both"):
        return True
    return head.tag_ in ("NNS", "NNPS") or any(c.dep_ == "conj" for c in head.children)


def _text(doc: Any, start: int, stop: int) -> str:
    return doc[start:stop].text if stop > start else ""


def _np(doc: Any, head: Any, case: dict[str, str], sentence_initial: bool) -> str:
    start, stop = _span(head)
    if stop - start == 1 and head.lower_ in case:
        return case[head.lower_]
    text = _text(doc, start, stop)
    first = doc[start]
    if sentence_initial and first.text[:1].isupper() and first.pos_ != "PROPN" and first.text != "I":
        text = text[:1].lower() + text[1:]
    return text


def _join(parts: list[str], end: str, capital: bool) -> str:
    out = " ".join(p for p in parts if p).replace(" ,", ",")
    if capital:
        out = out[:1].upper() + out[1:]
    return out + end


class RoleRewriteStrategy(SpacyStrategy):
    """Active <-> passive and adjunct fronting on spaCy's dependency parse (may alter meaning)."""

    name: str = "role-rewrite"
    group: ClassVar[str] = "rule-based"
    default_max_outputs: ClassVar[int] = 3
    may_alter_meaning: ClassVar[bool] = True
    pipes: ClassVar[tuple[str, ...]] = ("tok2vec", "tagger", "parser", "attribute_ruler", "lemmatizer")

    def propose_doc(self, text: str, doc: Any, rng: np.random.Generator) -> list[Proposal]:
        sents = list(doc.sents)
        if len(sents) != 1:
            return []
        root = sents[0].root
        end = doc[-1].text if doc[-1].is_punct and doc[-1].i != root.i else ""
        stop = len(doc) - (1 if end else 0)
        capital = doc[0].text[:1].isupper()
        out: list[Proposal] = []
        if root.pos_ in ("VERB", "AUX") and not any(c.dep_ == "neg" for c in root.children):
            for rule in (self._to_passive, self._to_active):
                made = rule(doc, root, stop, end, capital)
                if made:
                    out.append(made)
        out.extend(self._front(doc, root, stop, end, capital))
        if len(out) > self.max_outputs:
            keep = sorted(rng.choice(len(out), self.max_outputs, replace=False))
            out = [out[i] for i in keep]
        return out

    # -- rules ---------------------------------------------------------------------------------
    def _to_passive(self, doc: Any, v: Any, stop: int, end: str, capital: bool) -> Proposal | None:
        subj = [c for c in v.children if c.dep_ == "nsubj"]
        obj = [c for c in v.children if c.dep_ == "dobj"]
        if len(subj) != 1 or len(obj) != 1 or v.pos_ != "VERB":
            return None
        s, o = subj[0], obj[0]
        auxes = [c for c in v.children if c.dep_ == "aux"]
        plural = _plural(o)
        aux_words = [a.lower_ for a in auxes]
        if not auxes:
            if v.tag_ in ("VBZ", "VBP"):
                be = ["are" if plural else "is"]
            elif v.tag_ == "VBD":
                be = ["were" if plural else "was"]
            else:
                return None
        elif v.tag_ == "VBG" and aux_words[-1] in _BE_PRESENT | _BE_PAST:
            if aux_words[-1] in _BE_PRESENT:
                be = ["are" if plural else "is", "being"]
            else:
                be = ["were" if plural else "was", "being"]
        elif v.tag_ == "VBN" and aux_words[-1] in ("has", "have", "had"):
            have = "had" if aux_words[-1] == "had" else ("have" if plural else "has")
            be = [have, "been"]
        elif v.tag_ == "VB" and auxes[-1].tag_ == "MD":
            be = [auxes[-1].text.lower(), "be"]
        else:
            return None
        participle = inflect(lemma_for(v.text, v.tag_, v.lemma_), "VBN")
        prt = [c.text for c in v.children if c.dep_ == "prt"]
        skip = {s.i, o.i, *(a.i for a in auxes), *(c.i for c in v.children if c.dep_ == "prt")}
        o_text = _np(doc, o, _SUBJ_CASE, False)
        o_stop = _span(o)[1]
        for c in v.children:  # "pushing the person with long hair": the PP belongs to the object
            if c.dep_ == "prep" and c.i == o_stop and c.lower_ in ("with", "of") and _span(c)[1] <= stop:
                skip.add(c.i)
                o_text = o_text + " " + _text(doc, *_span(c))
        left, right = self._others(doc, v, skip, stop)
        if any(doc[a:b][0].dep_ == "punct" for a, b in left):
            return None
        initial = _span(s)[0] == 0
        parts = [*(_text(doc, a, b) for a, b in left), o_text, *be, participle, *prt,
                 "by", _np(doc, s, _OBJ_CASE, initial), *(_text(doc, a, b) for a, b in right)]
        return Proposal(_join(parts, end, capital), {"rule": "active-to-passive"})

    def _to_active(self, doc: Any, v: Any, stop: int, end: str, capital: bool) -> Proposal | None:
        subj = [c for c in v.children if c.dep_ == "nsubjpass"]
        agent = [c for c in v.children if c.dep_ == "agent"]
        if len(subj) != 1 or len(agent) != 1 or v.tag_ != "VBN":
            return None
        pobj = [c for c in agent[0].children if c.dep_ == "pobj"]
        if len(pobj) != 1:
            return None
        s, a = subj[0], pobj[0]
        auxes = [c for c in v.children if c.dep_ in ("aux", "auxpass")]
        words = [x.lower_ for x in auxes]
        plural = _plural(a) or a.lower_ in ("i", "me")
        lemma = lemma_for(v.text, v.tag_, v.lemma_)
        if words in (["is"], ["are"], ["am"]):
            verb = [inflect(lemma, "VBP" if plural else "VBZ")]
        elif words in (["was"], ["were"]):
            verb = [inflect(lemma, "VBD")]
        elif len(words) == 2 and words[1] == "being" and words[0] in _BE_PRESENT | _BE_PAST:
            be = ("are" if plural else "is") if words[0] in _BE_PRESENT else ("were" if plural else "was")
            verb = [be, inflect(lemma, "VBG")]
        elif len(words) == 2 and words[1] == "been" and words[0] in ("has", "have", "had"):
            verb = ["had" if words[0] == "had" else ("have" if plural else "has"), inflect(lemma, "VBN")]
        elif len(words) == 2 and words[1] == "be" and auxes[0].tag_ == "MD":
            verb = [auxes[0].text.lower(), lemma]
        else:
            return None
        prt = [c.text for c in v.children if c.dep_ == "prt"]
        skip = {s.i, agent[0].i, *(x.i for x in auxes), *(c.i for c in v.children if c.dep_ == "prt")}
        left, right = self._others(doc, v, skip, stop)
        if any(doc[p:q][0].dep_ == "punct" for p, q in left):
            return None
        initial = _span(s)[0] == 0
        parts = [*(_text(doc, p, q) for p, q in left), _np(doc, a, _SUBJ_CASE, False), *verb, *prt,
                 _np(doc, s, _OBJ_CASE, initial), *(_text(doc, p, q) for p, q in right)]
        return Proposal(_join(parts, end, capital), {"rule": "passive-to-active"})

    def _front(self, doc: Any, root: Any, stop: int, end: str, capital: bool) -> list[Proposal]:
        out = []
        kids = [c for c in root.children if c.dep_ in _ADJUNCT_DEPS and c.i < stop
                and (c.dep_ != "advmod" or c.pos_ == "ADV")]
        for c in kids:
            a, b = _span(c)
            if b > stop:
                continue
            if c.lower_ in ("with", "of") and a > 0 and doc[a - 1].pos_ in ("NOUN", "PROPN"):
                continue  # "the person with long hair": a noun's modifier, not the clause's
            if c.i > root.i and b == stop:  # trailing adjunct -> front
                rest = _text(doc, 0, a).rstrip(" ,")
                adj = _text(doc, a, b)
                first = doc[0]
                if first.text[:1].isupper() and first.pos_ != "PROPN" and first.text != "I":
                    rest = rest[:1].lower() + rest[1:]
                out.append(Proposal(_join([adj + ",", rest], end, capital),
                                    {"rule": "front-adjunct", "adjunct": adj}))
            elif a == 0 and b < stop and doc[b].text == ",":  # fronted adjunct -> end
                rest = _text(doc, b + 1, stop)
                adj = _text(doc, a, b)
                if doc[0].pos_ != "PROPN" and doc[0].text != "I":
                    adj = adj[:1].lower() + adj[1:]
                out.append(Proposal(_join([rest, adj], end, capital), {"rule": "adjunct-to-end", "adjunct": adj}))
        return out

    @staticmethod
    def _others(doc: Any, v: Any, skip: set[int], stop: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """Spans of the verb's other dependents, left and right of it, in order."""
        left: list[tuple[int, int]] = []
        right: list[tuple[int, int]] = []
        for c in v.children:
            if c.i in skip or c.i >= stop or (c.dep_ == "punct" and c.i == stop):
                continue
            span = _span(c)
            (left if c.i < v.i else right).append(span)
        return left, right
