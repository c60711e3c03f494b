"""The known-answer testbed's plan, table builder and checks, on hand-written result files.

The known answers themselves (the whole testbed run, slow) are in test_known_answer_floors.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vlprobe.launch.testbed import DATASET, GROUPS, QUICK_SETTINGS, KnownAnswerConfig, plan_commands
from vlprobe.results.known_answers import EXPECTATIONS, check_expectations, known_answer_table


def test_plan_runs_every_experiment_on_every_model(tmp_path: Path) -> None:
    steps = plan_commands(KnownAnswerConfig(out=tmp_path))
    by_name = {s.name: s for s in steps}
    assert len(by_name) == len(steps)
    assert {s.group for s in steps} == set(GROUPS)
    models = {"clip-trained", "clip-bow", "clip-random", "lxmert-trained", "lxmert-objects", "lxmert-random"}
    assert not any("shuffle" in s.name for s in steps)  # the shuffled-words CLIP only with shuffle_control
    expected = {"winoground-scores", "separability", "task-adaptation", "variant-probe", "variant-similarity"}
    for name in models:
        pair = f"{name}-{DATASET}"
        extract = by_name[f"extract {pair}"]
        assert extract.args[0] == "extract" and "--variants" in extract.args
        assert f"train {name}" in extract.after and "eval dataset" in extract.after
        runs = {s.args[1] for s in steps if s.after == (f"extract {pair}",)}
        assert runs == expected | ({"recall"} if name.startswith("clip") else set()), name
        for s in steps:
            if s.after == (f"extract {pair}",):
                assert s.args[s.args.index("--name") + 1] == name
                assert s.args[s.args.index("--out") + 1] == str((tmp_path / "results").resolve())
                assert s.exclusive == f"{s.args[1]} {DATASET}"  # one experiment's runs share its manifest
                streams = ("--streams", "lang") if name.startswith("lxmert") and s.args[1] in (
                    "separability", "task-adaptation", "variant-probe") else ()
                assert (" ".join(streams) in " ".join(s.args)) and ("--streams" in s.args) == bool(streams), s.name
    assert "--shuffle" not in by_name["train clip-trained"].args
    bow = by_name["train clip-bow"]
    assert "bag-of-words" in bow.args and "openclip" in by_name["extract clip-bow-winoground"].args
    # the order-blind control learns to match the trained CLIP's image tower: it waits for it
    assert bow.after == ("train clip-trained",) and bow.args[bow.args.index("--image-tower") + 1].endswith("clip-trained")
    assert all("--untrained" in by_name[f"train {m}"].args for m in ("clip-random", "lxmert-random"))
    assert by_name["train lxmert-trained"].after == ("train regions",)
    assert "other-items" in by_name["train lxmert-objects"].args and "other-items" not in by_name["train lxmert-trained"].args
    assert by_name["known answers"].after == ("collect",) and by_name["known answers"].args[:2] == (
        "fixtures", "known-answers")
    # The page opens with the verdicts: the report waits for them and reads them.
    report = by_name[f"report {DATASET}"]
    assert "known answers" in report.after
    assert report.args[report.args.index("--known-answers") + 1] == str((tmp_path / "report" / "known_answers.json").resolve())
    held_out = {s.name for s in steps if "--held-out" in s.args}
    assert held_out == {f"separability clip-trained-{DATASET}", f"separability clip-bow-{DATASET}"}
    shuffled = plan_commands(KnownAnswerConfig(out=tmp_path, shuffle_control=True))
    assert "shuffle" in next(s for s in shuffled if s.name == "train clip-shuffle").args
    seen: set[str] = set()
    for s in steps:  # listed after what they wait for
        assert set(s.after) <= seen, s.name
        seen.add(s.name)
    for experiment, settings in QUICK_SETTINGS.items():  # the small settings are passed explicitly
        assert all(" ".join(settings) in " ".join(s.args) for s in steps if s.args[1:2] == (experiment,))


def test_plan_file_is_a_sweep_plan_of_the_same_steps(tmp_path: Path) -> None:
    """``OUT/plan.toml`` (written by every testbed run) read by ``probe sweep`` gives the steps
    :func:`plan_commands` gives: the testbed is a plan run by the sweep."""
    from vlprobe.launch.sweep import load_plan, plan_steps
    from vlprobe.launch.testbed import write_plan

    config = KnownAnswerConfig(out=tmp_path / "tb", models_dir=tmp_path / "models", seed=3, clip_steps=7)
    plan = write_plan(config, tmp_path / "plan.toml")
    assert plan_steps(load_plan(plan)) == plan_commands(config)
    assert "--steps 7" in " ".join(next(s for s in plan_commands(config) if s.name == "train clip-trained").args)


def test_longest_chain_starts_first(tmp_path: Path) -> None:
    from vlprobe.launch.steps import _priorities

    rank = _priorities(plan_commands(KnownAnswerConfig(out=tmp_path)))
    order = sorted(rank, key=lambda n: -rank[n])
    assert order[:2] == ["train dataset", "train regions"]  # everything waits for them; LXMERT on the regions
    assert order.index("train lxmert-trained") < order.index("train clip-trained") < order.index("train clip-random")


def test_plan_runs_on_the_step_runner_in_dependency_order_keeping_exclusive_steps_apart(tmp_path: Path) -> None:
    from vlprobe.launch.steps import Step
    from vlprobe.launch.testbed import run_plan

    steps = [Step("a", ("--version",), group="data", cost=1.0), Step("b", ("--version",), ("a",), "train", 5.0),
             Step("c", ("--version",), ("a",), "train", 1.0, exclusive="x"),
             Step("d", ("--version",), ("a",), "train", 1.0, exclusive="x")]
    lines: list[str] = []
    timings = run_plan(steps, 2, tmp_path, lines.append)
    t = timings["steps"]
    assert set(t) == {"a", "b", "c", "d"} and timings["wall"] > 0
    assert all(t[n]["start"] >= t["a"]["end"] for n in "bcd")
    first, second = sorted("cd", key=lambda n: t[n]["start"])
    assert t[second]["start"] >= t[first]["end"]  # same exclusive key: never at once
    assert sum(line.startswith("[") for line in lines) == 4
    assert "$ probe --version" in (tmp_path / "logs" / "b.log").read_text()
    assert any("\n  vlprobe " in text for text in lines)  # each step's command and output are echoed


def _write_csv(path: Path, rows: list[dict]) -> None:
    from vlprobe.runs.writing import TIDY_COLUMNS

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(",".join(TIDY_COLUMNS) + "\n")
        for r in rows:
            fh.write(",".join(str(r.get(c, "")) for c in TIDY_COLUMNS) + "\n")


def test_table_and_checks_from_result_files(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    rows = [{"id": i, "caption_0": f"a red circle left of a blue square {i}", "caption_1": f"a blue square left of a red circle {i}"}
            for i in range(2)]
    (data / "examples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    results = tmp_path / "results"
    base = {"experiment": "winoground-scores", "model": "clip-trained", "task": "target", "split": "all", "subset": "all"}
    _write_csv(results / "winoground-scores" / "clip-trained.csv", [
        {**base, "metric": "text", "value": 60.0}, {**base, "metric": "image", "value": 55.0},
        {**base, "subset": "collapsed_tag=Both", "metric": "text", "value": 1.0},
    ])
    scores = [(0, 0, 0, 0.9), (0, 0, 1, 0.1), (0, 1, 0, 0.2), (0, 1, 1, 0.8),  # item 0: right
              (1, 0, 0, 0.3), (1, 0, 1, 0.4), (1, 1, 0, 0.1), (1, 1, 1, 0.5)]  # item 1: text score wrong
    (results / "winoground-scores" / "clip-trained.scores.jsonl").write_text("".join(
        json.dumps({"item": f"winoground/{i}", "image": f"winoground/{i}/i{j}", "text": f"winoground/{i}/c{k}",
                    "score": s}) + "\n" for i, j, k, s in scores))
    sep = {"experiment": "separability", "model": "clip-trained", "stream": "text", "pooling": "cls", "split": "train",
           "subset": "all", "metric": "separable_margin"}
    _write_csv(results / "separability" / "clip-trained.csv", [
        {**sep, "layer": 3, "task": "target", "value": 9.0}, {**sep, "layer": 4, "task": "target", "value": 4.0},
        {**sep, "layer": 4, "task": "control", "seed": 0, "value": 1.0},
        {**sep, "layer": 4, "task": "control", "seed": 1, "value": 3.0},
    ])
    # The order-blind control: its two captions' scores differ by float rounding only (a tie), or not at all.
    bow = [(0, 0, 0, 0.5), (0, 0, 1, 0.5 + 3e-8), (0, 1, 0, 0.25), (0, 1, 1, 0.25),
           (1, 0, 0, 0.1), (1, 0, 1, 0.1 - 6e-8), (1, 1, 0, 0.3), (1, 1, 1, 0.3 + 6e-8)]
    (results / "winoground-scores" / "clip-bow.scores.jsonl").write_text("".join(
        json.dumps({"item": f"winoground/{i}", "image": f"winoground/{i}/i{j}", "text": f"winoground/{i}/c{k}",
                    "score": s}) + "\n" for i, j, k, s in bow))
    table = known_answer_table(results, data, ["clip-trained", "clip-bow", "clip-shuffle"], seeds={"train_seed": 0})
    values = {(r["model"], r["metric"]): r["value"] for r in table}
    assert values[("clip-trained", "winoground.text")] == 60.0
    assert values[("clip-trained", "winoground.text.same_words")] == 50.0
    assert values[("clip-trained", "winoground.same_words.tied")] == 0.0
    # A win by 6e-8 is rounding, not a told-apart pair: no item right, every item tied.
    assert values[("clip-bow", "winoground.text.same_words")] == 0.0
    assert values[("clip-bow", "winoground.same_words.tied")] == 100.0
    assert values[("clip-trained", "match.auroc")] == pytest.approx(15 / 16)  # 0.3 loses to 0.4 only
    assert values[("clip-trained", "separability.separable_margin.target")] == 4.0  # the last layer, not the best
    assert values[("clip-trained", "separability.separable_margin.control")] == 2.0  # mean over seeds
    assert values[("clip-trained", "separability.separable_margin.ratio")] == 2.0
    assert not any(r["model"] == "clip-shuffle" for r in table)
    assert json.loads(table[0]["seeds"]) == {"train_seed": 0}
    checks = {c["claim"]: c for c in check_expectations(table)}
    assert len(checks) == len(EXPECTATIONS)
    margin = checks["separability (margin), trained CLIP: target far above control at the last text layer"]
    assert (margin["left_value"], margin["right_value"], margin["holds"]) == (4.0, 2.0, True)
    tied = checks["the order-blind control ties every same-words pair, with both images (% of items)"]
    assert tied["holds"] is True
    assert checks[EXPECTATIONS[0].claim]["holds"] is None  # the control's text score was not measured
    assert all(c["if_not"] for c in checks.values())  # each says what a miss means


def test_comparison_figure_draws_target_and_control(tmp_path: Path) -> None:
    from vlprobe.results.known_answers import _figure

    results = tmp_path / "results"
    sep = {"experiment": "separability", "model": "clip-trained", "stream": "text", "pooling": "cls", "split": "train",
           "subset": "all", "metric": "separable_margin"}
    _write_csv(results / "separability" / "clip-trained.csv", [
        {**sep, "layer": 3, "task": "target", "value": 9.0}, {**sep, "layer": 3, "task": "control", "seed": 0, "value": 1.0},
    ])
    png = _figure(results, tmp_path / "comparison.png", ["clip-trained"])
    assert png is not None and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_comparison_between_models_must_clear_its_margin() -> None:
    from vlprobe.results.known_answers import Expectation

    above = Expectation("a beats b", ("a", "m"), ">", ("b", "m"), by=5.0)
    assert above.evaluate({("a", "m"): 10.0, ("b", "m"): 6.0}) == (10.0, 6.0, False)  # within noise
    assert above.evaluate({("a", "m"): 12.0, ("b", "m"): 6.0}) == (12.0, 6.0, True)
    below = Expectation("a under 10", ("a", "m"), "<", 10.0, by=2.0)
    assert below.evaluate({("a", "m"): 9.0}) == (9.0, 10.0, False)
    assert below.evaluate({("a", "m"): 7.0}) == (7.0, 10.0, True)
    assert above.evaluate({("a", "m"): 1.0}) is None  # b not measured
    auroc = next(e for e in EXPECTATIONS if e.left == ("lxmert-trained", "match.auroc"))
    assert auroc.evaluate({("lxmert-trained", "match.auroc"): 0.5003, ("lxmert-random", "match.auroc"): 0.4997})[2] is False


def test_plan_only_writes_the_plan_and_runs_nothing(tmp_path: Path, one_error_line) -> None:
    from typer.testing import CliRunner

    from vlprobe.cli import app
    from vlprobe.launch.sweep import load_plan, plan_steps

    out = tmp_path / "demo"
    r = CliRunner().invoke(app, ["fixtures", "testbed", "--out", str(out), "--eval-items", "12", "--plan-only"])
    assert r.exit_code == 0, r.output
    assert f"probe sweep {out / 'plan.toml'} --jobs 2 --threads 1" in r.output
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == ["plan.toml"]
    assert plan_steps(load_plan(out / "plan.toml")) == plan_commands(KnownAnswerConfig(out=out, eval_items=12))
    # the report step refuses a folder without a run's results, in one line
    r = CliRunner().invoke(app, ["fixtures", "known-answers", "--out", str(out)])
    one_error_line(r, "out: ")
    assert "holds no results/ folder" in r.output
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    r = CliRunner().invoke(app, ["fixtures", "testbed", "--out", str(tmp_path / "mine"), "--plan-only"])
    assert r.exit_code == 2 and not (tmp_path / "mine" / "plan.toml").exists()  # a folder vlprobe did not make


def _checks(holds: list[bool | None]) -> list[dict]:
    return [{"claim": f"claim {i}", "left": "m x", "op": ">", "right": 0.5, "by": 0.0, "left_value": 0.9,
             "right_value": 0.5, "holds": h, "if_not": f"reason {i}"} for i, h in enumerate(holds)]


def test_summary_says_how_many_hold_and_why_each_miss_matters() -> None:
    from vlprobe.results.known_answers import _summary_text

    text = _summary_text(_checks([True, True]), [], "")
    assert "2 of 2 known answers hold." in text and "why it matters" not in text
    text = _summary_text(_checks([True, False, None]), [], "")
    assert "1 of 3 known answers hold (1 not measured" in text
    assert "[DOES NOT HOLD] claim 1: m x = 0.9 > 0.5\n    why it matters: reason 1" in text
    assert "% separable saturates" in text


def test_report_page_opens_with_the_verdicts(tmp_path: Path) -> None:
    """``probe report --known-answers``: the known answers, their numbers and whether each held,
    before the first experiment's section."""
    from typer.testing import CliRunner

    from vlprobe.cli import app

    results = tmp_path / "results"
    base = {"experiment": "winoground-scores", "model": "clip-trained", "task": "target", "split": "all", "subset": "all"}
    _write_csv(results / "winoground-scores" / "clip-trained.csv", [{**base, "metric": "text", "value": 60.0}])
    (results / "winoground-scores" / "manifest.json").write_text(json.dumps({
        "experiment": "winoground-scores", "runs": {"clip-trained": {
            "experiment": "winoground-scores", "experiment_version": 1, "config": {}, "seeds": [], "inputs": {}}}}))
    verdicts = tmp_path / "known_answers.json"
    verdicts.write_text(json.dumps({"checks": _checks([True, False]), "seeds": {}}))
    page = tmp_path / "report.html"
    r = CliRunner().invoke(app, ["report", str(results), "--out", str(page), "--known-answers", str(verdicts)])
    assert r.exit_code == 0, r.output
    html = page.read_text(encoding="utf-8")
    assert html.index("Known answers") < html.index("<h2 id=\"winoground-scores\"")
    assert "1 of 2 known answers hold" in html
    assert "claim 1" in html and "NO: reason 1" in html and ">yes<" in html
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    r = CliRunner().invoke(app, ["report", str(results), "--out", str(tmp_path / "r2.html"), "--known-answers", str(bad)])
    assert r.exit_code == 2 and "known_answers:" in r.output


