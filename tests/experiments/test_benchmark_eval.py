"""`probe eval sugarcrepe|valse`: tiny CLIP on synthetic images for real items, blind baselines, saved scores."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from vlprobe.cli import app
from vlprobe.data.sugarcrepe import load_sugarcrepe
from vlprobe.data.valse import load_valse
from vlprobe.devices import resolve_device
from vlprobe.experiments.benchmark_eval import EvalConfig, run_eval
from vlprobe.extract.models.clip import CLIPAdapter
from vlprobe.runs.score_files import caption_foil_scores, read_item_scores, write_item_scores
from vlprobe.stats.metrics import pair_correct, valse_metrics

SC_SUBSETS = "swap_obj,add_att,replace_rel"


def draw_images(names: list[str], folder: Path) -> None:
    """A distinct synthetic picture per file name, saved under the name the JSON uses."""
    folder.mkdir(parents=True, exist_ok=True)
    for n, name in enumerate(sorted(set(names))):
        rng = np.random.default_rng(n)
        Image.fromarray(rng.integers(0, 256, size=(40, 48, 3), dtype=np.uint8)).save(folder / name)


@pytest.fixture(scope="module")
def coco(sugarcrepe_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("coco") / "val2017"
    draw_images([it.images[0].name for it in load_sugarcrepe(sugarcrepe_dir, subsets=SC_SUBSETS, limit=3)], folder)
    return folder


@pytest.fixture(scope="module")
def valse_roots(valse_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("valse-images")
    for stem, source in (("existence", "visual7w"), ("actant-swap", "swig")):
        draw_images([it.images[0].name for it in load_valse(valse_dir, subsets=stem, limit=4)], root / source)
    return {"visual7w": root / "visual7w", "swig": root / "swig"}


def csv_rows(path: Path) -> dict[tuple[str, str], dict[str, str]]:
    with open(path, encoding="utf-8", newline="") as fh:
        return {(r["subset"], r["metric"]): r for r in csv.DictReader(fh)}


def clip_pair_scores(checkpoint: Path, pairs: list[tuple[Path, str]]) -> np.ndarray:
    """Cosine of CLIP's projected embeddings, computed directly with the model (no vlprobe scorer)."""
    import torch

    adapter = CLIPAdapter.load(str(checkpoint), device="cpu")
    out = []
    with torch.no_grad():
        for path, text in pairs:
            with Image.open(path) as im:
                pixels = adapter.processor(images=[im.convert("RGB")], return_tensors="pt")["pixel_values"]
            img = adapter.model.get_image_features(pixel_values=pixels)
            tok = adapter.tokenizer([text], padding=True, return_tensors="pt")
            txt = adapter.model.get_text_features(**tok)
            img = getattr(img, "pooler_output", img)
            txt = getattr(txt, "pooler_output", txt)
            out.append(torch.nn.functional.cosine_similarity(img, txt).item())
    return np.array(out)


