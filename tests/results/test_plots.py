"""Figures of tidy CSVs (checked through matplotlib's objects, not pixels) and the summary they draw from."""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from vlprobe.cli import app
from vlprobe.results.plots import MAX_PANELS, make_figure, plot_results, series_labels
from vlprobe.results.reading import find_runs, read_result
from vlprobe.runs.summary import read_tidy_csv, summarize
from vlprobe.runs.writing import TIDY_COLUMNS, write_results, write_tidy_csv
from vlprobe.validation import InputError


def tidy(stream: str, layer: object, task: str, seed: object, value: float, split: str = "test",
         metric: str = "accuracy", subset: str = "all", experiment: str = "variant-probe", **extra: Any) -> dict:
    return {"experiment": experiment, "model": "m", "stream": stream, "layer": layer, "pooling": "cls",
            "probe": "mlp", "task": task, "seed": seed, "split": split, "subset": subset, "metric": metric,
            "value": value, "n": 4, **extra}


ROWS = [
    tidy(s, layer, task, seed, v)
    for s in ("lang", "vision")
    for layer in (0, 1, 2)
    for task, seed, v in (("target", 0, 80.0 + layer), ("target", 1, 90.0), ("control", 0, 50.0), ("control", 1, 0.0))
] + [tidy("lang", 0, "target", 0, 1.0, split="train")]


def write_run(out: Path, rows: list[dict], *, name: str = "m", experiment: str = "variant-probe",
              config: dict | None = None, kinds: dict | None = None) -> Path:
    """A run's CSV and manifest entry, as an experiment writes them."""
    rows = [{**r, "model": name} for r in rows]
    manifest = {"experiment": experiment, "experiment_version": 1, "config": config or {"seeds": 2},
                "inputs": {"cache": {"path": "/nonexistent.h5", "layer_kinds": kinds or {}}}}
    return write_results(out, experiment, name, rows, manifest)[0]


def texts(ax: Any) -> list[str]:
    return [t.get_text() for t in ax.texts]


def legend_texts(fig: Any) -> list[str]:
    return [t.get_text() for legend in fig.legends for t in legend.get_texts()]


def test_summary_mean_min_max_and_selectivity(tmp_path: Path) -> None:
    path = write_tidy_csv(tmp_path / "m.csv", ROWS)
    for rows in (ROWS, read_tidy_csv(path)):  # in memory and read back as strings: the same summary
        summary = {(r["stream"], r["layer"], r["split"]): r for r in summarize(rows)}
        rec = summary[("lang", "2", "test")]
        assert (rec["target_mean"], rec["target_min"], rec["target_max"], rec["target_seeds"]) == (86.0, 82.0, 90.0, 2)
        assert (rec["control_mean"], rec["control_min"], rec["control_max"]) == (25.0, 0.0, 50.0)
        assert rec["selectivity"] == pytest.approx(61.0)
        assert summary[("lang", "0", "train")]["control_seeds"] == 0


def test_summary_takes_intervals_and_the_permutation_test_into_columns() -> None:
    rows = [tidy("text", 1, "target", 0, 80.0), tidy("text", 1, "control", 0, 50.0),
            tidy("text", 1, "target", 7, 70.0, metric="accuracy.ci95_low"),
            tidy("text", 1, "target", 7, 88.0, metric="accuracy.ci95_high"),
            tidy("text", 1, "control", 7, 41.0, metric="accuracy.ci95_low"),
            tidy("text", 1, "selectivity", None, 30.0), tidy("text", 1, "selectivity", 7, 12.0, metric="accuracy.ci95_low"),
            tidy("text", 1, "selectivity", 0, 0.004, metric="accuracy.p_value")]
    (rec,) = summarize(rows)  # interval and test rows are columns of the metric's row, not rows of their own
    assert rec["metric"] == "accuracy" and rec["target_seeds"] == 1 and rec["control_seeds"] == 1
    assert (rec["target_ci95_low"], rec["target_ci95_high"], rec["control_ci95_low"]) == (70.0, 88.0, 41.0)
    assert rec["selectivity"] == 30.0 and rec["selectivity_ci95_low"] == 12.0 and rec["p_value"] == 0.004
    assert rec["control_ci95_high"] != rec["control_ci95_high"]  # NaN: not in the rows


