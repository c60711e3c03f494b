"""Tiny random-initialised model checkpoints in the real Hugging Face on-disk formats.

Tests and the demo run offline, so they load models that vlprobe writes itself. Each writer
produces a directory that the ordinary loaders read exactly as they read a downloaded checkpoint
(``CLIPModel.from_pretrained(dir)``, ``AutoTokenizer.from_pretrained(dir)``, ...), plus a
``VLPROBE_FIXTURE.json`` marker saying what it is. The weights are random: the fixtures exercise
code paths and shapes, never results.

``write_tiny_clip`` layout (``out/``)::

    config.json              CLIPConfig: text 3 layers, vision 2 layers, width 32, projection 16
    model.safetensors        float32 weights, seeded random init
    tokenizer.json           byte-level BPE (tokenizers format)
    tokenizer_config.json    CLIPTokenizer, bos <|startoftext|>, eos = pad = unk <|endoftext|>
    vocab.json, merges.txt   the same BPE in the original CLIP files (merges start "#version: 0.2")
    preprocessor_config.json CLIPImageProcessor, 32x32 crop, CLIP mean/std
    VLPROBE_FIXTURE.json     {"kind": "clip", "seed": ..., "vlprobe": ..., "note": ...}

The vocabulary is laid out as in real CLIP: the 256 byte-level characters, the same 256 with the
``</w>`` end-of-word suffix, one entry per merge, then ``<|startoftext|>`` and ``<|endoftext|>``
(the highest id). Merges are learned deterministically from a small built-in caption word list,
so common caption words ("red", "circle", "left") are single tokens and any other text still
tokenizes through the byte characters.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

from vlprobe import __version__
from vlprobe.extract.models.hf import quiet_transformers

__all__ = [
    "FIXTURE_MARKER",
    "FIXTURE_WRITERS",
    "bert_fixture_vocab",
    "bytes_to_unicode",
    "learn_bpe",
    "seeded_model",
    "write_tiny_clip",
    "write_tiny_lxmert",
    "write_tiny_uniter",
]

FIXTURE_MARKER = "VLPROBE_FIXTURE.json"

_BOS = "<|startoftext|>"
_EOS = "<|endoftext|>"
_EOW = "</w>"
_MAX_MERGES = 300
_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)

# Caption vocabulary the tiny BPE is learned from: function words, colours, shapes, spatial
# relations, objects, verbs and adjectives of the synthetic and real benchmarks' captions.
_WORDS = """
a an the of is are in on at to and or with without there this that it its some two three one
picture photo image left right above below under over behind front next near far top bottom
middle between inside outside beside
red blue green yellow black white orange purple pink brown grey gray
circle square triangle star shape small big large tall short round
dog cat person man woman child people horse bird car tree house table chair cup ball bike
sitting standing holding eating running looking wearing riding playing
""".split()


def bytes_to_unicode() -> dict[int, str]:
    """The GPT-2/CLIP map from the 256 byte values to printable unicode characters.

    Printable latin-1 bytes map to themselves; the others are shifted to code points 256 and up,
    so every byte has a visible, non-whitespace character.

    Returns
    -------
    dict[int, str]
        Byte value -> single character, in CLIP's vocabulary order (printable ranges first).
    """
    keep = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    byte_values = keep[:]
    code_points = keep[:]
    shift = 0
    for b in range(256):
        if b not in keep:
            byte_values.append(b)
            code_points.append(256 + shift)
            shift += 1
    return {b: chr(c) for b, c in zip(byte_values, code_points, strict=True)}


def _word_symbols(word: str, byte_map: dict[int, str]) -> tuple[str, ...]:
    """Byte-level characters of ``word``, the last one carrying the end-of-word suffix."""
    chars = [byte_map[b] for b in word.encode("utf-8")]
    chars[-1] += _EOW
    return tuple(chars)


def learn_bpe(words: Iterable[str], max_merges: int = _MAX_MERGES) -> list[tuple[str, str]]:
    """Learn byte-level BPE merges from a word list, deterministically.

    Each round merges the most frequent adjacent symbol pair (ties broken by the smallest pair),
    until every word is a single symbol or ``max_merges`` is reached.

    Parameters
    ----------
    words : iterable of str
        Training words; lower-cased, and repeated words count more.
    max_merges : int
        Upper bound on the number of merges.

    Returns
    -------
    list of (str, str)
        Merges in priority order.
    """
    byte_map = bytes_to_unicode()
    counts = Counter(w.lower() for w in words if w)
    corpus = {_word_symbols(w, byte_map): n for w, n in sorted(counts.items())}
    merges: list[tuple[str, str]] = []
    while len(merges) < max_merges:
        pairs: Counter[tuple[str, str]] = Counter()
        for symbols, n in corpus.items():
            for pair in itertools.pairwise(symbols):
                pairs[pair] += n
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        joined = best[0] + best[1]
        merged: dict[tuple[str, ...], int] = {}
        for symbols, n in corpus.items():
            out: list[str] = []
            i = 0
            while i < len(symbols):
                if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == best:
                    out.append(joined)
                    i += 2
                else:
                    out.append(symbols[i])
                    i += 1
            merged[tuple(out)] = merged.get(tuple(out), 0) + n
        corpus = merged
    return merges


@lru_cache(maxsize=1)
def _tiny_clip_merges() -> tuple[tuple[str, str], ...]:
    """The merges of the tiny CLIP tokenizer (learned once per process)."""
    return tuple(learn_bpe(_WORDS))


def _clip_vocab(merges: Iterable[tuple[str, str]]) -> dict[str, int]:
    """CLIP vocabulary order: bytes, bytes + ``</w>``, merge results, BOS, EOS (highest id)."""
    chars = list(bytes_to_unicode().values())
    tokens = chars + [c + _EOW for c in chars] + [a + b for a, b in merges] + [_BOS, _EOS]
    vocab: dict[str, int] = {}
    for tok in tokens:
        vocab.setdefault(tok, len(vocab))
    if len(vocab) != len(tokens):
        raise RuntimeError("duplicate token in the learned BPE vocabulary")
    return vocab


def _check_seed(seed: int) -> None:
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise ValueError(f"seed must be an int in [0, 2**63), got {seed!r}")


def seeded_model(model_cls: Any, config: Any, seed: int) -> Any:
    """``model_cls(config)`` in float32 and eval mode, its weights drawn from torch seeded with
    ``seed`` inside ``fork_rng`` (the caller's global RNG state is left as it was)."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return model_cls(config).to(torch.float32).eval()


def _prepare_out(out: Path, kind: str) -> bool:
    """Check ``out`` may be written; return whether it already holds a fixture of ``kind``."""
    if not out.exists():
        return False
    if not out.is_dir():
        raise ValueError(f"out must be a directory, got a file: {str(out)!r}")
    if not any(out.iterdir()):
        return False
    marker = out / FIXTURE_MARKER
    try:
        previous = json.loads(marker.read_text(encoding="utf-8")).get("kind")
    except (OSError, ValueError, AttributeError):
        previous = None
    if previous != kind:
        raise ValueError(
            f"out must be a new or empty directory or a previous tiny-{kind} fixture; "
            f"{str(out)!r} is not empty and has no {FIXTURE_MARKER} of kind {kind!r}"
        )
    return True


def _publish(staging: Path, out: Path, overwrite: bool) -> None:
    """Move the staged files into ``out``: a directory rename, or file by file, marker last."""
    if not overwrite:
        staging.chmod(0o755)  # mkdtemp makes it private; the fixture is an ordinary directory
        if out.exists():
            out.rmdir()  # verified empty by _prepare_out
        os.replace(staging, out)
        return
    names = sorted(p.name for p in staging.iterdir() if p.name != FIXTURE_MARKER)
    for name in [*names, FIXTURE_MARKER]:
        if (staging / name).is_dir() and (out / name).is_dir():
            shutil.rmtree(out / name)  # os.replace cannot replace a non-empty directory
        os.replace(staging / name, out / name)


@contextlib.contextmanager
def _staged(out: Path, overwrite: bool, kind: str, seed: int, **marker: Any) -> Iterator[Path]:
    """A staging folder beside ``out`` to write a fixture into; on success the
    ``VLPROBE_FIXTURE.json`` marker (``kind``, ``seed``, ``marker``'s extra fields) is added and the
    folder published into ``out`` (:func:`_publish`); on failure it is removed.

    ``overwrite`` is what :func:`_prepare_out` returned for ``out``.
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        yield staging
        record = {"kind": kind, "seed": seed, **marker, "vlprobe": __version__, "note": "random weights; for tests only"}
        with open(staging / FIXTURE_MARKER, "w", encoding="utf-8") as fh:
            json.dump(record, fh, indent=2, sort_keys=True)
            fh.write("\n")
        _publish(staging, out, overwrite)
    finally:
        if staging.exists():
            shutil.rmtree(staging)


def write_tiny_clip(out: str | os.PathLike[str], seed: int = 0) -> Path:
    """Write a tiny random-initialised CLIP checkpoint in the Hugging Face format.

    The directory loads offline with ``CLIPModel.from_pretrained``, ``AutoTokenizer`` (a
    ``CLIPTokenizer``) and ``AutoImageProcessor``. Text tower: width 32, 3 layers (4 hidden
    states with the embeddings), 4 heads, 77 positions; vision tower: width 32, 2 layers,
    32x32 images in 8x8 patches; projection 16. Weights are float32, drawn from a private RNG
    seeded with ``seed`` (the global torch RNG is left untouched), so the same seed writes a
    byte-identical ``model.safetensors``.

    Parameters
    ----------
    out : str or os.PathLike
        Target directory: new, empty, or a previous tiny-clip fixture (overwritten in place).
    seed : int
        Seed for the random weights, ``>= 0``.

    Returns
    -------
    Path
        ``out`` as a path.

    Raises
    ------
    ValueError
        If ``seed`` is not a non-negative int, or ``out`` is a file or a non-empty directory
        that is not a tiny-clip fixture.
    """
    _check_seed(seed)
    out = Path(out)
    overwrite = _prepare_out(out, "clip")

    from transformers import CLIPConfig, CLIPImageProcessorPil, CLIPModel, CLIPTokenizer

    merges = list(_tiny_clip_merges())
    vocab = _clip_vocab(merges)
    tokenizer = CLIPTokenizer(vocab=vocab, merges=merges, model_max_length=77)
    vocab_size = len(vocab)
    if (tokenizer.bos_token_id, tokenizer.eos_token_id) != (vocab_size - 2, vocab_size - 1):
        raise RuntimeError("tiny CLIP tokenizer does not place BOS/EOS at the top of the vocabulary")

    projection_dim = 16
    config = CLIPConfig(
        text_config=dict(
            vocab_size=vocab_size,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=3,
            num_attention_heads=4,
            max_position_embeddings=77,
            projection_dim=projection_dim,
            bos_token_id=vocab_size - 2,
            eos_token_id=vocab_size - 1,
            pad_token_id=vocab_size - 1,
        ),
        vision_config=dict(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            image_size=32,
            patch_size=8,
            projection_dim=projection_dim,
        ),
        projection_dim=projection_dim,
    )
    model = seeded_model(CLIPModel, config, seed)

    image_processor = CLIPImageProcessorPil(
        do_resize=True,
        size={"shortest_edge": 32},
        do_center_crop=True,
        crop_size={"height": 32, "width": 32},
        do_normalize=True,
        image_mean=list(_CLIP_MEAN),
        image_std=list(_CLIP_STD),
        do_convert_rgb=True,
    )

    with _staged(out, overwrite, "clip", seed) as staging:
        with quiet_transformers():
            model.save_pretrained(staging)
            tokenizer.save_pretrained(staging)
        # transformers 5 saves only tokenizer.json; real CLIP checkpoints also carry these.
        with open(staging / "vocab.json", "w", encoding="utf-8") as fh:
            json.dump(vocab, fh, ensure_ascii=False)
            fh.write("\n")
        with open(staging / "merges.txt", "w", encoding="utf-8") as fh:
            fh.write("#version: 0.2\n")
            fh.writelines(f"{a} {b}\n" for a, b in merges)
        image_processor.save_pretrained(staging)
    return out


# -- tiny LXMERT --------------------------------------------------------------------------------

_BERT_EXTRA_WORDS = """
diamond higher lower than picture to the of is there in a an big small
""".split()


def bert_fixture_vocab(lowercase: bool = True) -> dict[str, int]:
    """A small WordPiece vocabulary covering the synthetic captions.

    BERT's order: ``[PAD]`` (id 0), ``[UNK]``, ``[CLS]``, ``[SEP]``, ``[MASK]``, then the caption
    words, every printable ASCII character, and the same characters as ``##`` continuations, so
    any ASCII text tokenizes without ``[UNK]``.

    Parameters
    ----------
    lowercase : bool
        Uncased (LXMERT) vocabulary; False adds capitalised words too (a cased model's).
    """
    from vlprobe.data.synthetic import COLORS, RELATIONS, SHAPES

    specials = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
    words = list(_WORDS) + list(_BERT_EXTRA_WORDS) + list(COLORS) + list(SHAPES)
    words += [w for r in RELATIONS for w in r.split()]
    if not lowercase:
        words += [w.capitalize() for w in words]
    chars = [chr(c) for c in range(33, 127) if lowercase is False or not chr(c).isupper()]
    tokens = [*specials, *words, *chars, *(f"##{c}" for c in chars if c.isalnum())]
    vocab: dict[str, int] = {}
    for tok in tokens:
        vocab.setdefault(tok, len(vocab))
    return vocab


def write_tiny_lxmert(out: str | os.PathLike[str], seed: int = 0) -> Path:
    """Write a tiny random-initialised ``LxmertForPreTraining`` checkpoint in the HF format.

    LXMERT's real depth (9 language, 5 relation, 5 cross layers) at width 32 (4 heads, FFN 64),
    region features of the real width 2048 with 4-d boxes, and an uncased ``BertTokenizer``
    whose vocabulary covers the synthetic captions. Loads offline with
    ``LxmertForPreTraining.from_pretrained(dir)`` and ``AutoTokenizer.from_pretrained(dir)``.
    Seeded from a private RNG: the same seed writes the same weights.

    Parameters
    ----------
    out : str or os.PathLike
        Target directory: new, empty, or a previous tiny-lxmert fixture (overwritten in place).
    seed : int
        Seed for the random weights, ``>= 0``.

    Returns
    -------
    Path
    """
    _check_seed(seed)
    out = Path(out)
    overwrite = _prepare_out(out, "lxmert")

    from transformers import BertTokenizer, LxmertConfig, LxmertForPreTraining

    vocab = bert_fixture_vocab(lowercase=True)
    tokenizer = BertTokenizer(vocab=vocab, do_lower_case=True, model_max_length=64)
    config = LxmertConfig(
        vocab_size=len(vocab), hidden_size=32, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=64, l_layers=9, r_layers=5, x_layers=5, visual_feat_dim=2048,
        visual_pos_dim=4, num_qa_labels=4, num_object_labels=16, num_attr_labels=8,
    )
    model = seeded_model(LxmertForPreTraining, config, seed)

    with _staged(out, overwrite, "lxmert", seed) as staging:
        with quiet_transformers():
            model.save_pretrained(staging)
            tokenizer.save_pretrained(staging)
        with open(staging / "vocab.txt", "w", encoding="utf-8") as fh:  # as the hub checkpoint has
            fh.writelines(f"{tok}\n" for tok in sorted(vocab, key=vocab.__getitem__))
    return out


FIXTURE_WRITERS: dict[str, Callable[[Path, int], Path]] = {"clip": write_tiny_clip, "lxmert": write_tiny_lxmert}
"""Fixture writers by model name, for ``probe fixtures model NAME --out DIR --seed S``."""


# -- UNITER ----------------------------------------------------------------------------------------
#
# ``write_tiny_uniter`` layout (``out/``), the files the official UNITER release ships::
#
#     uniter.pt               plain {name: tensor} dict, float16, legacy (non-zip) torch pickle:
#                             uniter.* body, itm_output (or rank_output), pretraining heads
#     uniter.json             the official config keys only: hidden 32, 2 layers, 2 heads, 64
#     tokenizer/              cased BERT WordPiece tokenizer (save_pretrained) + vocab.txt
#     VLPROBE_FIXTURE.json    {"kind": "uniter", "seed": ..., "score_head": ..., ...}

_BERT_SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
_UNITER_EXTRA_WORDS = """
diamond higher lower than picture there is to the in of big small left right above below
The A An There In
""".split()
_WORDPIECE_SUFFIXES = ("##s", "##es", "##ed", "##ing", "##er", "##est", "##ly", "##'s")
_UNITER_CONFIG = {
    "attention_probs_dropout_prob": 0.1,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "hidden_size": 32,
    "initializer_range": 0.02,
    "intermediate_size": 64,
    "max_position_embeddings": 512,
    "num_attention_heads": 2,
    "num_hidden_layers": 2,
    "type_vocab_size": 2,
}
_REGION_LABELS = 1601  # Visual Genome 1600 objects + background: the region_classifier width


def uniter_vocab() -> list[str]:
    """Tokens of the tiny cased WordPiece vocabulary, in id order.

    The five BERT specials (``[PAD]`` = 0), ASCII punctuation and digits, upper- and lower-case
    letters, the same as ``##`` continuation pieces (so any ASCII word tokenizes without
    ``[UNK]``), a few suffix pieces, then whole words: every word of the synthetic dataset's
    captions and variants (:mod:`vlprobe.data.synthetic`) and the common caption words.
    """
    from vlprobe.data.synthetic import COLORS, RELATIONS, SHAPES

    chars = [chr(c) for c in range(33, 127) if not chr(c).isalnum()]
    chars += [chr(c) for c in range(ord("0"), ord("9") + 1)]
    chars += [chr(c) for c in range(ord("A"), ord("Z") + 1)] + [chr(c) for c in range(ord("a"), ord("z") + 1)]
    pieces = ["##" + c for c in chars if c.isalnum()]
    words = [*_WORDS, *COLORS, *SHAPES, *(w for r in RELATIONS for w in r.split()), *_UNITER_EXTRA_WORDS]
    tokens: dict[str, None] = dict.fromkeys([*_BERT_SPECIALS, *chars, *pieces, *_WORDPIECE_SUFFIXES, *words])
    return list(tokens)


def _uniter_fixture_state(config: dict, vocab_size: int, seed: int, score_head: str) -> dict:
    """Random float16 tensors under the official key names (body, score heads, pretraining heads)."""
    import torch

    from vlprobe.extract.models.uniter.model import official_key_shapes

    shapes = official_key_shapes({**config, "vocab_size": vocab_size}, "itm")
    h = config["hidden_size"]
    gen = torch.Generator().manual_seed(seed)

    def draw(name: str, shape: tuple[int, ...]) -> torch.Tensor:
        # Non-trivial LayerNorms and biases, so a wrongly mapped tensor changes the outputs.
        noise = torch.randn(shape, generator=gen)
        if "LayerNorm" in name or "layer_norm" in name:
            return 1.0 + 0.1 * noise if name.endswith("weight") else 0.1 * noise
        if name.endswith("bias"):
            return 0.1 * noise
        scale = 0.5 if name.startswith("itm_output") else 0.1
        return scale * noise

    state = {name: draw(name, shape) for name, shape in shapes.items()}
    if score_head == "rank":
        # Retrieval fine-tuning initialises rank_output from the "match" row of itm_output and
        # trains it; the fine-tuned file keeps both heads.
        state["rank_output.weight"] = state["itm_output.weight"][1:].clone() + 0.1 * torch.randn((1, h), generator=gen)
        state["rank_output.bias"] = state["itm_output.bias"][1:].clone()
    else:
        # Pretraining heads of UniterForPretraining (ignored by vlprobe); the MLM decoder and the
        # feature regressor are tied to the word embeddings and img_linear, as in the real file.
        img_dim = shapes["uniter.img_embeddings.img_linear.weight"][1]
        heads = {
            "cls.predictions.bias": (vocab_size,),
            "cls.predictions.transform.dense.weight": (h, h),
            "cls.predictions.transform.dense.bias": (h,),
            "cls.predictions.transform.LayerNorm.weight": (h,),
            "cls.predictions.transform.LayerNorm.bias": (h,),
            "feat_regress.bias": (img_dim,),
            "feat_regress.net.0.weight": (h, h),
            "feat_regress.net.0.bias": (h,),
            "feat_regress.net.2.weight": (h,),
            "feat_regress.net.2.bias": (h,),
            "region_classifier.net.0.weight": (h, h),
            "region_classifier.net.0.bias": (h,),
            "region_classifier.net.2.weight": (h,),
            "region_classifier.net.2.bias": (h,),
            "region_classifier.net.3.weight": (_REGION_LABELS, h),
            "region_classifier.net.3.bias": (_REGION_LABELS,),
        }
        state.update({name: draw(name, shape) for name, shape in heads.items()})
        state["cls.predictions.decoder.weight"] = state["uniter.embeddings.word_embeddings.weight"].clone()
        state["feat_regress.weight"] = state["uniter.img_embeddings.img_linear.weight"].clone()
    return {k: v.to(torch.float16) for k, v in state.items()}


def _legacy_layer_norm_names(state: dict) -> dict:
    """Old BERT names (``gamma``/``beta``) for the text-side LayerNorms: embeddings and blocks."""
    out = {}
    for key, value in state.items():
        if key.startswith(("uniter.embeddings.", "uniter.encoder.")) and ".LayerNorm." in key:
            head, _, last = key.rpartition(".")
            key = f"{head}.{'gamma' if last == 'weight' else 'beta'}"
        out[key] = value
    return out


def write_tiny_uniter(
    out: str | os.PathLike[str],
    seed: int = 0,
    *,
    score_head: str = "itm",
    legacy_layer_norm_names: bool = True,
) -> Path:
    """Write a tiny random-initialised UNITER checkpoint in the official release format.

    ``uniter.pt`` loads with :meth:`vlprobe.extract.models.uniter.model.UniterModel.from_official` (and
    ``torch.load(..., weights_only=True)``), ``uniter.json`` with :class:`UniterConfig`, and
    ``tokenizer/`` with ``AutoTokenizer.from_pretrained`` (a cased ``BertTokenizer``). Hidden 32,
    2 layers, 2 heads, intermediate 64, 2048-d region features, vocabulary
    :func:`uniter_vocab` (its size is the config's ``vocab_size``). Weights are float16, drawn
    from a private generator seeded with ``seed``; LayerNorms and biases are random too.

    Parameters
    ----------
    out : str or os.PathLike
        Target directory: new, empty, or a previous tiny-uniter fixture (overwritten).
    seed : int
        Seed for the random weights, ``>= 0``.
    score_head : {"itm", "rank"}
        ``itm``: a pretrained checkpoint (``itm_output`` plus the ignored pretraining heads
        ``cls.*``, ``feat_regress.*``, ``region_classifier.*``); ``rank``: a retrieval-fine-tuned
        one (``itm_output`` and ``rank_output``, no pretraining heads).
    legacy_layer_norm_names : bool
        Store the text-side LayerNorms as ``gamma``/``beta`` (old BERT names, which the official
        loader renames) and the image-side ones as ``weight``/``bias``, so loading exercises both.

    Returns
    -------
    Path
        ``out`` as a path.
    """
    _check_seed(seed)
    if score_head not in ("itm", "rank"):
        raise ValueError(f"score_head must be 'itm' or 'rank', got {score_head!r}")
    out = Path(out)
    overwrite = _prepare_out(out, "uniter")

    import torch
    from transformers import BertTokenizer

    vocab = {tok: i for i, tok in enumerate(uniter_vocab())}
    tokenizer = BertTokenizer(vocab=vocab, do_lower_case=False, model_max_length=512)
    if len(tokenizer) != len(vocab):
        raise RuntimeError("tiny UNITER tokenizer size differs from its vocabulary")
    config = {**_UNITER_CONFIG, "vocab_size": len(vocab)}
    state = _uniter_fixture_state(config, len(vocab), seed, score_head)
    if legacy_layer_norm_names:
        state = _legacy_layer_norm_names(state)

    with _staged(
        out, overwrite, "uniter", seed, score_head=score_head, legacy_layer_norm_names=legacy_layer_norm_names
    ) as staging:
        # The released files predate torch's zip format; torch.load reads both.
        torch.save(state, staging / "uniter.pt", _use_new_zipfile_serialization=False)
        with open(staging / "uniter.json", "w", encoding="utf-8") as fh:
            json.dump(dict(sorted(config.items())), fh, indent=2)
            fh.write("\n")
        with quiet_transformers():
            tokenizer.save_pretrained(staging / "tokenizer")
        with open(staging / "tokenizer" / "vocab.txt", "w", encoding="utf-8") as fh:
            fh.writelines(f"{tok}\n" for tok in vocab)
    return out


FIXTURE_WRITERS["uniter"] = write_tiny_uniter


def _text_fixture(name: str) -> Callable[[Path, int], Path]:
    """A writer from :mod:`vlprobe.extract.text_fixtures`, imported when called (blind baselines)."""

    def write(out: Path, seed: int = 0) -> Path:
        from vlprobe.extract import text_fixtures

        return getattr(text_fixtures, name)(out, seed)

    write.__doc__ = f"See vlprobe.extract.text_fixtures.{name}."
    return write


FIXTURE_WRITERS.update({
    "blind-lm": _text_fixture("write_tiny_gpt2"),            # tiny GPT-2 causal LM
    "blind-grammar": _text_fixture("write_tiny_bert_classifier"),  # tiny BERT classifier
})
