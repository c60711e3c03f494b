"""Commands generated from option declarations (``probe run NAME``, ``probe eval NAME``, ``probe
refine``, and the options of ``probe extract``, ``probe regions extract``, ``probe fixtures ...``).

Each experiment's options are declared once, on its config dataclass
(:mod:`vlprobe.runs.declare`); :func:`command_function` turns the declaration into a
function whose signature typer reads (one ``Annotated`` parameter per option: the field's flag,
type, default, help, choices and group), so the command line, the library and the manifest
cannot drift apart. A hand-written command takes its options from a declaration the same way
with :func:`declared_options_of` (the shared groups of :mod:`vlprobe.runs.option_groups`: one
model-loading group, one item selection, ...).

A :class:`DeclaredCommand` is listed by name and the registry's one-line help, and builds itself
from the declaration only when it runs or shows its own help, so ``probe --help``, ``probe run
--help`` and ``probe ls`` import no experiment (and no numpy, torch or h5py).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, TypeVar

import typer
from typer.core import TyperCommand, TyperGroup

__all__ = ["DeclaredCommand", "DeclaredGroup", "build_command", "command_function", "config_from_args",
           "declared_group", "declared_options_of"]

F = TypeVar("F", bound=Callable[..., Any])
#: The parameter through which typer hands a command function its context.
CONTEXT_PARAM = "vlprobe_ctx"
#: Wraps a command function (the app's error handling); declared here as a type only, so that
#: this module needs nothing of the app that uses it.
Wrap = Callable[[Callable[..., Any]], Callable[..., Any]]


def context_parameter() -> inspect.Parameter:
    """A keyword parameter typer fills with the command's context."""
    return inspect.Parameter(CONTEXT_PARAM, inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context)


def given_params(ctx: typer.Context) -> set[str]:
    """Parameters given explicitly: on the command line or in the environment."""
    given = set()
    for name in ctx.params:
        source = ctx.get_parameter_source(name)
        if source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT"):
            given.add(name)
    return given


def _unwrapped(fn: Callable[..., Any]) -> Callable[..., Any]:
    return fn


class DeclaredCommand(TyperCommand):
    """A command made from a registered experiment's declaration when first used.

    Parameters
    ----------
    name : str
        The command's name (``separability``; ``refine`` at the top level).
    experiment : str
        The registered experiment.
    wrap : callable
        Applied to the generated command function (the app's error handling).
    """

    def __init__(self, name: str, experiment: str, wrap: Wrap = _unwrapped, **kwargs: Any) -> None:
        from vlprobe.registry import EXPERIMENTS

        self.experiment = experiment
        self._wrap = wrap
        self._built: Any = None
        super().__init__(name, help=EXPERIMENTS.describe(experiment), **kwargs)

    def _build(self) -> Any:
        if self._built is None:
            self._built = build_command(self.name or self.experiment, self.experiment, self._wrap)
        return self._built

    # click reads these when the command runs or shows its help; listing a group reads only the help.
    @property
    def params(self) -> list[Any]:
        return self._build().params

    @params.setter
    def params(self, value: list[Any]) -> None:
        if value:
            raise TypeError("a declared command's options come from its declaration")

    @property
    def callback(self) -> Callable[..., Any] | None:
        return self._build().callback

    @callback.setter
    def callback(self, value: Callable[..., Any] | None) -> None:
        if value is not None:
            raise TypeError("a declared command's callback comes from its declaration")


class DeclaredGroup(TyperGroup):
    """A typer command group that also holds :class:`DeclaredCommand` entries.

    ``declared`` maps command names to experiment names; None means every registered
    experiment under its own name but those in ``elsewhere``, which have a command of their own
    (``probe run``). :meth:`wrap` is applied to each generated command function.
    """

    declared: ClassVar[Mapping[str, str] | None] = {}
    elsewhere: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        for command, experiment in self.declared_commands().items():
            self.add_command(DeclaredCommand(command, experiment, self.wrap, rich_markup_mode=self.rich_markup_mode))
        # Commands before groups, as ``--help`` lists them.
        self.commands = dict(sorted(self.commands.items(), key=lambda kv: isinstance(kv[1], TyperGroup)))

    @staticmethod
    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        """The app's error handling around a generated command (none here)."""
        return fn

    @classmethod
    def declared_commands(cls) -> dict[str, str]:
        if cls.declared is None:
            from vlprobe.registry import EXPERIMENTS

            return {name: name for name in EXPERIMENTS.names() if name not in cls.elsewhere}
        return dict(cls.declared)


def declared_group(commands: Mapping[str, str] | None, wrap: Wrap = _unwrapped,
                   elsewhere: frozenset[str] = frozenset()) -> type[DeclaredGroup]:
    """A :class:`DeclaredGroup` class holding ``commands`` (None: every experiment not in
    ``elsewhere``), each wrapped in ``wrap``."""
    return type("DeclaredGroup", (DeclaredGroup,),
                {"declared": commands, "wrap": staticmethod(wrap), "elsewhere": elsewhere})


