"""Steps (``probe`` commands) run as a dependency graph on an executor, resumably.

A :class:`Step` is one ``probe`` command with the steps it waits for. :func:`run_steps` starts
every step whose inputs are done as soon as the executor has room, the step with the costliest
chain of work behind it first; steps with the same ``exclusive`` key never run at once (runs of
one experiment share its ``manifest.json``). Each step writes ``logs/<name>.log`` (the command,
its output, its time).

Resuming
    A finished step is recorded in ``state/<name>.json`` with its key
    (:mod:`vlprobe.launch.identity`): the content of what it reads (checkpoints, data, variants:
    the bytes, not the spelling of their paths), its options, and the keys of the steps it waits
    for. A rerun skips a step whose record has its key and whose ``done`` check, if any, passes
    (a shard: its file complete); any other step runs, and every step after it. A step that runs
    under another key than its earlier run first removes what that run left
    (:func:`vlprobe.launch.records.replace_earlier`: its cache, its shard, its results), so
    it is computed afresh instead of being resumed from, or refused by, what other inputs made.
Retries
    A step that ends badly is run again, up to ``retries`` more times (a shard resumes from its
    done mask): killed, out of memory, exit 1, or exit 0 with its ``done`` check failing. A step
    that refused its input (exit 2) is not retried: the same input is refused again. Once a step
    has failed for good no new step starts; the running ones finish, then :class:`StepFailed`
    names the step, its exit and its log's last line.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vlprobe.io.paths import ensure_folder
from vlprobe.launch.executors import Executor
from vlprobe.launch.identity import ContentMemo, read_contents, step_keys
from vlprobe.launch.records import (
    Owned,
    read_record,
    replace_earlier,
    safe_name,
    write_record,
    write_try,
)
from vlprobe.validation import InputError

__all__ = ["Step", "StepCrashed", "StepFailed", "content_memo", "done_before", "ordered_steps", "plan_keys",
           "run_steps"]


@dataclass(frozen=True)
class Step:
    """One ``probe`` command of a run.

    Attributes
    ----------
    name : str
        Unique within the run (``"extract clip-trained"``, ``"shard 3/8"``).
    args : tuple of str
        The arguments of ``probe``.
    after : tuple of str
        Steps that must be done first.
    group : str
        What timings add it up under.
    cost : float
        Estimated seconds (orders ready steps: the costliest remaining chain first).
    exclusive : str
        Steps with the same non-empty key never run at once.
    done : callable, optional
        ``() -> ""`` when the step's output is complete, else what is missing; checked before a
        step starts (complete: skipped) and after it ends.
    gpu : bool
        Whether the step may use a GPU (False: a merge, a collect, a report; the executor gives
        it none: a Slurm job without a GPU, a local process that sees none).
    owns : Owned
        What it leaves that a run under another key replaces (:mod:`vlprobe.launch.records`).
    timeout_min : float, optional
        Its Slurm time limit in minutes (default: the run's limit, scaled by its cost).
    """

    name: str
    args: tuple[str, ...]
    after: tuple[str, ...] = ()
    group: str = ""
    cost: float = 1.0
    exclusive: str = ""
    done: Callable[[], str] | None = field(default=None, compare=False)
    gpu: bool = True
    owns: Owned = field(default_factory=Owned)
    timeout_min: float | None = None


class StepFailed(InputError):
    """A step refused its input (exit 2, never retried): one line naming it, its exit and its log."""


class StepCrashed(RuntimeError):
    """A step crashed or was killed after its retries (its traceback is in its log): the message
    names it, its exit and its log; not bad input, so the command exits 1 (not 2)."""


def plan_keys(steps: Sequence[Step], root: Path, memo: ContentMemo | None = None) -> dict[str, str]:
    """Each step's key (:func:`vlprobe.launch.identity.step_keys`), with ``memo`` (default: the
    content memo kept in ``root/state`` when that folder exists); ``steps`` ordered as
    :func:`ordered_steps` orders them."""
    return step_keys(steps, Path(root), memo if memo is not None else content_memo(root))


def ordered_steps(steps: Sequence[Step]) -> list[Step]:
    """``steps`` with every step after the steps it waits for; InputError for unknown names or cycles."""
    by_name: dict[str, Step] = {}
    for s in steps:
        if s.name in by_name:
            raise InputError(f"steps: two steps are named {s.name!r}")
        by_name[s.name] = s
    for s in steps:
        unknown = [a for a in s.after if a not in by_name]
        if unknown:
            raise InputError(f"steps: {s.name!r} waits for {', '.join(map(repr, unknown))}, which no step is")
    out: list[Step] = []
    state: dict[str, int] = {}

    def visit(s: Step, path: tuple[str, ...]) -> None:
        if state.get(s.name) == 2:
            return
        if state.get(s.name) == 1:
            raise InputError(f"steps: they wait for each other in a circle: {' -> '.join([*path, s.name])}")
        state[s.name] = 1
        for a in s.after:
            visit(by_name[a], (*path, s.name))
        state[s.name] = 2
        out.append(s)

    for s in steps:
        visit(s, ())
    return out


def _priorities(steps: Sequence[Step]) -> dict[str, float]:
    """Each step's cost plus the costliest chain of steps waiting on it."""
    waiting: dict[str, list[str]] = {s.name: [] for s in steps}
    for s in steps:
        for a in s.after:
            waiting[a].append(s.name)
    rank: dict[str, float] = {}
    for s in reversed(steps):
        rank[s.name] = s.cost + max((rank[n] for n in waiting[s.name]), default=0.0)
    return rank


