"""ViLBERT / 12-in-1 adapter against a functional re-implementation of vilbert-multi-task's
forward (written here from its description, reading the raw state dict: the encoder's loop over
the co-attention ids, BERT's TF-style layer norm, -10000 masks), the region layout, options and
refusals, and the end-to-end command.

Tolerance: two float32 implementations (batched unique-caption embedding vs per-pair, other
summation orders): 1e-5 absolute / 1e-4 relative.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tests.extract.helpers import random_region_batch
from tests.extract.models.contract import Case, kinds
from vlprobe.extract.models.vilbert.adapter import ViLBertAdapter
from vlprobe.fixtures.vilbert import VILBERT_CONFIG, VILBERT_WEIGHTS, write_tiny_vilbert
from vlprobe.provenance import sha256_file
from vlprobe.validation import InputError

_STREAMS = {"text": ("pair", kinds("embed", ("self", 2), ("coattn", 1), ("self", 1), ("coattn", 1), ("self", 1)), "token0"),
            "image": ("pair", kinds("embed", ("coattn", 1), ("self", 1), ("coattn", 1), ("self", 1)), "token0")}
_SITES = {"text": ("bert.embeddings", "text"), "image": ("bert.v_embeddings", "image")}
# The adapter contract (tests/extract/models/test_adapter_contract.py) checks both checkpoint kinds.
CONTRACTS = [
    Case("vilbert", "cross", "regions", _STREAMS, _SITES, checkpoint="save/pretrained_model.bin", wrong="uniter",
         feature_dim=2048, weights=("save/pretrained_model.bin",), image_prefix=1),
    Case("vilbert-multitask", "cross", "regions", _STREAMS, _SITES, checkpoint="save/multi_task_model.bin",
         wrong="uniter", feature_dim=2048, weights=("save/multi_task_model.bin",), model="vilbert",
         fixture_options={"arch": "multitask"}, text_prefix=1, image_prefix=1),
]

CAPTIONS = ["a red circle left of a blue square", "a big green star",
            "in the picture a small yellow diamond is above a big purple triangle"]


def _close(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    torch.testing.assert_close(a.float(), b.float(), atol=1e-5, rtol=1e-4, msg=lambda m: f"{what}: {m}")


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("vilbert")
    return {a: write_tiny_vilbert(root / a, 0, a) for a in ("pretrained", "multitask")}


# -- the oracle -----------------------------------------------------------------------------------------


def _ln(x: torch.Tensor, s: dict[str, torch.Tensor], p: str) -> torch.Tensor:
    u = x.mean(-1, keepdim=True)
    v = (x - u).pow(2).mean(-1, keepdim=True)
    return s[f"{p}.weight"] * (x - u) / torch.sqrt(v + 1e-12) + s[f"{p}.bias"]


def _lin(x: torch.Tensor, s: dict[str, torch.Tensor], p: str) -> torch.Tensor:
    return x @ s[f"{p}.weight"].T + s[f"{p}.bias"]


def _gelu(x: torch.Tensor) -> torch.Tensor:
    return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))


def _mha(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, heads: int) -> torch.Tensor:
    def split(x: torch.Tensor) -> torch.Tensor:
        return x.view(x.shape[0], x.shape[1], heads, -1).permute(0, 2, 1, 3)

    q, k, v = split(q), split(k), split(v)
    probs = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + mask, dim=-1)
    out = (probs @ v).permute(0, 2, 1, 3)
    return out.reshape(out.shape[0], out.shape[1], -1)


def _layer(x: torch.Tensor, mask: torch.Tensor, s: dict[str, torch.Tensor], p: str, heads: int) -> torch.Tensor:
    ctx = _mha(_lin(x, s, f"{p}.attention.self.query"), _lin(x, s, f"{p}.attention.self.key"),
               _lin(x, s, f"{p}.attention.self.value"), mask, heads)
    a = _ln(_lin(ctx, s, f"{p}.attention.output.dense") + x, s, f"{p}.attention.output.LayerNorm")
    return _ln(_lin(_gelu(_lin(a, s, f"{p}.intermediate.dense")), s, f"{p}.output.dense") + a, s, f"{p}.output.LayerNorm")


def reference_forward(s: dict[str, torch.Tensor], cfg: dict[str, Any], ids: torch.Tensor, tmask: torch.Tensor,
                      feats: torch.Tensor, loc5: torch.Tensor, vmask: torch.Tensor, task_id: int | None
                      ) -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor, torch.Tensor]:
    """vilbert-multi-task's BertModel.forward: text and image states in the order computed, pooled outputs."""
    b = "bert"
    pos = torch.arange(ids.shape[1])[None].expand_as(ids)
    x = s[f"{b}.embeddings.word_embeddings.weight"][ids] + s[f"{b}.embeddings.position_embeddings.weight"][pos] \
        + s[f"{b}.embeddings.token_type_embeddings.weight"][torch.zeros_like(ids)]
    if task_id is not None:
        task = s[f"{b}.embeddings.task_embeddings.weight"][torch.full((ids.shape[0], 1), task_id)]
        x = torch.cat([x[:, :1], task, x[:, 1:]], dim=1)
        tmask = torch.cat([torch.ones_like(tmask[:, :1]), tmask], dim=1)
    txt = _ln(x, s, f"{b}.embeddings.LayerNorm")
    img = _ln(_lin(feats, s, f"{b}.v_embeddings.image_embeddings") + _lin(loc5, s, f"{b}.v_embeddings.image_location_embeddings"),
              s, f"{b}.v_embeddings.LayerNorm")
    t_add = (1.0 - tmask[:, None, None, :].float()) * -10000.0
    v_add = (1.0 - vmask[:, None, None, :].float()) * -10000.0
    t_states, v_states = [txt], [img]
    e = f"{b}.encoder"
    t_start = v_start = 0
    for count, (v_end, t_end) in enumerate(zip(cfg["v_biattention_id"], cfg["t_biattention_id"], strict=True)):
        for i in range(t_start, t_end):
            txt = _layer(txt, t_add, s, f"{e}.layer.{i}", cfg["num_attention_heads"])
            t_states.append(txt)
        for i in range(v_start, v_end):
            img = _layer(img, v_add, s, f"{e}.v_layer.{i}", cfg["v_num_attention_heads"])
            v_states.append(img)
        c = f"{e}.c_layer.{count}"
        bh = cfg["bi_num_attention_heads"]
        ctx1 = _mha(_lin(txt, s, f"{c}.biattention.query2"), _lin(img, s, f"{c}.biattention.key1"),
                    _lin(img, s, f"{c}.biattention.value1"), v_add, bh)
        ctx2 = _mha(_lin(img, s, f"{c}.biattention.query1"), _lin(txt, s, f"{c}.biattention.key2"),
                    _lin(txt, s, f"{c}.biattention.value2"), t_add, bh)
        a1 = _ln(_lin(ctx2, s, f"{c}.biOutput.dense1") + img, s, f"{c}.biOutput.LayerNorm1")
        a2 = _ln(_lin(ctx1, s, f"{c}.biOutput.dense2") + txt, s, f"{c}.biOutput.LayerNorm2")
        img = _ln(_lin(_gelu(_lin(a1, s, f"{c}.v_intermediate.dense")), s, f"{c}.v_output.dense") + a1, s, f"{c}.v_output.LayerNorm")
        txt = _ln(_lin(_gelu(_lin(a2, s, f"{c}.t_intermediate.dense")), s, f"{c}.t_output.dense") + a2, s, f"{c}.t_output.LayerNorm")
        t_states.append(txt)
        v_states.append(img)
        t_start, v_start = t_end, v_end
    for i in range(v_start, cfg["v_num_hidden_layers"]):
        img = _layer(img, v_add, s, f"{e}.v_layer.{i}", cfg["v_num_attention_heads"])
        v_states.append(img)
    for i in range(t_start, cfg["num_hidden_layers"]):
        txt = _layer(txt, t_add, s, f"{e}.layer.{i}", cfg["num_attention_heads"])
        t_states.append(txt)
    pt = torch.relu(_lin(txt[:, 0], s, f"{b}.t_pooler.dense"))
    pv = torch.relu(_lin(img[:, 0], s, f"{b}.v_pooler.dense"))
    return t_states, v_states, pt, pv


