"""Many binary MLP probes trained at once as one batched model (torch and numpy only).

:func:`fit_mlp_ensemble` trains M MLPs (seeds x layers x tasks) together: their weights are
stacked into ``(M, in, out)`` tensors and every step is one batched matrix product per layer.
Model ``m`` starts from the parameters :func:`init_mlp_params` draws for ``seeds[m]`` and visits
its training rows in the order :func:`epoch_orders` draws for ``seeds[m]``, exactly as
``MLPProbe(random_state=seeds[m])`` does alone (``MLPProbe.fit`` is this trainer with one model),
so the two give the same predictions up to floating-point rounding.

Models train in chunks whose size follows a memory budget (:func:`ensemble_memory` estimates the
bytes of parameters, gradients, Adam state and activations); each model's training is independent
of the others, so the chunking changes results only by rounding. :func:`iter_mlp_ensemble` hands
the chunks over one at a time, so a caller that scores and drops each holds one chunk's weights.
Adam runs as torch's fused kernel (one pass over each parameter tensor per step, not about ten).
This module imports neither scikit-learn nor SciPy, which keeps the experiments that train
ensembles lighter in memory.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ParamSpec

import numpy as np
import torch
import torch.nn.functional as F

from vlprobe.devices import resolve_device
from vlprobe.validation import InputError, check_positive_float, check_positive_int

__all__ = [
    "CPU_MEMORY_BUDGET",
    "MLPEnsemble",
    "check_training",
    "default_memory_budget",
    "ensemble_memory",
    "epoch_orders",
    "fit_mlp_ensemble",
    "init_mlp_params",
    "iter_mlp_ensemble",
    "mlp_dims",
    "models_per_chunk",
    "step_seconds",
]

#: Bytes one chunk of an ensemble may hold on the CPU (parameters, gradients, Adam state,
#: activations). torch, h5py and the experiment's imports take about 240 MB resident before any
#: training; with 64 MiB chunks the default variant-probe on a small cache peaked at about 450 MiB
#: (96 MiB chunks: 486 MiB). More models per chunk do not make a CPU step cheaper per model:
#: measured at the paper's widths (benchmarks/planning.py, docs/scaling-out.md), 3-4 per chunk
#: left the per-core rate within 3% of one, and 3-26 on two threads were 5-20% slower.
CPU_MEMORY_BUDGET = 64 << 20
#: Share of the free memory of a CUDA device one chunk may use.
CUDA_MEMORY_SHARE = 0.5


def mlp_dims(n_features: int, depth: int, width: int) -> list[int]:
    """Layer widths ``[n_features, width, ..., width, 1]`` of an MLP with ``depth`` linear layers."""
    check_positive_int(depth, "depth", " (number of linear layers)")
    check_positive_int(width, "width")
    return [int(n_features), *([int(width)] * (int(depth) - 1)), 1]


def init_mlp_params(seed: int, dims: Sequence[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Initial parameters of one MLP, drawn from ``torch.Generator().manual_seed(seed)``.

    Uniform on ``[-1/sqrt(fan_in), 1/sqrt(fan_in)]`` for weights and biases (the
    ``torch.nn.Linear`` default), layer by layer, weight before bias.

    Returns
    -------
    list of (W, b)
        ``W`` has shape (in, out), ``b`` shape (out,); float32 on the CPU.
    """
    g = torch.Generator().manual_seed(int(seed))
    out = []
    for fan_in, fan_out in itertools.pairwise(dims):
        bound = 1.0 / math.sqrt(fan_in)
        w = (torch.rand(fan_in, fan_out, generator=g) * 2 - 1) * bound
        b = (torch.rand(fan_out, generator=g) * 2 - 1) * bound
        out.append((w, b))
    return out


def epoch_orders(seed: int, n: int) -> Iterator[np.ndarray]:
    """The order in which a model visits its ``n`` training rows, one permutation per epoch.

    Drawn from ``numpy.random.default_rng(seed)``.
    """
    rng = np.random.default_rng(int(seed))
    while True:
        yield rng.permutation(n)


def check_training(lr: float, epochs: int, batch_size: int) -> None:
    """InputError naming the first of ``lr`` (> 0), ``epochs``, ``batch_size`` (integers >= 1) that is bad."""
    check_positive_float(lr, "lr")
    check_positive_int(epochs, "epochs")
    check_positive_int(batch_size, "batch_size")


