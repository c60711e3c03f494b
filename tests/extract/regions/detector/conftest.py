from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from tests.extract.regions.detector.helpers import drawn_image
from vlprobe.extract.regions.detector import RegionDetector
from vlprobe.fixtures.frcnn import write_tiny_frcnn


@pytest.fixture(scope="session")
def tiny_frcnn_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_frcnn(tmp_path_factory.mktemp("frcnn") / "tiny-frcnn", seed=0)


@pytest.fixture(scope="session")
def tiny_detector(tiny_frcnn_dir: Path) -> RegionDetector:
    return RegionDetector.load(tiny_frcnn_dir, device="cpu")


@pytest.fixture(scope="session")
def mixed_images() -> list[Image.Image]:
    """Four images of different sizes and aspect ratios (square, wide, very wide, tall)."""
    return [drawn_image(h, w, seed) for seed, (h, w) in enumerate([(64, 64), (80, 120), (60, 150), (130, 90)])]