@pytest.mark.parametrize("arch", ["pretrained", "multitask"])
def test_matches_the_reference_forward(folders: dict[str, Path], arch: str) -> None:
    """The default head of each release (ITM for ViLBERT, vil_logit with task 8 for 12-in-1), every
    layer and pooling, against the reference forward on the raw state dict."""
    folder = folders[arch]
    weights = folder / VILBERT_WEIGHTS[arch]
    adapter = ViLBertAdapter.load(str(weights), device="cpu")
    task = 8 if arch == "multitask" else None
    state = {k: v.float() for k, v in torch.load(weights, weights_only=True).items()}
    cfg = json.loads((folder / VILBERT_CONFIG).read_text())
    regions = random_region_batch(3, 6, [6, 4, 2], seed=3, dim=2048)
    texts, images = adapter.prepare_texts(CAPTIONS), adapter.prepare_images(regions)
    t_idx, i_idx = np.array([0, 1, 2, 0, 2]), np.array([0, 0, 1, 2, 2])
    nt, nv = adapter.streams["text"].n_layers, adapter.streams["image"].n_layers
    got = adapter.encode_pairs(texts, images, t_idx, i_idx, {"text": list(range(nt)), "image": list(range(nv))},
                               ["cls", "mean"])
    ids, tmask = texts.take(t_idx)
    rows = torch.from_numpy(i_idx)
    with torch.no_grad():
        t_states, v_states, pt, pv = reference_forward(state, cfg, ids, tmask, images.features[rows], images.loc5[rows],
                                                       images.mask[rows], task)
    assert (len(t_states), len(v_states)) == (nt, nv)
    fused = pt * pv
    if arch == "pretrained":
        logits = fused @ state["cls.bi_seq_relationship.weight"].T + state["cls.bi_seq_relationship.bias"]
        _close(got.scores, torch.softmax(logits, -1)[:, 0], "ITM match probability (index 0)")
    else:
        _close(got.scores, (fused @ state["vil_logit.weight"].T + state["vil_logit.bias"])[:, 0], "vil_logit")
    _close(got.pooled["text"], pt, "t_pooler")
    _close(got.pooled["image"], pv, "v_pooler")
    tm = torch.cat([torch.ones_like(tmask[:, :1]), tmask], 1) if arch == "multitask" else tmask
    vm = images.mask[rows]
    for k in range(nt):
        _close(got.states["text"]["cls"][:, k], t_states[k][:, 0], f"text layer {k} cls")
        mean = (t_states[k] * tm[..., None]).sum(1) / tm.sum(1, keepdim=True)
        _close(got.states["text"]["mean"][:, k], mean, f"text layer {k} mean")
    for k in range(nv):
        mean = (v_states[k] * vm[..., None]).sum(1) / vm.sum(1, keepdim=True)
        _close(got.states["image"]["mean"][:, k], mean, f"image layer {k} mean")


