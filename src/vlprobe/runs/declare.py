"""Experiments declared once: options with their type, default, help and checks, and the record.

An experiment's config is a frozen, keyword-only dataclass deriving from :class:`Options` whose
fields are declared with :func:`option`. That one declaration gives

* the library API: ``SeparabilityConfig(cache=..., out=..., C=10.0)``, checked on construction
  (types, choices, ranges; a string given to a list or number field is parsed the way the
  command line parses it), so a config object is always valid;
* the command line: ``probe run NAME`` is generated from the fields (flag = the field name with
  ``-`` for ``_``, the same default, the declared help; see :mod:`vlprobe.cli.declared`);
* the manifest record: :meth:`Experiment.manifest` writes the config and the declaration's
  version.

Option groups shared by several experiments (the MLP settings, the item split, the bootstrap,
the results folder) are :class:`Options` subclasses the configs inherit from
(:mod:`vlprobe.runs.option_groups`); an experiment changes a group's default with
:meth:`Options.redeclare`. An :class:`Experiment` names the config class, the function that
computes a run's rows and how the result is printed; :meth:`Experiment.run` claims the run's
results slot, computes and writes the outputs. It is registered by name in
:data:`vlprobe.registry.EXPERIMENTS`.

This module imports nothing heavy: the command line imports a declaration only when its command
runs or shows its help.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import os
import sys
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from vlprobe.validation import InputError, check_choice, check_float, check_int

if TYPE_CHECKING:
    from vlprobe.runs.charts import Chart

__all__ = [
    "REQUIRED",
    "DeclaredOption",
    "Experiment",
    "OptionSpec",
    "Options",
    "check_key_values",
    "check_name_values",
    "count_or_fraction",
    "declared_options",
    "floats",
    "ints",
    "key_values",
    "names",
    "option",
]

#: Key of a field's metadata that holds its :class:`OptionSpec`.
METADATA_KEY = "vlprobe.option"
C = TypeVar("C", bound="Options")
#: :meth:`Options.redeclare`'s default that makes an option required.
REQUIRED: Any = dataclasses.MISSING
_KEEP: Any = object()


@dataclass(frozen=True)
class OptionSpec:
    """What :func:`option` records about a field (see there)."""

    help: str
    parse: Callable[[str], Any] | None = None
    choices: tuple[Any, ...] | None = None
    check: Callable[[Any, str], Any] | None = None
    repeat: bool = False
    metavar: str | None = None
    role: str = "setting"
    off: tuple[str, ...] = ()


#: What an option is to a run: ``input`` (a cache, a score file), ``setting`` (changes the
#: numbers), ``runtime`` (how it runs: device, workers, progress) or ``output`` (where and
#: under which name the results go). Only settings distinguish two runs of one input.
ROLES = ("input", "setting", "runtime", "output")
#: Help panel and order of the options of each role outside a group (settings: the command's own).
ROLE_PANELS = {"input": ("Inputs", 0), "setting": ("", 10), "runtime": ("Runtime", 80), "output": ("Output", 90)}


def option(
    default: Any = dataclasses.MISSING,
    *,
    help: str,
    parse: Callable[[str], Any] | None = None,
    choices: Sequence[Any] | None = None,
    check: Callable[[Any, str], Any] | None = None,
    repeat: bool = False,
    metavar: str | None = None,
    role: str = "setting",
    off: Sequence[str] = (),
) -> Any:
    """A config field declared as an option; its flag is ``--`` + the field name with ``-`` for
    ``_`` (an on/off option defaulting to True also gets ``--no-<name>``; a repeatable one is
    spelled in the singular, one value per use).

    Parameters
    ----------
    default : Any, optional
        The library default, which is also the command line's; leave it out for a required
        option. Defaults must be immutable (tuples, not lists).
    help : str
        One line for ``--help``; ``{experiment}`` is replaced by the experiment's name.
    parse : callable, optional
        ``str -> value`` for fields the command line gives as text (comma lists, counts or
        fractions). Also applied when the library is given a string for such a field; the
        default is written back for the command line by :func:`format_value`.
    choices : sequence, optional
        Allowed values (of each element, for a tuple field).
    check : callable, optional
        ``(value, param) -> value``: a further check or normalisation; raise
        :class:`~vlprobe.validation.InputError` naming ``param``.
    repeat : bool
        A repeatable option (``--image-root A --image-root B``) of a tuple field.
    role : {"setting", "input", "runtime", "output"}
        See :data:`ROLES`. Runtime and output options do not count when a rerun is compared
        with the recorded run.
    off : sequence of str
        The off switches of an on/off option that defaults to True, long one first
        (``("--quiet", "-q")``); default ``--no-<name>``.
    """
    spec = OptionSpec(
        help=help, parse=parse, choices=tuple(choices) if choices is not None else None, check=check,
        repeat=repeat, metavar=metavar, role=role, off=tuple(off),
    )
    if role not in ROLES:
        raise TypeError(f"option role must be one of {ROLES}, got {role!r}")
    if isinstance(default, list | dict | set):
        raise TypeError(f"option default must be immutable (a tuple, not a {type(default).__name__})")
    return field(default=default, metadata={METADATA_KEY: spec})


# -- parsers the command line and the library share ---------------------------------------------------


def names(text: str) -> tuple[str, ...]:
    """``"a, b,"`` -> ``("a", "b")``."""
    return tuple(x.strip() for x in text.split(",") if x.strip())


def ints(text: str) -> tuple[int, ...]:
    """``"1,2,5"`` -> ``(1, 2, 5)``."""
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise InputError(f"must be comma-separated integers, got {text!r}") from None


def floats(text: str) -> tuple[float, ...]:
    """``"0,.25,1"`` -> ``(0.0, 0.25, 1.0)``."""
    try:
        return tuple(float(x) for x in text.split(","))
    except ValueError:
        raise InputError(f"must be comma-separated numbers, got {text!r}") from None


def count_or_fraction(text: str) -> int | float:
    """``"100"`` -> 100 (a count), ``"0.25"`` -> 0.25 (a fraction)."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise InputError(f"must be a count (100) or a fraction (0.25), got {text!r}") from None


