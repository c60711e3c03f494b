"""The VG Faster R-CNN and :class:`RegionDetector`, the object the region pipeline uses.

``RegionDetector.load("unc-nlp/frcnn-vg-finetuned" | DIR)`` reads ``config.yaml`` and
``pytorch_model.bin`` (the hub checkpoint's format and key names) into :class:`VGFasterRCNN`;
``RegionDetector.random(...)`` builds the same model with seeded random weights (full size by
default, for benchmarks). :meth:`RegionDetector.detect` runs one forward over a batch of PIL
images and returns one :class:`Detections` per image. Batching never changes an image's
result beyond float rounding: each image is resized on its own, the backbone zeroes the batch
padding after every convolution, the RPN proposes only inside each image, and RoIPool clips
to each image's own feature map.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from vlprobe.validation import InputError, check_seed

from .backbone import ConvNorm, FrozenBatchNorm2d, ResNetC4
from .checkpoint import WEIGHTS_NAME, load_weights, read_state_dict
from .config import CONFIG_NAME, DetectorConfig, config_from_dict, default_config_dict, read_config
from .errors import DetectorInputError
from .preprocess import Prepared, prepare_images
from .presets import DEFAULT_PRESET, SelectionPreset, get_preset
from .roi_heads import Res5RoIHeads
from .rpn import RPN
from .selection import select_butd, select_hf

__all__ = ["STAGES", "Detections", "RegionDetector", "StageTimer", "VGFasterRCNN", "init_random_weights"]

STAGES = ("preprocess", "backbone", "rpn", "roi_heads", "selection")


class VGFasterRCNN(nn.Module):
    """Backbone (``backbone.*``), RPN (``proposal_generator.*``) and RoI head (``roi_heads.*``)."""

    def __init__(self, cfg: DetectorConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.backbone = ResNetC4(cfg)
        self.proposal_generator = RPN(cfg, self.backbone.out_channels)
        self.roi_heads = Res5RoIHeads(cfg, self.backbone.out_channels)


@dataclass
class Detections:
    """The regions of one image.

    Attributes
    ----------
    boxes : np.ndarray
        ``(N, 4)`` float32 pixel ``x1, y1, x2, y2`` in the original image.
    features : np.ndarray
        ``(N, D)`` float32 pooled res5 feature of each box (``D = 2048`` for the VG model).
    objects_id, objects_conf : np.ndarray
        ``(N,)`` int64 index into the object names (background excluded) and its probability.
    attrs_id, attrs_conf : np.ndarray
        ``(N,)`` int64 index into the attribute names and its probability.
    image_w, image_h : int
        Size of the original image.
    """

    boxes: np.ndarray
    features: np.ndarray
    objects_id: np.ndarray
    objects_conf: np.ndarray
    attrs_id: np.ndarray
    attrs_conf: np.ndarray
    image_w: int
    image_h: int

    @property
    def num_boxes(self) -> int:
        return int(self.boxes.shape[0])


class StageTimer:
    """Wall-clock seconds per stage of :meth:`RegionDetector.detect`, summed over calls.

    Pass one as ``detect(..., timer=t)``; on CUDA the device is synchronised at each stage
    boundary so the times are the stages' own.
    """

    def __init__(self) -> None:
        self.seconds: dict[str, float] = dict.fromkeys(STAGES, 0.0)
        self.calls = 0

    @contextlib.contextmanager
    def stage(self, name: str, device: torch.device) -> Iterator[None]:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        try:
            yield
        finally:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0

    def shares(self) -> dict[str, float]:
        """Fraction of the total time per stage."""
        total = sum(self.seconds.values())
        return {k: (v / total if total > 0 else 0.0) for k, v in self.seconds.items()}


_NULL = contextlib.nullcontext()


def init_random_weights(model: VGFasterRCNN, seed: int) -> None:
    """Fill every weight from a private generator seeded with ``seed``, scaled so a random model
    still proposes overlapping boxes and scores some classes confidently.

    Convolutions get He-normal weights; frozen batch norms near-identity statistics (the last
    one of each bottleneck damped so 23 residual blocks do not blow up); the RPN deltas are small
    (proposals stay near their overlapping anchors, so NMS has work); the class logits are wide
    (a softmax over the classes gives some boxes a confident class). The cell anchors keep their
    config values. Draws follow the state-dict order, so a seed gives the same weights anywhere.
    """
    gen = torch.Generator().manual_seed(seed)

    def normal(shape: torch.Size, std: float, mean: float = 0.0) -> Tensor:
        return torch.randn(shape, generator=gen) * std + mean

    modules = dict(model.named_modules())
    with torch.no_grad():
        for name, tensor in model.state_dict(keep_vars=True).items():
            owner_name, _, leaf = name.rpartition(".")
            owner = modules[owner_name]
            if "anchor_generator" in name:
                continue
            if isinstance(owner, FrozenBatchNorm2d):
                parent = owner_name.rpartition(".")[0]
                gain = 0.2 if parent.endswith("conv3") else 0.5 if parent.endswith("shortcut") else 1.0
                values = {
                    "weight": normal(tensor.shape, 0.05 * gain, gain),
                    "bias": normal(tensor.shape, 0.05),
                    "running_mean": normal(tensor.shape, 0.05),
                    "running_var": 1.0 + normal(tensor.shape, 0.05).abs(),
                }[leaf]
            elif isinstance(owner, ConvNorm | nn.Conv2d) and leaf == "weight":
                fan_in = tensor.shape[1] * tensor.shape[2] * tensor.shape[3]
                std = math.sqrt(2.0 / fan_in)
                if owner_name == "backbone.stem.conv1":
                    std /= 64.0  # input pixels are 0-255 minus the mean, not unit-scaled
                elif owner_name.endswith("anchor_deltas"):
                    std *= 0.05
                values = normal(tensor.shape, std)
            elif isinstance(owner, nn.Linear) and leaf == "weight":
                std = 1.0 / math.sqrt(tensor.shape[1])
                if owner_name.endswith("cls_score"):
                    std *= 12.0
                elif owner_name.endswith("bbox_pred"):
                    std *= 0.05
                elif owner_name.endswith("attr_score"):
                    std *= 4.0
                values = normal(tensor.shape, std)
            elif isinstance(owner, nn.Embedding):
                values = normal(tensor.shape, 1.0)
            elif leaf == "bias":
                values = normal(tensor.shape, 0.01)
                if owner_name.endswith("cls_score"):
                    values[-1] = -2.0  # background (last) rarely wins
            else:  # pragma: no cover - every key of the model is one of the above
                raise RuntimeError(f"no random init rule for {name}")
            tensor.copy_(values.to(tensor.dtype))


def _device(device: str | torch.device) -> torch.device:
    if isinstance(device, torch.device):
        if device.type == "cuda" and not torch.cuda.is_available():
            raise DetectorInputError(f"device {str(device)!r} asked for, but torch sees no CUDA device here")
        return device
    from vlprobe.devices import resolve_device

    return resolve_device(device)


def _dtype(dtype: str | torch.dtype) -> torch.dtype:
    """float32 or float16: bfloat16's 8-bit mantissa would move box scores across the selection
    thresholds, so the detector refuses it although the models take it."""
    if isinstance(dtype, torch.dtype):
        if dtype not in (torch.float32, torch.float16):
            raise DetectorInputError(f"dtype must be one of float32, float16 (the detector's), got {dtype}")
        return dtype
    if dtype == "bfloat16":
        raise DetectorInputError("dtype must be one of float32, float16 (the detector's), got 'bfloat16'")
    from vlprobe.devices import resolve_dtype

    return resolve_dtype(dtype)


def _as_config(config: DetectorConfig | Mapping[str, Any] | str | os.PathLike[str] | None) -> DetectorConfig:
    if config is None:
        return config_from_dict(default_config_dict(), where="default config")
    if isinstance(config, DetectorConfig):
        return config
    if isinstance(config, Mapping):
        return config_from_dict(config, where="config")
    return read_config(config)


class RegionDetector:
    """A loaded VG Faster R-CNN that turns PIL images into region features.

    Build with :meth:`load` (a checkpoint) or :meth:`random` (seeded random weights).
    """

    def __init__(
        self,
        model: VGFasterRCNN,
        *,
        checkpoint: str,
        fingerprint: str,
        device: torch.device,
        dtype: torch.dtype,
        path: Path | None = None,
    ) -> None:
        self.model = model.to(device=device, dtype=dtype).eval()
        # RoIs through res5 per step: memory, not results (a GPU takes bigger steps).
        self.model.roi_heads.chunk = 512 if device.type == "cuda" else 128
        self.config = model.cfg
        self.checkpoint = checkpoint
        self.fingerprint = fingerprint
        self.device = device
        self.dtype = dtype
        self.path = path

    @classmethod
    def load(
        cls, checkpoint: str | os.PathLike[str], device: str | torch.device = "auto", dtype: str | torch.dtype = "float32"
    ) -> RegionDetector:
        """Load ``config.yaml`` + ``pytorch_model.bin`` from a directory or the hub (cache).

        Offline (``HF_HUB_OFFLINE=1``) a hub id that is not cached fails at once, saying how to
        provide it.

        Raises
        ------
        DetectorInputError
            Missing files, unreadable or unsafe weights, keys or shapes that do not match the
            config (one line naming the key), a bad device or dtype.
        """
        from vlprobe.extract.models.hf import resolve_checkpoint

        dev, dt = _device(device), _dtype(dtype)
        spec = os.fspath(checkpoint)
        try:
            resolved = resolve_checkpoint(spec, param="detector", allow_patterns=[CONFIG_NAME, WEIGHTS_NAME])
        except ValueError as exc:
            raise DetectorInputError(str(exc)) from None
        cfg = read_config(resolved.path / CONFIG_NAME)
        state = read_state_dict(resolved.path / WEIGHTS_NAME)
        model = VGFasterRCNN(cfg)
        load_weights(model, state, where=str(resolved.path / WEIGHTS_NAME))
        return cls(model, checkpoint=spec, fingerprint=resolved.fingerprint, device=dev, dtype=dt, path=resolved.path)

    @classmethod
    def random(
        cls,
        config: DetectorConfig | Mapping[str, Any] | str | os.PathLike[str] | None = None,
        seed: int = 0,
        device: str | torch.device = "cpu",
        dtype: str | torch.dtype = "float32",
    ) -> RegionDetector:
        """The detector with random weights (:func:`init_random_weights`), by default at the
        published model's full size (:func:`default_config_dict`), e.g. for benchmarks."""
        try:
            check_seed(seed)
        except InputError as exc:
            raise DetectorInputError(str(exc)) from None
        cfg = _as_config(config)
        model = VGFasterRCNN(cfg)
        init_random_weights(model, seed)
        digest = hashlib.sha256(json.dumps(cfg.raw, sort_keys=True, default=str).encode()).hexdigest()[:16]
        return cls(model, checkpoint=f"random(seed={seed})", fingerprint=f"random:seed={seed}:config={digest}", device=_device(device), dtype=_dtype(dtype))

    @property
    def feature_dim(self) -> int:
        return self.config.feature_dim

    def describe(self) -> dict[str, Any]:
        """JSON-able facts: checkpoint, fingerprint, device, dtype and the config's facts."""
        return {
            "checkpoint": self.checkpoint,
            "fingerprint": self.fingerprint,
            "device": str(self.device),
            "dtype": str(self.dtype).removeprefix("torch."),
            **self.config.summary(),
        }

    def resolve(self, preset: str | SelectionPreset | None = None) -> SelectionPreset:
        """The preset with the checkpoint's values filled in (what ``detect`` runs)."""
        p = get_preset(DEFAULT_PRESET if preset is None else preset)
        c = self.config
        return p.resolved(c.min_detections, c.max_detections, c.nms_thresh_test)

    def _feature_sizes(self, sizes: Tensor) -> Tensor:
        return self.model.backbone.out_sizes(sizes)

    @torch.inference_mode()
    def detect(
        self, images: Sequence[object], preset: str | SelectionPreset | None = None, timer: StageTimer | None = None
    ) -> list[Detections]:
        """Regions of each image, one forward pass over the batch.

        Parameters
        ----------
        images : sequence of PIL.Image.Image
            Any mode (converted to RGB); sizes may differ.
        preset : str or SelectionPreset, optional
            Box selection (default ``lxmert-36``).
        timer : StageTimer, optional
            Accumulates the seconds of preprocess, backbone, rpn, roi_heads, selection.

        Raises
        ------
        ImageInputError
            An image too small for the backbone, or with fewer proposals than the preset's
            minimum; ``.index`` names it.
        """
        p = self.resolve(preset)
        dev = self.device

        def stage(name: str):
            return timer.stage(name, dev) if timer is not None else _NULL

        with stage("preprocess"):
            batch = prepare_images(images, self.config, p.channel_order, dev, self.dtype, self._feature_sizes)
        with stage("backbone"):
            feats = self.model.backbone(batch.images, batch.sizes if batch.padded else None)
            fsizes = self._feature_sizes(batch.sizes)
        with stage("rpn"):
            proposals = self.model.proposal_generator(feats, fsizes, batch.sizes)
        with stage("roi_heads"):
            obj, attr, deltas, pooled = self.model.roi_heads(feats, [b for b, _ in proposals], fsizes)
        with stage("selection"):
            out = self._select(batch, proposals, obj, attr, deltas, pooled, p)
        if timer is not None:
            timer.calls += 1
        return out

    def _select(
        self, batch: Prepared, proposals: Sequence[tuple[Tensor, Tensor]], obj: Tensor, attr: Tensor | None,
        deltas: Tensor, pooled: Tensor, p: SelectionPreset,
    ) -> list[Detections]:
        counts = [len(b) for b, _ in proposals]
        cpu = torch.device("cpu")
        objs, deltas_, feats = (t.float().to(cpu).split(counts) for t in (obj, deltas, pooled))
        attrs = [None] * len(counts) if attr is None else list(attr.float().to(cpu).split(counts))
        scales = batch.scales()
        out = []
        for i, (boxes, _) in enumerate(proposals):
            boxes = boxes.float().to(cpu)
            hw = tuple(batch.sizes[i].tolist())
            o, a, d, f = objs[i], attrs[i], deltas_[i], feats[i]
            if p.rule == "butd":
                sel = select_butd(i, boxes, o, a, p)
            else:
                sel = select_hf(i, boxes, o, a, d, hw, self.config.roi_bbox_weights, p)
            sy, sx = scales[i].tolist()
            h, w = batch.original[i]
            px = sel.boxes * torch.tensor([sx, sy, sx, sy])
            px[:, 0::2] = px[:, 0::2].clamp(0, w)
            px[:, 1::2] = px[:, 1::2].clamp(0, h)
            out.append(
                Detections(
                    boxes=px.numpy().astype(np.float32),
                    features=f[sel.index].numpy().astype(np.float32),
                    objects_id=sel.objects_id.numpy().astype(np.int64),
                    objects_conf=sel.objects_conf.numpy().astype(np.float32),
                    attrs_id=sel.attrs_id.numpy().astype(np.int64),
                    attrs_conf=sel.attrs_conf.numpy().astype(np.float32),
                    image_w=int(w),
                    image_h=int(h),
                )
            )
        return out

