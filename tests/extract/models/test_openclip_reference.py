"""OpenCLIP's input handling as open_clip's own code does it, and its refusals of bad configs and weights.

The expected values were measured with open_clip 4.2.0.dev0 (github mlfoundations/open_clip,
run unchanged beside vlprobe on the same files; its torchvision transforms replaced by a PIL
stand-in that follows torchvision's PIL code paths):

* ``src/open_clip/tokenizer.py``: ``SimpleTokenizer`` reads the BPE merges shipped in the package
  (``bpe_simple_vocab_16e6.txt.gz``), cleans each text with ``ftfy.fix_text``, ``html.unescape``
  twice and whitespace collapsing, lower-cases it (``clean='lower'``), and pads with id 0;
  ``HFTokenizer`` (roberta / xlm-roberta towers) cleans the same way without lower-casing
  (``clean='whitespace'``).
* ``src/open_clip/transform.py``: the evaluation transform is ``Resize``, ``CenterCrop``, then the
  conversion to RGB (``MaybeConvertMode``), ``ToTensor``, ``Normalize``.
* ``src/open_clip/factory.py``: a ``local-dir:`` folder is its ``open_clip_config.json`` and its
  weights; a CLIP text tower gets ``SimpleTokenizer`` whatever else lies in the folder, a Hugging
  Face tower the tokenizer files in the folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from vlprobe.extract.models.openclip.adapter import OpenClipAdapter
from vlprobe.extract.models.openclip.preprocess import preprocess
from vlprobe.extract.models.openclip.tokenizer import (
    BPE_FILE,
    BPE_SHA256,
    clean_text,
    clip_bpe_tokenizer,
)
from vlprobe.fixtures.openclip import write_tiny_openclip
from vlprobe.validation import InputError

# Token ids open_clip's SimpleTokenizer gives (its output up to and including <end_of_text>).
OPEN_CLIP_IDS = {
    "a dog &amp; a cat": [49406, 320, 1929, 261, 320, 2368, 49407],
    "a dog & a cat": [49406, 320, 1929, 261, 320, 2368, 49407],
    "someone\u2019s hand": [49406, 2100, 568, 2463, 49407],  # ftfy straightens the apostrophe
    "Fish &amp;amp; Chips": [49406, 2759, 261, 8855, 49407],  # unescaped twice
    "A  Dog\tand\nCAT": [49406, 320, 1929, 537, 2368, 49407],
    "<start_of_text> hi": [49406, 49406, 1883, 49407],  # open_clip's special-token spelling
}


class _Folders(dict[str, Path]):
    """Fixture folders by architecture, each written when first asked for."""

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root

    def __missing__(self, arch: str) -> Path:
        self[arch] = write_tiny_openclip(self.root / arch, 0, arch)
        return self[arch]


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return _Folders(tmp_path_factory.mktemp("openclip-ref"))


@pytest.fixture(scope="module")
def vit(folders: dict[str, Path]) -> OpenClipAdapter:
    return OpenClipAdapter.load(str(folders["vit"]), device="cpu")


def _hub_copy(folder: Path, dst: Path) -> Path:
    """``folder`` as OpenCLIP's hub repositories hold a model: the weights and open_clip_config.json only."""
    dst.mkdir(parents=True)
    for name in ("open_clip_pytorch_model.bin", "open_clip_config.json"):
        shutil.copyfile(folder / name, dst / name)
    return dst


# -- (a) the vocabulary travels with vlprobe ------------------------------------------------------


def test_the_packaged_bpe_is_the_published_file_and_builds_clips_vocabulary() -> None:
    from importlib import resources

    data = resources.files("vlprobe.extract.models.openclip").joinpath(BPE_FILE).read_bytes()
    assert hashlib.sha256(data).hexdigest() == BPE_SHA256
    tok = clip_bpe_tokenizer()
    assert len(tok) == 49408 and (tok.bos_token_id, tok.eos_token_id) == (49406, 49407)
    for text, ids in OPEN_CLIP_IDS.items():
        assert tok(clean_text(text))["input_ids"] == ids, text


def _empty_hub_cache(monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
    """An empty hub cache and the hub offline (huggingface_hub reads both at import)."""
    from huggingface_hub import constants

    root.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(root))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


