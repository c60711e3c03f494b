"""The HDF5 activation cache: golden schema, content against an independent CLIP, refusals."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import torch
from PIL import Image

from tests.docs_text import doc_page
from vlprobe.extract.cache.reader import ActivationCache
from vlprobe.extract.cache.schema import (
    COMPARED_FIELDS,
    ROOT_ATTRS,
    SCHEMA_VERSION,
    CacheHeader,
    CacheRecord,
    header_diff,
    root_attrs_table,
)
from vlprobe.extract.runner import ExtractConfig, extract
from vlprobe.validation import InputError

N_ITEMS, N_IMAGES = 12, 24
N_TEXTS = 141  # 24 original captions + 117 template variants of the seed-0 synthetic dataset
L_TEXT, L_IMAGE, H, D = 4, 3, 32, 16  # tiny CLIP: 3 text blocks, 2 vision blocks, width 32, proj 16

# The documented schema (cache.py's docstring), for the reference run: tiny CLIP, 12 synthetic
# items with variants, all layers, poolings cls,mean,max (+ pooled), float32, unsharded.
GOLDEN_TREE: dict[str, Any] = {
    "images": "group",
    "images/id": ("str", (N_IMAGES,)),
    "images/item": ("int32", (N_IMAGES,)),
    "images/name": ("str", (N_IMAGES,)),
    "items": "group",
    "items/id": ("str", (N_ITEMS,)),
    "items/tags": ("str", (N_ITEMS,)),
    "scores": "group",
    "scores/done": ("bool", (N_IMAGES, N_TEXTS)),
    "scores/matrix": ("float32", (N_IMAGES, N_TEXTS)),
    "streams": "group",
    "streams/image": "group",
    "streams/image/cls": ("float32", (N_IMAGES, L_IMAGE, H)),
    "streams/image/done": ("bool", (N_IMAGES,)),
    "streams/image/image": ("int32", (N_IMAGES,)),
    "streams/image/layers": ("int16", (L_IMAGE,)),
    "streams/image/max": ("float32", (N_IMAGES, L_IMAGE, H)),
    "streams/image/mean": ("float32", (N_IMAGES, L_IMAGE, H)),
    "streams/image/pooled": ("float32", (N_IMAGES, D)),
    "streams/image/text": ("int32", (N_IMAGES,)),
    "streams/text": "group",
    "streams/text/cls": ("float32", (N_TEXTS, L_TEXT, H)),
    "streams/text/done": ("bool", (N_TEXTS,)),
    "streams/text/image": ("int32", (N_TEXTS,)),
    "streams/text/layers": ("int16", (L_TEXT,)),
    "streams/text/max": ("float32", (N_TEXTS, L_TEXT, H)),
    "streams/text/mean": ("float32", (N_TEXTS, L_TEXT, H)),
    "streams/text/pooled": ("float32", (N_TEXTS, D)),
    "streams/text/text": ("int32", (N_TEXTS,)),
    "texts": "group",
    "texts/id": ("str", (N_TEXTS,)),
    "texts/item": ("int32", (N_TEXTS,)),
    "texts/parent": ("int32", (N_TEXTS,)),
    "texts/strategy": ("str", (N_TEXTS,)),
    "texts/text": ("str", (N_TEXTS,)),
}
GOLDEN_ROOT_ATTRS = {
    # the format
    "schema", "schema_version",
    # compared on resume / merge
    "model", "checkpoint_fingerprint", "dataset", "dataset_fingerprint",
    "variants_fingerprint", "pair_plan", "poolings", "dtype", "shard", "layers",
    "pair_states", "regions_fingerprint", "config_fingerprint", "tokenizer_fingerprint", "dataset_selection",
    "model_options", "image_backend", "image_orientation",
    # state
    "complete",
    # recorded only
    "checkpoint", "created", "vlprobe_version", "versions", "git_revision", "device",
    "dataset_source", "tags_fingerprint", "model_info", "batch_size", "dataset_options", "defaults", "job_ids",
}
GOLDEN_STREAM_ATTRS = {
    "modality", "layer_kinds", "cls_rule", "hidden_size", "pooled_size", "n_rows", "row_start", "row_stop",
}


def _s(x: Any) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


# -- golden schema --------------------------------------------------------------------------------


def test_golden_tree(reference_cache: Path, h5_tree: Callable[[Path], dict[str, Any]]) -> None:
    assert h5_tree(reference_cache) == GOLDEN_TREE


def test_golden_attribute_names(reference_cache: Path) -> None:
    with h5py.File(reference_cache, "r") as f:
        assert set(f.attrs) == GOLDEN_ROOT_ATTRS
        for s in ("text", "image"):
            assert set(f[f"streams/{s}"].attrs) == GOLDEN_STREAM_ATTRS
        assert set(f["scores"].attrs) == {"kind", "orientation"}
    assert set(COMPARED_FIELDS) <= GOLDEN_ROOT_ATTRS
    # the declaration is exactly what a file holds (merged_from: merged files only)
    assert {a.name for a in ROOT_ATTRS} | {"schema", "schema_version"} == GOLDEN_ROOT_ATTRS | {"merged_from"}


def test_golden_attribute_values(reference_cache: Path, tiny_clip: Path, synthetic_dir: Path) -> None:
    with h5py.File(reference_cache, "r") as f:
        a = {k: (_s(v) if isinstance(v, (bytes, str)) else v) for k, v in f.attrs.items()}
        assert (a["schema"], a["schema_version"]) == ("vlprobe-cache", SCHEMA_VERSION) == ("vlprobe-cache", 4)
        assert a["model"] == "clip"
        assert a["checkpoint"] == str(tiny_clip)
        assert a["checkpoint_fingerprint"].startswith("sha256:") and len(a["checkpoint_fingerprint"]) == 7 + 64
        assert a["dataset"] == "winoground"
        assert len(a["dataset_fingerprint"]) == 64
        assert len(a["variants_fingerprint"]) == 64
        assert a["pair_plan"] == "all"
        assert bool(a["pair_states"]) is False  # a dual encoder has no pair streams
        assert a["regions_fingerprint"] == a["config_fingerprint"] == a["tokenizer_fingerprint"] == ""
        assert (a["image_backend"], a["image_orientation"]) == ("pil", "stored")  # as the reference code
        assert json.loads(a["poolings"]) == ["cls", "mean", "max", "pooled"]
        assert a["dtype"] == "float32"
        assert a["shard"] == "0/1"
        assert json.loads(a["layers"]) == {"image": [0, 1, 2], "text": [0, 1, 2, 3]}
        assert bool(a["complete"]) is True
        assert a["device"] == "cpu"
        assert a["dataset_source"] == str(synthetic_dir.resolve())
        assert int(a["batch_size"]) == 16
        versions = json.loads(a["versions"])
        assert {"python", "vlprobe", "torch", "transformers", "h5py", "numpy"} <= set(versions)
        assert isinstance(a["git_revision"], str) and a["git_revision"]
        assert json.loads(a["model_info"])["projection_dim"] == D

        text, image = f["streams/text"].attrs, f["streams/image"].attrs
        assert (_s(text["modality"]), _s(image["modality"])) == ("text", "image")
        assert json.loads(_s(text["layer_kinds"])) == ["embed", "self", "self", "self"]
        assert json.loads(_s(image["layer_kinds"])) == ["embed", "self", "self"]
        assert (_s(text["cls_rule"]), _s(image["cls_rule"])) == ("eos", "patch0")
        assert int(text["hidden_size"]) == int(image["hidden_size"]) == H
        assert int(text["pooled_size"]) == int(image["pooled_size"]) == D
        assert (int(text["n_rows"]), int(text["row_start"]), int(text["row_stop"])) == (N_TEXTS, 0, N_TEXTS)
        assert (int(image["n_rows"]), int(image["row_start"]), int(image["row_stop"])) == (N_IMAGES, 0, N_IMAGES)
        assert list(f["streams/text/layers"][()]) == [0, 1, 2, 3]
        assert list(f["streams/image/layers"][()]) == [0, 1, 2]
        assert _s(f["scores"].attrs["kind"]) == "cosine"
        assert _s(f["scores"].attrs["orientation"]) == "image x text"


# -- content --------------------------------------------------------------------------------------


def _raw_dataset(root: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    examples = [json.loads(line) for line in (root / "examples.jsonl").read_text(encoding="utf-8").splitlines()]
    variants = [json.loads(line) for line in (root / "variants.jsonl").read_text(encoding="utf-8").splitlines()]
    return examples, variants


def _expected_texts(root: Path) -> list[tuple[str, str, int, int, str]]:
    """(id, text, item row, parent row, strategy) per text row, built from the raw files."""
    examples, variants = _raw_dataset(root)
    rows = []
    for i, ex in enumerate(examples):
        for k in (0, 1):
            rows.append((f"winoground/{ex['id']}/c{k}", ex[f"caption_{k}"], i, -1, ""))
    by_key = {(v["item"], v["caption"]): v for v in variants}
    for i, ex in enumerate(examples):
        for k in (0, 1):
            vs = by_key.get((f"winoground/{ex['id']}", k))
            for j, v in enumerate(vs["variants"] if vs else []):
                rows.append((f"winoground/{ex['id']}/c{k}/v{j}", v["text"], i, 2 * i + k, v["strategy"]))
    return rows


def test_tables_follow_the_canonical_order(reference_cache: Path, synthetic_dir: Path) -> None:
    examples, _ = _raw_dataset(synthetic_dir)
    expected = _expected_texts(synthetic_dir)
    assert len(expected) == N_TEXTS
    with ActivationCache(reference_cache) as c:
        items, images, texts = c.table("items"), c.table("images"), c.table("texts")
    assert list(items["id"]) == [f"winoground/{i}" for i in range(N_ITEMS)]
    tags0 = json.loads(items["tags"][0])
    assert tags0["tag"] == [examples[0]["tag"]] and tags0["collapsed_tag"] == [examples[0]["collapsed_tag"]]
    assert list(images["id"]) == [f"winoground/{i}/i{j}" for i in range(N_ITEMS) for j in (0, 1)]
    assert list(images["name"]) == [f"ex_{i}_img_{j}" for i in range(N_ITEMS) for j in (0, 1)]
    assert list(images["item"]) == [i for i in range(N_ITEMS) for _ in (0, 1)]
    # item i -> captions 2i, 2i+1, then every variant; parents point at originals
    assert list(texts["id"]) == [r[0] for r in expected]
    assert list(texts["text"]) == [r[1] for r in expected]
    assert list(texts["item"]) == [r[2] for r in expected]
    assert list(texts["parent"]) == [r[3] for r in expected]
    assert list(texts["strategy"]) == [r[4] for r in expected]
    parent = texts["parent"]
    assert (parent[: 2 * N_ITEMS] == -1).all()
    assert (parent[2 * N_ITEMS :] >= 0).all() and (parent[2 * N_ITEMS :] < 2 * N_ITEMS).all()
    for t in range(2 * N_ITEMS, N_TEXTS):
        assert texts["id"][t].startswith(texts["id"][parent[t]] + "/v")
        assert texts["item"][t] == texts["item"][parent[t]]


def test_stream_index_arrays_and_done(reference_cache: Path) -> None:
    with ActivationCache(reference_cache) as c:
        assert c.streams == ["image", "text"]
        np.testing.assert_array_equal(c.rows("text")["text"], np.arange(N_TEXTS))
        np.testing.assert_array_equal(c.rows("text")["image"], np.full(N_TEXTS, -1))
        np.testing.assert_array_equal(c.rows("image")["image"], np.arange(N_IMAGES))
        np.testing.assert_array_equal(c.rows("image")["text"], np.full(N_IMAGES, -1))
        for s in ("text", "image"):
            assert c.done(s).all()
            for p in ("cls", "mean", "max", "pooled"):
                assert np.isfinite(c.states(s, p)).all(), (s, p)
        matrix, done = c.scores()
        assert done.all() and np.isfinite(matrix).all()
        assert (np.abs(matrix) <= 1 + 1e-6).all()


@pytest.fixture(scope="module")
def hf_clip(tiny_clip: Path) -> tuple[Any, Any, Any]:
    from transformers import AutoImageProcessor, AutoTokenizer, CLIPModel

    model = CLIPModel.from_pretrained(tiny_clip).eval()
    return model, AutoTokenizer.from_pretrained(tiny_clip), AutoImageProcessor.from_pretrained(tiny_clip)


def _images(root: Path) -> list[Image.Image]:
    return [Image.open(root / "images" / f"ex_{i}_img_{j}.png").convert("RGB") for i in range(N_ITEMS) for j in (0, 1)]


@torch.inference_mode()
def test_scores_are_cosine_of_clip_features(
    reference_cache: Path, synthetic_dir: Path, hf_clip: tuple[Any, Any, Any]
) -> None:
    model, tokenizer, processor = hf_clip
    texts = [r[1] for r in _expected_texts(synthetic_dir)]
    tok = tokenizer(texts, padding=True, return_tensors="pt")
    txt = model.get_text_features(**tok).pooler_output.double()
    pix = processor(images=_images(synthetic_dir), return_tensors="pt")["pixel_values"]
    img = model.get_image_features(pixel_values=pix).pooler_output.double()
    expected = torch.nn.functional.normalize(img, dim=1) @ torch.nn.functional.normalize(txt, dim=1).T
    with ActivationCache(reference_cache) as c:
        matrix, _ = c.scores()
        np.testing.assert_allclose(matrix, expected.numpy(), rtol=0, atol=1e-5)
        np.testing.assert_allclose(c.states("text", "pooled"), txt.numpy(), rtol=0, atol=1e-5)
        np.testing.assert_allclose(c.states("image", "pooled"), img.numpy(), rtol=0, atol=1e-5)


@torch.inference_mode()
def test_text_cls_is_the_eos_token(reference_cache: Path, synthetic_dir: Path, hf_clip: tuple[Any, Any, Any]) -> None:
    model, tokenizer, _ = hf_clip
    texts = [r[1] for r in _expected_texts(synthetic_dir)]
    out = model.text_model(**tokenizer(texts, padding=True, return_tensors="pt"))
    with ActivationCache(reference_cache) as c:
        last = torch.from_numpy(c.states("text", "cls", layer=-1))
        assert c.layers("text")[-1] == 3
    np.testing.assert_allclose(
        model.text_model.final_layer_norm(last).numpy(), out.pooler_output.numpy(), rtol=0, atol=1e-5
    )
    # token 0 (BOS) is the same for every text under causal attention: cls must not be it
    assert not np.allclose(last[0].numpy(), last[1].numpy(), atol=1e-3)


@torch.inference_mode()
def test_text_poolings_use_valid_tokens_only(
    reference_cache: Path, synthetic_dir: Path, hf_clip: tuple[Any, Any, Any]
) -> None:
    model, tokenizer, _ = hf_clip
    texts = [r[1] for r in _expected_texts(synthetic_dir)]
    lengths = [len(tokenizer(t)["input_ids"]) for t in texts[:16]]  # the first batch of 16
    row = int(np.argmin(lengths))
    assert lengths[row] < max(lengths), "the chosen row must have been padded in its batch"
    ids = tokenizer(texts[row], return_tensors="pt")  # alone: no padding
    hidden = model.text_model(**ids, output_hidden_states=True).hidden_states
    states = np.stack([h[0].numpy() for h in hidden])  # (L, T, H)
    eos = int(np.flatnonzero(ids["input_ids"][0].numpy() == tokenizer.eos_token_id)[0])
    with ActivationCache(reference_cache) as c:
        np.testing.assert_allclose(c.states("text", "mean")[row], states.mean(axis=1), rtol=0, atol=1e-5)
        np.testing.assert_allclose(c.states("text", "max")[row], states.max(axis=1), rtol=0, atol=1e-5)
        np.testing.assert_allclose(c.states("text", "cls")[row], states[:, eos], rtol=0, atol=1e-5)


@torch.inference_mode()
def test_image_poolings(reference_cache: Path, synthetic_dir: Path, hf_clip: tuple[Any, Any, Any]) -> None:
    model, _, processor = hf_clip
    row = 5
    pix = processor(images=_images(synthetic_dir)[row : row + 1], return_tensors="pt")["pixel_values"]
    out = model.vision_model(pixel_values=pix, output_hidden_states=True)
    states = np.stack([h[0].numpy() for h in out.hidden_states])  # (3, 17, 32): class token + 16 patches
    assert states.shape == (L_IMAGE, 17, H)
    with ActivationCache(reference_cache) as c:
        np.testing.assert_allclose(c.states("image", "cls")[row], states[:, 0], rtol=0, atol=1e-5)
        np.testing.assert_allclose(c.states("image", "mean")[row], states.mean(axis=1), rtol=0, atol=1e-5)
        np.testing.assert_allclose(c.states("image", "max")[row], states.max(axis=1), rtol=0, atol=1e-5)
        expected_pooled = model.visual_projection(out.pooler_output)[0].numpy()
        np.testing.assert_allclose(c.states("image", "pooled")[row], expected_pooled, rtol=0, atol=1e-5)


# -- the reader ------------------------------------------------------------------------------------


def test_reader_api(reference_cache: Path, copy_cache: Callable[[Path, Path], Path], tmp_path: Path) -> None:
    with ActivationCache(reference_cache) as c:
        assert c.complete
        assert c.header.shard == "0/1" and c.header.poolings == ("cls", "mean", "max", "pooled")
        assert c.layers("text") == [0, 1, 2, 3]
        assert c.layer_kinds("image") == ["embed", "self", "self"]
        assert c.poolings("text") == ["cls", "mean", "max", "pooled"]
        everything = c.states("text", "mean")
        assert everything.shape == (N_TEXTS, L_TEXT, H)
        np.testing.assert_array_equal(c.states("text", "mean", layer=2), everything[:, 2])
        np.testing.assert_array_equal(c.states("text", "mean", layer=-1), everything[:, 3])
        with pytest.raises(ValueError, match="layer 7"):
            c.states("text", "mean", layer=7)
        with pytest.raises(ValueError, match="pooling 'done'"):
            c.states("text", "done")
        with pytest.raises(ValueError, match="stream 'lang'"):
            c.states("lang", "cls")
        with pytest.raises(ValueError, match="table"):
            c.table("streams")
        info = c.info()
        json.dumps(info)
        assert info["items"] == N_ITEMS and info["texts"] == N_TEXTS and info["variants"] == N_TEXTS - 2 * N_ITEMS
        assert info["streams"]["text"]["done"] == N_TEXTS
        assert info["scores"] == {"shape": [N_IMAGES, N_TEXTS], "done": N_IMAGES * N_TEXTS,
                                  "kind": "cosine", "orientation": "image x text"}

    partial = copy_cache(reference_cache, tmp_path / "partial.h5")
    with h5py.File(partial, "r+") as f:
        f["streams/text/done"][3] = False
    with ActivationCache(partial) as c, pytest.raises(ValueError, match="incomplete"):
        c.states("text", "cls")


def test_reader_refuses_other_files(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such file"):
        ActivationCache(tmp_path / "missing.h5")
    text = tmp_path / "notes.h5"
    text.write_text("not hdf5\n")
    with pytest.raises(ValueError, match="not a readable HDF5 file"):
        ActivationCache(text)
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f["x"] = np.arange(3)
    with pytest.raises(ValueError, match="not a vlprobe cache"):
        ActivationCache(other)


# -- refusing other settings ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "overrides"),
    [
        ("dtype", {"dtype": "float16"}),
        ("layers", {"layers": "0,-1"}),
        ("poolings", {"poolings": ("cls",)}),
        ("variants_fingerprint", {"variants": None}),
        ("shard", {"shard": "0/2"}),
        ("checkpoint_fingerprint", "other_clip"),
        ("dataset_fingerprint", "other_dataset"),
    ],
)
def test_resume_refuses_other_settings(
    field: str, overrides: Any, request: pytest.FixtureRequest, reference_cache: Path,
    make_config: Callable[..., ExtractConfig], copy_cache: Callable[[Path, Path], Path], tmp_path: Path,
) -> None:
    if overrides == "other_clip":
        overrides = {"checkpoint": str(request.getfixturevalue("other_clip"))}
    elif overrides == "other_dataset":
        root = request.getfixturevalue("other_dataset")
        overrides = {"data_dir": root, "variants": root / "variants.jsonl"}
    out = copy_cache(reference_cache, tmp_path / "cache.h5")
    before = out.read_bytes()
    with pytest.raises(ValueError, match=rf"other settings \({field}: file has") as err:
        extract(make_config(out, **overrides))
    assert "use another --out" in str(err.value)
    assert out.read_bytes() == before


def test_checkpoint_path_is_not_compared(
    reference_cache: Path, tiny_clip: Path, make_config: Callable[..., ExtractConfig],
    copy_cache: Callable[[Path, Path], Path], tmp_path: Path,
) -> None:
    """The same checkpoint files under another path resume (only the fingerprint counts)."""
    import shutil

    moved = shutil.copytree(tiny_clip, tmp_path / "moved-clip")
    out = copy_cache(reference_cache, tmp_path / "cache.h5")
    result = extract(make_config(out, checkpoint=str(moved)))
    assert result.rows_written == {"text": 0, "image": 0}


@pytest.mark.parametrize("kind", ["text", "empty", "hdf5"])
def test_refuses_a_foreign_file_at_out(
    kind: str, make_config: Callable[..., ExtractConfig], tmp_path: Path
) -> None:
    """Nothing that is not a vlprobe cache is opened for writing: its bytes stay as they were."""
    out = tmp_path / "precious.h5"
    if kind in ("text", "empty"):
        out.write_text("my notes, not a cache\n" if kind == "text" else "")
        match = r"not a vlprobe cache; refusing to touch it \(not an HDF5 file\)"
    else:
        with h5py.File(out, "w") as f:
            f["data"] = np.arange(10.0)
            f.attrs["owner"] = "someone else"
        match = "not a vlprobe cache"
    before = out.read_bytes()
    with pytest.raises(ValueError, match=match):
        extract(make_config(out))
    assert out.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["precious.h5"]


def test_refuses_a_file_another_process_is_writing(
    reference_cache: Path, make_config: Callable[..., ExtractConfig],
    copy_cache: Callable[[Path, Path], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """HDF5's file lock: a second writer (or a reader) is refused with a clear message."""
    import os
    import subprocess
    import sys

    monkeypatch.delenv("HDF5_USE_FILE_LOCKING", raising=False)
    out = copy_cache(reference_cache, tmp_path / "busy.h5")
    env = {k: v for k, v in os.environ.items() if k != "HDF5_USE_FILE_LOCKING"}
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, h5py; f = h5py.File(sys.argv[1], 'r+'); print('open', flush=True); sys.stdin.read()",
         str(out)],
        env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "open"
        with pytest.raises(ValueError, match="open for writing in another process"):
            extract(make_config(out))
        with pytest.raises(ValueError, match="open for writing in another process"):
            ActivationCache(out)
    finally:
        holder.communicate(input="", timeout=30)
    with ActivationCache(out) as c:  # the lock goes with the process
        assert c.complete


