"""Box conversions (pixel <-> normalised, 4-/6-/7-d), the tolerance rule and image-id normalisation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vlprobe.extract.regions.boxes import (
    boxes_to_4d,
    boxes_to_6d,
    boxes_to_7d,
    check_normalised_boxes,
    normalise_boxes,
    normalise_image_id,
    pixel_boxes,
)

_coord = st.floats(0.0, 1.0, allow_nan=False, width=32)


@st.composite
def _box_sets(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n_img, n_box = draw(st.integers(1, 4)), draw(st.integers(1, 6))
    flat = draw(st.lists(_coord, min_size=n_img * n_box * 4, max_size=n_img * n_box * 4))
    c = np.array(flat, dtype=np.float64).reshape(n_img, n_box, 2, 2)
    b = np.concatenate([c.min(axis=2), c.max(axis=2)], axis=-1)  # x1<=x2, y1<=y2
    w = np.array(draw(st.lists(st.integers(1, 5000), min_size=n_img, max_size=n_img)))[:, None]
    h = np.array(draw(st.lists(st.integers(1, 5000), min_size=n_img, max_size=n_img)))[:, None]
    return b, w, h


@settings(max_examples=60, deadline=None)
@given(_box_sets())
def test_box_conversions_properties(case: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
    b, w, h = case
    px = pixel_boxes(b, w, h)
    assert px.shape == b.shape and px.dtype == np.float32
    assert np.all(px[..., 0] <= w) and np.all(px[..., 3] <= h)
    np.testing.assert_allclose(normalise_boxes(px, w, h), b, atol=1e-6)
    b6, b7 = boxes_to_6d(b), boxes_to_7d(b)
    np.testing.assert_allclose(b6[..., 4], b[..., 2] - b[..., 0], atol=1e-6)
    np.testing.assert_allclose(b6[..., 5], b[..., 3] - b[..., 1], atol=1e-6)
    np.testing.assert_allclose(b7[..., :6], b6, atol=1e-7)
    np.testing.assert_allclose(b7[..., 6], b6[..., 4] * b6[..., 5], atol=1e-6)
    for form in (b, b6, b7):
        np.testing.assert_allclose(boxes_to_4d(form), b, atol=1e-6)
        np.testing.assert_allclose(boxes_to_7d(form), b7, atol=1e-6)
    assert np.all((b7 >= 0) & (b7 <= 1))
    assert not boxes_to_7d(np.zeros((2, 4))).any()


@settings(max_examples=40, deadline=None)
@given(st.floats(-0.5, 1.5, allow_nan=False), st.floats(0.0, 0.05))
def test_tolerance_clips_or_refuses(x: float, tol: float) -> None:
    box = np.array([[min(x, 1.0), 0.0, max(x, 1.0), 1.0]])
    if -tol <= x <= 1 + tol:
        out = check_normalised_boxes(box, tolerance=tol)
        assert out.min() >= 0 and out.max() <= 1
    else:
        with pytest.raises(ValueError, match="must lie in"):
            check_normalised_boxes(box, tolerance=tol)


def test_normalise_boxes_rejects_pixels_and_swapped_sizes() -> None:
    px = np.array([[10.0, 20.0, 600.0, 300.0]])
    with pytest.raises(ValueError, match="must lie in"):
        check_normalised_boxes(px)
    with pytest.raises(ValueError, match="swapped"):
        normalise_boxes(px, 400, 640)  # width 640 given as height
    np.testing.assert_allclose(normalise_boxes(px, 640, 400), [[10 / 640, 20 / 400, 600 / 640, 300 / 400]], rtol=1e-6)
    with pytest.raises(ValueError, match=r"shape \(\.\.\., 4\)"):
        normalise_boxes(np.zeros((2, 5)), 1, 1)


@pytest.mark.parametrize("raw, want", [
    ("images/ex_3_img_1.png", "ex_3_img_1"), ("ex_3_img_1", "ex_3_img_1"), (42, "42"),
    ("COCO_val2014_000000000042.jpg", "COCO_val2014_000000000042"), (b"x.npz", "x"),
    ("C:\\data\\a.JPEG", "a"), ("v1.5_img", "v1.5_img"), ("  7 ", "7"),
])
def test_normalise_image_id(raw: object, want: str) -> None:
    assert normalise_image_id(raw) == want
