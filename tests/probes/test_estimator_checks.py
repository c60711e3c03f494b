"""Both probes pass scikit-learn's estimator checks (binary classifiers: multiclass checks skip)."""

from __future__ import annotations

from sklearn.utils.estimator_checks import parametrize_with_checks

from vlprobe.probes.linear import LinearSeparabilityProbe
from vlprobe.probes.mlp import MLPProbe

ESTIMATORS = [
    LinearSeparabilityProbe(),
    # Small and short so that ~40 checks stay fast; the checks' data are easy blobs.
    MLPProbe(depth=2, width=16, lr=1e-2, epochs=30, batch_size=32),
]


@parametrize_with_checks(ESTIMATORS)
def test_sklearn_compatible(estimator, check) -> None:
    check(estimator)
