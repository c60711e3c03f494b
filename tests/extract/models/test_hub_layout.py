"""The pixel dual encoders and BLIP from their fixtures laid out exactly as the hub lays the real
repositories out: a hub-cache folder ``models--ORG--NAME`` with ``blobs/``,
``refs/main`` and a snapshot of links, loaded by the real repository id with the hub offline.

Each fixture holds only files the real repository holds, in the real files' form, its sizes
shrunk:

* ``openai/clip-vit-base-patch32``: config.json as the hub holds it (transformers 4.16: legacy
  ``eos_token_id`` 2, ``text_config_dict`` null), tokenizer_config.json and
  special_tokens_map.json with AddedToken dicts, preprocessor_config.json as a
  ``CLIPFeatureExtractor`` with plain-int sizes;
* ``google/siglip-base-patch16-224`` and ``Salesforce/blip-itm-base-coco``: the preprocessor
  configs as transformers' conversion scripts saved them through their processors;
* ``laion/CLIP-ViT-B-32-laion2B-s34B-b79K``: open_clip_config.json (``model_cfg`` and
  ``preprocess_cfg``) and open_clip_pytorch_model.bin, as open_clip's ``push_to_hf_hub.py``
  writes them.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from vlprobe.fixtures.hub_cache import lay_out_repo, repo_folder, write_hub_cache

# File names in the real repositories (besides .gitattributes and README.md).
REAL_FILES = {
    "openai/clip-vit-base-patch32": {"config.json", "flax_model.msgpack", "merges.txt", "model.safetensors",
                                     "preprocessor_config.json", "pytorch_model.bin", "special_tokens_map.json",
                                     "tf_model.h5", "tokenizer.json", "tokenizer_config.json", "vocab.json"},
    "google/siglip-base-patch16-224": {"config.json", "model.safetensors", "preprocessor_config.json",
                                       "special_tokens_map.json", "spiece.model", "tokenizer_config.json"},
    "Salesforce/blip-itm-base-coco": {"config.json", "model.safetensors", "preprocessor_config.json",
                                      "pytorch_model.bin", "special_tokens_map.json", "tokenizer.json",
                                      "tokenizer_config.json", "vocab.txt"},
    "laion/CLIP-ViT-B-32-laion2B-s34B-b79K": {"open_clip_config.json", "open_clip_model.safetensors",
                                              "open_clip_pytorch_model.bin", "config.json", "model.safetensors",
                                              "pytorch_model.bin", "merges.txt", "preprocessor_config.json",
                                              "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json",
                                              "vocab.json"},
}
MARKER = "VLPROBE_FIXTURE.json"
TEXTS = ["a red circle left of a blue square", "two cats &amp; a dog"]


def _images() -> list[Image.Image]:
    return [Image.fromarray(np.random.default_rng(i).integers(0, 256, (40 + 7 * i, 52, 3), dtype=np.uint8))
            for i in range(2)]


def _snapshot_files(snapshot: Path) -> set[str]:
    return {p.name for p in snapshot.iterdir()} - {MARKER}


def _hub(monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
    """The hub cache at ``root``, the hub offline (huggingface_hub reads both at import)."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(root))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