def test_eval_sugarcrepe_clip(sugarcrepe_dir: Path, coco: Path, tiny_clip: Path, tmp_path: Path) -> None:
    cfg = EvalConfig(benchmark="sugarcrepe", out=tmp_path, model="clip", checkpoint=str(tiny_clip),
                     data_dir=sugarcrepe_dir, image_dir=coco, subsets=SC_SUBSETS, limit=3, batch_size=4,
                     bootstrap=200)
    csv_path, manifest_path, rows = run_eval(cfg)
    # The run is named by the model and the settings it changed (another bootstrap count).
    assert csv_path == tmp_path / "sugarcrepe" / "clip@bootstrap=200.csv"
    ds = load_sugarcrepe(sugarcrepe_dir, subsets=SC_SUBSETS, limit=3, image_dir=coco)
    saved = read_item_scores(csv_path.with_suffix(".scores.jsonl"))
    ids, pos, neg = caption_foil_scores(saved)
    assert ids == [it.id for it in ds]
    want = clip_pair_scores(tiny_clip, [(it.images[0].path, it.texts[k].text) for it in ds for k in (0, 1)])
    np.testing.assert_allclose(np.column_stack([pos, neg]).ravel(), want, atol=1e-5)
    got = csv_rows(csv_path)
    hit = pair_correct(pos, neg)
    for subset in ("swap_obj", "add_att", "replace_rel"):
        mask = np.array([i.split("/")[1] == subset for i in ids])
        assert float(got[(subset, "accuracy")]["value"]) == pytest.approx(100 * hit[mask].mean())
        assert got[(subset, "accuracy")]["n"] == "3"
    swap = np.array([i.startswith("sugarcrepe/swap") for i in ids])
    assert float(got[("swap", "accuracy")]["value"]) == pytest.approx(100 * hit[swap].mean())
    assert float(got[("all", "accuracy")]["value"]) == pytest.approx(100 * hit.mean())
    assert float(got[("all", "accuracy.ci95_low")]["value"]) <= 100 * hit.mean() <= float(got[("all", "accuracy.ci95_high")]["value"])
    run = json.loads(manifest_path.read_text(encoding="utf-8"))["runs"]["clip@bootstrap=200"]
    assert run["score_kind"] == "cosine" and run["n_items"] == 9
    assert run["settings_changed"] == {"bootstrap": 200} and run["model"] == "clip"
    assert (run["config"]["device"], run["device"]) == ("auto", str(resolve_device("auto")))  # asked for, used
    assert run["inputs"]["checkpoint"]["fingerprint"].startswith("sha256:")
    assert run["inputs"]["dataset"]["fingerprint"] == ds.fingerprint
    assert run["seeds"] == [0] and run["bootstrap"]["resamples"] == 200

    # Every metric again from the saved per-item scores alone: the same rows (but the bag-of-words
    # slices, which need the captions).
    _, _, rows2 = run_eval(EvalConfig(benchmark="sugarcrepe", out=tmp_path / "again", scores=csv_path.with_suffix(".scores.jsonl"),
                                          bootstrap=200))
    assert {(r["subset"], r["metric"]): r["value"] for r in rows2} == {
        (r["subset"], r["metric"]): r["value"] for r in rows if not r["subset"].startswith("bow=")}


def test_eval_valse_clip_and_blind(valse_dir: Path, valse_roots: dict[str, Path], tiny_clip: Path, tiny_gpt2: Path,
                                   tmp_path: Path) -> None:
    roots = tuple(f"{k}={v}" for k, v in valse_roots.items())
    csv_path, manifest_path, _ = run_eval(EvalConfig(
        benchmark="valse", out=tmp_path, model="clip", checkpoint=str(tiny_clip), data_dir=valse_dir,
        image_root=roots, subsets="existence,actant-swap", limit=4, bootstrap=100,
    ))
    ids, cap, foil = caption_foil_scores(read_item_scores(csv_path.with_suffix(".scores.jsonl")))
    assert len(ids) == 8
    got = csv_rows(csv_path)
    # Cosine has no match threshold: ranking metrics only, per file, pooled and averaged over files.
    assert {m for (_, m) in got if ".ci95" not in m} == {"acc_r", "auroc"}
    first = valse_metrics(cap[:4], foil[:4])
    assert float(got[("existence", "acc_r")]["value"]) == pytest.approx(100 * first["acc_r"])
    assert float(got[("existence", "auroc")]["value"]) == pytest.approx(100 * first["auroc"])
    second = valse_metrics(cap[4:], foil[4:])
    assert float(got[("mean-of-subsets", "acc_r")]["value"]) == pytest.approx(50 * (first["acc_r"] + second["acc_r"]))
    assert float(got[("all", "auroc")]["value"]) == pytest.approx(100 * valse_metrics(cap, foil)["auroc"])
    # A declared threshold (here on saved scores) adds VALSE's thresholded quantities.
    _, _, rows_t = run_eval(EvalConfig(benchmark="valse", out=tmp_path / "t", scores=csv_path.with_suffix(".scores.jsonl"),
                                       threshold=0.0, bootstrap=100))
    metrics = {r["metric"] for r in rows_t if ".ci95" not in r["metric"]}
    assert metrics == {"acc_r", "auroc", "caption_tpr", "foil_tnr", "acc", "min_rate", "ppv", "npv", "min_precision"}

    # A blind LM needs no images.
    _, lm_manifest, _ = run_eval(EvalConfig(benchmark="valse", out=tmp_path, model="blind-lm", checkpoint=str(tiny_gpt2),
                                                 data_dir=valse_dir, subsets="existence", limit=5, bootstrap=50))
    run = json.loads(lm_manifest.read_text(encoding="utf-8"))["runs"]["blind-lm@bootstrap=50"]
    assert run["score_kind"] == "mean_token_logprob" and run["n_items"] == 5
    assert set(json.loads(manifest_path.read_text(encoding="utf-8"))["runs"]) == {"clip@bootstrap=100", "blind-lm@bootstrap=50"}


