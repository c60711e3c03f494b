"""What a model reads (vlprobe.extract.model_inputs): the input checks of `probe extract` and `probe eval`
read each model's declared ``image_input`` and ``load_options`` and name the parameter, never a flag."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from vlprobe.cli import app
from vlprobe.data.sugarcrepe import load_sugarcrepe
from vlprobe.extract.model_inputs import check_model_inputs, model_kind, require_image_files
from vlprobe.registry import MODELS
from vlprobe.validation import InputError


def _cli(args: list[str]) -> Any:
    return CliRunner().invoke(app, args)


def test_every_registered_model_declares_its_image_input() -> None:
    from vlprobe.extract.models.base import IMAGE_INPUTS

    for name in MODELS.names():
        cls = MODELS.get(name)
        assert cls.image_input in IMAGE_INPUTS, name
        kind = model_kind(cls)
        assert (kind == "text") == (cls.image_input == "none"), name


@pytest.mark.parametrize(("model", "kwargs", "needle"), [
    ("lxmert", {}, "regions: lxmert reads precomputed region features; give regions, a region file (.h5)"),
    ("lxmert", {"regions": "r.h5", "image_options": {"image_dir": "x"}},
     "image_dir: lxmert reads region features (regions), not pixels; leave image_dir unset"),
    ("uniter", {"regions": "r.h5", "image_options": {"image_root": ["x"]}}, "image_root: uniter reads region features"),
    ("clip", {"regions": "r.h5"}, "regions: clip reads pixels, not region features; leave regions unset"),
    ("caption-length", {"regions": "r.h5"}, "regions: caption-length scores captions only"),
    ("blind-lm", {"image_options": {"image_dir": "x"}}, "image_dir: blind-lm scores captions only, not pixels; leave image_dir unset"),
    ("lxmert", {"regions": "r.h5", "load_options": {"tokenizer": "t"}}, "tokenizer: lxmert does not take the load option tokenizer (it takes none)"),
    ("clip", {"load_options": {"model_config": "c.json"}}, "model_config: clip does not take the load option model_config (it takes none)"),
    ("clip", {"load_options": {"score_head": "itc"}}, "score_head: clip does not take the load option score_head (it takes none)"),
    ("blip-itm", {"load_options": {"tokenizer": "t"}},
     "tokenizer: blip-itm does not take the load option tokenizer (it takes score_head, first_token)"),
])
def test_check_model_inputs_messages(model: str, kwargs: dict[str, Any], needle: str) -> None:
    with pytest.raises(InputError) as err:
        check_model_inputs(model, MODELS.get(model), **kwargs)
    assert needle in str(err.value)


def test_check_model_inputs_passes_what_is_declared() -> None:
    got = check_model_inputs("uniter", MODELS.get("uniter"), regions="r.h5",
                             load_options={"model_config": "c.json", "tokenizer": None})
    assert got == {"model_config": "c.json"}
    assert check_model_inputs("clip", MODELS.get("clip"), image_options={"image_dir": "x", "image_root": None}) == {}
    assert check_model_inputs("blind-grammar", MODELS.get("blind-grammar"),
                              load_options={"acceptable_label": "1"}) == {"acceptable_label": "1"}


def test_require_image_files_names_the_parameters(sugarcrepe_dir: Path) -> None:
    images = load_sugarcrepe(sugarcrepe_dir, subsets="swap_obj", limit=1).images()
    with pytest.raises(InputError, match=r"^image_dir: clip reads pixels and needs images, but sugarcrepe image '.*' "
                                         r"\(.*\) has no file; give image_dir \(a folder of the images\)$"):
        require_image_files("clip", images, "sugarcrepe", ("subsets", "image_dir"))
    with pytest.raises(InputError, match=r"give image_dir \(a folder of the images\) or image_root \(SOURCE=DIR .*\)$"):
        require_image_files("clip", images)
    with pytest.raises(InputError, match=r"^data_dir: .* give a data_dir with the images$"):
        require_image_files("clip", images, "sugarcrepe", ("subsets",))


def test_cli_model_option_is_checked(tiny_clip: Path, synthetic_dir: Path, tmp_path: Path,
                                     one_error_line: Callable[..., str]) -> None:
    base = ["extract", "--model", "clip", "--checkpoint", str(tiny_clip), "--data-dir", str(synthetic_dir), "-q",
            "--out", str(tmp_path / "x.h5")]
    one_error_line(_cli([*base, "--model-option", "score_head=itc"]), "score_head: clip does not take")
    one_error_line(_cli([*base, "--model-option", "score_head"]), "model_options must look like NAME=VALUE")
    assert not (tmp_path / "x.h5").exists()
