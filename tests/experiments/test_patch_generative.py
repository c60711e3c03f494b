"""Activation patching and concept erasure through a generative model's language-model layers
(tiny LLaVA and Qwen2-VL), end to end through the command line, against an independent
computation: the model's own ``forward`` on one pair at a time (the prompt rendered by the chat
template, ``tests/extract/models/generative_checks``) with the edit written here as plain torch
hooks on transformers' decoder layers, at positions found here from the token ids (the answer
position: the last prompt token; the image tokens: the placeholder's id; the swapped words: where
the two captions' sequences differ; the caption: its characters in the rendered prompt).

The fixtures' final norm is scaled by :data:`SHARPEN` in a copy: the random head's next-token
distribution is near uniform (P(Yes) about 1/V, two captions' scores 1e-7 apart), so the effects
of an edit would sit closer to float32 noise; sharpened, they are 1e4 times the two paths' gap.
"""

from __future__ import annotations

import csv
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from tests.extract.models import generative_checks as checks
from vlprobe.cli import app
from vlprobe.data.loading import load_dataset
from vlprobe.registry import MODELS

GENERATIVE = ("llava", "qwen2-vl")
N_ITEMS = 2
SHARPEN = 30.0
#: The means over cases (score_change, full_change) of two float32 paths (a padded batch of
#: recipients and donors through the adapter's pass, one unpadded sequence through the model's
#: forward) agree to 1e-3 of the full change: their scores differ by summation order only (measured:
#: about 1e-12 on scores of 3e-5, 1e-4 of the full change of 2e-8 between two captions).
TOL = 1e-3
#: ... or to a few float32 steps of the scores themselves, whichever is larger: a change between
#: two captions can be as small as 1.8e-8 on scores of 3e-5 (LLaVA), where 1e-3 of it (1.8e-11) is
#: below the two paths' rounding (measured: 3.3e-11, about 9 float32 steps of 3e-5). 64 steps
#: (7.6e-6 of the score) leave room for other thread counts and BLAS builds.
SCORE_STEPS = 64 * float(np.finfo(np.float32).eps)


@pytest.fixture(scope="module")
def sharp(tmp_path_factory: pytest.TempPathFactory, tiny_llava: Path, tiny_qwen2_vl: Path) -> dict[str, Path]:
    from safetensors import safe_open
    from safetensors.torch import save_file

    out = {}
    for name, src in (("llava", tiny_llava), ("qwen2-vl", tiny_qwen2_vl)):
        dst = tmp_path_factory.mktemp("sharp") / name
        shutil.copytree(src, dst)
        found = 0
        for shard in sorted(dst.glob("*.safetensors")):  # the release's layout: several shards
            with safe_open(str(shard), "pt") as f:
                meta = f.metadata()
                weights = {k: f.get_tensor(k) for k in f.keys()}
            keys = [k for k in weights if k.endswith("model.norm.weight") and "vis" not in k]
            for key in keys:
                weights[key] = weights[key] * SHARPEN
            if keys:
                save_file(weights, str(shard), metadata=meta)
            found += len(keys)
        assert found == 1, f"{name}: {found} final norms"
        out[name] = dst
    return out


def _pixels(adapter: Any, image: Any) -> dict[str, Any]:
    if adapter.name == "llava":
        from vlprobe.extract.models.llava import pad_to_square

        return {"pixel_values": adapter.processor(images=[pad_to_square(image, adapter.processor.image_mean)],
                                                  return_tensors="pt")["pixel_values"]}
    got = adapter.processor(images=[image], return_tensors="pt")
    return {"pixel_values": got["pixel_values"], "image_grid_thw": got["image_grid_thw"]}


