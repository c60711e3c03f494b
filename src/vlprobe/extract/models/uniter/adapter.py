"""UNITER (Chen et al. 2020) as a vlprobe cross-encoder, on :class:`vlprobe.extract.models.uniter.model.UniterModel`.

Inputs: ``--checkpoint uniter-base.pt`` (the official state dict), ``--model-config
uniter-base.json`` (default: a JSON of the same stem beside the checkpoint, e.g.
``uniter-base.json``, or ``uniter.json``), ``--tokenizer ID_OR_DIR`` (default: a ``tokenizer/``
folder beside the checkpoint if present, else ``bert-base-cased``, UNITER's tokenizer: cased,
``[CLS] ... [SEP]``), and region features whose boxes become ``pos7 = (x1, y1, x2, y2, w, h,
w*h)`` normalised (:func:`vlprobe.extract.regions.boxes.boxes_to_7d`).

Streams (both ``modality="pair"``): views of the one joint sequence ``[text | regions]``.

``text``   layers 0..L (13 for base): 0 = embeddings, then each joint block (kind ``joint``), at
           the text positions. ``cls`` = joint token 0 ([CLS]); ``pooled`` = the pooler output
           (tanh(W h_L[0]), what the ITM head reads).
``image``  the same layers at the region positions; no CLS: ``mean``/``max`` over real regions.

vlprobe layer = "Why is Winoground Hard?" layer + 1 (the official model returns only the L block
outputs, indexed from 0).

Score: the model's match probability, ``softmax(itm_output(pooled))[:, 1]`` for pretrained
checkpoints (``sigmoid(rank_output(pooled))`` for retrieval-fine-tuned ones; see
:mod:`vlprobe.extract.models.uniter.model`).

Batching: every text is tokenised once; per batch of pairs the text embeddings of the distinct
captions and the region embeddings of the distinct images are computed once and indexed into
the batch, then the L joint blocks run over the whole batch (they see both modalities, so
nothing further can be shared).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vlprobe.devices import resolve_device, resolve_dtype
from vlprobe.extract.models.base import (
    CrossEncoder,
    PairOutput,
    ReferenceCheckpoint,
    StreamSpec,
    TextTable,
    check_pair_indices,
    check_regions,
    text_max_length,
)
from vlprobe.extract.models.hf import ResolvedCheckpoint, quiet_transformers, resolve_checkpoint
from vlprobe.extract.models.hooks import LayerSite
from vlprobe.extract.models.pooling import pool_states
from vlprobe.provenance import sha256_file
from vlprobe.validation import InputError

__all__ = ["DEFAULT_TOKENIZER", "UniterAdapter", "UniterImages", "UniterTexts"]

#: UNITER was trained with bert-base-cased's WordPiece vocabulary (28,996 tokens).
DEFAULT_TOKENIZER = "bert-base-cased"
_TOKENIZER_ALLOW = ["*.json", "*.txt"]


#: UNITER's text table is the plain one (kept under its own name).
UniterTexts = TextTable


@dataclass
class UniterImages:
    """Every image's regions held once.

    Attributes
    ----------
    features : Tensor, shape (N, R, D)
    pos7 : Tensor, shape (N, R, 7)
    mask : Tensor of bool, shape (N, R)
    """

    features: torch.Tensor
    pos7: torch.Tensor
    mask: torch.Tensor

    def __len__(self) -> int:
        return int(self.features.shape[0])


class UniterAdapter(CrossEncoder):
    """UNITER cross-encoder (official .pt + config JSON) with region features; streams text, image."""

    name = "uniter"
    image_input = "regions"
    reference_checkpoint = ReferenceCheckpoint(
        "uniter-base.pt", hub=False,
        source="the official pretrained UNITER-base of ChenRocks/UNITER (download_pretrained.sh), not on the "
               "Hugging Face hub, with its config uniter-base.json beside it",
    )
    region_preset = "uniter-10-100"
    score_kind = "match_probability"
    load_options = ("model_config", "tokenizer")

    def __init__(
        self, model: Any, tokenizer: Any, checkpoint: ResolvedCheckpoint, device: torch.device,
        dtype: torch.dtype, *, config_fingerprint: str = "", tokenizer_fingerprint: str = "",
        tokenizer_source: str = "",
    ) -> None:
        super().__init__(checkpoint, device, dtype)
        self.model = model
        self.tokenizer = tokenizer
        n, h = int(model.num_layers), int(model.hidden_size)
        kinds = ("embed",) + ("joint",) * n
        self._streams = {
            "text": StreamSpec("text", "pair", kinds, h, "token0", h),
            "image": StreamSpec("image", "pair", kinds, h, "none", None),
        }
        cfg = model.config
        self.feature_dim = int(cfg.img_dim)
        self.max_length = text_max_length(tokenizer, cfg.max_position_embeddings)
        self._fingerprints = {"config": config_fingerprint, "tokenizer": tokenizer_fingerprint}
        self.tokenizer_source = tokenizer_source

    @classmethod
    def load(
        cls, checkpoint: str, *, device: str = "auto", dtype: str = "float32",
        model_config: str | os.PathLike[str] | None = None, tokenizer: str | None = None,
    ) -> UniterAdapter:
        """Load an official UNITER checkpoint, its config JSON and a BERT cased tokenizer.

        Parameters
        ----------
        checkpoint : str
            Path of ``uniter-base.pt`` / ``uniter-large.pt`` (a plain state dict, fp16 or fp32).
        model_config : path, optional
            The config JSON; default ``<checkpoint stem>.json`` or ``uniter.json`` beside it.
        tokenizer : str, optional
            Tokenizer directory or hub id; default ``tokenizer/`` beside the checkpoint, else
            ``bert-base-cased`` (offline and not cached: a one-line error saying how to provide it).
        """
        from transformers import AutoTokenizer

        from vlprobe.extract.models.uniter.model import UniterConfig, UniterModel

        dev, torch_dtype = resolve_device(device), resolve_dtype(dtype)
        ckpt_path = Path(checkpoint).expanduser()
        if not ckpt_path.is_file():
            raise InputError(
                f"checkpoint: UNITER takes the official state-dict file (uniter-base.pt), got {checkpoint!r} "
                "which is not a file"
            )
        config_path = _config_path(ckpt_path, model_config)
        try:
            config = UniterConfig.from_json(config_path)
        except ValueError as exc:
            raise InputError(f"model_config: {str(exc).removeprefix('config: ')}") from None
        tok_spec, tok_default = _tokenizer_spec(ckpt_path, tokenizer)
        try:
            tok = resolve_checkpoint(tok_spec, param="tokenizer", allow_patterns=_TOKENIZER_ALLOW)
        except ValueError as exc:
            if tok_default:
                raise InputError(
                    f"{exc} (UNITER's tokenizer is {DEFAULT_TOKENIZER}; no tokenizer/ folder lies beside "
                    f"{ckpt_path.name}: pass --tokenizer DIR with a saved {DEFAULT_TOKENIZER} tokenizer)"
                ) from None
            raise
        with quiet_transformers():
            try:
                tokenizer_obj = AutoTokenizer.from_pretrained(tok.path)
            except (OSError, ValueError) as exc:
                raise InputError(f"tokenizer: {tok_spec!r} holds no readable tokenizer ({exc})") from None
        if len(tokenizer_obj) > config.vocab_size:
            raise InputError(
                f"tokenizer: {tok_spec!r} has {len(tokenizer_obj)} tokens but the UNITER config's "
                f"vocab_size is {config.vocab_size} (UNITER uses {DEFAULT_TOKENIZER})"
            )
        model = UniterModel.from_official(ckpt_path, config, dtype=torch_dtype, device=dev)
        resolved = ResolvedCheckpoint(str(checkpoint), ckpt_path.resolve(), "sha256:" + sha256_file(ckpt_path))
        return cls(
            model, tokenizer_obj, resolved, dev, torch_dtype,
            config_fingerprint="sha256:" + sha256_file(config_path),
            tokenizer_fingerprint=tok.fingerprint, tokenizer_source=tok_spec,
        )

    @property
    def streams(self) -> dict[str, StreamSpec]:
        return self._streams

    def input_fingerprints(self) -> dict[str, str]:
        return dict(self._fingerprints)

    # -- tables built once ------------------------------------------------------------------------------

    def prepare_images(self, images: Any) -> UniterImages:
        """The region features of a block of images (a ``RegionBatch``), boxes as pos7."""
        from vlprobe.extract.regions.boxes import boxes_to_7d

        features, boxes, m = check_regions(images, self.feature_dim, "UNITER")
        pos7 = np.where(m[..., None], boxes_to_7d(boxes), 0.0).astype(np.float32)
        return UniterImages(torch.from_numpy(features), torch.from_numpy(pos7), torch.from_numpy(m))

    # -- the batched pass ---------------------------------------------------------------------------------

    @torch.inference_mode()
    def encode_pairs(
        self, texts: UniterTexts, images: UniterImages, text_idx: np.ndarray, image_idx: np.ndarray,
        layers: Mapping[str, Sequence[int]] | None, poolings: Sequence[str],
    ) -> PairOutput:
        """Score (and optionally pool the views of) a batch of pairs in one joint forward.

        Returns
        -------
        PairOutput
            ``scores`` (B,); ``states["text"|"image"][pooling]`` (B, L, H) when ``layers`` is given;
            ``pooled["text"]`` (B, H).
        """
        text_idx, image_idx = check_pair_indices(text_idx, image_idx)
        layers = self.pair_layers(layers)
        u_txt, t_inv = np.unique(text_idx, return_inverse=True)
        u_img, i_inv = np.unique(image_idx, return_inverse=True)
        rows_i = torch.from_numpy(u_img)
        t_sel, i_sel = torch.from_numpy(t_inv).to(self.device), torch.from_numpy(i_inv).to(self.device)
        ids, text_mask = texts.take(u_txt, self.device)
        t = ids.shape[1]
        text_mask = text_mask.bool()[t_sel]
        img_mask = images.mask[rows_i].to(self.device)[i_sel]
        text_emb = self.model.embed_text(ids)[t_sel]
        img_emb = self.model.embed_image(
            images.features[rows_i].to(self.device, self.dtype), images.pos7[rows_i].to(self.device, self.dtype)
        )[i_sel]
        joint_mask = torch.cat([text_mask, img_mask], dim=1)
        emb = torch.cat([text_emb, img_emb], dim=1)
        n_blocks = self.model.num_layers
        if layers and (n_blocks in layers["text"] or n_blocks in layers["image"]):
            last, hidden = self.model.encode(emb, joint_mask, output_hidden_states=True)
        else:
            last, hidden = self._encode_cls_last(emb, joint_mask, keep=bool(layers))
        pooled = self.model.uniter.pooler(last[:, 0])
        itm_logits, _, scores = self.model.score(pooled)
        states: dict[str, dict[str, torch.Tensor]] = {}
        if layers and hidden is not None:
            tok_pool = [p for p in poolings if p in ("cls", "mean", "max")]
            text_layers, image_layers = list(layers["text"]), list(layers["image"])
            if text_layers:
                h = torch.stack([hidden[k][:, :t] for k in text_layers], dim=1)
                cls_index = torch.zeros(h.shape[0], dtype=torch.long)
                states["text"] = pool_states(h, text_mask, cls_index, tok_pool)
            if image_layers:
                h = torch.stack([hidden[k][:, t:] for k in image_layers], dim=1)
                states["image"] = pool_states(h, img_mask, None, [p for p in tok_pool if p != "cls"])
        logits = None if itm_logits is None else itm_logits.float()
        return PairOutput(scores.float(), states, {"text": pooled.float()}, logits)

    def layer_sites(self, stream: str) -> list[LayerSite]:
        """``text``: the text embeddings, then each block (its output is the joint sequence; the
        text view is its first T positions, so edits of the text view leave the regions alone).
        ``image``: the region embeddings, then each block, at the region positions: the last R of
        the joint sequence ``[text padded to the batch's longest | R regions]`` (``tail`` sites:
        the offset is the batch's text width, counted from the end for every row)."""
        blocks = self.model.uniter.encoder.layer
        if stream == "text":
            return [LayerSite(self.model.uniter.embeddings), *(LayerSite(m) for m in blocks)]
        if stream == "image":
            return [LayerSite(self.model.uniter.img_embeddings, tail=True), *(LayerSite(m, tail=True) for m in blocks)]
        raise InputError(f"stream: UNITER has streams text and image, got {stream!r}")

    @torch.inference_mode()
    def plain_pair_scores(
        self, texts: UniterTexts, images: UniterImages, text_idx: np.ndarray, image_idx: np.ndarray,
    ) -> torch.Tensor:
        text_idx, image_idx = check_pair_indices(text_idx, image_idx)
        ids, mask = texts.take(text_idx, self.device)
        rows = torch.from_numpy(image_idx)
        out = self.model(
            ids, mask, images.features[rows].to(self.device, self.dtype), images.pos7[rows].to(self.device, self.dtype),
            images.mask[rows].to(self.device), output_hidden_states=False,
        )
        return out.match_prob.float()

    def _encode_cls_last(
        self, emb: torch.Tensor, joint_mask: torch.Tensor, *, keep: bool
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None]:
        """The blocks with the last one computed at token 0 only: (B, 1, H) and the L states before it.

        The score reads only the pooled [CLS] token, so when the last layer's states are not asked
        for, the other positions' queries, attention outputs and FFN of the last block are skipped
        (the block's own modules, in ``UniterModel``'s order).
        """
        from vlprobe.extract.models.uniter.model import MASK_CONSTANT

        additive = (1.0 - joint_mask.to(emb.dtype))[:, None, None, :] * MASK_CONSTANT
        blocks = list(self.model.uniter.encoder.layer)
        x, states = emb, [emb]
        for block in blocks[:-1]:
            x = block(x, additive)
            states.append(x)
        last = blocks[-1]
        a = last.attention.output(last.attention.self(x, additive, n_queries=1), x[:, :1])
        return last.output(last.intermediate(a), a), (tuple(states) if keep else None)

    @torch.inference_mode()
    def full_forward(
        self, texts: UniterTexts, images: UniterImages, text_idx: np.ndarray, image_idx: np.ndarray,
        *, output_hidden_states: bool = True,
    ) -> Any:
        """One plain ``UniterModel.forward`` over the pairs (each pair's own inputs, no sharing).

        Returns
        -------
        vlprobe.extract.models.uniter.model.UniterOutput
        """
        text_idx, image_idx = check_pair_indices(text_idx, image_idx)
        i_idx = torch.from_numpy(image_idx)
        ids, mask = texts.take(text_idx, self.device)
        return self.model(
            ids, mask, images.features[i_idx].to(self.device, self.dtype), images.pos7[i_idx].to(self.device, self.dtype),
            images.mask[i_idx].to(self.device), output_hidden_states=output_hidden_states,
        )

    def describe(self) -> dict[str, Any]:
        cfg = self.model.config
        report = self.model.load_report
        return {
            "model_class": type(self.model).__name__,
            "layers": int(cfg.num_hidden_layers),
            "hidden_size": int(cfg.hidden_size),
            "img_dim": self.feature_dim,
            "score_head": self.model.score_head,
            "score": "softmax(itm_output(pooled))[:, 1]" if self.model.score_head == "itm"
            else "sigmoid(rank_output(pooled))",
            "source_dtypes": list(report.source_dtypes) if report else [],
            "tokenizer": self.tokenizer_source,
            "text_max_length": self.max_length,
            "visual_pos": "pos7 = normalised x1,y1,x2,y2,w,h,w*h",
            "paper_layer_index": "vlprobe layer - 1 (WWH has no embedding layer)",
        }


def _config_path(checkpoint: Path, given: str | os.PathLike[str] | None) -> Path:
    if given is not None:
        p = Path(given).expanduser()
        if not p.is_file():
            raise InputError(f"model_config: {str(given)!r} is not a file (expected the UNITER config JSON)")
        return p
    for candidate in (checkpoint.with_suffix(".json"), checkpoint.parent / "uniter.json"):
        if candidate.is_file():
            return candidate
    raise InputError(
        f"model_config: UNITER needs its config JSON; none beside {checkpoint.name} "
        f"({checkpoint.with_suffix('.json').name} or uniter.json): pass --model-config uniter-base.json"
    )


def _tokenizer_spec(checkpoint: Path, given: str | None) -> tuple[str, bool]:
    """(tokenizer spec, whether it is the default) for a checkpoint file."""
    if given is not None:
        return given, False
    beside = checkpoint.parent / "tokenizer"
    if beside.is_dir():
        return str(beside), True
    return DEFAULT_TOKENIZER, True
