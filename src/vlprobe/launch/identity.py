"""What a step of a run is: its key, made of what it reads and its options, never of how a path is spelled.

A step is a ``probe`` command (:class:`~vlprobe.launch.steps.Step`); two runs of it give the same
result when they read the same bytes with the same options. Its key is the sha256 of

* its arguments, each path among them named by what it is:

  - the value of ``--out`` (the step's output) by its place: relative to the run's folder when it
    lies inside it (``caches/clip-wino.h5``), else absolute, so that a plan given by a relative
    or an absolute path, or run from another folder, makes the same keys;
  - a path that some step of the run writes (inside one of their ``--out``: a cache an
    extraction writes, a checkpoint a ``[[steps]]`` command trains) by its place too: what it
    holds is what that step's key says, and the step that reads it waits for it;
  - any other existing path (a checkpoint folder, a dataset folder, a variants file) by its
    content: the sha256 of its bytes (a folder: of every file's name and bytes, dot files left
    out), so weights overwritten in place change the key;
  - anything else (option names, numbers, hub ids) as it is;

* and the keys of the steps it waits for, so that a changed step changes every step after it.

A key is known before anything runs (Slurm's jobs are submitted with theirs), so what another
step of the run writes enters it by place. What a step read is checked by content too, once it
ran: its record keeps the content of every existing path it read (:func:`read_contents`: the
cache a probe run read, the checkpoint a ``[[steps]]`` command trained), and a rerun counts the
step done only when they are unchanged, so that a cache overwritten in place runs what read it
again.

Hashing a large input each time would cost its reading; :class:`ContentMemo` keeps each file's
sha256 in ``<run>/state/fingerprints.json`` while its size, modification and change times and
inode stay the same, so a rerun reads only what changed.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

from vlprobe.io.atomic import write_json

__all__ = ["OUTPUT_OPTIONS", "POSITIONAL", "ContentMemo", "canonical", "command_tokens", "inside", "made_places",
           "outputs_of", "read_contents", "step_keys"]

#: Options whose value is a step's output (named by its place in the key, never by its content).
OUTPUT_OPTIONS = ("--out",)
_MEMO_FILE = "fingerprints.json"
#: What :func:`_tokens` gives as the option of a positional value.
POSITIONAL = "<positional>"
_MEMO_KIND = "step-fingerprints"


class _Keyed(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def args(self) -> tuple[str, ...]: ...

    @property
    def after(self) -> tuple[str, ...]: ...


def canonical(path: str | os.PathLike[str], root: Path) -> str:
    """``path`` as a key names it: relative to ``root`` when inside it, else absolute (normalised,
    links not followed: a key does not depend on what the path points to now)."""
    p = os.path.normpath(os.path.abspath(path))
    r = os.path.normpath(os.path.abspath(root))
    if p == r:
        return "."
    if p.startswith(r + os.sep):
        return os.path.relpath(p, r)
    return p


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def outputs_of(args: Sequence[str]) -> list[str]:
    """The values of the output options (:data:`OUTPUT_OPTIONS`) of one command's ``args``."""
    return [value for option, value in command_tokens(args) if option in OUTPUT_OPTIONS]


class ContentMemo:
    """sha256 of files, remembered across runs in ``state/fingerprints.json`` (module docstring)."""

    def __init__(self, state: Path | None) -> None:
        self.path = state / _MEMO_FILE if state is not None else None
        self._known: dict[str, list[Any]] = {}
        self._changed = False
        if self.path is not None and self.path.is_file():
            try:
                raw = json.loads(self.path.read_text(encoding="utf-8"))
                files = raw.get("files", {}) if isinstance(raw, dict) else {}
                self._known = {k: v for k, v in files.items() if isinstance(v, list) and len(v) == 5}
            except (OSError, ValueError):
                self._known = {}

    def file(self, path: Path) -> str:
        """The hex sha256 of the file ``path``'s bytes."""
        real = os.path.realpath(path)
        st = os.stat(real)
        stamp = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
        known = self._known.get(real)
        if known is not None and known[:4] == stamp:
            return str(known[4])
        from vlprobe.provenance import sha256_file

        digest = sha256_file(real)
        self._known[real] = [*stamp, digest]
        self._changed = True
        return digest

    def content(self, path: Path) -> str:
        """``"sha256:<hex>"`` of a file's bytes, or of a folder's files (each name and bytes, in
        name order, dot files and folders left out)."""
        if not path.is_dir():
            return "sha256:" + self.file(path)
        h = hashlib.sha256()
        for f in sorted(_files(path)):
            h.update(f"{f.relative_to(path).as_posix()}:{self.file(f)}\n".encode())
        return "sha256:" + h.hexdigest()

    def save(self) -> None:
        """Write what was learnt (nothing when nothing changed or there is no state folder)."""
        if self.path is None or not self._changed or not self.path.parent.is_dir():
            return
        write_json(self.path, {"files": self._known}, kind=_MEMO_KIND)
        self._changed = False


