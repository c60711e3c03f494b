"""The papers' models (the OpenCLIP, VisualBERT, ViLBERT, GPT and blind rows of SugarCrepe and VALSE)
against bad input, through the CLI: one row per (model, case).

Each of OpenCLIP, VisualBERT, ViLBERT / 12-in-1, GPT-1, GPT-2, Vera and the grammar model meets
a checkpoint of another family, a wrong architecture option and a missing or foreign config.
Each row asserts exit code 2, exactly one ``error:`` line naming the parameter and the file, no
traceback, and that nothing was written. Beside them: the QuickGELU note a NegCLIP-style training
checkpoint gets when it runs with GELU (a note, not an error: GELU is how SugarCrepe's published
NegCLIP row ran).
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

from vlprobe.cli import app
from vlprobe.fixtures.model_fixture import write_model_fixture

#: (fixture name, arch) -> the kit's key.
FIXTURES = {
    "openclip-vit": ("openclip", "vit"), "openclip-resnet": ("openclip", "resnet"),
    "openclip-roberta": ("openclip", "roberta"), "visualbert": ("visualbert", None),
    "vilbert": ("vilbert", "pretrained"), "vilbert-12in1": ("vilbert", "multitask"), "gpt2": ("gpt2", None),
    "openai-gpt": ("openai-gpt", None), "vera": ("vera", None), "grammar": ("grammar", None),
    "clip": ("clip", None), "lxmert": ("lxmert", None), "uniter": ("uniter", None),
}


@dataclass(frozen=True)
class Kit:
    fx: dict[str, Path]  # every family's tiny fixture (FIXTURES' keys)
    syn: Path  # the synthetic Winoground-format dataset
    regions: Path  # its region features (2048-d, as VisualBERT and ViLBERT read)
    sugarcrepe: Path


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory, synthetic_dir: Path, sugarcrepe_dir: Path) -> Kit:
    root = tmp_path_factory.mktemp("paper-models")
    fx = {key: write_model_fixture(name, root / key, 0, arch) for key, (name, arch) in FIXTURES.items()}
    regions = root / "regions.h5"
    res = CliRunner().invoke(app, ["fixtures", "regions", "--data-dir", str(synthetic_dir), "--out", str(regions),
                                   "--boxes", "3", "--dim", "2048"])
    assert res.exit_code == 0, res.output
    return Kit(fx=fx, syn=synthetic_dir, regions=regions, sugarcrepe=sugarcrepe_dir)


def _extract(model: str, checkpoint: Any, *extra: Any) -> Callable[[Kit, Path], list[Any]]:
    """``probe extract`` (the models with hidden states), regions for the region readers."""
    def argv(k: Kit, work: Path) -> list[Any]:
        regions = ["--regions", k.regions] if model in ("visualbert", "vilbert") else []
        ckpt = checkpoint(k, work) if callable(checkpoint) else k.fx[checkpoint]
        return ["extract", "--model", model, "--checkpoint", ckpt, "--dataset", "winoground", "--data-dir", k.syn,
                *regions, "--out", work / "c.h5", "--device", "cpu", "--quiet", *extra]
    return argv


def _eval(model: str, checkpoint: Any, *extra: Any) -> Callable[[Kit, Path], list[Any]]:
    """``probe eval sugarcrepe`` (the blind text scorers have no states to extract)."""
    def argv(k: Kit, work: Path) -> list[Any]:
        ckpt = checkpoint(k, work) if callable(checkpoint) else k.fx[checkpoint]
        return ["eval", "sugarcrepe", "--model", model, "--checkpoint", ckpt, "--data-dir", k.sugarcrepe,
                "--limit", "1", "--out", work / "res", "--bootstrap", "0", "--device", "cpu", "--quiet", *extra]
    return argv


def _file(key: str, name: str) -> Callable[[Kit, Path], Path]:
    return lambda k, work: k.fx[key] / name


def _without(key: str, name: str, weights: str | None = None) -> Callable[[Kit, Path], Path]:
    """A copy of fixture ``key`` without its config file ``name`` (the weights file ``weights``
    inside it, when the model takes a file)."""
    def build(k: Kit, work: Path) -> Path:
        folder = work / "inputs" / key
        shutil.copytree(k.fx[key], folder)
        (folder / name).unlink()
        return folder / weights if weights else folder
    return build


def _with(key: str, name: str, text: str, weights: str | None = None) -> Callable[[Kit, Path], Path]:
    """A copy of fixture ``key`` whose config file ``name`` holds ``text``."""
    def build(k: Kit, work: Path) -> Path:
        folder = work / "inputs" / key
        shutil.copytree(k.fx[key], folder)
        (folder / name).write_text(text, encoding="utf-8")
        return folder / weights if weights else folder
    return build


def _edited(key: str, name: str, weights: str | None = None, drop: str = "", **changes: Any) -> Callable[[Kit, Path], Path]:
    """A copy of fixture ``key`` whose JSON config ``name`` has ``changes`` (a size that no longer
    fits the weights, a field of another type) and lacks the key ``drop``."""
    def build(k: Kit, work: Path) -> Path:
        import json

        folder = work / "inputs" / key
        shutil.copytree(k.fx[key], folder)
        config = json.loads((folder / name).read_text(encoding="utf-8"))
        config = {kk: v for kk, v in {**config, **changes}.items() if kk != drop}
        (folder / name).write_text(json.dumps(config), encoding="utf-8")
        return folder / weights if weights else folder
    return build


@dataclass(frozen=True)
class Row:
    model: str
    case: str
    argv: Callable[[Kit, Path], list[Any]]
    needles: tuple[str, ...]


ROWS = [
    # -- a checkpoint of another family ---------------------------------------------------------------
    Row("openclip", "a Hugging Face CLIP folder", _extract("openclip", "clip"), ("checkpoint", "use --model clip")),
    Row("openclip", "a VisualBERT folder", _extract("openclip", "visualbert"), ("checkpoint", "'visual_bert'")),
    Row("openclip", "ViLBERT's state dict with arch", _extract("openclip", _file("vilbert", "save/pretrained_model.bin"),
                                                              "--model-option", "arch=ViT-B-32"),
        ("checkpoint", "pretrained_model.bin", "does not fit OpenCLIP ViT-B-32", "no OpenCLIP CLIP model")),
    Row("openclip", "UNITER's .pt with arch", _extract("openclip", _file("uniter", "uniter-base.pt"),
                                                      "--model-option", "arch=RN50"),
        ("checkpoint", "uniter-base.pt", "does not fit OpenCLIP RN50")),
    Row("visualbert", "an OpenCLIP folder", _extract("visualbert", "openclip-vit"), ("checkpoint", "config.json")),
    Row("visualbert", "an LXMERT folder", _extract("visualbert", "lxmert"), ("checkpoint", "'lxmert' model",
                                                                            "expected 'visual_bert'")),
    Row("visualbert", "OpenCLIP's weights file", _extract("visualbert", _file("openclip-vit", "open_clip_pytorch_model.bin")),
        ("checkpoint", "open_clip_pytorch_model.bin", "not a directory")),
    Row("vilbert", "OpenCLIP's weights with ViLBERT's config", _extract(
        "vilbert", _file("openclip-vit", "open_clip_pytorch_model.bin"),
        "--model-config", "KIT:vilbert/config/bert_base_6layer_6conect.json"),
        ("checkpoint", "open_clip_pytorch_model.bin", "not a ViLBERT state dict")),
    Row("vilbert", "a UNITER folder", _extract("vilbert", "uniter"), ("checkpoint", "released state-dict file")),
    Row("vilbert", "a VisualBERT folder", _extract("vilbert", "visualbert"), ("checkpoint", "released state-dict file")),
    Row("gpt2", "a GPT-1 folder", _eval("gpt2", "openai-gpt"), ("checkpoint", "'openai-gpt' model, expected 'gpt2'")),
    Row("gpt2", "the grammar model's folder", _eval("gpt2", "grammar"), ("checkpoint", "not a causal language model")),
    Row("gpt2", "a ViLBERT folder", _eval("gpt2", "vilbert"), ("checkpoint", "not a causal language model")),
    Row("openai-gpt", "a GPT-2 folder", _eval("openai-gpt", "gpt2"), ("checkpoint", "'gpt2' model, expected 'openai-gpt'")),
    Row("openai-gpt", "a VisualBERT folder", _eval("openai-gpt", "visualbert"), ("checkpoint", "not a causal language model")),
    Row("vera", "the grammar model's folder", _eval("vera", "grammar"), ("checkpoint", "'distilbert' model", "Vera's 't5'")),
    Row("vera", "an OpenCLIP folder", _eval("vera", "openclip-vit"), ("checkpoint", "config.json")),
    Row("grammar", "a CLIP folder", _eval("grammar", "clip"), ("checkpoint", "not a sequence classifier", "'clip' model")),
    Row("grammar", "an LXMERT folder", _eval("grammar", "lxmert"), ("checkpoint", "not a sequence classifier")),
    Row("grammar", "an OpenCLIP folder", _eval("grammar", "openclip-resnet"), ("checkpoint", "not a sequence classifier")),
    Row("grammar", "Vera's folder", _eval("grammar", "vera"), ("checkpoint", "not a trained sequence classifier")),
    # -- a wrong architecture option ---------------------------------------------------------------------
    Row("openclip", "a ViT checkpoint as RN50", _extract("openclip", "openclip-vit", "--model-option", "arch=RN50"),
        ("checkpoint", "does not fit OpenCLIP RN50", "vision transformer")),
    Row("openclip", "a ResNet checkpoint as ViT-B-32-quickgelu",
        _extract("openclip", "openclip-resnet", "--model-option", "arch=ViT-B-32-quickgelu"),
        ("checkpoint", "does not fit OpenCLIP ViT-B-32-quickgelu", "ModifiedResNet")),
    Row("openclip", "a CLIP-text checkpoint as roberta-ViT-B-32",
        _extract("openclip", "openclip-vit", "--model-option", "arch=roberta-ViT-B-32"),
        ("checkpoint", "Hugging Face text tower", "roberta-ViT-B-32")),
    Row("openclip", "a roberta checkpoint as ViT-B-32", _extract("openclip", "openclip-roberta", "--model-option",
                                                                 "arch=ViT-B-32"), ("checkpoint", "ViT-B-32")),
    Row("openclip", "an unknown arch", _extract("openclip", "openclip-vit", "--model-option", "arch=vit"),
        ("arch", "'vit'", "ViT-B-32")),
    Row("openclip", "an unknown act", _extract("openclip", "openclip-vit", "--model-option", "act=relu"), ("act", "relu")),
    Row("openclip", "arch and model_config both", _extract("openclip", "openclip-vit", "--model-option", "arch=RN50",
                                                           "--model-config", "KIT:openclip-vit/open_clip_config.json"),
        ("arch", "model_config")),
    Row("vilbert", "task_id for a pretrained checkpoint", _extract("vilbert", _file("vilbert", "save/pretrained_model.bin"),
                                                                   "--model-option", "task_id=3"),
        ("task_id", "no task tokens")),
    Row("vilbert", "a config without a size (the original would fall back to its class default)", _extract(
        "vilbert", _edited("vilbert", "config/bert_base_6layer_6conect.json", "save/pretrained_model.bin", drop="v_num_attention_heads")),
        ("model_config", "lacks v_num_attention_heads", "bert_base_6layer_6conect.json")),
    Row("vilbert", "a config that says task tokens over pretrained weights", _extract(
        "vilbert", _edited("vilbert", "config/bert_base_6layer_6conect.json", "save/pretrained_model.bin", task_specific_tokens=True)),
        ("model_config", "task_specific_tokens is true", "weights lack bert.embeddings.task_embeddings")),
    Row("vilbert", "a config that says no task tokens over 12-in-1 weights", _extract(
        "vilbert", _edited("vilbert-12in1", "config/bert_base_6layer_6conect.json", "save/multi_task_model.bin", task_specific_tokens=False)),
        ("model_config", "task_specific_tokens is false", "weights hold bert.embeddings.task_embeddings")),
    Row("vilbert", "task_id out of range", _extract("vilbert", _file("vilbert-12in1", "save/multi_task_model.bin"),
                                                    "--model-option", "task_id=99"), ("task_id", "99")),
    Row("vilbert", "an unknown score_head", _extract("vilbert", _file("vilbert-12in1", "save/multi_task_model.bin"), "--model-option",
                                                     "task_id=8", "--model-option", "score_head=cosine"),
        ("score_head", "cosine")),
    Row("visualbert", "an arch option it does not take", _extract("visualbert", "visualbert", "--model-option",
                                                                  "arch=ViT-B-32"), ("arch",)),
    Row("gpt2", "an unknown perplexity", _eval("gpt2", "gpt2", "--model-option", "perplexity=mean"), ("perplexity", "mean")),
    Row("openai-gpt", "an arch option it does not take", _eval("openai-gpt", "openai-gpt", "--model-option",
                                                               "arch=gpt2"), ("arch",)),
    Row("vera", "an option it does not take", _eval("vera", "vera", "--model-option", "act=quick_gelu"), ("act",)),
    Row("grammar", "an unknown acceptable label", _eval("grammar", "grammar", "--acceptable-label", "grammatical"),
        ("acceptable_label", "grammatical")),
    # -- a missing or foreign config ------------------------------------------------------------------
    Row("openclip", "weights without open_clip_config.json", _extract("openclip", _without(
        "openclip-vit", "open_clip_config.json")), ("model_config", "open_clip_config.json", "arch=NAME")),
    Row("openclip", "an open_clip_config.json that is no JSON", _extract("openclip", _with(
        "openclip-vit", "open_clip_config.json", "{not json")), ("checkpoint", "open_clip_config.json", "JSON")),
    Row("openclip", "an open_clip_config.json without model_cfg", _extract("openclip", _with(
        "openclip-vit", "open_clip_config.json", "{}")), ("checkpoint", "embed_dim")),
    Row("openclip", "the ResNet fixture's config beside ViT weights", _extract("openclip", _with(
        "openclip-vit", "open_clip_config.json", "KIT:openclip-resnet/open_clip_config.json")),
        ("checkpoint", "does not fit", "vision transformer")),
    Row("openclip", "a model_config that is not there", _extract("openclip", "openclip-vit", "--model-config",
                                                                 "WORK:missing.json"), ("model_config", "missing.json")),
    Row("vilbert", "a state dict without its config JSON", _extract("vilbert", _without("vilbert", "config/bert_base_6layer_6conect.json",
                                                                                        "save/pretrained_model.bin")),
        ("model_config", "--model-config bert_base_6layer_6conect.json")),
    Row("vilbert", "UNITER's config JSON", _extract("vilbert", _file("vilbert", "save/pretrained_model.bin"), "--model-config",
                                                    "KIT:uniter/uniter-base.json"), ("model_config", "not a ViLBERT config")),
    Row("vilbert", "a config that is no JSON", _extract("vilbert", _with("vilbert", "config/bert_base_6layer_6conect.json", "[1, 2",
                                                                         "save/pretrained_model.bin")), ("model_config", "JSON")),
    Row("visualbert", "a folder without config.json", _extract("visualbert", _without("visualbert", "config.json")),
        ("checkpoint", "config.json")),
    Row("visualbert", "GPT-2's config.json beside its weights", _extract("visualbert", _with(
        "visualbert", "config.json", "KIT:gpt2/config.json")), ("checkpoint", "'gpt2' model")),
    Row("gpt2", "a folder without config.json", _eval("gpt2", _without("gpt2", "config.json")),
        ("checkpoint", "config.json")),
    Row("openai-gpt", "a folder without config.json", _eval("openai-gpt", _without("openai-gpt", "config.json")),
        ("checkpoint", "config.json")),
    Row("vera", "a folder without config.json", _eval("vera", _without("vera", "config.json")),
        ("checkpoint", "config.json")),
    Row("grammar", "a folder without config.json", _eval("grammar", _without("grammar", "config.json")),
        ("checkpoint", "config.json")),
    # -- a config whose sizes do not fit its weights: the first weight that differs, in one line ----------
    Row("gpt2", "a config whose n_embd does not fit the weights", _eval("gpt2", _edited("gpt2", "config.json", n_embd=64)),
        ("checkpoint", "does not fit its config (config.json)", "transformer.wte.weight", "(", "n_embd")),
    Row("openai-gpt", "a config whose n_embd does not fit the weights", _eval(
        "openai-gpt", _edited("openai-gpt", "config.json", n_embd=64)), ("checkpoint", "does not fit its config", "n_embd")),
    Row("visualbert", "a config whose hidden_size does not fit the weights", _extract(
        "visualbert", _edited("visualbert", "config.json", hidden_size=64)),
        ("checkpoint", "does not fit its config (config.json)", "visual_bert.embeddings.word_embeddings.weight",
         "hidden_size")),
    Row("visualbert", "a config whose visual_embedding_dim does not fit the weights", _extract(
        "visualbert", _edited("visualbert", "config.json", visual_embedding_dim=1024)),
        ("checkpoint", "does not fit its config", "visual_projection.weight", "visual_embedding_dim")),
    Row("vera", "a config whose d_model does not fit the weights", _eval("vera", _edited("vera", "config.json", d_model=32)),
        ("checkpoint", "does not fit its config", "shared.weight", "d_model")),
    Row("grammar", "a config whose dim does not fit the weights", _eval(
        "grammar", _edited("grammar", "config.json", dim=48)), ("checkpoint", "does not fit its config",
                                                                 "distilbert.embeddings.word_embeddings.weight", "dim")),
    Row("vilbert", "a config whose v_hidden_size does not fit the weights", _extract(
        "vilbert", _edited("vilbert", "config/bert_base_6layer_6conect.json", "save/pretrained_model.bin", v_hidden_size=48)),
        ("checkpoint", "does not fit its config (bert_base_6layer_6conect.json)", "bert.v_embeddings.image_embeddings.weight",
         "v_hidden_size")),
    Row("vilbert", "a config with a size written as a string", _extract(
        "vilbert", _edited("vilbert", "config/bert_base_6layer_6conect.json", "save/pretrained_model.bin", v_hidden_size="24")),
        ("model_config", "v_hidden_size", "'24'", "integer")),
    Row("vilbert", "a config with co-attention ids written as strings", _extract(
        "vilbert", _edited("vilbert", "config/bert_base_6layer_6conect.json", "save/pretrained_model.bin", v_biattention_id="01")),
        ("model_config", "v_biattention_id", "list of integers")),
]


def _resolve(k: Kit, work: Path, argv: list[Any]) -> list[str]:
    """``KIT:<fixture>/<file>`` and ``WORK:<name>`` placeholders -> paths; a ``_with`` text
    naming ``KIT:...`` is replaced by that file's text (done in the builder's copy)."""
    out = []
    for a in argv:
        s = str(a)
        if s.startswith("KIT:"):
            key, _, name = s[4:].partition("/")
            s = str(k.fx[key] / name)
        elif s.startswith("WORK:"):
            s = str(work / s[5:])
        out.append(s)
    return out


def _fill_kit_texts(k: Kit, work: Path) -> None:
    """A config copied by ``_with`` whose text is ``KIT:<fixture>/<file>`` gets that file's text."""
    for p in (work / "inputs").rglob("*.json") if (work / "inputs").is_dir() else ():
        text = p.read_text(encoding="utf-8")
        if text.startswith("KIT:"):
            key, _, name = text[4:].partition("/")
            p.write_text((k.fx[key] / name).read_text(encoding="utf-8"), encoding="utf-8")