def test_eval_valse_from_a_score_file_with_logits(tmp_path: Path) -> None:
    # Logits as a matching head writes them; VALSE's acc_r from them, vlprobe's from the scores.
    rng = np.random.default_rng(8)
    ids = [f"valse/{s}/{k}" for s in ("existence", "plurals") for k in range(40)]
    logits = rng.normal(size=(2 * len(ids), 2))
    logits[1:20:2, 1] = logits[1:20:2, 0]  # ten foils whose two logits tie: VALSE skips them
    scores = np.exp(logits[:, 1]) / np.exp(logits).sum(1)
    path = write_item_scores(tmp_path / "lx.scores.jsonl", [i for i in ids for _ in (0, 1)],
                             [f"{i}/i0" for i in ids for _ in (0, 1)], [f"{i}/c{k}" for i in ids for k in (0, 1)],
                             scores, logits)
    csv_path, manifest_path, rows = run_eval(EvalConfig(benchmark="valse", out=tmp_path / "o", scores=path,
                                                        threshold=0.5, bootstrap=50))
    got = {(r["subset"], r["metric"]): r for r in rows}
    cap_l, foil_l = logits[0::2], logits[1::2]
    for subset, sl in (("existence", slice(0, 40)), ("plurals", slice(40, 80)), ("all", slice(0, 80))):
        c, f = cap_l[sl].tolist(), foil_l[sl].tolist()
        pairs = [ci[1] > fi[1] for ci, fi in zip(c, f, strict=True) if fi[0] != fi[1]]  # VALSE's loop
        assert got[(subset, "acc_r_valse")]["value"] == pytest.approx(100 * sum(pairs) / len(pairs))
        assert got[(subset, "acc_r_valse")]["n"] == len(pairs)
        assert got[(subset, "acc_r")]["value"] == pytest.approx(100 * np.mean(scores[0::2][sl] > scores[1::2][sl]))
        assert got[(subset, "acc_r")]["n"] == len(c)
    assert got[("existence", "acc_r_valse")]["n"] == 30
    run = json.loads(manifest_path.read_text(encoding="utf-8"))["runs"]["lx@threshold=0.5,bootstrap=50"]  # changed settings in --help order
    assert "match logit" in run["definitions"]["acc_r_valse"] and "every item" in run["definitions"]["acc_r"]
    # The run's own per-item file keeps the logits: the metrics again from it alone.
    _, _, again = run_eval(EvalConfig(benchmark="valse", out=tmp_path / "again", scores=csv_path.with_suffix(".scores.jsonl"),
                                      threshold=0.5, bootstrap=50))
    np.testing.assert_equal({(r["subset"], r["metric"]): r["value"] for r in again},
                            {(r["subset"], r["metric"]): r["value"] for r in rows if not r["subset"].startswith("bow=")})


def test_eval_items_file_restricts(sugarcrepe_dir: Path, tmp_path: Path) -> None:
    keep = tmp_path / "keep.jsonl"
    keep.write_text('{"item": "sugarcrepe/swap_obj/109"}\n{"item": "sugarcrepe/add_att/5"}\n', encoding="utf-8")
    _, _, rows = run_eval(EvalConfig(benchmark="sugarcrepe", out=tmp_path, model="caption-length", data_dir=sugarcrepe_dir,
                                     items=keep, bootstrap=20))
    n = {r["subset"]: r["n"] for r in rows}
    assert n == {"swap_obj": 1, "add_att": 1, "swap": 1, "add": 1, "all": 2, "bow=same": 0, "bow=different": 2}


