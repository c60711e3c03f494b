"""patch and erasure load a model as `probe extract` does: --model-config, --tokenizer and
--model-option, with the same names and checks (through the command line)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vlprobe.cli import app


@pytest.fixture(scope="module")
def lone_uniter(tiny_uniter: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny UNITER's checkpoint alone in a folder: its config and tokenizer lie elsewhere."""
    out = tmp_path_factory.mktemp("lone-uniter") / "weights.pt"
    shutil.copyfile(tiny_uniter / "uniter-base.pt", out)
    return out


def _run(*args: str) -> object:
    return CliRunner().invoke(app, ["run", *args, "--quiet"])


@pytest.mark.parametrize("experiment", ["patch", "erasure"])
def test_uniter_config_and_tokenizer_from_elsewhere(experiment: str, lone_uniter: Path, tiny_uniter: Path,
                                                   synthetic_dir: Path, synthetic_regions: Path, tmp_path: Path,
                                                   one_error_line: Callable[..., str]) -> None:
    common = ["--model", "uniter", "--checkpoint", str(lone_uniter), "--data-dir", str(synthetic_dir),
              "--regions", str(synthetic_regions), "--limit", "2", "--layers", "0", "--bootstrap", "20",
              "--out", str(tmp_path)]
    res = _run(experiment, *common)
    assert res.exit_code == 2  # nothing beside the checkpoint
    one_error_line(res, "model_config: UNITER needs its config JSON", "--model-config")
    res = _run(experiment, *common, "--model-config", str(tiny_uniter / "uniter-base.json"),
               "--tokenizer", str(tiny_uniter / "tokenizer"))
    assert res.exit_code == 0, res.output
    (run,) = json.loads((tmp_path / experiment / "manifest.json").read_text())["runs"].values()
    assert run["inputs"]["model_config"]["spec"] == str(tiny_uniter / "uniter-base.json")
    assert run["inputs"]["model_config"]["fingerprint"].startswith("sha256:")
    assert run["inputs"]["model_tokenizer"]["spec"] == str(tiny_uniter / "tokenizer")


@pytest.mark.parametrize("experiment", ["patch", "erasure"])
def test_model_options_are_checked_as_extract_checks_them(experiment: str, tiny_clip: Path, tiny_blip_itm: Path,
                                                          synthetic_dir: Path, tmp_path: Path,
                                                          one_error_line: Callable[..., str]) -> None:
    common = ["--data-dir", str(synthetic_dir), "--limit", "2", "--out", str(tmp_path)]
    res = _run(experiment, "--model", "clip", "--checkpoint", str(tiny_clip), "--model-option", "score_head=itc",
               *common)
    assert res.exit_code == 2
    one_error_line(res, "score_head: clip does not take the load option score_head (it takes none)")
    res = _run(experiment, "--model", "blip-itm", "--checkpoint", str(tiny_blip_itm), "--model-option",
               "score_head=bogus", *common)
    assert res.exit_code == 2
    one_error_line(res, "score_head", "bogus")
    res = _run(experiment, "--model", "clip", "--checkpoint", str(tiny_clip), "--model-option", "score_head",
               *common)
    assert res.exit_code == 2
    one_error_line(res, "model_options must look like NAME=VALUE")
    res = _run(experiment, "--model", "clip", "--checkpoint", str(tiny_clip), "--model-config", "x.json", *common)
    assert res.exit_code == 2
    one_error_line(res, "model_config: clip does not take the load option model_config")


def test_blip_first_token_option_reaches_the_model(tiny_blip_itm: Path, synthetic_dir: Path, tmp_path: Path) -> None:
    res = _run("patch", "--model", "blip-itm", "--checkpoint", str(tiny_blip_itm), "--model-option", "first_token=cls",
               "--data-dir", str(synthetic_dir), "--limit", "2", "--layers", "0", "--bootstrap", "20",
               "--out", str(tmp_path))
    assert res.exit_code == 0, res.output
    (run,) = json.loads((tmp_path / "patch" / "manifest.json").read_text())["runs"].values()
    assert run["inputs"]["model_options"] == {"score_head": "itm", "first_token": "cls"}