def _snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_every_new_model_has_each_kind_of_row() -> None:
    """Each of the papers' models meets another family's checkpoint, a wrong option and a bad config."""
    kinds = {"another": ("folder", "file", "state dict", "weights"), "option": ("arch", "act", "task_id", "score_head",
                                                                               "perplexity", "label", "option")}
    for model in ("openclip", "visualbert", "vilbert", "gpt2", "openai-gpt", "vera", "grammar"):
        cases = [r.case for r in ROWS if r.model == model]
        assert any("config" in c for c in cases), model
        assert any(any(w in c for w in kinds["option"]) for c in cases), model
        assert sum(any(w in c for w in kinds["another"]) for c in cases) >= 2, model
    assert len({(r.model, r.case) for r in ROWS}) == len(ROWS)


@pytest.mark.parametrize("row", ROWS, ids=[f"{r.model} | {r.case}" for r in ROWS])
def test_bad_input(row: Row, kit: Kit, tmp_path: Path, one_error_line: Callable[..., str]) -> None:
    work = tmp_path / "work"
    work.mkdir()
    argv = _resolve(kit, work, row.argv(kit, work))
    _fill_kit_texts(kit, work)
    before, fixtures_before = _snapshot(work), {k: _snapshot(p if p.is_dir() else p.parent) for k, p in kit.fx.items()}
    one_error_line(CliRunner().invoke(app, argv), *row.needles)
    assert _snapshot(work) == before, "a refused command wrote, changed or removed files"
    assert {k: _snapshot(p if p.is_dir() else p.parent) for k, p in kit.fx.items()} == fixtures_before


