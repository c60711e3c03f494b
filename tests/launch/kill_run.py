"""``python kill_run.py ARGS`` (or :func:`probe`, a fork server's entry point): ``probe ARGS`` in
this process, SIGKILLed on purpose once.

With ``VLPROBE_TEST_KILL=K/N:MARKER`` in the environment, the run of ``--shard K/N`` kills
itself right after its first chunk is written and marked done, if the file MARKER does not exist
yet (it is made first): the first try of that shard dies part-way, its retry resumes. Any other
run is plain ``probe ARGS``.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any


def main(args: list[str]) -> None:
    spec = os.environ.get("VLPROBE_TEST_KILL", "")
    shard, _, marker = spec.partition(":")
    given = args[args.index("--shard") + 1] if "--shard" in args else None
    if spec and given == shard and not Path(marker).exists():
        Path(marker).touch()
        from vlprobe.extract.cache.writer import CacheWriter

        original = CacheWriter.write

        def write(self: CacheWriter, *a: Any, **k: Any) -> None:
            original(self, *a, **k)
            os.kill(os.getpid(), signal.SIGKILL)

        CacheWriter.write = write  # type: ignore[method-assign]
    from vlprobe.cli import main as probe

    sys.argv = ["probe", *args]
    probe()


def probe() -> None:
    """The entry point of a forked step (``sys.argv`` is ``["probe", *args]``)."""
    main(sys.argv[1:])


if __name__ == "__main__":
    main(sys.argv[1:])
