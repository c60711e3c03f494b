"""The adapter contract: every registered model adapter, loaded from its own tiny fixture, passes
the same checks (in the spirit of scikit-learn's ``parametrize_with_checks``).

A new adapter declares ``CONTRACT = Case(...)`` in its own test module (its golden streams, where
its embedding outputs come from, a checkpoint of another model type; see
``tests/extract/models/contract.py``); ``test_every_adapter_has_a_case`` fails until it does.

Floating point: comparisons between two computation paths (a batch vs its rows one by one, one
layer order vs another, left vs right padding) use tolerances, never bit equality: different
batch shapes and paddings make BLAS pick other kernels and summation orders, and those differ
between CPUs. Only the fixture writer run twice with the same seed, the same code on the same
machine, must give identical tensors.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from tests.extract.helpers import random_region_batch
from tests.extract.models.contract import Case, collect_cases
from vlprobe.extract.model_inputs import model_kind
from vlprobe.extract.models.base import Adapter, CrossEncoder, DualEncoder
from vlprobe.extract.models.blind import TextScorer
from vlprobe.extract.models.pooling import pool_states
from vlprobe.extract.regions.store import RegionBatch
from vlprobe.fixtures.staging import FIXTURE_MARKER
from vlprobe.registry import FIXTURES, MODELS
from vlprobe.validation import InputError

TEXTS = ["a red circle left of a blue square", "a square", "two green triangles above a small yellow star"]
# Tolerance of two computation paths of the same float32 model (see the module docstring).
ATOL, RTOL = 1e-5, 1e-4


CASES = collect_cases()


def _registered_adapters() -> list[str]:
    return [n for n in MODELS.names() if isinstance(MODELS.get(n), type) and issubclass(MODELS.get(n), Adapter)]


def test_every_adapter_has_a_case() -> None:
    """Every registered model is an adapter with a contract case and a fixture writer, or a blind text scorer."""
    adapters = _registered_adapters()
    covered = {case.registered for case in CASES.values()}
    assert sorted(adapters) == sorted(covered), "add a Case for each new adapter"
    for name in MODELS.names():
        cls = MODELS.get(name)
        assert name in covered or (isinstance(cls, type) and issubclass(cls, TextScorer)), name
    assert covered <= set(FIXTURES.names())


# -- session-wide: each fixture written once, each adapter loaded once ---------------------------


@pytest.fixture(scope="session")
def fixture_dirs(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, int], Path]:
    """``fixture_dirs(name, seed)``: the fixture of a model, written once per (name, seed)."""
    made: dict[tuple[str, int], Path] = {}
    root = tmp_path_factory.mktemp("contract")

    def get(name: str, seed: int = 0) -> Path:
        if (name, seed) not in made:
            case = CASES[name]
            made[(name, seed)] = FIXTURES.get(case.registered)(root / f"{name}-{seed}", seed, **case.fixture_options)
        return made[(name, seed)]

    return get


def _checkpoint(case: Case, folder: Path) -> str:
    return str(folder / case.checkpoint) if case.checkpoint else str(folder)


@pytest.fixture(scope="session")
def adapters(fixture_dirs: Callable[[str, int], Path]) -> Callable[[str], Adapter]:
    """``adapters(name)``: the adapter loaded from its seed-0 fixture (float32, CPU), once."""
    loaded: dict[str, Adapter] = {}

    def get(name: str) -> Adapter:
        if name not in loaded:
            case = CASES[name]
            loaded[name] = MODELS.get(case.registered).load(_checkpoint(case, fixture_dirs(name)), device="cpu",
                                                            dtype="float32", **case.load_options)
        return loaded[name]

    return get


def _images(n: int) -> list[Image.Image]:
    """RGB images of different sizes (the processors resize them), seeded."""
    sizes = [(40, 48), (32, 32), (50, 36), (45, 45)]
    return [Image.fromarray(np.random.default_rng(i).integers(0, 256, size=(*sizes[i % 4], 3), dtype=np.uint8))
            for i in range(n)]


def _regions(n: int, dim: int) -> RegionBatch:
    """Random region features: 6 boxes, image i has 6 - i real ones (the rest padding)."""
    return random_region_batch(n, 6, [6 - i for i in range(n)], seed=7, dim=dim)


def _image_inputs(case: Case, n: int) -> Any:
    return _regions(n, case.feature_dim) if case.image_input == "regions" else _images(n)


def _single(adapter: Adapter, stream: str) -> bool:
    return adapter.streams[stream].modality in ("text", "image")


def _encode(adapter: Adapter, case: Case, stream: str, layers: list[int], rows: list[int] | None = None) -> Any:
    """One ``text``/``image`` stream batch over ``rows`` of the test inputs."""
    rows = list(range(3)) if rows is None else rows
    if adapter.streams[stream].modality == "text":
        return adapter.encode(stream, [TEXTS[r] for r in rows], layers)
    return adapter.encode(stream, [_images(3)[r] for r in rows], layers)


def _pairs(adapter: CrossEncoder, case: Case, layers: dict[str, list[int]] | None, rows: list[int] | None = None,
           poolings: tuple[str, ...] = ("cls", "mean", "max")) -> Any:
    """``encode_pairs`` over pairs (image r, text r) of ``rows``, tables built from all three."""
    rows = list(range(3)) if rows is None else rows
    texts = adapter.prepare_texts(TEXTS)
    images = adapter.prepare_images(_image_inputs(case, 3))
    idx = np.asarray(rows, dtype=np.int64)
    return adapter.encode_pairs(texts, images, idx, idx, layers, poolings)


def _all_layers(adapter: Adapter, stream: str) -> list[int]:
    return list(range(adapter.streams[stream].n_layers))


def _pair_layers(adapter: CrossEncoder, per_stream: Callable[[str], list[int]]) -> dict[str, list[int]]:
    return {s: per_stream(s) for s in adapter.pair_streams}


def _pooled(batch: Any, spec: Any) -> dict[str, torch.Tensor]:
    """A stream batch's token states pooled as the runner pools them (comparable across paddings)."""
    poolings = [p for p in spec.poolings if p != "pooled"]
    out = pool_states(batch.hidden.float(), batch.mask, batch.cls_index, poolings)
    if batch.pooled is not None:
        out["pooled"] = batch.pooled.float()
    return out


