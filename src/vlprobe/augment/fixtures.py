"""Tiny random seq2seq checkpoints (Marian, BART) for testing the neural strategies offline.

``write_tiny_seq2seq(out, kind, seed)`` writes a directory that ``AutoTokenizer`` and
``AutoModelForSeq2SeqLM`` load like a downloaded checkpoint: ``config.json``,
``model.safetensors`` (seeded random weights), a word-level ``tokenizer.json`` over a small caption
vocabulary (``<pad>``, ``</s>``, ``<unk>``, ``<s>`` first) with ``tokenizer_config.json`` naming
``PreTrainedTokenizerFast``, and ``VLPROBE_FIXTURE.json``. Outputs are gibberish made of those
words: the fixtures test mechanics (counts, deduplication, determinism), never quality.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from vlprobe import __version__

__all__ = ["write_tiny_seq2seq"]

_WORDS = (
    "a an the of is are in on at to and with some two there this it picture photo left right above "
    "below under over behind near red blue green yellow black white circle square triangle small big "
    "dog dogs cat cats person man woman child people horse bird car tree house table chair cup mug "
    "grass ball sits sitting stands standing holds holding rides riding runs running eats looks"
).split()
_SPECIALS = ("<pad>", "</s>", "<unk>", "<s>")


def write_tiny_seq2seq(out: str | os.PathLike[str], kind: str = "marian", seed: int = 0) -> Path:
    """Write a tiny random encoder-decoder checkpoint with its tokenizer.

    Parameters
    ----------
    out : path
        Target directory (replaced when it holds a previous fixture).
    kind : {"marian", "bart"}
    seed : int
        Seed of the weight initialisation (``torch.Generator`` via ``torch.manual_seed`` inside a
        forked RNG state, so global random state is untouched).
    """
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import (
        BartConfig,
        BartForConditionalGeneration,
        MarianConfig,
        MarianMTModel,
        PreTrainedTokenizerFast,
    )

    if kind not in ("marian", "bart"):
        raise ValueError(f"kind must be 'marian' or 'bart', got {kind!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    target = Path(out)
    if target.exists() and any(target.iterdir()) and not (target / "VLPROBE_FIXTURE.json").is_file():
        raise ValueError(f"out: {str(target)!r} is a non-empty directory that is not a vlprobe fixture")
    vocab = {w: i for i, w in enumerate((*_SPECIALS, *dict.fromkeys(_WORDS)))}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tk.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tk, pad_token="<pad>", eos_token="</s>", unk_token="<unk>", bos_token="<s>",
    )
    common = dict(
        vocab_size=len(vocab), d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=128,
        pad_token_id=0, eos_token_id=1, bos_token_id=3, forced_eos_token_id=None,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if kind == "marian":
            model = MarianMTModel(MarianConfig(**common, decoder_start_token_id=0))
        else:
            model = BartForConditionalGeneration(BartConfig(**common, decoder_start_token_id=1))
    staging = Path(tempfile.mkdtemp(prefix=".tiny-seq2seq.", dir=target.parent if target.parent.exists() else None))
    try:
        from vlprobe.extract.models.hf import quiet_transformers

        with quiet_transformers():
            model.save_pretrained(staging)
            fast.save_pretrained(staging)
        (staging / "VLPROBE_FIXTURE.json").write_text(json.dumps(
            {"kind": f"seq2seq-{kind}", "seed": seed, "vlprobe": __version__,
             "note": "random weights: outputs are meaningless"}, indent=2, sort_keys=True) + "\n")
        if target.exists():
            shutil.rmtree(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staging, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return target