# -- schema versions ------------------------------------------------------------------------------

#: Header fields that version 1 files may lack (added before the version was bumped to 2).
V1_OPTIONAL = ("pair_states", "regions_fingerprint", "config_fingerprint", "tokenizer_fingerprint", "dataset_selection",
               "model_options", "image_backend", "image_orientation")
#: Header fields that version 3 files lack.
V4_FIELDS = ("image_backend", "image_orientation")


def _as_version_1(path: Path) -> Path:
    """Rewrite a cache's root attributes the way vlprobe wrote version 1 (same datasets)."""
    with h5py.File(path, "r+") as f:
        for name in ("schema", "schema_version", *V1_OPTIONAL):
            del f.attrs[name]
        f.attrs["vlprobe_schema"] = 1
    return path


def test_version_1_files_still_read(
    reference_cache: Path, copy_cache: Callable[[Path, Path], Path], tmp_path: Path,
) -> None:
    from dataclasses import replace

    old = _as_version_1(copy_cache(reference_cache, tmp_path / "v1.h5"))
    with ActivationCache(reference_cache) as new, ActivationCache(old) as c:
        assert (new.version, c.version) == (4, 1)
        # the missing fields default to what a dual encoder wrote, but for the image fields (unknown)
        assert c.header == replace(new.header, image_backend="", image_orientation="")
        assert c.record == new.record and c.complete
        np.testing.assert_array_equal(c.states("text", "mean"), new.states("text", "mean"))
        info = c.info()
        assert (info["schema_version"], info["header"]["pair_states"], info["header"]["dataset_selection"]) == (1, False, "")