def _n_image_tokens(adapter: Any, pixels: dict[str, Any]) -> int:
    if "image_grid_thw" in pixels:
        return int(pixels["image_grid_thw"].prod()) // adapter.model.config.vision_config.spatial_merge_size ** 2
    vc = adapter.model.config.vision_config
    return (vc.image_size // vc.patch_size) ** 2  # the patches, without the class token ("default" strategy)


def _inputs(adapter: Any, caption: str, image: Any) -> tuple[torch.Tensor, dict[str, Any], list[int]]:
    pixels = _pixels(adapter, image)
    return checks.reference_inputs(adapter, caption, image, _n_image_tokens(adapter, pixels), lambda _im: pixels)


def _edited_score(adapter: Any, inputs: tuple[torch.Tensor, dict[str, Any], list[int]], layer: int,
                  edit: Any) -> float:
    """exp(mean log P(scored tokens)) with layer ``layer``'s states replaced by ``edit(states (T, H))``:
    layer 0 = the decoder's input (a pre-hook on the first block), layer l its block l - 1's output."""
    blocks = adapter.model.model.language_model.layers
    if layer == 0:
        def pre(_m: Any, args: tuple) -> tuple:
            return (edit(args[0][0])[None], *args[1:])
        handle = blocks[0].register_forward_pre_hook(pre)
    else:
        def post(_m: Any, _a: Any, out: Any) -> Any:
            h = out if isinstance(out, torch.Tensor) else out[0]
            h = edit(h[0])[None]
            return h if isinstance(out, torch.Tensor) else (h, *out[1:])
        handle = blocks[layer - 1].register_forward_hook(post)
    try:
        return float(np.exp(checks.forward_logprobs(adapter, *inputs).mean()))
    finally:
        handle.remove()


def _states(adapter: Any, inputs: tuple[torch.Tensor, dict[str, Any], list[int]], layer: int) -> torch.Tensor:
    kept: list[torch.Tensor] = []

    def keep(h: torch.Tensor) -> torch.Tensor:
        kept.append(h.detach().clone())
        return h

    _edited_score(adapter, inputs, layer, keep)
    return kept[0]


def _read(csv_path: Path) -> dict[tuple[str, int, str, str], tuple[float, int]]:
    with csv_path.open() as f:
        return {(r["stream"], int(r["layer"]), r["probe"], r["metric"]): (float(r["value"]), int(r["n"]))
                for r in csv.DictReader(f) if r["subset"] == "all" and r["layer"] != ""}


def _items(data: Path, n: int) -> list[Any]:
    return [it for it in load_dataset("winoground", data).items if len(it.captions) >= 2][:n]


@pytest.mark.slow  # one patch run per model on CPU, and its reference one pair at a time
@pytest.mark.parametrize("model", GENERATIVE)
def test_patch_equals_hooks_on_the_models_own_forward(model: str, sharp: dict[str, Path], synthetic_dir: Path,
                                                      tmp_path: Path) -> None:
    layers = (0, 2, 3)
    out = tmp_path / "results"
    res = CliRunner().invoke(app, [
        "run", "patch", "--model", model, "--checkpoint", str(sharp[model]), "--dataset", "winoground",
        "--data-dir", str(synthetic_dir), "--limit", str(N_ITEMS), "--layers", ",".join(map(str, layers)),
        "--groups", "all,swapped,cls", "--bootstrap", "10", "--device", "cpu", "--out", str(out), "--quiet",
    ])
    assert res.exit_code == 0, res.output
    (csv_path,) = (out / "patch").glob(f"{model}@*.csv")
    got = _read(csv_path)
    assert {k[0] for k in got} == {"caption", "image", "joint"}  # Winoground: every stream by default

    adapter = MODELS.get(model).load(str(sharp[model]), device="cpu")
    items = _items(synthetic_dir, N_ITEMS)
    pics = [[it.images[j].load() for j in (0, 1)] for it in items]
    inputs = {(n, k, j): _inputs(adapter, it.captions[k].text, pics[n][j])
              for n, it in enumerate(items) for k in (0, 1) for j in (0, 1)}
    plain = {key: _edited_score(adapter, x, 0, lambda h: h) for key, x in inputs.items()}

    def positions(stream: str, group: str, rec: torch.Tensor, don: torch.Tensor, n_scored: int) -> tuple | None:
        """(recipient positions, donor positions) of a group, found from the ids; None: undefined."""
        if stream == "joint" and group == "cls":  # the answer position: the prompt's last token
            return [len(rec) - n_scored - 1], [len(don) - n_scored - 1]
        if stream == "image":
            r, d = (torch.nonzero(x == adapter.image_token_id)[:, 0].tolist() for x in (rec, don))
            return (r, d) if len(r) == len(d) else None
        if len(rec) != len(don):
            return None
        if group == "swapped":
            at = torch.nonzero(rec != don)[:, 0].tolist()
            return at, at
        at = list(range(len(rec)))  # joint, all
        return at, at

    checked, moved = 0, []
    for stream, group in (("joint", "cls"), ("joint", "all"), ("caption", "swapped"), ("image", "all")):
        for layer in layers:
            change, full = [], []
            for (n, k, j), rec in inputs.items():
                donor_key = (n, 1 - k, j) if stream != "image" else (n, k, 1 - j)
                don = inputs[donor_key]
                pos = positions(stream, group, rec[0][0], don[0][0], len(rec[2]))
                if pos is None:
                    continue
                donor_states = _states(adapter, don, layer)

                def patch(h: torch.Tensor, pos: tuple = pos, donor_states: torch.Tensor = donor_states) -> torch.Tensor:
                    h = h.clone()
                    h[pos[0]] = donor_states[pos[1]]
                    return h

                own, donor = plain[(n, k, j)], plain[donor_key]
                change.append((_edited_score(adapter, rec, layer, patch) - own) * np.sign(donor - own))
                full.append(abs(donor - own))
            key = (stream, layer, f"positions={group}")
            assert len(change) > 0 and np.mean(full) > 0, key  # the cases differ: the comparison means something
            tol = max(TOL * np.mean(full), SCORE_STEPS * np.mean(np.abs(list(plain.values()))))
            assert got[(*key, "score_change")][1] == len(change), key
            assert got[(*key, "score_change")][0] == pytest.approx(np.mean(change), abs=tol), key
            assert got[(*key, "full_change")][0] == pytest.approx(np.mean(full), abs=tol), key
            moved.append(abs(np.mean(change)) > 10 * tol)
            checked += 1
            if group == "all":  # every input position from the donor at layer 0: the donor's score
                assert layer != 0 or got[(*key, "recovered")][0] == pytest.approx(1.0, abs=1e-3), key
    assert checked == 12
    assert sum(moved) >= 8  # most edits move the score far beyond the tolerance (not a comparison of zeros)


def _caption_positions(adapter: Any, caption: str, ids: torch.Tensor) -> list[int]:
    """The caption's tokens in a pair's input, found by decoding: the latest start and then the
    shortest window whose text is the caption (quotes and spaces around it aside)."""
    tok, seq = adapter.tokenizer, ids.tolist()
    for s in range(len(seq) - 1, -1, -1):
        for e in range(s + 1, min(len(seq), s + 40) + 1):
            if tok.decode(seq[s:e]).strip().strip('"').strip() == caption:
                return list(range(s, e))
    raise AssertionError(f"caption {caption!r} not found")


def _winoground(s: np.ndarray) -> dict[str, np.ndarray]:
    """s[n, k, j]: caption k of item n with image j -> per-item text, image, group outcomes."""
    text = (s[:, 0, 0] > s[:, 1, 0]) & (s[:, 1, 1] > s[:, 0, 1])
    image = (s[:, 0, 0] > s[:, 0, 1]) & (s[:, 1, 1] > s[:, 1, 0])
    return {"text": text, "image": image, "group": text & image}


@pytest.mark.slow  # one erasure run per model on CPU, and its reference one pair at a time
@pytest.mark.parametrize("model", GENERATIVE)
def test_erasure_at_the_caption_tokens_equals_hooks_on_the_models_own_forward(
    model: str, sharp: dict[str, Path], synthetic_dir: Path, tmp_path: Path,
) -> None:
    """LEACE fitted on the caption tokens' states of every pair and applied there while the language
    model runs on: the states the run fits on, the eraser and the erased scores, against the model's
    own forward with the eraser applied by a hook at the caption's positions found here."""
    from concept_erasure import LeaceEraser

    from vlprobe.experiments.erasure import _CrossRuns, fit_token_eraser

    n_items, layer = 3, 1
    out = tmp_path / "results"
    res = CliRunner().invoke(app, [
        "run", "erasure", "--model", model, "--checkpoint", str(sharp[model]), "--dataset", "winoground",
        "--data-dir", str(synthetic_dir), "--limit", str(n_items), "--layers", f"{layer},-1", "--seeds", "1",
        "--bootstrap", "10", "--device", "cpu", "--out", str(out), "--quiet",
    ])
    assert res.exit_code == 0, res.output
    (csv_path,) = (out / "erasure").glob(f"{model}@*.csv")
    with csv_path.open() as f:
        rows = [r for r in csv.DictReader(f) if "." not in r["metric"]]
    assert {r["stream"] for r in rows} == {"caption"}
    value = {(r["layer"], r["task"], r["metric"]): float(r["value"]) for r in rows if r["seed"] in ("", "0")}

    adapter = MODELS.get(model).load(str(sharp[model]), device="cpu")
    items = _items(synthetic_dir, n_items)
    keys = [(n, k, j) for n in range(n_items) for k in (0, 1) for j in (0, 1)]  # the run's pair order
    inputs = {(n, k, j): _inputs(adapter, items[n].captions[k].text, items[n].images[j].load()) for n, k, j in keys}
    where = {key: _caption_positions(adapter, items[key[0]].captions[key[1]].text, x[0][0]) for key, x in inputs.items()}
    plain = np.asarray([_edited_score(adapter, inputs[key], 0, lambda h: h) for key in keys]).reshape(n_items, 2, 2)

    # the states the run fits on: the caption tokens' at the layer, pair by pair
    runs = _CrossRuns(adapter, items, 2, 5, None, "caption")
    states, masks = runs.states([layer])
    got_states = torch.cat([h[m.bool()] for h, m in zip(states[layer], masks, strict=True)])
    ref_states = torch.cat([_states(adapter, inputs[key], layer)[where[key]] for key in keys])
    # float32 states of two paths (padded batch vs one sequence): 1e-5 of their scale
    torch.testing.assert_close(got_states, ref_states, atol=1e-5 * float(ref_states.abs().max()), rtol=0)
    labels = torch.tensor([k for _, k, _ in keys])
    z = torch.cat([labels[r].expand(len(where[key])) for r, key in enumerate(keys)])
    ref_eraser = LeaceEraser.fit(ref_states.double(), z)
    eraser = fit_token_eraser(states[layer], masks, runs.labels)

    def erase(h: torch.Tensor, at: list[int]) -> torch.Tensor:
        h = h.clone()
        h[at] = ref_eraser(h[at].double()).to(h.dtype)
        return h

    erased_ref = np.asarray([_edited_score(adapter, inputs[key], layer, lambda h, at=where[key]: erase(h, at))
                             for key in keys]).reshape(n_items, 2, 2)
    erased = runs.scores(layer, eraser)
    gap = np.abs(erased_ref - plain).max()
    assert gap > 0  # erasing the concept moves the scores
    # the scores of two float32 paths with two erasers fitted on their own (equal to 1e-5) states
    np.testing.assert_allclose(erased, erased_ref, atol=1e-2 * gap, rtol=0)
    np.testing.assert_allclose(runs.scores(), plain, atol=1e-2 * gap, rtol=0)
    # the command's rows: the outcomes of those scores (percent of items)
    for metric, v in _winoground(plain).items():
        assert value[("", "target", metric)] == pytest.approx(100 * v.mean()), metric
    for metric, v in _winoground(erased_ref).items():
        assert value[(str(layer), "target", metric)] == pytest.approx(100 * v.mean()), metric
    last = str(adapter.streams["caption"].n_layers - 1)  # the caption's last states feed nothing the score reads
    for metric, v in _winoground(plain).items():
        assert value[(last, "target", metric)] == pytest.approx(100 * v.mean()), metric