def last_line(log: Path) -> str:
    """The last line of a step's log that its command wrote (its error, when it failed)."""
    try:
        lines = [line.strip() for line in log.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    said = [line for line in lines if not line.startswith(("(", "$ ", "# "))]
    return said[-1] if said else ""


def run_steps(
    steps: Sequence[Step], executor: Executor, root: Path, *, retries: int = 2, echo: Callable[[str], Any] = print,
    show_output: bool = False,
) -> dict[str, Any]:
    """Run ``steps`` (module docstring), logs in ``root/logs``, the record of finished steps in
    ``root/state``.

    Returns
    -------
    dict
        ``steps``: name -> {group, start, end (seconds from the start), wall, cpu, tries} of the
        steps run now; ``skipped``: the names of steps done before; ``wall``: seconds.

    Raises
    ------
    StepFailed
        A step refused its input (exit 2: one line, the command exits 2).
    StepCrashed
        A step crashed or was killed after its retries (its log holds the traceback).
    """
    ordered = ordered_steps(steps)
    rank = _priorities(ordered)
    logs, state = Path(root) / "logs", Path(root) / "state"
    ensure_folder(logs)
    ensure_folder(state)
    memo = content_memo(root)
    keys = plan_keys(ordered, root, memo)
    skipped = done_before(ordered, root, keys, memo)
    done = set(skipped)
    pending = [s for s in ordered if s.name not in done]
    if skipped:
        names = ", ".join(skipped[:6]) + (f" and {len(skipped) - 6} more" if len(skipped) > 6 else "")
        echo(f"{len(skipped)} of {len(ordered)} steps done before (skipped): {names}")
    pending.sort(key=lambda s: -rank[s.name])
    tries: dict[str, int] = {}
    running: dict[str, tuple[Any, Step, float]] = {}
    record: dict[str, dict[str, Any]] = {}
    failure: StepFailed | StepCrashed | None = None
    t0 = time.perf_counter()
    total = len(pending)
    while pending or running:
        if failure is None:
            busy = {s.exclusive for _, s, _ in running.values() if s.exclusive}
            batch: list[Step] = []
            for s in list(pending):
                if len(running) + len(batch) >= executor.slots:
                    break
                if set(s.after) <= done and not (s.exclusive and s.exclusive in busy):
                    pending.remove(s)
                    busy.add(s.exclusive)
                    batch.append(s)
            if batch:
                for s in batch:
                    replace_earlier(root, s.name, keys[s.name], s.owns, echo)
                    write_try(root, s.name, keys[s.name], s.owns)
                _start(batch, executor, logs, tries, running, record, t0)
        if not running:
            if failure is None and pending:
                raise RuntimeError(f"steps: nothing can start, yet {[s.name for s in pending]} wait")  # _ordered prevents it
            break
        time.sleep(executor.poll_interval)
        for name, (handle, s, started) in list(running.items()):
            end = executor.poll(handle)
            if end is None:
                continue
            del running[name]
            wall = time.perf_counter() - started
            log = logs / f"{safe_name(name)}.log"
            missing = s.done() if s.done is not None and end.rc == 0 else ""
            cpu = f", {end.cpu:.1f} s CPU" if end.cpu is not None else ""
            with open(log, "a", encoding="utf-8") as fh:
                fh.write(f"(exit {end.rc}, {wall:.1f} s{cpu})\n")
            if end.rc == 0 and not missing:
                done.add(name)
                record[name].update(end=time.perf_counter() - t0, wall=wall, cpu=end.cpu, tries=tries[name])
                write_record(root, name, keys[name], s.args, wall=wall, read=read_contents(s.args, root, memo))
                echo(f"[{len(done) - len(skipped)}/{total}] {name} ({wall:.1f} s{cpu})")
                if show_output:
                    echo(_indented(log))
                continue
            why = f"exit {end.rc}" if end.rc != 0 else f"exit 0 but {missing}"
            if end.rc < 0:
                why = f"killed by signal {-end.rc}"
            said = last_line(log)
            if end.rc != 2 and tries[name] <= retries:
                echo(f"{name}: {why} (try {tries[name]} of {retries + 1}); running it again"
                     + (f" [{said}]" if said else ""))
                pending.insert(0, s)
                continue
            failure = failure or (StepFailed if end.rc == 2 else StepCrashed)(
                f"step {name!r} did not finish: {why}"
                + (f" after {tries[name]} tries" if end.rc != 2 and tries[name] > 1 else "")
                + f" (log {log})" + (f": {said}" if said else "")
            )
            if running:
                echo(f"{name} failed; waiting for {', '.join(running)} to finish")
    memo.save()
    if failure is not None:
        raise failure
    return {"steps": record, "skipped": skipped, "wall": time.perf_counter() - t0}


def _start(
    batch: list[Step], executor: Executor, logs: Path, tries: dict[str, int],
    running: dict[str, tuple[Any, Step, float]], record: dict[str, dict[str, Any]], t0: float,
) -> None:
    items = []
    for s in batch:
        tries[s.name] = tries.get(s.name, 0) + 1
        log = logs / f"{safe_name(s.name)}.log"
        mode = "w" if tries[s.name] == 1 else "a"
        with open(log, mode, encoding="utf-8") as fh:
            fh.write(f"$ probe {' '.join(s.args)}\n" + (f"# try {tries[s.name]}\n" if tries[s.name] > 1 else ""))
        items.append((s.args, log))
    now = time.perf_counter()
    handles = executor.start(items, [s.gpu for s in batch])
    for s, h in zip(batch, handles, strict=True):
        running[s.name] = (h, s, now)
        record.setdefault(s.name, {"group": s.group, "start": now - t0})


def _indented(log: Path) -> str:
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    lines = [line for line in text.splitlines() if line.strip()]
    return "\n".join(line if line.startswith("$ ") else f"  {line}" for line in lines)


def done_before(steps: Sequence[Step], root: Path, keys: Mapping[str, str] | None = None,
                memo: ContentMemo | None = None) -> list[str]:
    """The steps a run in ``root`` would skip (module docstring, Resuming), in dependency order;
    ``steps`` ordered as :func:`ordered_steps` orders them, ``keys`` their keys (default:
    :func:`plan_keys`). Reads ``root/state``, writes nothing but the content memo."""
    memo = memo if memo is not None else content_memo(root)
    keys = plan_keys(steps, root, memo) if keys is None else keys
    done: dict[str, None] = {}  # (ordered, and a set for the look-ups)
    for s in steps:
        if set(s.after) <= done.keys() and finished_before(s, root, keys[s.name], memo):
            done[s.name] = None
    memo.save()
    return list(done)


def content_memo(root: Path) -> ContentMemo:
    """The content memo of the run in ``root``, kept in ``root/state`` (when that folder exists):
    a fresh one sees what the run's other processes (Slurm's jobs) added to it."""
    state = Path(root) / "state"
    return ContentMemo(state if state.is_dir() else None)


def finished_before(s: Step, root: Path, key: str, memo: ContentMemo | None = None) -> bool:
    """Whether ``s`` finished before under ``key`` (its record says so), what it read is unchanged
    since (:func:`vlprobe.launch.identity.read_contents`) and its ``done`` check passes."""
    recorded = read_record(root, s.name)
    if recorded is None or recorded.get("key") != key:
        return False
    read = recorded.get("read")
    if isinstance(read, dict) and read != read_contents(s.args, Path(root), memo):
        return False
    return s.done is None or not s.done()
