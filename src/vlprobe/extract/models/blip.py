"""BLIP image-text matching (Li et al. 2022) through ``transformers.BlipForImageTextRetrieval``.

A cross-encoder that reads pixels: the vision transformer encodes each image once
(:meth:`BlipItmAdapter.prepare_images`), then the image-grounded text encoder runs per pair.

Streams
-------
``text``   (one row per caption) the unimodal text encoder BLIP's ITC head reads: layers
           0..L_text, 0 = word + position embeddings (after their LayerNorm), then each BERT
           block with its cross-attention skipped. ``cls`` = token 0 ([CLS]); ``pooled`` =
           ``text_proj(h_L[:, 0])``.
``image``  (one row per image) layers 0..L_vision: 0 = class + patch embeddings with positions,
           then each block, before ``post_layernorm``. ``cls`` = the class token (patch 0);
           ``pooled`` = ``vision_proj(post_layernorm(h_L)[:, 0])``.
``pair``   (one row per image-caption pair) the image-grounded text encoder: layers 0..L_text,
           0 = the same text embeddings, then each block with self-attention over the caption and
           cross-attention to the image's ``post_layernorm`` tokens. ``cls`` = token 0, what the
           ITM head reads; no pooled output.

Scores (load option ``score_head``):
``itm`` (default) ``softmax(itm_head(pair h_L[:, 0]))[:, 1]``, the probability that caption and
    image match (index 1 = match: BLIP trains the head with label 1 for true pairs);
``itc`` the cosine of the normalised ITC projections (``vision_proj``/``text_proj``).

The image-grounded passes (``pair`` stream, ITM score) start the caption with [CLS], as
``BlipForImageTextRetrieval.forward`` does (load option ``first_token="cls"``, the default);
``first_token="enc"`` puts BLIP's ``[ENC]`` token there instead, as BLIP's own retrieval code does
for its ITM head. The unimodal ``text`` stream and ITC always read [CLS].
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from vlprobe.extract.models.base import (
    CrossEncoder,
    PairOutput,
    ReferenceCheckpoint,
    StreamBatch,
    StreamSpec,
    TextTable,
    check_pair_indices,
    text_max_length,
)
from vlprobe.extract.models.hf import ResolvedCheckpoint, load_hf
from vlprobe.extract.models.hooks import LayerSite
from vlprobe.extract.models.pooling import TOKEN_POOLINGS, pool_states
from vlprobe.validation import InputError, check_choice

__all__ = ["FIRST_TOKENS", "SCORE_HEADS", "BlipImages", "BlipItmAdapter"]

_ALLOW = ["*.json", "*.txt", "*.safetensors"]
#: ``score_head`` values and the score kind each gives.
SCORE_HEADS: dict[str, str] = {"itm": "match_probability", "itc": "cosine"}
#: Column of the ITM head's output that means "caption matches image".
MATCH_INDEX = 1
#: ``first_token`` values: the token the image-grounded passes read first.
FIRST_TOKENS: tuple[str, ...] = ("cls", "enc")


@dataclass
class BlipImages:
    """A block of images encoded once by the vision transformer.

    Attributes
    ----------
    tokens : Tensor, shape (N, P, H)
        ``post_layernorm`` output (class token first), what the ITM cross-attention reads.
    itc : Tensor, shape (N, D)
        Normalised ``vision_proj`` of the class token.
    """

    tokens: torch.Tensor
    itc: torch.Tensor

    def __len__(self) -> int:
        return int(self.tokens.shape[0])


class BlipItmAdapter(CrossEncoder):
    """BLIP image-text matching cross-encoder on pixels; streams text, image, pair."""

    name = "blip-itm"
    image_input = "pixels"
    reference_checkpoint = ReferenceCheckpoint(
        "Salesforce/blip-itm-base-coco", source="BLIP base ITM (no paper reproduced here ran BLIP)")
    load_options = ("score_head", "first_token")
    #: A block of ViT outputs is (N, 577, 768) floats for BLIP base: keep blocks small.
    image_block = 64

    def __init__(
        self, model: Any, tokenizer: Any, processor: Any, checkpoint: ResolvedCheckpoint,
        device: torch.device, dtype: torch.dtype, score_head: str = "itm", first_token: str = "cls",
    ) -> None:
        super().__init__(checkpoint, device, dtype)
        self.model, self.tokenizer, self.processor = model, tokenizer, processor
        self.score_head = check_choice(score_head, "score_head", tuple(SCORE_HEADS), kind="score head")
        self.score_kind = SCORE_HEADS[score_head]
        self.first_token = check_choice(first_token, "first_token", FIRST_TOKENS, kind="first token")
        self.enc_token_id: int | None = None
        if first_token == "enc":
            enc = tokenizer.convert_tokens_to_ids("[ENC]")
            if enc is None or enc == tokenizer.unk_token_id:
                raise InputError("first_token: the checkpoint's tokenizer has no [ENC] token; use first_token=cls")
            self.enc_token_id = int(enc)
        tc, vc = model.config.text_config, model.config.vision_config
        proj = int(model.config.image_text_hidden_size)
        self._streams = {
            "text": StreamSpec.blocks("text", "text", tc.num_hidden_layers, tc.hidden_size, "token0", proj),
            "image": StreamSpec.blocks("image", "image", vc.num_hidden_layers, vc.hidden_size, "patch0", proj),
            "pair": StreamSpec.blocks("pair", "pair", tc.num_hidden_layers, tc.hidden_size, "token0", None, "cross"),
        }
        self.max_length = text_max_length(tokenizer, tc.max_position_embeddings)

    @classmethod
    def load(
        cls, checkpoint: str, *, device: str = "auto", dtype: str = "float32", score_head: str = "itm",
        first_token: str = "cls",
    ) -> BlipItmAdapter:
        """Load ``BlipForImageTextRetrieval``, its tokenizer and image processor.

        Parameters
        ----------
        score_head : {"itm", "itc"}
            The score: the ITM head's match probability, or the ITC cosine.
        first_token : {"cls", "enc"}
            What the image-grounded passes read first (see the module docstring).
        """
        from transformers import BlipForImageTextRetrieval

        check_choice(score_head, "score_head", tuple(SCORE_HEADS), kind="score head")
        check_choice(first_token, "first_token", FIRST_TOKENS, kind="first token")
        hf = load_hf(
            checkpoint, "blip", BlipForImageTextRetrieval, device=device, dtype=dtype, allow_patterns=_ALLOW,
            needed=("vision_model.", "text_encoder.", "itm_head.", "vision_proj.", "text_proj."), image_processor=True,
        )
        return cls(hf.model, hf.tokenizer, hf.processor, hf.checkpoint, hf.device, hf.dtype, score_head, first_token)

    @property
    def streams(self) -> dict[str, StreamSpec]:
        return self._streams

    def model_options(self) -> dict[str, Any]:
        return {"score_head": self.score_head, "first_token": self.first_token}

    # -- text and image streams ------------------------------------------------------------------

    @torch.inference_mode()
    def encode(self, stream: str, inputs: Sequence[Any], layers: Sequence[int]) -> StreamBatch:
        if stream == "text":
            table = self.prepare_texts(list(inputs))
            ids, mask = table.take(np.arange(len(table)), self.device)
            out = self.model.text_encoder(input_ids=ids, attention_mask=mask, output_hidden_states=True)
            pooled = self.model.text_proj(out.last_hidden_state[:, 0])
        elif stream == "image":
            out = self._vision(list(inputs), hidden_states=True)
            mask = torch.ones(out.last_hidden_state.shape[:2], dtype=torch.long, device=self.device)
            pooled = self.model.vision_proj(out.last_hidden_state[:, 0])
        else:
            raise InputError(f"stream: {self.name} encodes text and image alone (pair comes with the pairs), got {stream!r}")
        hidden = torch.stack([out.hidden_states[i] for i in layers], dim=1)
        cls_index = torch.zeros(hidden.shape[0], dtype=torch.long, device=hidden.device)
        return StreamBatch(hidden, mask, cls_index, pooled)

    def _vision(self, images: list[Any], *, hidden_states: bool) -> Any:
        pixels = self.processor(images=images, return_tensors="pt")["pixel_values"].to(self.device, self.dtype)
        return self.model.vision_model(pixel_values=pixels, output_hidden_states=hidden_states)

    # -- pairs -------------------------------------------------------------------------------------

    @torch.inference_mode()
    def prepare_images(self, images: Any) -> BlipImages:
        """Encode a block of RGB PIL images once (ViT tokens and the ITC image embedding)."""
        if not isinstance(images, Sequence) or hasattr(images, "features"):
            raise TypeError(f"images: {self.name} reads pixels (a sequence of PIL images), got {type(images).__name__}")
        tokens = self._vision(list(images), hidden_states=False).last_hidden_state
        itc = torch.nn.functional.normalize(self.model.vision_proj(tokens[:, 0]).float(), dim=-1)
        return BlipImages(tokens, itc)

    @torch.inference_mode()
    def encode_pairs(
        self, texts: TextTable, images: BlipImages, text_idx: np.ndarray, image_idx: np.ndarray,
        layers: Mapping[str, Sequence[int]] | None, poolings: Sequence[str],
    ) -> PairOutput:
        """Score (and optionally pool the ``pair`` states of) a batch of pairs.

        Returns
        -------
        PairOutput
            ``scores`` (B,); ``states["pair"][pooling]`` (B, L, H) when ``layers`` is given;
            ``logits`` (B, 2), the ITM head's, when ``score_head="itm"``.
        """
        text_idx, image_idx = check_pair_indices(text_idx, image_idx)
        layers = self.pair_layers(layers)
        i_sel = torch.from_numpy(image_idx).to(self.device)
        states: dict[str, dict[str, torch.Tensor]] = {}
        logits = None
        if self.score_head == "itm" or layers:
            ids, mask = texts.take(text_idx, self.device)
            if self.enc_token_id is not None:
                ids = ids.clone()
                ids[:, 0] = self.enc_token_id
            img = images.tokens[i_sel]
            out = self.model.text_encoder(
                input_ids=ids, attention_mask=mask, encoder_hidden_states=img,
                encoder_attention_mask=torch.ones(img.shape[:2], dtype=torch.long, device=self.device),
                output_hidden_states=bool(layers),
            )
            if layers:
                hidden = torch.stack([out.hidden_states[k] for k in layers["pair"]], dim=1)
                cls_index = torch.zeros(hidden.shape[0], dtype=torch.long, device=hidden.device)
                states["pair"] = pool_states(hidden, mask, cls_index, [p for p in poolings if p in TOKEN_POOLINGS])
            if self.score_head == "itm":
                logits = self.model.itm_head(out.last_hidden_state[:, 0]).float()
                scores = torch.softmax(logits, dim=-1)[:, MATCH_INDEX]
        if self.score_head == "itc":
            u_txt, t_inv = np.unique(text_idx, return_inverse=True)
            ids, mask = texts.take(u_txt, self.device)
            text = self.model.text_encoder(input_ids=ids, attention_mask=mask).last_hidden_state[:, 0]
            feat = torch.nn.functional.normalize(self.model.text_proj(text).float(), dim=-1)
            scores = (feat[torch.from_numpy(t_inv).to(self.device)] * images.itc[i_sel]).sum(dim=-1)
        return PairOutput(scores, states, {}, logits)

    def tokens(self, texts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        table = self.prepare_texts(list(texts))
        return table.input_ids, table.attention_mask

    def layer_sites(self, stream: str) -> list[LayerSite]:
        """The streams the score reads. ``score_head="itm"``: ``pair``, the image-grounded text
        encoder's embeddings, then each of its blocks (the ITM head reads token 0 of the last).
        ``score_head="itc"``: the two towers the ITC cosine reads, edited as a dual encoder's:
        ``text``, the same embeddings and blocks run without cross-attention (the unimodal text
        encoder, ``text_proj`` reads token 0), and ``image``, the patch embeddings, then each vision
        block (before ``post_layernorm``; ``vision_proj`` reads the class token)."""
        if stream not in self.streams:
            raise InputError(f"stream: {self.name} has streams {', '.join(self.streams)}, got {stream!r}")
        feeds = "pair" if self.score_head == "itm" else ("text", "image")
        if stream not in feeds:
            other = "itc" if self.score_head == "itm" else "itm"
            raise InputError(f"stream: {self.name} with score_head={self.score_head} edits {' and '.join(feeds)} "
                             f"(the streams its score reads); the {stream} stream feeds the {other.upper()} "
                             f"score: load with --model-option score_head={other}")
        if stream == "image":
            vm = self.model.vision_model
            return [LayerSite(vm.embeddings), *(LayerSite(m) for m in vm.encoder.layers)]
        enc = self.model.text_encoder
        return [LayerSite(enc.embeddings), *(LayerSite(m) for m in enc.encoder.layer)]

    def plain_pair_scores(self, texts: TextTable, images: BlipImages, text_idx: np.ndarray,
                          image_idx: np.ndarray) -> torch.Tensor:
        if self.score_head != "itm":
            raise InputError(f"model_options: {self.name}'s ITC score has no pair pass (its towers are "
                             "edited apart, as a dual encoder's); the pair pass needs score_head=itm")
        return self.encode_pairs(texts, images, text_idx, image_idx, None, ()).scores

    def describe(self) -> dict[str, Any]:
        cfg = self.model.config
        return {
            "model_class": type(self.model).__name__,
            "layers": {"text": int(cfg.text_config.num_hidden_layers), "vision": int(cfg.vision_config.num_hidden_layers)},
            "score_head": self.score_head,
            "score": f"softmax(itm_head(pair h_L[:, 0]))[:, {MATCH_INDEX}]" if self.score_head == "itm"
            else "cos(vision_proj(image[:, 0]), text_proj(text[:, 0]))",
            "text_max_length": self.max_length,
            "tokenizer": type(self.tokenizer).__name__,
            "image_processor": type(self.processor).__name__,
            "first_token": self.first_token,
        }
