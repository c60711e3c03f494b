"""VisualBERT (Li et al. 2019) through ``transformers.VisualBertForPreTraining``, on region features.

VALSE evaluated VisualBERT zero-shot with its pretraining head for sentence-image prediction
(VALSE's release has no script for it). The checkpoints with that head are the ``*-coco-pre``
ones of ``uclanlp`` (pretrained on COCO captions): ``uclanlp/visualbert-vqa-coco-pre`` reads
2048-d Detectron region features, ``uclanlp/visualbert-nlvr2-coco-pre`` 1024-d ones; the
feature width is the config's ``visual_embedding_dim`` and a region file of another width is
refused. The hub checkpoints carry no tokenizer (``config.json`` and ``pytorch_model.bin``
only): ``--tokenizer`` (default: the checkpoint folder's own, else
``google-bert/bert-base-uncased``, the tokenizer VisualBERT was trained with).

Input, as the original pretraining code (uclanlp/visualbert) feeds it: ``[CLS] caption [SEP]``
(token type 0, positions 0..T-1), then the regions through ``visual_projection`` with visual
position 0 and visual token type **0**: ``TrainVisualBERTObjective.forward``
(``pytorch_pretrained_bert/modeling.py``) sets ``visual_embeddings_type`` to zeros when the
data gives none, and its COCO pretraining data (``dataloaders/coco_dataset.py``) gives none.
transformers defaults ``visual_token_type_ids`` to ones, a row the pretraining never trained for
regions. VisualBERT reads no boxes; padded regions are masked.

Streams (both ``modality="pair"``): views of the one joint sequence, as UNITER's.

``text``   layers 0..L (12 for base): 0 = embeddings, then each joint block (kind ``joint``), at
           the text positions. ``cls`` = [CLS]; ``pooled`` = the pooler (tanh(W h_L[0])), what
           the sentence-image head reads.
``image``  the same layers at the region positions; ``mean``/``max`` over the real regions.

Score: ``softmax(cls.seq_relationship(pooled))[:, 1]``. Index 1 = match, as the original trained
it: ``dataloaders/coco_dataset.py`` sets ``flag = True`` when the second caption is another
caption of the same image (False for a caption of a random image) and
``dataloaders/bert_data_utils.py`` turns it into ``is_random_next = int(is_next)``, the target
of the sentence-image cross-entropy; the hub conversion only renamed the keys. transformers'
``VisualBertForPreTraining`` docstring says the opposite (``sentence_image_labels`` 0 = matching,
copied from BERT's next-sentence labels): it disagrees with the code that trained the weights.
The cache's logits are stored as (no match, match).

Batching: the text embeddings of each batch's distinct captions and the region embeddings of its
distinct images are computed once and indexed into the pairs (embedding layer norms act per
token, so this equals the joint embedding), then the blocks run over the whole batch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from vlprobe.extract.models.base import (
    CrossEncoder,
    PairOutput,
    StreamSpec,
    TextTable,
    check_pair_indices,
    check_regions,
    text_max_length,
)
from vlprobe.extract.models.hf import (
    ResolvedCheckpoint,
    load_hf_config,
    load_hf_model,
    quiet_transformers,
    reading_weights,
    resolve_checkpoint,
)
from vlprobe.extract.models.hooks import LayerSite
from vlprobe.extract.models.pooling import pool_states
from vlprobe.validation import InputError

__all__ = [
    "DEFAULT_TOKENIZER", "MATCH_INDEX", "REGION_TOKEN_TYPE", "VisualBertAdapter", "VisualBertImages", "VisualBertPairModel",
]

_ALLOW = ["*.json", "*.txt", "*.safetensors", "*.bin", "*.model"]
#: Column of ``seq_relationship`` that means "caption matches image" (see the module docstring).
MATCH_INDEX = 1
#: The visual token type the original feeds regions with (see the module docstring).
REGION_TOKEN_TYPE = 0
#: VisualBERT was trained with BERT's uncased WordPiece vocabulary.
DEFAULT_TOKENIZER = "google-bert/bert-base-uncased"


@dataclass
class VisualBertImages:
    """Every image's regions held once: features (N, R, D), mask (N, R) bool."""

    features: torch.Tensor
    mask: torch.Tensor

    def __len__(self) -> int:
        return int(self.features.shape[0])


