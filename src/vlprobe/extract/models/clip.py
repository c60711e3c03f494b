"""CLIP (Radford et al. 2021) through ``transformers.CLIPModel``.

Streams
-------
``text``   layers 0..L_text: 0 = token + position embeddings, then each block's output *before*
           ``final_layer_norm``. ``cls`` = the EOS position (attention is causal, so token 0 is the
           same for every text). ``pooled`` = ``text_projection(final_layer_norm(h)[eos])``, the
           embedding CLIP scores with.
``image``  layers 0..L_vision: 0 = ``pre_layrnorm(embeddings)``, then each block. ``cls`` = patch 0
           (the class token). ``mean``/``max`` run over all tokens, class token included.
           ``pooled`` = ``visual_projection(post_layernorm(h[:, 0]))``.

Scores are cosine similarities of the pooled embeddings (Winoground's official CLIP scores are
the same values times 100). Layer numbers equal the "Why is Winoground Hard?" code's for CLIP.
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

__all__ = ["CLIPAdapter"]

_ALLOW = ["*.json", "*.txt", "*.safetensors", "*.model"]


class CLIPAdapter(HFDualEncoder):
    """CLIP dual encoder (any HF CLIP checkpoint or local directory); streams text, image."""

    name = "clip"
    image_input = "pixels"
    reference_checkpoint = ReferenceCheckpoint(
        "openai/clip-vit-base-patch32", source="CLIP ViT-B/32, as 'Why is Winoground Hard?' and VALSE ran it")
    score_kind = "cosine"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.eos_token_id = int(self.model.config.text_config.eos_token_id)

    @staticmethod
    def stream_specs(config: Any) -> dict[str, StreamSpec]:
        tc, vc, proj = config.text_config, config.vision_config, config.projection_dim
        return {
            "text": StreamSpec.blocks("text", "text", tc.num_hidden_layers, tc.hidden_size, "eos", proj),
            "image": StreamSpec.blocks("image", "image", vc.num_hidden_layers, vc.hidden_size, "patch0", proj),
        }

    @classmethod
    def load(cls, checkpoint: str, *, device: str = "auto", dtype: str = "float32") -> CLIPAdapter:
        from transformers import CLIPModel

        hf = load_hf(checkpoint, "clip", CLIPModel, device=device, dtype=dtype, allow_patterns=_ALLOW, image_processor=True)
        return cls.from_loaded(hf)

    @torch.inference_mode()
    def encode(self, stream: str, inputs: Sequence[Any], layers: Sequence[int]) -> StreamBatch:
        if stream == "text":
            return self._encode_text(list(inputs), layers)
        if stream == "image":
            return self._encode_image(list(inputs), layers)
        raise InputError(f"stream: CLIP has streams text and image, got {stream!r}")

    def _tokenize(self, texts: Sequence[str]) -> Any:
        return self.tokenizer(
            list(texts), padding=True, truncation=True, max_length=self.max_length, return_tensors="pt",
            padding_side="right",  # CLIP's positions count from token 0 and EOS doubles as padding
        )

    def tokens(self, texts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        tok = self._tokenize(texts)
        return tok["input_ids"], tok["attention_mask"]

    def layer_sites(self, stream: str) -> list[LayerSite]:
        """Text: the embeddings, then each encoder layer (outputs before ``final_layer_norm``);
        image: ``pre_layrnorm`` (layer 0 as the stream defines it), then each encoder layer."""
        if stream == "text":
            tm = self.model.text_model
            return [LayerSite(tm.embeddings), *(LayerSite(m) for m in tm.encoder.layers)]
        if stream == "image":
            vm = self.model.vision_model
            return [LayerSite(vm.pre_layrnorm), *(LayerSite(m) for m in vm.encoder.layers)]
        raise InputError(f"stream: CLIP has streams text and image, got {stream!r}")

    def _encode_text(self, texts: list[str], layers: Sequence[int]) -> StreamBatch:
        tok = self._tokenize(texts)
        ids = tok["input_ids"].to(self.device)
        mask = tok["attention_mask"].to(self.device)
        out = self.model.text_model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        hidden = torch.stack([out.hidden_states[i] for i in layers], dim=1)
        pooled = self.model.text_projection(out.pooler_output)
        return StreamBatch(hidden, mask, self.eos_index(ids), pooled)

    def eos_index(self, input_ids: torch.Tensor) -> torch.Tensor:
        """EOS position per row, chosen as CLIPTextTransformer chooses its pooled token.

        Parameters
        ----------
        input_ids : Tensor, shape (B, T)

        Returns
        -------
        Tensor, shape (B,)
        """
        if self.eos_token_id == 2:  # legacy OpenAI configs: EOS is the highest id
            return input_ids.argmax(dim=-1)
        return (input_ids == self.eos_token_id).int().argmax(dim=-1)

    def _encode_image(self, images: list[Any], layers: Sequence[int]) -> StreamBatch:
        pixels = self.processor(images=images, return_tensors="pt")["pixel_values"]
        pixels = pixels.to(self.device, self.dtype)
        out = self.model.vision_model(pixel_values=pixels, output_hidden_states=True)
        hidden = torch.stack([out.hidden_states[i] for i in layers], dim=1)
        b, t = hidden.shape[0], hidden.shape[2]
        mask = torch.ones(b, t, dtype=torch.long, device=hidden.device)
        cls_index = torch.zeros(b, dtype=torch.long, device=hidden.device)
        pooled = self.model.visual_projection(out.pooler_output)
        return StreamBatch(hidden, mask, cls_index, pooled)

    @classmethod
    def scores_from_pooled(
        cls, image_pooled: np.ndarray, text_pooled: np.ndarray, info: Mapping[str, Any] | None = None
    ) -> np.ndarray:
        return cosine_matrix(image_pooled, text_pooled).astype(np.float32)

    def describe(self) -> dict[str, Any]:
        cfg = self.model.config
        return {
            "model_class": type(self.model).__name__,
            "text_max_length": self.max_length,
            "eos_token_id": self.eos_token_id,
            "image_processor": type(self.processor).__name__,
            "projection_dim": cfg.projection_dim,
            "logit_scale": float(self.model.logit_scale.exp().item()),
        }
