"""A tiny random VG Faster R-CNN written in the hub checkpoint's exact format.

``write_tiny_frcnn(out, seed)`` writes::

    config.yaml            the published file's keys; ResNet-50 layout with 4-wide bottlenecks,
                           shortest side 64 / longest 112, 24 objects, 12 attributes, RoIPool 2x2,
                           48 proposals per image
    pytorch_model.bin      plain torch.save of the state dict, the hub key names (batch-norm
                           statistics, num_batches_tracked counters, the RPN cell anchors)
    objects_vocab.txt      24 object names, one per line
    attributes_vocab.txt   12 attribute names
    VLPROBE_FIXTURE.json   {"kind": "frcnn", "seed": ..., ...}

The features are still 2048-d (res5 is 8 x the res2 width of 256; the 1x1 expansions to 2048
are cheap with 4-wide bottlenecks), so the tiny LXMERT and UNITER fixtures read them. Weights
come from :func:`init_random_weights` (confident, overlapping detections); a seed gives
byte-identical files.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
import yaml

from vlprobe.fixtures.staging import check_seed, prepare_out, staged

from .checkpoint import WEIGHTS_NAME
from .config import CONFIG_NAME, config_from_dict, default_config_dict
from .labels import ATTRIBUTES_FILE, OBJECTS_FILE
from .model import VGFasterRCNN, init_random_weights

__all__ = ["TINY_ATTRIBUTES", "TINY_OBJECTS", "tiny_config_dict", "write_tiny_frcnn"]

TINY_OBJECTS = (
    "circle square triangle star ring cross heart moon diamond arrow hexagon oval "
    "box ball cup tree house car dog cat bird person chair table"
).split()
TINY_ATTRIBUTES = "red blue green yellow black white orange purple pink brown grey striped".split()


def tiny_config_dict() -> dict[str, Any]:
    """The tiny fixture's ``config.yaml`` content."""
    cfg = default_config_dict()
    cfg["input"].update(min_size_test=64, max_size_test=112)
    cfg["resnets"].update(depth=50, width_per_group=4, stem_out_channels=8, res2_out_channels=256)
    cfg["anchor_generator"].update(sizes=[[24, 48, 72, 96]])
    cfg["proposal_generator"].update(hidden_channels=16)
    cfg["rpn"].update(pre_nms_topk_test=1000, post_nms_topk_test=48)
    cfg["roi_heads"].update(num_classes=len(TINY_OBJECTS), nms_thresh_test=[0.3, 0.5, 0.7])
    cfg["roi_box_head"].update(pooler_resolution=2, num_attrs=len(TINY_ATTRIBUTES))
    return cfg


def _hub_state(model: VGFasterRCNN) -> dict[str, torch.Tensor]:
    """The state dict as the hub file has it: batch norms with their num_batches_tracked."""
    out: dict[str, torch.Tensor] = {}
    for key, value in model.state_dict().items():
        out[key] = value.detach().clone().contiguous()
        if key.endswith(".norm.running_var"):
            out[key.removesuffix("running_var") + "num_batches_tracked"] = torch.tensor(0, dtype=torch.int64)
    return out


def write_tiny_frcnn(out: str | os.PathLike[str], seed: int = 0) -> Path:
    """Write the tiny detector to ``out`` (new, empty, or a previous tiny-frcnn fixture).

    Returns
    -------
    Path
        ``out``, loadable with ``RegionDetector.load(out)`` and ``load_labels(out)``.
    """
    check_seed(seed)
    out = Path(out)
    overwrite = prepare_out(out, "frcnn")
    data = tiny_config_dict()
    model = VGFasterRCNN(config_from_dict(data, where="tiny config"))
    init_random_weights(model, seed)
    state = _hub_state(model)
    with staged(out, overwrite, "frcnn", seed) as staging:
        with open(staging / CONFIG_NAME, "w", encoding="utf-8") as fh:
            yaml.safe_dump(data, fh, sort_keys=True, default_flow_style=None)
        torch.save(state, staging / WEIGHTS_NAME)
        (staging / OBJECTS_FILE).write_text("".join(f"{n}\n" for n in TINY_OBJECTS), encoding="utf-8")
        (staging / ATTRIBUTES_FILE).write_text("".join(f"{n}\n" for n in TINY_ATTRIBUTES), encoding="utf-8")
    return out