def test_version_2_files_read_and_resume_without_model_options(
    cross_reference: Callable[[str], Path], cross_config: Callable[..., ExtractConfig],
    copy_cache: Callable[[Path, Path], Path], tmp_path: Path,
) -> None:
    """A region model's older file (no image fields to know) resumes and is relabelled."""
    reference = cross_reference("lxmert")
    old = copy_cache(reference, tmp_path / "v2.h5")
    with h5py.File(old, "r+") as f:  # what vlprobe wrote as version 2: no model_options, no image fields
        for name in ("model_options", *V4_FIELDS):
            del f.attrs[name]
        f.attrs["schema_version"] = 2
    with ActivationCache(old) as c, ActivationCache(reference) as ref:
        assert c.version == 2 and c.header == ref.header and c.header.model_options == ""
    assert sum(extract(cross_config("lxmert", old)).rows_written.values()) == 0
    with h5py.File(old, "r") as f:
        assert int(f.attrs["schema_version"]) == 4 and _s(f.attrs["model_options"]) == ""
        assert _s(f.attrs["image_backend"]) == _s(f.attrs["image_orientation"]) == ""
    for field, version in (("model_options", 3), ("image_backend", 4)):
        lacking = copy_cache(reference, tmp_path / f"lacking-{field}.h5")
        with h5py.File(lacking, "r+") as f:
            del f.attrs[field]
            f.attrs["schema_version"] = version
        with pytest.raises(InputError, match=f"the version {version} cache header lacks its '{field}' attribute"):
            ActivationCache(lacking)


