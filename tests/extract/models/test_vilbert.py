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
from vlprobe.fixtures.vilbert import write_tiny_vilbert
from vlprobe.validation import InputError

_STREAMS = {"text": ("pair", kinds("embed", ("self", 2), ("coattn", 1), ("self", 1), ("coattn", 1), ("self", 1)), "token0"),
            "image": ("pair", kinds("embed", ("coattn", 1), ("self", 1), ("coattn", 1), ("self", 1)), "token0")}
_SITES = {"text": ("bert.embeddings", "text"), "image": ("bert.v_embeddings", "image")}
# The adapter contract (tests/extract/models/test_adapter_contract.py) checks both checkpoint kinds.
CONTRACTS = [
    Case("vilbert", "cross", "regions", _STREAMS, _SITES, checkpoint="vilbert.bin", wrong="uniter", feature_dim=2048,
         weights=("vilbert.bin",), image_prefix=1),
    Case("vilbert-multitask", "cross", "regions", _STREAMS, _SITES, checkpoint="vilbert.bin", wrong="uniter",
         feature_dim=2048, weights=("vilbert.bin",), model="vilbert", fixture_options={"arch": "multitask"},
         load_options={"task_id": 8, "score_head": "vil_logit"}, text_prefix=1, image_prefix=1),
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
    folder = folders[arch]
    opts: dict[str, Any] = {"task_id": 8, "score_head": "vil_logit"} if arch == "multitask" else {}
    adapter = ViLBertAdapter.load(str(folder / "vilbert.bin"), device="cpu", **opts)
    state = {k.removeprefix("module."): v.float() for k, v in torch.load(folder / "vilbert.bin", weights_only=True).items()}
    cfg = json.loads((folder / "vilbert.json").read_text())
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
                                                       images.mask[rows], opts.get("task_id"))
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
    adapter = ViLBertAdapter.load(str(folders["pretrained"] / "vilbert.bin"), device="cpu")
    regions = random_region_batch(2, 4, [4, 2], seed=1)
    im = adapter.prepare_images(regions)
    assert im.features.shape == (2, 5, 2048) and im.loc5.shape == (2, 5, 5)
    np.testing.assert_allclose(im.features[1, 0].numpy(), regions.features[1, :2].mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(im.loc5[:, 0].numpy(), [[0, 0, 1, 1, 1]] * 2)
    b = regions.boxes[0, 0]
    np.testing.assert_allclose(im.loc5[0, 1].numpy(), [*b, (b[2] - b[0]) * (b[3] - b[1])], rtol=1e-6)
    assert im.mask.tolist() == [[True] * 5, [True, True, True, False, False]]


def test_options_and_refusals(folders: dict[str, Path], tmp_path: Path) -> None:
    pre, multi = str(folders["pretrained"] / "vilbert.bin"), str(folders["multitask"] / "vilbert.bin")
    assert ViLBertAdapter.load(multi, device="cpu", task_id="8").model_options() == {"score_head": "itm", "task_id": 8}
    cases = [
        (multi, {}, r"^task_id: .*task token"),
        (multi, {"task_id": 20}, r"^task_id"),
        (pre, {"task_id": 1}, r"^task_id: this checkpoint has no task tokens"),
        (pre, {"score_head": "vil_logit"}, r"^score_head: .*no vil_logit head"),
        (pre, {"score_head": "nsp"}, r"^score_head: "),
        (pre, {"model_config": str(tmp_path / "none.json")}, r"^model_config: .* is not a file"),
    ]
    for path, opts, pattern in cases:
        with pytest.raises(InputError, match=pattern):
            ViLBertAdapter.load(path, device="cpu", **opts)
    # the multitask config against the pretrained weights: a task embedding they lack
    with pytest.raises(InputError, match=r"^checkpoint: .*lacks .*task_embeddings"):
        ViLBertAdapter.load(pre, device="cpu", model_config=str(folders["multitask"] / "vilbert.json"), task_id=1)
    # a state dict of another model
    other = tmp_path / "other.bin"
    torch.save({"uniter.embeddings.word_embeddings.weight": torch.zeros(2, 2)}, other)
    (tmp_path / "other.json").write_text((folders["pretrained"] / "vilbert.json").read_text())
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
                              "--model", "vilbert", "--checkpoint", str(folders["multitask"] / "vilbert.bin"),
                              "--model-option", "task_id=8", "--regions", str(regions), "--device", "cpu",
                              "--bootstrap", "0", "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    assert "acc_r" in res.stdout