def test_layer_curves_one_panel_per_stream_with_pooling_fixed_percent_axis_and_chance(tmp_path: Path) -> None:
    fig = make_figure([read_result(write_run(tmp_path, ROWS))])
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in axes] == ["lang · cls", "vision · cls"]
    for ax in axes:
        assert ax.get_ylim() == (0.0, 100.0)
        assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "1", "2"]
        assert list(ax.get_xticks()) == [0.0, 1.0, 2.0]
        assert ax.get_ylabel() == "accuracy (%), test"
        chance = [ln for ln in ax.get_lines() if ln.get_linestyle() == ":"]
        assert [ln.get_ydata()[0] for ln in chance] == [50.0]
        target = ax.get_lines()[0]
        assert list(target.get_ydata()) == [85.0, 85.5, 86.0]  # mean over the two target seeds
    assert legend_texts(fig)[:2] == ["target", "control"] and "min–max over seeds" in legend_texts(fig)
    assert "chance (50)" in legend_texts(fig)


def test_legend_swatches_take_the_colours_they_stand_for(tmp_path: Path) -> None:
    """The seed band's swatch is the band's colour (not grey, which a layer-kind shade could be);
    kind shades are light tints, none grey; a short legend is laid out in rows, not one column."""
    from matplotlib.colors import to_rgb

    from vlprobe.results.plots import KIND_COLORS, TASK_COLORS

    for colour in KIND_COLORS.values():
        r, g, b = to_rgb(colour)
        assert min(r, g, b) > 0.85 and max(r, g, b) - min(r, g, b) > 0.02, colour  # light, and tinted
    fig = make_figure([read_result(write_run(tmp_path, ROWS))])
    (legend,) = fig.legends
    handles = dict(zip(legend_texts(fig), legend.legend_handles, strict=True))
    assert to_rgb(handles["min–max over seeds"].get_facecolor()) == to_rgb(TASK_COLORS["target"])
    assert legend._ncols >= 2


def test_format_and_paper_style(tmp_path: Path) -> None:
    """--format png,pdf,svg writes each under the out name's stem; --style paper makes a one-panel
    figure one journal column wide (3.4 in) and a two-panel one two columns (7 in)."""
    csv_path = write_run(tmp_path, ROWS)
    written = plot_results(csv_path, tmp_path / "fig.svg", formats="svg,png", style="paper")
    assert written == [tmp_path / "fig.svg", tmp_path / "fig.png"]
    assert b"<svg" in written[0].read_bytes()[:2000] and b"vlprobe" in written[0].read_bytes()
    from PIL import Image

    with Image.open(written[1]) as im:  # 300 dpi
        assert abs(im.size[0] / 300 - 7.0) < 0.3, im.size  # two panels (lang, vision): two columns
    one = [r for r in ROWS if r["stream"] == "lang"]
    fig = make_figure([read_result(write_run(tmp_path / "one", one))], style="paper")
    assert abs(fig.get_figwidth() - 3.4) < 1e-9
    r = CliRunner().invoke(app, ["plot", str(csv_path), "--out", str(tmp_path / "c.png"), "--format", "png,pdf,svg"])
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == f"wrote {tmp_path / 'c.png'}, {tmp_path / 'c.pdf'}, {tmp_path / 'c.svg'}"


def test_a_single_layer_gets_one_integer_tick(tmp_path: Path) -> None:
    rows = [tidy("text", 7, t, 0, v) for t, v in (("target", 70.0), ("control", 50.0))]
    (ax,) = [a for a in make_figure([read_result(write_run(tmp_path, rows))]).axes if a.get_visible()]
    assert list(ax.get_xticks()) == [7.0] and [t.get_text() for t in ax.get_xticklabels()] == ["7"]
    assert ax.get_xlim() == (6.5, 7.5)


def test_pooled_rows_without_a_layer_plot_as_one_category(tmp_path: Path) -> None:
    rows = [tidy("image+text", None, t, s, v) for t, s, v in (("target", 0, 90.0), ("control", 0, 50.0))]
    (ax,) = [a for a in make_figure([read_result(write_run(tmp_path, rows))]).axes if a.get_visible()]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["all"]  # no layer axis: the subset is the category
    assert ax.get_title() == "image+text · cls"