# -- NegCLIP: a training checkpoint run with GELU gets a note, not an error ----------------------------


def _negclip_like(kit: Kit, path: Path) -> Path:
    """NegCLIP's layout: {"epoch", "name", "state_dict": {"module.<key>": ...}} as one .pth."""
    from vlprobe.extract.models.openclip.checkpoint import read_state_dict

    weights = kit.fx["openclip-vit"] / "open_clip_pytorch_model.bin"
    state = read_state_dict(weights, str(weights))
    torch.save({"epoch": 10, "name": "negclip", "state_dict": {f"module.{k}": v for k, v in state.items()}}, path)
    return path


def test_negclip_gets_the_quickgelu_note(kit: Kit, tmp_path: Path) -> None:
    """A training checkpoint under a GELU config (act not given): one ``note:`` line on stderr
    naming act=quick_gelu, the run succeeds and the cache records the note; with act given
    (either value) or a checkpoint that is no training checkpoint, no note."""
    import json

    import h5py

    pt = _negclip_like(kit, tmp_path / "negclip.pth")
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(json.loads((kit.fx["openclip-vit"] / "open_clip_config.json").read_text())["model_cfg"]))
    common = ["--dataset", "winoground", "--data-dir", str(kit.syn), "--device", "cpu", "--quiet"]
    base = ["extract", "--model", "openclip", "--checkpoint", str(pt), "--model-config", str(config), *common]
    res = CliRunner().invoke(app, [*base, "--out", str(tmp_path / "gelu.h5")])
    assert res.exit_code == 0, res.output
    notes = [line for line in res.stderr.splitlines() if line.startswith("note: ")]
    assert len(notes) == 1 and "act=quick_gelu" in notes[0] and "epoch 10" in notes[0] and "negclip.pth" in notes[0], notes
    with h5py.File(tmp_path / "gelu.h5") as h5:
        assert json.loads(h5.attrs["model_options"])["act"] == "gelu"
        assert "act=quick_gelu" in h5.attrs["model_info"]
    for act in ("quick_gelu", "gelu"):
        res = CliRunner().invoke(app, [*base, "--model-option", f"act={act}", "--out", str(tmp_path / f"{act}.h5")])
        assert res.exit_code == 0 and "note: " not in res.stderr, res.output
    res = CliRunner().invoke(app, ["extract", "--model", "openclip", "--checkpoint", str(kit.fx["openclip-vit"]),
                                   *common, "--out", str(tmp_path / "hub.h5")])
    assert res.exit_code == 0 and "note: " not in res.stderr, res.output
