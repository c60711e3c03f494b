"""Images for the detector tests."""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw


def drawn_image(h: int, w: int, seed: int) -> Image.Image:
    """A noisy image with a few coloured shapes (seeded)."""
    rng = np.random.default_rng(seed)
    img = Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
    draw = ImageDraw.Draw(img)
    for _ in range(3):
        x0, y0 = int(rng.integers(0, w // 2)), int(rng.integers(0, h // 2))
        x1, y1 = x0 + int(rng.integers(w // 4, w // 2)), y0 + int(rng.integers(h // 4, h // 2))
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        draw.ellipse([x0, y0, x1, y1], fill=colour)
    return img
