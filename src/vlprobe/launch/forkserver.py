"""A fork server for the local executor: one process pays the imports, each step is a fork of it.

Starting ``python -m vlprobe`` costs a few CPU seconds before the step does anything (importing
torch, transformers, scikit-learn, typer); a plan of many short steps spends most of its time
there. :class:`ForkServer` starts one server process (``python -c ...``), which imports
:data:`PRELOAD` once, runs no torch operation (so no thread pool and no CUDA exist in it) and
then forks one child per step. The child is a fresh process as far as the step is concerned:

- fds 0, 1 and 2 are ``/dev/null``, the step's log, the step's log (``os.dup2``: output written
  by C code lands in the log too); ``sys.stdout`` is line-buffered;
- its environment is the step's (threads, ``CUDA_VISIBLE_DEVICES``, launcher variables
  removed), set before anything in it can initialise CUDA; ``torch.set_num_threads`` is called
  with the step's threads (the OpenMP runtime read ``OMP_NUM_THREADS`` when the server loaded
  it: the server is started with the steps' value, and the child sets it again);
- the working directory is the caller's, ``sys.argv`` is ``["probe", *args]``, and the global
  random generators of ``random`` and numpy are reseeded from the OS (a fork would share them);
- it runs the entry point (``vlprobe.cli:main``) and ends like an interpreter: ``SystemExit``'s
  code, an uncaught exception's traceback in the log and exit code 1, ``atexit`` handlers run;
- it dies with the server (``PR_SET_PDEATHSIG``), so a server killed from outside takes its
  steps with it and the caller sees them killed (and retries them), never orphans that still
  write their outputs.

What a module reads from the environment when it is imported (``HF_HUB_OFFLINE`` by
huggingface_hub, ``OMP_NUM_THREADS`` by OpenMP) is what the server was started with: the steps'
environment, less their GPU, as it was when the executor started its first step.

The server reaps its children with ``os.wait4``: the caller gets each step's exit code
(negative: the signal that killed it) and CPU seconds, a killed step's included. When its caller
closes the connection, or dies (Ctrl-C, SIGKILL: the kernel closes its end), the server stops the
steps still running (SIGTERM, SIGKILL after :data:`GRACE` seconds) and exits: a driver that is
gone leaves no server and no step behind (they resume from their done masks on the next run). Fork safety: the server forks from its only thread as long as the BLAS
libraries start no pool (``OMP_NUM_THREADS=1``); with more threads, numpy's and scipy's
OpenBLAS hold an idle pool, which OpenBLAS itself stops around ``fork`` (``pthread_atfork``).
pyarrow's jemalloc background thread (pandas, imported by scikit-learn) is turned off in the
server (``JE_ARROW_MALLOC_CONF=background_thread:false``, unless the environment sets it).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
import traceback
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["GRACE", "PRELOAD", "ForkServer", "ServerEnded"]

#: Seconds the server gives its running steps between SIGTERM and SIGKILL once its caller is gone.
GRACE = 5.0

#: Modules the server imports once (a module that fails to import is left out).
PRELOAD: tuple[str, ...] = (
    "torch", "torch._dynamo", "numpy", "h5py", "PIL.Image", "sklearn", "scipy.stats",  # torch._dynamo: Adam's first step
    "transformers", "transformers.modeling_utils", "transformers.image_processing_utils",
    "transformers.models.clip.modeling_clip", "transformers.models.clip.processing_clip",
    "transformers.models.lxmert.modeling_lxmert", "transformers.models.bert.tokenization_bert",
    "typer._adapters", "typer._click",  # typer's parts it imports when a command runs
    "vlprobe.cli", "vlprobe.extract.runner", "vlprobe.extract.models.clip", "vlprobe.extract.regions",
    "vlprobe.extract.cache.reader", "vlprobe.probes.linear", "vlprobe.probes.mlp", "vlprobe.runs.writing",
    "vlprobe.runs.summary", "vlprobe.experiments.separability", "vlprobe.experiments.task_adaptation",
    "vlprobe.experiments.variant_probe",
)

_SERVE = ("import json, sys; sys.path[:] = json.loads(sys.argv[2]); "
          "from vlprobe.launch.forkserver import serve; serve(int(sys.argv[1]), sys.argv[3])")


class ServerEnded(RuntimeError):
    """The fork server is gone (killed from outside, or it could not start)."""


@dataclass(frozen=True)
class Ended:
    """A step's end as the server saw it: exit code (negative: killed by that signal), CPU seconds."""

    rc: int
    cpu: float | None


