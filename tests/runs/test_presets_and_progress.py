"""The ``paper`` and ``quick`` presets, and what ``probe run`` says on stderr (off with --quiet)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.experiments.helpers import only_run
from vlprobe.cli import app
from vlprobe.experiments.separability import EXPERIMENT as SEP
from vlprobe.experiments.task_adaptation import EXPERIMENT as TA
from vlprobe.experiments.variant_probe import EXPERIMENT as VP
from vlprobe.fixtures.caches import planted_cache
from vlprobe.runs.presets import PRESET_VALUES


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return planted_cache(tmp_path_factory.mktemp("presets") / "p.h5", n_items=16, n_variants=3, n_layers=2,
                         signal_layer=1, hidden=4)


def test_a_preset_sets_its_values_and_explicit_options_win() -> None:
    base = {"cache": Path("c"), "out": Path("o")}
    paper = TA.make_config(base)
    assert (paper.seeds, paper.epochs, paper.width) == (11, 200, 1024)  # the paper's settings by default
    assert TA.preset_of(paper) == "paper"
    quick = VP.make_config(base, preset="quick")
    assert (quick.seeds, quick.epochs, quick.width) == tuple(PRESET_VALUES["variant-probe"]["quick"][k]
                                                             for k in ("seeds", "epochs", "width"))
    assert quick.epochs < paper.epochs and quick.width < paper.width and quick.seeds < paper.seeds
    assert VP.preset_of(quick) == "quick"
    mixed = VP.make_config({**base, "seeds": 5}, preset="quick")
    assert mixed.seeds == 5  # an explicit setting wins
    assert VP.preset_of(mixed) is None  # it matches neither preset
    assert SEP.make_config(base, preset="quick").seeds == 1
    with pytest.raises(ValueError, match="preset: unknown preset 'fast'"):
        SEP.make_config(base, preset="fast")


def test_the_paper_preset_is_the_library_default() -> None:
    for exp in (TA, VP, SEP):
        default = exp.make_config({"cache": Path("c"), "out": Path("o")})
        assert {k: getattr(default, k) for k in PRESET_VALUES[exp.name]["paper"]} == PRESET_VALUES[exp.name]["paper"]


def test_two_presets_at_once_are_refused(cache: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["run", "separability", "--cache", str(cache), "--out", str(tmp_path),
                                      "--quick", "--preset", "paper"])
    assert result.exit_code == 2
    assert result.stderr.strip() == "error: preset: give one preset, got paper, quick"


def test_quick_run_records_its_preset_and_talks_on_stderr(cache: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["run", "variant-probe", "--cache", str(cache), "--out", str(tmp_path),
                                      "--quick", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    quick = PRESET_VALUES["variant-probe"]["quick"]
    n_probes = 2 * 2 * quick["seeds"]  # 2 layers x target/control x seeds
    assert f"variant-probe: training {n_probes} MLP probes" in result.stderr
    assert f"width {quick['width']}, {quick['epochs']} epochs" in result.stderr and "MiB for training" in result.stderr
    assert "variant-probe training" in result.stderr and "model-epoch" in result.stderr  # the tqdm bar
    assert "MLP probes" not in result.stdout and "model-epoch" not in result.stdout  # stdout: results only
    run = only_run(tmp_path / "variant-probe" / "manifest.json")
    assert run["preset"] == "quick"
    assert (run["config"]["seeds"], run["config"]["epochs"], run["config"]["width"]) == (
        quick["seeds"], quick["epochs"], quick["width"])
    assert run["seeds"] == list(range(quick["seeds"]))


@pytest.mark.parametrize(
    ("experiment", "extra", "said"),
    [
        ("variant-probe", ["--quick", "--epochs", "2", "--device", "cpu"], "MLP probes"),
        ("task-adaptation", ["--quick", "--epochs", "2", "--pooling", "cls", "--device", "cpu"], "MLP probes"),
        ("separability", ["--quick"], "linear SVMs"),
    ],
)
def test_quiet_silences_stderr_and_changes_nothing_else(experiment: str, extra: list[str], said: str, cache: Path,
                                                         tmp_path: Path) -> None:
    runner = CliRunner()
    loud = runner.invoke(app, ["run", experiment, "--cache", str(cache), "--out", str(tmp_path / "loud"), *extra])
    quiet = runner.invoke(app, ["run", experiment, "--cache", str(cache), "--out", str(tmp_path / "quiet"), *extra,
                                "--quiet"])
    assert loud.exit_code == 0 and quiet.exit_code == 0, loud.output + quiet.output
    assert said in loud.stderr
    # --quiet silences progress; warnings about the results (separability here: a cache without the
    # wwh tags) still speak: the quiet run says exactly the loud run's warning lines, nothing else
    warnings = [line for line in loud.stderr.splitlines() if line.startswith("warning: ")]
    assert quiet.stderr.splitlines() == warnings, quiet.stderr
    assert all("'Why is Winoground Hard?' tags" in line for line in warnings), warnings
    if said == "MLP probes":  # the run-time estimate (a measured training step) only where progress is said
        assert f"{experiment}: about " in loud.stderr
    assert loud.stdout.replace("loud", "quiet") == quiet.stdout
    files = sorted(p.name for p in (tmp_path / "loud" / experiment).glob("*.csv"))
    assert files and files == sorted(p.name for p in (tmp_path / "quiet" / experiment).glob("*.csv"))
    for name in files:  # same process, same thread count: the same arithmetic
        assert (tmp_path / "loud" / experiment / name).read_text() == (tmp_path / "quiet" / experiment / name).read_text()