def test_a_margin_is_not_drawn_on_a_percent_axis_and_intervals_are_error_bars(tmp_path: Path) -> None:
    rows = []
    for layer in (0, 1):
        rows += [tidy("text", layer, "target", None, 2.0 + layer, metric="separable_margin", split="train",
                      experiment="separability"),
                 tidy("text", layer, "control", 0, 1.0, metric="separable_margin", split="train", experiment="separability"),
                 tidy("text", layer, "target", 0, 1.5, metric="separable_margin.ci95_low", split="train",
                      experiment="separability"),
                 tidy("text", layer, "target", 0, 3.5 + layer, metric="separable_margin.ci95_high", split="train",
                      experiment="separability")]
    result = read_result(write_run(tmp_path, rows, experiment="separability"))
    fig = make_figure([result], metric="separable_margin")
    (ax,) = [a for a in fig.axes if a.get_visible()]
    low, high = ax.get_ylim()
    assert low == 0.0 and 4.5 <= high < 10  # auto-scaled from 0, not fixed at 100
    assert ax.get_ylabel() == "separable_margin (2/‖w‖, scaled states), train"  # whole, not cut at " ("
    assert len(ax.collections) >= 1 and "95% CI over items" in legend_texts(fig)


def test_layer_kinds_are_shaded_from_the_manifest(tmp_path: Path) -> None:
    kinds = {"lang": ["embed", "lang", "cross"], "vision": ["embed", "rel", "rel"]}
    fig = make_figure([read_result(write_run(tmp_path, ROWS, kinds=kinds))])
    lang, vision = [a for a in fig.axes if a.get_visible()]
    assert texts(lang) == ["embed", "lang", "cross"] and texts(vision) == ["embed", "rel"]
    spans = [p for p in vision.patches if type(p).__name__ == "Rectangle"]
    assert len(spans) == 2  # one shaded block per run of one kind: embed (0), rel (1-2)
    assert {"embed layers", "lang layers", "cross layers", "rel layers"} <= set(legend_texts(fig))


def test_a_layer_kind_column_wins_over_the_manifest(tmp_path: Path) -> None:
    rows = [{**r, "layer_kind": "joint"} for r in ROWS if r["stream"] == "lang"]
    path = tmp_path / "k.csv"
    import csv

    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    (ax,) = [a for a in make_figure([read_result(path)]).axes if a.get_visible()]
    assert texts(ax) == ["joint"]


def test_subsets_by_name_and_by_family(tmp_path: Path) -> None:
    rows = [tidy("text", 0, t, 0, v, subset=s, experiment="separability", split="train", metric="separable")
            for s in ("all", "image=0", "image=1", "collapsed_tag=Object") for t, v in (("target", 60.0), ("control", 40.0))]
    result = read_result(write_run(tmp_path, rows, experiment="separability"))
    assert [a.get_title() for a in make_figure([result]).axes if a.get_visible()] == ["text · cls"]
    fig = make_figure([result], subset="image")
    assert [a.get_title() for a in fig.axes if a.get_visible()] == ["text · cls · image=0", "text · cls · image=1"]
    fig = make_figure([result], subset="all,collapsed_tag=Object")
    assert len([a for a in fig.axes if a.get_visible()]) == 2
    from vlprobe.validation import InputError

    with pytest.raises(InputError, match="subset 'wwh' is not in the CSV"):
        make_figure([result], subset="wwh")


def test_too_many_panels_are_refused(tmp_path: Path) -> None:
    rows = [tidy(f"s{k}", 0, t, 0, 50.0) for k in range(MAX_PANELS + 1) for t in ("target", "control")]
    from vlprobe.validation import InputError

    with pytest.raises(InputError, match=f"{MAX_PANELS + 1} panels"):
        make_figure([read_result(write_run(tmp_path, rows))])


def test_overlay_colours_runs_and_names_runs_of_one_name_by_their_settings(tmp_path: Path) -> None:
    a = read_result(write_run(tmp_path / "a", ROWS, config={"seeds": 2, "C": 10.0, "out": "a", "cache": "x.h5"}))
    b = read_result(write_run(tmp_path / "b", [{**r, "value": r["value"] / 2} for r in ROWS],
                              config={"seeds": 2, "C": 100.0, "out": "b", "cache": "y.h5"}))
    assert series_labels([a, b]) == ["m (C=10.0)", "m (C=100.0)"]
    fig = make_figure([a, b])
    lang = next(ax for ax in fig.axes if ax.get_visible())
    colours = {ln.get_color() for ln in lang.get_lines() if ln.get_linestyle() != ":"}
    assert len(colours) == 2
    assert {"m (C=10.0): target", "m (C=10.0): control", "m (C=100.0): target"} <= set(legend_texts(fig))