def _close(actual: Any, expected: Any, what: str, atol: float = ATOL, rtol: float = RTOL) -> None:
    torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol, msg=lambda m: f"{what}: {m}")


params = pytest.mark.parametrize("name", sorted(CASES))


# -- the checks ---------------------------------------------------------------------------------------


@params
def test_registered_and_of_its_kind(name: str, adapters: Callable[[str], Adapter]) -> None:
    case = CASES[name]
    cls = MODELS.get(case.registered)
    assert model_kind(cls) == case.kind
    assert issubclass(cls, DualEncoder if case.kind == "dual" else CrossEncoder)
    assert cls.name == case.registered
    assert cls.image_input == case.image_input
    adapter = adapters(name)
    assert isinstance(adapter, cls)
    assert adapter.score_kind, "an adapter says what its score is"
    json.dumps(adapter.describe())  # recorded in the cache: JSON-serialisable


@params
def test_golden_streams_and_layer_names(name: str, adapters: Callable[[str], Adapter]) -> None:
    adapter = adapters(name)
    got = {s: (spec.modality, spec.layer_kinds, spec.cls_rule) for s, spec in adapter.streams.items()}
    assert got == CASES[name].streams
    for spec in adapter.streams.values():
        assert spec.layer_kinds[0] == "embed"
        assert ("cls" in spec.poolings) == (spec.cls_rule != "none")


def _module(model: Any, path: str) -> torch.nn.Module:
    for part in path.split("."):
        model = getattr(model, part)
    return model


@params
def test_layer_0_is_the_embedding_output(name: str, adapters: Callable[[str], Adapter]) -> None:
    case = CASES[name]
    adapter = adapters(name)
    for stream, (path, rows) in case.embeddings.items():
        captured: list[torch.Tensor] = []
        hook = _module(adapter.model, path).register_forward_hook(lambda m, a, out, seen=captured: seen.append(out))
        try:
            if _single(adapter, stream):
                got = _encode(adapter, case, stream, [0]).hidden[:, 0]
                want = captured[-1]
            else:
                layers = _pair_layers(adapter, lambda s: [0])
                out = _pairs(adapter, case, layers, poolings=("mean",))
                got = out.states[stream]["mean"][:, 0]
                if rows in ("caption", "image_features"):
                    want = _joint_view(captured[-1], out.positions, adapter.position_columns, rows)
                    _close(got.float(), want.float(), f"{name}/{stream} layer 0")
                    continue
                if rows == "text":
                    _, mask = adapter.prepare_texts(TEXTS).take(np.arange(3))
                else:
                    mask = torch.from_numpy(_regions(3, case.feature_dim).mask)
                prefix = case.text_prefix if rows == "text" else case.image_prefix
                mask = torch.cat([torch.ones_like(mask[:, :prefix]), mask], dim=1) if prefix else mask
                emb = captured[-1]
                want = pool_states(emb[:, None], mask[:, : emb.shape[1]], None, ["mean"])["mean"][:, 0]
        finally:
            hook.remove()
        _close(got.float(), want.float(), f"{name}/{stream} layer 0")