#: SugarCrepe's text_model_eval.evaluate, run unchanged on the released files with a caption-length model
#: (run(text) = -len(text)): the authors' code reads the captions as released (percent per subset).
OFFICIAL_CAPTION_LENGTH = {"add_obj": 98.7876, "add_att": 99.5665, "replace_obj": 45.1574, "replace_att": 44.2893,
                           "replace_rel": 59.1750, "swap_obj": 26.1224, "swap_att": 21.6216}


def test_captions_as_the_authors_code_reads_them_and_stripped_as_an_option(sugarcrepe_dir: Path,
                                                                            tmp_path: Path) -> None:
    runner = CliRunner()
    got = {}
    for extra in ([], ["--strip-captions"]):
        out = tmp_path / ("stripped" if extra else "released")
        res = runner.invoke(app, ["eval", "sugarcrepe", "--model", "caption-length", "--data-dir", str(sugarcrepe_dir),
                                  "--out", str(out), "--bootstrap", "0", "--quiet", *extra])
        assert res.exit_code == 0, res.output
        with open(next((out / "sugarcrepe").glob("*.csv")), encoding="utf-8", newline="") as fh:
            got[bool(extra)] = {r["subset"]: float(r["value"]) for r in csv.DictReader(fh) if r["metric"] == "accuracy"}
    for subset, want in OFFICIAL_CAPTION_LENGTH.items():  # the official numbers are rounded to 4 decimals
        assert got[False][subset] == pytest.approx(want, abs=1e-4)
    assert got[True]["replace_att"] == pytest.approx(46.4467, abs=1e-4)  # stripped: trailing spaces gone
    res = runner.invoke(app, ["eval", "valse", "--model", "caption-length", "--strip-captions", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "No such option" in res.output  # a SugarCrepe option only


def test_cli_eval_and_errors(sugarcrepe_dir: Path, coco: Path, tiny_clip: Path, tmp_path: Path,
                             one_error_line: Callable[..., str]) -> None:
    runner = CliRunner()
    base = ["eval", "sugarcrepe", "--data-dir", str(sugarcrepe_dir), "--out", str(tmp_path), "--bootstrap", "20"]
    res = runner.invoke(app, [*base, "--model", "caption-length", "--subsets", "add_att"])
    assert res.exit_code == 0, res.output
    line = next(ln for ln in res.stdout.splitlines() if ln.split()[1:3] == ["add_att", "accuracy"])
    assert float(line.split()[3]) == pytest.approx(99.57, abs=0.01)  # positive shorter in 99.6% of swap/replace items

    clip = [*base, "--model", "clip", "--checkpoint", str(tiny_clip), "--device", "cpu", "--limit", "3"]
    res = runner.invoke(app, [*clip, "--subsets", SC_SUBSETS, "--image-dir", str(coco)])
    assert res.exit_code == 0, res.output
    # The same name with other settings is refused before scoring (outputs.check_run_slot).
    one_error_line(runner.invoke(app, [*clip, "--subsets", "add_att", "--image-dir", str(coco)]),
                   "clip@bootstrap=20.csv already holds", "subsets=")
    # Unknown subset, missing image, no images at all, both inputs: one line each, exit 2.
    clip = [str(tmp_path / "errors") if a == str(tmp_path) else a for a in clip]
    one_error_line(runner.invoke(app, [*clip, "--subsets", "swap_objs", "--image-dir", str(coco)]),
                   "unknown subset 'swap_objs'", "did you mean 'swap_obj'")
    one_error_line(runner.invoke(app, [*clip, "--subsets", "swap_att", "--image-dir", str(coco)]),
                   "image '", "is not in", "missing")
    one_error_line(runner.invoke(app, [*clip, "--subsets", "swap_obj"]), "reads pixels and needs images", "give image_dir")
    one_error_line(runner.invoke(app, [*base, "--model", "caption-length", "--scores", str(tmp_path / "x.jsonl")]),
                   "exactly one of model")
    one_error_line(runner.invoke(app, ["eval", "winoground", "--model", "clip", "--out", str(tmp_path)]),
                   "No such command 'winoground'")
    one_error_line(runner.invoke(app, [*base, "--model", "clip-large", "--checkpoint", "x"]), "unknown model 'clip-large'")
    one_error_line(runner.invoke(app, ["eval", "sugarcrepe", "--scores", str(tmp_path / "x.jsonl"), "--limit", "3",
                                       "--out", str(tmp_path)]), "limit needs data_dir")
    # A score file naming another benchmark's items.
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"item": "valse/existence/1", "image": "valse/existence/1/i0", "text": "valse/existence/1/c0", "score": 1}\n'
                   '{"item": "valse/existence/1", "image": "valse/existence/1/i0", "text": "valse/existence/1/c1", "score": 0}\n',
                   encoding="utf-8")
    one_error_line(runner.invoke(app, ["eval", "sugarcrepe", "--scores", str(bad), "--out", str(tmp_path)]),
                   "is not a sugarcrepe item")