class ForkServer:
    """The caller's side of one server process (module docstring).

    Parameters
    ----------
    env : mapping
        The server's environment (the steps' own, less what differs between steps).
    entry : str
        ``"module:function"`` each step calls with no arguments (``sys.argv`` holds its arguments).
    preload : sequence of str
        Modules the server imports before its first fork.
    """

    def __init__(self, env: Mapping[str, str], entry: str = "vlprobe.cli:main",
                 preload: Sequence[str] = PRELOAD) -> None:
        self.entry = entry
        server_env = dict(env)
        server_env.setdefault("JE_ARROW_MALLOC_CONF", "background_thread:false")
        paths = [p or os.getcwd() for p in sys.path]
        ours, theirs = socket.socketpair()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _SERVE, str(theirs.fileno()), json.dumps(paths), ",".join(preload)],
                pass_fds=[theirs.fileno()], env=server_env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._sock = ours
        self._buffer = b""
        self._ended: dict[int, Ended] = {}
        self._running: set[int] = set()
        self._next = 0
        self._gone = False
        self._closed = weakref.finalize(self, _close, ours, self._proc, self._running)
        ready = self._wait("ready")
        if ready.get("cuda"):
            self.close()
            raise ServerEnded("a module the fork server imported initialised CUDA, which a fork cannot use; "
                              "leave it out of preload, or use start_method spawn")
        #: Threads of the server after its imports (1: every fork is from a single-threaded process).
        self.threads: int = int(ready["threads"])
        self.pid: int = int(ready["pid"])

    @property
    def alive(self) -> bool:
        """Whether the server still takes steps."""
        return not self._gone and self._proc.poll() is None

    def start(self, args: Sequence[str], log: str | os.PathLike[str], env: Mapping[str, str],
              threads: int | None) -> int:
        """Fork a child that runs the entry point with ``args``, its output appended to ``log``;
        its pid."""
        self._next += 1
        self._send({"id": self._next, "args": list(args), "log": os.fspath(log), "env": dict(env),
                    "threads": threads, "cwd": os.getcwd(), "entry": self.entry})
        got = self._wait("started", self._next)
        if "error" in got:
            raise OSError(f"the fork server could not start the step: {got['error']}")
        pid = int(got["pid"])
        self._running.add(pid)
        return pid

    def ended(self, pid: int) -> Ended | None:
        """The end of child ``pid``, or None while it runs. A server that is gone has taken its
        running children with it: they are reported killed (SIGKILL), CPU unknown."""
        self._read(block=False)
        if pid in self._ended:
            self._running.discard(pid)
            return self._ended.pop(pid)
        if self._gone and pid in self._running:
            self._running.discard(pid)
            return Ended(-signal.SIGKILL, None)
        return None

    def kill(self, pid: int, sig: int = signal.SIGTERM) -> None:
        """Send ``sig`` to child ``pid`` if it still runs (as far as the server said)."""
        self._read(block=False)
        if pid in self._running and pid not in self._ended and not self._gone:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def close(self) -> None:
        """Take no more steps: the server stops the steps still running (SIGTERM, then SIGKILL
        after :data:`GRACE` seconds) and exits; waits for that."""
        self._gone = True
        self._closed()

    # the wire: one JSON object a line each way
    def _send(self, msg: Mapping[str, Any]) -> None:
        if self._gone:
            raise ServerEnded("the fork server is gone")
        try:
            self._sock.sendall((json.dumps(msg) + "\n").encode())
        except OSError as exc:
            self._gone = True
            raise ServerEnded(f"the fork server is gone ({exc})") from None

    def _wait(self, kind: str, ident: int | None = None) -> dict[str, Any]:
        while True:
            for msg in self._read(block=True):
                if msg.get("kind") == kind and (ident is None or msg.get("id") == ident):
                    return msg
            if self._gone:
                code = self._proc.poll()
                raise ServerEnded("the fork server ended" + (f" (exit {code})" if code is not None else "")
                                  + "; its error, if any, is on stderr (--start-method spawn does without it)")

    def _read(self, *, block: bool) -> list[dict[str, Any]]:
        """Messages that came in (``ended`` ones are kept, the others returned); ``block``: wait
        for one that is not ``ended`` (or for the server's end)."""
        out: list[dict[str, Any]] = []
        timeout = None if block else 0.0
        while not self._gone:
            ready, _, _ = select.select([self._sock], [], [], timeout)
            if not ready:
                break
            try:
                data = self._sock.recv(1 << 16)
            except OSError:
                data = b""
            if not data:
                self._gone = True
                break
            self._buffer += data
            *lines, self._buffer = self._buffer.split(b"\n")
            for line in lines:
                msg = json.loads(line)
                if msg.get("kind") == "ended":
                    self._ended[int(msg["pid"])] = Ended(int(msg["rc"]), msg["cpu"])
                else:
                    out.append(msg)
            if out:
                timeout = 0.0
        return out


def _close(sock: socket.socket, proc: subprocess.Popen[bytes], running: set[int]) -> None:
    sock.close()
    with contextlib.suppress(subprocess.TimeoutExpired):  # it stops its steps and exits: reap it
        proc.wait(timeout=GRACE + 10)


# --- the server process ------------------------------------------------------------------------

def _threads_now() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:  # no /proc (not Linux): threading's view, which sees Python threads only
        import threading

        return threading.active_count()


