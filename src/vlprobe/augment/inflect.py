"""Re-inflection of replacement lemmas: keep the replaced word's number and tense.

Penn tags handled: NN, NNS (nouns); VB, VBP, VBZ, VBD, VBN, VBG (verbs). Irregular forms come
from a short table of common English irregular verbs (written for vlprobe) and from WordNet's own
exception lists (``noun.exc``, ``verb.exc``, read backwards); regular forms from spelling rules.
Callers check a form with WordNet's ``morphy`` (it must lead back to the lemma) and drop it when
it does not, so a rule's miss costs a candidate, never a wrong word.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

__all__ = ["a_or_an", "inflect", "irregular_verbs"]

# base past past-participle (common irregular verbs; enough for captions' verbs)
_IRREGULAR = """
arise arose arisen|awake awoke awoken|be was been|bear bore borne|beat beat beaten|become became become
begin began begun|bend bent bent|bet bet bet|bind bound bound|bite bit bitten|bleed bled bled
blow blew blown|break broke broken|breed bred bred|bring brought brought|build built built
burn burnt burnt|burst burst burst|buy bought bought|catch caught caught|choose chose chosen
cling clung clung|come came come|cost cost cost|creep crept crept|cut cut cut|deal dealt dealt
dig dug dug|dive dove dived|do did done|draw drew drawn|dream dreamt dreamt|drink drank drunk
drive drove driven|eat ate eaten|fall fell fallen|feed fed fed|feel felt felt|fight fought fought
find found found|flee fled fled|fling flung flung|fly flew flown|forbid forbade forbidden
forget forgot forgotten|forgive forgave forgiven|freeze froze frozen|get got gotten|give gave given
go went gone|grind ground ground|grow grew grown|hang hung hung|have had had|hear heard heard
hide hid hidden|hit hit hit|hold held held|hurt hurt hurt|keep kept kept|kneel knelt knelt
know knew known|lay laid laid|lead led led|lean leant leant|leap leapt leapt|leave left left
lend lent lent|let let let|lie lay lain|light lit lit|lose lost lost|make made made|mean meant meant
meet met met|pay paid paid|put put put|quit quit quit|read read read|ride rode ridden|ring rang rung
rise rose risen|run ran run|say said said|see saw seen|seek sought sought|sell sold sold
send sent sent|set set set|sew sewed sewn|shake shook shaken|shed shed shed|shine shone shone
shoot shot shot|show showed shown|shrink shrank shrunk|shut shut shut|sing sang sung|sink sank sunk
sit sat sat|sleep slept slept|slide slid slid|sling slung slung|slit slit slit|speak spoke spoken
speed sped sped|spend spent spent|spin spun spun|spit spat spat|split split split|spread spread spread
spring sprang sprung|stand stood stood|steal stole stolen|stick stuck stuck|sting stung stung
stink stank stunk|stride strode stridden|strike struck struck|string strung strung|strive strove striven
swear swore sworn|sweep swept swept|swim swam swum|swing swung swung|take took taken|teach taught taught
tear tore torn|tell told told|think thought thought|throw threw thrown|tread trod trodden
understand understood understood|wake woke woken|wear wore worn|weave wove woven|weep wept wept
win won won|wind wound wound|withdraw withdrew withdrawn|wring wrung wrung|write wrote written
"""


@functools.lru_cache(maxsize=1)
def irregular_verbs() -> dict[str, tuple[str, str]]:
    """base -> (past, past participle) for the built-in table."""
    out = {}
    for entry in _IRREGULAR.replace("\n", "|").split("|"):
        words = entry.split()
        if len(words) == 3:
            out[words[0]] = (words[1], words[2])
    return out


@functools.lru_cache(maxsize=4)
def _exceptions(folder: str, pos: str) -> dict[str, list[str]]:
    """lemma -> inflected forms listed in WordNet's ``<pos>.exc`` (file order)."""
    out: dict[str, list[str]] = {}
    path = Path(folder) / f"{pos}.exc"
    if not path.is_file():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if len(parts) >= 2:
            for lemma in parts[1:]:
                out.setdefault(lemma, []).append(parts[0])
    return out


_VOWELS = "aeiou"


def _double_final(word: str) -> bool:
    """stop -> stopp-ed: one vowel group ending vowel + consonant (not w, x, y)."""
    return bool(re.fullmatch(r"[^aeiou]*[aeiou][^aeiouwxy]", word))


_IRREGULAR_NOUNS = dict(pair.split(":") for pair in (
    "person:people child:children foot:feet tooth:teeth goose:geese mouse:mice louse:lice ox:oxen "
    "leaf:leaves knife:knives wife:wives life:lives wolf:wolves shelf:shelves half:halves calf:calves "
    "loaf:loaves thief:thieves sheep:sheep deer:deer fish:fish potato:potatoes tomato:tomatoes hero:heroes "
    "cactus:cacti"
).split())
_MAN_NOT_MEN = ("human", "german", "roman", "shaman", "talisman", "caiman", "ottoman", "doberman", "walkman")