def test_cli_eval_shows_progress_unless_quiet(sugarcrepe_dir: Path, coco: Path, tiny_clip: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    base = ["eval", "sugarcrepe", "--data-dir", str(sugarcrepe_dir), "--bootstrap", "20", "--subsets", "swap_obj",
            "--limit", "3", "--model", "clip", "--checkpoint", str(tiny_clip), "--image-dir", str(coco), "--device", "cpu"]
    loud = runner.invoke(app, [*base, "--out", str(tmp_path / "loud")])
    assert loud.exit_code == 0, loud.output
    # Said before it starts: what is scored and in which batches; then the encoding bars.
    assert "clip: scoring 6 pairs (6 distinct texts, 3 images)" in loud.stderr
    assert "in batches of 32" in loud.stderr
    quiet = runner.invoke(app, [*base, "--out", str(tmp_path / "quiet"), "--quiet"])
    assert quiet.exit_code == 0 and quiet.stderr == ""
    assert loud.stdout.replace("loud", "quiet") == quiet.stdout


def _valse_score_file(path: Path, ids: list[str], seed: int, tie_foils: set[str] = frozenset()) -> Path:  # type: ignore[assignment]
    """P(match)-like scores for every item; the foils of ``tie_foils`` sit exactly on 0.5."""
    values = np.random.default_rng(seed).uniform(0.01, 0.99, size=(len(ids), 2))
    for n, i in enumerate(ids):
        if i in tie_foils:
            values[n, 1] = 0.5
    return write_item_scores(path, [i for i in ids for _ in (0, 1)], [f"{i}/i0" for i in ids for _ in (0, 1)],
                             [f"{i}/c{k}" for i in ids for k in (0, 1)], values.ravel())


def test_valse_n_is_the_items_each_value_is_computed_over(valse_dir: Path, tmp_path: Path) -> None:
    ds = load_valse(valse_dir)
    ids = [it.id for it in ds.items]
    swap = [i for i in ids if i.startswith("valse/actant-swap/")]
    ties = set(swap[:34])  # foils on the threshold: left out of the thresholded metrics, as VALSE does
    path = _valse_score_file(tmp_path / "m.scores.jsonl", ids, 0, ties)
    csv_path, _, _ = run_eval(EvalConfig(benchmark="valse", out=tmp_path / "o", scores=path, threshold=0.5,
                                            bootstrap=0))
    got = csv_rows(csv_path)
    for metric in ("acc", "caption_tpr", "foil_tnr", "ppv", "npv", "min_rate", "min_precision"):
        assert int(got[("actant-swap", metric)]["n"]) == len(swap) - 34, metric
        assert "left out" in got[("actant-swap", metric)]["note"]
    assert int(got[("actant-swap", "acc_r")]["n"]) == len(swap)
    direct = valse_metrics(*[np.array([v for k, v in enumerate(col) if ids[k] in set(swap)])
                             for col in np.array(caption_foil_scores(read_item_scores(path), param="s")[1:])],
                           threshold=0.5)
    assert int(got[("actant-swap", "acc")]["n"]) == direct["n_thresholded"]
    assert float(got[("actant-swap", "acc")]["value"]) == pytest.approx(100 * direct["acc"])
    files = {i.split("/")[1] for i in ids}
    assert int(got[("mean-of-subsets", "acc_r")]["n"]) == len(files)  # a mean over files, not over items
    assert "number of files" in got[("mean-of-subsets", "acc_r")]["note"]
    assert int(got[("all", "acc_r")]["n"]) == len(ids)
    # Without a matching head, acc_r is the paper's number (CLIP-like models).
    assert "the paper's acc_r" in got[("all", "acc_r")]["note"]


def test_valse_without_a_threshold_says_why_the_thresholded_metrics_are_missing(tmp_path: Path) -> None:
    ids = [f"valse/{s}/{k}" for s in ("existence", "plurals") for k in range(10)]
    path = _valse_score_file(tmp_path / "m.scores.jsonl", ids, 1)
    out = tmp_path / "o"
    result = CliRunner().invoke(app, ["eval", "valse", "--scores", str(path), "--out", str(out), "--bootstrap", "10"])
    assert result.exit_code == 0, result.output
    assert "--threshold" in result.stdout  # the report says it, not only the files
    got = csv_rows(out / "valse" / "m@bootstrap=10.csv")
    assert not any(metric == "caption_tpr" for _, metric in got)
    assert "give --threshold" in got[("all", "acc_r")]["note"]
    run = json.loads((out / "valse" / "manifest.json").read_text(encoding="utf-8"))["runs"]["m@bootstrap=10"]
    assert "give --threshold" in run["thresholded_metrics"]


def test_valse_notes_say_which_acc_r_is_the_papers_with_logits(tmp_path: Path) -> None:
    ids = [f"valse/existence/{k}" for k in range(12)]
    logits = np.random.default_rng(2).normal(size=(2 * len(ids), 2))
    scores = np.exp(logits[:, 1]) / np.exp(logits).sum(1)
    path = write_item_scores(tmp_path / "lx.scores.jsonl", [i for i in ids for _ in (0, 1)],
                             [f"{i}/i0" for i in ids for _ in (0, 1)], [f"{i}/c{k}" for i in ids for k in (0, 1)],
                             scores, logits)
    csv_path, _, _ = run_eval(EvalConfig(benchmark="valse", out=tmp_path / "o", scores=path, bootstrap=10))
    got = csv_rows(csv_path)
    assert got[("all", "acc_r_valse")]["note"].startswith("the paper's acc_r")
    assert "the paper's number is acc_r_valse" in got[("all", "acc_r")]["note"]
    assert got[("all", "acc_r.ci95_low")]["note"] == ""


def test_sugarcrepe_notes_say_micro_means_and_ties(tmp_path: Path) -> None:
    ids = [f"sugarcrepe/{s}/{k}" for s in ("replace_obj", "replace_att", "swap_obj", "add_att") for k in range(6)]
    values = np.random.default_rng(3).uniform(size=(len(ids), 2))
    values[:3, 1] = values[:3, 0]  # three ties: wrong
    path = write_item_scores(tmp_path / "m.scores.jsonl", [i for i in ids for _ in (0, 1)],
                             [f"{i}/i0" for i in ids for _ in (0, 1)], [f"{i}/c{k}" for i in ids for k in (0, 1)],
                             values.ravel())
    csv_path, manifest_path, _ = run_eval(EvalConfig(benchmark="sugarcrepe", out=tmp_path / "o", scores=path,
                                                     bootstrap=10))
    # no model loaded, so no dtype: --dtype auto is recorded as null, never as "auto"
    assert json.loads(manifest_path.read_text())["runs"][csv_path.stem]["config"]["dtype"] is None
    got = csv_rows(csv_path)
    for group in ("replace", "swap", "add"):
        assert "item-weighted (micro) mean" in got[(group, "accuracy")]["note"], group
    for subset in ("replace_obj", "swap_obj", "all"):
        assert "ties count as wrong" in got[(subset, "accuracy")]["note"]
    hit = values[:, 0] > values[:, 1]
    assert float(got[("replace", "accuracy")]["value"]) == pytest.approx(100 * hit[:12].mean())
