"""The ``probe`` typer app and its error handling, which every command module registers on.

Bad input ends with one line on stderr (``error: ...``) and exit code 2, never a traceback.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer
from typer.core import TyperGroup

from vlprobe import __version__

F = TypeVar("F", bound=Callable[..., Any])


class OneLineErrors(TyperGroup):
    """A command group whose usage errors (unknown option, bad value) are one ``error:`` line.

    Typer/click would print a usage box; vlprobe promises one line and exit code 2 for every
    kind of bad input, whether click or the library finds it.
    """

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        try:
            rv = super().main(args=args, prog_name=prog_name, complete_var=complete_var,
                              standalone_mode=False, **extra)
        except typer.Abort:
            typer.echo("error: aborted", err=True)
            rv = 130
        except typer.TyperException as exc:  # click's ClickException family, vendored by typer
            if type(exc).__name__ == "NoArgsIsHelpError":
                exc.show()  # type: ignore[attr-defined]
            else:
                ctx = getattr(exc, "ctx", None)
                hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
                msg = " ".join(exc.format_message().split())  # type: ignore[attr-defined]
                typer.echo(f"error: {msg}{hint}", err=True)
            rv = getattr(exc, "exit_code", 2)
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


def _fail(msg: str, code: int = 2) -> typer.Exit:
    typer.echo("error: " + " ".join(str(msg).split()), err=True)
    return typer.Exit(code)


def guarded(fn: F) -> F:
    """Turn the library's input errors into one line on stderr and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (ValueError, TypeError, FileNotFoundError, NotADirectoryError, PermissionError) as exc:
            raise _fail(str(exc) or type(exc).__name__) from None
        except KeyboardInterrupt:
            raise _fail("interrupted; finished chunks are kept, rerun the same command to resume", 130) from None

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
        sys.stderr.close()


__all__ = ["OneLineErrors", "app", "guarded"]
