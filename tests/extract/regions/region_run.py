"""Run ``probe ARGS...`` in this process, optionally SIGKILLing it at an exact point of a region extraction.

Usage: ``python region_run.py [--kill-at POINT:N] -- regions extract ...``

POINT is ``write`` (the N-th batch's rows are written and flushed, not yet marked done: the
crash window a resume must recompute), ``done`` (right after the N-th batch is marked done) or
``complete`` (every batch done, ``complete`` not yet set: the final phase). ``--fake`` installs
the detector test double.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence


def main(argv: list[str]) -> None:
    sep = argv.index("--")
    opts, args = argv[:sep], argv[sep + 1 :]
    kill = next((o.split("=", 1)[1] for o in opts if o.startswith("--kill-at=")), None)
    if kill:
        from vlprobe.extract.regions.chunked import ChunkedRegionWriter

        point, _, count = kill.partition(":")
        n = int(count or 1)
        calls = {"n": 0}

        def die() -> None:
            os.kill(os.getpid(), signal.SIGKILL)

        if point == "write":
            original = ChunkedRegionWriter._mark_done

            def mark_done(self: ChunkedRegionWriter, done: Sequence[str], sel: object) -> None:
                calls["n"] += 1
                if calls["n"] == n:
                    die()
                original(self, done, sel)

            ChunkedRegionWriter._mark_done = mark_done  # type: ignore[method-assign]
        elif point == "done":
            original_write = ChunkedRegionWriter.write

            def write(self: ChunkedRegionWriter, start: int, rows: object) -> None:
                original_write(self, start, rows)  # type: ignore[arg-type]
                calls["n"] += 1
                if calls["n"] == n:
                    die()

            ChunkedRegionWriter.write = write  # type: ignore[method-assign]
        elif point == "complete":
            ChunkedRegionWriter.mark_complete = lambda self: die()  # type: ignore[method-assign]
        else:
            raise SystemExit(f"unknown kill point {point!r}")
    from vlprobe.cli import main as probe

    sys.argv = ["probe", *args]
    probe()


if __name__ == "__main__":
    main(sys.argv[1:])
