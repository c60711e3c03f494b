"""SigLIP (Zhai et al. 2023) through ``transformers.SiglipModel``.

Streams
-------
``text``   layers 0..L_text: 0 = token + position embeddings, then each block's output *before*
           ``final_layer_norm``. Texts are padded to the model's 64 positions and run *without* an
           attention mask, as SigLIP was trained (its pad token is its EOS, and the text head reads
           the last position, padding included). ``cls`` = that last position; ``mean``/``max``
           run over the caption's own tokens (EOS included, padding excluded). ``pooled`` =
           ``head(final_layer_norm(h)[:, -1])``, the embedding SigLIP scores with.
``image``  layers 0..L_vision: 0 = patch + position embeddings (there is no class token), then
           each block, before ``post_layernorm``. No ``cls``: ``mean``/``max`` over all patches.
           ``pooled`` = the attention-pooling head's output.

Score: ``sigmoid(logit_scale.exp() * cos(image, text) + logit_bias)``, the model's probability
that caption and image match (the learned scale and bias are recorded in the cache, so scores
can be recomputed from the stored embeddings).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from vlprobe.extract.models.base import (
    HFDualEncoder,
    ReferenceCheckpoint,
    StreamBatch,
    StreamSpec,
    cosine_matrix,
)
from vlprobe.extract.models.hf import load_hf
from vlprobe.extract.models.hooks import LayerSite
from vlprobe.validation import InputError

__all__ = ["SiglipAdapter"]

_ALLOW = ["*.json", "*.txt", "*.safetensors", "*.model"]


class SiglipAdapter(HFDualEncoder):
    """SigLIP dual encoder (any HF SigLIP checkpoint or local directory); streams text, image."""

    name = "siglip"
    image_input = "pixels"
    reference_checkpoint = ReferenceCheckpoint(
        "google/siglip-base-patch16-224", source="SigLIP base (no paper reproduced here ran SigLIP)")
    score_kind = "match_probability"

    @staticmethod
    def stream_specs(config: Any) -> dict[str, StreamSpec]:
        tc, vc = config.text_config, config.vision_config
        return {  # the text head reads the last position; the image has no class token
            "text": StreamSpec.blocks("text", "text", tc.num_hidden_layers, tc.hidden_size, "last", tc.projection_size),
            "image": StreamSpec.blocks("image", "image", vc.num_hidden_layers, vc.hidden_size, "none", vc.hidden_size),
        }

    @classmethod
    def load(cls, checkpoint: str, *, device: str = "auto", dtype: str = "float32") -> SiglipAdapter:
        from transformers import SiglipModel

        def check(config: Any) -> None:
            if not config.vision_config.vision_use_head:
                raise InputError(f"checkpoint: {checkpoint!r} has no attention-pooling head (vision_use_head), which SigLIP's scores need")

        hf = load_hf(checkpoint, "siglip", SiglipModel, device=device, dtype=dtype, allow_patterns=_ALLOW,
                     image_processor=True, check=check)
        return cls.from_loaded(hf)

    @torch.inference_mode()
    def encode(self, stream: str, inputs: Sequence[Any], layers: Sequence[int]) -> StreamBatch:
        if stream == "text":
            tok = self._tokenize(inputs)
            ids, mask = tok["input_ids"].to(self.device), tok["attention_mask"].to(self.device)
            out = self.model.text_model(input_ids=ids, output_hidden_states=True)
            cls_index = torch.full((ids.shape[0],), ids.shape[1] - 1, dtype=torch.long, device=ids.device)
        elif stream == "image":
            pixels = self.processor(images=list(inputs), return_tensors="pt")["pixel_values"]
            out = self.model.vision_model(pixel_values=pixels.to(self.device, self.dtype), output_hidden_states=True)
            mask = torch.ones(out.last_hidden_state.shape[:2], dtype=torch.long, device=self.device)
            cls_index = None
        else:
            raise InputError(f"stream: SigLIP has streams text and image, got {stream!r}")
        hidden = torch.stack([out.hidden_states[i] for i in layers], dim=1)
        return StreamBatch(hidden, mask, cls_index, out.pooler_output)

    @classmethod
    def scores_from_pooled(
        cls, image_pooled: np.ndarray, text_pooled: np.ndarray, info: Mapping[str, Any] | None = None
    ) -> np.ndarray:
        return cls.scores_from_cosine(cosine_matrix(image_pooled, text_pooled), info).astype(np.float32)

    @classmethod
    def scores_from_cosine(cls, cosine: np.ndarray, info: Mapping[str, Any] | None = None) -> np.ndarray:
        if not info or "logit_scale" not in info or "logit_bias" not in info:
            raise ValueError("SigLIP scores need the model's logit_scale and logit_bias (its describe())")
        logits = float(info["logit_scale"]) * np.asarray(cosine, dtype=np.float64) + float(info["logit_bias"])
        return 1.0 / (1.0 + np.exp(-logits))

    def tokens(self, texts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Token ids (B, 64) padded as :meth:`encode` pads them, and a mask of ones: SigLIP runs
        without an attention mask, so every position (padding too) is computed, attended to and
        aligned one to one between two captions (the last one is what the head reads)."""
        ids = self._tokenize(texts)["input_ids"]
        return ids, torch.ones_like(ids)

    def _tokenize(self, texts: Sequence[str]) -> Any:
        return self.tokenizer(
            list(texts), padding="max_length", truncation=True, max_length=self.max_length,
            return_tensors="pt", padding_side="right",  # the head reads the last position
            # the released tokenizers return input ids only (model_input_names); the mask marks the
            # caption's own tokens for mean/max pooling, never the model's input
            return_attention_mask=True,
        )

    def layer_sites(self, stream: str) -> list[LayerSite]:
        """Text: the embeddings, then each encoder layer (before ``final_layer_norm``); image: the
        patch embeddings, then each encoder layer (before ``post_layernorm``)."""
        if stream in ("text", "image"):
            tower = self.model.text_model if stream == "text" else self.model.vision_model
            return [LayerSite(tower.embeddings), *(LayerSite(m) for m in tower.encoder.layers)]
        raise InputError(f"stream: SigLIP has streams text and image, got {stream!r}")

    def describe(self) -> dict[str, Any]:
        return {
            "model_class": type(self.model).__name__,
            "text_max_length": self.max_length,
            "text_padding": "max_length, no attention mask (as trained)",
            "image_processor": type(self.processor).__name__,
            "logit_scale": float(self.model.logit_scale.exp().item()),
            "logit_bias": float(self.model.logit_bias.item()),
            "score": "sigmoid(logit_scale * cos + logit_bias)",
        }
