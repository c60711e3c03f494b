"""The Visual Genome Faster R-CNN of bottom-up attention, in plain torch (no torchvision).

``RegionDetector.load(checkpoint)`` reads the hub checkpoint ``unc-nlp/frcnn-vg-finetuned``
(``config.yaml`` + ``pytorch_model.bin``) or a folder in its format; ``detect(images, preset)``
returns 2048-d region features, boxes, object and attribute predictions per image. Presets
(``lxmert-36``, ``uniter-10-100``, ``hf-frcnn``) choose the boxes as the published feature sets
did; ``load_labels`` reads the VG class names.
"""

from .errors import DetectorInputError, ImageInputError, ImageTooSmallError, TooFewBoxesError
from .labels import load_labels
from .model import Detections, RegionDetector, StageTimer
from .presets import DEFAULT_PRESET, PRESETS, SelectionPreset, get_preset

__all__ = [
    "DEFAULT_PRESET",
    "PRESETS",
    "Detections",
    "DetectorInputError",
    "ImageInputError",
    "ImageTooSmallError",
    "RegionDetector",
    "SelectionPreset",
    "StageTimer",
    "TooFewBoxesError",
    "get_preset",
    "load_labels",
]
