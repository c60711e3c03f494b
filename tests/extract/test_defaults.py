"""``probe extract`` without its inputs: reference checkpoints, the dataset folder from the
environment, the default cache path, regions made by the built-in detector, the record of what
was taken (``vlprobe.extract.defaults``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import h5py
import pytest
from typer.testing import CliRunner

from vlprobe.data.loading import data_dir_env, resolve_data_dir
from vlprobe.data.synthetic import make_synthetic_winoground
from vlprobe.extract.cache.reader import ActivationCache
from vlprobe.extract.defaults import (
    REFERENCE_DETECTOR,
    checkpoint_env,
    default_cache_path,
    default_checkpoint,
    default_region_path,
)
from vlprobe.extract.models.base import Adapter
from vlprobe.extract.regions.detector.presets import PRESETS
from vlprobe.extract.runner import ExtractConfig, extract
from vlprobe.registry import MODELS
from vlprobe.validation import InputError

#: What each registered adapter loads without --checkpoint: the papers' checkpoints (CLIP ViT-B/32,
#: LXMERT as "Why is Winoground Hard?" ran them), the base models of the others, UNITER's official file,
#: the 7B generative models t2v_metrics scores.
REFERENCE = {
    "clip": ("openai/clip-vit-base-patch32", True),
    "lxmert": ("unc-nlp/lxmert-base-uncased", True),
    "uniter": ("uniter-base.pt", False),
    "siglip": ("google/siglip-base-patch16-224", True),
    "blip-itm": ("Salesforce/blip-itm-base-coco", True),
    "llava": ("llava-hf/llava-1.5-7b-hf", True),
    "qwen2-vl": ("Qwen/Qwen2-VL-7B-Instruct", True),
}

#: Region models trained on another detector's features (ResNeXt-152 Detectron): no preset of the
#: built-in detector stands in for them, so they need --regions.
OTHER_DETECTOR = {"vilbert", "visualbert"}


def adapters() -> dict[str, type[Adapter]]:
    out = {}
    for name in MODELS.names():
        cls = MODELS.get(name)
        if isinstance(cls, type) and issubclass(cls, Adapter):
            out[name] = cls
    return out


def test_every_adapter_declares_its_reference_checkpoint() -> None:
    got = {name: (cls.reference_checkpoint.name, cls.reference_checkpoint.hub)
           for name, cls in adapters().items() if cls.reference_checkpoint is not None}
    assert got == REFERENCE
    for name, cls in adapters().items():
        if cls.image_input == "regions" and name not in OTHER_DETECTOR:
            assert cls.region_preset in PRESETS, name
        else:
            assert cls.region_preset is None, name
    assert MODELS.get("lxmert").region_preset == "lxmert-36"
    assert MODELS.get("uniter").region_preset == "uniter-10-100"


def test_default_checkpoint_environment_then_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    clip = MODELS.get("clip")
    monkeypatch.delenv("VLPROBE_CLIP_CHECKPOINT", raising=False)
    assert default_checkpoint("clip", clip) == ("openai/clip-vit-base-patch32", "reference checkpoint of clip")
    monkeypatch.setenv("VLPROBE_CLIP_CHECKPOINT", "/models/clip")
    assert default_checkpoint("clip", clip) == ("/models/clip", "VLPROBE_CLIP_CHECKPOINT")
    assert checkpoint_env("blip-itm") == "VLPROBE_BLIP_ITM_CHECKPOINT"


def test_uniter_reference_is_not_on_the_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLPROBE_UNITER_CHECKPOINT", raising=False)
    with pytest.raises(InputError) as exc:
        default_checkpoint("uniter", MODELS.get("uniter"))
    msg = str(exc.value)
    assert msg.startswith("checkpoint: uniter's reference checkpoint is uniter-base.pt")
    assert "ChenRocks/UNITER" in msg and "VLPROBE_UNITER_CHECKPOINT=FILE" in msg and "\n" not in msg
    monkeypatch.setenv("VLPROBE_UNITER_CHECKPOINT", "/models/uniter-base.pt")
    assert default_checkpoint("uniter", MODELS.get("uniter")) == ("/models/uniter-base.pt", "VLPROBE_UNITER_CHECKPOINT")


def test_default_paths() -> None:
    assert default_cache_path("lxmert", "winoground") == Path("caches/lxmert-winoground.h5")
    # the name --shard auto gives, so that probe cache merge --out caches/clip-winoground.h5 finds it
    assert default_cache_path("clip", "winoground", "2/4") == Path("caches/clip-winoground.shard-2-of-4.h5")
    cache = Path("caches/lxmert-winoground.h5")
    assert default_region_path(cache, "winoground", "lxmert-36") == Path("caches/winoground-lxmert-36-regions.h5")
    # item-choosing options give each selection its own file; image folders do not choose items
    one = default_region_path(cache, "sugarcrepe", "lxmert-36", {"subsets": "swap_obj", "image_dir": "/coco"})
    two = default_region_path(cache, "sugarcrepe", "lxmert-36", {"subsets": "swap_att"})
    assert one != two and one.name.startswith("sugarcrepe-lxmert-36-regions-")
    assert one == default_region_path(cache, "sugarcrepe", "lxmert-36", {"subsets": "swap_obj"})


def test_data_dir_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert data_dir_env("winoground") == "VLPROBE_WINOGROUND"
    monkeypatch.delenv("VLPROBE_WINOGROUND", raising=False)
    assert resolve_data_dir("winoground", None) == (None, None)
    monkeypatch.setenv("VLPROBE_WINOGROUND", str(tmp_path))
    assert resolve_data_dir("winoground", None) == (tmp_path, "VLPROBE_WINOGROUND")
    assert resolve_data_dir("winoground", "/given") == (Path("/given"), None)  # given wins
    monkeypatch.setenv("VLPROBE_WINOGROUND", str(tmp_path / "missing"))
    with pytest.raises(InputError, match=r"^data_dir: VLPROBE_WINOGROUND='.*missing' is not a folder"):
        resolve_data_dir("winoground", None)


@pytest.fixture(scope="module")
def small_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_synthetic_winoground(tmp_path_factory.mktemp("small") / "winoground", n_items=2, seed=4)


@pytest.fixture(scope="module")
def tiny_detector(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from vlprobe.fixtures.frcnn import write_tiny_frcnn

    return write_tiny_frcnn(tmp_path_factory.mktemp("frcnn") / "tiny-frcnn", seed=0)


def test_lxmert_with_every_input_by_default(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, small_data: Path, tiny_lxmert: Path, tiny_detector: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Checkpoint and detector from their variables, the data folder from VLPROBE_WINOGROUND (with its
    variants), the cache and the regions under caches/; a second run reuses both."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("VLPROBE_LXMERT_CHECKPOINT", str(tiny_lxmert))
    monkeypatch.setenv("VLPROBE_DETECTOR_CHECKPOINT", str(tiny_detector))
    monkeypatch.setenv("VLPROBE_WINOGROUND", str(small_data))
    config = ExtractConfig(model="lxmert", device="cpu", progress=False)
    got = extract(config)
    assert got.path == Path("caches/lxmert-winoground.h5")
    regions = Path("caches/winoground-lxmert-36-regions.h5")
    assert set(got.defaults) == {"checkpoint", "data_dir", "variants", "out", "regions"}
    assert got.defaults["checkpoint"] == f"{tiny_lxmert} (VLPROBE_LXMERT_CHECKPOINT)"
    assert got.defaults["regions"].startswith(f"{regions} (made by vlprobe: detector {tiny_detector}")
    assert "preset lxmert-36" in got.defaults["regions"]
    with ActivationCache(got.path) as cache:
        info = cache.info()
    assert info["complete"] and info["recorded"]["defaults"] == got.defaults
    assert info["texts"] > 4  # the variants of the data folder were attached
    with h5py.File(regions, "r") as f:  # LXMERT's 36 boxes per image, from the default detector
        assert f.attrs["complete"]
    capsys.readouterr()
    again = extract(dataclasses.replace(config, progress=True))
    assert sum(again.rows_written.values()) == 0
    err = capsys.readouterr().err
    assert f"regions: {regions}" in err and "regions: wrote" not in err  # reused: no image detected again
    assert "default checkpoint: " in err and "default regions: " in err


def test_given_data_dir_attaches_no_variants(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, small_data: Path, tiny_lxmert: Path, synthetic_regions: Path,
    synthetic_dir: Path,
) -> None:
    monkeypatch.delenv("VLPROBE_WINOGROUND", raising=False)
    got = extract(ExtractConfig(model="lxmert", checkpoint=str(tiny_lxmert), data_dir=synthetic_dir,
                                regions=synthetic_regions, out=tmp_path / "c.h5", device="cpu", progress=False))
    assert got.defaults == {}
    with ActivationCache(got.path) as cache:
        info = cache.info()
    assert info["variants"] == 0 and info["recorded"]["defaults"] == {}


def test_a_default_hub_id_missing_offline_fails_before_any_work(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, small_data: Path,
) -> None:
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    monkeypatch.delenv("VLPROBE_LXMERT_CHECKPOINT", raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError) as exc:
        extract(ExtractConfig(model="lxmert", data_dir=small_data, device="cpu", progress=False))
    msg = str(exc.value)  # the detector is missing too: both in one message
    assert msg.startswith("2 inputs taken by default are missing (nothing was done): (1) checkpoint (not given: the "
                          "reference checkpoint of lxmert): 'unc-nlp/lxmert-base-uncased' is not in the local hub cache")
    assert f"; (2) detector (not given: the reference detector): '{REFERENCE_DETECTOR}'" in msg
    assert "hf download unc-nlp/lxmert-base-uncased" in msg and "models--unc-nlp--lxmert-base-uncased" in msg
    assert str(tmp_path / "empty-hub") in msg and "--checkpoint DIR" in msg and "\n" not in msg
    assert not (tmp_path / "caches").exists() or not any((tmp_path / "caches").iterdir())  # no regions, no cache


def test_the_default_detector_missing_offline_fails_before_any_work(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, small_data: Path, tiny_lxmert: Path,
) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    monkeypatch.delenv("VLPROBE_DETECTOR_CHECKPOINT", raising=False)
    with pytest.raises(InputError) as exc:
        extract(ExtractConfig(model="lxmert", checkpoint=str(tiny_lxmert), data_dir=small_data,
                              out=tmp_path / "c.h5", device="cpu", progress=False))
    assert str(exc.value).startswith(f"detector (not given: the reference detector): '{REFERENCE_DETECTOR}' is not in")
    assert not (tmp_path / "winoground-lxmert-36-regions.h5").exists()


@pytest.mark.parametrize("model", ["lxmert", "uniter"])
def test_every_missing_default_is_named_in_one_message(
    model: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, one_error_line: Callable[..., str],
) -> None:
    """The design card's line offline on a bare machine: the checkpoint, the detector and the
    dataset are all missing; one run names all three, in one line, and does nothing. The detector's
    advice names what `probe extract` takes (the variable, --regions), not a --detector it lacks."""
    from huggingface_hub import constants

    from vlprobe.cli import app

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    for var in ("VLPROBE_LXMERT_CHECKPOINT", "VLPROBE_UNITER_CHECKPOINT", "VLPROBE_DETECTOR_CHECKPOINT",
                "VLPROBE_WINOGROUND"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    line = one_error_line(CliRunner().invoke(app, ["extract", "--model", model]),
                          "3 inputs taken by default are missing (nothing was done): (1) checkpoint")
    checkpoint, detector, dataset = (line.index(f"({n}) ") for n in (1, 2, 3))
    assert checkpoint < detector < dataset
    assert line[detector:].startswith(f"(2) detector (not given: the reference detector): '{REFERENCE_DETECTOR}'")
    assert "VLPROBE_DETECTOR_CHECKPOINT=DIR" in line and "--regions FILE" in line
    assert "`probe regions extract --detector DIR --dataset winoground` makes one" in line
    assert "pass --detector DIR" not in line  # probe extract has no --detector
    assert line[dataset:].startswith("(3) dataset: facebook/winoground is not in the local hub cache")
    assert "--data-dir DIR" in line and "VLPROBE_WINOGROUND=DIR" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no caches/, no regions


def test_a_sharded_region_model_needs_a_region_file(tmp_path: Path, small_data: Path, tiny_lxmert: Path) -> None:
    with pytest.raises(InputError, match=r"^regions: a sharded extraction of lxmert needs a region file"):
        extract(ExtractConfig(model="lxmert", checkpoint=str(tiny_lxmert), data_dir=small_data,
                              out=tmp_path / "c.h5", shard="0/2", device="cpu", progress=False))


@pytest.mark.parametrize("model", sorted(OTHER_DETECTOR))
def test_a_region_model_of_another_detector_needs_a_region_file(tmp_path: Path, small_data: Path, model: str) -> None:
    # The checkpoint is not read: the missing region file is refused before the model loads.
    with pytest.raises(InputError, match=rf"^regions: {model} was trained on region features that the built-in detector"):
        extract(ExtractConfig(model=model, checkpoint=str(tmp_path / "any"), data_dir=small_data,
                              out=tmp_path / "c.h5", device="cpu", progress=False))
    assert not (tmp_path / "c.h5").exists()


def test_the_generative_references_load_offline_from_the_hub_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    """``--model llava|qwen2-vl`` without --checkpoint: the 7B hub ids t2v_metrics scores, found in the
    hub cache (here the tiny fixtures under those names, ``probe fixtures hub-cache``)."""
    from huggingface_hub import constants

    from vlprobe.fixtures.hub_cache import write_hub_cache

    hub = tmp_path / "hub"
    written = write_hub_cache(hub, ("llava", "qwen2-vl"), seed=0)
    assert set(written) == {"llava-hf/llava-1.5-7b-hf", "Qwen/Qwen2-VL-7B-Instruct"}
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub))
    for model, repo_id in (("llava", "llava-hf/llava-1.5-7b-hf"), ("qwen2-vl", "Qwen/Qwen2-VL-7B-Instruct")):
        monkeypatch.delenv(checkpoint_env(model), raising=False)
        spec, origin = default_checkpoint(model, MODELS.get(model))
        assert (spec, origin) == (repo_id, f"reference checkpoint of {model}")
        adapter = MODELS.get(model).load(spec, device="cpu")
        assert adapter.checkpoint.path == written[repo_id]
        assert adapter.checkpoint.fingerprint.startswith(f"hub:{repo_id}@")
