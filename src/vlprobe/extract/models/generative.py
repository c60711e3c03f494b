"""Generative vision-language models (LLaVA, Qwen2-VL) as cross-encoders: one forward of the
language model per image-caption pair, over a *joint sequence* built with the checkpoint's own
chat template.

The joint sequence
------------------
The chat template (the checkpoint's ``chat_template``) renders a conversation: the optional system
message (load option ``system``), then a user turn holding the image and a text, then the
assistant's turn. Its image placeholder (LLaVA's ``<image>``, Qwen2-VL's ``<|image_pad|>``) is
expanded to one token per image feature (as many as the vision tower gives for that image), and
those positions take the projected image features instead of token embeddings. What follows the
assistant's turn depends on the score (load option ``score``):

``vqascore`` (default)
    The user's text is the question template (load option ``question``, ``{}`` = the caption;
    default: the family's wording in t2v_metrics version ``t2v_metrics``, :data:`T2V_METRICS`),
    the assistant's reply is the answer (load option ``answer``, ``"Yes"``). With
    ``answer_tokens="first"`` the score is P(first answer token), read from the next-token
    distribution at the *answer position* (the last token of the prompt); with
    ``answer_tokens="all+eos"`` it is exp(mean log P) of the answer's tokens followed by the
    end-of-sequence token, as t2v_metrics scores LLaVA-1.5 (``Yes</s>``). Kind ``vqascore``.
``caption-logprob``
    The user's text is ``caption_prompt`` (default: none, the image alone), the assistant's reply is
    the caption; the score is the mean log-probability of the caption's tokens given everything
    before them. Kind ``mean_caption_logprob``.

Which distribution (load option ``softmax``):

``t2v_metrics`` (default)
    The probabilities as t2v_metrics computed them, for every scored token. LLaVA-1.5: its original
    model's softmax, over the text vocabulary only (the rows below ``<image>``: the ``llava-hf``
    conversion added ``<image>``, ``<pad>`` and padding rows to 64, drawn near the mean
    embedding, which take probability mass the original never gave). Qwen2-VL: the scores of
    ``generate(output_scores=True)``, which are the logits after the checkpoint's
    ``generation_config`` logits processors (greedy decoding: its ``repetition_penalty``, 1.05 in
    Qwen2-VL-Instruct, divides the positive and multiplies the negative logits of every token
    already in the sequence, image placeholders included).
``raw``
    The softmax of the head's raw logits over all its rows.

The question wording changed between t2v_metrics versions (load option ``t2v_metrics``, recorded
with the other options in every cache): ``3.0`` (the PyPI release, default) and the others each
family lists in :attr:`GenerativeVLM.questions`.

Streams (all ``modality="pair"``: views of the one joint sequence), layers 0..L of the language
model: 0 = its input embeddings (token embeddings, with the projected image features at the
image positions), then each decoder block's output (kind ``joint``; the last *before* the final
norm):

``caption``  the caption's tokens (those whose characters overlap the caption in the rendered
             prompt; ``caption-logprob``: the reply's tokens). ``cls`` = the caption's last token
             (``cls_rule="last"``).
``image``    the image tokens; ``mean``/``max`` only.
``joint``    every token of the sequence; ``cls`` = the answer position (``cls_rule="answer"``),
             whose last-layer state the language-model head reads for the score's first token.

Patching and erasure (``probe run patch|erasure``) edit the same layers (:meth:`GenerativeVLM.layer_sites`:
the input embeddings, then each decoder block), at the stream's positions in each pair's joint
sequence (:meth:`GenerativeVLM.stream_positions`): the caption's tokens, the image tokens, every
token; the answer position is ``joint``'s ``cls``.

Positions (where the image tokens, the caption and the scored tokens sit in each pair's joint
sequence) come with every batch (:data:`POSITION_COLUMNS`) and are recorded in the cache
(``/pairs/positions``).

Batches: the caption's prompt is tokenised once per caption (:meth:`GenerativeVLM.prepare_texts`),
the vision tower and projector run once per image (:meth:`GenerativeVLM.prepare_images`); each
batch of pairs expands the placeholders, pads on the right (causal attention: no real token sees
the padding) and runs the language model once. :meth:`GenerativeVLM.pair_lengths` lets the
pair-scoring engine sort pairs by sequence length so batches pad little.

Large models: ``dtype`` ``bfloat16``/``float16``, and ``device_map="auto"`` (load option; needs the
optional ``accelerate`` package) spreads the layers over the visible GPUs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from vlprobe.extract.models.base import (
    CrossEncoder,
    PairOutput,
    StreamSpec,
    TextTable,
    check_pair_indices,
)
from vlprobe.extract.models.hf import LoadedModel, load_hf
from vlprobe.extract.models.hooks import LayerSite
from vlprobe.extract.models.pooling import TOKEN_POOLINGS, pool_states
from vlprobe.validation import InputError, check_choice

__all__ = [
    "ANSWER_TOKENS",
    "POSITION_COLUMNS",
    "SCORES",
    "SOFTMAXES",
    "T2V_METRICS",
    "GenerativeImages",
    "GenerativeTexts",
    "GenerativeVLM",
    "StreamPositions",
    "load_chat_template",
]

#: ``score`` values and the score kind each gives.
SCORES: dict[str, str] = {"vqascore": "vqascore", "caption-logprob": "mean_caption_logprob"}
#: ``answer_tokens`` values (see the module docstring).
ANSWER_TOKENS: tuple[str, ...] = ("first", "all+eos")
#: ``softmax`` values (see the module docstring).
SOFTMAXES: tuple[str, ...] = ("t2v_metrics", "raw")
#: The t2v_metrics version whose question wording is the default (the PyPI release).
T2V_METRICS = "3.0"
#: The columns of a batch's positions (each an index into the pair's joint sequence; stops are
#: exclusive): its length, the image tokens, the caption's tokens, the answer position (whose
#: next-token distribution gives the first scored token) and the scored tokens.
POSITION_COLUMNS: tuple[str, ...] = (
    "length", "image_start", "image_stop", "caption_start", "caption_stop", "answer", "target_start", "target_stop",
)
_ALLOW = ["*.json", "*.jinja", "*.txt", "*.safetensors", "*.model", "*.tiktoken"]


def load_chat_template(path: Any, tokenizer: Any, checkpoint: str) -> str:
    """A checkpoint's chat template, wherever its files keep it: ``chat_template.jinja``,
    ``chat_template.json`` (``{"chat_template": ...}``, the processor's file), the
    ``chat_template`` field of ``processor_config.json``, or the tokenizer's.

    Raises
    ------
    InputError
        The checkpoint has none (a base model, not a chat model).
    """
    import json
    from pathlib import Path

    folder = Path(path)
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    for name in ("chat_template.json", "processor_config.json"):
        f = folder / name
        if f.is_file():
            try:
                template = json.loads(f.read_text(encoding="utf-8")).get("chat_template")
            except (ValueError, AttributeError) as exc:
                raise InputError(f"checkpoint: {checkpoint!r}: {name} is not a JSON object ({exc})") from None
            if isinstance(template, str) and template:
                return template
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, str) and template:
        return template
    raise InputError(
        f"checkpoint: {checkpoint!r} has no chat template (chat_template.jinja, chat_template.json or the "
        "tokenizer's); a generative model needs its chat model's template"
    )


@dataclass
class GenerativeTexts(TextTable):
    """Every caption's prompt tokenised once (a generative model's text table).

    ``input_ids``/``attention_mask``/``lengths`` are the *caption's* tokens as they tokenise in
    the prompt (right-padded), what patching aligns; the rest is what a pair's joint sequence is
    built from.

    Attributes
    ----------
    sequences : list of ndarray of int64
        Per caption: the whole token sequence (prompt, then the scored tokens) with one image
        placeholder.
    image_at : ndarray of int, shape (N,)
        The placeholder's index in each sequence.
    caption : ndarray of int, shape (N, 2)
        The caption's tokens, [start, stop) in the sequence.
    target : ndarray of int, shape (N, 2)
        The scored tokens, [start, stop); the answer position is ``target[:, 0] - 1``.
    """

    sequences: list[np.ndarray]
    image_at: np.ndarray
    caption: np.ndarray
    target: np.ndarray


@dataclass
class GenerativeImages:
    """A block of images through the vision tower and projector once.

    Attributes
    ----------
    features : list of Tensor
        Per image, (n_i, H): the projected features that take its image positions.
    n_tokens : ndarray of int, shape (N,)
        Image tokens per image (``n_i``).
    mask : Tensor, shape (N, max n_i)
        1 for each image's real tokens (what patching the image side aligns).
    extra : dict
        Model-specific inputs of the block (Qwen2-VL: ``image_grid_thw`` (N, 3)).
    """

    features: list[torch.Tensor]
    n_tokens: np.ndarray
    mask: torch.Tensor
    extra: dict[str, torch.Tensor]

    def __len__(self) -> int:
        return len(self.features)


@dataclass
class _Batch:
    """One batch of joint sequences (right-padded) and where everything sits in them."""

    ids: torch.Tensor
    mask: torch.Tensor
    positions: np.ndarray
    image_rows: np.ndarray
    targets: list[np.ndarray]


@dataclass
class StreamPositions:
    """A stream's tokens in a batch of joint sequences (:meth:`GenerativeVLM.stream_positions`).

    Attributes
    ----------
    ids : Tensor of int64, shape (B, W)
        The token ids at the stream's positions (left-aligned, padded with the pad id).
    mask : Tensor of int64, shape (B, W)
        1 for the stream's tokens.
    cls : Tensor of int64, shape (B,), or None
        The stream's summary token, as an index into its ``W`` positions (``caption``: its last
        token; ``joint``: the answer position; ``image``: none).
    index : Tensor of int64, shape (B, W)
        Each stream position's index in the joint sequence, ``-1`` past the stream's tokens.
    width : int
        The batch's joint-sequence length (``T``, with padding).
    """

    ids: torch.Tensor
    mask: torch.Tensor
    cls: torch.Tensor | None
    index: torch.Tensor
    width: int


class GenerativeVLM(CrossEncoder):
    """Base class of generative vision-language models (see the module docstring).

    A family declares its transformers ``model_type``s, the class that loads them, the defaults
    of the prompt options (:attr:`defaults`) and the prompt's end-of-sequence handling, and
    implements :meth:`_image_features` (the vision tower and projector on a block of images) and
    :meth:`_position_ids` (its language model's positions of a batch).
    """

    image_input = "pixels"
    load_options: ClassVar[tuple[str, ...]] = (
        "score", "question", "answer", "answer_tokens", "system", "caption_prompt", "softmax", "t2v_metrics",
        "device_map",
    )
    text_table = GenerativeTexts
    #: A block of projected image features: 576 x 4096 values per image for LLaVA-1.5-7B.
    image_block = 32
    #: The transformers ``model_type``s the adapter loads.
    model_types: ClassVar[tuple[str, ...]]
    #: Defaults of the prompt's load options (``answer``, ``answer_tokens``, ``system``,
    #: ``caption_prompt``) for the family: t2v_metrics' for its VQAScore.
    defaults: ClassVar[dict[str, str]]
    #: t2v_metrics version -> the family's VQAScore question in it (the ``question`` default).
    questions: ClassVar[dict[str, str]]
    #: Weight-name prefixes the adapter reads.
    needed: ClassVar[tuple[str, ...]] = ()
    #: The family's own load options with a fixed set of values (LLaVA's ``image_pad``).
    choices: ClassVar[dict[str, tuple[str, ...]]] = {}
    position_columns = POSITION_COLUMNS
    #: The streams on a minimal pair's caption side: patching swaps captions there (the caption's
    #: tokens; the joint sequence, whose ``cls`` is the answer position), the image stays.
    text_side_streams: ClassVar[tuple[str, ...]] = ("caption", "joint")

    def __init__(self, hf: LoadedModel, chat_template: str, options: Mapping[str, str | None],
                 device_map: str | None = None) -> None:
        super().__init__(hf.checkpoint, hf.device, hf.dtype)
        self.model, self.tokenizer, self.processor = hf.model, hf.tokenizer, hf.processor
        self.chat_template = chat_template
        self.device_map = device_map
        self.options = self.check_options(**options)
        opts = self.options
        self.score = opts["score"]
        self.question, self.answer = opts["question"], opts["answer"]
        self.answer_tokens, self.system, self.caption_prompt = opts["answer_tokens"], opts["system"], opts["caption_prompt"]
        self.softmax = opts["softmax"]
        self.score_kind = SCORES[self.score]
        cfg = self.model.config
        self.image_token_id = int(cfg.image_token_id)
        tc = cfg.text_config
        self.max_length = int(tc.max_position_embeddings)
        self.pad_id = next((int(t) for t in (self.tokenizer.pad_token_id, self.tokenizer.eos_token_id, 0)
                            if t is not None), 0)
        self.eos_id = self.tokenizer.eos_token_id
        if self.score == "vqascore" and self.answer_tokens == "all+eos" and self.eos_id is None:
            raise InputError("answer_tokens: the tokenizer has no end-of-sequence token; use answer_tokens=first")
        self._answer_ids = self._answer_token_ids()
        lm = self.language_model
        h, n = int(tc.hidden_size), len(lm.layers)
        kinds = ("embed",) + ("joint",) * n
        self._streams = {
            "caption": StreamSpec("caption", "pair", kinds, h, "last", None),
            "image": StreamSpec("image", "pair", kinds, h, "none", None),
            "joint": StreamSpec("joint", "pair", kinds, h, "answer", None),
        }
        # Layer 0's site: the language model's input embeddings (token embeddings with the image
        # features in place), which no module of the model outputs; edits and recordings hook here.
        self.embedding_output = torch.nn.Identity()

    # -- options and loading -----------------------------------------------------------------------

    @classmethod
    def check_options(cls, **given: str | None) -> dict[str, str]:
        """The load options (all but ``device_map``) with the family's defaults filled in, checked.

        Raises
        ------
        InputError
            An option the family does not take, an unknown choice (``score``, ``answer_tokens``,
            ``softmax``, ``t2v_metrics``, a family's own such as LLaVA's ``image_pad``), a question
            template without exactly one ``{}``, an empty answer.
        """
        known = [k for k in cls.load_options if k != "device_map"]
        unknown = sorted(set(given) - set(known))
        if unknown:
            raise InputError(f"{unknown[0]}: {cls.name} does not take the load option {unknown[0]} "
                             f"(it takes {', '.join(cls.load_options)})")
        defaults = {"softmax": SOFTMAXES[0], "t2v_metrics": T2V_METRICS, **cls.defaults}
        out = {k: str(given[k]) if given.get(k) is not None else defaults.get(k, "") for k in known}
        out["score"] = check_choice(out["score"] or "vqascore", "score", tuple(SCORES), kind="score")
        choices = {"answer_tokens": ANSWER_TOKENS, "softmax": SOFTMAXES, "t2v_metrics": tuple(cls.questions),
                   **cls.choices}
        for k, allowed in choices.items():
            out[k] = check_choice(out[k], k, allowed)
        if given.get("question") is None:
            out["question"] = cls.questions[out["t2v_metrics"]]
        question = out["question"]
        if question.count("{}") != 1:
            raise InputError(f"question must be a template with exactly one {{}} for the caption, got {question!r}")
        if not out["answer"].strip():
            raise InputError("answer must be a non-empty text (the reply whose probability VQAScore reads)")
        return out

    @classmethod
    def load(cls, checkpoint: str, *, device: str = "auto", dtype: str = "float32", device_map: str | None = None,
             **options: str | None) -> GenerativeVLM:
        """Load the model, its tokenizer, its image processor (PIL backend) and its chat template.

        Parameters
        ----------
        device_map : str, optional
            ``"auto"`` (or another accelerate placement): spread the model over the GPUs (needs
            accelerate; ``device`` stays ``"auto"``).
        **options
            The prompt's load options, each defaulting to the family's (:attr:`defaults`):
            ``score`` (``vqascore`` | ``caption-logprob``), ``question`` (a template, one ``{}`` for
            the caption), ``answer`` (``"Yes"``), ``answer_tokens`` (``first`` | ``all+eos``),
            ``system`` (the system message; ``""``: none, or the template's own), ``caption_prompt``
            (``caption-logprob``: the user's text beside the image; ``""``: the image alone), and
            the family's own (LLaVA's ``image_pad``).
        """
        opts = cls.check_options(**options)
        hf = load_hf(
            checkpoint, cls.model_types, cls.model_class(), device=device, dtype=dtype, allow_patterns=_ALLOW,
            needed=cls.needed, image_processor=True, device_map=device_map,
        )
        template = load_chat_template(hf.checkpoint.path, hf.tokenizer, checkpoint)
        return cls(hf, template, opts, device_map)

    @classmethod
    def model_class(cls) -> Any:
        """The transformers class that loads the family's checkpoints."""
        raise NotImplementedError

    @property
    def language_model(self) -> Any:
        """The decoder (``embed_tokens``, ``layers``, ``norm``)."""
        return self.model.model.language_model

    @property
    def streams(self) -> dict[str, StreamSpec]:
        return self._streams

    def model_options(self) -> dict[str, Any]:
        return dict(self.options)

    def describe(self) -> dict[str, Any]:
        cfg = self.model.config
        score = (
            f"P({self.answer!r} first token | prompt)" if self.score == "vqascore" and self.answer_tokens == "first"
            else f"exp(mean log P({self.answer!r} tokens + eos | prompt))" if self.score == "vqascore"
            else "mean log P(caption tokens | image prompt)"
        )
        return {
            "model_class": type(self.model).__name__,
            "layers": len(self.language_model.layers),
            "hidden_size": int(cfg.text_config.hidden_size),
            "score": score,
            "answer_token_ids": [int(t) for t in self._answer_ids],
            "image_token_id": self.image_token_id,
            "tokenizer": type(self.tokenizer).__name__,
            "image_processor": type(self.processor).__name__,
            "device_map": self.device_map or "",
            "chat_template_sha256": _sha256(self.chat_template),
            "softmax_over": self.softmax_detail(),
        }

    def softmax_detail(self) -> str:
        """What the scored tokens' softmax runs over, in words (recorded with each cache)."""
        return f"the head's {int(self.model.lm_head.weight.shape[0])} rows, raw logits"

    # -- prompts -----------------------------------------------------------------------------------

    def _answer_token_ids(self) -> list[int]:
        ids = list(self.tokenizer(self.answer, add_special_tokens=False)["input_ids"])
        if not ids:
            raise InputError(f"answer: {self.answer!r} tokenises to nothing")
        if self.answer_tokens == "first":
            return ids[:1]
        return [*ids, int(self.eos_id)]

    def _messages(self, text: str | None) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        if self.system:
            messages.append({"role": "system", "content": [{"type": "text", "text": self.system}]})
        content: list[dict[str, Any]] = [{"type": "image"}]
        if text:
            content.append({"type": "text", "text": text})
        messages.append({"role": "user", "content": content})
        return messages

    def render(self, caption: str) -> tuple[str, tuple[int, int] | None]:
        """The rendered prompt of a caption (through the assistant's turn's opening) and the
        caption's character span in it (None for ``caption-logprob``: the caption is the reply)."""
        if self.score == "vqascore":
            pre, post = self.question.split("{}")
            text = pre + caption + post
        else:
            text = self.caption_prompt
        prompt = self.tokenizer.apply_chat_template(
            self._messages(text), chat_template=self.chat_template, tokenize=False, add_generation_prompt=True,
        )
        if self.score != "vqascore":
            return prompt, None
        at = prompt.rfind(text)
        if at < 0:
            raise InputError(f"question: the chat template does not render the question {text!r} verbatim")
        start = at + len(pre)
        return prompt, (start, start + len(caption))

    def _tokenize_prompt(self, prompt: str) -> tuple[list[int], list[tuple[int, int]]]:
        bos = self.tokenizer.bos_token
        special = not (bos and prompt.startswith(bos))  # a template that writes BOS itself gets no second one
        enc = self.tokenizer(prompt, add_special_tokens=special, return_offsets_mapping=True)
        return list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]

    def prepare_texts(self, texts: Sequence[str]) -> GenerativeTexts:
        """Render and tokenise every caption's prompt once (see :class:`GenerativeTexts`)."""
        seqs, image_at, caption, target = [], [], [], []
        for text in texts:
            if not isinstance(text, str) or not text.strip():
                raise InputError(f"texts: a caption must be a non-empty string, got {text!r}")
            prompt, span = self.render(text)
            ids, offsets = self._tokenize_prompt(prompt)
            at = [k for k, t in enumerate(ids) if t == self.image_token_id]
            if len(at) != 1:
                raise InputError(f"checkpoint: the chat template renders {len(at)} image placeholders (token "
                                 f"{self.image_token_id}), expected 1")
            if span is not None:
                inside = [k for k, (a, b) in enumerate(offsets) if b > a and a < span[1] and b > span[0]]
                if not inside:
                    raise InputError(f"texts: the caption {text!r} has no token in its prompt")
                cap = (inside[0], inside[-1] + 1)
                scored = self._answer_ids
            else:
                scored = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
                if not scored:
                    raise InputError(f"texts: the caption {text!r} tokenises to nothing")
                cap = (len(ids), len(ids) + len(scored))
            tgt = (len(ids), len(ids) + len(scored))
            seq = np.asarray([*ids, *scored], dtype=np.int64)
            seqs.append(seq)
            image_at.append(at[0])
            caption.append(cap)
            target.append(tgt)
        caption_arr = np.asarray(caption, dtype=np.int64).reshape(-1, 2)
        lengths = caption_arr[:, 1] - caption_arr[:, 0]
        width = int(lengths.max()) if len(lengths) else 0
        ids_t = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)
        mask_t = torch.zeros((len(seqs), width), dtype=torch.long)
        for r, (seq, (a, b)) in enumerate(zip(seqs, caption_arr, strict=True)):
            ids_t[r, : b - a] = torch.from_numpy(seq[a:b])
            mask_t[r, : b - a] = 1
        return GenerativeTexts(ids_t, mask_t, lengths, seqs, np.asarray(image_at, dtype=np.int64), caption_arr,
                               np.asarray(target, dtype=np.int64).reshape(-1, 2))

    def tokens(self, texts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        table = self.prepare_texts(list(texts))
        return table.input_ids, table.attention_mask

    # -- images ------------------------------------------------------------------------------------

    def _image_features(self, images: list[Any]) -> tuple[list[torch.Tensor], dict[str, torch.Tensor]]:
        """(per-image projected features (n_i, H), extra per-image inputs) of a block of PIL images."""
        raise NotImplementedError

    @torch.inference_mode()
    def prepare_images(self, images: Any) -> GenerativeImages:
        """The vision tower and projector over a block of RGB PIL images, once."""
        if not isinstance(images, Sequence) or hasattr(images, "features"):
            raise TypeError(f"images: {self.name} reads pixels (a sequence of PIL images), got {type(images).__name__}")
        features, extra = self._image_features(list(images))
        n = np.asarray([f.shape[0] for f in features], dtype=np.int64)
        mask = torch.zeros((len(features), int(n.max()) if len(n) else 0), dtype=torch.long)
        for r, k in enumerate(n):
            mask[r, :k] = 1
        return GenerativeImages(features, n, mask, extra)

    # -- pairs -------------------------------------------------------------------------------------

    def pair_lengths(self, texts: GenerativeTexts, images: GenerativeImages, text_idx: np.ndarray,
                     image_idx: np.ndarray) -> np.ndarray:
        """Each pair's joint-sequence length (for length-sorted batches)."""
        lens = np.asarray([len(s) for s in texts.sequences], dtype=np.int64)
        return lens[text_idx] + images.n_tokens[image_idx] - 1

    def _batch(self, texts: GenerativeTexts, images: GenerativeImages, text_idx: np.ndarray,
               image_idx: np.ndarray) -> _Batch:
        rows, positions, targets = [], [], []
        for t, i in zip(text_idx, image_idx, strict=True):
            seq, at, n = texts.sequences[t], int(texts.image_at[t]), int(images.n_tokens[i])
            rows.append(np.concatenate([seq[:at], np.full(n, self.image_token_id, dtype=np.int64), seq[at + 1:]]))
            shift = n - 1

            def moved(k: int, at: int = at, shift: int = shift) -> int:
                return k + shift if k > at else k

            (ca, cb), (ta, tb) = texts.caption[t], texts.target[t]
            positions.append((len(rows[-1]), at, at + n, moved(ca), moved(cb - 1) + 1, moved(ta) - 1, moved(ta),
                              moved(tb - 1) + 1))
            targets.append(seq[ta:tb])
        width = max(len(r) for r in rows)
        if width > self.max_length:
            raise InputError(f"texts: a joint sequence of {width} tokens exceeds the model's {self.max_length} positions")
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for r, row in enumerate(rows):
            ids[r, : len(row)] = torch.from_numpy(row)
            mask[r, : len(row)] = 1
        return _Batch(ids, mask, np.asarray(positions, dtype=np.int64).reshape(-1, len(POSITION_COLUMNS)),
                      np.asarray(image_idx, dtype=np.int64), targets)

    def _position_ids(self, batch: _Batch, images: GenerativeImages, device: torch.device) -> torch.Tensor | None:
        """Position ids of a batch for the language model (None: 0..T-1, right padding)."""
        return None

    def _stream_masks(self, batch: _Batch) -> dict[str, tuple[torch.Tensor, torch.Tensor | None]]:
        """Stream -> (token mask (B, T), cls index (B,) or None) of a batch."""
        t = batch.mask.shape[1]
        col = {c: torch.from_numpy(batch.positions[:, k]) for k, c in enumerate(POSITION_COLUMNS)}
        span = torch.arange(t)[None, :]
        caption = ((span >= col["caption_start"][:, None]) & (span < col["caption_stop"][:, None])).long()
        image = ((span >= col["image_start"][:, None]) & (span < col["image_stop"][:, None])).long()
        return {
            "caption": (caption, col["caption_stop"] - 1),
            "image": (image, None),
            "joint": (batch.mask, col["answer"]),
        }

    def layer_sites(self, stream: str) -> list[LayerSite]:
        """Where each layer's states come out, for patching and erasure: the language model's input
        embeddings (layer 0, the image features in place), then each decoder block's output.

        Every stream is a view of the one joint sequence, so the sites are the same modules for
        each; which positions an edit touches (the caption's tokens, the image tokens, the answer
        position, every token) comes with each batch from :meth:`stream_positions`.

        Raises
        ------
        InputError
            A stream the model does not have.
        """
        if stream not in self._streams:
            raise InputError(f"stream: {self.name} has streams {', '.join(self._streams)}, got {stream!r}")
        return [LayerSite(m) for m in self._sites()]

    def stream_positions(self, stream: str, texts: GenerativeTexts, images: GenerativeImages, text_idx: np.ndarray,
                         image_idx: np.ndarray) -> StreamPositions:
        """Where a stream's tokens sit in each pair's joint sequence, for the batch the plain pass of
        these pairs (:meth:`plain_pair_scores`, same order) runs.

        ``caption``: the caption's tokens (``cls`` = its last); ``image``: the image tokens (no
        ``cls``); ``joint``: every token (``cls`` = the answer position).
        """
        if stream not in self._streams:
            raise InputError(f"stream: {self.name} has streams {', '.join(self._streams)}, got {stream!r}")
        text_idx, image_idx = check_pair_indices(text_idx, image_idx)
        batch = self._batch(texts, images, text_idx, image_idx)
        mask_j, cls_j = self._stream_masks(batch)[stream]
        counts = mask_j.sum(1)
        width = int(counts.max()) if len(counts) else 0
        index = torch.full((len(counts), width), -1, dtype=torch.long)
        for r in range(len(counts)):
            at = torch.nonzero(mask_j[r], as_tuple=False)[:, 0]
            index[r, : len(at)] = at
        mask = (index >= 0).long()
        ids = torch.where(index >= 0, batch.ids.gather(1, index.clamp(min=0)), torch.full_like(index, self.pad_id))
        cls = None if cls_j is None else (index == cls_j[:, None].long()).long().argmax(1)
        return StreamPositions(ids, mask, cls, index, int(batch.ids.shape[1]))

    def _sites(self) -> list[torch.nn.Module]:
        """Layer l's module (index = layer): the embedding output, then each decoder block."""
        return [self.embedding_output, *self.language_model.layers]

    @torch.inference_mode()
    def encode_pairs(
        self, texts: GenerativeTexts, images: GenerativeImages, text_idx: np.ndarray, image_idx: np.ndarray,
        layers: Mapping[str, Sequence[int]] | None, poolings: Sequence[str],
    ) -> PairOutput:
        """Score (and optionally pool the states of) a batch of pairs.

        Returns
        -------
        PairOutput
            ``scores`` (B,); ``states[stream][pooling]`` (B, L, H) when ``layers`` is given;
            ``positions`` (B, len(POSITION_COLUMNS)) int64: where each pair's parts sit.
        """
        text_idx, image_idx = check_pair_indices(text_idx, image_idx)
        resolved = self.pair_layers(layers)
        batch = self._batch(texts, images, text_idx, image_idx)
        token = [p for p in poolings if p in TOKEN_POOLINGS]
        recorded: dict[str, dict[int, dict[str, torch.Tensor]]] = {}
        hooks = []
        if resolved:
            masks = self._stream_masks(batch)
            wanted: dict[int, list[str]] = {}
            for s, ls in resolved.items():
                recorded[s] = {}
                for layer in ls:
                    wanted.setdefault(layer, []).append(s)
            sites = self._sites()
            for layer, streams in wanted.items():

                def record(_m: Any, _a: Any, out: Any, layer: int = layer, streams: list[str] = streams) -> None:
                    h = out if isinstance(out, torch.Tensor) else out[0]
                    for s in streams:
                        mask, cls = masks[s]
                        use = [p for p in token if p != "cls" or cls is not None]
                        got = pool_states(h[:, None], mask.to(h.device), None if cls is None else cls.to(h.device), use)
                        recorded[s][layer] = {p: v[:, 0].float().cpu() for p, v in got.items()}

                hooks.append(sites[layer].register_forward_hook(record))
        try:
            logprobs = self._run(batch, images)
        finally:
            for h in hooks:
                h.remove()
        scores = self._scores(logprobs)
        states: dict[str, dict[str, torch.Tensor]] = {}
        for s, ls in (resolved or {}).items():
            names = recorded[s][ls[0]].keys() if ls else []
            states[s] = {p: torch.stack([recorded[s][layer][p] for layer in ls], dim=1) for p in names}
        return PairOutput(scores, states, {}, None, torch.from_numpy(batch.positions))

    def plain_pair_scores(self, texts: GenerativeTexts, images: GenerativeImages, text_idx: np.ndarray,
                          image_idx: np.ndarray) -> torch.Tensor:
        return self.encode_pairs(texts, images, text_idx, image_idx, None, ()).scores

    def _run(self, batch: _Batch, images: GenerativeImages) -> list[torch.Tensor]:
        """One forward of the language model over a batch; per pair the log-probabilities (float32)
        of its scored tokens."""
        lm = self.language_model
        emb_layer = lm.embed_tokens
        dev = emb_layer.weight.device
        ids, mask = batch.ids.to(dev), batch.mask.to(dev)
        emb = emb_layer(ids)
        for r, i in enumerate(batch.image_rows):
            a, b = int(batch.positions[r, 1]), int(batch.positions[r, 2])
            emb[r, a:b] = images.features[int(i)].to(emb.device, emb.dtype)
        emb = self.embedding_output(emb)
        out = lm(inputs_embeds=emb, attention_mask=mask, position_ids=self._position_ids(batch, images, dev),
                 use_cache=False)
        hidden = out.last_hidden_state
        head = self.model.lm_head
        logprobs = []
        for r, tgt in enumerate(batch.targets):
            a, b = int(batch.positions[r, 6]), int(batch.positions[r, 7])
            h = hidden[r, a - 1 : b - 1].to(head.weight.device)
            logits = head(h).float()
            if self.softmax == "t2v_metrics":
                logits = self._t2v_metrics_logits(logits, batch.ids[r, :b].to(logits.device), a)
                if int(tgt.max()) >= logits.shape[1]:
                    raise InputError(f"texts: a scored token (id {int(tgt.max())}) is outside the {logits.shape[1]} the "
                                     "softmax=t2v_metrics distribution covers; use softmax=raw")
            lp = torch.log_softmax(logits, dim=-1)
            logprobs.append(lp.gather(1, torch.from_numpy(tgt).to(lp.device)[:, None])[:, 0].cpu())
        return logprobs

    def _t2v_metrics_logits(self, logits: torch.Tensor, ids: torch.Tensor, first: int) -> torch.Tensor:
        """The logits of a pair's scored tokens as t2v_metrics' softmax saw them (``softmax=t2v_metrics``).

        Parameters
        ----------
        logits : Tensor, shape (n, V)
            The head's logits predicting the scored tokens ``ids[first:]``.
        ids : Tensor of int64, shape (first + n,)
            The pair's joint sequence through its scored tokens (no padding).
        first : int
            Where the scored tokens start in ``ids``.
        """
        return logits

    def _scores(self, logprobs: list[torch.Tensor]) -> torch.Tensor:
        means = torch.stack([lp.mean() for lp in logprobs]) if logprobs else torch.zeros(0)
        return means.exp() if self.score == "vqascore" else means


def _sha256(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode("utf-8")).hexdigest()
