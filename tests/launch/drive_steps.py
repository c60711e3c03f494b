"""``python drive_steps.py START_METHOD ROOT``: a driver (what ``probe sweep`` runs) of two stand-in
steps that write their pids into ROOT and sleep a minute, for the tests that stop the driver."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

from vlprobe.launch.executors import LocalExecutor  # noqa: E402
from vlprobe.launch.steps import Step, run_steps  # noqa: E402


def main(start_method: str, root: Path) -> None:
    executor = LocalExecutor(jobs=2, threads=1, gpus=[], start_method=start_method, entry="tests.launch.step_entry:main",
                             preload=(), python=(sys.executable, str(HERE / "step_entry.py")))
    steps = [Step(name, ("pidfile", str(root / f"{name}.pid"), "60")) for name in ("a", "b")]
    try:
        run_steps(steps, executor, root, echo=lambda _: None)
    finally:
        executor.close()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