def _joint_view(emb: torch.Tensor, positions: torch.Tensor, columns: tuple[str, ...], rows: str) -> torch.Tensor:
    """The mean over a joint-sequence view's tokens of a module's captured output (pair r = image r)."""
    pos = {c: positions[:, k] for k, c in enumerate(columns)}
    if rows == "caption":  # emb: (B, T, H) over the joint sequences; the caption's positions
        return torch.stack([emb[r, int(pos["caption_start"][r]):int(pos["caption_stop"][r])].mean(0)
                            for r in range(emb.shape[0])])
    counts = (pos["image_stop"] - pos["image_start"]).tolist()  # features per image, in image order
    per_image = list(emb) if emb.ndim == 3 else list(torch.split(emb, counts))
    return torch.stack([f.mean(0) for f in per_image])


@params
def test_layers_come_in_the_order_asked(name: str, adapters: Callable[[str], Adapter]) -> None:
    case = CASES[name]
    adapter = adapters(name)
    for stream in adapter.streams:
        if not _single(adapter, stream):
            continue
        n = adapter.streams[stream].n_layers
        forward = _encode(adapter, case, stream, list(range(n))).hidden
        backward = _encode(adapter, case, stream, list(range(n - 1, -1, -1))).hidden
        _close(backward, forward.flip(1), f"{name}/{stream}")
    if isinstance(adapter, CrossEncoder):
        asked = _pair_layers(adapter, lambda s: [adapter.streams[s].n_layers - 1, 0, 1])
        ordered = _pair_layers(adapter, lambda s: [0, 1, adapter.streams[s].n_layers - 1])
        a, b = _pairs(adapter, case, asked), _pairs(adapter, case, ordered)
        for stream, by_pooling in a.states.items():
            for p, v in by_pooling.items():
                _close(v, b.states[stream][p][:, [2, 0, 1]], f"{name}/{stream}/{p}")
        # negative numbers count from the last layer
        neg = _pairs(adapter, case, _pair_layers(adapter, lambda s: [-1]))
        for stream, by_pooling in neg.states.items():
            _close(by_pooling["mean"], b.states[stream]["mean"][:, 2:], f"{name}/{stream} layer -1")


@params
def test_states_do_not_depend_on_the_rest_of_the_batch(name: str, adapters: Callable[[str], Adapter]) -> None:
    case = CASES[name]
    adapter = adapters(name)
    for stream, spec in adapter.streams.items():
        if not _single(adapter, stream):
            continue
        layers = _all_layers(adapter, stream)
        together = _pooled(_encode(adapter, case, stream, layers), spec)
        for r in range(3):
            alone = _pooled(_encode(adapter, case, stream, layers, [r]), spec)
            for p in together:
                _close(alone[p][0], together[p][r], f"{name}/{stream}/{p} row {r}")
    if isinstance(adapter, CrossEncoder):
        layers = _pair_layers(adapter, lambda s: _all_layers(adapter, s))
        together = _pairs(adapter, case, layers)
        for r in range(3):
            alone = _pairs(adapter, case, layers, [r])
            _close(alone.scores[0], together.scores[r], f"{name} score of pair {r}")
            for stream, by_pooling in together.states.items():
                for p, v in by_pooling.items():
                    _close(alone.states[stream][p][0], v[r], f"{name}/{stream}/{p} pair {r}")


@params
def test_left_padding_tokenizer_gives_the_same_states(name: str, adapters: Callable[[str], Adapter]) -> None:
    case = CASES[name]
    adapter = adapters(name)
    text_streams = [s for s, spec in adapter.streams.items() if spec.modality == "text"]
    pair_layers = _pair_layers(adapter, lambda s: _all_layers(adapter, s)) if isinstance(adapter, CrossEncoder) else None

    def run() -> dict[str, Any]:
        out = {s: _pooled(_encode(adapter, case, s, _all_layers(adapter, s)), adapter.streams[s]) for s in text_streams}
        if pair_layers is not None:
            got = _pairs(adapter, case, pair_layers)
            out["scores"] = got.scores
            out.update({f"pair/{s}": v for s, v in got.states.items()})
        return out

    right = run()
    previous = adapter.tokenizer.padding_side
    adapter.tokenizer.padding_side = "left"
    try:
        left = run()
    finally:
        adapter.tokenizer.padding_side = previous
    assert set(left) == set(right) and right
    for key in right:
        _close(left[key], right[key], f"{name}/{key}")