def test_every_experiment_draws_with_its_chart(every_experiment: Path, tmp_path: Path) -> None:
    kinds = {}
    for folder in sorted(every_experiment.iterdir()):
        (csv_path,) = [r.csv for r in find_runs([folder])]  # run names may hold dots (lr=0.01)
        fig = make_figure([read_result(csv_path)])
        axes = [a for a in fig.axes if a.get_visible()]
        kinds[folder.name] = (len(axes), axes[0].get_xlabel())
        for ax in axes:
            if ax.get_ylabel().endswith("(%)") or "(%)" in ax.get_ylabel() or ax.get_ylabel() == "%":
                # bars: room above 100 for the value labels, ticks to 100; curves: 0-100
                assert ax.get_ylim() in ((0.0, 100.0), (0.0, 112.0)), (folder.name, ax.get_ylabel())
                assert max(ax.get_yticks()) <= 100.0
        if folder.name == "sugarcrepe":  # aggregates hatched, after a separator; subsets plain
            (ax,) = axes
            hatched = {t.get_text() for t, bar in zip(ax.get_xticklabels(), ax.patches, strict=False) if bar.get_hatch()}
            assert hatched and "all" in hatched and "swap_obj" not in hatched, hatched
            assert any(ln.get_linestyle() == "--" for ln in ax.get_lines())
        png = plot_results(csv_path, tmp_path / f"{folder.name}.png")[0]
        w, h = _png_size(png)
        assert w <= 3000 and h <= 2200, (folder.name, w, h)  # no 2070x7140 px towers
    assert kinds["separability"] == (1, "layer")  # the text stream (the default)
    assert kinds["variant-similarity"] == (3, "λ (weight of the variants)")
    assert kinds["winoground-scores"][0] == 1 and kinds["recall"][0] == 2  # all; i2t and t2i
    assert kinds["sugarcrepe"][0] == 1 and kinds["valse"][0] == 3  # accuracy; acc_r, auroc, acc (a threshold)
    assert kinds["mdl"] == kinds["conditional"] == kinds["erasure"] == (1, "layer")
    assert kinds["patch"] == (6, "layer")  # text: all, swapped, rest, cls; image: all, cls


def test_patch_panels_per_position_group_and_erasure_draws_the_unedited_model(every_experiment: Path) -> None:
    (patch_csv,) = [r.csv for r in find_runs([every_experiment / "patch"])]
    fig = make_figure([read_result(patch_csv)])
    titles = [a.get_title() for a in fig.axes if a.get_visible()]
    assert "text · positions=swapped" in titles and "image · positions=cls" in titles
    (erasure_csv,) = [r.csv for r in find_runs([every_experiment / "erasure"])]
    rows = read_tidy_csv(erasure_csv)
    unedited = next(float(r["value"]) for r in rows if r["probe"] == "none" and r["metric"] == "group")
    (ax,) = [a for a in make_figure([read_result(erasure_csv)]).axes if a.get_visible()]
    flat = [line for line in ax.get_lines() if line.get_linestyle() == "-."]
    assert [line.get_ydata()[0] for line in flat] == [pytest.approx(unedited)]  # one line: the unedited score
    assert ax.get_ylim() == (0.0, 100.0)


def _png_size(path: Path) -> tuple[int, int]:
    from PIL import Image

    with Image.open(path) as im:
        assert str(im.info.get("Software", "")).startswith("vlprobe")
        return im.size


def test_valse_panels_are_side_by_side_with_the_pieces_named_once(every_experiment: Path, tmp_path: Path) -> None:
    # three metric panels of VALSE's pieces were stacked in a 1300x1700 px tower
    (csv_path,) = [r.csv for r in find_runs([every_experiment / "valse"])]
    fig = make_figure([read_result(csv_path)])
    axes = [a for a in fig.axes if a.get_visible()]
    assert len(axes) == 3 and len({round(a.get_position().y0, 3) for a in axes}) == 1  # one row
    assert [t.get_text() for t in axes[0].get_yticklabels()][-2:] == ["all", "mean-of-subsets"]
    assert all(t.get_text() == "" for a in axes[1:] for t in a.get_yticklabels())  # named once, on the left
    assert axes[0].get_xlabel() == "acc_r (%)" and axes[0].get_xlim()[1] > 100  # room for the value labels
    for style, width_in in (("screen", None), ("paper", 7.0)):
        png = plot_results(csv_path, tmp_path / f"valse-{style}.png", formats="png", style=style)[0]
        w, h = _png_size(png)
        assert w > h, (style, w, h)
        if width_in:
            assert w == pytest.approx(width_in * 300, abs=2)  # two journal columns at 300 dpi