def test_a_pixel_model_cache_of_an_older_version_is_not_resumed(
    reference_cache: Path, make_config: Callable[..., ExtractConfig],
    copy_cache: Callable[[Path, Path], Path], tmp_path: Path,
) -> None:
    """A version 3 CLIP cache does not say which image-processor backend made its image states:
    it reads, but resuming it is refused, naming the field, and the file is left as it was."""
    old = copy_cache(reference_cache, tmp_path / "v3.h5")
    with h5py.File(old, "r+") as f:
        for name in V4_FIELDS:
            del f.attrs[name]
        f.attrs["schema_version"] = 3
    with ActivationCache(old) as c:
        assert c.version == 3 and c.header.image_backend == ""
    before = old.read_bytes()
    with pytest.raises(InputError, match="other settings \\(image_backend: file has '', this run has 'pil'\\)"):
        extract(make_config(old))
    assert old.read_bytes() == before


def test_resuming_a_version_1_file_relabels_it(
    cross_reference: Callable[[str], Path], cross_config: Callable[..., ExtractConfig],
    copy_cache: Callable[[Path, Path], Path], tmp_path: Path,
) -> None:
    """The root attributes rewritten as version 1 named them, without the fields it may lack but
    ``pair_states`` and ``regions_fingerprint`` (an LXMERT file without them is not resumed: its
    pair streams and regions are unknown, as a CLIP file's image backend is)."""
    reference = cross_reference("lxmert")
    old = copy_cache(reference, tmp_path / "v1.h5")
    with h5py.File(old, "r+") as f:
        for name in ("schema", "schema_version", *(n for n in V1_OPTIONAL if n not in ("pair_states", "regions_fingerprint"))):
            del f.attrs[name]
        f.attrs["vlprobe_schema"] = 1
    result = extract(cross_config("lxmert", old))
    assert sum(result.rows_written.values()) == 0
    with h5py.File(old, "r") as f, h5py.File(reference, "r") as r:
        assert set(f.attrs) == set(r.attrs)
        assert (_s(f.attrs["schema"]), int(f.attrs["schema_version"])) == ("vlprobe-cache", 4)
    with ActivationCache(old) as c, ActivationCache(reference) as ref:
        assert c.version == 4 and c.header == ref.header


