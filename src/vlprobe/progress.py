"""Progress on stderr: one line saying what a long step will do, then a tqdm bar with an ETA.

Everything here is silent when ``enabled`` is false (the CLI's ``--quiet``). Results never go to
stderr, so a quiet run and a verbose run write the same files and the same stdout.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["format_bytes", "progress_bar", "say", "warn"]


def say(enabled: bool, message: str) -> None:
    """Print ``message`` as one line on stderr when ``enabled``."""
    if enabled:
        print(message, file=sys.stderr, flush=True)


def warn(message: str | None) -> None:
    """Print a warning line on stderr, ``--quiet`` or not (None: nothing to say)."""
    if message:
        print(message, file=sys.stderr, flush=True)


def progress_bar(enabled: bool, total: int, desc: str, unit: str = "it") -> Any:
    """A tqdm bar on stderr (elapsed, ETA, rate); a disabled bar when not ``enabled``."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, disable=not enabled, file=sys.stderr, leave=False,
                dynamic_ncols=True, mininterval=0.5)


def format_bytes(n: float) -> str:
    """``123456789`` -> ``'118 MiB'`` (binary units, no decimals below GiB)."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}" if unit == "GiB" else f"{n / size:.0f} {unit}"
    return f"{int(n)} B"
