"""Pixel models' image processors run on transformers' PIL backend, asked for explicitly, and the
cache records it (``image_backend``, ``image_orientation``).

torchvision does not import on the test machines, so transformers would pick PIL here by itself;
the tests therefore check the request the loader makes (and that a processor on another backend
is refused), not only the class that comes back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from vlprobe.extract.models.hf import IMAGE_BACKEND, image_backend_of, load_image_processor
from vlprobe.validation import InputError


@pytest.fixture
def requests(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The keyword arguments of every ``AutoImageProcessor.from_pretrained`` call (which still runs)."""
    from transformers import AutoImageProcessor

    real = AutoImageProcessor.from_pretrained.__func__  # type: ignore[attr-defined]
    seen: list[dict[str, Any]] = []

    def spy(cls: Any, path: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(dict(kwargs))
        return real(cls, path, *args, **kwargs)

    monkeypatch.setattr(AutoImageProcessor, "from_pretrained", classmethod(spy))
    return seen


def test_the_loader_asks_for_the_pil_backend(tiny_clip: Path, requests: list[dict[str, Any]]) -> None:
    processor = load_image_processor(tiny_clip, str(tiny_clip))
    assert IMAGE_BACKEND == "pil"
    assert requests == [{"backend": "pil"}]
    assert image_backend_of(processor) == "pil" and type(processor).__name__ == "CLIPImageProcessorPil"


@pytest.mark.parametrize("model", ["clip", "siglip", "blip-itm"])
def test_every_pixel_model_loads_its_pil_processor_and_reports_it(
    model: str, requests: list[dict[str, Any]], tiny_clip: Path, tiny_siglip: Path, tiny_blip_itm: Path,
) -> None:
    from vlprobe.registry import MODELS

    checkpoint = {"clip": tiny_clip, "siglip": tiny_siglip, "blip-itm": tiny_blip_itm}[model]
    adapter = MODELS.get(model).load(str(checkpoint), device="cpu")
    assert requests == [{"backend": "pil"}]
    assert adapter.image_preprocessing() == {"image_backend": "pil", "image_orientation": "stored"}


def test_region_models_record_no_image_preprocessing(tiny_lxmert: Path) -> None:
    from vlprobe.registry import MODELS

    adapter = MODELS.get("lxmert").load(str(tiny_lxmert), device="cpu")
    assert adapter.image_preprocessing() == {}


def test_a_processor_on_another_backend_is_refused(tiny_clip: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a transformers that ignored the request (or a checkpoint with a torchvision-only
    processor) would hand back: refused, naming the processor and both backends. The processor is
    a stand-in: a real torchvision one cannot be built where torchvision does not import."""
    from transformers import AutoImageProcessor

    class CLIPImageProcessorFast:
        backend = "torchvision"

    monkeypatch.setattr(AutoImageProcessor, "from_pretrained",
                        classmethod(lambda cls, path, **kw: CLIPImageProcessorFast()))
    with pytest.raises(InputError, match=r"CLIPImageProcessorFast runs on the 'torchvision' backend, not 'pil'"):
        load_image_processor(tiny_clip, "ckpt")
    assert image_backend_of(type("CLIPImageProcessorFast", (), {})()) == "torchvision"  # older transformers


def test_a_checkpoint_without_an_image_processor_is_an_input_error(tiny_clip: Path, tmp_path: Path) -> None:
    import shutil

    bare = Path(shutil.copytree(tiny_clip, tmp_path / "bare"))
    (bare / "preprocessor_config.json").unlink()
    with pytest.raises(InputError, match="checkpoint: 'bare' has no readable image processor"):
        load_image_processor(bare, "bare")
