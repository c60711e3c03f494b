"""Qwen2-VL (Wang et al. 2024) through ``transformers.Qwen2VLForConditionalGeneration``: a vision
transformer at the image's own resolution, a patch merger, and a Qwen2 language model with
multimodal rotary positions (M-RoPE).

A generative model (:mod:`vlprobe.extract.models.generative`: the joint sequence, the streams
``caption``, ``image``, ``joint``, the scores and the positions recorded). Checkpoints in the
Hugging Face layout (``Qwen/Qwen2-VL-2B-Instruct``, ``Qwen/Qwen2-VL-7B-Instruct``): ``config.json``
(``model_type`` ``qwen2_vl``), the weights, the tokenizer, ``preprocessor_config.json`` (a
Qwen2-VL image processor, loaded on its PIL backend) and the chat template.

Image tokens: the processor resizes each image to multiples of ``patch_size x merge_size`` pixels
within ``min_pixels``..``max_pixels`` (keeping its aspect ratio), so images of different sizes
have different numbers of tokens (``grid_h x grid_w / merge_size^2``); their positions are
(temporal, height, width) triples (``get_rope_index`` of the model), the text's run on after them.

Defaults (load options) follow t2v_metrics' VQAScore for Qwen2-VL (``qwen2-vl-2b``/``-7b``;
t2v_metrics' ``models/vqascore_models/qwen2vl_model.py``): no system message of vlprobe's (the
template's own, ``You are a helpful assistant.``), ``answer_tokens="first"``: P(first token of
``Yes``) from the next-token distribution after ``<|im_start|>assistant\\n``, and:

* ``question``: the wording of t2v_metrics version ``t2v_metrics`` (:data:`T2V_QWEN2_VL_QUESTIONS`):
  ``3.0`` (the PyPI release, git 7c06208; the wording since 2025-02-20): ``Does this image show
  "{}"?``; ``2.1`` (git c4c68fa, 2025-11-02, to 10d549b; the first Qwen2-VL code of 2024-10-27
  had it too): ``Does this image show "{}"? Answer the question with Yes or No``; ``3.1`` (git
  74c7208, 2026-06-04, where Qwen2-VL is commented out as legacy): ``Does this figure show "{}"?
  Please answer Yes or No.``
* ``softmax="t2v_metrics"``: t2v_metrics reads P(Yes) from ``generate(max_new_tokens=1,
  do_sample=False, output_scores=True)``; those scores are the logits after the logits
  processors the checkpoint's ``generation_config.json`` asks for in greedy decoding: its
  ``repetition_penalty`` (1.05 in Qwen2-VL-Instruct) over every token of the prompt, the image
  placeholders included (its ``temperature``, ``top_k`` and ``top_p`` act only when sampling).
  vlprobe applies that penalty with transformers' own processor to each scored token's logits,
  given the tokens before it; a ``generation_config`` that asks for another greedy processor is
  refused with ``softmax=t2v_metrics``. ``raw``: the head's logits as they come.

Image tokens: t2v_metrics' path resizes each image with ``qwen_vl_utils.process_vision_info``
(28-pixel multiples within 3136..12845056 pixels), then the processor resizes within its
``min_pixels``/``max_pixels`` (the same bounds in Qwen2-VL-Instruct, so it keeps that size);
vlprobe gives the image to the processor alone.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from vlprobe.extract.models.base import ReferenceCheckpoint
from vlprobe.extract.models.generative import GenerativeImages, GenerativeVLM, _Batch
from vlprobe.validation import InputError

__all__ = ["T2V_QWEN2_VL_QUESTION", "T2V_QWEN2_VL_QUESTIONS", "Qwen2VLAdapter", "greedy_processors", "pixel_bounds"]

#: t2v_metrics' VQAScore question for Qwen2-VL in its PyPI release 3.0.
T2V_QWEN2_VL_QUESTION = 'Does this image show "{}"?'
#: t2v_metrics version -> its Qwen2-VL question (module docstring).
T2V_QWEN2_VL_QUESTIONS = {
    "3.0": T2V_QWEN2_VL_QUESTION,
    "2.1": 'Does this image show "{}"? Answer the question with Yes or No',
    "3.1": 'Does this figure show "{}"? Please answer Yes or No.',
}
#: Generation-config fields that add a logits processor in greedy decoding, with their "off" values;
#: only ``repetition_penalty`` is applied (:meth:`Qwen2VLAdapter._t2v_metrics_logits`).
_GREEDY_PROCESSORS: dict[str, tuple[Any, ...]] = {
    "repetition_penalty": (None, 1.0), "encoder_repetition_penalty": (None, 1.0),
    "no_repeat_ngram_size": (None, 0), "bad_words_ids": (None,), "sequence_bias": (None,),
    "min_length": (None, 0), "min_new_tokens": (None, 0), "forced_bos_token_id": (None,),
    "forced_eos_token_id": (None,), "suppress_tokens": (None,), "begin_suppress_tokens": (None,),
    "exponential_decay_length_penalty": (None,), "renormalize_logits": (None, False), "guidance_scale": (None, 1.0),
}


def greedy_processors(generation_config: Any) -> dict[str, Any]:
    """The fields of a ``GenerationConfig`` that add a logits processor to greedy decoding, with
    their values (the fields at their "off" values left out)."""
    out = {}
    for name, off in _GREEDY_PROCESSORS.items():
        value = getattr(generation_config, name, None)
        if not any(value is o or value == o for o in off):
            out[name] = value
    return out


class Qwen2VLAdapter(GenerativeVLM):
    """Qwen2-VL generative model (HF checkpoints); VQAScore or caption log-prob; streams caption, image, joint."""

    name = "qwen2-vl"
    model_types = ("qwen2_vl",)
    reference_checkpoint = ReferenceCheckpoint(
        "Qwen/Qwen2-VL-7B-Instruct", source="Qwen2-VL-7B-Instruct, the model t2v_metrics scores as qwen2-vl-7b")
    defaults: ClassVar[dict[str, str]] = {
        "score": "vqascore", "answer": "Yes", "answer_tokens": "first", "system": "", "caption_prompt": "",
    }
    questions: ClassVar[dict[str, str]] = T2V_QWEN2_VL_QUESTIONS
    needed = ("model.visual.", "model.language_model.")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        found = greedy_processors(self.model.generation_config)
        self.repetition_penalty = float(found.pop("repetition_penalty", 1.0))
        if found and self.softmax == "t2v_metrics":
            name, value = next(iter(found.items()))
            raise InputError(f"softmax: the checkpoint's generation_config sets {name}={value!r}, a logits processor "
                             "vlprobe does not apply (it applies repetition_penalty); use softmax=raw")

    @classmethod
    def model_class(cls) -> Any:
        from transformers import Qwen2VLForConditionalGeneration

        return Qwen2VLForConditionalGeneration

    def _image_features(self, images: list[Any]) -> tuple[list[torch.Tensor], dict[str, torch.Tensor]]:
        got = self.processor(images=images, return_tensors="pt")
        visual = self.model.model.visual
        dev = next(visual.parameters()).device
        grid = got["image_grid_thw"]
        out = self.model.model.get_image_features(got["pixel_values"].to(dev, self.dtype), grid.to(dev))
        return list(out.pooler_output), {"image_grid_thw": grid}

    def _position_ids(self, batch: _Batch, images: GenerativeImages, device: torch.device) -> torch.Tensor | None:
        """M-RoPE positions (3, B, T): each image's (t, h, w) grid, the text counting on after it.

        ``get_rope_index`` is called by keyword: its parameters changed within transformers 5 (the
        image tokens' type ids, ``mm_token_type_ids``, came in second place); they are passed where
        it takes them.
        """
        import inspect

        ids, mask = batch.ids.to(device), batch.mask.to(device)
        grid = images.extra["image_grid_thw"][torch.from_numpy(batch.image_rows)].to(device)
        rope_index = self.model.model.get_rope_index
        kwargs: dict[str, Any] = {"input_ids": ids, "image_grid_thw": grid, "attention_mask": mask}
        if "mm_token_type_ids" in inspect.signature(rope_index).parameters:
            kwargs["mm_token_type_ids"] = (ids == self.image_token_id).int()
        positions, _ = rope_index(**kwargs)
        return positions

    def _t2v_metrics_logits(self, logits: torch.Tensor, ids: torch.Tensor, first: int) -> torch.Tensor:
        if self.repetition_penalty == 1.0:
            return logits
        from transformers.generation import RepetitionPenaltyLogitsProcessor

        penalty = RepetitionPenaltyLogitsProcessor(self.repetition_penalty)
        return torch.cat([penalty(ids[None, : first + k], logits[k : k + 1].clone()) for k in range(logits.shape[0])])

    def softmax_detail(self) -> str:
        if self.softmax == "raw" or self.repetition_penalty == 1.0:
            return super().softmax_detail()
        return (f"the head's {int(self.model.lm_head.weight.shape[0])} rows after generation_config's "
                f"repetition_penalty={self.repetition_penalty:g} over the tokens before")

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            **pixel_bounds(self.processor),
            "merge_size": int(self.model.config.vision_config.spatial_merge_size),
        }


def pixel_bounds(processor: Any) -> dict[str, int]:
    """``min_pixels`` and ``max_pixels`` of a Qwen2-VL image processor: its attributes of that name
    where it has them, else its ``size`` (transformers 5 keeps them there as ``shortest_edge`` and
    ``longest_edge``).

    Raises
    ------
    InputError
        The processor has neither.
    """
    size = getattr(processor, "size", None)
    out = {}
    for name, key in (("min_pixels", "shortest_edge"), ("max_pixels", "longest_edge")):
        value = getattr(processor, name, None)
        if value is None and size is not None:
            value = size.get(key) if isinstance(size, dict) else getattr(size, key, None)
        if value is None:
            raise InputError(f"checkpoint: its image processor {type(processor).__name__} has no {name} (nor a size "
                             f"{key})")
        out[name] = int(value)
    return out
