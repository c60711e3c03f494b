"""Experiments declared once: options checked on construction, groups, presets, the command built
from a declaration, and the manifest record."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from vlprobe.cli.app import guarded
from vlprobe.cli.declared import command_function
from vlprobe.runs.declare import (
    Experiment,
    Options,
    count_or_fraction,
    declared_options,
    floats,
    format_value,
    ints,
    names,
    option,
)
from vlprobe.runs.option_groups import (
    BootstrapOptions,
    CacheInput,
    MLPOptions,
    ResultsOptions,
    SeedsOption,
    SplitOptions,
    StateOptions,
)
from vlprobe.validation import InputError, check_positive_int


@dataclass(frozen=True, kw_only=True)
class ToyConfig(CacheInput, StateOptions, SeedsOption, SplitOptions, MLPOptions, BootstrapOptions, ResultsOptions):
    """A config with every group and one option of each kind."""

    ks: tuple[int, ...] = option((1, 5), parse=ints, help="k values.")
    C: float = option(100.0, help="SVM C.")
    loss: str = option("hinge", choices=("hinge", "squared_hinge"), help="SVM loss.")
    draws: int = option(4, check=check_positive_int, help="Draws.")
    variants_only: bool = option(False, help="Variants only.")
    depth: int = MLPOptions.redeclare("depth", 3)
    cache: Path = CacheInput.redeclare("cache", help="A toy cache.")


def run_toy(config: ToyConfig) -> dict[str, Any]:
    return dataclasses.asdict(config)


TOY = Experiment("toy", 2, ToyConfig, run_toy, lambda c, r: [f"ran {r['cache']}"],
                 presets={"quick": {"epochs": 2, "seeds": 1}})


def _toy(**kw: Any) -> ToyConfig:
    return ToyConfig(**{"cache": "c.h5", "out": "o", **kw})


# -- checks and normalisation on construction --------------------------------------------------------


def test_values_are_normalised() -> None:
    c = _toy(streams=["text", "image"], ks="1,2,10", C=10, test_size="0.3", stratify="a, b")
    assert c.cache == Path("c.h5") and c.out == Path("o")
    assert c.streams == ("text", "image") and c.ks == (1, 2, 10) and c.stratify == ("a", "b")
    assert c.C == 10.0 and isinstance(c.C, float)
    assert c.test_size == 0.3


@pytest.mark.parametrize(("changes", "needle"), [
    ({"seeds": 0}, "seeds must be"),
    ({"seeds": True}, "seeds"),
    ({"seeds": 1.5}, "seeds"),
    ({"C": "x"}, "C must be a finite number"),
    ({"C": -1.0}, None),  # C itself has no range here; separability's C does
    ({"loss": "hing"}, "loss: unknown loss 'hing'; did you mean 'hinge'"),
    ({"pooling": "sum"}, "pooling: unknown pooling 'sum' (known: cls, mean, max, pooled)"),
    ({"layers": "1:x"}, "layers"),
    ({"layers": "text=0;text=1"}, "given twice"),
    ({"ks": "1,a"}, "ks must be comma-separated integers, got '1,a'"),
    ({"test_size": "abc"}, "test_size must be a count (100) or a fraction (0.25)"),
    ({"test_size": 1.5}, "test_size must be a count of items"),
    ({"device": "gpu"}, "device must be auto, cpu, cuda, cuda:N or mps"),
    ({"cache": 3}, "cache must be a path"),
    ({"cache": None}, "cache is required"),
    ({"variants_only": "yes"}, "variants_only must be True or False"),
    ({"streams": "text"}, None),  # a string is parsed as the command line does: ("text",)
])
def test_bad_values_are_refused_naming_the_field(changes: dict[str, Any], needle: str | None) -> None:
    if needle is None:
        _toy(**changes)
        return
    with pytest.raises(ValueError, match=needle.replace("(", r"\(").replace(")", r"\)")):  # InputError
        _toy(**changes)


def test_replace_checks_again() -> None:
    c = _toy()
    assert c.replace(seeds=2).seeds == 2
    with pytest.raises(InputError, match="seeds"):
        c.replace(seeds=-1)


def test_cross_field_checks() -> None:
    @dataclass(frozen=True, kw_only=True)
    class OneOf(Options):
        a: Path | None = option(None, help="A.")
        b: Path | None = option(None, help="B.")

        def check(self) -> None:
            if (self.a is None) == (self.b is None):
                raise InputError("give exactly one of a or b")

    OneOf(a="x")
    with pytest.raises(InputError, match="exactly one"):
        OneOf()


def test_option_defaults_must_be_immutable() -> None:
    with pytest.raises(TypeError, match="immutable"):
        option([1, 2], help="A list.")


# -- groups -----------------------------------------------------------------------------------------


def test_redeclare_changes_the_default_and_keeps_the_group() -> None:
    opts = {o.name: o for o in declared_options(ToyConfig)}
    assert opts["depth"].default == 3 and opts["depth"].panel == "MLP probe"
    assert opts["depth"].spec.check is check_positive_int
    assert opts["cache"].spec.help == "A toy cache." and opts["cache"].panel == "Inputs"
    assert {f.name: f.default for f in dataclasses.fields(MLPOptions)}["depth"] == 4  # the group keeps its own


def test_options_come_in_command_line_order() -> None:
    order = [o.name for o in declared_options(ToyConfig)]
    assert order[0] == "cache"  # inputs first
    assert order[-2:] == ["out", "name"]  # the results folder last
    # The states read, then the command's own settings, then the groups; runtime options last but one.
    assert order.index("streams") < order.index("ks") < order.index("test_size") < order.index("depth") \
        < order.index("bootstrap") < order.index("device")


def test_the_mlp_settings_are_declared_once() -> None:
    """Both MLP experiments take them from the one group; only their defaults differ."""
    from vlprobe.experiments.task_adaptation import TaskAdaptationConfig
    from vlprobe.experiments.variant_probe import VariantProbeConfig

    mlp = [f.name for f in dataclasses.fields(MLPOptions)]
    for cls in (TaskAdaptationConfig, VariantProbeConfig):
        assert issubclass(cls, MLPOptions)
        opts = {o.name: o for o in declared_options(cls)}
        assert all(opts[n].spec is MLPOptions.__dataclass_fields__[n].metadata["vlprobe.option"] or
                   opts[n].spec.help == MLPOptions.__dataclass_fields__[n].metadata["vlprobe.option"].help
                   for n in mlp)
    assert (VariantProbeConfig.__dataclass_fields__["depth"].default,
            TaskAdaptationConfig.__dataclass_fields__["depth"].default) == (3, 4)


# -- the experiment ----------------------------------------------------------------------------------


def test_presets_fill_what_is_not_given() -> None:
    c = TOY.make_config({"cache": "c", "out": "o", "epochs": 7, "seeds": 11}, preset="quick", given={"cache", "out", "epochs"})
    assert (c.epochs, c.seeds) == (7, 1)  # epochs given explicitly; seeds from the preset
    assert TOY.preset_of(c) is None
    assert TOY.preset_of(c.replace(epochs=2)) == "quick"
    with pytest.raises(InputError, match="preset: unknown preset 'slow'"):
        TOY.make_config({"cache": "c", "out": "o"}, preset="slow")


def test_a_declaration_is_checked() -> None:
    with pytest.raises(TypeError, match="unknown options"):
        Experiment("x", 1, ToyConfig, run_toy, presets={"p": {"nope": 1}})
    with pytest.raises(TypeError, match="not options"):
        Experiment("x", 1, ToyConfig, run_toy, fixed={"nope": 1})


def test_settings_are_the_options_that_change_numbers() -> None:
    settings = TOY.settings(_toy())
    assert {"ks", "C", "loss", "pooling", "layers", "depth", "bootstrap", "split_seed"} <= set(settings)
    assert not {"cache", "split_file", "out", "name", "device"} & set(settings)
    assert TOY.ignored_on_rerun() == {"out", "name", "device", "threads"}  # runtime: the numbers are the same


def test_manifest_records_the_declaration(tmp_path: Path) -> None:
    c = _toy(out=tmp_path, epochs=2, seeds=1)
    m = TOY.manifest(c, {"cache": {"sha256": "0" * 64}}, seeds=[0])
    assert (m["experiment"], m["experiment_version"], m["preset"]) == ("toy", 2, "quick")
    assert m["config"]["cache"] == "c.h5" and m["config"]["ks"] == [1, 5]
    json.dumps(m)


# -- the command built from it -----------------------------------------------------------------------


def _app(exp: Experiment) -> typer.Typer:
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command("toy")(command_function(exp, guarded))
    return app


def test_the_command_builds_the_config_as_the_library_would() -> None:
    seen: dict[str, Any] = {}
    exp = dataclasses.replace(TOY, compute=lambda c: seen.update(config=c) or {"cache": c.cache})
    result = CliRunner().invoke(_app(exp), [
        "--cache", "c.h5", "--out", "o", "--ks", "1,3", "--C", "3", "--streams", "text,lang", "--variants-only",
        "--layers", "text=all;lang=-1", "--test-size", "100", "--preset", "quick", "--epochs", "7",
    ])
    assert result.exit_code == 0, result.output
    assert result.stdout == "ran c.h5\n"
    assert seen["config"] == _toy(ks=(1, 3), C=3.0, streams=("text", "lang"), variants_only=True,
                                  layers="text=all;lang=-1", test_size=100, epochs=7, seeds=1)


def test_command_line_defaults_are_the_library_defaults() -> None:
    seen: dict[str, Any] = {}
    exp = dataclasses.replace(TOY, compute=lambda c: seen.update(config=c) or {"cache": c.cache})
    assert CliRunner().invoke(_app(exp), ["--cache", "c.h5", "--out", "o"]).exit_code == 0
    assert seen["config"] == _toy()


def test_bad_values_from_the_command_line_are_one_error_line() -> None:
    result = CliRunner().invoke(_app(TOY), ["--cache", "c", "--out", "o", "--loss", "l1"])
    assert result.exit_code == 2 and "loss: unknown loss 'l1'" in result.output


@pytest.mark.parametrize(("value", "text"), [((1, 2, 5, 10), "1,2,5,10"), ((0.0, 0.25, 1.0), "0,0.25,1"),
                                              (1e-4, "0.0001"), (100.0, "100"), ("cls", "cls")])
def test_defaults_are_written_as_the_command_line_reads_them(value: Any, text: str) -> None:
    assert format_value(value) == text


def test_parsers() -> None:
    assert names(" a, b ,,") == ("a", "b")
    assert ints("1,2") == (1, 2) and floats("0,.5") == (0.0, 0.5)
    assert count_or_fraction("3") == 3 and count_or_fraction("0.5") == 0.5
    for parse, bad in ((ints, "1,,2"), (floats, "a"), (count_or_fraction, "x")):
        with pytest.raises(InputError, match="must be"):
            parse(bad)


def test_every_registered_experiment_is_a_declaration() -> None:
    from vlprobe.registry import EXPERIMENTS

    for name in EXPERIMENTS.names():
        exp = EXPERIMENTS.get(name)
        assert isinstance(exp, Experiment) and exp.name == name and exp.version >= 1
        assert issubclass(exp.config, Options) and exp.report is not None
