"""LLaVA (Liu et al. 2023; LLaVA-1.5) through ``transformers.LlavaForConditionalGeneration``: a
CLIP vision tower, a projector, and a Llama/Vicuna language model over the joint sequence.

A generative model (:mod:`vlprobe.extract.models.generative`: the joint sequence, the streams
``caption``, ``image``, ``joint``, the scores and the positions recorded). Checkpoints in the
Hugging Face layout (``llava-hf/llava-1.5-7b-hf``, ``llava-hf/llava-1.5-13b-hf``): ``config.json``
(``model_type`` ``llava``), the weights, the tokenizer, ``preprocessor_config.json`` (a CLIP image
processor), and the chat template (``chat_template.json`` or ``chat_template.jinja``).

Image features: the vision tower's layer ``vision_feature_layer`` (-2 for LLaVA-1.5) without its
class token (``vision_feature_select_strategy="default"``), through ``multi_modal_projector``: 576
tokens for a 336-pixel image in 14-pixel patches.

Defaults (load options) follow t2v_metrics' VQAScore for LLaVA-1.5 (``llava-v1.5-7b``/``-13b``;
t2v_metrics' ``models/vqascore_models/llava_model.py``, which loads the original
``liuhaotian/llava-v1.5-*`` weights with LLaVA's own code and scores with its forward):

* ``question``: ``Does this figure show "{}"? Please answer yes or no.`` (every t2v_metrics
  version with LLaVA-1.5: ``t2v_metrics`` ``3.0``, ``2.1``);
* ``system``: Vicuna's system message, ``A chat between a curious user and an artificial
  intelligence assistant. ...`` (t2v_metrics' ``chat`` conversation style), so the prompt reads
  ``<system> USER: <image>\\n<question> ASSISTANT:``;
* ``answer_tokens="all+eos"``: the score is exp(mean log P) of ``Yes`` and ``</s>`` after the
  prompt, t2v_metrics' ``exp(-CrossEntropy)`` over the answer ``Yes</s>``; ``first`` gives
  P(Yes) from the next-token distribution alone;
* ``image_pad="square"``: the image is padded to a square with the processor's mean colour before
  the processor resizes it (LLaVA-1.5's ``image_aspect_ratio="pad"``, t2v_metrics'
  ``expand2square``); ``none`` leaves it to the processor's resize and centre crop;
* ``softmax="t2v_metrics"``: the softmax over the original model's vocabulary, the tokenizer's
  own (32000 for LLaVA-1.5). The ``llava-hf`` head has 64 rows more (32064): the conversion
  (transformers' ``convert_llava_weights_to_hf.py``) added ``<image>`` and ``<pad>`` and padded
  the embeddings and head to a multiple of 64, drawing the new rows around the mean input
  embedding; t2v_metrics' original model has none of them, so its cross-entropy normalises over
  32000 logits. ``raw``: over all the head's rows.

The prompt is tokenised whole by the checkpoint's ``tokenizer.json``, whose normalizer (kept as
written: transformers 5 loads ``llava`` tokenizers with ``TokenizersBackend``) prepends ``▁`` to
each text between special tokens, so the text after ``<image>`` starts ``▁``, ``\n`` as LLaVA's
``tokenizer_image_token`` tokenises it (it cuts the prompt at ``<image>`` and tokenises each piece
alone, each with SentencePiece's dummy prefix).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from vlprobe.extract.models.base import ReferenceCheckpoint
from vlprobe.extract.models.generative import GenerativeVLM

__all__ = ["T2V_LLAVA_QUESTION", "T2V_LLAVA_SYSTEM", "LlavaAdapter", "pad_to_square"]

#: t2v_metrics' VQAScore question for LLaVA-1.5.
T2V_LLAVA_QUESTION = 'Does this figure show "{}"? Please answer yes or no.'
#: The system message of t2v_metrics' LLaVA-1.5 prompts (Vicuna v1's).
T2V_LLAVA_SYSTEM = (
    "A chat between a curious user and an artificial intelligence assistant. The assistant gives helpful, "
    "detailed, and polite answers to the user's questions."
)


def pad_to_square(image: Any, mean: Any) -> Any:
    """``image`` (PIL) centred on a square of its longer side filled with ``mean`` (the image
    processor's mean, 0..1 per channel, as integers 0..255 truncated), as LLaVA's ``expand2square``."""
    from PIL import Image

    width, height = image.size
    if width == height:
        return image
    fill = tuple(int(x * 255) for x in mean)
    side = max(width, height)
    out = Image.new(image.mode, (side, side), fill)
    out.paste(image, ((side - width) // 2, (side - height) // 2))
    return out


class LlavaAdapter(GenerativeVLM):
    """LLaVA generative model (LLaVA-1.5 HF checkpoints); VQAScore or caption log-prob; streams caption, image, joint."""

    name = "llava"
    model_types = ("llava",)
    reference_checkpoint = ReferenceCheckpoint(
        "llava-hf/llava-1.5-7b-hf", source="LLaVA-1.5-7B, the model t2v_metrics scores as llava-v1.5-7b")
    load_options = (*GenerativeVLM.load_options, "image_pad")
    defaults: ClassVar[dict[str, str]] = {
        "score": "vqascore", "answer": "Yes", "answer_tokens": "all+eos", "system": T2V_LLAVA_SYSTEM,
        "caption_prompt": "", "image_pad": "square",
    }
    questions: ClassVar[dict[str, str]] = {"3.0": T2V_LLAVA_QUESTION, "2.1": T2V_LLAVA_QUESTION}
    choices: ClassVar[dict[str, tuple[str, ...]]] = {"image_pad": ("square", "none")}
    needed = ("model.vision_tower.", "model.multi_modal_projector.", "model.language_model.", "lm_head.")

    @classmethod
    def model_class(cls) -> Any:
        from transformers import LlavaForConditionalGeneration

        return LlavaForConditionalGeneration

    @property
    def text_vocabulary(self) -> int:
        """The original model's vocabulary: the tokenizer's own tokens, without those added after it
        (``<image>``, ``<pad>``); at most the head's rows."""
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        n = int(backend.get_vocab_size(with_added_tokens=False)) if backend is not None else int(self.tokenizer.vocab_size)
        return min(n, int(self.model.lm_head.weight.shape[0]))

    def _t2v_metrics_logits(self, logits: torch.Tensor, ids: torch.Tensor, first: int) -> torch.Tensor:
        return logits[:, : self.text_vocabulary]

    def softmax_detail(self) -> str:
        if self.softmax == "raw":
            return super().softmax_detail()
        return (f"the first {self.text_vocabulary} of the head's {int(self.model.lm_head.weight.shape[0])} rows "
                "(the original model's vocabulary)")

    def _image_features(self, images: list[Any]) -> tuple[list[torch.Tensor], dict[str, torch.Tensor]]:
        if self.options["image_pad"] == "square":
            images = [pad_to_square(im, self.processor.image_mean) for im in images]
        pixels = self.processor(images=images, return_tensors="pt")["pixel_values"]
        tower = self.model.model.vision_tower
        pixels = pixels.to(next(tower.parameters()).device, self.dtype)
        out = self.model.model.get_image_features(pixel_values=pixels)
        return list(out.pooler_output), {}

    def describe(self) -> dict[str, Any]:
        cfg = self.model.config
        return {
            **super().describe(),
            "vision_feature_layer": cfg.vision_feature_layer,
            "vision_feature_select_strategy": cfg.vision_feature_select_strategy,
        }