def test_separable_percent_is_expected_to_saturate_and_the_margin_and_held_out_accuracy_to_move() -> None:
    """% separable with fewer points than dimensions: the shuffled-label control is near 100 %
    too, so the known answer is "both near 100" (the testbed measured target 92.0, control 98.5),
    and the answers that move are the margin (5.03 vs 0.39) and the held-out accuracy."""
    m = "clip-trained"
    table = [{"model": m, "metric": k, "value": v} for k, v in {
        "separability.separable.target": 92.0, "separability.separable.control": 98.5,
        "separability.separable_margin.target": 5.03, "separability.separable_margin.control": 0.39,
        "separability.heldout_accuracy.target": 82.0, "separability.heldout_accuracy.control": 46.7}.items()]
    table.append({"model": "clip-bow", "metric": "separability.heldout_accuracy.target", "value": 24.4})
    table.append({"model": "clip-bow", "metric": "separability.separable.target", "value": 0.0})
    checks = [c for c in check_expectations(table) if " separability." in c["left"]]
    assert len(checks) == 6 and all(c["holds"] for c in checks), checks
    saturates = [c for c in checks if "saturates" in c["claim"]]
    assert saturates and saturates[0]["left"] == "clip-trained separability.separable.control"
    # No known answer asks the % separable target to beat its control: that is not what the metric can show.
    assert not [c for c in checks if c["left"].endswith("separable.target") and c["right"] == f"{m} separability.separable.control"]
    held = [c for c in checks if "heldout_accuracy" in c["left"]]
    assert len(held) == 2