def test_newer_versions_and_incomplete_headers_are_refused(
    reference_cache: Path, make_config: Callable[..., ExtractConfig],
    copy_cache: Callable[[Path, Path], Path], tmp_path: Path,
) -> None:
    newer = copy_cache(reference_cache, tmp_path / "v5.h5")
    with h5py.File(newer, "r+") as f:
        f.attrs["schema_version"] = 5
    want = r"has schema_version 5; this vlprobe reads vlprobe-cache versions 1 to 4 .*upgrade vlprobe"
    with pytest.raises(InputError, match=want):
        ActivationCache(newer)
    before = newer.read_bytes()
    with pytest.raises(InputError, match=want):
        extract(make_config(newer))
    assert newer.read_bytes() == before
    lacking = copy_cache(reference_cache, tmp_path / "lacking.h5")
    with h5py.File(lacking, "r+") as f:
        del f.attrs["dataset_selection"]
    with pytest.raises(InputError, match="the version 4 cache header lacks its 'dataset_selection' attribute"):
        ActivationCache(lacking)
    regions = tmp_path / "regions.h5"
    with h5py.File(regions, "w") as f:
        f.attrs.update({"schema": "vlprobe-regions", "schema_version": 1})
    with pytest.raises(InputError, match=r"is not a vlprobe cache .*it is a 'vlprobe-regions' file"):
        ActivationCache(regions)


