"""meta_skeleton: OpenCLIP, ViLBERT and UNITER models built on the meta device without
torch._dynamo, the same skeleton.

``with torch.device("meta")`` alone ran the initialisers' ``normal_`` and ``scale * randn`` through
torch's Python references, whose first call imports ``torch._dynamo`` (about a second of CPU).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from vlprobe.extract.models.meta import meta_skeleton
from vlprobe.extract.models.openclip import adapter
from vlprobe.extract.models.openclip.checkpoint import find_checkpoint, read_state_dict
from vlprobe.extract.models.openclip.model import OpenClipModel
from vlprobe.fixtures.openclip import write_tiny_openclip

ARCHS = ("vit", "resnet", "roberta")


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("openclip-meta")
    return {arch: write_tiny_openclip(root / arch, seed=0, arch=arch) for arch in ARCHS}


def _skeleton(folder: Path, shapes_only: bool) -> torch.nn.Module:
    files = find_checkpoint(str(folder))
    cfg, *_ = adapter._config(files, None, None, None)
    if cfg.text.hf:
        cfg = adapter._with_hf_text(cfg, read_state_dict(files.weights, files.spec, {}), files)
    with meta_skeleton() if shapes_only else torch.device("meta"):
        return OpenClipModel(cfg)


def _layout(model: torch.nn.Module) -> list[tuple[str, tuple[int, ...], torch.dtype, bool, str]]:
    tensors = [*model.named_parameters(), *model.named_buffers()]
    return [(n, tuple(t.shape), t.dtype, t.requires_grad, t.device.type) for n, t in tensors]


@pytest.mark.parametrize("arch", ARCHS)
def test_same_skeleton_as_plain_meta(folders: dict[str, Path], arch: str) -> None:
    assert _layout(_skeleton(folders[arch], True)) == _layout(_skeleton(folders[arch], False))


def test_scalar_arithmetic_keeps_dtype_and_other_ops_run() -> None:
    with meta_skeleton():
        x = torch.randn(3, 4)
        assert (2.5 * x).shape == (3, 4) and (x / 4).dtype == torch.float32
        assert (torch.arange(5) * 0.5).dtype == torch.float32  # int tensor times a float: float
        assert (x @ torch.empty(4, 2)).shape == (3, 2) and x.is_meta


_LOAD = """
import sys
from vlprobe.extract.models.openclip.adapter import OpenClipAdapter
for folder in sys.argv[1:]:
    OpenClipAdapter.load(folder, device="cpu")
print("torch._dynamo" in sys.modules)
"""


def test_loading_imports_no_dynamo(folders: dict[str, Path]) -> None:
    folders_ = [str(folders["vit"]), str(folders["resnet"])]  # (a Hugging Face text tower: transformers' own imports)
    done = subprocess.run([sys.executable, "-c", _LOAD, *folders_], capture_output=True, text=True, check=True)
    assert done.stdout.strip().splitlines()[-1] == "False", done.stderr


def _vilbert(shapes_only: bool) -> torch.nn.Module:
    """ViLBERT's model at its fixture's sizes, both heads."""
    from vlprobe.extract.models.vilbert.model import ViLBertConfig, ViLBertModel
    from vlprobe.fixtures.vilbert import tiny_vilbert_config

    with meta_skeleton() if shapes_only else torch.device("meta"):
        return ViLBertModel(ViLBertConfig.from_dict(tiny_vilbert_config(100)), itm_head=True, vil_logit=True)


def test_vilbert_same_skeleton_as_plain_meta() -> None:
    assert _layout(_vilbert(True)) == _layout(_vilbert(False))


_LOAD_NATIVE = """
import sys
from vlprobe.extract.models.uniter.adapter import UniterAdapter
from vlprobe.extract.models.vilbert.adapter import ViLBertAdapter
ViLBertAdapter.load(sys.argv[1], device="cpu")
UniterAdapter.load(sys.argv[2], device="cpu")
print("torch._dynamo" in sys.modules)
"""


def test_vilbert_and_uniter_loading_imports_no_dynamo(tmp_path: Path) -> None:
    from vlprobe.fixtures.uniter import write_tiny_uniter
    from vlprobe.fixtures.vilbert import VILBERT_WEIGHTS, write_tiny_vilbert

    vilbert = write_tiny_vilbert(tmp_path / "vilbert", seed=0) / VILBERT_WEIGHTS["pretrained"]
    uniter = write_tiny_uniter(tmp_path / "uniter", seed=0) / "uniter-base.pt"
    done = subprocess.run([sys.executable, "-c", _LOAD_NATIVE, str(vilbert), str(uniter)], capture_output=True,
                          text=True, check=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.stdout.strip().splitlines()[-1] == "False", done.stderr