def key_values(texts: Sequence[str], param: str, *, identifiers: bool = True) -> dict[str, str]:
    """``["score_head=itc"]`` -> ``{"score_head": "itc"}`` (a repeatable ``NAME=VALUE`` option).

    With ``identifiers`` (parameter names) a name takes ``_`` for ``-``; without (registered
    names such as ``blind-lm``) it is kept as given. A text without ``=``, an empty name or
    value, or a name given twice is an :class:`~vlprobe.validation.InputError` naming ``param``.
    """
    out: dict[str, str] = {}
    for text in texts:
        name, sep, value = str(text).partition("=")
        name = name.strip().replace("-", "_") if identifiers else name.strip()
        if not sep or not name or not value.strip():
            raise InputError(f"{param} must look like NAME=VALUE (e.g. score_head=itc), got {text!r}")
        if name in out:
            raise InputError(f"{param}: {name!r} is given twice")
        out[name] = value.strip()
    return out


def check_key_values(texts: tuple[str, ...], param: str) -> tuple[str, ...]:
    """:func:`key_values` as an option check: the texts, each well formed, no name twice."""
    key_values(texts, param)
    return texts


def check_name_values(texts: tuple[str, ...], param: str) -> tuple[str, ...]:
    """:func:`key_values` of registered names (kept as given) as an option check."""
    key_values(texts, param, identifiers=False)
    return texts


def format_value(value: Any) -> str:
    """The command-line text of a default: tuples comma-joined, floats exact (``0.25``, ``1``)."""
    if isinstance(value, tuple):
        return ",".join(format_value(v) for v in value)
    if isinstance(value, float):
        text = repr(value)
        return text[:-2] if text.endswith(".0") else text
    return str(value)


# -- the declared options of a config class -----------------------------------------------------------


@dataclass(frozen=True)
class DeclaredOption:
    """One option of a config class, resolved: its field, spec, type and group.

    Attributes
    ----------
    name : str
        The field name.
    spec : OptionSpec
    hint : Any
        The field's type (``int``, ``Path | None``, ``tuple[str, ...]``, ...).
    default : Any
        The library default (``dataclasses.MISSING`` when required).
    panel : str
        Title of the option group it was declared in ("" for the experiment's own options).
    rank : int
        Sort key of the group (inputs first, the results folder last).
    """

    name: str
    spec: OptionSpec
    hint: Any
    default: Any
    panel: str
    rank: int

    @property
    def required(self) -> bool:
        return self.default is dataclasses.MISSING

    @property
    def flag(self) -> str:
        """``--`` + the name with ``-`` for ``_``; a repeatable option's in the singular (one value
        per use: ``--model-option`` sets ``model_options``)."""
        name = self.name[:-1] if self.spec.repeat and self.name.endswith("s") else self.name
        return "--" + name.replace("_", "-")

    @property
    def optional(self) -> bool:
        """None is allowed."""
        return _is_optional(self.hint)

    @property
    def base(self) -> Any:
        """The type without ``None`` (``Path | None`` -> ``Path``)."""
        return _strip_none(self.hint)

    def cli_default(self) -> Any:
        """The default as the command line writes it (text for parsed fields)."""
        if self.required or self.default is None:
            return self.default
        if self.spec.repeat:
            return list(self.default) or None
        if self.spec.parse is not None:
            return format_value(self.default)
        return self.default

    def from_cli(self, value: Any) -> Any:
        """A command-line value as the field's value."""
        if self.spec.repeat:
            return tuple(value or ())
        if value is None:
            return None
        if self.spec.parse is not None and isinstance(value, str):
            return _parsed(self.spec.parse, value, self.name)
        return value


