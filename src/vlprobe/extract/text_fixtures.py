"""Tiny random text-only checkpoints for the blind baselines, in the real Hugging Face formats.

``write_tiny_gpt2`` (``probe fixtures model blind-lm``) layout::

    config.json, model.safetensors   GPT2LMHeadModel: 2 layers, width 32, 4 heads, 128 positions
    vocab.json, merges.txt, tokenizer.json, tokenizer_config.json
                                     byte-level BPE: the 256 byte characters, merges learned from
                                     a small caption word list, then <|endoftext|> (bos = eos)
    VLPROBE_FIXTURE.json

``write_tiny_bert_classifier`` (``probe fixtures model blind-grammar``) layout::

    config.json, model.safetensors   BertForSequenceClassification: 2 layers, width 32,
                                     2 labels, id2label {0: "unacceptable", 1: "acceptable"}
    vocab.txt, tokenizer.json, tokenizer_config.json
                                     lower-cased WordPiece: [PAD] [UNK] [CLS] [SEP] [MASK], the
                                     caption words, single characters and their ## forms
    VLPROBE_FIXTURE.json

Weights are drawn from a private seeded RNG: the same seed writes the same weights. They are
random: these models test code paths, never results.
"""

from __future__ import annotations

import json
import os
import string
from pathlib import Path
from typing import Any

from vlprobe.extract.fixtures import (
    _WORDS,
    _check_seed,
    _prepare_out,
    _staged,
    bytes_to_unicode,
    learn_bpe,
    seeded_model,
)
from vlprobe.extract.models.hf import quiet_transformers

__all__ = ["write_tiny_bert_classifier", "write_tiny_gpt2"]

_EOT = "<|endoftext|>"
_EOW = "</w>"


def _gpt2_vocab() -> tuple[dict[str, int], list[tuple[str, str]]]:
    """GPT-2-style vocabulary: byte characters, merges over space-prefixed words, <|endoftext|>.

    The merges come from :func:`learn_bpe` over the words with a leading space (GPT-2 marks a
    word start, not a word end); its end-of-word suffix is dropped and repeated merges kept once.
    """
    vocab = {c: i for i, c in enumerate(bytes_to_unicode().values())}
    merges: list[tuple[str, str]] = []
    for a, b in learn_bpe([" " + w for w in _WORDS]):
        a, b = a.replace(_EOW, ""), b.replace(_EOW, "")
        if a in vocab and b in vocab and a + b not in vocab:
            merges.append((a, b))
            vocab[a + b] = len(vocab)
    vocab[_EOT] = len(vocab)
    return vocab, merges


def _stage(out: Path, kind: str, seed: int, model: Any, tokenizer: Any, files: dict[str, str]) -> Path:
    """Save ``model``, ``tokenizer`` and the text ``files`` (name -> content) as a fixture in ``out``."""
    with _staged(out, _prepare_out(out, kind), kind, seed) as staging:
        with quiet_transformers():
            model.save_pretrained(staging)
            tokenizer.save_pretrained(staging)
        for name, text in files.items():
            (staging / name).write_text(text, encoding="utf-8")
    return out


def write_tiny_gpt2(out: str | os.PathLike[str], seed: int = 0) -> Path:
    """Write a tiny random GPT-2 causal LM (for ``--model blind-lm``); see the module docstring.

    Parameters
    ----------
    out : path
        New or empty directory, or a previous tiny-gpt2 fixture (overwritten).
    seed : int
        Seed of the weights, >= 0.

    Returns
    -------
    Path
    """
    _check_seed(seed)
    from transformers import GPT2Config, GPT2LMHeadModel, GPT2Tokenizer

    vocab, merges = _gpt2_vocab()
    tokenizer = GPT2Tokenizer(vocab=vocab, merges=merges, bos_token=_EOT, eos_token=_EOT, unk_token=_EOT,
                              model_max_length=128)
    config = GPT2Config(
        vocab_size=len(vocab), n_positions=128, n_embd=32, n_layer=2, n_head=4,
        bos_token_id=vocab[_EOT], eos_token_id=vocab[_EOT],
    )
    model = seeded_model(GPT2LMHeadModel, config, seed)
    files = {
        "vocab.json": json.dumps(vocab, ensure_ascii=False),
        "merges.txt": "#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges),
    }
    return _stage(Path(out), "gpt2", seed, model, tokenizer, files)


def write_tiny_bert_classifier(out: str | os.PathLike[str], seed: int = 0) -> Path:
    """Write a tiny random BERT sequence classifier (for ``--model blind-grammar``).

    Two labels, ``id2label = {0: "unacceptable", 1: "acceptable"}`` (CoLA's meaning); see the
    module docstring for the layout.

    Parameters
    ----------
    out : path
        New or empty directory, or a previous tiny-bert-classifier fixture (overwritten).
    seed : int
        Seed of the weights, >= 0.

    Returns
    -------
    Path
    """
    _check_seed(seed)
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    chars = string.ascii_lowercase + string.digits + string.punctuation
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *dict.fromkeys(_WORDS), *chars, *(f"##{c}" for c in chars)]
    vocab = {t: i for i, t in enumerate(dict.fromkeys(tokens))}
    tokenizer = BertTokenizer(vocab=vocab, do_lower_case=True, model_max_length=64)
    config = BertConfig(
        vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=64, num_labels=2,
        id2label={0: "unacceptable", 1: "acceptable"}, label2id={"unacceptable": 0, "acceptable": 1},
        pad_token_id=0,
    )
    model = seeded_model(BertForSequenceClassification, config, seed)
    files = {"vocab.txt": "".join(f"{t}\n" for t in vocab)}
    return _stage(Path(out), "bert-classifier", seed, model, tokenizer, files)