def test_bias_gap_histograms_read_and_a_zero_share_is_labelled(every_experiment: Path) -> None:
    # nine crowded gap ticks (-1.00 -0.75 ... touching); a share of 0 drew no bar at all
    (csv_path,) = [r.csv for r in find_runs([every_experiment / "bias-gap"])]
    axes = [a for a in make_figure([read_result(csv_path)]).axes if a.get_visible()]
    *hists, share = axes
    assert hists and all(list(a.get_xticks()) == [-1.0, -0.5, 0.0, 0.5, 1.0] for a in hists)
    bars = [p for p in share.patches if type(p).__name__ == "Rectangle"]
    labels = [t.get_text() for t in share.texts]
    assert len(labels) == len(bars) and all(t == "n/a" or float(t) >= 0 for t in labels)
    assert share.get_ylim() == (0.0, 112.0) and max(share.get_yticks()) == 100.0


def test_bars_have_intervals_and_chance_and_overlay_models(every_experiment: Path, tmp_path: Path) -> None:
    src = every_experiment / "winoground-scores"
    (csv_path,) = [p for p in src.glob("*.csv")]
    rows = read_tidy_csv(csv_path)
    copy = write_run(tmp_path / "r", [{**{k: r[k] for k in TIDY_COLUMNS}, "value": float(r["value"]) / 2} for r in rows],
                     name="other",
                     experiment="winoground-scores")
    fig = make_figure([read_result(csv_path), read_result(copy)])
    (ax,) = [a for a in fig.axes if a.get_visible()]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["text", "image", "group"]
    bars = [p for p in ax.patches if type(p).__name__ == "Rectangle"]
    assert len(bars) == 6  # 3 metrics x 2 models
    chance = sorted({round(float(seg[0][1]), 3) for c in ax.collections for seg in c.get_segments()
                     if c.get_linestyle()[0][1] is not None and len(seg) == 2 and seg[0][1] == seg[1][1]})
    assert 16.667 in chance and 25.0 in chance
    assert ax.get_ylim() == (0.0, 112.0) and max(ax.get_yticks()) == 100.0  # room for the value labels
    labels = legend_texts(fig)
    assert labels[:2] == [read_result(csv_path).name, "other"] and "95% CI over items" in labels