def declared_options(cls: type) -> tuple[DeclaredOption, ...]:
    """The options of a config class in command-line order: inputs, the states read, own
    settings, groups, runtime, output."""
    return _declared_options(cls)


# Behind a plain function: mypy reads a frozen dataclass's class object as unhashable (its
# instances' __hash__), and a ``type`` argument here is hashable to it.
@functools.cache
def _declared_options(cls: type) -> tuple[DeclaredOption, ...]:
    hints = typing.get_type_hints(cls)
    found = []
    for position, f in enumerate(dataclasses.fields(cls)):
        spec = f.metadata.get(METADATA_KEY)
        if spec is None:
            continue
        origin = _declaring_class(cls, f.name)
        group_rank = origin.__dict__.get("rank", Options.rank) if origin is not cls else Options.rank
        panel, rank = ROLE_PANELS[spec.role]
        if spec.role == "setting" and origin is not cls and origin.__dict__.get("panel"):
            panel, rank = origin.__dict__["panel"], group_rank
        found.append(((rank, group_rank, position), DeclaredOption(f.name, spec, hints[f.name], f.default, panel, rank)))
    return tuple(opt for _, opt in sorted(found, key=lambda t: t[0]))


def _declaring_class(cls: type, name: str) -> type:
    """The most basic class of ``cls``'s MRO that declares field ``name``."""
    for klass in reversed(cls.__mro__):
        if name in inspect.get_annotations(klass):
            return klass
    return cls


class Options:
    """Base of experiment configs and option groups: frozen, keyword-only dataclasses.

    Subclasses are decorated with ``@dataclass(frozen=True, kw_only=True)``. On construction
    every declared field is checked and normalised: ``None`` only where the type allows it;
    integers (not bools) for ``int``; numbers for ``float`` (stored as float); strings or path-like
    objects for ``Path`` (stored as Path); lists or tuples for tuple fields (stored as tuples);
    a string given to a parsed field goes through its parser; then choices and the field's own
    check. Errors are :class:`~vlprobe.validation.InputError` naming the field.
    Cross-field rules go in :meth:`check`.
    """

    #: An option group's help panel title and its place among the settings (the command's own
    #: settings come first, at 10); options of another role go to that role's panel.
    panel: ClassVar[str] = ""
    rank: ClassVar[int] = 10

    def __post_init__(self) -> None:
        for opt in declared_options(type(self)):
            value = getattr(self, opt.name)
            new = _normalise(opt, value)
            if new is not value:
                object.__setattr__(self, opt.name, new)
        self.check()

    def check(self) -> None:
        """Rules that involve several fields (override; raise InputError)."""

    def resolved(self, name: str, value: Any) -> Any:
        """What ``value`` of option ``name`` stands for in this config, as outputs record it and
        runs are named by (override where a value is resolved from other options: the
        model-loading group's ``dtype`` ``auto``, the dtype the model's reference code loads it
        in). The base: ``value`` itself."""
        return value

    @classmethod
    def redeclare(cls, name: str, default: Any = _KEEP, *, help: str | None = None,
                  choices: Sequence[Any] | None = None) -> Any:
        """Field ``name`` of this group with another default, help or (fewer) choices, for a
        config that inherits it.

        Write ``depth: int = MLPOptions.redeclare("depth", 3)`` in the config's body; the field
        keeps its place, checks and group (the config's annotation gives its type: ``str | None``
        with a default of None makes a required option optional). ``default=REQUIRED`` makes it
        required.
        """
        f = cls.__dataclass_fields__[name]  # type: ignore[attr-defined]
        spec = f.metadata[METADATA_KEY]
        if help is not None:
            spec = dataclasses.replace(spec, help=help)
        if choices is not None:
            spec = dataclasses.replace(spec, choices=tuple(choices))
        value = f.default if default is _KEEP else default
        return field(default=value, metadata={METADATA_KEY: spec})

    def replace(self: C, **changes: Any) -> C:
        """A copy with ``changes`` (checked like a new config)."""
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]