def test_a_hub_folder_runs_offline_with_nothing_else(folders: dict[str, Path], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Two files, an empty hub cache, the hub offline: the adapter loads and tokenizes with the
    BPE it carries (before: it looked for openai/clip-vit-base-patch32 in the hub cache)."""
    hub = _hub_copy(folders["vit"], tmp_path / "laion" / "CLIP-ViT-tiny")
    _empty_hub_cache(monkeypatch, tmp_path / "empty-cache")
    adapter = OpenClipAdapter.load(str(hub), device="cpu")
    ids, mask = adapter.tokens(list(OPEN_CLIP_IDS))
    for i, want in enumerate(OPEN_CLIP_IDS.values()):
        assert ids[i, : int(mask[i].sum())].tolist() == want
    assert adapter.describe()["tokenizer"].startswith(f"vlprobe:{BPE_FILE}")
    assert adapter.input_fingerprints()["tokenizer"] == f"sha256:{BPE_SHA256};clean=lower"


def test_cli_extract_on_a_hub_folder_offline(folders: dict[str, Path], synthetic_dir: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """`probe extract --model openclip --checkpoint DIR` on a folder of open_clip_config.json and
    open_clip_pytorch_model.bin alone, offline, with an empty hub cache."""
    import h5py
    from typer.testing import CliRunner

    from vlprobe.cli import app

    hub = _hub_copy(folders["vit"], tmp_path / "hub-folder")
    _empty_hub_cache(monkeypatch, tmp_path / "empty-cache")
    env = {"HF_HUB_OFFLINE": "1"}
    out = tmp_path / "c.h5"
    res = CliRunner().invoke(app, ["extract", "--model", "openclip", "--checkpoint", str(hub), "--dataset", "winoground",
                                   "--data-dir", str(synthetic_dir), "--out", str(out), "--device", "cpu", "--quiet"],
                             env=env)
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in hub.iterdir()) == ["open_clip_config.json", "open_clip_pytorch_model.bin"]
    with h5py.File(out) as h5:
        assert h5.attrs["tokenizer_fingerprint"] == f"sha256:{BPE_SHA256};clean=lower"
        assert np.isfinite(h5["scores/matrix"][:]).all()


# -- (b) the text is cleaned as open_clip cleans it -----------------------------------------------


def test_text_is_cleaned_before_tokenizing(vit: OpenClipAdapter) -> None:
    """A caption with an HTML entity gets the ids and the text features of the unescaped caption,
    as in open_clip (before: other ids, a text feature off by 1.9 on OpenAI's ViT-B-32)."""
    texts = ["a dog &amp; a cat", "a dog & a cat", "A  Dog &amp; A\tCat"]
    ids, _ = vit.tokens(texts)
    assert ids[0].tolist() == ids[1].tolist() == ids[2].tolist() == OPEN_CLIP_IDS["a dog & a cat"]
    pooled = vit.encode("text", texts, [0]).pooled
    torch.testing.assert_close(pooled[0], pooled[1], rtol=0, atol=1e-6)  # the same ids: the same forward


@pytest.mark.parametrize("arch", ["roberta", "xlm-roberta"])
def test_hf_towers_are_cleaned_without_lower_casing(folders: dict[str, Path], arch: str) -> None:
    """open_clip's HFTokenizer: ftfy, HTML unescaped twice, whitespace collapsed, case kept."""
    adapter = OpenClipAdapter.load(str(folders[arch]), device="cpu")
    assert adapter.config.text.clean == "whitespace"
    ids, mask = adapter.tokens(["a  red &amp; blue\tcircle", "a red & blue circle", "A Red & Blue Circle"])
    n = [int(m.sum()) for m in mask]
    assert ids[0, : n[0]].tolist() == ids[1, : n[1]].tolist()
    assert ids[2, : n[2]].tolist() != ids[1, : n[1]].tolist()


def test_clean_modes_follow_open_clips_tokenizer() -> None:
    raw = "  Sea_waves &amp;amp; a BOAT, \u201cfast\u201d!  "
    assert clean_text(raw, "lower") == 'sea_waves & a boat, "fast"!'
    assert clean_text(raw, "whitespace") == 'Sea_waves & a BOAT, "fast"!'
    assert clean_text(raw, "canonicalize") == "sea waves a boat fast"
    assert clean_text(raw, "whitespace_underscore") == 'Sea waves & a BOAT, "fast"!'


def test_a_config_names_its_cleaning(folders: dict[str, Path], tmp_path: Path) -> None:
    folder = _hub_copy(folders["vit"], tmp_path / "m")
    cfg = json.loads((folder / "open_clip_config.json").read_text())
    cfg["model_cfg"]["text_cfg"]["tokenizer_kwargs"] = {"clean": "canonicalize"}
    (folder / "open_clip_config.json").write_text(json.dumps(cfg))
    adapter = OpenClipAdapter.load(str(folder), device="cpu")
    assert adapter.config.text.clean == "canonicalize"
    assert adapter.tokens(["a dog, a cat!"])[0].tolist() == adapter.tokens(["a dog a cat"])[0].tolist()
    cfg["model_cfg"]["text_cfg"]["tokenizer_kwargs"] = {"clean": "strip"}
    (folder / "open_clip_config.json").write_text(json.dumps(cfg))
    with pytest.raises(InputError, match=r"^checkpoint: .*tokenizer_kwargs.clean: OpenCLIP's text cleaning is one of"):
        OpenClipAdapter.load(str(folder), device="cpu")


def test_hf_tower_tokenizer_in_the_model_folder(folders: dict[str, Path], tmp_path: Path) -> None:
    """open_clip's local-dir loading reads a Hugging Face tower's tokenizer from the model folder
    itself (push_to_hf_hub.py saves it there): so does vlprobe."""
    src = folders["roberta"]
    flat = _hub_copy(src, tmp_path / "roberta-flat")
    for f in (src / "tokenizer").iterdir():
        shutil.copyfile(f, flat / f.name)
    a = OpenClipAdapter.load(str(flat), device="cpu")
    b = OpenClipAdapter.load(str(src), device="cpu")
    texts = ["a red circle", "two cats &amp; a dog"]
    # the same weights, ids and code path in one process: only where the tokenizer was read differs
    torch.testing.assert_close(a.encode("text", texts, [0]).pooled, b.encode("text", texts, [0]).pooled,
                               rtol=0, atol=0)


# -- (c) images are converted to RGB after the resize and crop -------------------------------------


def _rgba() -> Image.Image:
    rng = np.random.default_rng(7)
    arr = rng.integers(0, 256, (9, 13, 4), dtype=np.uint8)
    arr[..., 3] = np.where(rng.random((9, 13)) < 0.5, 0, 255)
    return Image.fromarray(arr, "RGBA")


def test_rgba_pixels_are_open_clips() -> None:
    """open_clip's image_transform(4) of this RGBA image: resized with its alpha (PIL premultiplies),
    cropped, then converted (values measured with open_clip; converting first is off by 0.78)."""
    from vlprobe.extract.models.openclip.archs import PreprocessConfig

    px = preprocess([_rgba()], PreprocessConfig(4))[0]
    # PIL's resampling is integer arithmetic; the tolerance covers float32 normalisation only
    assert float(px.sum()) == pytest.approx(10.134553909301758, abs=1e-5)
    np.testing.assert_allclose(px[:, 0, 0], [0.28071409463882446, -0.7465766072273254, 0.5674698352813721], atol=1e-6)
    np.testing.assert_allclose(px[:, 3, 3], [0.19312354922294617, 0.1088661327958107, 1.5202142000198364], atol=1e-6)


def test_the_adapter_reads_images_as_stored(vit: OpenClipAdapter, tmp_path: Path) -> None:
    """The run hands OpenCLIP each image in its file's mode (rgb_on_load is False), so an RGBA
    PNG's features are the ones OpenCLIP computes, not those of the image converted first."""
    from vlprobe.data.items import ImageRef
    from vlprobe.extract.scoring import ImageSource

    path = tmp_path / "a.png"
    _rgba().resize((52, 36)).save(path)
    (loaded,) = ImageSource.for_adapter(vit, [ImageRef("x/i0", "a", path)]).read(np.array([0]))
    assert loaded.mode == "RGBA" and not vit.rgb_on_load
    with Image.open(path) as im, torch.no_grad():
        want = vit.model.image_states(preprocess([im.copy()], vit.config.preprocess))[1]
        first = vit.model.image_states(preprocess([im.convert("RGB")], vit.config.preprocess))[1]
    got = vit.encode("image", [loaded], [0]).pooled
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    assert float((got - first).abs().max()) > 1e-3


def test_probe_eval_reads_images_as_stored(folders: dict[str, Path], tmp_path: Path) -> None:
    """``probe eval``'s pair scorer hands OpenCLIP the RGBA image as stored too: its score is the
    one from the features of the image as stored, not of the image converted first."""
    from vlprobe.data.items import ImageRef
    from vlprobe.extract.eval_scorer import load_scorer

    path = tmp_path / "a.png"
    _rgba().resize((52, 36)).save(path)
    scorer = load_scorer("openclip", str(folders["vit"]), device="cpu")
    impl = scorer.impl
    text = ["a red circle"]
    (got,) = scorer.score([ImageRef("x/i0", "a", path)], text)
    with Image.open(path) as im:
        stored, converted = im.copy(), im.convert("RGB")
    t = impl.encode("text", text, [0]).pooled.numpy()
    want, first = (float(type(impl).scores_from_pooled(impl.encode("image", [x], [0]).pooled.numpy(), t,
                                                        impl.describe())[0, 0]) for x in (stored, converted))
    assert got == pytest.approx(want, abs=1e-5)  # the same features; a cosine in float64 vs float32
    assert abs(got - first) > 1e-4


def test_hf_clip_family_still_converts_first(tiny_clip: Path, tmp_path: Path) -> None:
    """CLIP through transformers reads RGB, converted by PIL when the image is decoded: what the
    transformers 4.x processors of 'Why is Winoground Hard?' and VALSE did first (their
    convert_to_rgb was image.convert('RGB')). transformers 5's processor would composite an RGBA
    image onto white instead."""
    from vlprobe.data.items import ImageRef
    from vlprobe.extract.models.clip import CLIPAdapter
    from vlprobe.extract.scoring import ImageSource

    path = tmp_path / "a.png"
    _rgba().resize((52, 36)).save(path)
    clip = CLIPAdapter.load(str(tiny_clip), device="cpu")
    (loaded,) = ImageSource.for_adapter(clip, [ImageRef("x/i0", "a", path)]).read(np.array([0]))
    assert loaded.mode == "RGB" and clip.rgb_on_load
    with Image.open(path) as im:
        np.testing.assert_array_equal(np.asarray(loaded), np.asarray(im.convert("RGB")))


# -- configs the weights cannot hold, broken weights, a zero std ------------------------------------


@pytest.fixture
def alarm() -> Iterator[None]:
    """Turn a hang into a failure (the 10**9-layer config used to build modules for hours)."""
    def fail(*_: Any) -> None:
        raise TimeoutError("took longer than 60 s")

    old = signal.signal(signal.SIGALRM, fail)
    signal.alarm(60)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _edited(folder: Path, dst: Path, edit: Any) -> Path:
    out = _hub_copy(folder, dst)
    cfg = json.loads((out / "open_clip_config.json").read_text())
    edit(cfg)
    (out / "open_clip_config.json").write_text(json.dumps(cfg))
    return out


@pytest.mark.parametrize(("field", "value", "message"), [
    ("vision_cfg.layers", 10**9, "vision_cfg.layers = 1000000000, its weights hold 2"),
    ("text_cfg.layers", 10**9, "text_cfg.layers = 1000000000, its weights hold 3"),
    ("text_cfg.width", 64, "text_cfg.width = 64, its weights hold 32"),
    ("embed_dim", 8, "embed_dim = 8, its weights hold 16"),
])
def test_config_sizes_are_bounded_by_the_weights(folders: dict[str, Path], tmp_path: Path, alarm: None,
                                                 field: str, value: int, message: str) -> None:
    def edit(cfg: dict[str, Any]) -> None:
        *path, last = field.split(".")
        node = cfg["model_cfg"]
        for p in path:
            node = node[p]
        node[last] = value

    folder = _edited(folders["vit"], tmp_path / "m", edit)
    with pytest.raises(InputError) as err:
        OpenClipAdapter.load(str(folder), device="cpu")
    msg = str(err.value)
    assert msg.startswith("checkpoint: ") and message in msg and "\n" not in msg, msg


def test_a_zero_std_is_refused_in_one_line(folders: dict[str, Path], tmp_path: Path) -> None:
    folder = _edited(folders["vit"], tmp_path / "m", lambda c: c["preprocess_cfg"].update(std=[0.0, 0.26, 0.27]))
    with pytest.raises(InputError, match=r"^checkpoint: preprocess_cfg needs finite mean and non-zero finite std"):
        OpenClipAdapter.load(str(folder), device="cpu")


def test_nan_weights_are_named(folders: dict[str, Path], tmp_path: Path) -> None:
    folder = _hub_copy(folders["vit"], tmp_path / "m")
    state = torch.load(folder / "open_clip_pytorch_model.bin", weights_only=True)
    state["visual.ln_post.weight"][3] = float("nan")
    torch.save(state, folder / "open_clip_pytorch_model.bin")
    with pytest.raises(InputError, match=r"^checkpoint: .*weight visual.ln_post.weight holds NaN values \(1 of 32 not "
                                         r"finite\); the checkpoint is damaged"):
        OpenClipAdapter.load(str(folder), device="cpu")


def test_cli_refusals_are_one_line(folders: dict[str, Path], tmp_path: Path, one_error_line: Any,
                                   synthetic_dir: Path) -> None:
    from typer.testing import CliRunner

    from vlprobe.cli import app

    zero = _edited(folders["vit"], tmp_path / "zero", lambda c: c["preprocess_cfg"].update(std=0))
    huge = _edited(folders["vit"], tmp_path / "huge", lambda c: c["model_cfg"]["vision_cfg"].update(layers=10**9))
    for folder, needle in ((zero, "non-zero finite std"), (huge, "vision_cfg.layers = 1000000000")):
        res = CliRunner().invoke(app, ["extract", "--model", "openclip", "--checkpoint", str(folder), "--dataset",
                                       "winoground", "--data-dir", str(synthetic_dir), "--out",
                                       str(tmp_path / f"{folder.name}.h5"), "--device", "cpu", "--quiet"],
                                 env={"HF_HUB_OFFLINE": "1"})
        one_error_line(res, needle)
    assert not os.path.exists(tmp_path / "zero.h5")
