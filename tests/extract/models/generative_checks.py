"""Checks shared by the generative models' test modules (``test_llava.py``, ``test_qwen2_vl.py``):
each score against an independent computation from the model's own logits, the recorded positions,
and the input checks of the load options.

The independent computation builds each pair's input the way transformers' own examples do (the
prompt rendered by the chat template, the image placeholder repeated once per image feature, the
pixels from the image processor), runs the model's plain ``forward`` on one pair at a time, and
reads the log-softmax of its logits; the adapter builds the joint sequence itself, batches pairs
of different lengths with right padding and runs the language model on its own embeddings. Both
are float32 on the same weights: they agree to 1e-5 (absolute, on probabilities) / 1e-4 (on mean
log-probabilities), the differences being summation orders of padded vs unpadded batches.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from vlprobe.extract.models.generative import POSITION_COLUMNS, GenerativeVLM

CAPTIONS = ["a red circle left of a blue square", "a square", "two green triangles above a small yellow star"]
#: Probabilities (VQAScore) and mean log-probabilities from two float32 paths (module docstring).
PROB_ATOL, LOGPROB_ATOL = 1e-5, 1e-4


def images(n: int = 3) -> list[Image.Image]:
    """Seeded RGB images of different sizes and aspect ratios."""
    sizes = [(40, 48), (32, 32), (50, 36), (45, 45)]
    return [Image.fromarray(np.random.default_rng(i).integers(0, 256, size=(*sizes[i % 4], 3), dtype=np.uint8))
            for i in range(n)]


def adapter_scores(adapter: GenerativeVLM, pairs: list[tuple[int, int]], pics: list[Image.Image]) -> tuple[np.ndarray, np.ndarray]:
    """(scores, positions) of the pairs (caption t, image i) in one batch through the adapter."""
    texts = adapter.prepare_texts(CAPTIONS)
    table = adapter.prepare_images(pics)
    t = np.asarray([p[0] for p in pairs])
    i = np.asarray([p[1] for p in pairs])
    out = adapter.encode_pairs(texts, table, t, i, None, ())
    assert out.positions is not None
    return out.scores.numpy().astype(np.float64), out.positions.numpy()


def reference_inputs(
    adapter: GenerativeVLM, caption: str, image: Image.Image, n_image_tokens: int, pixels: Callable[[Image.Image], dict[str, Any]],
) -> tuple[torch.Tensor, dict[str, Any], list[int]]:
    """One pair's input to the model's own ``forward``: ``input_ids`` (1, T) (the prompt, then the
    scored tokens), the image keyword arguments, and the scored tokens.

    ``pixels(image)`` gives the model's image keyword arguments (``pixel_values``, ...). The prompt
    is the chat template's rendering (no vlprobe code but the template's messages), followed by the
    scored tokens: the answer's (VQAScore) or the caption's (caption log-prob).
    """
    tok = adapter.tokenizer
    if adapter.score == "vqascore":
        question = adapter.question.replace("{}", caption)
        content: list[dict[str, Any]] = [{"type": "image"}, {"type": "text", "text": question}]
        answer = tok(adapter.answer, add_special_tokens=False)["input_ids"]
        scored = answer[:1] if adapter.answer_tokens == "first" else [*answer, tok.eos_token_id]
    else:
        content = [{"type": "image"}] + ([{"type": "text", "text": adapter.caption_prompt}] if adapter.caption_prompt else [])
        scored = tok(caption, add_special_tokens=False)["input_ids"]
    messages = ([{"role": "system", "content": [{"type": "text", "text": adapter.system}]}] if adapter.system else [])
    messages.append({"role": "user", "content": content})
    prompt = tok.apply_chat_template(messages, chat_template=adapter.chat_template, tokenize=False, add_generation_prompt=True)
    placeholder = tok.convert_ids_to_tokens(adapter.image_token_id)
    prompt = prompt.replace(placeholder, placeholder * n_image_tokens)
    ids = tok(prompt, add_special_tokens=not prompt.startswith(tok.bos_token or "\0"))["input_ids"]
    input_ids = torch.tensor([[*ids, *scored]])
    extra = pixels(image)
    if "image_grid_thw" in extra:  # Qwen2-VL: M-RoPE needs the image tokens' type ids
        extra["mm_token_type_ids"] = (input_ids == adapter.image_token_id).int()
    return input_ids, extra, list(scored)


def forward_logprobs(adapter: GenerativeVLM, input_ids: torch.Tensor, extra: dict[str, Any], scored: list[int]) -> np.ndarray:
    """Log-probabilities of the scored tokens (which end ``input_ids``) from the model's own forward,
    under the adapter's ``softmax`` (:func:`t2v_metrics_logits`)."""
    with torch.no_grad():
        logits = adapter.model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), **extra).logits[0]
    first = input_ids.shape[1] - len(scored) - 1
    out = []
    for k, s in enumerate(scored):
        row = logits[first + k].float()
        if adapter.softmax == "t2v_metrics":
            row = t2v_metrics_logits(adapter, row, input_ids[0, : first + k + 1])
        out.append(float(torch.log_softmax(row, dim=-1)[s]))
    return np.asarray(out)