def test_regions_as_vilbert_reads_them(folders: dict[str, Path]) -> None:
    adapter = ViLBertAdapter.load(str(folders["pretrained"] / VILBERT_WEIGHTS["pretrained"]), device="cpu")
    regions = random_region_batch(2, 4, [4, 2], seed=1)
    im = adapter.prepare_images(regions)
    assert im.features.shape == (2, 5, 2048) and im.loc5.shape == (2, 5, 5)
    np.testing.assert_allclose(im.features[1, 0].numpy(), regions.features[1, :2].mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(im.loc5[:, 0].numpy(), [[0, 0, 1, 1, 1]] * 2)
    b = regions.boxes[0, 0]
    np.testing.assert_allclose(im.loc5[0, 1].numpy(), [*b, (b[2] - b[0]) * (b[3] - b[1])], rtol=1e-6)
    assert im.mask.tolist() == [[True] * 5, [True, True, True, False, False]]


def test_the_retrieval_tasks_caps_are_the_default(folders: dict[str, Path]) -> None:
    """vilbert_tasks.yml's RetrievalCOCO/RetrievalFlickr30k cap regions at max_region_num 101 (the
    reader's global region counted: it and the first 100) and captions at max_seq_length 30
    (retreival_dataset.py keeps the first 28 word pieces, then adds [CLS] and [SEP]); the global
    feature is the mean of every region of the file, taken before the cap (_image_features_reader.py).
    The options change both; the cache records them."""
    weights = str(folders["multitask"] / VILBERT_WEIGHTS["multitask"])
    adapter = ViLBertAdapter.load(weights, device="cpu")
    assert (adapter.max_regions, adapter.max_text_length) == (101, 30)
    assert adapter.model_options() == {"score_head": "vil_logit", "task_id": 8, "max_regions": 101, "max_text_length": 30}
    regions = random_region_batch(2, 120, [120, 7], seed=2)
    im = adapter.prepare_images(regions)
    assert im.features.shape == (2, 101, 2048) and im.mask.sum(1).tolist() == [101, 8]
    np.testing.assert_allclose(im.features[0, 0].numpy(), regions.features[0].mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(im.features[0, 100].numpy(), regions.features[0, 99], rtol=1e-6)
    long = " ".join(["a red circle left of a blue square"] * 6)
    ids, mask = adapter.prepare_texts([long, "a big green star"]).take(np.array([0, 1]))
    assert int(mask[0].sum()) == 30 and ids.shape[1] == 30
    assert ids[0, 29].item() == adapter.tokenizer.sep_token_id
    small = ViLBertAdapter.load(weights, device="cpu", max_regions="3", max_text_length="8")
    assert small.prepare_images(regions).features.shape == (2, 3, 2048)
    assert small.prepare_texts([long]).take(np.array([0]))[0].shape[1] == 8
    for opts, pattern in (({"max_regions": 1}, r"^max_regions"), ({"max_text_length": "x"}, r"^max_text_length")):
        with pytest.raises(InputError, match=pattern):
            ViLBertAdapter.load(weights, device="cpu", **opts)


def test_12in1_loads_with_its_released_config_and_scores_retrieval(folders: dict[str, Path]) -> None:
    """12-in-1's weights with the released bert_base_6layer_6conect.json (which holds no
    task_specific_tokens: train_tasks.py and eval_retrieval.py switch the task token on from the
    command line) load without options: task tokens inferred from
    bert.embeddings.task_embeddings.weight, the head eval_retrieval.py ranks retrieval by
    (vil_logit, a raw logit) and task 8, RetrievalFlickr30k. The pretraining ITM head, which the
    multi-task run never trained, stays an option."""
    folder = folders["multitask"]
    assert "task_specific_tokens" not in json.loads((folder / VILBERT_CONFIG).read_text())
    adapter = ViLBertAdapter.load(str(folder / VILBERT_WEIGHTS["multitask"]), device="cpu")
    assert (adapter.score_head, adapter.task_id, adapter.score_kind) == ("vil_logit", 8, "match_logit")
    assert adapter.describe()["task"] == "RetrievalFlickr30k"
    coco = ViLBertAdapter.load(str(folder / VILBERT_WEIGHTS["multitask"]), device="cpu", task_id="7")
    assert coco.describe()["task"] == "RetrievalCOCO"
    itm = ViLBertAdapter.load(str(folder / VILBERT_WEIGHTS["multitask"]), device="cpu", score_head="itm")
    assert (itm.score_head, itm.task_id, itm.score_kind) == ("itm", 8, "match_probability")
    pre = ViLBertAdapter.load(str(folders["pretrained"] / VILBERT_WEIGHTS["pretrained"]), device="cpu")
    assert (pre.score_head, pre.task_id) == ("itm", None)


@pytest.mark.parametrize("layout", ["multi-task repository", "vilbert_beta repository", "loose files"])
def test_each_release_layout_finds_its_config(folders: dict[str, Path], tmp_path: Path, layout: str) -> None:
    """vilbert-multi-task's README links pretrained_model.bin and multi_task_model.bin and runs
    them with config/bert_base_6layer_6conect.json; vilbert_beta's runs
    save/bert_base_6_layer_6_connect/pytorch_model_9.bin with the same config file: each finds
    the config with no --model-config."""
    import shutil

    cfg = folders["pretrained"] / VILBERT_CONFIG
    src = folders["pretrained"] / VILBERT_WEIGHTS["pretrained"]
    weights = {"multi-task repository": tmp_path / "save" / "pretrained_model.bin",
               "vilbert_beta repository": tmp_path / "save" / "bert_base_6_layer_6_connect" / "pytorch_model_9.bin",
               "loose files": tmp_path / "pretrained_model.bin"}[layout]
    weights.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(src, weights)
    config = tmp_path / ("bert_base_6layer_6conect.json" if layout == "loose files" else VILBERT_CONFIG)
    config.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(cfg, config)
    adapter = ViLBertAdapter.load(str(weights), device="cpu", tokenizer=str(folders["pretrained"] / "save" / "tokenizer"))
    assert adapter.input_fingerprints()["config"] == "sha256:" + sha256_file(config)
    config.unlink()
    with pytest.raises(InputError, match=r"^model_config: .*bert_base_6layer_6conect\.json"):
        ViLBertAdapter.load(str(weights), device="cpu", tokenizer=str(folders["pretrained"] / "save" / "tokenizer"))


def test_a_config_without_a_size_is_refused(folders: dict[str, Path], tmp_path: Path) -> None:
    """vilbert-multi-task's BertConfig.from_dict starts from its class defaults (vilbert/vilbert.py:
    v_num_attention_heads 12, where the released config says 8), so a config that leaves a size
    out builds another model over the same weights: refused, naming the key."""
    cfg = json.loads((folders["pretrained"] / VILBERT_CONFIG).read_text())
    for key in ("v_num_attention_heads", "bi_num_attention_heads", "t_biattention_id", "v_feature_size"):
        path = tmp_path / f"no-{key}.json"
        path.write_text(json.dumps({k: v for k, v in cfg.items() if k != key}))
        with pytest.raises(InputError, match=rf"^model_config .*lacks {key};"):
            ViLBertAdapter.load(str(folders["pretrained"] / VILBERT_WEIGHTS["pretrained"]), device="cpu",
                                model_config=str(path))


def test_the_fixture_holds_the_original_classes_keys(folders: dict[str, Path]) -> None:
    """The tiny release files hold every key of the original classes (BertForMultiModalPreTraining,
    VILBertForVLTasks: listed from vilbert/vilbert.py built at the tiny config), no ``module.``
    prefix, the MLM decoder tied to the word embedding."""
    pre = torch.load(folders["pretrained"] / VILBERT_WEIGHTS["pretrained"], weights_only=True)
    multi = torch.load(folders["multitask"] / VILBERT_WEIGHTS["multitask"], weights_only=True)
    heads = {k.split(".")[0] + ("." + k.split(".")[1] if k.startswith("cls.") else "") for k in multi
             if not k.startswith("bert.")}
    assert heads == {"cls.predictions", "cls.bi_seq_relationship", "cls.imagePredictions", "vil_prediction",
                     "vil_prediction_gqa", "vil_binary_prediction", "vil_logit", "vil_tri_prediction", "vision_logit",
                     "linguisic_logit"}
    assert set(multi) - set(pre) == {k for k in multi if not k.startswith(("bert.", "cls."))} | {
        "bert.embeddings.task_embeddings.weight"}
    assert tuple(multi["bert.embeddings.task_embeddings.weight"].shape) == (20, 32)
    assert tuple(multi["vil_prediction.logit_fc.3.weight"].shape) == (3129, 32)
    assert not any(k.startswith("module.") for k in [*pre, *multi])
    assert torch.equal(pre["cls.predictions.decoder.weight"], pre["bert.embeddings.word_embeddings.weight"])
    assert (len(pre), len(multi)) == (197, 224)  # the original classes at this config hold 197 and 224 keys


def test_options_and_refusals(folders: dict[str, Path], tmp_path: Path) -> None:
    pre = str(folders["pretrained"] / VILBERT_WEIGHTS["pretrained"])
    multi = str(folders["multitask"] / VILBERT_WEIGHTS["multitask"])
    cases = [
        (multi, {"task_id": 20}, r"^task_id"),
        (pre, {"task_id": 1}, r"^task_id: this checkpoint has no task tokens"),
        (pre, {"score_head": "vil_logit"}, r"^score_head: .*no vil_logit head"),
        (pre, {"score_head": "nsp"}, r"^score_head: "),
        (pre, {"model_config": str(tmp_path / "none.json")}, r"^model_config: .* is not a file"),
    ]
    for path, opts, pattern in cases:
        with pytest.raises(InputError, match=pattern):
            ViLBertAdapter.load(path, device="cpu", **opts)
    # a config that says task tokens over weights without them (or the reverse): the weights decide, the config is refused
    cfg = json.loads((folders["pretrained"] / VILBERT_CONFIG).read_text())
    for path, flag, said in ((pre, True, "lack"), (multi, False, "hold")):
        stated = tmp_path / f"tokens-{flag}.json"
        stated.write_text(json.dumps({**cfg, "task_specific_tokens": flag}))
        with pytest.raises(InputError, match=rf"^model_config .*task_specific_tokens is {str(flag).lower()}, but the "
                                             rf"weights {said} bert\.embeddings\.task_embeddings"):
            ViLBertAdapter.load(path, device="cpu", model_config=str(stated))
    # a state dict of another model
    other = tmp_path / "other.bin"
    torch.save({"uniter.embeddings.word_embeddings.weight": torch.zeros(2, 2)}, other)
    (tmp_path / "other.json").write_text((folders["pretrained"] / VILBERT_CONFIG).read_text())
    with pytest.raises(InputError, match=r"^checkpoint: .*not a ViLBERT state dict"):
        ViLBertAdapter.load(str(other), device="cpu")


def test_cli_eval_valse(folders: dict[str, Path], valse_dir: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from vlprobe.cli import app

    runner = CliRunner()
    regions = tmp_path / "r.h5"
    res = runner.invoke(app, ["fixtures", "regions", "--dataset", "valse", "--data-dir", str(valse_dir), "--out",
                              str(regions), "--subsets", "counting-hard", "--limit", "4", "--boxes", "5"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["eval", "valse", "--data-dir", str(valse_dir), "--subsets", "counting-hard", "--limit", "4",
                              "--model", "vilbert", "--checkpoint", str(folders["multitask"] / VILBERT_WEIGHTS["multitask"]),
                              "--regions", str(regions), "--device", "cpu", "--bootstrap", "0", "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    assert "acc_r" in res.stdout