@dataclass
class MLPEnsemble:
    """M trained MLPs with stacked parameters (what :func:`fit_mlp_ensemble` returns).

    Attributes
    ----------
    coefs : list of ndarray
        Layer ``i`` weights, shape (M, dims[i], dims[i+1]).
    intercepts : list of ndarray
        Layer ``i`` biases, shape (M, dims[i+1]).
    groups : ndarray of int, shape (M,)
        Which feature group (first axis of ``X``) each model reads.
    seeds : ndarray of int, shape (M,)
    loss_curves : ndarray, shape (M, epochs)
        Mean training loss per epoch of each model.
    """

    coefs: list[np.ndarray]
    intercepts: list[np.ndarray]
    groups: np.ndarray
    seeds: np.ndarray
    loss_curves: np.ndarray

    def decision_function(self, X: Any) -> np.ndarray:
        """Logits of every model on its group's rows.

        Parameters
        ----------
        X : array, shape (G, N, D)

        Returns
        -------
        ndarray, shape (M, N)
        """
        X = _as_groups(X, "X")
        if X.shape[2] != self.coefs[0].shape[1]:
            raise InputError(f"X: expected {self.coefs[0].shape[1]} features, got {X.shape[2]}")
        out = np.empty((len(self.groups), X.shape[1]), dtype=np.float32)
        for m in range(len(self.groups)):
            h = X[self.groups[m]]
            for i, (w, b) in enumerate(zip(self.coefs, self.intercepts, strict=True)):
                h = h @ w[m] + b[m]
                if i < len(self.coefs) - 1:
                    h = np.maximum(h, 0)
            out[m] = h[:, 0]
        return out

    def predict(self, X: Any) -> np.ndarray:
        """0/1 predictions (logit > 0), shape (M, N)."""
        return (self.decision_function(X) > 0).astype(np.int64)


def _as_groups(X: Any, name: str) -> np.ndarray:
    X = np.asarray(X, dtype=np.float32)
    if X.ndim != 3:
        raise InputError(f"{name} must have shape (groups, samples, features), got shape {X.shape}")
    if not np.isfinite(X).all():
        raise InputError(f"{name} holds NaN or infinite values")
    return X


def ensemble_memory(n_models: int, dims: Sequence[int], batch_rows: int) -> int:
    """Bytes ``n_models`` MLPs of layer widths ``dims`` hold while training on ``batch_rows`` rows.

    Parameters, gradients and Adam's two moments (4 float32 copies of every parameter) plus the
    activations autograd keeps and the gradients it makes (about 4 per unit and row).
    """
    n_params = sum(a * b + b for a, b in itertools.pairwise(dims))
    return 4 * int(n_models) * (4 * n_params + 4 * int(batch_rows) * sum(dims))


def default_memory_budget(device: str | torch.device = "cpu") -> int:
    """Bytes a chunk may use: :data:`CPU_MEMORY_BUDGET`, or half the free memory of a CUDA device."""
    dev = resolve_device(device) if isinstance(device, str) else device
    if dev.type == "cuda":
        free, _ = torch.cuda.mem_get_info(dev)
        return int(free * CUDA_MEMORY_SHARE)
    return CPU_MEMORY_BUDGET


