"""Errors of the detector: bad input (a :class:`~vlprobe.validation.InputError`), and per-image errors that name the image."""

from __future__ import annotations

from vlprobe.validation import InputError

__all__ = ["DetectorInputError", "ImageInputError", "ImageTooSmallError", "TooFewBoxesError"]


class DetectorInputError(InputError):
    """Bad input to the detector: a checkpoint, config, preset or image it cannot use."""


class ImageInputError(DetectorInputError):
    """One image of a batch cannot be processed.

    Attributes
    ----------
    index : int
        Position of the image in the batch passed to ``detect``.
    reason : str
        What is wrong, without the position (the caller may name the file instead).
    """

    def __init__(self, index: int, reason: str) -> None:
        self.index = index
        self.reason = reason
        super().__init__(f"image {index} of the batch: {reason}")


class ImageTooSmallError(ImageInputError):
    """The resized image leaves no feature map for the backbone."""


class TooFewBoxesError(ImageInputError):
    """Fewer candidate boxes exist than the preset's minimum."""
