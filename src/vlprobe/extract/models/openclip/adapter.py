"""OpenCLIP checkpoints (SugarCrepe's CLIPs, NegCLIP) as a vlprobe dual encoder, natively.

Inputs: ``--checkpoint`` (an OpenCLIP hub folder, a weights file, OpenAI's TorchScript ``.pt``
or a hub id: :mod:`vlprobe.extract.models.openclip.checkpoint`), the architecture (load options
``arch=NAME`` of :data:`~vlprobe.extract.models.openclip.archs.ARCHS`, or ``model_config=FILE``;
by default the ``open_clip_config.json`` beside the weights), ``act=gelu|quick_gelu`` to
override the config's activation (NegCLIP: ``arch=ViT-B-32`` runs with GELU as SugarCrepe's
code ran it; ``act=quick_gelu`` is how it was trained), and ``tokenizer=DIR_OR_ID``. Without it,
CLIP's text tower tokenizes with OpenAI CLIP's BPE that vlprobe carries, as OpenCLIP tokenizes
with the copy in its package whatever lies beside the weights
(:mod:`~vlprobe.extract.models.openclip.tokenizer`): a hub folder needs no other file. A
Hugging Face tower (roberta, xlm-roberta) tokenizes with the tokenizer files in a ``tokenizer/``
folder beside the weights or in the checkpoint folder itself (where OpenCLIP's ``local-dir:``
loading reads them), else with the config's ``hf_tokenizer_name`` from the hub cache.

Texts are cleaned before they are tokenized, as OpenCLIP's tokenizers clean them (``ftfy``, HTML
entities unescaped twice, whitespace; lower case for CLIP's BPE:
:func:`~vlprobe.extract.models.openclip.tokenizer.clean_text`; ``text_cfg.tokenizer_kwargs.clean``
names another cleaning). Images are converted to RGB after the resize and crop, as OpenCLIP's
transform converts them (:mod:`~vlprobe.extract.models.openclip.preprocess`).

Streams
-------
``text``   CLIP's tower: layers 0..L: 0 = token + position embeddings, then each block's output
           before ``ln_final``; ``cls`` = the EOS position (the highest token id, where OpenCLIP
           pools); ``pooled`` = ``ln_final(h)[eos] @ text_projection``. A Hugging Face tower
           (roberta, xlm-roberta): its ``hidden_states`` (0 = embeddings); ``cls`` = ``<s>``;
           ``pooled`` = the projection of the masked mean of the last states (OpenCLIP's
           ``mean_pooler``).
``image``  A vision transformer: 0 = ``ln_pre(patch + class + position embeddings)``, then each
           block; ``cls`` = the class token; ``pooled`` = ``ln_post(h[:, 0]) @ proj``.
           A ModifiedResNet: six layers, the stem (``embed``), the four stages (``stage``) and the
           attention pool (``attnpool``), each as ``1 + g*g`` tokens (its spatial mean, then its
           means over the final g x g grid; channels zero-padded to the widest layer:
           :class:`~vlprobe.extract.models.openclip.model.TokenView`); ``cls`` = token 0 (the
           attention pool's query; at the last layer, the image embedding); ``pooled`` = the
           attention pool's output at token 0.

Scores: cosine of the pooled embeddings, as SugarCrepe's ``main_eval.py`` compares normalised
embeddings (the caption wins over the foil only when strictly closer).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vlprobe.devices import resolve_device, resolve_dtype
from vlprobe.extract.models.base import (
    PIXEL_ORIENTATION,
    DualEncoder,
    StreamBatch,
    StreamSpec,
    cosine_matrix,
)
from vlprobe.extract.models.hf import quiet_transformers, resolve_checkpoint
from vlprobe.extract.models.hooks import LayerSite
from vlprobe.extract.models.meta import meta_skeleton
from vlprobe.extract.models.openclip.archs import (
    ACTIVATIONS,
    HF_TEXT_CONFIGS,
    OpenClipConfig,
    arch_config,
    read_config_file,
)
from vlprobe.extract.models.openclip.checkpoint import (
    CONFIG_FILE,
    CheckpointFiles,
    check_finite,
    check_sizes,
    find_checkpoint,
    fit_state_dict,
    hf_proj_type,
    read_state_dict,
)
from vlprobe.extract.models.openclip.model import ModifiedResNet, OpenClipModel
from vlprobe.extract.models.openclip.preprocess import preprocess
from vlprobe.extract.models.openclip.tokenizer import (
    BPE_FILE,
    BPE_SHA256,
    clean_text,
    clip_bpe_tokenizer,
)
from vlprobe.provenance import sha256_file
from vlprobe.validation import InputError, check_choice

__all__ = ["OpenClipAdapter"]

_TOKENIZER_ALLOW = ["*.json", "*.txt", "*.model"]
_TOKENIZER_FILES = ("tokenizer_config.json", "tokenizer.json")


class OpenClipAdapter(DualEncoder):
    """OpenCLIP CLIP model (hub folder, state-dict file or hub id; arch= / model_config=); streams text, image."""

    name = "openclip"
    image_input = "pixels"
    rgb_on_load = False  # OpenCLIP converts to RGB after the resize and crop (preprocess)
    score_kind = "cosine"
    load_options = ("model_config", "tokenizer", "arch", "act")

    def __init__(
        self, model: OpenClipModel, tokenizer: Any, files: CheckpointFiles, device: torch.device, dtype: torch.dtype,
        *, config_source: str, config_fingerprint: str, tokenizer_source: str, tokenizer_fingerprint: str,
        load_report: Mapping[str, Any],
    ) -> None:
        from vlprobe.extract.models.hf import ResolvedCheckpoint

        super().__init__(ResolvedCheckpoint(files.spec, files.weights.resolve(), files.fingerprint), device, dtype)
        self.model, self.tokenizer, self.files = model, tokenizer, files
        cfg = model.config
        self.config = cfg
        self.config_source, self.tokenizer_source = config_source, tokenizer_source
        self._fingerprints = {"config": config_fingerprint, "tokenizer": tokenizer_fingerprint}
        self.load_report = dict(load_report)
        if cfg.text.hf:
            tc = model.text.transformer.config
            n_text, text_width = int(tc.num_hidden_layers), int(tc.hidden_size)
            limit = int(tc.max_position_embeddings) - int(tc.pad_token_id) - 1  # roberta counts positions after the pad id
            text_cls = "token0"
        else:
            n_text, text_width, limit, text_cls = cfg.text.layers, cfg.text.width, cfg.text.context_length, "eos"
        self.max_length = int(min(cfg.text.context_length, limit, getattr(tokenizer, "model_max_length", limit) or limit))
        v, visual = cfg.vision, model.visual
        image = (StreamSpec("image", "image", ("embed", "stage", "stage", "stage", "stage", "attnpool"),
                            visual.state_width, "token0", cfg.embed_dim) if isinstance(visual, ModifiedResNet)
                 else StreamSpec.blocks("image", "image", visual.transformer.n_layers, v.width, "patch0", cfg.embed_dim))
        self._streams = {
            "text": StreamSpec.blocks("text", "text", n_text, text_width, text_cls, cfg.embed_dim),
            "image": image,
        }

    # -- loading ------------------------------------------------------------------------------------

    @classmethod
    def load(
        cls, checkpoint: str, *, device: str = "auto", dtype: str = "float32",
        model_config: str | os.PathLike[str] | None = None, tokenizer: str | None = None,
        arch: str | None = None, act: str | None = None,
    ) -> OpenClipAdapter:
        """Load an OpenCLIP checkpoint (see the module docstring for every input).

        Raises
        ------
        InputError
            A checkpoint that is not OpenCLIP's or does not fit the architecture, an unknown
            ``arch``, an ``act`` other than gelu/quick_gelu, a missing or unreadable config or
            tokenizer (each naming its parameter).
        """
        dev, torch_dtype = resolve_device(device), resolve_dtype(dtype)
        if act is not None:
            act = check_choice(act, "act", ACTIVATIONS)
        if arch is not None and model_config is not None:
            raise InputError("arch: give either arch or model_config, not both")
        files = find_checkpoint(str(checkpoint))
        cfg, source, config_fp = _config(files, model_config, arch, act)
        meta: dict[str, Any] = {}
        state = read_state_dict(files.weights, files.spec, meta)
        if cfg.text.hf:
            cfg = _with_hf_text(cfg, state, files)
        check_sizes(cfg, state, files.spec)
        check_finite(state, files.spec)
        with meta_skeleton():  # no random init: every weight comes from the checkpoint
            model = OpenClipModel(cfg)
        report = fit_state_dict(model, state, files.spec, cfg.name)
        report["act_note"] = _quick_gelu_note(cfg, act, files, meta)
        if report["act_note"]:
            import sys

            print(f"note: {report['act_note']}", file=sys.stderr)
        tok, tok_source, tok_fp = _tokenizer(files, tokenizer, cfg)
        model = model.to(dev, torch_dtype).eval()
        return cls(model, tok, files, dev, torch_dtype, config_source=source, config_fingerprint=config_fp,
                   tokenizer_source=tok_source, tokenizer_fingerprint=tok_fp, load_report=report)

    @property
    def streams(self) -> dict[str, StreamSpec]:
        return self._streams

    # -- encoding -----------------------------------------------------------------------------------

    def _tokenize(self, texts: Sequence[str]) -> Any:
        mode = self.config.text.clean
        return self.tokenizer(
            [clean_text(t, mode) for t in texts], padding=True, truncation=True, max_length=self.max_length, return_tensors="pt",
            padding_side="right",  # absolute positions count from token 0
        )

    def tokens(self, texts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        tok = self._tokenize(texts)
        return tok["input_ids"], tok["attention_mask"]

    @torch.inference_mode()
    def encode(self, stream: str, inputs: Sequence[Any], layers: Sequence[int]) -> StreamBatch:
        if stream == "text":
            tok = self._tokenize(inputs)
            ids, mask = tok["input_ids"].to(self.device), tok["attention_mask"].to(self.device)
            states, pooled, cls_index = self.model.text_states(ids, mask)
        elif stream == "image":
            pixels = preprocess(list(inputs), self.config.preprocess).to(self.device, self.dtype)
            states, pooled = self.model.image_states(pixels)
            b, t = states[0].shape[:2]
            mask = torch.ones(b, t, dtype=torch.long, device=self.device)
            cls_index = torch.zeros(b, dtype=torch.long, device=self.device)
        else:
            raise InputError(f"stream: OpenCLIP has streams text and image, got {stream!r}")
        hidden = torch.stack([states[i] for i in layers], dim=1)
        return StreamBatch(hidden, mask, cls_index, pooled)

    def layer_sites(self, stream: str) -> list[LayerSite]:
        """Text: the embedding output, then each block; image (vision transformer): ``ln_pre``,
        then each block. A ResNet image tower's states are views of feature maps, not module
        outputs the model reads on: editing them is refused."""
        if stream == "text":
            blocks = self.model.text_blocks()
            first = self.model.text.transformer.embeddings if self.model.hf_text else self.model.embed_out
            return [LayerSite(first), *(LayerSite(m) for m in blocks)]
        if stream == "image":
            visual = self.model.visual
            if isinstance(visual, ModifiedResNet):
                raise InputError("stream: the states of OpenCLIP's ResNet image tower cannot be edited during a run")
            return [LayerSite(visual.ln_pre), *(LayerSite(m) for m in visual.transformer.resblocks)]
        raise InputError(f"stream: OpenCLIP has streams text and image, got {stream!r}")

    @classmethod
    def scores_from_pooled(
        cls, image_pooled: np.ndarray, text_pooled: np.ndarray, info: Mapping[str, Any] | None = None
    ) -> np.ndarray:
        return cosine_matrix(image_pooled, text_pooled).astype(np.float32)

    # -- records ------------------------------------------------------------------------------------

    def input_fingerprints(self) -> dict[str, str]:
        return dict(self._fingerprints)

    def model_options(self) -> dict[str, Any]:
        """The architecture and activation the weights ran with (they change every number)."""
        return {"arch": self.config.name, "act": self.config.act}

    def image_preprocessing(self) -> dict[str, str]:
        return {"image_backend": "pil", "image_orientation": PIXEL_ORIENTATION}

    def describe(self) -> dict[str, Any]:
        return {
            "model_class": "OpenClipModel (vlprobe, OpenCLIP key names)",
            **self.config.describe(),
            "config_source": self.config_source,
            "tokenizer": self.tokenizer_source,
            "text_cleaning": f"OpenCLIP's {self.config.text.clean!r} (ftfy, HTML unescaped twice, whitespace"
                             + (", lower case)" if self.config.text.clean in ("lower", "canonicalize") else ")"),
            "text_max_length": self.max_length,
            "eos": "highest token id (argmax), as OpenCLIP" if not self.config.text.hf else "",
            "logit_scale": float(self.model.logit_scale.exp().item()),
            "ignored_weights": list(self.load_report.get("ignored", [])),
            "act_note": self.load_report.get("act_note", ""),
            "image_processor": "OpenCLIP eval transform in PIL (resize shorter side, centre crop, normalise)",
        }


def _quick_gelu_note(cfg: OpenClipConfig, act: str | None, files: CheckpointFiles, meta: Mapping[str, Any]) -> str:
    """The NegCLIP trap, said: a training checkpoint run with GELU because its architecture's name
    says so (no ``act`` given). NegCLIP was fine-tuned from OpenAI's ViT-B-32, which OpenCLIP runs
    with QuickGELU; loaded as plain ``ViT-B-32`` it runs with GELU, as SugarCrepe's published row
    did (sugar-crepe issue #7). Returns "" when there is nothing to say."""
    if act is not None or cfg.act != "gelu" or "training_epoch" not in meta:
        return ""
    epoch = meta["training_epoch"]
    return (
        f"act: {files.spec!r} is a training checkpoint{'' if epoch is None else f' (epoch {epoch})'} run with GELU, "
        f"as {cfg.name} says; one fine-tuned from OpenAI's weights (NegCLIP) was trained with QuickGELU: "
        "--model-option act=quick_gelu runs it so (SugarCrepe's published NegCLIP row ran GELU; act=gelu silences "
        "this note)"
    )


def _config(
    files: CheckpointFiles, model_config: str | os.PathLike[str] | None, arch: str | None, act: str | None,
) -> tuple[OpenClipConfig, str, str]:
    """The architecture: ``model_config`` file, else ``arch``, else ``open_clip_config.json``
    beside the weights (whose preprocessing is kept in every case). Returns (config, source,
    fingerprint)."""
    beside_pre: dict[str, Any] = {}
    if files.config is not None:
        _, beside_pre = read_config_file(files.config, "checkpoint")
    if model_config is not None:
        path = Path(model_config).expanduser()
        if not path.is_file():
            raise InputError(f"model_config: {str(model_config)!r} is not a file (expected an OpenCLIP model-config JSON)")
        cfg, pre = read_config_file(path, "model_config")
        name = path.stem.removesuffix("_config") if path.name != CONFIG_FILE else str(files.spec)
        return (OpenClipConfig.from_dict(cfg, name=name, param="model_config", preprocess=pre or beside_pre, act=act),
                str(path), "sha256:" + sha256_file(path))
    if arch is not None:
        cfg = arch_config(arch)
        return (OpenClipConfig.from_dict(cfg, name=arch, param="arch", preprocess=beside_pre, act=act),
                f"builtin:{arch}", f"builtin:{arch}")
    if files.config is None:
        raise InputError(
            f"model_config: {files.spec!r} has no {CONFIG_FILE} beside its weights; give the architecture with "
            "--model-option arch=NAME (e.g. ViT-B-32, RN50, ViT-B-32-quickgelu; `probe ls models` lists them) "
            "or --model-config FILE"
        )
    cfg, pre = read_config_file(files.config, "checkpoint")
    hub_name = cfg.get("model_name") if isinstance(cfg, dict) else None
    name = str(hub_name or files.folder.name)
    return (OpenClipConfig.from_dict(cfg, name=name, param="checkpoint", preprocess=pre, act=act),
            str(files.config), "sha256:" + sha256_file(files.config))


def _with_hf_text(cfg: OpenClipConfig, state: Mapping[str, Any], files: CheckpointFiles) -> OpenClipConfig:
    """A Hugging Face text tower's projection as its weights hold it (OpenCLIP's default changed
    from none to ``mlp`` across versions), and its transformers config (the tokenizer folder's
    ``config.json``, else the built-in one of its name)."""
    from dataclasses import replace

    if not any(k.startswith("text.transformer.") for k in state):
        raise InputError(
            f"checkpoint: {files.spec!r} has no Hugging Face text tower (text.transformer.*) but {cfg.name} needs one"
        )
    hf_config = dict(cfg.text.hf_config)
    folder = _tokenizer_folder(files, None, cfg)
    if folder is not None and (folder / "config.json").is_file():
        import json

        try:
            found = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise InputError(f"tokenizer: cannot read {str(folder / 'config.json')!r} ({exc})") from None
        if isinstance(found, dict) and found.get("model_type") not in (None, "clip") and "hidden_size" in found:
            hf_config = {k: v for k, v in found.items() if not k.startswith(("_", "architectures", "transformers_version"))}
    if not hf_config:
        raise InputError(
            f"model_config: the text tower {cfg.text.hf_model_name!r} is not one vlprobe knows offline "
            f"({', '.join(HF_TEXT_CONFIGS)}); put its Hugging Face config.json and tokenizer in a folder and pass "
            "--tokenizer DIR"
        )
    return replace(cfg, text=replace(cfg.text, hf_proj_type=hf_proj_type(state), hf_config=hf_config))


def _tokenizer_folder(files: CheckpointFiles, given: str | None, cfg: OpenClipConfig) -> Path | None:
    """A local tokenizer folder: ``given`` if it is one; for a Hugging Face text tower, a
    ``tokenizer/`` folder beside the weights or the checkpoint folder when it holds tokenizer
    files (OpenCLIP's ``local-dir:`` loading reads the tokenizer of such a tower from the model's
    folder). CLIP's own tower has none: OpenCLIP tokenizes it with the BPE in its package."""
    if given is not None:
        p = Path(given).expanduser()
        return p if p.is_dir() else None
    if not cfg.text.hf:
        return None
    sub = files.folder / "tokenizer"
    if sub.is_dir():
        return sub
    if any((files.folder / f).is_file() for f in _TOKENIZER_FILES):
        return files.folder
    return None


def _tokenizer(files: CheckpointFiles, given: str | None, cfg: OpenClipConfig) -> tuple[Any, str, str]:
    """The tokenizer, where it came from and its fingerprint (which names the text cleaning)."""
    from transformers import AutoTokenizer

    clean = f";clean={cfg.text.clean}"
    if given is None and not cfg.text.hf:
        tok = clip_bpe_tokenizer(cfg.text.context_length)
        spec, fingerprint = f"vlprobe:{BPE_FILE} (OpenAI CLIP's BPE, as OpenCLIP ships it)", f"sha256:{BPE_SHA256}"
    else:
        folder = _tokenizer_folder(files, given, cfg)
        if folder is not None and not any(any(folder.glob(p)) for p in ("tokenizer*.json", "vocab.*", "*.model")):
            raise InputError(f"tokenizer: {str(folder)!r} holds no tokenizer files (tokenizer.json, "
                             "tokenizer_config.json, vocab.json, ...)")
        default = cfg.text.hf_tokenizer_name
        spec = given if given is not None else (str(folder) if folder is not None else default)
        try:
            resolved = resolve_checkpoint(spec, param="tokenizer", allow_patterns=_TOKENIZER_ALLOW)
        except InputError as exc:
            if given is None:
                raise InputError(
                    f"{exc} (OpenCLIP's tokenizer for {cfg.name} is {default}; no tokenizer files lie beside "
                    f"{files.weights.name}: pass --model-option tokenizer=DIR with a saved {default} tokenizer)"
                ) from None
            raise
        with quiet_transformers():
            try:
                tok = AutoTokenizer.from_pretrained(resolved.path)
            except (OSError, ValueError) as exc:
                why = " ".join(ln.strip() for ln in str(exc).splitlines() if ln.strip()) or type(exc).__name__
                raise InputError(f"tokenizer: {spec!r} holds no readable tokenizer ({why})") from None
        fingerprint = resolved.fingerprint
    if not cfg.text.hf:
        if len(tok) > cfg.text.vocab_size:
            raise InputError(
                f"tokenizer: {spec!r} has {len(tok)} tokens but {cfg.name}'s text tower has {cfg.text.vocab_size}"
                + ("" if given is not None else "; give a tokenizer of that vocabulary with --model-option tokenizer=DIR")
            )
        if tok.eos_token_id is None or int(tok.eos_token_id) != len(tok) - 1:
            raise InputError(
                f"tokenizer: {spec!r} is not CLIP's BPE: its EOS id {tok.eos_token_id} is not the highest id "
                f"({len(tok) - 1}), where OpenCLIP's text tower pools"
            )
    return tok, spec, fingerprint + clean
