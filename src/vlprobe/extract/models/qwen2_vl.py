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

Defaults (load options) follow t2v_metrics' VQAScore for Qwen2-VL (``qwen2-vl-2b``/``-7b``):
``question`` = ``Does this image show "{}"?``, no system message of vlprobe's (the template's own,
``You are a helpful assistant.``), and ``answer_tokens="first"``: P(first token of ``Yes``) from
the next-token distribution after ``<|im_start|>assistant\\n``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from vlprobe.extract.models.base import ReferenceCheckpoint
from vlprobe.extract.models.generative import GenerativeImages, GenerativeVLM, _Batch

__all__ = ["T2V_QWEN2_VL_QUESTION", "Qwen2VLAdapter"]

#: t2v_metrics' VQAScore question for Qwen2-VL.
T2V_QWEN2_VL_QUESTION = 'Does this image show "{}"?'


class Qwen2VLAdapter(GenerativeVLM):
    """Qwen2-VL generative model (HF checkpoints); VQAScore or caption log-prob; streams caption, image, joint."""

    name = "qwen2-vl"
    model_types = ("qwen2_vl",)
    reference_checkpoint = ReferenceCheckpoint(
        "Qwen/Qwen2-VL-7B-Instruct", source="Qwen2-VL-7B-Instruct, the model t2v_metrics scores as qwen2-vl-7b")
    defaults: ClassVar[dict[str, str]] = {
        "score": "vqascore", "question": T2V_QWEN2_VL_QUESTION, "answer": "Yes", "answer_tokens": "first",
        "system": "", "caption_prompt": "",
    }
    needed = ("model.visual.", "model.language_model.")

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
        """M-RoPE positions (3, B, T): each image's (t, h, w) grid, the text counting on after it."""
        ids, mask = batch.ids.to(device), batch.mask.to(device)
        grid = images.extra["image_grid_thw"][torch.from_numpy(batch.image_rows)].to(device)
        types = (ids == self.image_token_id).int()
        positions, _ = self.model.model.get_rope_index(ids, types, image_grid_thw=grid, attention_mask=mask)
        return positions

    def describe(self) -> dict[str, Any]:
        ip = self.processor
        return {
            **super().describe(),
            "min_pixels": int(getattr(ip, "min_pixels", 0) or 0),
            "max_pixels": int(getattr(ip, "max_pixels", 0) or 0),
            "merge_size": int(self.model.config.vision_config.spatial_merge_size),
        }