@pytest.mark.parametrize("name", ["clip", "siglip", "blip-itm"])
def test_reference_repository_loads_by_its_hub_id(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from vlprobe.registry import MODELS

    cls: Any = MODELS.get(name)
    repo = cls.reference_checkpoint.name
    (snapshot,) = write_hub_cache(tmp_path / "hub", (name,), seed=0).values()
    assert (tmp_path / "hub" / repo_folder(repo) / "refs" / "main").is_file()
    assert _snapshot_files(snapshot) <= REAL_FILES[repo], _snapshot_files(snapshot) - REAL_FILES[repo]
    _hub(monkeypatch, tmp_path / "hub")
    by_id = cls.load(repo, device="cpu")
    by_folder = cls.load(str(snapshot), device="cpu")
    assert by_id.checkpoint.fingerprint.startswith(f"hub:{repo}@")
    if name == "blip-itm":
        texts, images = by_id.prepare_texts(TEXTS), by_id.prepare_images(_images())
        idx = np.array([0, 1, 0, 1]), np.array([0, 0, 1, 1])
        a = by_id.encode_pairs(texts, images, *idx, None, []).scores
        b = by_folder.encode_pairs(by_folder.prepare_texts(TEXTS), by_folder.prepare_images(_images()), *idx, None, []).scores
    else:
        a = torch.cat([by_id.encode("text", TEXTS, [0]).pooled, by_id.encode("image", _images(), [0]).pooled])
        b = torch.cat([by_folder.encode("text", TEXTS, [0]).pooled, by_folder.encode("image", _images(), [0]).pooled])
    torch.testing.assert_close(a, b, rtol=0, atol=0)  # the same files, the same code path


def test_clip_files_are_the_hub_files_form(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """openai/clip-vit-base-patch32's own file forms load, and the native tokenizer library's
    complaint about their AddedToken "__type" keys does not reach stdout."""
    from vlprobe.extract.models.clip import CLIPAdapter
    from vlprobe.fixtures.clip import write_tiny_clip

    folder = write_tiny_clip(tmp_path / "clip", 0)
    cfg = json.loads((folder / "config.json").read_text())
    assert (cfg["text_config"]["bos_token_id"], cfg["text_config"]["eos_token_id"], cfg["text_config"]["pad_token_id"]) == (0, 2, 1)
    assert cfg["text_config_dict"] is None and cfg["transformers_version"] is None
    pre = json.loads((folder / "preprocessor_config.json").read_text())
    assert pre["feature_extractor_type"] == "CLIPFeatureExtractor" and pre["size"] == pre["crop_size"] == 32
    assert json.loads((folder / "tokenizer_config.json").read_text())["bos_token"]["__type"] == "AddedToken"
    capfd.readouterr()
    adapter = CLIPAdapter.load(str(folder), device="cpu")
    assert "__type" not in capfd.readouterr().out
    # legacy eos_token_id 2: transformers pools at the highest id, which is the tokenizer's EOS
    assert adapter.eos_token_id == 2
    ids = adapter.tokens(TEXTS)[0]
    batch = adapter.encode("text", TEXTS, [0])
    assert batch.cls_index is not None
    assert (ids[torch.arange(len(TEXTS)), batch.cls_index] == adapter.tokenizer.eos_token_id).all()


def test_openclip_laion_repository_loads_by_its_hub_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An OpenCLIP hub repository (open_clip_config.json and open_clip_pytorch_model.bin only) by
    its id, offline, through `hf-hub:` as open_clip names it and without."""
    from vlprobe.extract.models.openclip.adapter import OpenClipAdapter
    from vlprobe.fixtures.openclip import write_tiny_openclip

    repo = "laion/CLIP-ViT-B-32-laion2B-s34B-b79K"
    with tempfile.TemporaryDirectory(dir=tmp_path) as tmp:
        files = write_tiny_openclip(Path(tmp) / "f", 0, "vit")
        (files / MARKER).unlink()
        revision = lay_out_repo(files, tmp_path / "hub" / repo_folder(repo))
    snapshot = tmp_path / "hub" / repo_folder(repo) / "snapshots" / revision
    assert _snapshot_files(snapshot) == {"open_clip_config.json", "open_clip_pytorch_model.bin"}
    assert _snapshot_files(snapshot) <= REAL_FILES[repo]
    _hub(monkeypatch, tmp_path / "hub")
    for spec in (repo, f"hf-hub:{repo}"):
        adapter = OpenClipAdapter.load(spec, device="cpu")
        assert adapter.checkpoint.fingerprint == f"hub:{repo}@{revision}"
        assert adapter.encode("text", TEXTS, [0]).pooled.shape == (2, 16)
