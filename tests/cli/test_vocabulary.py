"""One CLI vocabulary: every option of every command is named as the library field or parameter it
sets, has the library's default, and spells the shared concepts one way.

The rules, checked by :func:`check_command` on every command of ``probe``:

1. a flag is ``--`` + its field's name with ``-`` for ``_`` (``--pair-plan`` sets ``pair_plan``), a
   repeatable one possibly in the singular (``--model-option`` sets ``model_options``);
2. the field exists on the command's library side (an experiment's config, ``ExtractConfig``,
   ``AugmentConfig``, or the function the command calls);
3. the command line's default, parsed as the command parses it, equals the library's default (an
   experiment's ``--cache`` is optional: not given, the experiment runs on every cache under
   ``caches/``, :mod:`vlprobe.runs.each_cache`);
4. shared concepts have one spelling: a banned synonym (``--stream``, ``--scores-file``, ``--pairs``,
   ...) never appears, a bootstrap's seed is ``--bootstrap-seed``, ``--model`` is a registered
   model, ``--device`` defaults to ``auto``, ``--streams`` and ``--poolings`` take lists, ``--pooling``
   one value, ``--layers`` goes through the one layer-spec check;
5. no option is hidden (there are no old spellings);
6. an on/off option that defaults to on has an off switch.

Deliberate exceptions are in :data:`ALLOWED`, each with its reason. ``test_the_checker_flags_*``
builds a command that breaks each rule and asserts the checker says so.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import pytest
import typer
from typer.core import TyperGroup
from typer.testing import CliRunner

from vlprobe.cli import app
from vlprobe.cli.declared import command_function
from vlprobe.runs.declare import Experiment, declared_options, key_values, names, option
from vlprobe.runs.each_cache import CACHE_OPTION
from vlprobe.runs.option_groups import (
    BootstrapOptions,
    ResultsOptions,
    StateOptions,
    check_layer_spec,
)

REQUIRED = inspect.Parameter.empty

#: Flags that must not appear: a shared concept's other spellings, and the one to use.
SYNONYMS = {
    "--stream": "--streams", "--scores-file": "--scores", "--score-file": "--scores", "--pairs": "--pair-plan",
    "--uniter-config": "--model-config", "--output": "--out", "--output-dir": "--out", "--label": "--name",
    "--model-name": "--name", "--layer": "--layers", "--gpu": "--device", "--cuda": "--device",
    "--bootstrap-seeds": "--bootstrap-seed", "--verbose": "--progress", "--silent": "--quiet",
}

#: (command path or "*", flag) -> why the flag breaks a rule on purpose.
ALLOWED: dict[tuple[tuple[str, ...] | str, str], str] = {
    ("*", "--json"): "prints the command's own report as JSON; nothing in the library to set",
    ("*", "--quiet"): "the off switch of --progress: 'off with --quiet' is the spelling users know",
    (("regions", "import"), "--format"): "sets the parameter `fmt`: a parameter named `format` would shadow the builtin",
    (("regions", "export"), "--format"): "sets the parameter `fmt`: a parameter named `format` would shadow the builtin",
    (("setup", "wordnet"), "--from"): "sets `source`: `--from DIR` reads as where the copy comes from; `from` is a keyword",
    (("regions", "info"), "--labels"): "the detector's object/attribute names, read by load_labels(spec) for top_detections",
    (("augment",), "--text"): "a mode of the command (augment_texts prints variants of free texts), not a config field",
    (("augment",), "--option"): "repeatable STRATEGY.KEY=VALUE, gathered into AugmentConfig.options",
    (("augment",), "--nl-augmenter"): "the NL-Augmenter checkout, put into the options of each nlaugmenter:<...> strategy",
    (("augment",), "--progress"): "switches the progress callback augment() takes; AugmentConfig has no field for it",
    (("augment",), "--out"): "optional on the command line because --text prints instead; required by AugmentConfig",
    (("fixtures", "regions"), "--oracle"): "a mode of the command: the perfect detector's regions (oracle_regions) "
                                           "instead of random ones (random_regions_for_dataset)",
    (("fixtures", "regions"), "--boxes"): "N or MIN:MAX as regions extract's --boxes, parsed into n_boxes (the most) "
                                          "and min_boxes; unset means 36, and --oracle refuses a box count, so the "
                                          "command must see whether one was given",
    (("fixtures", "dataset"), "--format"): "sets the parameter `fmt` of write_benchmark_fixture: a parameter named "
                                           "`format` would shadow the builtin",
    (("report",), "--format"): "sets the parameter `fmt`: a parameter named `format` would shadow the builtin",
    (("plot",), "--format"): "sets plot_results' `formats` (png,pdf,svg: several): `--format` as report's, and a "
                             "parameter named `format` would shadow the builtin",
}


@dataclass(frozen=True)
class Target:
    """The library side of a command: parameter or field name -> default (REQUIRED if none).

    ``parse`` maps a command-line value to the library's value before defaults are compared;
    ``declared`` holds an experiment's declared options (rule 4 reads their types and checks).
    """

    params: Mapping[str, Any]
    parse: Mapping[str, Callable[[Any], Any]] = field(default_factory=dict)
    declared: Mapping[str, Any] = field(default_factory=dict)


def callable_target(*fns: Callable[..., Any], parse: Mapping[str, Callable[[Any], Any]] | None = None,
                    **extra: Any) -> Target:
    params: dict[str, Any] = {}
    for fn in fns:
        for p in inspect.signature(fn).parameters.values():
            if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
                params.setdefault(p.name, p.default)
    return Target({**params, **extra}, parse or {})


def config_target(cls: type, parse: Mapping[str, Callable[[Any], Any]] | None = None, **extra: Any) -> Target:
    params = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            params[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            params[f.name] = f.default_factory()
        else:
            params[f.name] = REQUIRED
    return Target({**params, **extra}, parse or {})


def experiment_target(exp: Experiment) -> Target:
    """The declared options, and ``preset`` with its shorthands (``make_config``'s argument)."""
    opts = {o.name: o for o in exp.options()}
    presets = {"preset": None, **dict.fromkeys(exp.presets, False)} if exp.presets else {}
    return Target({**{n: o.default if not o.required else REQUIRED for n, o in opts.items()}, **presets},
                  {n: o.from_cli for n, o in opts.items()}, opts)


def _dataset_options() -> dict[str, Any]:
    """The dataset loaders' selection options (extract and fixtures regions pass them through)."""
    from vlprobe.data.sugarcrepe import load_sugarcrepe
    from vlprobe.data.valse import load_valse

    target = callable_target(load_sugarcrepe, load_valse)
    return {k: target.params[k] for k in ("image_dir", "image_root", "subsets", "limit", "all_items", "strip_captions")}


def hand_written_targets() -> dict[tuple[str, ...], Target]:
    """The library side of every command that is not generated from a declaration."""
    from vlprobe.augment.runner import AugmentConfig
    from vlprobe.augment.wordnet import setup_wordnet
    from vlprobe.data.benchmark_fixtures import write_benchmark_fixture
    from vlprobe.data.sugarcrepe import sugarcrepe_report
    from vlprobe.data.synthetic import make_synthetic_winoground
    from vlprobe.data.valse import valse_report
    from vlprobe.extract.cache.merge import merge_shards
    from vlprobe.extract.regions.extraction import RegionExtractConfig
    from vlprobe.extract.regions.formats import (
        export_regions,
        import_regions,
        region_info,
        top_detections,
    )
    from vlprobe.extract.regions.merge import merge_region_shards
    from vlprobe.extract.runner import ExtractConfig
    from vlprobe.fixtures.hub_cache import write_hub_cache
    from vlprobe.fixtures.model_fixture import write_model_fixture
    from vlprobe.fixtures.oracle_regions import oracle_regions
    from vlprobe.fixtures.regions import random_regions_for_dataset
    from vlprobe.fixtures.train_clip import ClipTrainConfig
    from vlprobe.fixtures.train_lxmert import LxmertTrainConfig
    from vlprobe.launch.sharded import launch_local, launch_slurm
    from vlprobe.launch.sweep import run_sweep
    from vlprobe.launch.testbed import KnownAnswerConfig
    from vlprobe.results.collect import write_collected
    from vlprobe.results.compare import CompareConfig
    from vlprobe.results.html_report import write_report
    from vlprobe.results.plots import plot_results

    datasets = _dataset_options()
    image_root = {"image_root": lambda v: list(v) if v else None}
    return {
        ("ls",): Target({}),
        # --models FILE: vlprobe.runs.model_lists.extract_models instead of one model (--model optional then)
        ("extract",): config_target(ExtractConfig, {"poolings": names, **image_root,
                                                    "model_options": lambda v: key_values(v or (), "model_options")},
                                    **datasets, model=None, models=None),
        ("cache", "info"): Target({}),
        ("cache", "merge"): callable_target(merge_shards),
        ("plot",): callable_target(plot_results),
        ("compare",): config_target(CompareConfig),
        ("report",): callable_target(write_report),
        ("collect",): callable_target(write_collected),
        ("augment",): config_target(AugmentConfig, {"strategies": lambda v: names(v) if v else ()}, **datasets),
        ("fixtures", "dataset"): callable_target(make_synthetic_winoground, write_benchmark_fixture),
        ("fixtures", "model"): callable_target(write_model_fixture),
        ("fixtures", "hub-cache"): callable_target(write_hub_cache, parse={"models": lambda v: names(v) if v else None}),
        ("fixtures", "regions"): callable_target(random_regions_for_dataset, oracle_regions, **datasets),
        ("fixtures", "train", "clip"): config_target(ClipTrainConfig),
        ("fixtures", "train", "lxmert"): config_target(LxmertTrainConfig),
        ("fixtures", "testbed"): config_target(KnownAnswerConfig, plan_only=False),  # start_testbed, no run_testbed
        ("fixtures", "known-answers"): config_target(KnownAnswerConfig),
        ("regions", "import"): callable_target(import_regions),
        ("regions", "export"): callable_target(export_regions),
        ("regions", "extract"): config_target(RegionExtractConfig, image_root, **datasets),
        ("regions", "merge"): callable_target(merge_region_shards),
        ("regions", "info"): callable_target(region_info, top_detections),
        ("data", "info"): callable_target(sugarcrepe_report, valse_report),
        ("setup", "wordnet"): callable_target(setup_wordnet),
        ("launch", "local"): callable_target(launch_local),
        ("launch", "slurm"): callable_target(launch_slurm),
        ("sweep",): callable_target(run_sweep),
    }


def _tree() -> dict[tuple[str, ...], Any]:
    out: dict[tuple[str, ...], Any] = {}

    def walk(cmd: Any, path: tuple[str, ...]) -> None:
        if isinstance(cmd, TyperGroup):
            for name in cmd.list_commands(None):  # type: ignore[arg-type]
                walk(cmd.get_command(None, name), (*path, name))  # type: ignore[arg-type]
        else:
            out[path] = cmd

    walk(typer.main.get_command(app), ())
    return out


def _allowed(path: tuple[str, ...], flag: str, allow: Mapping[tuple[Any, str], str]) -> bool:
    return (path, flag) in allow or ("*", flag) in allow


def _flags_of(name: str, repeatable: bool) -> set[str]:
    """The spellings of field ``name``: ``--`` + it with ``-`` for ``_``; a repeatable option may
    take the singular (``--model-option NAME=VALUE`` sets ``model_options``)."""
    flags = {"--" + name.replace("_", "-")}
    if repeatable and name.endswith("s"):
        flags.add("--" + name[:-1].replace("_", "-"))
    return flags


def check_command(path: tuple[str, ...], cmd: Any, target: Target,
                  allow: Mapping[tuple[Any, str], str] = ALLOWED) -> list[str]:
    """Every way ``cmd``'s options break the rules of the module docstring."""
    where = "probe " + " ".join(path)
    problems: list[str] = []
    options = [p for p in cmd.params if p.param_type_name == "option" and p.name != "help"]
    flags = {o for p in options for o in (*p.opts, *p.secondary_opts)}
    for p in options:
        if p.hidden:  # rule 5
            problems.append(f"{where}: option {p.opts[0]} is hidden")
            continue
        flag = next((o for o in p.opts if o.startswith("--")), p.opts[0])
        if flag in SYNONYMS:  # rule 4
            problems.append(f"{where}: {flag} is spelled {SYNONYMS[flag]} everywhere")
        if flag not in _flags_of(p.name, p.multiple) and not _allowed(path, flag, allow):  # rule 1
            problems.append(f"{where}: {flag} sets {p.name!r}; name the flag as the field (or the field as the flag)")
        if p.name not in target.params:  # rule 2
            if not _allowed(path, flag, allow):
                problems.append(f"{where}: {flag} sets {p.name!r}, which the library side does not have")
            continue
        lib = target.params[p.name]  # rule 3
        if lib is REQUIRED:
            # an experiment's cache: not given, the experiment runs on every cache under caches/
            each_cache = p.name == CACHE_OPTION and hasattr(cmd.callback, "vlprobe_experiment")
            if not p.required and not each_cache and not _allowed(path, flag, allow):
                problems.append(f"{where}: {flag} is optional but the library requires {p.name!r}")
        else:
            cli = target.parse.get(p.name, lambda v: v)(p.default)
            if cli != lib and not _allowed(path, flag, allow):
                problems.append(f"{where}: {flag} defaults to {p.default!r}, the library to {lib!r}")
        if getattr(p, "is_bool_flag", False) and p.default is True and not p.secondary_opts:  # rule 6
            problems.append(f"{where}: {flag} is on by default and has no off switch")
        for off in p.secondary_opts:
            if off.startswith("--") and off != "--no-" + flag[2:] and not _allowed(path, off, allow):
                problems.append(f"{where}: the off switch of {flag} is {off}, not --no-{flag[2:]}")
        problems += _concept_problems(where, flag, p, target)
    if "--bootstrap" in flags and "--seed" in flags:
        problems.append(f"{where}: --seed beside --bootstrap; the bootstrap's seed is --bootstrap-seed")
    for name in target.declared:  # every declared option is offered
        if not any(p.name == name for p in options):
            problems.append(f"{where}: declared option {name!r} is missing from the command")
    return problems


def _concept_problems(where: str, flag: str, p: Any, target: Target) -> list[str]:
    declared = target.declared.get(p.name)
    out = []
    if flag == "--model" and "probe ls models" not in (p.help or ""):
        out.append(f"{where}: --model is a registered model; say so ('see `probe ls models`')")
    if flag == "--device" and p.default != "auto":
        out.append(f"{where}: --device defaults to auto, not {p.default!r}")
    if flag == "--name" and p.default is not None:
        out.append(f"{where}: --name (the results label) defaults to the input's name, not {p.default!r}")
    if declared is not None:
        is_list = str(declared.base).startswith("tuple")
        if flag in ("--streams", "--poolings") and not is_list:
            out.append(f"{where}: {flag} takes a list")
        if flag == "--pooling" and is_list:
            out.append(f"{where}: --pooling takes one value (a list is --poolings)")
        if flag == "--layers" and declared.spec.check is not check_layer_spec:
            out.append(f"{where}: --layers must go through the one layer-spec check")
    return out


TREE = _tree()


def _target(path: tuple[str, ...], cmd: Any, hand: dict[tuple[str, ...], Target]) -> Target:
    exp = getattr(cmd, "experiment", None)
    if exp is not None:
        from vlprobe.registry import EXPERIMENTS

        return experiment_target(EXPERIMENTS.get(exp))
    assert path in hand, f"probe {' '.join(path)}: add its library side to hand_written_targets()"
    declared = getattr(cmd.callback, "vlprobe_declared", ())  # options from a declaration (declared_options_of)
    return dataclasses.replace(hand[path], declared={o.name: o for o in declared}) if declared else hand[path]


HAND = hand_written_targets()


@pytest.mark.parametrize("path", sorted(TREE), ids=lambda p: " ".join(p))
def test_command_follows_the_vocabulary(path: tuple[str, ...]) -> None:
    cmd = TREE[path]
    assert check_command(path, cmd, _target(path, cmd, HAND)) == []


def test_every_allowed_exception_is_used() -> None:
    """An allow-list entry that no command needs any more is removed, not left to excuse new ones."""
    used = set()
    for path, cmd in TREE.items():
        target = _target(path, cmd, HAND)
        for key in ALLOWED:
            if check_command(path, cmd, target, {k: v for k, v in ALLOWED.items() if k != key}) != \
                    check_command(path, cmd, target):
                used.add(key)
    assert set(ALLOWED) == used, sorted(map(str, set(ALLOWED) - used))


#: (command path, option) that is hand-written although a shared group declares the name: it means
#: something else there.
OWN_MEANING: dict[tuple[tuple[str, ...], str], str] = {
    (("regions", "import"), "dtype"): "the stored features' dtype, None meaning float16 for uniter-npz: no model is loaded",
    (("regions", "import"), "image_dir"): "uniter-npz: the images whose pixel sizes the npz files lack, not a dataset's",
}


def _shared_option_names() -> set[str]:
    from vlprobe.runs.option_groups import DatasetOptions, ModelOptions, ProgressOption

    return {o.name for cls in (ModelOptions, DatasetOptions, ProgressOption) for o in declared_options(cls)}


def test_shared_options_come_from_the_declarations() -> None:
    """One option system: a model-loading, dataset or progress option of any command is the
    declaration of runs.option_groups (an experiment's config, or a hand-written command's
    ``declared_options_of``), never a second hand-written one; the exceptions mean something else."""
    shared, hand_written = _shared_option_names(), set()
    for path, cmd in TREE.items():
        if getattr(cmd, "experiment", None) is not None:
            continue  # generated from its config's declaration
        declared = {o.name for o in getattr(cmd.callback, "vlprobe_declared", ())}
        hand_written |= {(path, p.name) for p in cmd.params
                         if p.param_type_name == "option" and p.name in shared and p.name not in declared}
    assert hand_written == set(OWN_MEANING), sorted(hand_written ^ set(OWN_MEANING))


def test_the_model_and_dataset_options_are_declared_once() -> None:
    """Each shared option is declared in one group; a command changes its default or help with
    redeclare (same flag, type, checks and role), so the commands cannot drift apart."""
    from vlprobe.registry import EXPERIMENTS
    from vlprobe.runs.option_groups import (
        AllItemsOption,
        DatasetOptions,
        ItemOptions,
        ModelOptions,
        ProgressOption,
    )

    classes = (ModelOptions, DatasetOptions, ProgressOption)
    groups = {o.name: o for cls in classes for o in declared_options(cls)}
    seen = 0
    for path, cmd in TREE.items():
        exp = getattr(cmd, "experiment", None)
        if exp is None:  # a hand-written command: every shared name it declares is the group's
            offered, names = getattr(cmd.callback, "vlprobe_declared", ()), set(groups)
        else:  # an experiment: those of the groups its config takes (MLPOptions has a batch_size of its own)
            config = EXPERIMENTS.get(exp).config
            offered = EXPERIMENTS.get(exp).options()
            names = {o.name for cls in classes if issubclass(config, cls) for o in declared_options(cls)}
            names |= {o.name for cls in (ItemOptions, AllItemsOption) if issubclass(config, cls)
                      for o in declared_options(cls)}
        for o in offered:
            if o.name in names:
                g = groups[o.name]
                assert (o.flag, o.base, o.spec.check, o.spec.parse, o.spec.repeat, o.spec.role) == \
                    (g.flag, g.base, g.spec.check, g.spec.parse, g.spec.repeat, g.spec.role), (path, o.name)
                seen += 1
    assert seen > 100, seen  # every eval, patch and erasure command, extract, regions, fixtures, augment, data info


def test_every_declared_field_is_an_option() -> None:
    """An experiment config holds options only, each with its help."""
    from vlprobe.registry import EXPERIMENTS

    for name in EXPERIMENTS.names():
        exp = EXPERIMENTS.get(name)
        declared = {o.name for o in declared_options(exp.config)}
        assert declared == {f.name for f in dataclasses.fields(exp.config)}, name
        assert all(o.spec.help for o in declared_options(exp.config)), name


# -- the checker flags what it should ----------------------------------------------------------------


def _app(fn: Callable[..., Any]) -> typer.Typer:
    one = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    one.command("bad")(fn)
    return one


def _command(fn: Callable[..., Any]) -> Any:
    return typer.main.get_command(_app(fn))


def test_the_checker_flags_a_command_that_breaks_each_rule() -> None:
    def bad(
        stream: Annotated[str | None, typer.Option("--stream")] = None,
        pairs: Annotated[str, typer.Option("--pairs")] = "item",
        bootstrap: int = 1000,
        seed: int = 0,
        device: str = "cpu",
        model: str | None = None,
        threads: int = 2,
        batch_size: int = 16,
        strict: Annotated[bool, typer.Option("--strict/--lenient")] = True,
        hidden: Annotated[str | None, typer.Option("--old", hidden=True)] = None,
    ) -> None:
        """A command that breaks every rule."""

    target = Target({"stream": None, "pair_plan": "item", "bootstrap": 1000, "seed": 0, "device": "cpu",
                     "model": None, "batch_size": 32, "strict": True, "hidden": None})
    problems = "\n".join(check_command(("bad",), _command(bad), target, allow={}))
    for needle in (
        "--stream is spelled --streams", "--pairs is spelled --pair-plan", "--pairs sets 'pairs'",
        "--seed beside --bootstrap", "--device defaults to auto", "--model is a registered model",
        "--threads sets 'threads', which the library side does not have", "--batch-size defaults to 16, the library to 32",
        "the off switch of --strict is --lenient", "option --old is hidden",
    ):
        assert needle in problems, (needle, problems)


def test_the_checker_flags_a_declared_experiment_that_breaks_the_concepts() -> None:
    @dataclass(frozen=True, kw_only=True)
    class BadConfig(BootstrapOptions, ResultsOptions):
        streams: str = option("text", help="One stream, wrongly.")
        pooling: tuple[str, ...] = option(("cls",), parse=names, help="Several poolings, wrongly.")
        layers: str = option("all", help="A layer spec without the one check.")
        seed: int = option(0, help="A second seed beside the bootstrap's.")

    exp = Experiment("bad", 1, BadConfig, lambda c: None)
    cmd = _command(command_function(exp))
    problems = "\n".join(check_command(("bad",), cmd, experiment_target(exp), allow={}))
    for needle in ("--streams takes a list", "--pooling takes one value", "--layers must go through",
                   "--seed beside --bootstrap"):
        assert needle in problems, (needle, problems)


def test_the_checker_passes_a_declared_experiment_that_follows_the_vocabulary() -> None:
    @dataclass(frozen=True, kw_only=True)
    class GoodConfig(StateOptions, BootstrapOptions, ResultsOptions):
        cache: Path = option(role="input", help="A cache.")
        C: float = option(1.0, help="Inverse regularisation.")

    exp = Experiment("good", 1, GoodConfig, lambda c: None)
    assert check_command(("good",), _command(command_function(exp)), experiment_target(exp), allow={}) == []


# -- one meaning per flag -----------------------------------------------------------------------------


def test_seed_is_not_the_bootstrap_seed(tmp_path: Path) -> None:
    """``--seed`` is never a second name of ``--bootstrap-seed``: a command with a bootstrap refuses it."""
    result = CliRunner().invoke(app, ["run", "separability", "--cache", str(tmp_path / "c.h5"), "--out", str(tmp_path),
                                      "--seed", "3"])
    assert result.exit_code == 2
    assert len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith("error: No such option: --seed"), result.stderr


def test_name_is_not_spelled_model(tmp_path: Path) -> None:
    """``--model`` is a registered model wherever it exists; it never sets the results label."""
    result = CliRunner().invoke(app, ["run", "separability", "--cache", str(tmp_path / "c.h5"), "--out", str(tmp_path),
                                      "--model", "clip"])
    assert result.exit_code == 2
    assert len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith("error: No such option: --model"), result.stderr


# -- library defaults equal the command line's --------------------------------------------------------


def test_library_entry_points_default_to_the_command_lines_device() -> None:
    """Every command's --device defaults to auto (rule 4); so do the library calls behind them."""
    from vlprobe.extract.eval_scorer import load_scorer
    from vlprobe.probes import MLPProbe
    from vlprobe.probes.ensemble import fit_mlp_ensemble, iter_mlp_ensemble
    from vlprobe.registry import MODELS

    def default(fn: Callable[..., Any]) -> Any:
        return inspect.signature(fn).parameters["device"].default

    for name in MODELS.names():
        assert default(MODELS.get(name).load) == "auto", name
    assert MLPProbe().get_params()["device"] == "auto"
    for fn in (load_scorer, fit_mlp_ensemble, iter_mlp_ensemble):
        assert default(fn) == "auto", fn.__name__


def test_a_models_default_dtype_is_the_one_its_reference_code_loads_it_in() -> None:
    """--dtype defaults to auto, the dtype each model's reference code loads it in (its class's
    reference_dtype), in every command that loads a registered model and in the library calls
    behind them; each model's own load defaults to the same dtype. Every model's is float32 but
    Vera's: SugarCrepe's text_model_eval.py loads it with torch_dtype='auto', its bfloat16."""
    from vlprobe.experiments.bias_gap import BiasGapConfig
    from vlprobe.experiments.minimal_pairs import PairModelOptions
    from vlprobe.extract.eval_scorer import load_scorer
    from vlprobe.extract.model_inputs import model_dtype
    from vlprobe.extract.runner import ExtractConfig
    from vlprobe.registry import MODELS
    from vlprobe.runs.option_groups import ModelOptions

    references = {name: MODELS.get(name).reference_dtype for name in MODELS.names()}
    assert {n: d for n, d in references.items() if d != "float32"} == {"vera": "bfloat16"}
    for name in MODELS.names():
        cls = MODELS.get(name)
        assert model_dtype(cls, inspect.signature(cls.load).parameters["dtype"].default) == references[name], name
    assert inspect.signature(load_scorer).parameters["dtype"].default == "auto"
    assert ExtractConfig(model="clip").dtype == "auto"
    for group in (ModelOptions, PairModelOptions, BiasGapConfig):
        assert group.__dataclass_fields__["dtype"].default == "auto", group.__name__
    tree = _tree()
    for path in (("extract",), ("eval", "sugarcrepe"), ("run", "bias-gap"), ("run", "patch")):
        flag = next(p for p in tree[path].params if p.name == "dtype")
        assert flag.default == "auto", path
    for path in (("regions", "extract"), ("fixtures", "regions")):  # no registered model: float32 as before
        assert next(p for p in tree[path].params if p.name == "dtype").default == "float32", path
