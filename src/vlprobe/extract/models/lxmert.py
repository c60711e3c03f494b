"""LXMERT (Tan & Bansal 2019) through ``transformers.LxmertForPreTraining``.

Streams (both ``modality="pair"``: every state depends on the image-caption pair)
-------------------------------------------------------------------------------
``lang``    layers 0..14: 0 = word + position embeddings (``lxmert.embeddings`` output), 1..9 the
            language-only layers (kind ``lang``), 10..14 the language side of the cross-modality
            layers (``cross``). ``cls`` = token 0 ([CLS]); ``pooled`` = ``lxmert.pooler`` output
            (tanh(W h_14[0]), what the match head reads).
``vision``  layers 0..10: 0 = the visual feature encoder output (``encoder.visn_fc``: (LN(W f) +
            LN(W box)) / 2), 1..5 the object-relationship layers (``rel``), 6..10 the vision side
            of the cross layers (``cross``). No CLS token: ``mean``/``max`` over the real boxes.

The paper's code ("Why is Winoground Hard?") has no embedding layer: its language layer k is
vlprobe's k + 1 (its 0..8 language-only, 9..13 cross), its vision layer k is vlprobe's k + 1.

Inputs: the caption is tokenised by the checkpoint's (uncased BERT) tokenizer; ``visual_feats``
are the region features (36 x 2048 for the released model), ``visual_pos`` the boxes as
normalised ``(x1, y1, x2, y2)`` in [0, 1] (as the original loader asserts), and padded boxes are
masked through ``visual_attention_mask``.

Score: ``softmax(cross_relationship_score)[:, 1]``, the probability that caption and image
match. Index 1 = match: in the original LXMERT pretraining code the ``is_matched`` label is 1 for
the true (image, sentence) pair and 0 when the sentence was swapped for another image's, and the
two ``cls.seq_relationship`` logits are trained with cross-entropy against it (transformers'
``matched_label`` doc says the same; empirically index 1 ranks true pairs higher, transformers
issue #7266; "Why is Winoground Hard?" and VALSE read index 1).

Shared single-modality work: the 9 language layers see only the caption and the 5 relation layers
only the image, so :meth:`LxmertAdapter.encode_pairs` computes them once per caption and once per
image (kept in a bounded LRU memo inside the text/image tables) and runs only the 5 cross layers
per pair, calling transformers' own layer modules in the order ``LxmertEncoder.forward`` does.
:meth:`LxmertAdapter.full_forward` is the plain one-``model(...)``-per-batch path it is tested
against.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

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
from vlprobe.extract.models.hf import ResolvedCheckpoint, load_hf
from vlprobe.extract.models.hooks import LayerSite
from vlprobe.extract.models.pooling import pool_states
from vlprobe.validation import InputError

__all__ = ["MATCH_INDEX", "LxmertAdapter", "LxmertImages", "LxmertTexts"]

_ALLOW = ["*.json", "*.txt", "*.safetensors", "*.bin", "*.model"]
#: Column of ``cross_relationship_score`` that means "caption matches image" (see module docstring).
MATCH_INDEX = 1
#: Captions / images whose single-modality outputs the memo keeps (least recently used dropped).
MEMO_CAPACITY = 4096


@dataclass
class _Entry:
    """Single-modality result of one caption or image."""

    output: torch.Tensor  # (T_i, H) language output trimmed to the caption, or (R, H) relation output
    mask: torch.Tensor  # (T_i,) or (R,) bool
    states: dict[str, torch.Tensor]  # pooling -> (L_single, H) pooled states of the asked layers


@dataclass
class LxmertTexts(TextTable):
    """Every caption tokenised once (padded to the longest), plus the memo of language outputs.

    Attributes
    ----------
    input_ids, attention_mask : Tensor, shape (N, T)
    lengths : ndarray of int, shape (N,)
    """

    memo: OrderedDict[tuple[Any, ...], _Entry] = field(default_factory=OrderedDict)


@dataclass
class LxmertImages:
    """Every image's regions held once, plus the memo of relation-layer outputs.

    Attributes
    ----------
    features : Tensor, shape (N, R, D)
    boxes : Tensor, shape (N, R, 4)
        Normalised x1, y1, x2, y2.
    mask : Tensor of bool, shape (N, R)
    """

    features: torch.Tensor
    boxes: torch.Tensor
    mask: torch.Tensor
    memo: OrderedDict[tuple[Any, ...], _Entry] = field(default_factory=OrderedDict)

    def __len__(self) -> int:
        return int(self.features.shape[0])


class LxmertAdapter(CrossEncoder):
    """LXMERT cross-encoder with region features; streams lang (0..14), vision (0..10)."""

    name = "lxmert"
    image_input = "regions"
    reference_checkpoint = ReferenceCheckpoint(
        "unc-nlp/lxmert-base-uncased", source="LXMERT, as 'Why is Winoground Hard?' and VALSE ran it")
    region_preset = "lxmert-36"
    score_kind = "match_probability"
    text_table = LxmertTexts

    def __init__(
        self, model: Any, tokenizer: Any, checkpoint: ResolvedCheckpoint, device: torch.device,
        dtype: torch.dtype, memo_capacity: int = MEMO_CAPACITY,
    ) -> None:
        super().__init__(checkpoint, device, dtype)
        self.model = model
        self.tokenizer = tokenizer
        cfg = model.config
        self.n_lang, self.n_rel, self.n_cross = int(cfg.l_layers), int(cfg.r_layers), int(cfg.x_layers)
        h = int(cfg.hidden_size)
        self._streams = {
            "lang": StreamSpec(
                "lang", "pair", ("embed",) + ("lang",) * self.n_lang + ("cross",) * self.n_cross, h, "token0", h,
            ),
            "vision": StreamSpec(
                "vision", "pair", ("embed",) + ("rel",) * self.n_rel + ("cross",) * self.n_cross, h, "none", None,
            ),
        }
        self.feature_dim = int(cfg.visual_feat_dim)
        self.max_length = text_max_length(tokenizer, cfg.max_position_embeddings)
        self.memo_capacity = int(memo_capacity)

    @classmethod
    def load(cls, checkpoint: str, *, device: str = "auto", dtype: str = "float32") -> LxmertAdapter:
        """Load ``LxmertForPreTraining`` and its tokenizer from a directory or a hub id."""
        from transformers import LxmertForPreTraining

        hf = load_hf(checkpoint, "lxmert", LxmertForPreTraining, device=device, dtype=dtype, allow_patterns=_ALLOW,
                     needed=("lxmert.", "cls.seq_relationship"))
        return cls(hf.model, hf.tokenizer, hf.checkpoint, hf.device, hf.dtype)

    @property
    def streams(self) -> dict[str, StreamSpec]:
        return self._streams

    # -- tables built once --------------------------------------------------------------------------

    def prepare_images(self, images: Any) -> LxmertImages:
        """The region features of a block of images (a ``RegionBatch``), held as tensors."""
        features, boxes, m = check_regions(images, self.feature_dim, "LXMERT")
        return LxmertImages(torch.from_numpy(features), torch.from_numpy(boxes), torch.from_numpy(m))

    # -- the shared pass -------------------------------------------------------------------------------

    @torch.inference_mode()
    def encode_pairs(
        self, texts: LxmertTexts, images: LxmertImages, text_idx: np.ndarray, image_idx: np.ndarray,
        layers: Mapping[str, Sequence[int]] | None, poolings: Sequence[str],
    ) -> PairOutput:
        """Score (and optionally pool the states of) a batch of pairs; see the module docstring.

        Returns
        -------
        PairOutput
            ``scores`` (B,); ``states["lang"|"vision"][pooling]`` (B, L, H) when ``layers`` is given;
            ``pooled["lang"]`` (B, H).
        """
        text_idx, image_idx = check_pair_indices(text_idx, image_idx)
        layers = self.pair_layers(layers)
        lang_layers = layers["lang"] if layers else []
        vis_layers = layers["vision"] if layers else []
        lang_pool = [p for p in poolings if p in ("cls", "mean", "max")]
        vis_pool = [p for p in lang_pool if p != "cls"]
        lang_single = [k for k in lang_layers if k <= self.n_lang]
        vis_single = [k for k in vis_layers if k <= self.n_rel]

        u_txt, t_inv = np.unique(text_idx, return_inverse=True)
        u_img, i_inv = np.unique(image_idx, return_inverse=True)
        t_entries = self._text_entries(texts, u_txt, lang_single, lang_pool, keep=len(text_idx))
        i_entries = self._image_entries(images, u_img, vis_single, vis_pool, keep=len(text_idx))

        t_sel = torch.from_numpy(t_inv).to(self.device)
        i_sel = torch.from_numpy(i_inv).to(self.device)
        lang = torch.nn.utils.rnn.pad_sequence([e.output for e in t_entries], batch_first=True)[t_sel]
        lang_mask = torch.nn.utils.rnn.pad_sequence([e.mask for e in t_entries], batch_first=True)[t_sel]
        vis = torch.stack([e.output for e in i_entries])[i_sel]
        vis_mask = torch.stack([e.mask for e in i_entries])[i_sel]
        lang_ext, vis_ext = self._extended(lang_mask), self._extended(vis_mask)

        lang_cross, vis_cross = [], []
        x_layers = list(self.model.lxmert.encoder.x_layers)
        last_lang, last_vis = self.n_lang + self.n_cross, self.n_rel + self.n_cross
        whole_last = last_lang in lang_layers or last_vis in vis_layers
        for layer in x_layers if whole_last else x_layers[:-1]:
            lang, vis = layer(lang, lang_ext, vis, vis_ext)[:2]
            lang_cross.append(lang)
            vis_cross.append(vis)
        if not whole_last:
            lang = self._last_cls_only(x_layers[-1], lang, lang_ext, vis, vis_ext)
        pooled = self.model.lxmert.pooler(lang)
        logits = self.model.cls.seq_relationship(pooled).float()
        scores = torch.softmax(logits, dim=-1)[:, MATCH_INDEX]

        states: dict[str, dict[str, torch.Tensor]] = {}
        if lang_layers:
            states["lang"] = self._join(
                t_entries, t_sel, lang_cross, lang_layers, self.n_lang, lang_mask, lang_pool, token0=True
            )
        if vis_layers:
            states["vision"] = self._join(
                i_entries, i_sel, vis_cross, vis_layers, self.n_rel, vis_mask, vis_pool, token0=False
            )
        return PairOutput(scores, states, {"lang": pooled.float()}, logits)

    @staticmethod
    def _last_cls_only(
        layer: Any, lang: torch.Tensor, lang_ext: torch.Tensor, vis: torch.Tensor, vis_ext: torch.Tensor
    ) -> torch.Tensor:
        """The last cross layer's language output at token 0 only, (B, 1, H).

        The score reads only the pooled token 0, so when the last layer's states are not asked for
        its vision side (and the other language positions' self-attention queries and FFN) are
        skipped; the modules and their order are ``LxmertXLayer.forward``'s.
        """
        cross = layer.visual_attention(lang, vis, ctx_att_mask=vis_ext)[0]
        own = layer.lang_self_att
        att = own.output(own.self(cross[:, :1], cross, lang_ext)[0], cross[:, :1])
        return layer.lang_output(layer.lang_inter(att), att)

    def _extended(self, mask: torch.Tensor) -> torch.Tensor:
        """(B, T) 0/1 -> (B, 1, 1, T) additive mask, as LxmertModel.forward builds it."""
        ext = mask[:, None, None, :].to(self.dtype)
        return (1.0 - ext) * torch.finfo(self.dtype).min

    def _join(
        self, entries: list[_Entry], sel: torch.Tensor, cross: list[torch.Tensor], wanted: list[int],
        n_single: int, mask: torch.Tensor, poolings: list[str], *, token0: bool,
    ) -> dict[str, torch.Tensor]:
        """Pooled states of the ``wanted`` layers, in that order, from the memoised single-modality
        layers and this pass's cross layers."""
        cross_layers = [k for k in wanted if k > n_single]
        # the parts below come single layers first, then cross layers: back to the order asked
        placed = [i for i, k in enumerate(wanted) if k <= n_single] + [i for i, k in enumerate(wanted) if k > n_single]
        order = torch.as_tensor(np.argsort(placed, kind="stable"))
        out: dict[str, torch.Tensor] = {}
        pooled_cross: dict[str, torch.Tensor] = {}
        if cross_layers:
            hidden = torch.stack([cross[k - n_single - 1] for k in cross_layers], dim=1)
            cls_index = torch.zeros(hidden.shape[0], dtype=torch.long) if token0 else None
            pooled_cross = pool_states(hidden, mask, cls_index, poolings)
        for p in poolings:
            parts = []
            if len(cross_layers) < len(wanted):
                parts.append(torch.stack([e.states[p] for e in entries])[sel])
            if cross_layers:
                parts.append(pooled_cross[p])
            joined = torch.cat(parts, dim=1) if len(parts) > 1 else parts[0]
            out[p] = joined if placed == sorted(placed) else joined[:, order.to(joined.device)]
        return out

    def _text_entries(
        self, texts: LxmertTexts, rows: np.ndarray, layers: list[int], poolings: list[str], keep: int
    ) -> list[_Entry]:
        """Language-only outputs of caption ``rows`` (memoised; computed for the missing ones)."""

        def run(missing: list[int]) -> tuple[list[torch.Tensor], torch.Tensor]:
            ids, mask = texts.take(missing, self.device)
            first = self.model.lxmert.embeddings(ids, torch.zeros_like(ids))
            return self._tower(first, mask, self.model.lxmert.encoder.layer), mask

        return self._entries(texts.memo, rows, layers, poolings, keep, run, texts.lengths, token0=True)

    def _image_entries(
        self, images: LxmertImages, rows: np.ndarray, layers: list[int], poolings: list[str], keep: int
    ) -> list[_Entry]:
        """Object-relationship outputs of image ``rows`` (memoised; computed for the missing ones)."""

        def run(missing: list[int]) -> tuple[list[torch.Tensor], torch.Tensor]:
            idx = torch.as_tensor(missing)
            feats = images.features[idx].to(self.device, self.dtype)
            boxes = images.boxes[idx].to(self.device, self.dtype)
            mask = images.mask[idx].to(self.device)
            enc = self.model.lxmert.encoder
            return self._tower(enc.visn_fc(feats, boxes), mask, enc.r_layers), mask

        return self._entries(images.memo, rows, layers, poolings, keep, run, None, token0=False)

    def _tower(self, first: torch.Tensor, mask: torch.Tensor, blocks: Any) -> list[torch.Tensor]:
        """``first`` and the output of each single-modality block after it (layer 0 first)."""
        ext = self._extended(mask)
        out = [first]
        for block in blocks:
            out.append(block(out[-1], ext)[0])
        return out

    def _entries(
        self, memo: OrderedDict[tuple[Any, ...], _Entry], rows: np.ndarray, layers: list[int],
        poolings: list[str], keep: int,
        run: Callable[[list[int]], tuple[list[torch.Tensor], torch.Tensor]],
        lengths: np.ndarray | None, *, token0: bool,
    ) -> list[_Entry]:
        """Memo entries of ``rows`` for these layers and poolings; ``run(missing)`` computes the
        states (layer 0 first) and mask of the rows not in the memo; ``lengths`` trims padding."""
        key = (tuple(layers), tuple(poolings))
        missing = [int(r) for r in rows if (int(r), *key) not in memo]
        if missing:
            collected, mask = run(missing)
            last = collected[-1]
            states = self._pool_single(collected, layers, mask, poolings, token0=token0)
            for j, r in enumerate(missing):
                n = int(lengths[r]) if lengths is not None else last.shape[1]
                entry = _Entry(last[j, :n], mask[j, :n].bool(), {p: v[j] for p, v in states.items()})
                self._remember(memo, (r, *key), entry, keep)
        return [self._recall(memo, (int(r), *key)) for r in rows]

    @staticmethod
    def _pool_single(
        collected: list[torch.Tensor], layers: list[int], mask: torch.Tensor, poolings: list[str],
        *, token0: bool,
    ) -> dict[str, torch.Tensor]:
        if not layers or not poolings:
            return {}
        hidden = torch.stack([collected[k] for k in layers], dim=1)
        cls_index = torch.zeros(hidden.shape[0], dtype=torch.long) if token0 else None
        return pool_states(hidden, mask, cls_index, poolings)

    def _remember(self, memo: OrderedDict[tuple[Any, ...], _Entry], key: tuple[Any, ...], entry: _Entry, keep: int) -> None:
        memo[key] = entry
        memo.move_to_end(key)
        while len(memo) > max(self.memo_capacity, 2 * keep):
            memo.popitem(last=False)

    @staticmethod
    def _recall(memo: OrderedDict[tuple[Any, ...], _Entry], key: tuple[Any, ...]) -> _Entry:
        memo.move_to_end(key)
        return memo[key]

    # -- the plain path --------------------------------------------------------------------------------

    def layer_sites(self, stream: str) -> list[LayerSite]:
        """``lang``: the embeddings, the language layers, then the language side (element 0) of
        each cross layer; ``vision``: ``visn_fc``, the relation layers, then the vision side
        (element 1) of each cross layer. Edits act on :meth:`plain_pair_scores` (the shared pass
        memoises the single-modality layers and would not see them)."""
        enc = self.model.lxmert.encoder
        if stream == "lang":
            return [LayerSite(self.model.lxmert.embeddings), *(LayerSite(m) for m in enc.layer),
                    *(LayerSite(m, 0) for m in enc.x_layers)]
        if stream == "vision":
            return [LayerSite(enc.visn_fc), *(LayerSite(m) for m in enc.r_layers),
                    *(LayerSite(m, 1) for m in enc.x_layers)]
        raise InputError(f"stream: LXMERT has streams lang and vision, got {stream!r}")

    def plain_pair_scores(
        self, texts: LxmertTexts, images: LxmertImages, text_idx: np.ndarray, image_idx: np.ndarray,
    ) -> torch.Tensor:
        return self.full_forward(texts, images, text_idx, image_idx)[0]

    @torch.inference_mode()
    def full_forward(
        self, texts: LxmertTexts, images: LxmertImages, text_idx: np.ndarray, image_idx: np.ndarray,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...], tuple[torch.Tensor, ...], torch.Tensor, torch.Tensor]:
        """One ``model(...)`` call over the pairs, embeddings captured by forward hooks.

        Returns
        -------
        scores : Tensor, shape (B,)
        lang_states : tuple of 15 Tensors (B, T, H)
            Layer 0 (embeddings) first.
        vision_states : tuple of 11 Tensors (B, R, H)
        lang_mask : Tensor, shape (B, T)
        vision_mask : Tensor, shape (B, R)
        """
        text_idx, image_idx = check_pair_indices(text_idx, image_idx)
        i_idx = torch.from_numpy(image_idx)
        ids, mask = texts.take(text_idx, self.device)
        vmask = images.mask[i_idx].to(self.device)
        captured: dict[str, torch.Tensor] = {}
        hooks = [
            self.model.lxmert.embeddings.register_forward_hook(lambda m, a, o: captured.__setitem__("lang", o)),
            self.model.lxmert.encoder.visn_fc.register_forward_hook(lambda m, a, o: captured.__setitem__("vision", o)),
        ]
        try:
            out = self.model(
                input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids),
                visual_feats=images.features[i_idx].to(self.device, self.dtype),
                visual_pos=images.boxes[i_idx].to(self.device, self.dtype),
                visual_attention_mask=vmask.to(self.dtype), output_hidden_states=True,
            )
        finally:
            for h in hooks:
                h.remove()
        scores = torch.softmax(out.cross_relationship_score.float(), dim=-1)[:, MATCH_INDEX]
        lang = (captured["lang"], *out.language_hidden_states)
        vision = (captured["vision"], *out.vision_hidden_states)
        return scores, lang, vision, mask, vmask

    def describe(self) -> dict[str, Any]:
        cfg = self.model.config
        return {
            "model_class": type(self.model).__name__,
            "layers": {"language": self.n_lang, "relation": self.n_rel, "cross": self.n_cross},
            "hidden_size": int(cfg.hidden_size),
            "visual_feat_dim": self.feature_dim,
            "visual_pos": "normalised x1,y1,x2,y2",
            "text_max_length": self.max_length,
            "tokenizer": type(self.tokenizer).__name__,
            "score": f"softmax(cross_relationship_score)[:, {MATCH_INDEX}]",
            "paper_layer_index": "vlprobe layer - 1 (WWH has no embedding layer)",
        }