def test_docs_table_is_made_from_the_declaration() -> None:
    readme = doc_page("caches.md")
    start = readme.index("<!-- cache-root-attrs:")
    start = readme.index("\n", start) + 1
    stop = readme.index("<!-- /cache-root-attrs -->")
    assert readme[start:stop] == root_attrs_table(), "regenerate the table in docs/caches.md with root_attrs_table()"
    for a in ROOT_ATTRS:
        assert f"| `{a.name}` |" in readme


def test_header_round_trip_and_comparison_names_the_field() -> None:
    from dataclasses import replace

    h = CacheHeader(
        model="clip", checkpoint="c", checkpoint_fingerprint="sha256:x", dataset="winoground",
        dataset_fingerprint="d", variants_fingerprint="", pair_plan="all", poolings=("cls", "pooled"),
        dtype="float32", shard="0/1", layers={"text": [0, 2]}, pair_states=True,
    )
    assert CacheHeader.from_attrs(h.to_attrs()) == h
    assert json.loads(h.to_attrs()["layers"]) == {"text": [0, 2]}
    assert header_diff(h, replace(h, checkpoint="elsewhere")) is None  # not compared
    assert header_diff(h, replace(h, pair_states=False)) == "pair_states: file has True, this run has False"
    assert [a.name for a in ROOT_ATTRS if a.compared] == list(COMPARED_FIELDS)
    r = CacheRecord(batch_size=8, versions={"numpy": "2"}, merged_from=["a.h5"])
    assert CacheRecord.from_attrs(r.to_attrs()) == r and "merged_from" not in CacheRecord().to_attrs()