def build_command(name: str, experiment: str, wrap: Wrap = _unwrapped) -> Any:
    """The click command of a registered experiment (typer builds it from :func:`command_function`)."""
    from vlprobe.registry import EXPERIMENTS
    from vlprobe.runs.declare import Experiment

    exp = EXPERIMENTS.get(experiment)
    if not isinstance(exp, Experiment) or exp.name != experiment:
        raise TypeError(f"registry entry {experiment!r} is not the Experiment declared under that name: {exp!r}")
    app = typer.Typer(pretty_exceptions_enable=False, add_completion=False)
    app.command(name, help=EXPERIMENTS.describe(experiment))(command_function(exp, wrap))
    return typer.main.get_command(app)


def command_function(exp: Any, wrap: Wrap = _unwrapped) -> Callable[..., None]:
    """A typer command function for an :class:`~vlprobe.runs.declare.Experiment`.

    Its keyword parameters are the declared options; it builds the config (the preset first,
    then the options given), runs the experiment and prints the report. ``wrap`` goes around it
    (the app's error handling).
    """
    from vlprobe.runs.each_cache import CACHE_OPTION

    options = exp.options()
    # ``--cache`` not given (or a folder): the experiment runs on every cache of the folder
    # (vlprobe.runs.each_cache), so the command line asks for no cache.
    each_cache = any(o.name == CACHE_OPTION for o in options)
    params = [context_parameter()] + [
        inspect.Parameter(
            o.name, inspect.Parameter.KEYWORD_ONLY, annotation=_annotation(o, exp.name),
            default=None if o.name == CACHE_OPTION else inspect.Parameter.empty if o.required else o.cli_default(),
        )
        for o in options
    ]
    names = tuple(exp.presets)
    if names:
        help_text = "Preset option values: " + "; ".join(
            f"{p}: " + ", ".join(f"{k}={v}" for k, v in exp.presets[p].items()) for p in names
        ) + ". Options given explicitly win."
        params.append(inspect.Parameter(
            "preset", inspect.Parameter.KEYWORD_ONLY, default=None,
            annotation=Annotated[Literal[names] | None, typer.Option("--preset", help=help_text)],
        ))
        params += [
            inspect.Parameter(
                p, inspect.Parameter.KEYWORD_ONLY, default=False,
                annotation=Annotated[bool, typer.Option(f"--{p}", help=f"Same as --preset {p}.")],
            )
            for p in names
        ]

    def command(**values: Any) -> None:
        ctx = values.pop(CONTEXT_PARAM)
        parsed, preset, given = _parsed_values(exp, ctx, values)
        if each_cache and _on_each_cache(parsed):
            _run_each_cache(exp, parsed, preset, given)
            return
        config = exp.make_config(parsed, preset=preset, given=given)
        result = exp.run(config)
        if exp.report is not None:
            for line in exp.report(config, result):
                typer.echo(line)

    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {}
    command.__name__ = exp.name.replace("-", "_")
    command.vlprobe_experiment = exp  # type: ignore[attr-defined]
    wrapped = wrap(command)
    wrapped.vlprobe_experiment = exp  # type: ignore[attr-defined]
    return wrapped


def _parsed_values(exp: Any, ctx: typer.Context, values: dict[str, Any]) -> tuple[dict[str, Any], str | None, set[str]]:
    """A command's values as the config's (parsed), its preset, and the options given explicitly."""
    preset = _chosen_preset(values.pop("preset", None), [p for p in exp.presets if values.pop(p, False)])
    given = given_params(ctx) & set(values)
    return {o.name: o.from_cli(values[o.name]) for o in exp.options()}, preset, given


def config_from_args(experiment: str, args: Sequence[str]) -> Any:
    """The config the command ``probe ... NAME ARGS`` of a registered experiment runs, without
    running it (``probe launch`` reads the command it runs in shards).

    Raises
    ------
    InputError
        The arguments do not parse (the command line's message, one line), or the config refuses them.
    """
    from vlprobe.registry import EXPERIMENTS
    from vlprobe.validation import InputError

    command = build_command(experiment, experiment)
    try:
        ctx = command.make_context(experiment, list(args))
    except typer.TyperException as exc:  # click's ClickException family, vendored by typer
        raise InputError(f"command: {' '.join(exc.format_message().split())}") from None
    exp = EXPERIMENTS.get(experiment)
    parsed, preset, given = _parsed_values(exp, ctx, dict(ctx.params))
    return exp.make_config(parsed, preset=preset, given=given)


def _on_each_cache(values: Mapping[str, Any]) -> bool:
    """No cache given (nor a score file instead), or a folder given as the cache."""
    from vlprobe.runs.each_cache import CACHE_OPTION, INSTEAD_OF_CACHE

    cache = values.get(CACHE_OPTION)
    if cache is None:
        return not any(values.get(k) is not None for k in INSTEAD_OF_CACHE)
    return Path(cache).is_dir()


