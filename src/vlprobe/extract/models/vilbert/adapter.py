"""ViLBERT and 12-in-1 (vilbert-multi-task checkpoints) as a vlprobe cross-encoder on region features.

Inputs: ``--checkpoint`` the state-dict file the release ships (``pytorch_model_9.bin`` of the
Conceptual Captions pretraining, ``multi_task_model.bin`` of 12-in-1; a ``module.`` prefix is
stripped), ``--model-config`` its config JSON (default: ``<checkpoint stem>.json``,
``vilbert.json`` or a ViLBERT ``config.json`` beside it; the release's is
``bert_base_6layer_6conect.json``), ``--tokenizer`` (default: a ``tokenizer/`` folder beside the
checkpoint, else ``bert-base-uncased``). Load options: ``score_head=itm|vil_logit`` and
``task_id=N`` (12-in-1 checkpoints insert a task token after [CLS] and need it; VALSE's release
does not say which task it used: the retrieval tasks' ids are the ones whose head is
``vil_logit``).

Regions as vilbert-multi-task's feature reader gives them: a first, global region whose feature
is the mean of the image's real regions and whose box is the whole image, then the regions;
boxes as ``(x1, y1, x2, y2, area)`` normalised to the image.

Streams (both ``modality="pair"``):

``text``   0 = embeddings, then every text state in the order the model computes it: BERT
           layers (kind ``self``) and co-attention layers (``coattn``); 19 layers for the
           released 12 + 6 layout. ``cls`` = [CLS]; ``pooled`` = ``t_pooler`` (ReLU(W h[0])).
           With a task token the text has one more position (index 1).
``image``  0 = region embeddings, then every image state: co-attention (``coattn``) and image
           layers (``self``); 13 for 6 + 6. ``cls`` = the global region; ``pooled`` = ``v_pooler``.

Score: ``score_head=itm`` (the default): ``softmax(cls.bi_seq_relationship(t_pooled * v_pooled))``
at index 0, the match column (ViLBERT's pretraining labels a random caption 1); ``vil_logit``:
12-in-1's retrieval logit ``vil_logit(t_pooled * v_pooled)`` (a raw logit, as its retrieval
evaluation ranks by it).
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
    StreamSpec,
    TextTable,
    check_pair_indices,
    check_regions,
    text_max_length,
)
from vlprobe.extract.models.hf import (
    ResolvedCheckpoint,
    quiet_transformers,
    reading_weights,
    resolve_checkpoint,
)
from vlprobe.extract.models.pooling import pool_states
from vlprobe.extract.models.vilbert.model import ViLBertConfig, ViLBertModel
from vlprobe.provenance import sha256_file
from vlprobe.validation import InputError, check_choice, check_int

__all__ = ["DEFAULT_TOKENIZER", "MATCH_INDEX", "SCORE_HEADS", "ViLBertAdapter", "ViLBertImages"]

DEFAULT_TOKENIZER = "bert-base-uncased"
#: Column of ``cls.bi_seq_relationship`` that means "caption matches image".
MATCH_INDEX = 0
SCORE_HEADS: tuple[str, ...] = ("itm", "vil_logit")
_HEAD_KEYS = {"itm": "cls.bi_seq_relationship.", "vil_logit": "vil_logit."}


@dataclass
class ViLBertImages:
    """Every image's regions with the global region first: features (N, 1+R, D), loc5 (N, 1+R, 5), mask."""

    features: torch.Tensor
    loc5: torch.Tensor
    mask: torch.Tensor

    def __len__(self) -> int:
        return int(self.features.shape[0])