def test_a_disk_too_small_for_the_new_cache_is_refused_before_hdf5_writes(
    make_config: Callable[..., ExtractConfig], reference_cache: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A new cache is allocated in full when it is created, so its planned size (allocations
    counted, the rest built in memory) covers the data of the finished file; a disk with less
    room is refused before any file is made."""
    import shutil

    import vlprobe.extract.sharded_h5 as sharded_h5

    planned: list[int] = []
    real = sharded_h5.planned_bytes
    monkeypatch.setattr(sharded_h5, "planned_bytes", lambda create: planned.append(real(create)) or planned[-1])
    out = tmp_path / "c.h5"
    extract(make_config(out))
    data = _stored_bytes(out)
    assert data <= planned[0] <= out.stat().st_size

    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(sharded_h5.shutil, "disk_usage", lambda p: usage._replace(free=planned[0]))
    again = tmp_path / "d.h5"
    with pytest.raises(OSError, match="No space left") as err:
        extract(make_config(again))
    assert err.value.filename == str(again)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.h5"]


def _stored_bytes(path: Path) -> int:
    """Bytes the datasets of an HDF5 file hold on disk."""
    sizes: list[int] = []
    with h5py.File(path, "r") as f:
        f.visititems(lambda _, obj: sizes.append(obj.id.get_storage_size()) if isinstance(obj, h5py.Dataset) else None)
    return sum(sizes)