def _run_each_cache(exp: Any, values: dict[str, Any], preset: str | None, given: set[str]) -> None:
    """The experiment on every cache of the folder given as ``--cache`` (default ``caches/``):
    each run's report, then one summary line per model; exit code 2 when a run was refused."""
    from vlprobe.extract.defaults import CACHES_DIR
    from vlprobe.runs.each_cache import CACHE_OPTION, run_on_caches, summary_lines
    from vlprobe.validation import InputError

    folder = Path(values.pop(CACHE_OPTION) or CACHES_DIR)
    runs = run_on_caches(exp, values, folder, preset=preset, given=given - {CACHE_OPTION}, report=typer.echo)
    typer.echo("")
    for line in summary_lines(exp, runs):
        typer.echo(line)
    failed = [r for r in runs if not r.ok and not r.skipped]
    if failed:
        raise InputError(f"cache: {exp.name} failed on {len(failed)} of {len(runs)} caches under {folder} "
                         f"({', '.join(str(r.cache.name) for r in failed)}; see above)")


def declared_options_of(config: type, *, omit: Iterable[str] = (), param: str = "options") -> Callable[[F], F]:
    """Decorator: a hand-written command whose options (but ``omit``) are the declared fields of
    ``config`` (an :class:`~vlprobe.runs.declare.Options` class), after its own parameters.

    The command function takes its own parameters (arguments, modes) and ``param``: the checked
    ``config`` instance built from the options given (omitted fields keep their defaults). Put it
    below ``@guarded``, so that a refused value is one line. The command keeps the options it
    offers as ``vlprobe_declared``.
    """
    from vlprobe.runs.declare import declared_options

    left_out = set(omit)
    options = [o for o in declared_options(config) if o.name not in left_out]

    def decorate(fn: F) -> F:
        sig = inspect.signature(fn, eval_str=True)
        if param not in sig.parameters:
            raise TypeError(f"{fn.__name__}: declared options go to a parameter named {param!r}")
        own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in sig.parameters.values() if p.name != param]
        clash = {p.name for p in own} & {o.name for o in options}
        if clash:
            raise TypeError(f"{fn.__name__}: parameters {sorted(clash)} are declared options of {config.__name__}")
        name = fn.__name__.replace("_", "-")
        declared = [inspect.Parameter(o.name, inspect.Parameter.KEYWORD_ONLY, annotation=_annotation(o, name),
                                      default=inspect.Parameter.empty if o.required else o.cli_default())
                    for o in options]

        @functools.wraps(fn)
        def command(**values: Any) -> Any:
            built = config(**{o.name: o.from_cli(values.pop(o.name)) for o in options})
            return fn(**values, **{param: built})

        command.__signature__ = inspect.Signature([*own, *declared])  # type: ignore[attr-defined]
        command.__annotations__ = {}
        command.vlprobe_declared = tuple(options)  # type: ignore[attr-defined]  # read by the vocabulary test
        return command  # type: ignore[return-value]

    return decorate


def _chosen_preset(preset: str | None, flags: list[str]) -> str | None:
    """The preset of ``--preset NAME`` or of its shorthand ``--NAME``; two different ones are refused."""
    from vlprobe.validation import InputError

    chosen = {*flags, *([preset] if preset is not None else [])}
    if len(chosen) > 1:
        raise InputError(f"preset: give one preset, got {', '.join(sorted(chosen))}")
    return next(iter(chosen), None)


def _annotation(opt: Any, experiment: str) -> Any:
    """``Annotated[type, typer.Option(...)]`` of one declared option."""
    from vlprobe.runs.each_cache import CACHE_OPTION

    spec, base = opt.spec, opt.base
    flag = opt.flag
    decls = [flag]
    kind: Any
    if base is bool:
        kind = bool if opt.default is not None else bool | None  # None: neither switch given
        if opt.default is True or opt.default is None:
            off = spec.off or (f"--no-{flag[2:]}",)
            decls = [f"{flag}/{off[0]}", *(f" /{o}" for o in off[1:])]
    elif spec.repeat:
        kind = list[str] | None
    elif spec.parse is not None:
        kind = str
    elif base in (int, float, str, Path):
        kind = base
    else:
        raise TypeError(f"option {opt.name}: declare a parser for type {opt.hint!r}")
    if (opt.optional or opt.default is None or opt.name == CACHE_OPTION) and base is not bool and not spec.repeat:
        kind = kind | None
    help_text = spec.help.replace("{experiment}", experiment)
    if opt.name == CACHE_OPTION:
        help_text += " A folder: every cache under it, one run per model; not given: every cache under caches/."
    metavar = spec.metavar
    if spec.choices is not None:
        if base is str and spec.parse is None:  # one value: the choices are the metavar
            metavar = metavar or "|".join(map(str, spec.choices))
        else:
            help_text += f" Any of: {', '.join(map(str, spec.choices))}."
    # Help is rich markup: "[ids]" would be read as a style tag and vanish.
    help_text = help_text.replace("[", "\\[")
    info = typer.Option(*decls, help=help_text, metavar=metavar, rich_help_panel=opt.panel or None)
    return Annotated[kind, info]