def t2v_metrics_logits(adapter: GenerativeVLM, row: torch.Tensor, before: torch.Tensor) -> torch.Tensor:
    """One next-token logit row as t2v_metrics' softmax saw it, written here from the facts, not
    from vlprobe's code: LLaVA-1.5 (its original model) over the text vocabulary, the ids below
    ``image_token_index`` (the llava-hf conversion appended ``<image>``, ``<pad>`` and padding rows
    after it); Qwen2-VL (``generate``'s scores) with the generation config's repetition penalty:
    each token in ``before`` has its logit divided by the penalty when positive, multiplied when
    negative."""
    if adapter.name == "llava":
        return row[: int(adapter.model.config.image_token_id)]
    penalty = float(adapter.model.generation_config.repetition_penalty or 1.0)
    out = row.clone()
    for t in set(before.tolist()):
        out[t] = out[t] * penalty if out[t] < 0 else out[t] / penalty
    return out


def reference_logprobs(
    adapter: GenerativeVLM, caption: str, image: Image.Image, n_image_tokens: int, pixels: Callable[[Image.Image], dict[str, Any]],
) -> np.ndarray:
    """Log-probabilities of the scored tokens of one pair from the model's own forward and logits
    (:func:`reference_inputs`, :func:`forward_logprobs`)."""
    return forward_logprobs(adapter, *reference_inputs(adapter, caption, image, n_image_tokens, pixels))


def check_scores_match_reference(adapter: GenerativeVLM, pixels: Callable[[Image.Image], dict[str, Any]]) -> np.ndarray:
    """The adapter's scores of pairs of different lengths in one batch equal the reference's; returns them."""
    pics = images(3)
    pairs = [(0, 0), (1, 0), (2, 2), (1, 1)]
    got, positions = adapter_scores(adapter, pairs, pics)
    n_img = positions[:, POSITION_COLUMNS.index("image_stop")] - positions[:, POSITION_COLUMNS.index("image_start")]
    for k, (t, i) in enumerate(pairs):
        lp = reference_logprobs(adapter, CAPTIONS[t], pics[i], int(n_img[k]), pixels)
        if adapter.score == "vqascore":
            np.testing.assert_allclose(got[k], np.exp(lp.mean()), atol=PROB_ATOL, rtol=0)
        else:
            np.testing.assert_allclose(got[k], lp.mean(), atol=LOGPROB_ATOL, rtol=0)
    return got


def check_positions(adapter: GenerativeVLM) -> None:
    """Positions: the image tokens hold the placeholder, the caption's tokens are the caption's,
    the scored tokens end the sequence and the answer position precedes them."""
    texts = adapter.prepare_texts(CAPTIONS)
    pics = images(3)
    table = adapter.prepare_images(pics)
    t, i = np.array([0, 1, 2]), np.array([0, 1, 2])
    batch = adapter._batch(texts, table, t, i)
    col = {c: batch.positions[:, k] for k, c in enumerate(POSITION_COLUMNS)}
    for r in range(3):
        ids = batch.ids[r].tolist()
        assert col["length"][r] == int(batch.mask[r].sum())
        a, b = col["image_start"][r], col["image_stop"][r]
        assert b - a == table.n_tokens[i[r]] and set(ids[a:b]) == {adapter.image_token_id}
        assert adapter.image_token_id not in ids[:a] + ids[b:col["length"][r]]
        caption = adapter.tokenizer.decode(ids[col["caption_start"][r]:col["caption_stop"][r]]).strip().strip('"')
        assert caption == CAPTIONS[t[r]], caption
        assert col["answer"][r] == col["target_start"][r] - 1 and col["target_stop"][r] == col["length"][r]


def sharpened(src: Path, dst: Path, factor: float) -> Path:
    """A copy of a generative fixture whose head's weights are ``factor`` times larger, in its own
    shards: the random head's logits are near 0 (next-token distribution near uniform), so what
    reshapes them (a repetition penalty, left-out rows) moves the scores little; times ``factor``
    they are as spread as a trained model's."""
    import shutil

    from safetensors import safe_open
    from safetensors.torch import save_file

    shutil.copytree(src, dst)
    found = 0
    for shard in sorted(dst.glob("*.safetensors")):
        with safe_open(str(shard), "pt") as f:
            meta, weights = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}
        keys = [k for k in weights if k.endswith("lm_head.weight")]
        for k in keys:
            weights[k] = (weights[k].float() * factor).to(weights[k].dtype)
        if keys:
            save_file(weights, str(shard), metadata=meta)
        found += len(keys)
    assert found == 1, found
    return dst


def prompt_only(inputs: tuple[torch.Tensor, dict[str, Any], list[int]]) -> tuple[torch.Tensor, dict[str, Any]]:
    """:func:`reference_inputs` without the scored tokens: the prompt a ``generate`` call continues."""
    input_ids, extra, scored = inputs
    ids = input_ids[:, : input_ids.shape[1] - len(scored)]
    extra = {k: (v[:, : ids.shape[1]] if k == "mm_token_type_ids" else v) for k, v in extra.items()}
    return ids, extra