def _plural(word: str, exc: dict[str, list[str]]) -> str:
    if word in _IRREGULAR_NOUNS:
        return _IRREGULAR_NOUNS[word]
    if word.endswith("man") and word not in _MAN_NOT_MEN:
        return word[:-3] + "men"  # woman, fireman (WordNet's morphy has the rule, noun.exc not the words)
    if word in exc:
        forms = [f for f in exc[word] if f != word]
        if forms:
            return forms[0]
    return _add_s(word, r"(s|x|z|ch|sh)$")


def _third_person(word: str) -> str:
    if word == "be":
        return "is"
    if word == "have":
        return "has"
    return _add_s(word, r"(s|x|z|ch|sh|o)$")  # goes, does (nouns in -o mostly take -s: photos)


def _add_s(word: str, takes_es: str) -> str:
    """The regular -s form: ``-es`` after an ending matching ``takes_es``, consonant + y -> ``-ies``."""
    if re.search(takes_es, word):
        return word + "es"
    if re.search(r"[^aeiou]y$", word):
        return word[:-1] + "ies"
    return word + "s"


def _regular_past(word: str) -> str:
    if word.endswith("e"):
        return word + "d"
    if re.search(r"[^aeiou]y$", word):
        return word[:-1] + "ied"
    if _double_final(word):
        return word + word[-1] + "ed"
    return word + "ed"


def _gerund(word: str) -> str:
    if word.endswith("ie"):
        return word[:-2] + "ying"
    if word.endswith("e") and not word.endswith(("ee", "ye", "oe")) and word != "be":
        return word[:-1] + "ing"
    if _double_final(word):
        return word + word[-1] + "ing"
    return word + "ing"


def _past_forms(word: str, exc: dict[str, list[str]]) -> tuple[str, str]:
    table = irregular_verbs()
    if word in table:
        return table[word]
    forms = [f for f in exc.get(word, []) if not f.endswith("ing") and f != _third_person(word)]
    if len(forms) == 1:
        return forms[0], forms[0]
    if len(forms) >= 2:
        participle = next((f for f in forms if f.endswith("n")), forms[-1])
        past = next((f for f in forms if f != participle), forms[0])
        return past, participle
    regular = _regular_past(word)
    return regular, regular


def inflect(lemma: str, tag: str, wordnet_dir: str | Path | None = None) -> str:
    """The form of ``lemma`` (a WordNet lemma name, ``_`` for spaces) for Penn ``tag``.

    Nouns inflect their last word (``hot_dog`` -> ``hot dogs``), verbs their first
    (``take_off`` -> ``took off``). Other tags return the lemma with spaces.
    """
    words = lemma.replace("_", " ").split()
    if not words:
        return ""
    folder = str(wordnet_dir) if wordnet_dir is not None else ""
    if tag == "NNS":
        exc = _exceptions(folder, "noun") if folder else {}
        last = words[-1]
        words[-1] = _match_case(last, _plural(last.lower(), exc))
    elif tag in ("VBZ", "VBD", "VBN", "VBG"):
        first = words[0]
        base = first.lower()
        exc = _exceptions(folder, "verb") if folder else {}
        if tag == "VBZ":
            form = _third_person(base)
        elif tag == "VBG":
            form = _gerund(base)
        else:
            past, participle = _past_forms(base, exc)
            form = past if tag == "VBD" else participle
        words[0] = _match_case(first, form)
    return " ".join(words)


def _match_case(model: str, word: str) -> str:
    return word[:1].upper() + word[1:] if model[:1].isupper() else word


_AN_EXCEPTIONS = ("hour", "honest", "honor", "honour", "heir")
_A_EXCEPTIONS = ("uni", "use", "usu", "one", "once", "eu", "ewe", "ukulele", "uti")


def a_or_an(word: str) -> str:
    """The indefinite article for ``word`` ("an hour", "a unicorn"), by spelling."""
    w = word.lower()
    if w.startswith(_AN_EXCEPTIONS):
        return "an"
    if w.startswith(_A_EXCEPTIONS):
        return "a"
    return "an" if w[:1] in _VOWELS else "a"


def lemma_for(surface: str, tag: str, guess: str) -> str:
    """The verb or noun lemma whose :func:`inflect` form for ``tag`` is ``surface``.

    ``guess`` (spaCy's lemma) wins when it is consistent; otherwise spelling-derived candidates
    are tried ("riding": spaCy says "rid", which would give "ridding"; "ride" gives it back).
    """
    word = surface.lower()
    if tag in ("NN", "VB", "VBP", "JJ", "RB") or not word:
        return guess
    cands = [guess.lower()]
    for suffix in ("ing", "ed", "es", "s", "d", "ies", "ied"):
        if word.endswith(suffix):
            stem = word[: -len(suffix)]
            cands += [stem, stem + "e", stem + "y"]
            if len(stem) > 2 and stem[-1] == stem[-2]:
                cands.append(stem[:-1])
    cands += [b for b, (past, part) in irregular_verbs().items() if word in (past, part)]
    for c in dict.fromkeys(cands):
        if c and inflect(c, tag).lower() == word:
            return c
    return guess