# -- checks -------------------------------------------------------------------------------------------


def _is_optional(hint: Any) -> bool:
    return _is_union(hint) and type(None) in typing.get_args(hint)


def _is_union(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType)


def _strip_none(hint: Any) -> Any:
    if not _is_union(hint):
        return hint
    rest = [a for a in typing.get_args(hint) if a is not type(None)]
    if len(rest) == 1:
        return rest[0]
    return typing.Union[tuple(rest)]  # noqa: UP007 - built from a runtime tuple


def _parsed(parse: Callable[[str], Any], text: str, param: str) -> Any:
    """``parse(text)``; a parser's error (``must be ..., got ...``) gets the parameter's name."""
    try:
        return parse(text)
    except InputError as exc:
        msg = str(exc)
        raise InputError(msg if msg.startswith(param) else f"{param} {msg}") from None


def _normalise(opt: DeclaredOption, value: Any) -> Any:
    param, spec, base = opt.name, opt.spec, opt.base
    if value is None:
        if opt.optional:
            return None
        raise InputError(f"{param} is required, got None")
    if isinstance(value, str) and spec.parse is not None and base is not str:
        value = _parsed(spec.parse, value, param)
    value = _coerce(value, base, param)
    if spec.choices is not None:
        for v in value if isinstance(value, tuple) else (value,):
            check_choice(v, param, spec.choices)
    if spec.check is not None:
        value = spec.check(value, param)
    return value


def _coerce(value: Any, hint: Any, param: str) -> Any:
    """``value`` as type ``hint`` (see :class:`Options`), or InputError."""
    if hint is Any:
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise InputError(f"{param} must be True or False, got {value!r}")
        return value
    if hint is int:
        return check_int(value, param)
    if hint is float:
        return check_float(value, param)
    if hint is str:
        if not isinstance(value, str):
            raise InputError(f"{param} must be a string, got {value!r}")
        return value
    if hint is Path:
        if not isinstance(value, str | os.PathLike):
            raise InputError(f"{param} must be a path, got {value!r}")
        return value if isinstance(value, Path) else Path(value)
    if typing.get_origin(hint) is tuple:
        if isinstance(value, str) or not isinstance(value, Sequence):
            raise InputError(f"{param} must be a list, got {value!r}")
        element = typing.get_args(hint)[0]
        return tuple(_coerce(v, element, param) for v in value)
    if _is_union(hint):  # int | float: a number, kept as given
        if isinstance(value, bool) or not isinstance(value, tuple(typing.get_args(hint))):
            raise InputError(f"{param} must be {' or '.join(a.__name__ for a in typing.get_args(hint))}, got {value!r}")
        return value
    raise TypeError(f"option {param}: no check for type {hint!r}")


