"""The detector's ``config.yaml``: what is read from it, and the values of the published model.

The hub checkpoint ``unc-nlp/frcnn-vg-finetuned`` ships a YAML file in the layout of the
Hugging Face research port: lower-case sections at the top level (``model``, ``input``,
``resnets``, ``rpn``, ``proposal_generator``, ``anchor_generator``, ``roi_heads``,
``roi_box_head``) and a few top-level values (``size_divisibility``, ``pad_value``,
``min_detections``, ``max_detections``). :func:`config_from_dict` reads exactly the keys that
port reads (case-insensitively; a Detectron2-style file with the sections under ``model`` is
read too) and refuses a file that lacks one, naming the key.

:func:`default_config_dict` holds the values of the published VG model (ResNet-101 C4, 1600
objects, 400 attributes, shortest side 600 / longest 1000, BGR pixel mean
``102.9801, 115.9465, 122.7717``, 12 anchors of sizes 64-512, RPN 6000 -> 300 proposals at
NMS 0.7, RoIPool 14 x 14 at stride 16, box-regression weights 10, 10, 5, 5). It is what
:meth:`RegionDetector.random` builds at full size; a real checkpoint always uses its own file.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import DetectorInputError

__all__ = [
    "BLOCKS_PER_STAGE",
    "CONFIG_NAME",
    "DetectorConfig",
    "config_from_dict",
    "default_config_dict",
    "read_config",
]

CONFIG_NAME = "config.yaml"
# Bottleneck blocks in res2, res3, res4 (res5, the RoI head, always has 3).
BLOCKS_PER_STAGE = {50: (3, 4, 6), 101: (3, 4, 23), 152: (3, 8, 36)}
_BN_NORMS = ("bn", "frozenbn", "syncbn", "nnsyncbn")


@dataclass(frozen=True)
class DetectorConfig:
    """The facts of ``config.yaml`` the detector uses (see the module docstring for the keys)."""

    pixel_mean: tuple[float, float, float]
    pixel_std: tuple[float, float, float]
    caffe_max_pool: bool
    min_size: int
    max_size: int
    input_format: str
    size_divisibility: int
    pad_value: float
    depth: int
    norm: str
    num_groups: int
    width_per_group: int
    stem_out_channels: int
    res2_out_channels: int
    stride_in_1x1: bool
    anchor_sizes: tuple[float, ...]
    aspect_ratios: tuple[float, ...]
    anchor_offset: float
    rpn_hidden_channels: int
    rpn_nms_thresh: float
    pre_nms_topk: int
    post_nms_topk: int
    rpn_min_size: float
    rpn_bbox_weights: tuple[float, float, float, float]
    num_classes: int
    num_attrs: int
    attr_head: bool
    pooler_resolution: int
    roi_bbox_weights: tuple[float, float, float, float]
    res5_halve: bool
    nms_thresh_test: tuple[float, ...]
    score_thresh_test: float
    min_detections: int
    max_detections: int
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def feature_dim(self) -> int:
        """Width of the pooled res5 feature: 8 x the res2 width (2048 for ResNet-101)."""
        return self.res2_out_channels * 8

    @property
    def num_anchors(self) -> int:
        return len(self.anchor_sizes) * len(self.aspect_ratios)

    @property
    def feature_stride(self) -> int:
        return 16

    def summary(self) -> dict[str, Any]:
        """JSON-able facts for ``describe()`` and region-file metadata."""
        return {
            "backbone": f"ResNet-{self.depth} C4",
            "depth": self.depth,
            "norm": self.norm,
            "caffe_max_pool": self.caffe_max_pool,
            "num_classes": self.num_classes,
            "num_attributes": self.num_attrs if self.attr_head else 0,
            "feature_dim": self.feature_dim,
            "min_size": self.min_size,
            "max_size": self.max_size,
            "input_format": self.input_format,
            "pixel_mean": list(self.pixel_mean),
            "pixel_std": list(self.pixel_std),
            "anchor_sizes": list(self.anchor_sizes),
            "aspect_ratios": list(self.aspect_ratios),
            "anchor_offset": self.anchor_offset,
            "rpn_nms_thresh": self.rpn_nms_thresh,
            "rpn_pre_nms_topk": self.pre_nms_topk,
            "rpn_post_nms_topk": self.post_nms_topk,
            "pooler_resolution": self.pooler_resolution,
            "res5_halve": self.res5_halve,
            "roi_bbox_weights": list(self.roi_bbox_weights),
            "nms_thresh_test": list(self.nms_thresh_test),
            "min_detections": self.min_detections,
            "max_detections": self.max_detections,
        }


def _lower_keys(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return {str(k).lower(): _lower_keys(v) for k, v in obj.items()}
    return obj


class _Reader:
    def __init__(self, data: Mapping[str, Any], where: str) -> None:
        self.data = _lower_keys(data)
        self.where = where

    def get(self, path: str) -> Any:
        for root in (self.data, self.data.get("model")):
            node: Any = root
            for part in path.split("."):
                if not isinstance(node, Mapping) or part not in node:
                    node = None
                    break
                node = node[part]
            if node is not None:
                return node
        raise DetectorInputError(f"{self.where}: missing key {path!r}")

    def bad(self, path: str, expected: str, got: Any) -> DetectorInputError:
        return DetectorInputError(f"{self.where}: {path} must be {expected}, got {got!r}")

    def integer(self, path: str, minimum: int = 0) -> int:
        v = self.get(path)
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            raise self.bad(path, f"an integer >= {minimum}", v)
        return v

    def number(self, path: str, lo: float | None = None, hi: float | None = None) -> float:
        v = self.get(path)
        if isinstance(v, bool) or not isinstance(v, int | float) or (lo is not None and v < lo) or (hi is not None and v > hi):
            rng = f" in [{lo}, {hi}]" if lo is not None and hi is not None else ""
            raise self.bad(path, f"a number{rng}", v)
        return float(v)

    def flag(self, path: str) -> bool:
        v = self.get(path)
        if not isinstance(v, bool):
            raise self.bad(path, "true or false", v)
        return v

    def numbers(self, path: str, length: int | None = None, nested: bool = False) -> tuple[float, ...]:
        v = self.get(path)
        if nested and isinstance(v, list) and len(v) == 1 and isinstance(v[0], list):
            v = v[0]  # one list per feature map; the C4 model has one map
        if isinstance(v, int | float) and not isinstance(v, bool) and length is None:
            v = [v]
        ok = isinstance(v, list) and v and all(isinstance(x, int | float) and not isinstance(x, bool) for x in v)
        if not ok or (length is not None and len(v) != length):
            raise self.bad(path, f"a list of {length or 'one or more'} numbers", v)
        return tuple(float(x) for x in v)

    def triple(self, path: str) -> tuple[float, float, float]:
        a, b, c = self.numbers(path, 3)
        return a, b, c

    def quad(self, path: str) -> tuple[float, float, float, float]:
        a, b, c, d = self.numbers(path, 4)
        return a, b, c, d

    def features(self, path: str) -> None:
        v = self.get(path)
        if [str(x).lower() for x in (v if isinstance(v, list) else [v])] != ["res4"]:
            raise self.bad(path, "['res4'] (the C4 detector)", v)


def config_from_dict(data: Mapping[str, Any], where: str = CONFIG_NAME) -> DetectorConfig:
    """Check and read a parsed ``config.yaml``.

    Raises
    ------
    DetectorInputError
        One line naming the first missing or unusable key.
    """
    if not isinstance(data, Mapping):
        raise DetectorInputError(f"{where}: expected a YAML mapping, got {type(data).__name__}")
    r = _Reader(data, where)
    depth = r.integer("resnets.depth")
    if depth not in BLOCKS_PER_STAGE:
        raise r.bad("resnets.depth", f"one of {sorted(BLOCKS_PER_STAGE)}", depth)
    norm = str(r.get("resnets.norm"))
    if norm.lower() not in (*_BN_NORMS, ""):
        raise r.bad("resnets.norm", "BN or FrozenBN (frozen batch norm) or '' (none)", norm)
    fmt = str(r.get("input.format")).upper()
    if fmt not in ("BGR", "RGB"):
        raise r.bad("input.format", "BGR or RGB", fmt)
    r.features("resnets.out_features")
    r.features("rpn.in_features")
    r.features("roi_heads.in_features")
    if r.flag("roi_box_head.cls_agnostic_bbox_reg"):
        raise r.bad("roi_box_head.cls_agnostic_bbox_reg", "false (per-class box regression)", True)
    nms_test = r.get("roi_heads.nms_thresh_test")
    nms_test = nms_test if isinstance(nms_test, list) else [nms_test]
    if not nms_test or not all(isinstance(x, int | float) and not isinstance(x, bool) and 0 <= x <= 1 for x in nms_test):
        raise r.bad("roi_heads.nms_thresh_test", "a number or list of numbers in [0, 1]", nms_test)
    cfg = DetectorConfig(
        pixel_mean=r.triple("model.pixel_mean"),
        pixel_std=r.triple("model.pixel_std"),
        caffe_max_pool=r.flag("model.max_pool"),
        min_size=r.integer("input.min_size_test", 1),
        max_size=r.integer("input.max_size_test", 1),
        input_format=fmt,
        size_divisibility=r.integer("size_divisibility"),
        pad_value=r.number("pad_value"),
        depth=depth,
        norm=norm,
        num_groups=r.integer("resnets.num_groups", 1),
        width_per_group=r.integer("resnets.width_per_group", 1),
        stem_out_channels=r.integer("resnets.stem_out_channels", 1),
        res2_out_channels=r.integer("resnets.res2_out_channels", 1),
        stride_in_1x1=r.flag("resnets.stride_in_1x1"),
        anchor_sizes=r.numbers("anchor_generator.sizes", nested=True),
        aspect_ratios=r.numbers("anchor_generator.aspect_ratios", nested=True),
        anchor_offset=r.number("anchor_generator.offset", 0.0, 0.999999),
        rpn_hidden_channels=_hidden(r),
        rpn_nms_thresh=r.number("rpn.nms_thresh", 0.0, 1.0),
        pre_nms_topk=r.integer("rpn.pre_nms_topk_test", 1),
        post_nms_topk=r.integer("rpn.post_nms_topk_test", 1),
        rpn_min_size=r.number("proposal_generator.min_size", 0.0),
        rpn_bbox_weights=r.quad("rpn.bbox_reg_weights"),
        num_classes=r.integer("roi_heads.num_classes", 1),
        num_attrs=r.integer("roi_box_head.num_attrs", 0),
        attr_head=r.flag("roi_box_head.attr"),
        pooler_resolution=r.integer("roi_box_head.pooler_resolution", 1),
        roi_bbox_weights=r.quad("roi_box_head.bbox_reg_weights"),
        res5_halve=r.flag("roi_box_head.res5halve"),
        nms_thresh_test=tuple(float(x) for x in nms_test),
        score_thresh_test=r.number("roi_heads.score_thresh_test", 0.0, 1.0),
        min_detections=r.integer("min_detections", 0),
        max_detections=r.integer("max_detections", 1),
        raw=copy.deepcopy(dict(data)),
    )
    if cfg.min_detections > cfg.max_detections:
        raise r.bad("min_detections", f"<= max_detections ({cfg.max_detections})", cfg.min_detections)
    if cfg.res2_out_channels % 2 or cfg.feature_dim % 8:
        raise r.bad("resnets.res2_out_channels", "an even number", cfg.res2_out_channels)
    if cfg.attr_head and cfg.num_attrs < 1:
        raise r.bad("roi_box_head.num_attrs", "an integer >= 1 when roi_box_head.attr is true", cfg.num_attrs)
    return cfg


def _hidden(r: _Reader) -> int:
    v = r.get("proposal_generator.hidden_channels")
    if v == -1:  # -1: as wide as the backbone output, as in Detectron2
        return r.integer("resnets.res2_out_channels", 1) * 4
    return r.integer("proposal_generator.hidden_channels", 1)


def read_config(path: str | os.PathLike[str]) -> DetectorConfig:
    """Read and check a ``config.yaml`` file (or the ``config.yaml`` of a directory)."""
    import yaml

    p = Path(path)
    if p.is_dir():
        p = p / CONFIG_NAME
    if not p.is_file():
        raise DetectorInputError(f"detector: no {CONFIG_NAME} in {str(p.parent)!r} (expected the checkpoint's config.yaml)")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DetectorInputError(f"{p}: not a readable YAML file ({first})") from None
    return config_from_dict(data, where=str(p))


def default_config_dict() -> dict[str, Any]:
    """``config.yaml`` of the published VG detector, as a dict in the file's own layout.

    The values are those of the published model where its sources state them (see the module
    docstring); training-only keys carry Detectron2's defaults. Three values only matter to the
    ``hf-frcnn`` selection and could not be checked against a copy of the published file:
    ``min_detections`` 10, ``max_detections`` 36 and ``roi_heads.nms_thresh_test`` 0.6 stand
    in for them. A real checkpoint is always run with its own file.
    """
    return {
        "model": {
            "device": "cpu",
            "load_proposals": False,
            "max_pool": True,
            "chkpoint": "",
            "pixel_mean": [102.9801, 115.9465, 122.7717],
            "pixel_std": [1.0, 1.0, 1.0],
        },
        "input": {"max_size_test": 1000, "min_size_test": 600, "format": "BGR"},
        "size_divisibility": 0,
        "pad_value": 0.0,
        "min_detections": 10,
        "max_detections": 36,
        "backbone": {"freeze_at": 2},
        "resnets": {
            "depth": 101,
            "norm": "BN",
            "num_groups": 1,
            "width_per_group": 64,
            "stem_out_channels": 64,
            "res2_out_channels": 256,
            "stride_in_1x1": True,
            "res5_dilation": 1,
            "out_features": ["res4"],
        },
        "anchor_generator": {"sizes": [[64, 128, 256, 512]], "aspect_ratios": [[0.5, 1.0, 2.0]], "offset": 0.0},
        "proposal_generator": {"hidden_channels": 512, "min_size": 0},
        "rpn": {
            "in_features": ["res4"],
            "nms_thresh": 0.7,
            "pre_nms_topk_test": 6000,
            "post_nms_topk_test": 300,
            "pre_nms_topk_train": 12000,
            "post_nms_topk_train": 2000,
            "bbox_reg_weights": [1.0, 1.0, 1.0, 1.0],
            "batch_size_per_image": 256,
            "positive_fraction": 0.5,
            "smooth_l1_beta": 0.0,
            "loss_weight": 1.0,
            "boundary_thresh": -1,
            "iou_thresholds": [0.3, 0.7],
            "iou_labels": [0, -1, 1],
        },
        "roi_heads": {
            "in_features": ["res4"],
            "num_classes": 1600,
            "nms_thresh_test": 0.6,
            "score_thresh_test": 0.2,
            "positive_fraction": 0.25,
            "proposal_append_gt": True,
        },
        "roi_box_head": {
            "pooler_resolution": 14,
            "pooler_sampling_ratio": 0,
            "bbox_reg_weights": [10.0, 10.0, 5.0, 5.0],
            "cls_agnostic_bbox_reg": False,
            "res5halve": False,
            "attr": True,
            "num_attrs": 400,
            "smooth_l1_beta": 0.0,
        },
    }
