"""OpenClipAdapter against independent forwards of the same weights, its checkpoint formats,
built-in architectures, preprocessing and bad inputs.

Oracles (``open_clip`` itself imports torchvision, which does not import beside the CPU torch of
our test machines, so it is not one of them):

* vision transformer + CLIP text tower: the weights converted to ``transformers.CLIPModel``
  (q/k/v split of ``in_proj``, ``c_fc``/``c_proj`` -> ``fc1``/``fc2``, transposed projections),
  whose ``hidden_act`` is set to the same activation;
* ModifiedResNet: a functional forward written here from OpenCLIP's documented architecture
  (``F.conv2d``, ``F.batch_norm``, ``F.avg_pool2d`` and torch's ``F.multi_head_attention_forward``
  for the attention pool) reading the raw state dict;
* roberta text tower: ``transformers.RobertaModel`` with the ``text.transformer.*`` weights, then
  the masked mean and the MLP projection computed here.

Tolerance: two float32 implementations of the same network sum in other orders (SDPA vs eager
attention, MHA's fused projections): 1e-5 absolute / 1e-4 relative on states of magnitude ~1.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from tests.extract.models.contract import Case, kinds
from vlprobe.extract.models.openclip.adapter import OpenClipAdapter
from vlprobe.extract.models.openclip.archs import ARCHS, OpenClipConfig, arch_config, arch_names
from vlprobe.extract.models.openclip.preprocess import center_crop, preprocess, resize_shorter_side
from vlprobe.fixtures.openclip import write_tiny_openclip
from vlprobe.validation import InputError

# The adapter contract (tests/extract/models/test_adapter_contract.py) checks each checkpoint family.
_WEIGHTS = ("open_clip_pytorch_model.bin",)
CONTRACTS = [
    Case(
        "openclip", "dual", "pixels",
        {"text": ("text", kinds("embed", ("self", 3)), "eos"), "image": ("image", kinds("embed", ("self", 2)), "patch0")},
        {"text": ("embed_out", "text"), "image": ("visual.ln_pre", "image")},
        weights=_WEIGHTS,
    ),
    Case(
        "openclip-resnet", "dual", "pixels",
        {"text": ("text", kinds("embed", ("self", 3)), "eos"),
         "image": ("image", kinds("embed", ("stage", 4), ("attnpool", 1)), "token0")},
        {"text": ("embed_out", "text"), "image": ("visual.token_views.0", "image")},
        weights=_WEIGHTS, model="openclip", fixture_options={"arch": "resnet"},
    ),
    Case(
        "openclip-roberta", "dual", "pixels",
        {"text": ("text", kinds("embed", ("self", 2)), "token0"), "image": ("image", kinds("embed", ("self", 2)), "patch0")},
        {"text": ("text.transformer.embeddings", "text"), "image": ("visual.ln_pre", "image")},
        weights=_WEIGHTS, model="openclip", fixture_options={"arch": "roberta"},
    ),
]

TEXTS = ["a red circle left of a blue square", "a cat", "two green triangles above a small yellow star on grass"]
ATOL, RTOL = 1e-5, 1e-4


def _close(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    torch.testing.assert_close(a.float(), b.float(), atol=ATOL, rtol=RTOL, msg=lambda m: f"{what}: {m}")


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("openclip")
    return {arch: write_tiny_openclip(root / arch, 0, arch) for arch in ("vit", "resnet", "roberta")}


@pytest.fixture(scope="module")
def images() -> list[Image.Image]:
    sizes = [(40, 48), (32, 32), (71, 36)]
    return [Image.fromarray(np.random.default_rng(i).integers(0, 256, (h, w, 3), dtype=np.uint8))
            for i, (w, h) in enumerate(sizes)]


def _state(folder: Path) -> dict[str, torch.Tensor]:
    return torch.load(folder / "open_clip_pytorch_model.bin", weights_only=True)


# -- vision transformer and CLIP text tower: transformers' CLIPModel as the oracle ----------------


def _to_hf_clip(state: dict[str, torch.Tensor], cfg: OpenClipConfig) -> Any:
    """``transformers.CLIPModel`` holding OpenCLIP ViT weights (transformers' conversion mapping)."""
    from transformers import CLIPConfig, CLIPModel

    t, v = cfg.text, cfg.vision
    assert isinstance(v.layers, int) and v.patch_size is not None
    act = "quick_gelu" if cfg.act == "quick_gelu" else "gelu"
    config = CLIPConfig(
        text_config=dict(vocab_size=t.vocab_size, hidden_size=t.width, intermediate_size=t.mlp_width,
                         num_hidden_layers=t.layers, num_attention_heads=t.heads, max_position_embeddings=t.context_length,
                         hidden_act=act, bos_token_id=t.vocab_size - 2, eos_token_id=t.vocab_size - 1,
                         pad_token_id=t.vocab_size - 1, layer_norm_eps=1e-5),
        vision_config=dict(hidden_size=v.width, intermediate_size=v.mlp_width, num_hidden_layers=v.layers,
                           num_attention_heads=v.heads, image_size=v.image_size, patch_size=v.patch_size,
                           hidden_act=act, layer_norm_eps=1e-5),
        projection_dim=cfg.embed_dim,
    )
    new: dict[str, torch.Tensor] = {}

    def blocks(src: str, dst: str, n: int) -> None:
        for i in range(n):
            s, d = f"{src}.{i}", f"{dst}.{i}"
            for name, part in zip(("q", "k", "v"), state[f"{s}.attn.in_proj_weight"].chunk(3), strict=True):
                new[f"{d}.self_attn.{name}_proj.weight"] = part
            for name, part in zip(("q", "k", "v"), state[f"{s}.attn.in_proj_bias"].chunk(3), strict=True):
                new[f"{d}.self_attn.{name}_proj.bias"] = part
            for a, b in (("attn.out_proj", "self_attn.out_proj"), ("ln_1", "layer_norm1"), ("ln_2", "layer_norm2"),
                         ("mlp.c_fc", "mlp.fc1"), ("mlp.c_proj", "mlp.fc2")):
                for p in ("weight", "bias"):
                    new[f"{d}.{b}.{p}"] = state[f"{s}.{a}.{p}"]

    blocks("transformer.resblocks", "text_model.encoder.layers", t.layers)
    blocks("visual.transformer.resblocks", "vision_model.encoder.layers", v.layers)
    new["text_model.embeddings.token_embedding.weight"] = state["token_embedding.weight"]
    new["text_model.embeddings.position_embedding.weight"] = state["positional_embedding"]
    for a, b in (("ln_final", "text_model.final_layer_norm"), ("visual.ln_pre", "vision_model.pre_layrnorm"),
                 ("visual.ln_post", "vision_model.post_layernorm")):
        for p in ("weight", "bias"):
            new[f"{b}.{p}"] = state[f"{a}.{p}"]
    new["text_projection.weight"] = state["text_projection"].T
    new["visual_projection.weight"] = state["visual.proj"].T
    new["vision_model.embeddings.patch_embedding.weight"] = state["visual.conv1.weight"]
    new["vision_model.embeddings.class_embedding"] = state["visual.class_embedding"]
    new["vision_model.embeddings.position_embedding.weight"] = state["visual.positional_embedding"]
    new["logit_scale"] = state["logit_scale"]
    model = CLIPModel(config).eval()
    missing, unexpected = model.load_state_dict(new, strict=False)
    assert not unexpected and all("position_ids" in k for k in missing), (missing, unexpected)
    return model


@pytest.mark.parametrize("act", ["gelu", "quick_gelu"])
def test_vit_matches_transformers_clip(folders: dict[str, Path], images: list[Image.Image], act: str) -> None:
    adapter = OpenClipAdapter.load(str(folders["vit"]), device="cpu", act=act)
    hf = _to_hf_clip(_state(folders["vit"]), adapter.config)
    n_text = adapter.streams["text"].n_layers
    ours = adapter.encode("text", TEXTS, list(range(n_text)))
    ids, mask = adapter.tokens(TEXTS)
    with torch.no_grad():
        out = hf.text_model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        want_pooled = hf.text_projection(out.pooler_output)
    valid = mask.bool()
    for layer in range(n_text):  # positions up to EOS (padding after it is masked in HF, causal in OpenCLIP)
        _close(ours.hidden[:, layer][valid], out.hidden_states[layer][valid], f"text layer {layer}")
    _close(ours.pooled, want_pooled, "text embedding")
    assert torch.equal(ours.cls_index, mask.sum(1) - 1)  # EOS = the last real token

    n_image = adapter.streams["image"].n_layers
    got = adapter.encode("image", images, list(range(n_image)))
    pixels = preprocess(images, adapter.config.preprocess)
    with torch.no_grad():
        vout = hf.vision_model(pixel_values=pixels, output_hidden_states=True)
        want_image = hf.visual_projection(vout.pooler_output)
    for layer in range(n_image):
        _close(got.hidden[:, layer], vout.hidden_states[layer], f"image layer {layer}")
    _close(got.pooled, want_image, "image embedding")
    scores = adapter.scores_from_pooled(got.pooled.numpy(), ours.pooled.numpy())
    want = F.normalize(want_image, dim=-1) @ F.normalize(want_pooled, dim=-1).T
    np.testing.assert_allclose(scores, want.numpy(), atol=1e-5)


def test_quick_gelu_and_gelu_give_different_scores(folders: dict[str, Path], images: list[Image.Image]) -> None:
    """The NegCLIP trap: the same weights under GELU and QuickGELU give other scores; the config's
    activation is the default and ``act`` overrides it (recorded in model_options)."""
    default = OpenClipAdapter.load(str(folders["vit"]), device="cpu")
    quick = OpenClipAdapter.load(str(folders["vit"]), device="cpu", act="quick_gelu")
    assert default.model_options() == {"arch": "vit", "act": "gelu"}  # the folder's config has no quick_gelu
    assert quick.model_options() == {"arch": "vit", "act": "quick_gelu"}

    def scores(a: OpenClipAdapter) -> np.ndarray:
        return a.scores_from_pooled(a.encode("image", images, [0]).pooled.numpy(), a.encode("text", TEXTS, [0]).pooled.numpy())

    diff = np.abs(scores(default) - scores(quick)).max()
    # Equal runs agree to ~1e-7; the activations move these tiny random models' cosines by ~6e-4
    # (real models: several points of SugarCrepe accuracy, sugar-crepe issue #7).
    assert diff > 1e-4, diff


# -- ModifiedResNet: a functional forward as the oracle --------------------------------------------


def _bn(x: torch.Tensor, s: dict[str, torch.Tensor], p: str) -> torch.Tensor:
    return F.batch_norm(x, s[f"{p}.running_mean"], s[f"{p}.running_var"], s[f"{p}.weight"], s[f"{p}.bias"],
                        training=False, eps=1e-5)


def _resnet_forward(s: dict[str, torch.Tensor], x: torch.Tensor, heads: int) -> tuple[list[torch.Tensor], torch.Tensor]:
    """OpenAI's ModifiedResNet from its description: returns the stem and stage maps, and the
    attention-pool output at the mean token."""
    v = "visual"
    x = F.relu(_bn(F.conv2d(x, s[f"{v}.conv1.weight"], stride=2, padding=1), s, f"{v}.bn1"))
    x = F.relu(_bn(F.conv2d(x, s[f"{v}.conv2.weight"], padding=1), s, f"{v}.bn2"))
    x = F.relu(_bn(F.conv2d(x, s[f"{v}.conv3.weight"], padding=1), s, f"{v}.bn3"))
    x = F.avg_pool2d(x, 2)
    maps = [x]
    for stage in range(1, 5):
        block = 0
        while f"{v}.layer{stage}.{block}.conv1.weight" in s:
            p = f"{v}.layer{stage}.{block}"
            stride = 2 if stage > 1 and block == 0 else 1
            y = F.relu(_bn(F.conv2d(x, s[f"{p}.conv1.weight"]), s, f"{p}.bn1"))
            y = F.relu(_bn(F.conv2d(y, s[f"{p}.conv2.weight"], padding=1), s, f"{p}.bn2"))
            if stride > 1:
                y = F.avg_pool2d(y, stride)
            y = _bn(F.conv2d(y, s[f"{p}.conv3.weight"]), s, f"{p}.bn3")
            short = x
            if f"{p}.downsample.0.weight" in s:
                short = F.avg_pool2d(x, stride) if stride > 1 else x
                short = _bn(F.conv2d(short, s[f"{p}.downsample.0.weight"]), s, f"{p}.downsample.1")
            x = F.relu(y + short)
            block += 1
        maps.append(x)
    a = f"{v}.attnpool"
    seq = x.flatten(2).permute(2, 0, 1)  # (HW, B, C)
    seq = torch.cat([seq.mean(dim=0, keepdim=True), seq], dim=0) + s[f"{a}.positional_embedding"][:, None]
    out, _ = F.multi_head_attention_forward(
        seq, seq, seq, seq.shape[-1], heads, in_proj_weight=None,
        in_proj_bias=torch.cat([s[f"{a}.q_proj.bias"], s[f"{a}.k_proj.bias"], s[f"{a}.v_proj.bias"]]),
        bias_k=None, bias_v=None, add_zero_attn=False, dropout_p=0.0,
        out_proj_weight=s[f"{a}.c_proj.weight"], out_proj_bias=s[f"{a}.c_proj.bias"], training=False,
        need_weights=False, use_separate_proj_weight=True, q_proj_weight=s[f"{a}.q_proj.weight"],
        k_proj_weight=s[f"{a}.k_proj.weight"], v_proj_weight=s[f"{a}.v_proj.weight"],
    )
    return maps, out[0]


def test_resnet_matches_functional_forward(folders: dict[str, Path], images: list[Image.Image]) -> None:
    adapter = OpenClipAdapter.load(str(folders["resnet"]), device="cpu")
    cfg = adapter.config
    got = adapter.encode("image", images, list(range(6)))
    with torch.no_grad():
        maps, pooled = _resnet_forward(_state(folders["resnet"]), preprocess(images, cfg.preprocess), cfg.vision.heads)
    _close(got.pooled, pooled, "attention-pool embedding")
    _close(got.hidden[:, 5, 0, : cfg.embed_dim], pooled, "layer 5 token 0 = the embedding")
    grid = cfg.vision.image_size // 32
    for layer, m in enumerate(maps):
        c = m.shape[1]
        _close(got.hidden[:, layer, 0, :c], m.mean(dim=(2, 3)), f"layer {layer} token 0 (spatial mean)")
        cells = F.adaptive_avg_pool2d(m, grid).flatten(2).transpose(1, 2)
        _close(got.hidden[:, layer, 1:, :c], cells, f"layer {layer} grid cells")
        assert not got.hidden[:, layer, :, c:].any(), "channels beyond the stage's width are zero"
        # the mean over the tokens is the map's mean (block means of equal blocks)
        _close(got.hidden[:, layer, :, :c].mean(dim=1), m.mean(dim=(2, 3)), f"layer {layer} mean pooling")


def test_resnet_text_tower_is_clips(folders: dict[str, Path]) -> None:
    """The ResNet checkpoints carry the same CLIP text tower: its states match transformers'."""
    adapter = OpenClipAdapter.load(str(folders["resnet"]), device="cpu")
    state = _state(folders["resnet"])
    text_only = {k: v for k, v in state.items() if not k.startswith("visual.")}
    vit_state = _state(folders["vit"])
    hf = _to_hf_clip({**{k: v for k, v in vit_state.items() if k.startswith("visual.")}, **text_only},
                     OpenClipAdapter.load(str(folders["vit"]), device="cpu").config)
    ids, mask = adapter.tokens(TEXTS)
    with torch.no_grad():
        want = hf.text_projection(hf.text_model(input_ids=ids, attention_mask=mask).pooler_output)
    _close(adapter.encode("text", TEXTS, [0]).pooled, want, "ResNet model's text embedding")


# -- roberta text tower: transformers' RobertaModel as the oracle ------------------------------------


def test_roberta_tower_matches_transformers(folders: dict[str, Path]) -> None:
    from transformers import RobertaConfig, RobertaModel

    adapter = OpenClipAdapter.load(str(folders["roberta"]), device="cpu")
    state = _state(folders["roberta"])
    cfg = json.loads((folders["roberta"] / "tokenizer" / "config.json").read_text())
    cfg.pop("model_type")
    hf = RobertaModel(RobertaConfig(**cfg), add_pooling_layer=False).eval()
    hf.load_state_dict({k[len("text.transformer."):]: v for k, v in state.items() if k.startswith("text.transformer.")})
    tok = adapter.tokenizer(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        out = hf(**tok, output_hidden_states=True)
    m = tok["attention_mask"].float()[..., None]
    mean = (out.last_hidden_state * m).sum(1) / m.sum(1)
    want = F.linear(F.gelu(F.linear(mean, state["text.proj.0.weight"])), state["text.proj.2.weight"])
    n = adapter.streams["text"].n_layers
    got = adapter.encode("text", TEXTS, list(range(n)))
    valid = tok["attention_mask"].bool()
    for layer in range(n):
        _close(got.hidden[:, layer][valid], out.hidden_states[layer][valid], f"roberta layer {layer}")
    _close(got.pooled, want, "roberta text embedding (mean pooler + MLP)")
    assert adapter.describe()["text"]["pooler"] == "mean_pooler"


# -- checkpoint formats ---------------------------------------------------------------------------------


def _model_config_file(folder: Path, tmp: Path) -> Path:
    path = tmp / "tiny.json"
    path.write_text(json.dumps(json.loads((folder / "open_clip_config.json").read_text())["model_cfg"]))
    return path


def _same(a: OpenClipAdapter, b: OpenClipAdapter) -> None:
    for key, value in a.model.state_dict().items():
        assert torch.equal(value, b.model.state_dict()[key]), key


def test_training_checkpoint_with_module_prefix_and_model_config(folders: dict[str, Path], tmp_path: Path) -> None:
    """NegCLIP's format: {"epoch", "name", "state_dict": {"module.<key>": ...}, "optimizer"} as a .pt."""
    folder = folders["vit"]
    state = _state(folder)
    pt = tmp_path / "negclip-like.pt"
    torch.save({"epoch": 3, "name": "tiny", "state_dict": {f"module.{k}": v for k, v in state.items()},
                "optimizer": {"state": {}, "param_groups": [{"lr": 1e-6}]}}, pt)
    with pytest.raises(InputError, match=r"^model_config: .*no open_clip_config.json.*arch=NAME"):
        OpenClipAdapter.load(str(pt), device="cpu")
    loaded = OpenClipAdapter.load(str(pt), device="cpu", model_config=str(_model_config_file(folder, tmp_path)))
    _same(loaded, OpenClipAdapter.load(str(folder), device="cpu"))
    assert loaded.checkpoint.fingerprint.startswith("sha256:") and loaded.config_source.endswith("tiny.json")


def test_safetensors_file_with_config_beside(folders: dict[str, Path], tmp_path: Path) -> None:
    from safetensors.torch import save_file

    src = folders["vit"]
    for f in src.iterdir():
        if f.is_file() and f.suffix != ".bin":
            (tmp_path / f.name).write_bytes(f.read_bytes())
    save_file(_state(src), str(tmp_path / "weights.safetensors"))
    loaded = OpenClipAdapter.load(str(tmp_path / "weights.safetensors"), device="cpu")
    _same(loaded, OpenClipAdapter.load(str(src), device="cpu"))


def test_torchscript_archive(folders: dict[str, Path], tmp_path: Path) -> None:
    """OpenAI's releases are TorchScript archives; their state dict is read (extra entries dropped)."""
    src = OpenClipAdapter.load(str(folders["vit"]), device="cpu")

    class Wrapped(torch.nn.Module):
        def __init__(self, model: torch.nn.Module) -> None:
            super().__init__()
            for name, child in model.named_children():
                self.add_module(name, child)
            for name, p in model.named_parameters(recurse=False):
                self.register_parameter(name, p)
            self.register_buffer("input_resolution", torch.tensor(32))

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.token_embedding(ids) + self.positional_embedding[: ids.shape[1]] + self.logit_scale

    traced = torch.jit.trace(Wrapped(src.model), torch.zeros(1, 4, dtype=torch.long))
    archive = tmp_path / "ViT-tiny.pt"
    torch.jit.save(traced, str(archive))
    (tmp_path / "open_clip_config.json").write_bytes((folders["vit"] / "open_clip_config.json").read_bytes())
    loaded = OpenClipAdapter.load(str(archive), device="cpu")
    _same(loaded, src)


# -- bad inputs -----------------------------------------------------------------------------------------


def test_bad_inputs(folders: dict[str, Path], tmp_path: Path) -> None:
    folder = str(folders["vit"])
    cases = [
        (dict(arch="ViT-B-32"), r"^checkpoint: .*does not fit OpenCLIP ViT-B-32: its config says vision_cfg.layers "
                                r"= 12, its weights hold 2 \("),
        (dict(arch="ViT-B-33"), r"^arch: .*ViT-B-32"),
        (dict(act="relu"), r"^act: "),
        (dict(arch="RN50", model_config=str(tmp_path / "x.json")), r"^arch: give either"),
        (dict(model_config=str(tmp_path / "missing.json")), r"^model_config: .* is not a file"),
    ]
    for options, pattern in cases:
        with pytest.raises(InputError, match=pattern):
            OpenClipAdapter.load(folder, device="cpu", **options)
    # the roberta checkpoint under a CLIP-text architecture: its text weights have no place
    with pytest.raises(InputError, match=r"^checkpoint: .*does not fit .*(lacks|no place|weights hold 0 \(its weights look "
                                         r"like a vision transformer image tower with a Hugging Face text tower)"):
        OpenClipAdapter.load(str(folders["roberta"]), device="cpu", model_config=str(_model_config_file(folders["vit"], tmp_path)))
    # a ResNet state dict under a ViT config
    with pytest.raises(InputError, match=r"^checkpoint: .*look like a ModifiedResNet image tower with CLIP's text tower"):
        OpenClipAdapter.load(str(folders["resnet"]), device="cpu", model_config=str(_model_config_file(folders["vit"], tmp_path)))
    # a pickle holding more than tensors
    evil = tmp_path / "evil.pt"
    torch.save({"state_dict": {"x": torch.zeros(1)}, "obj": Path("x")}, evil)
    with pytest.raises(InputError, match=r"^checkpoint: .*refusing"):
        OpenClipAdapter.load(str(evil), device="cpu", arch="RN50")
    # a file of another kind, an empty folder
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(InputError, match=r"^checkpoint: .*not an OpenCLIP weights file"):
        OpenClipAdapter.load(str(tmp_path / "notes.txt"), device="cpu")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match=r"^checkpoint: .*no OpenCLIP checkpoint"):
        OpenClipAdapter.load(str(tmp_path / "empty"), device="cpu")


def test_hf_clip_folder_is_refused_with_the_model_to_use(tmp_path: Path) -> None:
    from vlprobe.fixtures.clip import write_tiny_clip

    with pytest.raises(InputError, match=r"^checkpoint: .*Hugging Face 'clip' checkpoint \(use --model clip\)"):
        OpenClipAdapter.load(str(write_tiny_clip(tmp_path / "clip", 0)), device="cpu")


# -- built-in architectures -------------------------------------------------------------------------


KNOWN_SHAPES = {  # OpenCLIP/OpenAI state-dict facts of the released models
    "ViT-B-32": {"visual.positional_embedding": (50, 768), "visual.proj": (768, 512), "text_projection": (512, 512),
                 "token_embedding.weight": (49408, 512), "positional_embedding": (77, 512),
                 "visual.conv1.weight": (768, 3, 32, 32), "visual.transformer.resblocks.11.attn.in_proj_weight": (2304, 768)},
    "ViT-L-14": {"visual.positional_embedding": (257, 1024), "visual.proj": (1024, 768), "text_projection": (768, 768)},
    "ViT-bigG-14": {"visual.transformer.resblocks.47.mlp.c_fc.weight": (8192, 1664), "text_projection": (1280, 1280),
                    "transformer.resblocks.31.mlp.c_fc.weight": (5120, 1280)},
    "ViT-g-14": {"visual.transformer.resblocks.39.mlp.c_fc.weight": (6144, 1408)},
    "RN50": {"visual.conv1.weight": (32, 3, 3, 3), "visual.layer1.0.downsample.0.weight": (256, 64, 1, 1),
             "visual.layer4.2.conv3.weight": (2048, 512, 1, 1), "visual.attnpool.positional_embedding": (50, 2048),
             "visual.attnpool.c_proj.weight": (1024, 2048), "text_projection": (512, 1024)},
    "RN50x64": {"visual.attnpool.positional_embedding": (197, 4096), "visual.layer3.35.bn3.running_var": (2048,)},
}


@pytest.mark.parametrize("name", sorted(KNOWN_SHAPES))
def test_builtin_arch_shapes(name: str) -> None:
    from vlprobe.extract.models.openclip.model import OpenClipModel

    cfg = OpenClipConfig.from_dict(arch_config(name), name=name, param="arch")
    with torch.device("meta"):
        state = OpenClipModel(cfg).state_dict()
    for key, shape in KNOWN_SHAPES[name].items():
        assert tuple(state[key].shape) == shape, key


def test_every_builtin_arch_parses_and_quickgelu_names() -> None:
    assert len(ARCHS) == 14 and len(arch_names()) == 28
    for name in arch_names():
        cfg = OpenClipConfig.from_dict(arch_config(name), name=name, param="arch")
        assert cfg.act == ("quick_gelu" if name.endswith("-quickgelu") or name == "roberta-ViT-B-32" else "gelu"), name
    assert OpenClipConfig.from_dict(arch_config("RN50"), name="RN50", param="arch").vision.heads == 32
    assert OpenClipConfig.from_dict(arch_config("ViT-B-32"), name="x", param="arch", act="quick_gelu").act == "quick_gelu"


# -- preprocessing ----------------------------------------------------------------------------------


def test_resize_and_crop_follow_torchvisions_rules() -> None:
    img = Image.new("RGB", (300, 200))
    assert resize_shorter_side(img, 224).size == (336, 224)  # int(224 * 300 / 200)
    assert resize_shorter_side(Image.new("RGB", (200, 333)), 224).size == (224, 372)  # int(372.96)
    same = Image.new("RGB", (224, 300))
    assert resize_shorter_side(same, 224) is same
    # crop corner: int(round((h - size) / 2)) with Python's rounding: (227 - 224) / 2 = 1.5 -> 2, 0.5 -> 0
    arr = np.arange(227 * 225 * 3, dtype=np.uint32).reshape(227, 225, 3) % 251
    cropped = np.asarray(center_crop(Image.fromarray(arr.astype(np.uint8)), 224))
    np.testing.assert_array_equal(cropped, arr[2:226, 0:224].astype(np.uint8))


@pytest.mark.parametrize(("w", "h", "size", "shift"), [
    (640, 480, 224, 0), (500, 375, 224, 0), (333, 500, 224, 0), (160, 160, 224, 0),  # even excess: the same crop
    (427, 640, 224, 1), (355, 180, 160, 1),  # excess 111 / 155: OpenCLIP rounds 55.5 / 77.5 up, transformers floors
])
def test_preprocess_against_transformers_clip_processor(w: int, h: int, size: int, shift: int) -> None:
    """transformers' PIL CLIP processor resizes with the same filter and size rule (equal pixels),
    but crops at ``(side - size) // 2`` where torchvision (OpenCLIP, OpenAI) takes
    ``int(round((side - size) / 2))``: one pixel apart whenever that rounds up (measured here)."""
    from vlprobe.extract.models.openclip.archs import PreprocessConfig
    from vlprobe.fixtures.clip import clip_image_processor

    image = Image.fromarray(np.random.default_rng(w).integers(0, 256, (h, w, 3), dtype=np.uint8))
    ours = preprocess([image], PreprocessConfig(size=size))
    theirs = clip_image_processor(size)(images=[image], return_tensors="pt")["pixel_values"]
    assert ours.shape == theirs.shape == (1, 3, size, size)
    # Both run PIL's resampling and a float32 scale-and-normalise: equal up to float rounding.
    if not shift:
        assert float((ours - theirs).abs().max()) < 1e-6
        return
    assert float((ours - theirs).abs().max()) > 0.5
    if w > h:  # the crop moved one pixel along the longer side
        assert float((ours[..., :-1] - theirs[..., 1:]).abs().max()) < 1e-6
    else:
        assert float((ours[..., :-1, :] - theirs[..., 1:, :]).abs().max()) < 1e-6


# -- end to end through the command line -------------------------------------------------------------


def test_cli_fixture_extract_and_eval(
    folders: dict[str, Path], synthetic_dir: Path, sugarcrepe_dir: Path, tmp_path: Path,
    one_error_line: Any,
) -> None:
    """`probe fixtures model openclip --arch resnet`, `probe extract` on it, and `probe eval
    sugarcrepe` on a NegCLIP-style .pt with --model-config and act=quick_gelu; its scores equal
    the adapter's own."""
    import h5py
    from typer.testing import CliRunner

    from vlprobe.cli import app
    from vlprobe.data.sugarcrepe import load_sugarcrepe

    runner = CliRunner()
    rn = tmp_path / "rn"
    res = runner.invoke(app, ["fixtures", "model", "openclip", "--arch", "resnet", "--out", str(rn)])
    assert res.exit_code == 0, res.output
    one_error_line(runner.invoke(app, ["fixtures", "model", "clip", "--arch", "resnet", "--out", str(tmp_path / "c")]),
                   "arch: the clip fixture has one architecture")
    cache = tmp_path / "rn.h5"
    res = runner.invoke(app, ["extract", "--model", "openclip", "--checkpoint", str(rn), "--dataset", "winoground",
                              "--data-dir", str(synthetic_dir), "--out", str(cache), "--device", "cpu", "--quiet"])
    assert res.exit_code == 0, res.output
    with h5py.File(cache) as h5:
        assert json.loads(h5.attrs["model_options"]) == {"act": "gelu", "arch": "rn"}
        assert json.loads(h5["streams/image"].attrs["layer_kinds"]) == ["embed", "stage", "stage", "stage", "stage", "attnpool"]
        assert h5["scores"].attrs["kind"] == "cosine"

    # NegCLIP's layout: a training checkpoint (.pt, module. prefixes), no config beside it
    pt = tmp_path / "negclip-like.pt"
    torch.save({"epoch": 1, "state_dict": {f"module.{k}": v for k, v in _state(folders["vit"]).items()}}, pt)
    items = load_sugarcrepe(sugarcrepe_dir, subsets="add_att", limit=3)
    coco = tmp_path / "coco"
    coco.mkdir()
    for n, it in enumerate(items):
        Image.fromarray(np.random.default_rng(n).integers(0, 256, (40, 52, 3), dtype=np.uint8)).save(coco / it.images[0].name)
    base = ["eval", "sugarcrepe", "--data-dir", str(sugarcrepe_dir), "--subsets", "add_att", "--limit", "3",
            "--image-dir", str(coco), "--model", "openclip", "--checkpoint", str(pt), "--device", "cpu",
            "--bootstrap", "0"]
    one_error_line(runner.invoke(app, [*base, "--out", str(tmp_path / "e0")]), "arch=NAME")
    config = _model_config_file(folders["vit"], tmp_path)
    res = runner.invoke(app, [*base, "--out", str(tmp_path / "e1"), "--model-config", str(config),
                              "--model-option", "act=quick_gelu"])
    assert res.exit_code == 0, res.output
    from vlprobe.runs.score_files import caption_foil_scores, read_item_scores

    ids, pos, neg = caption_foil_scores(read_item_scores(tmp_path / "e1" / "sugarcrepe" / "openclip@bootstrap=0.scores.jsonl"))
    assert ids == [it.id for it in items]
    adapter = OpenClipAdapter.load(str(pt), device="cpu", model_config=str(config), act="quick_gelu")
    for it, p, n in zip(items, pos, neg, strict=True):
        with Image.open(coco / it.images[0].name) as im:
            img = adapter.encode("image", [im.copy()], [0]).pooled.numpy()
        txt = adapter.encode("text", [t.text for t in it.texts], [0]).pooled.numpy()
        np.testing.assert_allclose([p, n], adapter.scores_from_pooled(img, txt)[0], atol=1e-5)
    manifest = json.loads((tmp_path / "e1" / "sugarcrepe" / "manifest.json").read_text(encoding="utf-8"))
    assert json.dumps(manifest).count("quick_gelu") >= 1  # the activation is recorded with the run