# -- the experiment -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Experiment:
    """One registered experiment (``probe run NAME``).

    Attributes
    ----------
    name : str
        The registered name; results go to ``OUT/<name>/``.
    version : int
        Bumped when the experiment's outputs change meaning; recorded in every manifest.
    config : type
        Its :class:`Options` dataclass: every option, with type, default, help and checks.
    compute : callable
        With ``label``: ``compute(config, slot) -> RunRows``, the run's numbers, which
        :meth:`run` writes (``slot``: the claimed :class:`~vlprobe.runs.writing.RunSlot`).
        Without: ``compute(config) -> result`` does the work and writes its own outputs.
    report : callable, optional
        ``report(config, result) -> lines`` printed by the command line.
    fixed : mapping
        Config fields the experiment sets itself (not options); e.g. the benchmark of
        ``sugarcrepe`` and ``valse``, which share one config.
    presets : mapping
        Named sets of option values (``{"quick": {"epochs": 20}}``): ``--preset NAME`` (or its
        shorthand ``--NAME``) on the command line, where options given explicitly win; the
        manifest names the first preset whose values a run's settings have.
    omit : tuple of str
        Config fields this experiment does not offer on the command line (they keep their
        defaults), e.g. VALSE's options on ``sugarcrepe``.
    swept : tuple of str
        Settings whose values the rows already show (``layers``, ``seeds``, ``ks``): they name a
        run (:meth:`run_settings`) but get no setting column of their own.
    row_columns : tuple of str
        Setting columns every row fills itself (a sweep inside one run: variant-similarity's
        ``agg`` and ``lambda``).
    chart : Chart, optional
        How ``probe plot`` and ``probe report`` draw its tidy rows
        (:class:`~vlprobe.runs.charts.Chart`); None: not drawn.
    label : callable, optional
        ``label(config) -> str``: the run's results label (``config.name`` or the input's model),
        from the config and cheap reads of its inputs (a cache's header), before any work; it may
        check the inputs. None: ``compute`` writes its own outputs (no tidy CSV).
    """

    name: str
    version: int
    config: type[Options]
    compute: Callable[..., Any]
    report: Callable[[Any, Any], Iterable[str]] | None = None
    fixed: Mapping[str, Any] = field(default_factory=dict)
    presets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    omit: tuple[str, ...] = ()
    swept: tuple[str, ...] = ()
    row_columns: tuple[str, ...] = ()
    chart: Chart | None = None
    label: Callable[[Any], str] | None = None

    def __post_init__(self) -> None:
        known = {o.name for o in declared_options(self.config)}
        unknown = sorted((set(self.fixed) | set(self.omit) | set(self.swept)) - known)
        if unknown:
            raise TypeError(f"experiment {self.name}: fixed, omitted or swept fields {unknown} are not options of "
                            f"{self.config.__name__}")
        for preset, values in self.presets.items():
            if preset in known or preset == "preset":
                raise TypeError(f"experiment {self.name}: preset name {preset!r} is an option's name (its --{preset} flag)")
            unknown = sorted(set(values) - known)
            if unknown:
                raise TypeError(f"experiment {self.name}: preset {preset!r} sets unknown options {unknown}")

    def __call__(self, config: Any) -> Any:
        """Run it (as the registry's other entries are called)."""
        return self.run(config)

    def run(self, config: Any) -> Any:
        """Run the experiment: claim its results slot, compute, write the outputs.

        1. :meth:`claim` ``OUT/<name>/<run>``, refusing a clash before any work;
        2. ``compute(config, slot)`` -> :class:`~vlprobe.runs.writing.RunRows`;
        3. :meth:`manifest` and :meth:`write`: the tidy CSV and the run's manifest entry;
        4. the side files: ``<run>.items.csv`` (per-item rows), ``<run>.summary.csv``, the
           experiment's own (per-item scores).

        Returns
        -------
        csv_path, manifest_path : Path
        rows : list of dict
            The tidy rows written. (Without ``label``: what ``compute(config)`` returns.)
        """
        if self.label is None:
            return self.compute(config)
        from vlprobe.runs.summary import summarize, write_summary_csv
        from vlprobe.runs.writing import RunSlot, write_tidy_csv

        label = self.label(config)
        slot = RunSlot(label, self.claim(config, label))
        asked = getattr(config, "threads", None)  # (the MLP probes' --threads)
        if asked is None and "torch" not in sys.modules:
            # Nothing to set: torch (about a second to import) is loaded only if the run uses it,
            # and then its count is the one the run had (null: the run never used torch).
            got = self.compute(config, slot)
            threads = sys.modules["torch"].get_num_threads() if "torch" in sys.modules else None
        else:
            from vlprobe.devices import cpu_threads

            with cpu_threads(asked) as threads:
                got = self.compute(config, slot)
        extra = {**(dict(got.extra) if got.extra else {}), "cpu_threads": threads}
        manifest = self.manifest(config, got.inputs, seeds=got.seeds, extra=extra, device=got.device)
        csv_path, manifest_path = self.write(config, label, got.rows, manifest)
        if got.item_rows is not None:
            write_tidy_csv(csv_path.with_name(slot.file(".items.csv")), got.item_rows, self.run_settings(config))
        if got.summary:
            write_summary_csv(csv_path.with_name(slot.file(".summary.csv")), summarize(got.rows))
        for suffix, write in got.files.items():
            write(csv_path.with_name(slot.file(suffix)))
        return csv_path, manifest_path, got.rows

    def options(self) -> tuple[DeclaredOption, ...]:
        """The command-line options: the declared fields, fixed and omitted ones aside."""
        left_out = {*self.fixed, *self.omit}
        return tuple(o for o in declared_options(self.config) if o.name not in left_out)

    def make_config(self, values: Mapping[str, Any], *, preset: str | None = None,
                    given: Iterable[str] | None = None) -> Any:
        """The config of a run: the fixed fields, then the preset's values, then ``values``.

        Parameters
        ----------
        values : mapping
            Option values (command-line values already parsed).
        preset : str, optional
            A name of :attr:`presets`.
        given : iterable of str, optional
            The options given explicitly; a preset's value replaces only the others. Default:
            every key of ``values``.
        """
        chosen: dict[str, Any] = {}
        if preset is not None:
            check_choice(preset, "preset", self.presets)
            chosen.update(self.presets[preset])
        explicit = set(values) if given is None else set(given)
        for key, value in values.items():
            if key in explicit or key not in chosen:
                chosen[key] = value
        return self.config(**{**chosen, **self.fixed})

    def record(self, config: Any) -> dict[str, Any]:
        """The config as a manifest records it: JSON values (paths as strings, tuples as lists)."""
        from vlprobe.runs.writing import config_record

        record = config_record(config)
        for o in declared_options(type(config)):  # a value that stands for another, recorded as what it stands for
            got = config.resolved(o.name, getattr(config, o.name))
            if got is not getattr(config, o.name):
                record[o.name] = json.loads(json.dumps(got))
        return record

    def preset_of(self, config: Any) -> str | None:
        """The first preset whose every value the config has, else None."""
        for name, values in self.presets.items():
            if all(getattr(config, k) == _normalise(_option(self.config, k), v) for k, v in values.items()):
                return name
        return None

    def settings(self, config: Any) -> dict[str, Any]:
        """The setting options and their values: what changes a run's numbers, inputs aside (what
        a results table keys runs by)."""
        return {o.name: getattr(config, o.name) for o in self.options() if o.spec.role == "setting"}

    def run_settings(self, config: Any) -> Any:
        """The run's :class:`~vlprobe.runs.writing.RunSettings`: every setting option's
        value and declared default, and the setting columns of its tidy CSV. A run is named by
        its label and the settings that differ from their defaults (``clip@C=1``); a preset's
        values count as changes (a ``--quick`` run is not the paper's)."""
        from vlprobe.runs.writing import RunSettings

        opts = [o for o in self.options() if o.spec.role == "setting"]  # in the command line's order
        return RunSettings.build(
            {o.name: config.resolved(o.name, getattr(config, o.name)) for o in opts},
            # a default that is resolved per run (dtype auto) compares as what it resolves to here
            {o.name: None if o.required else config.resolved(o.name, o.default) for o in opts},
            swept=self.swept, row_columns=self.row_columns,
        )

    def ignored_on_rerun(self) -> frozenset[str]:
        """Fields that do not change what a run measures: runtime and output options."""
        return frozenset(o.name for o in declared_options(self.config) if o.spec.role in ("runtime", "output"))

    def claim(self, config: Any, label: str) -> str:
        """The run's name (``label`` and the settings it changed); refuse before any work when
        ``OUT/<name>/`` holds a run of that name from other inputs
        (:func:`~vlprobe.runs.writing.check_run_slot`)."""
        from vlprobe.runs.writing import check_run_slot

        return check_run_slot(config.out, self.name, label, self.record(config), ignore=self.ignored_on_rerun(),
                              settings=self.run_settings(config))

    def manifest(
        self, config: Any, inputs: Mapping[str, Mapping[str, Any]], seeds: Iterable[int] = (),
        extra: Mapping[str, Any] | None = None, device: str = "cpu",
    ) -> dict[str, Any]:
        """The manifest of one run: this declaration's name and version, the config, and the
        preset its settings match (see :func:`~vlprobe.runs.writing.build_manifest`)."""
        from vlprobe.runs.writing import build_manifest

        preset = self.preset_of(config)
        more = {**({"preset": preset} if preset is not None else {}), **(dict(extra) if extra else {})}
        return build_manifest(self.name, self.version, self.record(config), inputs, seeds=seeds, extra=more,
                              device=device)

    def write(self, config: Any, label: str, rows: Iterable[Mapping[str, Any]],
              manifest: Mapping[str, Any]) -> tuple[Path, Path]:
        """Write ``OUT/<name>/<run>.csv`` (with the setting columns) and the run's manifest entry
        (:func:`~vlprobe.runs.writing.write_results`)."""
        from vlprobe.runs.writing import write_results

        return write_results(config.out, self.name, label, rows, manifest, ignore=self.ignored_on_rerun(),
                             settings=self.run_settings(config))


def _option(cls: type, name: str) -> DeclaredOption:
    for opt in declared_options(cls):
        if opt.name == name:
            return opt
    raise KeyError(name)