class VisualBertPairModel(nn.Module):
    """``VisualBertForPreTraining`` run as text embeddings, region embeddings, joint blocks.

    ``text_embeddings`` and ``image_embeddings`` are parameterless: their outputs are layer 0 of
    the two views (the places where that layer's states can be read or edited).
    """

    def __init__(self, hf: Any) -> None:
        super().__init__()
        self.hf = hf
        self.text_embeddings = nn.Identity()
        self.image_embeddings = nn.Identity()

    @property
    def blocks(self) -> list[nn.Module]:
        return list(self.hf.visual_bert.encoder.layer)

    def embed_text(self, ids: torch.Tensor) -> torch.Tensor:
        """(B, T) -> (B, T, H): LayerNorm(word + position + token type 0), as VisualBertEmbeddings."""
        e = self.hf.visual_bert.embeddings
        pos = torch.arange(ids.shape[1], device=ids.device)[None]
        x = e.word_embeddings(ids) + e.token_type_embeddings(torch.zeros_like(ids)) + e.position_embeddings(pos)
        return self.text_embeddings(e.LayerNorm(x))

    def embed_image(self, features: torch.Tensor) -> torch.Tensor:
        """(B, R, D) -> (B, R, H): LayerNorm(projection + visual position 0 + visual token type 0)."""
        e = self.hf.visual_bert.embeddings
        zeros = torch.zeros(features.shape[:2], dtype=torch.long, device=features.device)
        x = (e.visual_projection(features) + e.visual_position_embeddings(zeros)
             + e.visual_token_type_embeddings(zeros + REGION_TOKEN_TYPE))
        return self.image_embeddings(e.LayerNorm(x))

    def encode(self, emb: torch.Tensor, mask: torch.Tensor) -> list[torch.Tensor]:
        """The joint blocks over (B, T+R, H) with a (B, T+R) mask: layer 0 (``emb``) then each block."""
        additive = (1.0 - mask[:, None, None, :].to(emb.dtype)) * torch.finfo(emb.dtype).min
        out = [emb]
        for block in self.blocks:
            out.append(block(out[-1], additive)[0])
        return out

    def head(self, last: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Pooled [CLS] (B, H) and the sentence-image logits (B, 2) in the checkpoint's order."""
        pooled = self.hf.visual_bert.pooler(last)
        return pooled, self.hf.cls.seq_relationship(pooled)


class VisualBertAdapter(CrossEncoder):
    """VisualBERT cross-encoder (HF VisualBertForPreTraining) with region features; streams text, image."""

    name = "visualbert"
    image_input = "regions"
    score_kind = "match_probability"
    load_options = ("tokenizer",)

    def __init__(
        self, model: VisualBertPairModel, tokenizer: Any, checkpoint: ResolvedCheckpoint, device: torch.device,
        dtype: torch.dtype, *, tokenizer_source: str = "", tokenizer_fingerprint: str = "",
    ) -> None:
        super().__init__(checkpoint, device, dtype)
        self.model, self.tokenizer = model, tokenizer
        cfg = model.hf.config
        n, h = int(cfg.num_hidden_layers), int(cfg.hidden_size)
        kinds = ("embed",) + ("joint",) * n
        self._streams = {
            "text": StreamSpec("text", "pair", kinds, h, "token0", h),
            "image": StreamSpec("image", "pair", kinds, h, "none", None),
        }
        self.feature_dim = int(cfg.visual_embedding_dim)
        self.max_length = text_max_length(tokenizer, cfg.max_position_embeddings)
        self.tokenizer_source = tokenizer_source
        self._fingerprints = {"tokenizer": tokenizer_fingerprint}

    @classmethod
    def load(
        cls, checkpoint: str, *, device: str = "auto", dtype: str = "float32", tokenizer: str | None = None,
    ) -> VisualBertAdapter:
        """Load ``VisualBertForPreTraining`` (its sentence-image head is required) and a tokenizer."""
        from transformers import AutoTokenizer, VisualBertForPreTraining

        from vlprobe.devices import resolve_device, resolve_dtype

        dev, torch_dtype = resolve_device(device), resolve_dtype(dtype)
        ckpt = resolve_checkpoint(checkpoint, allow_patterns=_ALLOW)
        with quiet_transformers(), reading_weights(checkpoint):
            config = load_hf_config(ckpt.path, checkpoint, "visual_bert")
            if getattr(config, "bypass_transformer", False):
                raise InputError(
                    f"checkpoint: {checkpoint!r} bypasses the transformer for the regions (bypass_transformer), "
                    "a VCR fine-tuning variant; vlprobe reads the pretrained (*-coco-pre) VisualBERT checkpoints"
                )
            hf = load_hf_model(VisualBertForPreTraining, ckpt.path, checkpoint, torch_dtype,
                               ("visual_bert.", "cls.seq_relationship"))
        own = any((ckpt.path / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json", "vocab.txt"))
        spec = tokenizer if tokenizer is not None else (str(ckpt.path) if own else DEFAULT_TOKENIZER)
        try:
            tok_ckpt = ckpt if spec == str(ckpt.path) else resolve_checkpoint(spec, param="tokenizer",
                                                                              allow_patterns=["*.json", "*.txt"])
        except InputError as exc:
            if tokenizer is None:
                raise InputError(f"{exc} (VisualBERT's tokenizer is {DEFAULT_TOKENIZER}; the checkpoint has none: "
                                 f"pass --tokenizer DIR with a saved {DEFAULT_TOKENIZER} tokenizer)") from None
            raise
        with quiet_transformers():
            try:
                tok = AutoTokenizer.from_pretrained(tok_ckpt.path)
            except (OSError, ValueError) as exc:
                raise InputError(f"tokenizer: {spec!r} holds no readable tokenizer ({exc})") from None
        if len(tok) > int(config.vocab_size):
            raise InputError(f"tokenizer: {spec!r} has {len(tok)} tokens, the checkpoint's vocabulary {config.vocab_size}")
        model = VisualBertPairModel(hf).to(dev).eval()
        return cls(model, tok, ckpt, dev, torch_dtype, tokenizer_source=spec, tokenizer_fingerprint=tok_ckpt.fingerprint)

    @property
    def streams(self) -> dict[str, StreamSpec]:
        return self._streams

    def input_fingerprints(self) -> dict[str, str]:
        return dict(self._fingerprints)

    def prepare_images(self, images: Any) -> VisualBertImages:
        """The region features of a block of images (a ``RegionBatch``); boxes are not read."""
        features, _, m = check_regions(images, self.feature_dim, "VisualBERT")
        return VisualBertImages(torch.from_numpy(features), torch.from_numpy(m))

    def _inputs(
        self, texts: TextTable, images: VisualBertImages, text_idx: np.ndarray, image_idx: np.ndarray,
    ) -> tuple[torch.Tensor, torch.Tensor, int, torch.Tensor, torch.Tensor]:
        """Joint embeddings (B, T+R, H), mask, T, text mask (B, T), region mask (B, R) of the pairs,
        each distinct caption and image embedded once."""
        u_txt, t_inv = np.unique(text_idx, return_inverse=True)
        u_img, i_inv = np.unique(image_idx, return_inverse=True)
        t_sel, i_sel = torch.from_numpy(t_inv).to(self.device), torch.from_numpy(i_inv).to(self.device)
        ids, text_mask = texts.take(u_txt, self.device)
        rows = torch.from_numpy(u_img)
        text_emb = self.model.embed_text(ids)[t_sel]
        img_emb = self.model.embed_image(images.features[rows].to(self.device, self.dtype))[i_sel]
        text_mask = text_mask.bool()[t_sel]
        img_mask = images.mask[rows].to(self.device)[i_sel]
        return (torch.cat([text_emb, img_emb], dim=1), torch.cat([text_mask, img_mask], dim=1), ids.shape[1],
                text_mask, img_mask)

    @torch.inference_mode()
    def encode_pairs(
        self, texts: TextTable, images: VisualBertImages, text_idx: np.ndarray, image_idx: np.ndarray,
        layers: Mapping[str, Sequence[int]] | None, poolings: Sequence[str],
    ) -> PairOutput:
        """Score (and optionally pool the views of) a batch of pairs in one joint forward.

        Returns
        -------
        PairOutput
            ``scores`` (B,), ``logits`` (B, 2) as (no match, match), ``states`` when ``layers``
            is given, ``pooled["text"]`` (B, H).
        """
        text_idx, image_idx = check_pair_indices(text_idx, image_idx)
        asked = self.pair_layers(layers)
        emb, mask, t, text_mask, img_mask = self._inputs(texts, images, text_idx, image_idx)
        hidden = self.model.encode(emb, mask)
        pooled, logits = self.model.head(hidden[-1])
        logits = logits.float()[:, [1 - MATCH_INDEX, MATCH_INDEX]]
        scores = torch.softmax(logits, dim=-1)[:, 1]
        states: dict[str, dict[str, torch.Tensor]] = {}
        if asked:
            tok_pool = [p for p in poolings if p in ("cls", "mean", "max")]
            if asked["text"]:
                h = torch.stack([hidden[k][:, :t] for k in asked["text"]], dim=1)
                states["text"] = pool_states(h, text_mask, torch.zeros(h.shape[0], dtype=torch.long), tok_pool)
            if asked["image"]:
                h = torch.stack([hidden[k][:, t:] for k in asked["image"]], dim=1)
                states["image"] = pool_states(h, img_mask, None, [p for p in tok_pool if p != "cls"])
        return PairOutput(scores, states, {"text": pooled.float()}, logits)

    def layer_sites(self, stream: str) -> list[LayerSite]:
        """``text``: the text embeddings, then each block (its first T positions); ``image``: the
        region embeddings, then each block at the last R positions (``tail`` sites)."""
        if stream == "text":
            return [LayerSite(self.model.text_embeddings), *(LayerSite(m) for m in self.model.blocks)]
        if stream == "image":
            return [LayerSite(self.model.image_embeddings, tail=True), *(LayerSite(m, tail=True) for m in self.model.blocks)]
        raise InputError(f"stream: VisualBERT has streams text and image, got {stream!r}")

    @torch.inference_mode()
    def plain_pair_scores(
        self, texts: TextTable, images: VisualBertImages, text_idx: np.ndarray, image_idx: np.ndarray,
    ) -> torch.Tensor:
        text_idx, image_idx = check_pair_indices(text_idx, image_idx)
        ids, tmask = texts.take(text_idx, self.device)
        rows = torch.from_numpy(image_idx)
        emb = torch.cat([self.model.embed_text(ids),
                         self.model.embed_image(images.features[rows].to(self.device, self.dtype))], dim=1)
        mask = torch.cat([tmask.bool(), images.mask[rows].to(self.device)], dim=1)
        _, logits = self.model.head(self.model.encode(emb, mask)[-1])
        return torch.softmax(logits.float(), dim=-1)[:, MATCH_INDEX]

    def describe(self) -> dict[str, Any]:
        cfg = self.model.hf.config
        return {
            "model_class": type(self.model.hf).__name__,
            "layers": int(cfg.num_hidden_layers),
            "hidden_size": int(cfg.hidden_size),
            "visual_embedding_dim": self.feature_dim,
            "visual_pos": "none (VisualBERT reads no boxes; visual position 0)",
            "region_token_type": REGION_TOKEN_TYPE,
            "tokenizer": self.tokenizer_source,
            "text_max_length": self.max_length,
            "score": f"softmax(cls.seq_relationship(pooled))[:, {MATCH_INDEX}]",
        }
