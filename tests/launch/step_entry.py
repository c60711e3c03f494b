"""A stand-in step for the executor tests: ``probe WHAT [ARG]`` without loading vlprobe's command
line, as a fork server's entry point (:func:`main`) or a script (``python step_entry.py WHAT``).

WHAT is ``say`` (Python and C-level writes to stdout and stderr), ``exit N``, ``raise``,
``kill`` (SIGKILL itself), ``segv`` (a segfault), ``kill-once MARKER`` (SIGKILL itself unless MARKER exists, made
first), ``threads`` (torch's threads and OMP_NUM_THREADS), ``env NAME...``, ``burn SECONDS``
(CPU), ``sleep SECONDS``, ``pidfile FILE SECONDS`` (its pid and its parent's into FILE, then sleep).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from pathlib import Path


def main() -> None:
    what, *rest = sys.argv[1:]
    if what == "say":
        print("python stdout")
        print("python stderr", file=sys.stderr)
        os.write(1, b"fd 1\n")
        os.write(2, b"fd 2\n")
        libc = ctypes.CDLL(None)
        libc.printf(b"libc printf\n")
        libc.fflush(None)
    elif what == "exit":
        sys.exit(int(rest[0]))
    elif what == "raise":
        raise RuntimeError("a bug in the step")
    elif what == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif what == "segv":
        ctypes.string_at(0)
    elif what == "kill-once":
        marker = Path(rest[0])
        if not marker.exists():
            marker.touch()
            os.kill(os.getpid(), signal.SIGKILL)
        print("second try")
    elif what == "threads":
        import torch

        print(torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS"))
    elif what == "env":
        print(" ".join(f"{name}={os.environ.get(name)}" for name in rest))
    elif what == "burn":
        end = time.process_time() + float(rest[0])
        while time.process_time() < end:
            pass
    elif what == "sleep":
        time.sleep(float(rest[0]))
    elif what == "pidfile":
        Path(rest[0] + ".tmp").write_text(f"{os.getpid()} {os.getppid()}")
        os.replace(rest[0] + ".tmp", rest[0])
        time.sleep(float(rest[1]))


if __name__ == "__main__":
    sys.argv[0] = "probe"
    main()
