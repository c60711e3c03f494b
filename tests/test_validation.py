"""vlprobe.validation: the input-error type and the checks every module uses."""

from __future__ import annotations

import numpy as np
import pytest

from vlprobe.validation import (
    SEED_RANGE,
    InputError,
    check_choice,
    check_float,
    check_int,
    check_positive_float,
    check_positive_int,
    check_probability,
    check_seed,
    unknown_name_message,
)


def test_input_error_is_a_value_error() -> None:
    assert issubclass(InputError, ValueError)


def test_check_int() -> None:
    assert check_int(np.int64(3), "n", low=1) == 3 and type(check_int(np.int64(3), "n")) is int
    assert check_int(-5, "offset") == -5
    for bad, low, high, msg in [
        (0, 1, None, "n must be a positive integer, got 0"),
        (True, 1, None, "n must be a positive integer, got True"),
        (2.0, 1, None, "n must be a positive integer, got 2.0"),
        ("3", None, None, "n must be an integer, got '3'"),
        (9, 0, 8, "n must be an integer in [0, 8], got 9"),
        (1, 2, None, "n must be an integer >= 2, got 1"),
    ]:
        with pytest.raises(InputError) as err:
            check_int(bad, "n", low=low, high=high)
        assert str(err.value) == msg
    with pytest.raises(InputError, match=r"^depth must be a positive integer \(number of layers\), got 0$"):
        check_positive_int(0, "depth", " (number of layers)")


def test_one_seed_range() -> None:
    assert SEED_RANGE == (0, 2**32)
    assert check_seed(0) == 0 and check_seed(2**32 - 1) == 2**32 - 1 and check_seed(np.uint32(7)) == 7
    for bad in (-1, 2**32, True, 1.0, None, "0"):
        with pytest.raises(InputError, match=r"^seed must be an integer in \[0, 2\*\*32\), got "):
            check_seed(bad)
    with pytest.raises(InputError, match=r"^bootstrap_seed must be"):
        check_seed(-1, "bootstrap_seed")


def test_check_choice_says_did_you_mean() -> None:
    assert check_choice("all", "pair_plan", ("item", "all")) == "all"
    with pytest.raises(InputError) as err:
        check_choice("al", "pair_plan", ("item", "all"), kind="pair plan")
    assert str(err.value) == "pair_plan: unknown pair plan 'al'; did you mean 'all'? (known: item, all)"
    with pytest.raises(InputError, match=r"^pair_plan must be one of item, all, got 3$"):
        check_choice(3, "pair_plan", ("item", "all"))
    assert unknown_name_message("model", "x", []) == "unknown model 'x' (known: none)"


def test_floats_refuse_nan_inf_and_bool() -> None:
    assert check_float(np.float32(0.5), "lr") == 0.5 and check_positive_float(3, "C") == 3.0
    for bad in (float("nan"), float("inf"), -float("inf"), True, "1", None):
        with pytest.raises(InputError, match=r"^x must be a finite number, got "):
            check_float(bad, "x")
    with pytest.raises(InputError, match=r"^C must be a finite number > 0, got 0$"):
        check_positive_float(0, "C")
    with pytest.raises(InputError, match=r"^lambdas must be a number in \[0, 1\], got 1.5$"):
        check_probability(1.5, "lambdas")
    assert check_probability(1, "p") == 1.0 and check_probability(0.3, "f", open_interval=True) == 0.3
    for edge in (0.0, 1.0):
        with pytest.raises(InputError, match=r"in \(0, 1\)"):
            check_probability(edge, "test_size", open_interval=True)
    with pytest.raises(InputError, match=r"^p must be a number in \[0, 2\), got 2$"):
        check_float(2, "p", low=0, high=2, high_open=True)