def _files(folder: Path) -> Iterable[Path]:
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for name in filenames:
            if not name.startswith("."):
                yield Path(dirpath) / name


def step_keys(steps: Sequence[_Keyed], root: Path, memo: ContentMemo | None = None) -> dict[str, str]:
    """Each step's key (module docstring); ``steps`` in an order where each comes after the steps
    it waits for (:func:`~vlprobe.launch.steps.ordered_steps`); ``root`` is the run's folder."""
    memo = memo if memo is not None else ContentMemo(None)
    made = made_places(steps, root)
    keys: dict[str, str] = {}
    for s in steps:
        blob = json.dumps({"args": [_named(option, value, root, made, memo) for option, value in
                                    command_tokens(s.args)],
                           "after": {a: keys[a] for a in s.after}}, sort_keys=True)
        keys[s.name] = "sha256:" + hashlib.sha256(blob.encode()).hexdigest()
    memo.save()
    return keys


def made_places(steps: Sequence[_Keyed], root: Path) -> list[str]:
    """The places (:func:`canonical`) of every output the ``steps`` write (their ``--out``)."""
    return sorted({canonical(o, root) for s in steps for o in outputs_of(s.args)})


def read_contents(args: Sequence[str], root: Path, memo: ContentMemo | None = None) -> dict[str, str]:
    """The content (:meth:`ContentMemo.content`) of every existing path among ``args`` but the
    outputs, by place (:func:`canonical`): what a step's record keeps of what it read."""
    memo = memo if memo is not None else ContentMemo(None)
    out: dict[str, str] = {}
    for option, token in command_tokens(args):
        if option in ("", *OUTPUT_OPTIONS):
            continue
        key, sep, value = token.partition("=")
        path = value if sep and key.isidentifier() and value and os.path.exists(value) else token
        if path and os.path.exists(path):
            out[canonical(path, root)] = memo.content(Path(path))
    return out


def command_tokens(args: Sequence[str]) -> list[tuple[str, str]]:
    """Every token of ``args`` as (the option it is the value of, the token): an option itself as
    ``("", "--name")``, a positional value as ``(POSITIONAL, value)``."""
    out: list[tuple[str, str]] = []
    option = ""
    for a in args:
        if a.startswith("--") and "=" in a:
            opt, value = a.split("=", 1)
            out += [("", opt), (opt, value)]
            option = ""
        elif a.startswith("-") and len(a) > 1 and not _is_number(a):
            out.append(("", a))
            option = a
        else:
            out.append((option or POSITIONAL, a))
            option = ""
    return out


def _named(option: str, token: str, root: Path, made: Sequence[str], memo: ContentMemo) -> str:
    """One token of a command as its key names it."""
    if option == "":  # an option's name
        return token
    if option in OUTPUT_OPTIONS:
        return "out:" + canonical(token, root)
    key, sep, value = token.partition("=")
    if sep and key.isidentifier() and value and os.path.exists(value):  # NAME=PATH (--image-root vg=...)
        return f"{key}={_path(value, root, made, memo)}"
    if not token or (not os.path.lexists(token) and not inside(canonical(token, root), made)):
        return token
    return _path(token, root, made, memo)


def _path(token: str, root: Path, made: Sequence[str], memo: ContentMemo) -> str:
    place = canonical(token, root)
    if inside(place, made):
        return "made:" + place
    if not os.path.exists(token):
        return token
    return memo.content(Path(token))


def inside(place: str, made: Sequence[str]) -> bool:
    """Whether ``place`` (:func:`canonical`) is one of the outputs ``made`` (:func:`made_places`)
    or lies inside one."""
    if "." in made and not os.path.isabs(place):  # a step writes the run's folder itself
        return True
    return any(place == m or place.startswith(m.rstrip(os.sep) + os.sep) for m in made)