class ViLBertAdapter(CrossEncoder):
    """ViLBERT / 12-in-1 (vilbert-multi-task .bin + config JSON) with region features; streams text, image."""

    name = "vilbert"
    image_input = "regions"
    load_options = ("model_config", "tokenizer", "score_head", "task_id")

    def __init__(
        self, model: ViLBertModel, tokenizer: Any, checkpoint: ResolvedCheckpoint, device: torch.device,
        dtype: torch.dtype, *, score_head: str, task_id: int | None, fingerprints: dict[str, str],
        tokenizer_source: str, ignored: list[str],
    ) -> None:
        super().__init__(checkpoint, device, dtype)
        self.model, self.tokenizer = model, tokenizer
        self.score_head, self.task_id = score_head, task_id
        self.score_kind = "match_probability" if score_head == "itm" else "match_logit"
        cfg = model.config
        t_kinds = ["self" if k == "t" else "coattn" for k, _ in model.steps if k in ("t", "c")]
        v_kinds = ["self" if k == "v" else "coattn" for k, _ in model.steps if k in ("v", "c")]
        self._streams = {
            "text": StreamSpec("text", "pair", ("embed", *t_kinds), cfg.hidden_size, "token0", cfg.bi_hidden_size),
            "image": StreamSpec("image", "pair", ("embed", *v_kinds), cfg.v_hidden_size, "token0", cfg.bi_hidden_size),
        }
        self.feature_dim = cfg.v_feature_size
        room = cfg.max_position_embeddings
        self.max_length = text_max_length(tokenizer, room)
        self._fingerprints = fingerprints
        self.tokenizer_source, self.ignored = tokenizer_source, ignored

    @classmethod
    def load(
        cls, checkpoint: str, *, device: str = "auto", dtype: str = "float32",
        model_config: str | os.PathLike[str] | None = None, tokenizer: str | None = None,
        score_head: str | None = None, task_id: int | str | None = None,
    ) -> ViLBertAdapter:
        """Load a vilbert-multi-task checkpoint (see the module docstring)."""
        from transformers import AutoTokenizer

        dev, torch_dtype = resolve_device(device), resolve_dtype(dtype)
        path = Path(checkpoint).expanduser()
        if not path.is_file():
            raise InputError(
                f"checkpoint: ViLBERT takes the released state-dict file (pytorch_model_9.bin, multi_task_model.bin; "
                f"vilbert.bin for vlprobe's fixture), got {checkpoint!r} which is not a file"
            )
        config_path = _config_path(path, model_config)
        cfg = ViLBertConfig.from_json(config_path)
        state = _read_state(path, checkpoint)
        task_key = "bert.embeddings.task_embeddings.weight"
        if (task_key in state) != bool(cfg.task_specific_tokens):  # 12-in-1 weights, pretrained config, or back
            said = "lacks" if cfg.task_specific_tokens else "holds"
            raise InputError(
                f"checkpoint: {checkpoint!r} does not fit its ViLBERT config ({config_path.name}): it {said} "
                f"{task_key} (12-in-1's task tokens), the config's task_specific_tokens is "
                f"{bool(cfg.task_specific_tokens)}; give the config released with these weights (--model-config)"
            )
        heads = [h for h, prefix in _HEAD_KEYS.items() if f"{prefix}weight" in state]
        head = check_choice(score_head, "score_head", SCORE_HEADS) if score_head is not None else (heads[0] if heads else "itm")
        if head not in heads:
            raise InputError(f"score_head: {checkpoint!r} has no {head} head ({_HEAD_KEYS[head]}weight); it has "
                             f"{', '.join(heads) or 'none'}")
        task = None
        if cfg.task_specific_tokens:
            if task_id is None:
                raise InputError("task_id: this 12-in-1 checkpoint inserts a task token; give --model-option task_id=N "
                                 "(0..19; the retrieval tasks score with vil_logit)")
            task = check_int(int(task_id) if isinstance(task_id, str) and task_id.isdigit() else task_id, "task_id",
                             low=0, high=19)
        elif task_id is not None:
            raise InputError("task_id: this checkpoint has no task tokens; leave task_id unset")
        with torch.device("meta"):
            model = ViLBertModel(cfg, itm_head=head == "itm", vil_logit=head == "vil_logit")
        ignored = _fit(model, state, checkpoint)
        tok_spec, tok_default = (tokenizer, False) if tokenizer is not None else (
            (str(path.parent / "tokenizer"), True) if (path.parent / "tokenizer").is_dir() else (DEFAULT_TOKENIZER, True))
        try:
            tok = resolve_checkpoint(tok_spec, param="tokenizer", allow_patterns=["*.json", "*.txt"])
        except InputError as exc:
            if tok_default:
                raise InputError(f"{exc} (ViLBERT's tokenizer is {DEFAULT_TOKENIZER}; no tokenizer/ folder lies beside "
                                 f"{path.name}: pass --tokenizer DIR with a saved {DEFAULT_TOKENIZER} tokenizer)") from None
            raise
        with quiet_transformers():
            try:
                tokenizer_obj = AutoTokenizer.from_pretrained(tok.path)
            except (OSError, ValueError) as exc:
                raise InputError(f"tokenizer: {tok_spec!r} holds no readable tokenizer ({exc})") from None
        if len(tokenizer_obj) > cfg.vocab_size:
            raise InputError(f"tokenizer: {tok_spec!r} has {len(tokenizer_obj)} tokens, the config's vocab_size {cfg.vocab_size}")
        resolved = ResolvedCheckpoint(str(checkpoint), path.resolve(), "sha256:" + sha256_file(path))
        return cls(model.to(dev, torch_dtype).eval(), tokenizer_obj, resolved, dev, torch_dtype, score_head=head,
                   task_id=task, fingerprints={"config": "sha256:" + sha256_file(config_path), "tokenizer": tok.fingerprint},
                   tokenizer_source=tok_spec, ignored=ignored)

    @property
    def streams(self) -> dict[str, StreamSpec]:
        return self._streams

    def input_fingerprints(self) -> dict[str, str]:
        return dict(self._fingerprints)

    def model_options(self) -> dict[str, Any]:
        return {"score_head": self.score_head, **({"task_id": self.task_id} if self.task_id is not None else {})}

    def prepare_images(self, images: Any) -> ViLBertImages:
        """Regions as vilbert-multi-task reads them: the global mean region first, 5-d boxes."""
        features, boxes, m = check_regions(images, self.feature_dim, "ViLBERT")
        w = m[..., None].astype(np.float32)
        mean = (features * w).sum(1, keepdims=True) / w.sum(1, keepdims=True)
        area = (boxes[..., 2] - boxes[..., 0]) * (boxes[..., 3] - boxes[..., 1])
        loc = np.concatenate([boxes, area[..., None]], axis=-1) * w
        n = features.shape[0]
        whole = np.broadcast_to(np.array([0, 0, 1, 1, 1], dtype=np.float32), (n, 1, 5))
        feats = np.concatenate([mean, features * w], axis=1).astype(np.float32)
        locs = np.concatenate([whole, loc], axis=1).astype(np.float32)
        mask = np.concatenate([np.ones((n, 1), dtype=bool), m], axis=1)
        return ViLBertImages(torch.from_numpy(feats), torch.from_numpy(locs), torch.from_numpy(mask))

    def _forward(
        self, texts: TextTable, images: ViLBertImages, text_idx: np.ndarray, image_idx: np.ndarray,
    ) -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor, torch.Tensor, torch.Tensor]:
        """All text and image states (embeddings first), the text and image masks, and the
        (pooled_t, pooled_v, fused) of the pairs; each distinct caption and image embedded once."""
        u_txt, t_inv = np.unique(text_idx, return_inverse=True)
        u_img, i_inv = np.unique(image_idx, return_inverse=True)
        t_sel, i_sel = torch.from_numpy(t_inv).to(self.device), torch.from_numpy(i_inv).to(self.device)
        ids, tmask = texts.take(u_txt, self.device)
        bert = self.model.bert
        text = bert.embeddings(ids, self.task_id)[t_sel]
        if self.task_id is not None:  # the task token after [CLS] is always attended to
            tmask = torch.cat([torch.ones_like(tmask[:, :1]), tmask], dim=1)
        tmask = tmask[t_sel]
        rows = torch.from_numpy(u_img)
        image = bert.v_embeddings(images.features[rows].to(self.device, self.dtype),
                                  images.loc5[rows].to(self.device, self.dtype))[i_sel]
        vmask = images.mask[rows].to(self.device)[i_sel]
        t_states, v_states = self.model.run(text, tmask, image, vmask, self.model.steps)
        return [text, *t_states], [image, *v_states], tmask, vmask, torch.stack(self.model.pooled(t_states[-1], v_states[-1]))

    def _score(self, fused: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        if self.score_head == "itm":
            logits = self.model.cls.bi_seq_relationship(fused).float()[:, [1 - MATCH_INDEX, MATCH_INDEX]]
            return torch.softmax(logits, dim=-1)[:, 1], logits
        return self.model.vil_logit(fused).float()[:, 0], None

    @torch.inference_mode()
    def encode_pairs(
        self, texts: TextTable, images: ViLBertImages, text_idx: np.ndarray, image_idx: np.ndarray,
        layers: Mapping[str, Sequence[int]] | None, poolings: Sequence[str],
    ) -> PairOutput:
        text_idx, image_idx = check_pair_indices(text_idx, image_idx)
        asked = self.pair_layers(layers)
        t_states, v_states, tmask, vmask, pooled = self._forward(texts, images, text_idx, image_idx)
        scores, logits = self._score(pooled[2])
        states: dict[str, dict[str, torch.Tensor]] = {}
        tok = [p for p in poolings if p in ("cls", "mean", "max")]
        zeros = torch.zeros(len(text_idx), dtype=torch.long)
        for stream, all_states, mask in (("text", t_states, tmask), ("image", v_states, vmask)):
            if asked and asked[stream]:
                h = torch.stack([all_states[k] for k in asked[stream]], dim=1)
                states[stream] = pool_states(h, mask, zeros, tok)
        return PairOutput(scores, states, {"text": pooled[0].float(), "image": pooled[1].float()}, logits)

    def describe(self) -> dict[str, Any]:
        cfg = self.model.config
        return {
            "model_class": "ViLBertModel (vlprobe, vilbert-multi-task key names)",
            "text_layers": cfg.num_hidden_layers, "image_layers": cfg.v_num_hidden_layers,
            "coattention": {"t": list(cfg.t_biattention_id), "v": list(cfg.v_biattention_id)},
            "schedule": [f"{k}{i}" for k, i in self.model.steps],
            "score_head": self.score_head, "task_id": self.task_id,
            "score": ("softmax(cls.bi_seq_relationship(t_pooled * v_pooled))[:, 0]" if self.score_head == "itm"
                      else "vil_logit(t_pooled * v_pooled)"),
            "regions": "global mean region first; boxes (x1, y1, x2, y2, area) normalised",
            "tokenizer": self.tokenizer_source, "text_max_length": self.max_length,
            "ignored_weights": len(self.ignored),
        }


def _config_path(checkpoint: Path, given: str | os.PathLike[str] | None) -> Path:
    if given is not None:
        p = Path(given).expanduser()
        if not p.is_file():
            raise InputError(f"model_config: {str(given)!r} is not a file (expected the ViLBERT config JSON)")
        return p
    for candidate in (checkpoint.with_suffix(".json"), checkpoint.parent / "vilbert.json", checkpoint.parent / "config.json"):
        if candidate.is_file():
            return candidate
    looked = ", ".join(dict.fromkeys((checkpoint.with_suffix(".json").name, "vilbert.json", "config.json")))
    raise InputError(
        f"model_config: ViLBERT needs its config JSON; none beside {checkpoint.name} ({looked}): pass "
        "--model-config bert_base_6layer_6conect.json"
    )


def _read_state(path: Path, spec: str) -> dict[str, torch.Tensor]:
    with reading_weights(spec):
        try:
            obj = torch.load(str(path), map_location="cpu", weights_only=True)
        except RuntimeError as exc:
            raise InputError(f"checkpoint: {spec!r} cannot be read as a torch file ({str(exc).splitlines()[0]})") from None
    if isinstance(obj, Mapping) and isinstance(obj.get("state_dict"), Mapping):
        obj = obj["state_dict"]
    if not isinstance(obj, Mapping):
        raise InputError(f"checkpoint: {spec!r} holds a {type(obj).__name__}, not a state dict")
    state = {str(k): v for k, v in obj.items() if isinstance(v, torch.Tensor)}
    if state and all(k.startswith("module.") for k in state):
        state = {k[len("module."):]: v for k, v in state.items()}
    state = {k.replace(".gamma", ".weight").replace(".beta", ".bias"): v for k, v in state.items()}
    if not any(k.startswith("bert.encoder.c_layer.") for k in state):
        raise InputError(f"checkpoint: {spec!r} is not a ViLBERT state dict (no bert.encoder.c_layer.* co-attention weights)")
    return state


def _fit(model: ViLBertModel, state: Mapping[str, torch.Tensor], spec: str) -> list[str]:
    """Load the body and the chosen head strictly; other heads are left out (returned)."""
    expected = model.state_dict()
    used = {k: v for k, v in state.items() if k in expected}
    ignored = sorted(k for k in state if k not in expected and not k.startswith("bert."))
    unexpected = sorted(k for k in state if k not in expected and k.startswith("bert."))
    missing = [k for k in expected if k not in used]
    if missing or unexpected:
        which = f"lacks {len(missing)} weight(s) such as {missing[0]!r}" if missing else \
            f"has {len(unexpected)} weight(s) such as {unexpected[0]!r} the config has no place for"
        raise InputError(f"checkpoint: {spec!r} does not fit its ViLBERT config: it {which} (another config? --model-config)")
    for key, want in expected.items():
        if tuple(used[key].shape) != tuple(want.shape):
            raise InputError(f"checkpoint: {spec!r} does not fit its ViLBERT config: {key} has shape "
                             f"{tuple(used[key].shape)}, the config {tuple(want.shape)}")
    model.load_state_dict({k: v.float() for k, v in used.items()}, strict=True, assign=True)
    return ignored
