"""Both probes pass scikit-learn's estimator checks (binary classifiers: multiclass checks skip).

One check is left out on purpose, not skipped at run time: ``check_array_api_input`` needs
``SCIPY_ARRAY_API=1`` set before scipy is first imported, which would switch scipy into array-API
mode for the whole test session; the probes take numpy input only (they convert to float arrays
or torch tensors themselves), so the check would only exercise scikit-learn's dispatch. The pandas
checks run (pandas is a test dependency).
"""

from __future__ import annotations

import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

from vlprobe.probes.linear import LinearSeparabilityProbe
from vlprobe.probes.mlp import MLPProbe

ESTIMATORS = [
    LinearSeparabilityProbe(),
    # Small and short so that ~40 checks stay fast; the checks' data are easy blobs.
    MLPProbe(depth=2, width=16, lr=1e-2, epochs=30, batch_size=32),
]
LEFT_OUT = {"check_array_api_input"}


def _check_name(param: object) -> str:
    check = param.values[1] if hasattr(param, "values") else param[1]  # pytest.param or a tuple
    return getattr(getattr(check, "func", check), "__name__", "")


_ALL = parametrize_with_checks(ESTIMATORS).mark  # scikit-learn's own parametrisation
_ARGNAMES, _PARAMS = _ALL.args[0], list(_ALL.args[1])
_KEPT = [p for p in _PARAMS if _check_name(p) not in LEFT_OUT]


def test_left_out_checks_exist() -> None:
    """The left-out names are real checks (a rename in scikit-learn would make the filter silent)."""
    assert LEFT_OUT <= {_check_name(p) for p in _PARAMS}
    assert len(_KEPT) == len(_PARAMS) - len(ESTIMATORS) * len(LEFT_OUT)


@pytest.mark.parametrize(_ARGNAMES, _KEPT, **_ALL.kwargs)
def test_sklearn_compatible(estimator, check) -> None:
    check(estimator)
