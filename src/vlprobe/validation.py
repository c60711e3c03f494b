"""vlprobe's input-error type and the checks every module uses on user input.

:class:`InputError` (a ``ValueError``) is what vlprobe raises for bad input: a parameter with a
value it cannot use, a file it cannot read as what it should be. The ``probe`` command prints it
as one ``error: ...`` line and exits with code 2; any other exception is a bug and keeps its
traceback. Every message names the parameter, what was expected and what came.

Seeds: one range for the whole project, ``0 <= seed < 2**32`` (:data:`SEED_RANGE`), the range
that NumPy's ``RandomState``, scikit-learn's ``random_state`` and ``torch.manual_seed`` all
accept, so a seed that works in one place works everywhere.
"""

from __future__ import annotations

import difflib
import math
import numbers
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "SEED_RANGE",
    "InputError",
    "check_choice",
    "check_file",
    "check_float",
    "check_int",
    "check_positive_float",
    "check_positive_int",
    "check_probability",
    "check_seed",
    "closest_name",
    "unknown_name_message",
]

#: Every seed of vlprobe lies in ``range(*SEED_RANGE)``: ``0 <= seed < 2**32``.
SEED_RANGE: tuple[int, int] = (0, 2**32)


class InputError(ValueError):
    """Bad input: a parameter value, option or file vlprobe cannot use (one line, exit 2 in the CLI)."""


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_int(
    value: Any, name: str, *, low: int | None = None, high: int | None = None, meaning: str = "",
) -> int:
    """``value`` as an int, refused unless it is an integer (bool is not) in ``[low, high]``.

    Parameters
    ----------
    value
        What came (a Python or NumPy integer).
    name : str
        The parameter, named in the error.
    low, high : int, optional
        Inclusive bounds.
    meaning : str
        Appended to the expectation, e.g. ``" (number of linear layers)"``.

    Raises
    ------
    InputError
        ``"<name> must be an integer >= 1 (number of linear layers), got 0"``.
    """
    if _is_int(value) and (low is None or value >= low) and (high is None or value <= high):
        return int(value)
    raise InputError(f"{name} must be {_int_expectation(low, high)}{meaning}, got {value!r}")


def _int_expectation(low: int | None, high: int | None) -> str:
    if low is not None and high is not None:
        return f"an integer in [{low}, {high}]"
    if low == 1:
        return "a positive integer"
    if low is not None:
        return f"an integer >= {low}"
    if high is not None:
        return f"an integer <= {high}"
    return "an integer"


def check_positive_int(value: Any, name: str, meaning: str = "") -> int:
    """``value`` as an int >= 1 (see :func:`check_int`)."""
    return check_int(value, name, low=1, meaning=meaning)


def check_seed(value: Any, name: str = "seed") -> int:
    """A seed: an integer with ``0 <= seed < 2**32`` (:data:`SEED_RANGE`)."""
    low, stop = SEED_RANGE
    if _is_int(value) and low <= value < stop:
        return int(value)
    raise InputError(f"{name} must be an integer in [0, 2**32), got {value!r}")


def closest_name(name: str, known: Sequence[str]) -> str | None:
    """The known name ``name`` most likely means: the same but for case (``CLIP``), the longest
    known name it begins with as a word (``clip-vit-b32``, ``lxmert_base``), else the closest
    spelling (:func:`difflib.get_close_matches`, case ignored); None when nothing is close."""
    lower = {k.lower(): k for k in known}
    wanted = name.strip().lower()
    if wanted in lower:
        return lower[wanted]
    heads = [k for k in lower if wanted.startswith(k) and wanted[len(k)] in "-_./ :@"]
    if heads:
        return lower[max(heads, key=len)]
    close = difflib.get_close_matches(wanted, list(lower), n=1)
    return lower[close[0]] if close else None


def unknown_name_message(kind: str, name: str, known: Sequence[str], hint: str | None = None) -> str:
    """``unknown <kind> 'x'; did you mean 'y'? (known: a, b)``, for every list of names vlprobe checks;
    ``hint`` (e.g. "that is a checkpoint: ...") takes the "did you mean"'s place."""
    if hint is None:
        close = closest_name(name, known)
        hint = f"did you mean {close!r}?" if close else None
    return f"unknown {kind} {name!r}{'; ' + hint if hint else ''} (known: {', '.join(known) or 'none'})"


def check_choice(value: Any, name: str, choices: Iterable[str], *, kind: str | None = None) -> str:
    """``value`` if it is one of ``choices``; else an error with the choices and a "did you mean".

    ``kind`` names what the choices are (default: ``name``), e.g. ``"pair plan"``:
    ``"pair_plan: unknown pair plan 'al'; did you mean 'all'? (known: item, all)"``.
    """
    known = list(choices)
    if isinstance(value, str) and value in known:
        return value
    if not isinstance(value, str):
        raise InputError(f"{name} must be one of {', '.join(known)}, got {value!r}")
    raise InputError(f"{name}: {unknown_name_message(kind or name, value, known)}")


def check_float(
    value: Any, name: str, *, low: float | None = None, high: float | None = None,
    low_open: bool = False, high_open: bool = False, meaning: str = "",
) -> float:
    """``value`` as a finite float (NaN and inf refused; bool is not a number) within the bounds.

    Parameters
    ----------
    low, high : float, optional
        Bounds, inclusive unless ``low_open`` / ``high_open``.
    """
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(float(value))
    if ok:
        v = float(value)
        if low is not None and (v <= low if low_open else v < low):
            ok = False
        if high is not None and (v >= high if high_open else v > high):
            ok = False
    if ok:
        return float(value)
    if low is not None and high is not None:
        what = f"a number in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    elif low is not None:
        what = f"a finite number {'>' if low_open else '>='} {low:g}"
    elif high is not None:
        what = f"a finite number {'<' if high_open else '<='} {high:g}"
    else:
        what = "a finite number"
    raise InputError(f"{name} must be {what}{meaning}, got {value!r}")


def check_positive_float(value: Any, name: str, meaning: str = "") -> float:
    """``value`` as a finite float > 0."""
    return check_float(value, name, low=0.0, low_open=True, meaning=meaning)


def check_probability(value: Any, name: str, *, open_interval: bool = False, meaning: str = "") -> float:
    """``value`` as a float in [0, 1] (``open_interval``: in (0, 1), e.g. a split fraction)."""
    return check_float(value, name, low=0.0, high=1.0, low_open=open_interval, high_open=open_interval,
                       meaning=meaning)


def check_file(path: Any, name: str, *, missing: type[Exception] = FileNotFoundError) -> Path:
    """``path`` as a Path, checked to be an existing file (not a folder) before anything opens it.

    Raises
    ------
    FileNotFoundError
        (or ``missing``) Nothing is at ``path``.
    InputError
        ``path`` is a folder.
    """
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{name}: {str(p)!r} is a folder; give a file")
    if not p.is_file():
        raise missing(f"{name}: no such file {str(p)!r}")
    return p
