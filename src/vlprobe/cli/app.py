"""The ``probe`` typer app and its error handling, which every command module registers on.

Errors, one rule for every command: bad input (:class:`vlprobe.validation.InputError`, click's
usage errors) and file-system errors (a missing file, permission denied, no space left, a
read-only file system, ...) end with one ``error: ...`` line on stderr and exit code 2; Ctrl-C
with one line and exit code 130; a reader that closed the pipe (``probe ... | head``) ends the
command quietly with exit code 141, as a process killed by SIGPIPE; any other exception is a bug
in vlprobe: its full traceback, then one line saying so, and exit code 1.

Help shows no value placeholder for a flag (``--quiet``, not ``--quiet <bool>``).
"""

from __future__ import annotations

import errno
import functools
import os
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, ClassVar, TypeVar

import typer
from typer.core import TyperOption

from vlprobe import __version__
from vlprobe.cli.declared import DeclaredGroup
from vlprobe.io.errors import is_disk_full, no_space_error
from vlprobe.io.paths import folders_removed_on_failure
from vlprobe.validation import InputError

F = TypeVar("F", bound=Callable[..., Any])

#: Exit code of a command whose output pipe was closed by its reader (128 + SIGPIPE, as a shell shows it).
EXIT_BROKEN_PIPE = 141


def _closed_pipe() -> int:
    """Point stdout at /dev/null (the interpreter's last flush must not fail again); the exit code."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no file descriptor (a test's captured output)
        pass
    return EXIT_BROKEN_PIPE


_typer_type_column = TyperOption.display_type_rich


def _type_column(self: TyperOption, ctx: Any) -> str | None:
    """The help's value column: nothing for a flag, which takes no value."""
    if self.is_flag and self.metavar is None:
        return None
    return _typer_type_column(self, ctx)


TyperOption.display_type_rich = _type_column  # type: ignore[method-assign]


class OneLineErrors(DeclaredGroup):
    """A command group whose usage errors (unknown option, bad value) are one ``error:`` line.

    Typer/click would print a usage box; vlprobe promises one line and exit code 2 for every
    kind of bad input, whether click or the library finds it. It also holds ``probe refine``
    (built from its experiment's declaration).
    """

    declared: ClassVar[Mapping[str, str] | None] = {"refine": "refine"}

    @staticmethod
    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        return guarded(fn)

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             windows_expand_args: bool = True, **extra: Any) -> Any:
        try:
            rv = super().main(args=args, prog_name=prog_name, complete_var=complete_var,
                              standalone_mode=False, windows_expand_args=windows_expand_args,
                              **extra)
        except typer.Abort:
            typer.echo("error: aborted", err=True)
            rv = 130
        except BrokenPipeError:  # `probe ... | head` (outside a guarded command body)
            rv = _closed_pipe()
        except typer.TyperException as exc:  # click's ClickException family, vendored by typer
            if type(exc).__name__ == "NoArgsIsHelpError":
                exc.show()  # type: ignore[attr-defined]
            else:
                ctx = getattr(exc, "ctx", None)
                hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
                msg = " ".join(exc.format_message().split())
                typer.echo(f"error: {msg}{hint}", err=True)
            rv = getattr(exc, "exit_code", 2)
        except Exception as exc:  # raised outside a guarded command body
            rv = _report(exc)
        if not standalone_mode:
            return rv
        sys.exit(rv if isinstance(rv, int) else 0)


app = typer.Typer(
    name="probe",
    cls=OneLineErrors,
    help="Probe vision-language models on compositional benchmarks (vlprobe).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


#: errno values of a file system that refuses: the user's environment, not a bug of vlprobe.
_FS_ERRNOS = frozenset({
    errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.EACCES, errno.EPERM, errno.EEXIST,
    errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EFBIG, errno.ENAMETOOLONG, errno.ELOOP,
    errno.EXDEV, errno.EBUSY, errno.ETXTBSY, errno.EMFILE, errno.ENFILE,
})
_FS_ERRORS = (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError, FileExistsError)
_OPENING = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.ELOOP, errno.ENAMETOOLONG})
_WRITING = frozenset({errno.EEXIST, errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EFBIG, errno.EXDEV,
                      errno.ETXTBSY, errno.EBUSY})


def is_file_system_error(exc: BaseException) -> bool:
    """Whether ``exc`` is the file system refusing (missing file, permission, space, read-only)."""
    return isinstance(exc, _FS_ERRORS) or (isinstance(exc, OSError) and exc.errno in _FS_ERRNOS) or is_disk_full(exc)


def error_line(exc: BaseException) -> str:
    """The one line shown for an input or file-system error (an OSError names its path)."""
    if is_disk_full(exc):
        full = no_space_error(exc)
        where = f": {os.fsdecode(full.filename)}" if full.filename else ""
        what = "disk quota exceeded" if full.errno == errno.EDQUOT else "no space left on device"
        return f"{what}{where} (free some space, then rerun the same command)"
    if isinstance(exc, OSError) and exc.strerror:
        if exc.filename is not None:
            path = os.fsdecode(exc.filename)
            if exc.errno in _OPENING:
                verb = "open"
            elif exc.errno in _WRITING or not os.path.exists(path) or os.access(path, os.R_OK):
                verb = "write"
            else:
                verb = "read"
            return f"cannot {verb} {path}: {exc.strerror}"
        return f"cannot write: {exc.strerror}" if exc.errno in _WRITING else exc.strerror
    return str(exc) or type(exc).__name__


def _say_error(msg: str) -> None:
    typer.echo("error: " + " ".join(str(msg).split()), err=True)


def _report(exc: BaseException) -> int:
    """Show ``exc`` as the module docstring says; return the exit code."""
    if isinstance(exc, InputError) or is_file_system_error(exc):
        _say_error(error_line(exc))
        return 2
    traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    typer.echo(
        f"bug: this {type(exc).__name__} is a bug in vlprobe {__version__}, not a problem with your input; "
        "please report it to the vlprobe issue tracker with the traceback above and the command you ran",
        err=True,
    )
    return 1


def guarded(fn: F) -> F:
    """Run a command body: input and file-system errors become one line and exit code 2, Ctrl-C
    one line and 130, anything else its traceback, a line saying it is a bug, and exit code 1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            with folders_removed_on_failure():  # a failed command leaves no empty folder it made
                return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort, typer.TyperException):  # click's own ways out: as they are
            raise
        except KeyboardInterrupt:
            _say_error("interrupted; finished chunks are kept, rerun the same command to resume")
            raise typer.Exit(130) from None
        except BrokenPipeError:  # `probe ... | head`: the reader has what it wanted
            raise typer.Exit(_closed_pipe()) from None
        except Exception as exc:
            raise typer.Exit(_report(exc)) from None

    return wrapper  # type: ignore[return-value]


def _version(value: bool) -> None:
    if value:
        typer.echo(f"vlprobe {__version__}")
        raise typer.Exit()


@app.callback()
def main_callback(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Probe vision-language models on compositional benchmarks (vlprobe)."""


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except BrokenPipeError:  # `probe ... | head`
        sys.exit(_closed_pipe())


__all__ = ["OneLineErrors", "app", "error_line", "guarded", "is_file_system_error", "main"]