def serve(fd: int, preload: str) -> None:
    """The server's loop (module docstring): import ``preload`` (comma-separated), then fork a
    child per request on the connection ``fd`` and report each child's end."""
    import importlib

    for name in filter(None, preload.split(",")):
        try:
            importlib.import_module(name)
        except Exception:  # an optional module missing or broken: the step imports it itself
            pass
    sock = socket.socket(fileno=fd)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the steps, which end; the server goes on
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: set[int] = set()
    connected = True

    def send(msg: Mapping[str, Any]) -> None:
        nonlocal connected
        if connected:
            try:
                sock.sendall((json.dumps(msg) + "\n").encode())
            except OSError:
                connected = False

    def reap() -> None:
        while children:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                children.clear()
                return
            if pid == 0:
                return
            children.discard(pid)
            send({"kind": "ended", "pid": pid, "rc": os.waitstatus_to_exitcode(status),
                  "cpu": usage.ru_utime + usage.ru_stime})

    torch = sys.modules.get("torch")
    cuda = bool(torch is not None and torch.cuda.is_initialized())  # a fork could not use CUDA then
    send({"kind": "ready", "threads": _threads_now(), "pid": os.getpid(), "cuda": cuda})
    if cuda:
        return
    buffer = b""
    stopping: float | None = None  # when the caller went: its steps got SIGTERM then
    killed = False
    while connected or children:
        timeout = None
        if not connected and stopping is None:
            stopping = time.monotonic()
            _signal_all(children, signal.SIGTERM)
        if stopping is not None and not killed:
            timeout = stopping + GRACE - time.monotonic()
            if timeout <= 0:
                _signal_all(children, signal.SIGKILL)
                killed, timeout = True, None
        watched: list[int] = [sock.fileno(), wake_r] if connected else [wake_r]
        ready, _, _ = select.select(watched, [], [], timeout)
        if wake_r in ready:
            while True:
                try:
                    if not os.read(wake_r, 4096):
                        break
                except BlockingIOError:
                    break
            reap()
        if connected and sock.fileno() in ready:
            try:
                data = sock.recv(1 << 16)
            except OSError:
                data = b""
            if not data:
                connected = False
                continue
            buffer += data
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                request = json.loads(line)
                me = os.getpid()  # (read before the fork: in the child, getppid() may already be init's)
                try:
                    pid = os.fork()
                except OSError as exc:
                    send({"kind": "started", "id": request["id"], "error": str(exc)})
                    continue
                if pid == 0:
                    code = 1
                    try:
                        signal.set_wakeup_fd(-1)
                        for own in (wake_r, wake_w):
                            os.close(own)
                        sock.close()
                        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                        signal.signal(signal.SIGINT, signal.default_int_handler)
                        code = _run_step(request, server=me)
                    finally:
                        os._exit(code)
                children.add(pid)
                send({"kind": "started", "id": request["id"], "pid": pid})
            reap()  # a child that ended before its SIGCHLD was looked at


def _signal_all(children: set[int], sig: int) -> None:
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _die_with(server: int) -> None:
    """SIGKILL this process when the server dies (Linux; elsewhere nothing)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != server:  # the server died before prctl took effect
        os.kill(os.getpid(), signal.SIGKILL)


def _exit_code(exc: SystemExit) -> int:
    """The exit code an interpreter gives ``raise SystemExit(code)``."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    print(exc.code, file=sys.stderr)
    return 1


def _run_step(request: Mapping[str, Any], server: int) -> int:
    """In the child: become the step (module docstring), run it, return its exit code."""
    _die_with(server)
    log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    for std in (sys.stdout, sys.stderr):
        try:
            std.flush()
        except (OSError, ValueError):
            pass
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.close(null)
    try:
        sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    except (AttributeError, ValueError):
        pass
    code = 1
    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = ["probe", *request["args"]]
        _fresh_state(request.get("threads"))
        module, _, function = str(request["entry"]).partition(":")
        import importlib

        entry = getattr(importlib.import_module(module), function)
        try:
            entry()
            code = 0
        except SystemExit as exc:
            code = _exit_code(exc)
    except KeyboardInterrupt:
        traceback.print_exc()
        code = 130
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        code = _shut_down(code)
    return code


def _fresh_state(threads: int | None) -> None:
    """What a fresh interpreter would have that a fork shares with its server: torch's threads
    (OMP_NUM_THREADS was read when the server loaded OpenMP), numpy's global generator."""
    import random

    random.seed()
    if threads is None:
        given = os.environ.get("OMP_NUM_THREADS", "")
        threads = int(given) if given.isdigit() and int(given) > 0 else None
    torch = sys.modules.get("torch")
    if threads is not None and torch is not None:
        torch.set_num_threads(threads)
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()


def _shut_down(code: int) -> int:
    """An interpreter's exit: wait for non-daemon threads, run ``atexit``, flush the streams."""
    import atexit
    import threading

    try:
        threading._shutdown()  # type: ignore[attr-defined]
    except BaseException:
        traceback.print_exc()
    try:
        atexit._run_exitfuncs()
    except BaseException:
        traceback.print_exc()
    for std in (sys.stdout, sys.stderr):
        try:
            std.flush()
        except (OSError, ValueError):
            pass
    return code