@params
def test_float16_load(name: str, fixture_dirs: Callable[[str, int], Path], adapters: Callable[[str], Adapter]) -> None:
    case = CASES[name]
    half = MODELS.get(case.registered).load(_checkpoint(case, fixture_dirs(name)), device="cpu", dtype="float16",
                                            **case.load_options)
    params_ = [p for p in half.model.parameters() if p.is_floating_point()]
    assert params_ and all(p.dtype == torch.float16 for p in params_)
    full = adapters(name)
    # float16 against float32: a half-precision forward is ~1e-3 relative per op, so only loosely.
    loose = dict(atol=5e-2, rtol=5e-2)
    for stream in half.streams:
        if _single(half, stream):
            got = _encode(half, case, stream, [0, -1 % half.streams[stream].n_layers]).hidden
            want = _encode(full, case, stream, [0, -1 % full.streams[stream].n_layers]).hidden
            assert got.dtype == torch.float16 and torch.isfinite(got).all()
            _close(got.float(), want, f"{name}/{stream} float16", **loose)
    if isinstance(half, CrossEncoder):
        got, want = _pairs(half, case, None), _pairs(full, case, None)
        assert torch.isfinite(got.scores).all()
        _close(got.scores.float(), want.scores.float(), f"{name} float16 scores", **loose)


@params
def test_wrong_model_type_is_refused(name: str, fixture_dirs: Callable[[str, int], Path]) -> None:
    case = CASES[name]
    other = fixture_dirs(case.wrong)
    with pytest.raises(InputError) as err:
        MODELS.get(case.registered).load(str(other), device="cpu")
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("checkpoint: "), msg


@pytest.fixture
def offline_empty_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Offline with an empty hub cache (huggingface_hub reads both at import time)."""
    import huggingface_hub.constants as hc

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(tmp_path / "hub"))


@params
def test_offline_hub_id_fails_fast_saying_how_to_provide_it(
    name: str, offline_empty_hub: None, fixture_dirs: Callable[[str, int], Path], tmp_path: Path,
) -> None:
    cls = MODELS.get(CASES[name].registered)
    with pytest.raises(InputError) as err:
        cls.load("vlprobe-tests/no-such-model", device="cpu")
    msg = str(err.value)
    assert "\n" not in msg, msg
    if CASES[name].checkpoint:  # a single weights file (UNITER): the message says which file to pass
        assert "not a file" in msg and Path(CASES[name].checkpoint).name.split(".")[0] in msg, msg
        # its default tokenizer is a hub id: offline and not cached, the message says how to give one
        alone = tmp_path / "alone"
        src = fixture_dirs(name)
        for f in src.rglob("*"):  # the release's files without the tokenizer vlprobe's fixture adds
            if f.is_file() and f.name != FIXTURE_MARKER and "tokenizer" not in f.relative_to(src).parts:
                (alone / f.relative_to(src)).parent.mkdir(parents=True, exist_ok=True)
                (alone / f.relative_to(src)).write_bytes(f.read_bytes())
        with pytest.raises(InputError) as err:
            cls.load(str(alone / CASES[name].checkpoint), device="cpu", **CASES[name].load_options)
        msg = str(err.value)
        assert "\n" not in msg and "--tokenizer" in msg, msg
    else:
        assert "offline" in msg and "save_pretrained(DIR)" in msg and "--checkpoint DIR" in msg, msg


def _weights(folder: Path, files: tuple[str, ...]) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    out: dict[str, torch.Tensor] = {}
    for f in files:
        state = load_file(folder / f) if f.endswith(".safetensors") else torch.load(folder / f, weights_only=True)
        out.update({f"{f}:{k}": v for k, v in state.items()})
    return out


@params
def test_fixture_is_deterministic(name: str, fixture_dirs: Callable[[str, int], Path], tmp_path: Path) -> None:
    case = CASES[name]
    first = fixture_dirs(name)
    again = FIXTURES.get(case.registered)(tmp_path / "again", 0, **case.fixture_options)
    a, b = _weights(first, case.weights), _weights(again, case.weights)
    assert a.keys() == b.keys() and a
    for key in a:  # the same writer, seed and machine: identical tensors
        assert a[key].dtype == b[key].dtype and torch.equal(a[key], b[key]), key
    files = sorted(p.relative_to(first) for p in first.rglob("*") if p.is_file() and p.name not in case.weights)
    assert files == sorted(p.relative_to(again) for p in again.rglob("*") if p.is_file() and p.name not in case.weights)
    for rel in files:  # configs, tokenizers, processors: the same bytes
        assert (first / rel).read_bytes() == (again / rel).read_bytes(), rel
    other = _weights(fixture_dirs(name, 1), case.weights)
    assert any(not torch.equal(a[k], other[k]) for k in a if a[k].numel() > 1), "another seed, other weights"
