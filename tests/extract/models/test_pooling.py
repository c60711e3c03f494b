"""Shared pooling: pool_states against a naive per-row loop, and parse_poolings."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from vlprobe.extract.models.pooling import POOLINGS, TOKEN_POOLINGS, parse_poolings, pool_states


def naive_pool(
    hidden: np.ndarray, mask: np.ndarray, cls_index: np.ndarray | None
) -> dict[str, np.ndarray]:
    """Per-row, per-layer reference with plain Python loops over valid positions."""
    b, n_layers, t, h = hidden.shape
    out = {k: np.zeros((b, n_layers, h), dtype=np.float64) for k in ("cls", "mean", "max")}
    for i in range(b):
        valid = [j for j in range(t) if mask[i, j]]
        for layer in range(n_layers):
            rows = [hidden[i, layer, j].astype(np.float64) for j in valid]
            out["mean"][i, layer] = sum(rows) / len(rows)
            out["max"][i, layer] = np.max(np.stack(rows), axis=0)
            if cls_index is not None:
                out["cls"][i, layer] = hidden[i, layer, int(cls_index[i])]
    return out


@st.composite
def pooling_case(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    b = draw(st.integers(1, 4))
    n_layers = draw(st.integers(1, 3))
    t = draw(st.integers(1, 7))
    h = draw(st.integers(1, 5))
    seed = draw(st.integers(0, 2**32 - 1))
    mode = draw(st.sampled_from(["random", "single", "prefix", "full"]))
    rng = np.random.default_rng(seed)
    hidden = rng.normal(size=(b, n_layers, t, h)).astype(np.float32) * 10
    mask = np.zeros((b, t), dtype=np.int64)
    for i in range(b):
        if mode == "random":
            mask[i] = rng.integers(0, 2, size=t)
            mask[i, rng.integers(t)] = 1
        elif mode == "single":  # exactly one valid token, anywhere
            mask[i, rng.integers(t)] = 1
        elif mode == "prefix":  # right padding
            mask[i, : rng.integers(1, t + 1)] = 1
        else:
            mask[i] = 1
    cls_index = rng.integers(0, t, size=b)
    return hidden, mask, cls_index


@settings(max_examples=150, deadline=None)
@given(pooling_case())
def test_pool_states_matches_naive_loop(case: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
    hidden, mask, cls_index = case
    got = pool_states(
        torch.from_numpy(hidden), torch.from_numpy(mask), torch.from_numpy(cls_index), TOKEN_POOLINGS
    )
    want = naive_pool(hidden, mask, cls_index)
    assert set(got) == {"cls", "mean", "max"}
    for name in ("cls", "mean", "max"):
        assert got[name].dtype == torch.float32
        assert got[name].shape == hidden.shape[:2] + hidden.shape[3:]
        np.testing.assert_allclose(got[name].numpy(), want[name], rtol=1e-5, atol=1e-5)


@settings(max_examples=60, deadline=None)
@given(pooling_case(), st.sampled_from([1e30, -1e30, 3e38, -3e38, 65504.0]))
def test_masked_tokens_never_leak(
    case: tuple[np.ndarray, np.ndarray, np.ndarray], poison: float
) -> None:
    """Masked positions (CLIP pads with EOS) may hold huge (finite) values: they never leak."""
    hidden, mask, cls_index = case
    poisoned = hidden.copy()
    poisoned[np.broadcast_to(~mask.astype(bool)[:, None, :, None], hidden.shape)] = poison
    # keep the CLS position clean so cls is comparable too
    cls_index = np.array([np.flatnonzero(row)[0] for row in mask])
    clean = pool_states(torch.from_numpy(hidden), torch.from_numpy(mask),
                        torch.from_numpy(cls_index), TOKEN_POOLINGS)
    dirty = pool_states(torch.from_numpy(poisoned), torch.from_numpy(mask),
                        torch.from_numpy(cls_index), TOKEN_POOLINGS)
    for name in TOKEN_POOLINGS:
        assert torch.isfinite(dirty[name]).all()
        torch.testing.assert_close(dirty[name], clean[name])


def test_small_worked_example() -> None:
    # B=2, L=1, T=3, H=2
    hidden = torch.tensor(
        [
            [[[1.0, -1.0], [3.0, 5.0], [1e6, 1e6]]],
            [[[2.0, 0.0], [-4.0, 8.0], [0.0, -2.0]]],
        ]
    )
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    out = pool_states(hidden, mask, torch.tensor([1, 2]), ("cls", "mean", "max"))
    torch.testing.assert_close(out["cls"], torch.tensor([[[3.0, 5.0]], [[0.0, -2.0]]]))
    torch.testing.assert_close(out["mean"], torch.tensor([[[2.0, 2.0]], [[-2 / 3, 2.0]]]))
    torch.testing.assert_close(out["max"], torch.tensor([[[3.0, 5.0]], [[2.0, 8.0]]]))


def test_bool_and_int_masks_agree() -> None:
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(3, 2, 5, 4, generator=gen)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 0, 1, 0, 1], [0, 0, 0, 0, 1]])
    a = pool_states(hidden, mask, None, ("mean", "max"))
    b = pool_states(hidden, mask.bool(), None, ("mean", "max"))
    for name in ("mean", "max"):
        torch.testing.assert_close(a[name], b[name])


def test_only_requested_poolings_and_pooled_is_ignored() -> None:
    hidden = torch.randn(2, 1, 3, 4)
    mask = torch.ones(2, 3)
    assert set(pool_states(hidden, mask, None, ("mean",))) == {"mean"}
    assert set(pool_states(hidden, mask, None, ("max", "pooled"))) == {"max"}
    assert pool_states(hidden, mask, None, ()) == {}


def test_float16_input_gives_float32_output() -> None:
    gen = torch.Generator().manual_seed(1)
    hidden = torch.randn(2, 3, 4, 8, generator=gen).to(torch.float16)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    out = pool_states(hidden, mask, torch.tensor([0, 3]), TOKEN_POOLINGS)
    want = naive_pool(hidden.float().numpy(), mask.numpy(), np.array([0, 3]))
    for name in TOKEN_POOLINGS:
        assert out[name].dtype == torch.float32
        np.testing.assert_allclose(out[name].numpy(), want[name], rtol=1e-6, atol=1e-6)


def test_errors() -> None:
    hidden = torch.zeros(2, 1, 3, 4)
    with pytest.raises(ValueError, match=r"mask must have shape \(2, 3\), got \(2, 4\)"):
        pool_states(hidden, torch.ones(2, 4), None, ("mean",))
    with pytest.raises(ValueError, match=r"mask must have shape \(2, 3\), got \(3,\)"):
        pool_states(hidden, torch.ones(3), None, ("mean",))
    with pytest.raises(ValueError, match="every row needs at least one valid token"):
        pool_states(hidden, torch.tensor([[1, 0, 0], [0, 0, 0]]), None, ("mean",))
    with pytest.raises(ValueError, match="'cls' is not available"):
        pool_states(hidden, torch.ones(2, 3), None, ("cls",))


# -- parse_poolings ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("cls", ("cls",)),
        ("max,cls", ("cls", "max")),
        ("pooled,mean", ("mean", "pooled")),
        (" MEAN , max ,", ("mean", "max")),
        ("max,max,cls", ("cls", "max")),
        ("pooled,max,mean,cls", POOLINGS),
        (["max", "cls"], ("cls", "max")),
        (("pooled",), ("pooled",)),
    ],
)
def test_parse_poolings_canonical_order(spec: object, expected: tuple[str, ...]) -> None:
    assert parse_poolings(spec) == expected  # type: ignore[arg-type]


def test_pooling_names() -> None:
    assert POOLINGS == ("cls", "mean", "max", "pooled")
    assert TOKEN_POOLINGS == ("cls", "mean", "max")


@pytest.mark.parametrize("spec", ["", " , ", []])
def test_parse_poolings_empty(spec: object) -> None:
    with pytest.raises(ValueError, match=r"^--pooling must name at least one of cls, mean, max, pooled"):
        parse_poolings(spec, param="--pooling")  # type: ignore[arg-type]


@pytest.mark.parametrize("spec", ["avg", "cls,first", ["mean", "sum"]])
def test_parse_poolings_unknown(spec: object) -> None:
    with pytest.raises(ValueError, match=r"^pooling: unknown pooling '(avg|first|sum)'"):
        parse_poolings(spec)  # type: ignore[arg-type]


def test_non_finite_padding_does_not_leak() -> None:
    hidden = torch.randn(2, 3, 4, 5, generator=torch.Generator().manual_seed(0))
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    hidden[0, :, 2] = float("inf")
    hidden[0, :, 3] = float("nan")
    out = pool_states(hidden, mask, torch.tensor([1, 3]), ("cls", "mean", "max"))
    for name, value in out.items():
        assert torch.isfinite(value).all(), name
    torch.testing.assert_close(out["mean"][0], hidden[0, :, :2].mean(dim=1))
    torch.testing.assert_close(out["max"][0], hidden[0, :, :2].amax(dim=1))
    torch.testing.assert_close(out["mean"][1], hidden[1].mean(dim=1))
