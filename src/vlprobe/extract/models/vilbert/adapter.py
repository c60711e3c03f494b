"""ViLBERT and 12-in-1 (vilbert-multi-task checkpoints) as a vlprobe cross-encoder on region features.

Inputs: ``--checkpoint`` the state-dict file the release ships (vilbert-multi-task's README links
ViLBERT's Conceptual Captions pretraining as ``pretrained_model.bin`` and 12-in-1 as
``multi_task_model.bin``; vilbert_beta's README runs ``pytorch_model_9.bin``; a ``module.``
prefix is stripped), ``--model-config`` its config JSON (default: the first of
:func:`config_candidates`: ``<stem>.json``, ``vilbert.json``, ``config.json`` or the release's
``bert_base_6layer_6conect.json`` beside the weights, else ``config/bert_base_6layer_6conect.json``
in a folder above, the repository's own layout), ``--tokenizer`` (default: a ``tokenizer/``
folder beside the checkpoint, else ``bert-base-uncased``).

Every size the model is built from must be in the config (``model.REQUIRED_KEYS``): the
original fills a missing key with its class default (12 image heads where the release has 8),
so a config without one is refused. 12-in-1's task token is not a config key in the release
(``train_tasks.py``/``eval_retrieval.py`` switch it on with ``--task_specific_tokens``): it is on
exactly when the weights hold ``bert.embeddings.task_embeddings.weight``.

Load options (``--model-option``):

``score_head``  ``itm`` (``cls.bi_seq_relationship``) or ``vil_logit``. Default: ``vil_logit``
                for 12-in-1 (the head its multi-task training trained for retrieval and
                ``eval_retrieval.py`` ranks by: a raw logit), ``itm`` for ViLBERT (what
                ``eval_retrieval.py --zero_shot`` scores the pretrained model with: softmax
                index 0, the pretraining labels a random caption 1). 12-in-1's ``itm`` head
                comes from the pretraining and was never trained by the multi-task run.
``task_id``     the task token of 12-in-1 (the ``TASK<N>`` number of ``vilbert_tasks.yml``);
                default 8, ``RetrievalFlickr30k`` (ViLBERT's own retrieval benchmark); 7 is
                ``RetrievalCOCO``. Refused for a checkpoint without task tokens.
``max_regions`` regions per image, the global one included (default 101, the retrieval tasks'
                ``max_region_num``: the global region and the first 100).
``max_text_length`` caption tokens with [CLS] and [SEP] (default 30, the retrieval tasks'
                ``max_seq_length``: the first 28 word pieces).

Regions as vilbert-multi-task's feature reader gives them: a first, global region whose feature
is the mean of all the image's real regions (taken before the cap) and whose box is the whole
image, then the regions; boxes as ``(x1, y1, x2, y2, area)`` normalised to the image.

Streams (both ``modality="pair"``):

``text``   0 = embeddings, then every text state in the order the model computes it: BERT
           layers (kind ``self``) and co-attention layers (``coattn``); 19 layers for the
           released 12 + 6 layout. ``cls`` = [CLS]; ``pooled`` = ``t_pooler`` (ReLU(W h[0])).
           With a task token the text has one more position (index 1).
``image``  0 = region embeddings, then every image state: co-attention (``coattn``) and image
           layers (``self``); 13 for 6 + 6. ``cls`` = the global region; ``pooled`` = ``v_pooler``.

Score: ``itm``: ``softmax(cls.bi_seq_relationship(t_pooled * v_pooled))`` at index 0, the match
column; ``vil_logit``: ``vil_logit(t_pooled * v_pooled)``, a raw logit.
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
from vlprobe.extract.models.fit import first_mismatch, refuse_mismatch, shapes_of
from vlprobe.extract.models.hf import (
    ResolvedCheckpoint,
    quiet_transformers,
    reading_weights,
    resolve_checkpoint,
)
from vlprobe.extract.models.meta import meta_skeleton
from vlprobe.extract.models.pooling import pool_states
from vlprobe.extract.models.vilbert.model import REQUIRED_KEYS, ViLBertConfig, ViLBertModel
from vlprobe.provenance import sha256_file
from vlprobe.validation import InputError, check_choice, check_int

__all__ = [
    "DEFAULT_MAX_REGIONS", "DEFAULT_MAX_TEXT_LENGTH", "DEFAULT_TASK_ID", "DEFAULT_TOKENIZER", "MATCH_INDEX",
    "RELEASED_CONFIG", "SCORE_HEADS", "TASKS", "TASK_KEY", "ViLBertAdapter", "ViLBertImages", "config_candidates",
]

DEFAULT_TOKENIZER = "bert-base-uncased"
#: Column of ``cls.bi_seq_relationship`` that means "caption matches image" (``eval_retrieval.py
#: --zero_shot`` ranks by softmax index 0; ``train_concap.py``'s data labels a random caption 1).
MATCH_INDEX = 0
SCORE_HEADS: tuple[str, ...] = ("itm", "vil_logit")
#: The weights that hold 12-in-1's task tokens.
TASK_KEY = "bert.embeddings.task_embeddings.weight"
#: The tasks 12-in-1 was trained on (its README's ``--tasks 1-2-4-7-8-9-10-11-12-13-15-17``),
#: by ``TASK<N>`` number and ``vilbert_tasks.yml`` name.
TASKS: dict[int, str] = {
    1: "VQA", 2: "GenomeQA", 4: "Visual7w", 7: "RetrievalCOCO", 8: "RetrievalFlickr30k", 9: "refcoco",
    10: "refcoco+", 11: "refcocog", 12: "NLVR2", 13: "VisualEntailment", 15: "GQA", 17: "GuessWhatPointing",
}
#: 12-in-1's default task token: RetrievalFlickr30k, scored through ``vil_logit``.
DEFAULT_TASK_ID = 8
#: The retrieval tasks' caps in ``vilbert_tasks.yml`` (TASK7, TASK8): ``max_region_num`` 101
#: (the global region included), ``max_seq_length`` 30 ([CLS] and [SEP] included).
DEFAULT_MAX_REGIONS = 101
DEFAULT_MAX_TEXT_LENGTH = 30
#: The config JSON both releases run every model with.
RELEASED_CONFIG = "bert_base_6layer_6conect.json"
RELEASED_WEIGHTS: tuple[str, ...] = ("pretrained_model.bin", "multi_task_model.bin", "pytorch_model_9.bin")
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
    load_options = ("model_config", "tokenizer", "score_head", "task_id", "max_regions", "max_text_length")

    def __init__(
        self, model: ViLBertModel, tokenizer: Any, checkpoint: ResolvedCheckpoint, device: torch.device,
        dtype: torch.dtype, *, score_head: str, task_id: int | None, fingerprints: dict[str, str],
        tokenizer_source: str, ignored: list[str], max_regions: int = DEFAULT_MAX_REGIONS,
        max_text_length: int = DEFAULT_MAX_TEXT_LENGTH,
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
        self.max_regions, self.max_text_length = max_regions, max_text_length
        self.max_length = min(text_max_length(tokenizer, cfg.max_position_embeddings), max_text_length)
        self._fingerprints = fingerprints
        self.tokenizer_source, self.ignored = tokenizer_source, ignored

    @classmethod
    def load(
        cls, checkpoint: str, *, device: str = "auto", dtype: str = "float32",
        model_config: str | os.PathLike[str] | None = None, tokenizer: str | None = None,
        score_head: str | None = None, task_id: int | str | None = None,
        max_regions: int | str | None = None, max_text_length: int | str | None = None,
    ) -> ViLBertAdapter:
        """Load a vilbert-multi-task checkpoint (see the module docstring)."""
        from transformers import AutoTokenizer

        dev, torch_dtype = resolve_device(device), resolve_dtype(dtype)
        path = Path(checkpoint).expanduser()
        if not path.is_file():
            raise InputError(
                f"checkpoint: ViLBERT takes the released state-dict file ({', '.join(RELEASED_WEIGHTS)}), "
                f"got {checkpoint!r} which is not a file"
            )
        state = _read_state(path, checkpoint)
        config_path = _config_path(path, model_config)
        cfg = ViLBertConfig.from_json(config_path, task_specific_tokens=TASK_KEY in state)
        heads = [h for h, prefix in _HEAD_KEYS.items() if f"{prefix}weight" in state]
        default_head = "vil_logit" if cfg.task_specific_tokens and "vil_logit" in heads else (heads[0] if heads else "itm")
        head = check_choice(score_head, "score_head", SCORE_HEADS) if score_head is not None else default_head
        if head not in heads:
            raise InputError(f"score_head: {checkpoint!r} has no {head} head ({_HEAD_KEYS[head]}weight); it has "
                             f"{', '.join(heads) or 'none'}")
        task = None
        if cfg.task_specific_tokens:
            task = DEFAULT_TASK_ID if task_id is None else check_int(_as_int(task_id), "task_id", low=0, high=19)
        elif task_id is not None:
            raise InputError("task_id: this checkpoint has no task tokens (no bert.embeddings.task_embeddings); "
                             "leave task_id unset")
        regions = DEFAULT_MAX_REGIONS if max_regions is None else check_int(_as_int(max_regions), "max_regions", low=2)
        text_cap = DEFAULT_MAX_TEXT_LENGTH if max_text_length is None else check_int(
            _as_int(max_text_length), "max_text_length", low=3)
        with meta_skeleton():  # no random init: every weight comes from the checkpoint (_fit assigns them)
            model = ViLBertModel(cfg, itm_head=head == "itm", vil_logit=head == "vil_logit")
        ignored = _fit(model, state, checkpoint, cfg, config_path.name)
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
                   tokenizer_source=tok_spec, ignored=ignored, max_regions=regions, max_text_length=text_cap)

    @property
    def streams(self) -> dict[str, StreamSpec]:
        return self._streams

    def input_fingerprints(self) -> dict[str, str]:
        return dict(self._fingerprints)

    def model_options(self) -> dict[str, Any]:
        return {"score_head": self.score_head, **({"task_id": self.task_id} if self.task_id is not None else {}),
                "max_regions": self.max_regions, "max_text_length": self.max_text_length}

    def prepare_images(self, images: Any) -> ViLBertImages:
        """Regions as vilbert-multi-task's feature reader and task datasets give them: the global
        region (the mean of every real region's feature, the whole-image box) first, 5-d boxes,
        then at most ``max_regions`` - 1 regions (the cap counts the global one)."""
        features, boxes, m = check_regions(images, self.feature_dim, "ViLBERT")
        w = m[..., None].astype(np.float32)
        mean = (features * w).sum(1, keepdims=True) / w.sum(1, keepdims=True)
        keep = self.max_regions - 1
        features, boxes, m, w = features[:, :keep], boxes[:, :keep], m[:, :keep], w[:, :keep]
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
            "task": TASKS.get(self.task_id, "") if self.task_id is not None else "",
            "max_regions": self.max_regions, "max_text_length": self.max_text_length,
            "score": ("softmax(cls.bi_seq_relationship(t_pooled * v_pooled))[:, 0]" if self.score_head == "itm"
                      else "vil_logit(t_pooled * v_pooled)"),
            "regions": "global mean region first; boxes (x1, y1, x2, y2, area) normalised",
            "tokenizer": self.tokenizer_source, "text_max_length": self.max_length,
            "ignored_weights": len(self.ignored),
        }


def _config_path(checkpoint: Path, given: str | os.PathLike[str] | None) -> Path:
    """The config JSON: ``given``, else the first of :func:`config_candidates` that exists."""
    if given is not None:
        p = Path(given).expanduser()
        if not p.is_file():
            raise InputError(f"model_config: {str(given)!r} is not a file (expected the ViLBERT config JSON)")
        return p
    candidates = config_candidates(checkpoint)
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    looked = ", ".join(dict.fromkeys(str(c.relative_to(checkpoint.parent)) if c.is_relative_to(checkpoint.parent)
                                     else str(c) for c in candidates))
    raise InputError(
        f"model_config: ViLBERT needs its config JSON; none beside {checkpoint.name} ({looked}): pass "
        f"--model-config {RELEASED_CONFIG}"
    )


def config_candidates(checkpoint: Path) -> list[Path]:
    """Where the config of a weights file is looked for, in order: ``<stem>.json``, ``vilbert.json``,
    ``config.json`` and the release's ``bert_base_6layer_6conect.json`` beside the weights, then
    ``config/bert_base_6layer_6conect.json`` in the folders above (the repository's layout:
    weights under ``save/...``, the config in ``config/``, as its README runs them)."""
    here = checkpoint.parent
    beside = [checkpoint.with_suffix(".json"), here / "vilbert.json", here / "config.json", here / RELEASED_CONFIG]
    above = [folder / "config" / RELEASED_CONFIG for folder in [here, *list(here.parents)[:3]]]
    return list(dict.fromkeys([*beside, *above]))


def _as_int(value: Any) -> Any:
    """A ``--model-option`` value (a string) as an int where it spells one; anything else as given."""
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return value


def _read_state(path: Path, spec: str) -> dict[str, torch.Tensor]:
    with reading_weights(spec):
        try:
            obj = torch.load(str(path), map_location="cpu", weights_only=True)
        except RuntimeError as exc:
            raise InputError(f"checkpoint: {spec!r} cannot be read as a torch file ({str(exc).splitlines()[0]})") from None
    if isinstance(obj, Mapping) and isinstance(obj.get("model_state_dict"), Mapping):
        obj = obj["model_state_dict"]  # the training script's second save (pytorch_ckpt_latest.tar)
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


def _fit(model: ViLBertModel, state: Mapping[str, torch.Tensor], spec: str, cfg: ViLBertConfig, config_name: str) -> list[str]:
    """Load the body and the chosen head strictly; other heads are left out (returned)."""
    expected = model.state_dict()
    used = {k: v for k, v in state.items() if k in expected}
    ignored = sorted(k for k in state if k not in expected and not k.startswith("bert."))
    unexpected = sorted(k for k in state if k not in expected and k.startswith("bert."))
    missing = [k for k in expected if k not in used]
    if missing or unexpected:
        which = f"lacks {len(missing)} weight(s) such as {missing[0]!r}" if missing else \
            f"has {len(unexpected)} weight(s) such as {unexpected[0]!r} the config has no place for"
        raise InputError(f"checkpoint: {spec!r} does not fit its config ({config_name}): it {which} "
                         "(another config? --model-config)")
    mismatch = first_mismatch(shapes_of(expected), shapes_of(used))
    if mismatch is not None:
        fields = {k: getattr(cfg, k) for k in REQUIRED_KEYS if isinstance(getattr(cfg, k), int)}
        raise refuse_mismatch(spec, mismatch, config=fields, config_name=config_name)
    model.load_state_dict({k: v.float() for k, v in used.items()}, strict=True, assign=True)
    return ignored
