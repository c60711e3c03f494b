"""Box-selection presets: which of the ~300 scored proposals of an image become its regions.

``lxmert-36``
    LXMERT's features: the bottom-up-attention (BUTD) extractor
    (peteanderson80/bottom-up-attention, ``tools/generate_tsv.py``) with 36 boxes per image.
    Per class, NMS at IoU 0.3 over the proposals with that class's probability; a proposal's
    confidence is its best probability over the classes whose NMS it survives; proposals with
    confidence >= 0.4 are kept in proposal order if there are exactly 36 of them, otherwise the
    36 most confident. Boxes are the proposals themselves (not class-regressed), as in the TSV
    files LXMERT was trained on; objects and attributes are the arg-max of each softmax
    without its background class. Pixels in BGR order, as the Caffe model was trained.
``uniter-10-100``
    UNITER's adaptive features: the same extractor with confidence >= 0.2 and between 10 and
    100 boxes per image (too few: the 10 most confident; too many: the 100 most confident), the
    set UNITER's loaders keep (``clip(#(conf > 0.2), 10, 100)``). BGR.
``hf-frcnn``
    The Hugging Face research port (transformers ``examples/research_projects/lxmert``) as it
    is, for comparing with results computed with it (VALSE's LXMERT numbers): each proposal's
    box regressed for its best class, one class-agnostic NMS per threshold of
    ``roi_heads.nms_thresh_test``, the first whose survivors number between
    ``min_detections`` and ``max_detections`` (after keeping the best ``max_detections``)
    wins; attribute confidences are a softmax over the attributes without the "no attribute"
    class. Its image loader hands a local file to the BGR-trained model in **RGB** order, so
    this preset feeds RGB. Where every threshold leaves too few boxes the port fails or reuses
    the previous image's boxes; here the image gets the survivors of the last threshold topped
    up with its next best proposals.

Every preset can be changed with :meth:`SelectionPreset.with_overrides` (``--boxes 10:100
--min-score 0.2``); a preset's :meth:`~SelectionPreset.to_dict` is what a region file records.
An image with fewer proposals than ``min_boxes`` raises :class:`TooFewBoxesError`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vlprobe.validation import InputError, check_positive_int

from .errors import DetectorInputError

__all__ = ["CHANNEL_ORDERS", "DEFAULT_PRESET", "PRESETS", "RULES", "SelectionPreset", "get_preset"]

CHANNEL_ORDERS = ("bgr", "rgb")
RULES = ("butd", "hf-frcnn")
_OVERRIDABLE = ("min_boxes", "max_boxes", "min_score", "nms_threshold", "channel_order")


def _unknown(kind: str, name: str, known: Sequence[str]) -> str:
    from vlprobe.validation import unknown_name_message

    return unknown_name_message(kind, name, known)


@dataclass(frozen=True)
class SelectionPreset:
    """How boxes are chosen per image (see the module docstring for the presets).

    Attributes
    ----------
    name : str
        Preset name (``lxmert-36``, ``uniter-10-100``, ``hf-frcnn``).
    rule : {"butd", "hf-frcnn"}
        ``butd``: per-class NMS over the proposals, confidence threshold, box-count limits,
        proposal boxes. ``hf-frcnn``: the reference port's class-regressed boxes and
        class-agnostic NMS.
    min_boxes, max_boxes : int or None
        Boxes per image; ``None`` (``hf-frcnn``): the checkpoint's ``min_detections`` /
        ``max_detections``.
    min_score : float or None
        ``butd`` confidence threshold; ``hf-frcnn`` has none.
    nms_threshold : tuple of float or None
        ``butd``: the per-class NMS IoU (one value). ``hf-frcnn``: thresholds tried in order;
        ``None``: the checkpoint's ``roi_heads.nms_thresh_test``.
    channel_order : {"bgr", "rgb"}
        Order of the colour channels handed to the model (trained on BGR).
    source : str
        Where the rule comes from.
    """

    name: str
    rule: str
    min_boxes: int | None
    max_boxes: int | None
    min_score: float | None
    nms_threshold: tuple[float, ...] | None
    channel_order: str
    source: str

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise DetectorInputError(_unknown("selection rule", self.rule, RULES))
        _check_count("min_boxes", self.min_boxes)
        _check_count("max_boxes", self.max_boxes)
        if self.min_boxes is not None and self.max_boxes is not None and self.min_boxes > self.max_boxes:
            raise DetectorInputError(f"min_boxes must be <= max_boxes ({self.max_boxes}), got {self.min_boxes}")
        if self.min_score is not None:
            if self.rule == "hf-frcnn":
                raise DetectorInputError(
                    f"min_score: preset {self.name!r} selects by NMS only (no score threshold); use lxmert-36 or uniter-10-100"
                )
            if isinstance(self.min_score, bool) or not isinstance(self.min_score, int | float) or not 0 <= self.min_score <= 1:
                raise DetectorInputError(f"min_score must be a number in [0, 1], got {self.min_score!r}")
        elif self.rule == "butd":
            raise DetectorInputError("min_score: the butd rule needs a confidence threshold in [0, 1], got None")
        if self.nms_threshold is not None:
            thr = self.nms_threshold
            if not thr or not all(isinstance(t, int | float) and not isinstance(t, bool) and 0 <= t <= 1 for t in thr):
                raise DetectorInputError(f"nms_threshold must be one or more numbers in [0, 1], got {thr!r}")
            if self.rule == "butd" and len(thr) != 1:
                raise DetectorInputError(f"nms_threshold: the butd rule takes one threshold, got {thr!r}")
        elif self.rule == "butd":
            raise DetectorInputError("nms_threshold: the butd rule needs a per-class NMS threshold, got None")
        if self.channel_order not in CHANNEL_ORDERS:
            raise DetectorInputError(_unknown("channel_order", str(self.channel_order), CHANNEL_ORDERS))

    def with_overrides(self, **changes: Any) -> SelectionPreset:
        """A copy with some of ``min_boxes``, ``max_boxes``, ``min_score``, ``nms_threshold``,
        ``channel_order`` changed (``None`` values are ignored).

        Raises
        ------
        DetectorInputError
            Naming the field: an unknown field, ``max_boxes < 1``, ``min_boxes > max_boxes``, a
            score outside [0, 1], a ``min_score`` for ``hf-frcnn``.
        """
        unknown = [k for k in changes if k not in _OVERRIDABLE]
        if unknown:
            raise DetectorInputError(_unknown("preset field", unknown[0], _OVERRIDABLE))
        given = {k: v for k, v in changes.items() if v is not None}
        if "nms_threshold" in given and isinstance(given["nms_threshold"], int | float):
            given["nms_threshold"] = (given["nms_threshold"],)
        elif "nms_threshold" in given:
            given["nms_threshold"] = tuple(given["nms_threshold"])
        if "channel_order" in given:
            given["channel_order"] = str(given["channel_order"]).lower()
        return dataclasses.replace(self, **given)

    def resolved(self, min_detections: int, max_detections: int, nms_thresh_test: Sequence[float]) -> SelectionPreset:
        """The preset with ``None`` values replaced by the checkpoint's (``hf-frcnn``)."""
        lo = self.min_boxes if self.min_boxes is not None else min_detections
        hi = self.max_boxes if self.max_boxes is not None else max_detections
        if self.min_boxes is None and self.max_boxes is not None:
            lo = min(lo, hi)
        if self.max_boxes is None and self.min_boxes is not None:
            hi = max(lo, hi)
        nms_thr = self.nms_threshold if self.nms_threshold is not None else tuple(float(t) for t in nms_thresh_test)
        return dataclasses.replace(self, min_boxes=max(lo, 1), max_boxes=hi, nms_threshold=nms_thr)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able fields, for manifests and region-file metadata."""
        d = dataclasses.asdict(self)
        d["nms_threshold"] = list(self.nms_threshold) if self.nms_threshold is not None else None
        return d


def _check_count(field: str, value: Any) -> None:
    if value is None:
        return
    try:
        check_positive_int(value, field)
    except InputError as exc:
        raise DetectorInputError(str(exc)) from None


_BUTD = "peteanderson80/bottom-up-attention tools/generate_tsv.py"
PRESETS: dict[str, SelectionPreset] = {
    "lxmert-36": SelectionPreset(
        name="lxmert-36",
        rule="butd",
        min_boxes=36,
        max_boxes=36,
        min_score=0.4,
        nms_threshold=(0.3,),
        channel_order="bgr",
        source=f"LXMERT's 36 boxes per image ({_BUTD}: conf_thresh 0.4, 36 boxes, per-class NMS 0.3, proposal boxes)",
    ),
    "uniter-10-100": SelectionPreset(
        name="uniter-10-100",
        rule="butd",
        min_boxes=10,
        max_boxes=100,
        min_score=0.2,
        nms_threshold=(0.3,),
        channel_order="bgr",
        source=f"UNITER's adaptive 10-100 boxes ({_BUTD}: conf_thresh 0.2, 10 to 100 boxes, per-class NMS 0.3, proposal boxes)",
    ),
    "hf-frcnn": SelectionPreset(
        name="hf-frcnn",
        rule="hf-frcnn",
        min_boxes=None,
        max_boxes=None,
        min_score=None,
        nms_threshold=None,
        channel_order="rgb",
        source="transformers examples/research_projects/lxmert as it is (RGB pixels from local files, "
        "class-regressed boxes, class-agnostic NMS over roi_heads.nms_thresh_test, min/max_detections)",
    ),
}
DEFAULT_PRESET = "lxmert-36"


def get_preset(name: str | SelectionPreset) -> SelectionPreset:
    """The preset called ``name`` (a preset is returned as is).

    Raises
    ------
    DetectorInputError
        For an unknown name, with the known ones and a "did you mean".
    """
    if isinstance(name, SelectionPreset):
        return name
    key = str(name).strip().lower()
    if key not in PRESETS:
        raise DetectorInputError("preset: " + _unknown("box-selection preset", str(name), list(PRESETS)))
    return PRESETS[key]