def test_the_comparison_figure_reads_in_greyscale_says_chance_and_why_a_layer_has_no_margin(tmp_path: Path) -> None:
    """Target solid with filled circles, control dashed with open squares (not two solid lines that
    only colour tells apart); the variant probe's chance line; a layer where the target has no
    margin (no case separable) but the control has one is crossed on the axis and the legend says why."""
    from vlprobe.results.known_answers import comparison_figure
    from vlprobe.results.plots import TASK_COLORS

    results = tmp_path / "results"
    sep = {"experiment": "separability", "model": "clip-trained", "stream": "text", "pooling": "cls", "split": "train",
           "subset": "all", "metric": "separable_margin"}
    _write_csv(results / "separability" / "clip-trained.csv", [
        {**sep, "layer": 0, "task": "target", "value": ""}, {**sep, "layer": 0, "task": "control", "seed": 0, "value": 2.0},
        {**sep, "layer": 1, "task": "target", "value": 9.0}, {**sep, "layer": 1, "task": "control", "seed": 0, "value": 1.0},
    ])
    vp = {"experiment": "variant-probe", "model": "clip-trained", "stream": "text", "pooling": "cls", "split": "test",
          "subset": "all", "metric": "accuracy"}
    _write_csv(results / "variant-probe" / "clip-trained.csv", [
        {**vp, "layer": layer, "task": task, "seed": 0, "value": v}
        for layer in (0, 1) for task, v in (("target", 80.0), ("control", 50.0))])
    fig = comparison_figure(results, ["clip-trained"])
    margin, probe = fig.axes
    lines = {(ln.get_linestyle(), ln.get_marker(), ln.get_markerfacecolor(), ln.get_color()) for ln in probe.lines}
    assert ("-", "o", TASK_COLORS["target"], TASK_COLORS["target"]) in lines
    assert ("--", "s", "white", TASK_COLORS["control"]) in lines
    assert TASK_COLORS == {"target": "#0072B2", "control": "#D55E00"}  # Okabe-Ito blue and vermillion
    assert any(ln.get_linestyle() == ":" and list(ln.get_ydata()) == [50.0, 50.0] for ln in probe.lines)  # chance
    assert not any(ln.get_linestyle() == ":" for ln in margin.lines)  # a margin has no chance level
    crosses = [ln for ln in margin.lines if ln.get_marker() == "x"]
    assert len(crosses) == 1 and list(crosses[0].get_xdata()) == [0] and crosses[0].get_color() == TASK_COLORS["target"]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == ["target", "control (labels shuffled or flipped)", "chance (variant probe: 50%)",
                      "no case separable at that layer (no margin)"]