def test_the_chart_is_a_field_of_the_experiments_declaration(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from vlprobe.registry import EXPERIMENTS
    from vlprobe.runs.charts import Chart, chart_for, charted_experiments

    sep = EXPERIMENTS.get("separability")
    assert chart_for("separability", "x.csv") is sep.chart and sep.chart.kind == "layers"
    # A new experiment's declaration is the one place its chart is given: plot draws it with that.
    bars = dataclasses.replace(sep, name="throwaway", chart=Chart("bars", ("accuracy",), subsets=None))
    monkeypatch.setitem(EXPERIMENTS._entries, "throwaway", bars)
    assert "throwaway" in charted_experiments()
    csv_path = write_run(tmp_path / "r", [{**r, "experiment": "throwaway"} for r in ROWS], experiment="throwaway")
    axes = [a for a in make_figure([read_result(csv_path)]).axes if a.get_visible()]
    assert axes and all(a.get_xlabel() != "layer" for a in axes)  # bars, not layer curves
    assert all(any(type(p).__name__ == "Rectangle" for p in a.patches) for a in axes)
    monkeypatch.setitem(EXPERIMENTS._entries, "throwaway", dataclasses.replace(bars, chart=None))
    assert "throwaway" not in charted_experiments()
    with pytest.raises(InputError, match="holds throwaway results, which have no chart"):
        chart_for("throwaway", "x.csv")


def test_files_it_cannot_draw_are_one_error_line(every_experiment: Path, tmp_path: Path,
                                                 one_error_line: Callable[..., str]) -> None:
    runner = CliRunner()
    sep = every_experiment / "separability"
    (items,) = sep.glob("*.items.csv")
    (summary,) = sep.glob("*.summary.csv")
    out = str(tmp_path / "f.png")
    line = one_error_line(runner.invoke(app, ["plot", str(items), "--out", out]), "per-item results")
    assert line.endswith(f"give {items.name.replace('.items', '')}")
    one_error_line(runner.invoke(app, ["plot", str(summary), "--out", out]), "a per-layer summary")
    mixed = [str(next(sep.glob("*[!sy].csv"))), str(next((every_experiment / "recall").glob("*.csv")))]
    one_error_line(runner.invoke(app, ["plot", *mixed, "--out", out]), "overlay CSVs of one experiment")
    odd = write_tidy_csv(tmp_path / "odd.csv", [tidy("text", 0, "target", 0, 1.0, experiment="refine")])
    one_error_line(runner.invoke(app, ["plot", str(odd), "--out", out]), "holds refine results, which have no chart")
    two = write_tidy_csv(tmp_path / "two.csv", [tidy("text", 0, "target", 0, 1.0), {**tidy("t", 0, "target", 0, 1.0), "model": "n"}])
    one_error_line(runner.invoke(app, ["plot", str(two), "--out", out]), "expected one run")
    assert not Path(out).exists()


def test_cli_plot_overlays_and_bad_input_is_one_error_line(tmp_path: Path, one_error_line: Callable[..., str]) -> None:
    runner = CliRunner()
    a = write_run(tmp_path / "a", ROWS, name="a")
    b = write_run(tmp_path / "b", ROWS, name="b")
    ok = runner.invoke(app, ["plot", str(a), str(b), "--out", str(tmp_path / "f.png"), "--split", "train"])
    assert ok.exit_code == 0, ok.output
    assert (tmp_path / "f.pdf").read_bytes()[:4] == b"%PDF" and (tmp_path / "f.png").read_bytes()[:4] == b"\x89PNG"
    again = runner.invoke(app, ["plot", str(a), "--out", str(tmp_path / "f.png")])  # vlprobe's own figure: replaced
    assert again.exit_code == 0, again.output
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n", encoding="utf-8")
    one_error_line(runner.invoke(app, ["plot", str(bad), "--out", str(tmp_path / "g.png")]),
                   "not a vlprobe tidy results CSV")
    empty = write_tidy_csv(tmp_path / "empty.csv", [])
    one_error_line(runner.invoke(app, ["plot", str(empty), "--out", str(tmp_path / "g.png")]), "holds no result rows")
    binary = tmp_path / "bin.csv"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    one_error_line(runner.invoke(app, ["plot", str(binary), "--out", str(tmp_path / "g.png")]), "csv:")
    one_error_line(runner.invoke(app, ["plot", str(a), "--out", str(tmp_path / "g.jpg")]),
                   "must be a figure file name ending in .png, .pdf or .svg")
    one_error_line(runner.invoke(app, ["plot", str(a), "--out", str(tmp_path / "g.png"), "--format", "png,gif"]),
                   "format: unknown format 'gif'")
    one_error_line(runner.invoke(app, ["plot", str(a), "--out", str(tmp_path / "g.png"), "--style", "poster"]),
                   "style: unknown style 'poster'")
    one_error_line(runner.invoke(app, ["plot", str(a), "--out", str(tmp_path / "g.png"), "--metric", "f1"]),
                   "metric 'f1' is not in the CSV")
    one_error_line(runner.invoke(app, ["plot", str(tmp_path / "nope.csv"), "--out", str(tmp_path / "g.png")]),
                   "no such file")
    assert not (tmp_path / "g.png").exists()
    foreign = tmp_path / "mine.png"
    shutil.copy(tmp_path / "f.png", foreign)
    from PIL import Image

    Image.new("RGB", (4, 4)).save(foreign)  # a PNG somebody else wrote
    one_error_line(runner.invoke(app, ["plot", str(a), "--out", str(foreign)]), "was not written by vlprobe")
    assert Image.open(foreign).size == (4, 4)


def test_manifest_entries_are_found_for_file_safe_names(tmp_path: Path) -> None:
    path = write_run(tmp_path, ROWS, name="org/model v2")
    result = read_result(path)
    assert path.name == "org_model_v2.csv" and result.name == "org/model v2"
    assert result.manifest["config"] == {"seeds": 2}
    assert json.loads((path.parent / "manifest.json").read_text())["runs"]["org/model v2"]


# -- readable by everyone; what is missing said in the figure ----------------------------------------


def test_target_and_control_differ_by_line_and_marker_not_only_by_colour(tmp_path: Path) -> None:
    """Greyscale prints and colour-blind readers: the target is a solid line with filled circles,
    the control a dashed line with open squares, in Okabe-Ito blue and vermillion."""
    from vlprobe.results.plots import TASK_COLORS

    fig = make_figure([read_result(write_run(tmp_path, ROWS))])
    ax = next(a for a in fig.axes if a.get_visible())
    drawn = {(ln.get_linestyle(), ln.get_marker(), ln.get_markerfacecolor(), ln.get_color()) for ln in ax.lines}
    assert ("-", "o", "#0072B2", "#0072B2") in drawn and ("--", "s", "white", "#D55E00") in drawn
    assert TASK_COLORS == {"target": "#0072B2", "control": "#D55E00"}
    (legend,) = fig.legends
    marks = {t.get_text(): (h.get_linestyle(), h.get_marker(), h.get_markerfacecolor())
             for t, h in zip(legend.get_texts(), legend.legend_handles, strict=True) if t.get_text() in ("target", "control")}
    assert marks == {"target": ("-", "o", "#0072B2"), "control": ("--", "s", "white")}


def test_a_layer_without_a_margin_is_crossed_and_the_legend_says_why(tmp_path: Path) -> None:
    rows = []
    for layer, target in ((0, None), (1, 2.0)):  # layer 0: no case separable, so no target margin
        rows += [tidy("text", layer, "target", None, float("nan") if target is None else target,
                      metric="separable_margin", split="train", experiment="separability"),
                 tidy("text", layer, "control", 0, 1.0, metric="separable_margin", split="train", experiment="separability")]
    fig = make_figure([read_result(write_run(tmp_path, rows, experiment="separability"))], metric="separable_margin")
    (ax,) = [a for a in fig.axes if a.get_visible()]
    crosses = [ln for ln in ax.lines if ln.get_marker() == "x"]
    assert len(crosses) == 1 and list(crosses[0].get_xdata()) == [0.0]
    assert "no case separable at that layer (no margin)" in legend_texts(fig)


def test_a_runs_note_is_in_its_figure(tmp_path: Path) -> None:
    """Separability's "no case is separable at any layer" goes into the manifest's notes; the
    figure says it inside the panel of its stream, not only the terminal."""
    rows = [tidy("text", layer, task, 0, 0.0, metric="separable", split="train", experiment="separability")
            for layer in (0, 1) for task in ("target", "control")]
    note = "no case is separable at any layer of stream text (median state norm 0.0187 after scaling 'divide100', C=100)"
    csv_path = write_run(tmp_path, rows, experiment="separability")
    manifest_path = csv_path.parent / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["runs"]["m"]["notes"] = [note]
    manifest_path.write_text(json.dumps(manifest))
    (ax,) = [a for a in make_figure([read_result(csv_path)]).axes if a.get_visible()]
    assert any(t.get_text().replace("\n", " ") == note for t in ax.texts), texts(ax)


def test_runs_without_layers_overlay_in_one_panel_with_the_subsets_side_by_side(tmp_path: Path) -> None:
    """Task adaptation's pooled probes (no layer): not one panel per subset holding a single point
    each, but the subsets as categories of one panel, each run's target and control beside each other."""
    paths = []
    for name, shift in (("a", 0.0), ("b", 10.0)):
        rows = [tidy("image+text", None, task, 0, v + shift, subset=subset, experiment="task-adaptation")
                for subset in ("text-score", "image-score") for task, v in (("target", 70.0), ("control", 50.0))]
        paths.append(write_run(tmp_path, rows, name=name, experiment="task-adaptation"))
    fig = make_figure([read_result(p) for p in paths])
    (ax,) = [a for a in fig.axes if a.get_visible()]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["text-score", "image-score"]
    points = [(ln.get_xdata()[0], ln.get_ydata()[0]) for ln in ax.lines if ln.get_marker() in ("o", "s")]
    assert len(points) == 8 and len({x for x, _ in points}) == 8  # 2 subsets x 2 runs x target/control, apart
    assert {"a: target", "a: control", "b: target", "b: control", "chance (50)"} <= set(legend_texts(fig))
