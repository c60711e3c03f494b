"""Old option spellings, kept hidden for one release; each use prints one note naming the new flag.

A command function gets its old spellings with :func:`renamed` (hand-written commands) or from
its experiment's declaration (generated commands): each old flag becomes a hidden option of the
same type that feeds the new parameter. Giving both spellings is an input error.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

import typer
from typer.models import OptionInfo

from vlprobe.runs.declare import TAKES_VALUE

__all__ = ["CONTEXT_PARAM", "REMOVED_IN", "Renamed", "context_parameter", "given_params", "renamed", "with_renamed"]

F = TypeVar("F", bound=Callable[..., Any])
#: The release in which the old spellings go away.
REMOVED_IN = "0.2.0"
#: ``ctx.meta`` key: parameters given on the command line through an old spelling.
_GIVEN_KEY = "vlprobe.renamed_given"
#: The parameter through which typer hands a command function its context.
CONTEXT_PARAM = "vlprobe_ctx"


def context_parameter() -> inspect.Parameter:
    """A keyword parameter typer fills with the command's context."""
    return inspect.Parameter(CONTEXT_PARAM, inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context)


def _explicit(ctx: typer.Context, name: str) -> bool:
    source = ctx.get_parameter_source(name)
    return source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT")


@dataclass(frozen=True)
class Renamed:
    """One old spelling.

    Attributes
    ----------
    old : str
        The old flag (``--pairs``).
    param : str
        The parameter it now feeds (``pair_plan``).
    value : Any
        For an old on/off flag (``--no-original``), the value it sets; by default the old flag
        takes a value as the new one does.
    """

    old: str
    param: str
    value: Any = TAKES_VALUE

    @property
    def takes_value(self) -> bool:
        return self.value is TAKES_VALUE

    @property
    def hidden_name(self) -> str:
        return "renamed_" + self.old.lstrip("-").replace("-", "_")


def renamed(*aliases: Renamed) -> Callable[[F], F]:
    """Decorator form of :func:`with_renamed` (put it below ``@guarded``)."""

    def decorate(fn: F) -> F:
        return with_renamed(fn, aliases)

    return decorate


def given_params(ctx: typer.Context) -> set[str]:
    """Parameters given explicitly: on the command line, in the environment or by an old spelling."""
    return {name for name in ctx.params if _explicit(ctx, name)} | ctx.meta.get(_GIVEN_KEY, set())


def with_renamed(fn: F, aliases: Sequence[Renamed]) -> F:
    """``fn`` with a hidden option per old spelling (see the module docstring)."""
    if not aliases:
        return fn
    sig = inspect.signature(fn, eval_str=True)
    extra = []
    for alias in aliases:
        if alias.param not in sig.parameters:
            raise TypeError(f"renamed option {alias.old}: the command has no parameter {alias.param!r}")
        base = _base_type(sig.parameters[alias.param].annotation)
        if alias.takes_value:
            annotation: Any = Annotated[base | None, typer.Option(alias.old, hidden=True)]
            default: Any = None
        else:
            annotation, default = Annotated[bool, typer.Option(alias.old, hidden=True)], False
        extra.append(inspect.Parameter(alias.hidden_name, inspect.Parameter.KEYWORD_ONLY,
                                       annotation=annotation, default=default))
    flags = {a.param: _new_flag(sig.parameters[a.param].annotation, a) for a in aliases}
    own_context = CONTEXT_PARAM in sig.parameters

    @functools.wraps(fn)
    def wrapper(**kwargs: Any) -> Any:
        from vlprobe.validation import InputError

        ctx = kwargs[CONTEXT_PARAM] if own_context else kwargs.pop(CONTEXT_PARAM)
        for alias in aliases:
            value = kwargs.pop(alias.hidden_name)
            if not _explicit(ctx, alias.hidden_name):
                continue
            new = flags[alias.param]
            typer.echo(f"note: {alias.old} is deprecated and goes away in vlprobe {REMOVED_IN}; use {new}", err=True)
            if _explicit(ctx, alias.param) or alias.param in ctx.meta.get(_GIVEN_KEY, set()):
                raise InputError(f"{alias.param}: give {new} or its old spelling {alias.old}, not both")
            kwargs[alias.param] = value if alias.takes_value else alias.value
            ctx.meta.setdefault(_GIVEN_KEY, set()).add(alias.param)
        return fn(**kwargs)

    params = [*sig.parameters.values(), *extra, *([] if own_context else [context_parameter()])]
    wrapper.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    wrapper.vlprobe_renamed = tuple(aliases)  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


def _base_type(annotation: Any) -> Any:
    if typing.get_origin(annotation) is Annotated:
        annotation = typing.get_args(annotation)[0]
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    return args[0] if args and type(None) in typing.get_args(annotation) else annotation


def _new_flag(annotation: Any, alias: Renamed) -> str:
    """The new spelling: the option's long flag (its off switch for an old off flag)."""
    infos = [a for a in typing.get_args(annotation) if isinstance(a, OptionInfo)]
    decls = [d for info in infos for d in (info.param_decls or ())]
    if infos and isinstance(infos[0].default, str):  # typer keeps the first declaration in `default`
        decls.insert(0, infos[0].default)
    for decl in decls:
        on, _, off = decl.partition("/")
        if on.startswith("--"):
            return off.strip() if (off and not alias.takes_value and alias.value is False) else on.strip()
    return "--" + alias.param.replace("_", "-")
