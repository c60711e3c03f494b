"""OpenCLIP's text input: its CLIP BPE (carried with vlprobe) and its text cleaning.

The vocabulary
--------------
OpenCLIP tokenizes for CLIP's own text tower with OpenAI CLIP's byte-level BPE, which it ships
inside its package (``open_clip/bpe_simple_vocab_16e6.txt.gz``) and reads from there: a model
folder in OpenCLIP's hub format needs no tokenizer file. vlprobe carries the same published file
(:data:`BPE_FILE`, 1.36 MB, sha256 :data:`BPE_SHA256`; released by OpenAI under the MIT licence,
see ``LICENSE-clip-bpe`` beside it) and builds the vocabulary from it as OpenCLIP's
``tokenizer.py`` does: the file's first line is a version header; the next 48,894 lines are the
merges (``49152 - 256 - 2``); the vocabulary is the 256 byte-level characters, the same with the
``</w>`` end-of-word mark, one token per merge, then ``<start_of_text>`` (49406) and
``<end_of_text>`` (49407): 49,408 ids. :func:`clip_bpe_tokenizer` is that BPE as a transformers
``CLIPTokenizer`` (its own normaliser removed: the text arrives cleaned, as below).

The cleaning
------------
OpenCLIP's ``tokenizer.py`` cleans every text before it tokenizes it (:func:`clean_text`):
``ftfy.fix_text``, then ``html.unescape`` twice, then surrounding whitespace stripped; then
``clean`` decides the rest: ``lower`` (its ``SimpleTokenizer`` default: runs of whitespace made
one space, lower case), ``whitespace`` (its ``HFTokenizer`` default, for roberta/xlm-roberta text
towers: whitespace only, case kept), ``canonicalize`` (punctuation removed, lower case,
whitespace), ``whitespace_underscore`` (underscores made spaces, whitespace). A model config
names another mode in ``text_cfg.tokenizer_kwargs.clean``.

Measured beside OpenCLIP's ``SimpleTokenizer`` (open_clip 4.2.0.dev0) on the 67,542 captions and
foils of SugarCrepe (refined and unrefined) and VALSE: the same ids for every one; without the
cleaning, 10 of them get other ids (a curly apostrophe, which ``ftfy`` straightens), and so does
any caption with an HTML entity (``a dog &amp; a cat``).
"""

from __future__ import annotations

import functools
import gzip
import html
import string
from importlib import resources
from typing import Any

from vlprobe.validation import InputError

__all__ = ["BPE_FILE", "BPE_SHA256", "CLEAN_MODES", "bytes_to_unicode", "clean_text", "clip_bpe_merges",
           "clip_bpe_tokenizer"]

#: OpenAI CLIP's BPE merges as OpenCLIP ships them (package data of this module's package).
BPE_FILE = "bpe_simple_vocab_16e6.txt.gz"
#: sha256 of :data:`BPE_FILE` (the file OpenAI CLIP and OpenCLIP publish).
BPE_SHA256 = "924691ac288e54409236115652ad4aa250f48203de50a9e4722a6ecd48d6804a"
#: OpenCLIP's text cleanings (``clean`` of its tokenizers).
CLEAN_MODES: tuple[str, ...] = ("lower", "whitespace", "canonicalize", "whitespace_underscore")
_N_MERGES = 49152 - 256 - 2
_BOS, _EOS = "<start_of_text>", "<end_of_text>"
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def clean_text(text: str, mode: str = "lower") -> str:
    """``text`` as OpenCLIP cleans it before tokenizing (see the module docstring).

    Parameters
    ----------
    text : str
    mode : {"lower", "whitespace", "canonicalize", "whitespace_underscore"}
    """
    import ftfy

    text = html.unescape(html.unescape(ftfy.fix_text(text))).strip()
    if mode == "canonicalize":
        text = text.replace("_", " ").translate(_PUNCTUATION).lower()
    elif mode == "whitespace_underscore":
        text = text.replace("_", " ")
    text = " ".join(text.split())
    return text.lower() if mode == "lower" else text


def check_clean_mode(mode: Any, param: str) -> str:
    """``mode`` if it is one of :data:`CLEAN_MODES`, else an :class:`InputError` naming ``param``."""
    if mode not in CLEAN_MODES:
        raise InputError(f"{param}: OpenCLIP's text cleaning is one of {', '.join(CLEAN_MODES)}, got {mode!r}")
    return str(mode)


def bytes_to_unicode() -> dict[int, str]:
    """The GPT-2/CLIP map from the 256 byte values to printable unicode characters.

    Printable latin-1 bytes map to themselves; the others are shifted to code points 256 and up,
    so every byte has a visible, non-whitespace character.

    Returns
    -------
    dict[int, str]
        Byte value -> single character, in CLIP's vocabulary order (printable ranges first).
    """
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    byte_values, code_points = keep[:], keep[:]
    shift = 0
    for b in range(256):
        if b not in keep:
            byte_values.append(b)
            code_points.append(256 + shift)
            shift += 1
    return {b: chr(c) for b, c in zip(byte_values, code_points, strict=True)}


@functools.lru_cache(maxsize=1)
def clip_bpe_merges() -> tuple[tuple[str, str], ...]:
    """The 48,894 merges of :data:`BPE_FILE`, in rank order."""
    data = resources.files(__package__).joinpath(BPE_FILE).read_bytes()
    lines = gzip.decompress(data).decode("utf-8").split("\n")[1:_N_MERGES + 1]
    merges = tuple(tuple(line.split()) for line in lines)
    if len(merges) != _N_MERGES or any(len(m) != 2 for m in merges):
        raise RuntimeError(f"{BPE_FILE} in vlprobe's package is damaged (expected {_N_MERGES} merges)")
    return merges  # type: ignore[return-value]


def clip_bpe_tokenizer(context_length: int = 77) -> Any:
    """OpenCLIP's CLIP BPE as a transformers ``CLIPTokenizer`` (49,408 ids, EOS the highest).

    Texts must be cleaned first (:func:`clean_text`): the tokenizer's own normaliser (NFC,
    whitespace, lower case) is removed so that the cleaning alone decides, as in OpenCLIP. Its
    special tokens are spelled as OpenCLIP spells them (``<start_of_text>``, ``<end_of_text>``):
    a caption holding that text gets the special id, as OpenCLIP's pattern gives it.
    """
    from transformers import CLIPTokenizer

    merges = clip_bpe_merges()
    chars = list(bytes_to_unicode().values())
    tokens = [*chars, *(c + "</w>" for c in chars), *("".join(m) for m in merges), _BOS, _EOS]
    vocab = {t: i for i, t in enumerate(tokens)}
    # transformers annotates merges as list[str]; the BPE model it builds takes (a, b) pairs
    tok = CLIPTokenizer(vocab=vocab, merges=list(merges), bos_token=_BOS, eos_token=_EOS,  # type: ignore[arg-type]
                        unk_token=_EOS, pad_token=_EOS, model_max_length=context_length)
    tok.backend_tokenizer.normalizer = None
    return tok