def iter_mlp_ensemble(
    X: Any,
    y: Any,
    seeds: Sequence[int],
    *,
    groups: Sequence[int] | None = None,
    depth: int = 4,
    width: int = 1024,
    lr: float = 1e-4,
    epochs: int = 200,
    batch_size: int = 200,
    device: str = "auto",
    memory_budget: int | None = None,
    max_models: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> Iterator[tuple[slice, MLPEnsemble]]:
    """Train M binary MLP probes at once as one batched model, in memory-bounded chunks; yields
    (models covered, their ensemble) chunk by chunk (:func:`fit_mlp_ensemble` joins them).

    A caller that scores each chunk and drops it holds one chunk's weights at a time. Every input
    is checked before the first chunk trains.

    Parameters
    ----------
    X : array, shape (G, N, D)
        G feature groups (e.g. layers) of the same N training rows.
    y : array of {0, 1}, shape (M, N)
        Labels of each model (target and control tasks differ here).
    seeds : sequence of int, length M
        Model ``m`` is initialised and shuffled as ``MLPProbe(random_state=seeds[m])``.
    groups : sequence of int, length M, optional
        Feature group of each model; default ``range(M)`` (then G must equal M).
    depth, width, lr, epochs, batch_size, device
        As in :class:`MLPProbe`.
    memory_budget : int, optional
        Bytes a chunk of models may use while training (:func:`ensemble_memory`); default
        :func:`default_memory_budget` of the device. A chunk holds at least one model.
    max_models : int, optional
        Train at most this many models at a time (on top of the budget).
    progress : callable, optional
        Called with the number of model-epochs just finished (M * epochs in all).

    Yields
    ------
    slice, MLPEnsemble
        The models of a chunk and their weights. The results do not depend on the chunking
        beyond floating-point rounding.
    """
    X = _as_groups(X, "X")
    y = np.asarray(y)
    seeds_arr = np.asarray(seeds)
    if seeds_arr.ndim != 1 or not len(seeds_arr) or seeds_arr.dtype.kind not in "iu" or (seeds_arr < 0).any():
        raise InputError(f"seeds must be a non-empty sequence of non-negative integers, got {seeds!r}")
    M = len(seeds_arr)
    G, N, D = X.shape
    groups_arr = np.arange(M) if groups is None else np.asarray(groups)
    if groups_arr.shape != (M,) or groups_arr.dtype.kind not in "iu" or (groups_arr < 0).any() or (groups_arr >= G).any():
        raise InputError(f"groups must be {M} integers in [0, {G}), got {groups!r}")
    if y.shape != (M, N):
        raise InputError(f"y must have shape (models, samples) = ({M}, {N}), got {y.shape}")
    if not np.isin(y, (0, 1)).all():
        raise InputError("y must hold 0/1 labels")
    if N < 1:
        raise InputError("X holds no samples")
    dims = mlp_dims(D, depth, width)
    check_training(lr, epochs, batch_size)
    dev = resolve_device(device)
    per_chunk = models_per_chunk(dims, min(batch_size, N), dev, memory_budget)
    if max_models is not None:
        per_chunk = min(per_chunk, check_positive_int(max_models, "max_models"))
    return _iter_chunks(X, y, seeds_arr, groups_arr.astype(np.int64), dims, lr, epochs, batch_size, dev,
                        per_chunk, progress)


P = ParamSpec("P")


def _joined(chunked: Callable[P, Iterator[tuple[slice, MLPEnsemble]]]) -> Callable[P, MLPEnsemble]:
    """A function of ``chunked``'s parameters (declared once, there) that returns its chunks as
    one :class:`MLPEnsemble`."""

    @functools.wraps(chunked)
    def joined(*args: P.args, **kwargs: P.kwargs) -> MLPEnsemble:
        chunks = [ens for _, ens in chunked(*args, **kwargs)]
        return MLPEnsemble(
            coefs=[np.concatenate([c.coefs[i] for c in chunks]) for i in range(len(chunks[0].coefs))],
            intercepts=[np.concatenate([c.intercepts[i] for c in chunks]) for i in range(len(chunks[0].coefs))],
            groups=np.concatenate([c.groups for c in chunks]),
            seeds=np.concatenate([c.seeds for c in chunks]),
            loss_curves=np.concatenate([c.loss_curves for c in chunks]),
        )

    joined.__signature__ = inspect.signature(chunked).replace(return_annotation="MLPEnsemble")  # type: ignore[attr-defined]
    return joined


fit_mlp_ensemble = _joined(iter_mlp_ensemble)
fit_mlp_ensemble.__name__ = fit_mlp_ensemble.__qualname__ = "fit_mlp_ensemble"
fit_mlp_ensemble.__doc__ = """Train M binary MLP probes at once as one batched model, in memory-bounded chunks.

The parameters are :func:`iter_mlp_ensemble`'s (X (G, N, D), y (M, N), seeds, groups, depth, width,
lr, epochs, batch_size, device, memory_budget, max_models, progress).

Returns
-------
MLPEnsemble
    The weights of all M models (:func:`iter_mlp_ensemble` hands them over chunk by chunk); the
    results do not depend on the chunking beyond floating-point rounding.
"""


def models_per_chunk(dims: Sequence[int], batch_rows: int, device: str | torch.device = "cpu",
                     memory_budget: int | None = None) -> int:
    """How many models of layer widths ``dims`` train together within ``memory_budget`` (at least 1)."""
    dev = resolve_device(device) if isinstance(device, str) else device
    budget = default_memory_budget(dev) if memory_budget is None else check_positive_int(
        memory_budget, "memory_budget", " (bytes)")
    return max(1, budget // ensemble_memory(1, dims, batch_rows))


def _iter_chunks(
    X: np.ndarray, y: np.ndarray, seeds: np.ndarray, groups: np.ndarray, dims: list[int], lr: float,
    epochs: int, batch_size: int, dev: torch.device, per_chunk: int, progress: Callable[[int], None] | None,
) -> Iterator[tuple[slice, MLPEnsemble]]:
    Xt = torch.from_numpy(X).to(dev)
    yt = torch.from_numpy(y.astype(np.float32)).to(dev)
    for lo in range(0, len(seeds), per_chunk):
        sl = slice(lo, min(len(seeds), lo + per_chunk))
        ws, bs, curve = _fit_chunk(Xt, yt[sl], seeds[sl], groups[sl], dims, lr, epochs, batch_size, dev, progress)
        yield sl, MLPEnsemble(coefs=ws, intercepts=bs, groups=groups[sl], seeds=seeds[sl].astype(np.int64),
                              loss_curves=curve)


def _step(weights: list[torch.Tensor], biases: list[torch.Tensor], opt: torch.optim.Optimizer, h: torch.Tensor,
          y: torch.Tensor) -> torch.Tensor:
    """One optimiser step of m models on a batch ``h`` (m, b, D) with labels ``y`` (m, b); each
    model's mean loss (m,)."""
    last = len(weights) - 1
    for i, (w, b) in enumerate(zip(weights, biases, strict=True)):
        h = torch.baddbmm(b, h, w)
        if i < last:
            h = torch.relu_(h)
    per_model = F.binary_cross_entropy_with_logits(h.squeeze(-1), y, reduction="none").mean(dim=1)
    opt.zero_grad(set_to_none=True)
    # Summing the per-model means gives each model exactly its own gradient.
    per_model.sum().backward()
    opt.step()
    return per_model.detach()


def step_seconds(dims: Sequence[int], n_models: int, batch_rows: int, device: str | torch.device = "cpu",
                 steps: int = 3) -> float:
    """Seconds one training step of ``n_models`` MLPs of layer widths ``dims`` on ``batch_rows``
    rows takes here: the trainer's own step (:func:`iter_mlp_ensemble`) on random weights and
    data, one step to warm up, then the mean of ``steps`` (wall clock, at the current thread count).
    """
    dev = resolve_device(device) if isinstance(device, str) else device
    g = torch.Generator().manual_seed(0)
    weights = [((torch.rand(n_models, a, b, generator=g) * 2 - 1) / math.sqrt(a)).to(dev).requires_grad_()
               for a, b in itertools.pairwise(dims)]
    biases = [torch.zeros(n_models, 1, b).to(dev).requires_grad_() for b in dims[1:]]
    opt = torch.optim.Adam([*weights, *biases], lr=1e-4, fused=True)
    h = torch.randn(n_models, batch_rows, dims[0], generator=g).to(dev)
    y = (torch.rand(n_models, batch_rows, generator=g) < 0.5).float().to(dev)
    _step(weights, biases, opt, h, y)
    _sync(dev)
    start = time.perf_counter()
    for _ in range(steps):
        _step(weights, biases, opt, h, y)
    _sync(dev)
    return (time.perf_counter() - start) / steps


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _fit_chunk(
    Xt: torch.Tensor, yt: torch.Tensor, seeds: np.ndarray, groups: np.ndarray, dims: list[int],
    lr: float, epochs: int, batch_size: int, dev: torch.device,
    progress: Callable[[int], None] | None = None,
) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray]:
    """Train ``len(seeds)`` models reading ``Xt[groups]`` (G, N, D) with labels ``yt`` (m, N)."""
    m = len(seeds)
    n = yt.shape[1]
    weights = [torch.empty(m, a, b) for a, b in itertools.pairwise(dims)]
    # Biases as (m, 1, out) so that baddbmm broadcasts them over the batch.
    biases = [torch.empty(m, 1, b) for b in dims[1:]]
    for k, seed in enumerate(seeds):
        for i, (w, b) in enumerate(init_mlp_params(int(seed), dims)):
            weights[i][k] = w
            biases[i][k, 0] = b
    weights = [w.to(dev).requires_grad_() for w in weights]
    biases = [b.to(dev).requires_grad_() for b in biases]
    opt = torch.optim.Adam([*weights, *biases], lr=lr, fused=True)
    orders = [epoch_orders(int(s), n) for s in seeds]
    g_idx = torch.from_numpy(groups).to(dev)[:, None]
    curve = torch.zeros(m, epochs, device=dev)
    for epoch in range(epochs):
        perm = torch.from_numpy(np.stack([next(o) for o in orders])).to(dev)
        total = curve[:, epoch]
        for start in range(0, n, batch_size):
            idx = perm[:, start:start + batch_size]  # (m, b)
            total += _step(weights, biases, opt, Xt[g_idx, idx], torch.gather(yt, 1, idx)) * idx.shape[1]
        if progress is not None:
            progress(m)
    return (
        [w.detach().cpu().numpy() for w in weights],
        [b.detach()[:, 0, :].cpu().numpy() for b in biases],
        (curve / n).cpu().numpy().astype(np.float64),
    )
