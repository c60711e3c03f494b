"""The MLP probe in torch, as a scikit-learn estimator.

:class:`MLPProbe` is a binary classifier (BCE on logits; a sample is class 1 when its logit is
positive). It trains with the batched trainer of :mod:`vlprobe.probes.ensemble` as an ensemble of
one model, so ``MLPProbe(random_state=s)`` and model ``m`` of ``fit_mlp_ensemble(..., seeds)`` with
``seeds[m] = s`` start from the same weights, visit the rows in the same order and give the same
predictions up to floating-point rounding.
"""

from __future__ import annotations

from numbers import Integral, Real
from typing import Any, ClassVar

import numpy as np
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_is_fitted, validate_data

from vlprobe.probes.base import BinaryProbe, validated_binary_fit_data
from vlprobe.probes.ensemble import MLPEnsemble, fit_mlp_ensemble
from vlprobe.validation import check_seed

__all__ = ["MLPProbe"]


def _int_seed(random_state: Any) -> int:
    if isinstance(random_state, (int, np.integer)) and not isinstance(random_state, bool):
        return check_seed(random_state, "random_state")
    return int(check_random_state(random_state).randint(0, 2**31 - 1))


class MLPProbe(BinaryProbe):
    """A binary MLP probe: ReLU between linear layers, BCE on logits, Adam.

    Parameters
    ----------
    depth : int, default=4
        Number of linear layers (4: in -> width -> width -> width -> 1, the paper's §3.2 MLP).
    width : int, default=1024
    lr : float, default=1e-4
        Adam learning rate.
    epochs : int, default=200
    batch_size : int, default=200
    random_state : int, RandomState or None, default=0
        Seeds the initial weights (torch generator) and the per-epoch order (numpy generator).
    device : str, default="auto"
        ``cpu``, ``cuda``, ``cuda:N`` or ``auto`` (CUDA when available), as ``--device`` on the
        command line.

    Attributes
    ----------
    classes_ : ndarray, shape (2,)
    coefs_ : list of ndarray
        Weights, layer ``i`` of shape (dims[i], dims[i+1]).
    intercepts_ : list of ndarray
        Biases, layer ``i`` of shape (dims[i+1],).
    loss_curve_ : list of float
        Mean training loss per epoch.
    n_iter_ : int
        Epochs run.
    n_features_in_ : int
    """

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        "depth": [Interval(Integral, 1, None, closed="left")],
        "width": [Interval(Integral, 1, None, closed="left")],
        "lr": [Interval(Real, 0, None, closed="neither")],
        "epochs": [Interval(Integral, 1, None, closed="left")],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
        "device": [str],
    }

    def __init__(
        self,
        depth: int = 4,
        width: int = 1024,
        lr: float = 1e-4,
        epochs: int = 200,
        batch_size: int = 200,
        random_state: Any = 0,
        device: str = "auto",
    ) -> None:
        self.depth = depth
        self.width = width
        self.lr = lr
        self.epochs = epochs
        self.batch_size = batch_size
        self.random_state = random_state
        self.device = device

    def fit(self, X: Any, y: Any) -> MLPProbe:
        """Train on ``X`` (n_samples, n_features) and two classes in ``y`` (n_samples,)."""
        X, y_idx = validated_binary_fit_data(self, X, y, np.float32)
        ens = fit_mlp_ensemble(
            X[None], y_idx[None], [_int_seed(self.random_state)], depth=self.depth, width=self.width, lr=self.lr,
            epochs=self.epochs, batch_size=self.batch_size, device=self.device,
        )
        self.coefs_ = [w[0] for w in ens.coefs]
        self.intercepts_ = [b[0] for b in ens.intercepts]
        self.loss_curve_ = ens.loss_curves[0].tolist()
        self.n_iter_ = int(self.epochs)
        return self

    @classmethod
    def from_ensemble(cls, ensemble: MLPEnsemble, m: int, classes: Any = (0, 1)) -> MLPProbe:
        """Model ``m`` of a trained ensemble as a fitted probe (hyperparameters other than the seed unknown)."""
        p = cls(depth=len(ensemble.coefs), width=ensemble.coefs[0].shape[2], random_state=int(ensemble.seeds[m]))
        p.classes_ = np.asarray(classes)
        p.coefs_ = [w[m].copy() for w in ensemble.coefs]
        p.intercepts_ = [b[m].copy() for b in ensemble.intercepts]
        p.n_features_in_ = ensemble.coefs[0].shape[1]
        p.loss_curve_ = ensemble.loss_curves[m].tolist()
        p.n_iter_ = ensemble.loss_curves.shape[1]
        return p

    def decision_function(self, X: Any) -> np.ndarray:
        """Logits, shape (n_samples,); positive means ``classes_[1]``."""
        check_is_fitted(self)
        h = validate_data(self, X, dtype=np.float32, reset=False)
        for i, (w, b) in enumerate(zip(self.coefs_, self.intercepts_, strict=True)):
            h = h @ w + b
            if i < len(self.coefs_) - 1:
                h = np.maximum(h, 0)
        return h[:, 0]

    def predict_proba(self, X: Any) -> np.ndarray:
        """Probabilities, shape (n_samples, 2), columns in ``classes_`` order."""
        p1 = 1.0 / (1.0 + np.exp(-self.decision_function(X).astype(np.float64)))
        return np.stack([1.0 - p1, p1], axis=1)
