"""CREPE: the loader on the fixture (files, crops, ids, tags), Recall@k against a literal
re-implementation of the authors' get_one2many_rank / get_one2many_metrics on planted scores with
ties, `probe eval crepe` with a tiny CLIP and from its scores, `probe data info`, `probe run
bias-gap`, and refused inputs (another benchmark's folder, a missing image, a missing field)."""

from __future__ import annotations

import ast
import csv
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from typer.testing import CliRunner

from vlprobe.cli import app
from vlprobe.data.benchmark_fixtures import write_benchmark_fixture
from vlprobe.data.crepe import CREPE_SUBSETS, crepe_file, load_crepe, parse_negatives
from vlprobe.experiments.benchmark_eval import EvalConfig, run_eval
from vlprobe.runs.score_files import write_item_scores
from vlprobe.validation import InputError

N = 6


@pytest.fixture(scope="module")
def crepe_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_benchmark_fixture(tmp_path_factory.mktemp("crepe") / "crepe", "crepe", n_items=N, seed=3,
                                   image_size=32)


def get_one2many_rank(image_features: torch.Tensor, text_features: torch.Tensor, logit_scale: float = 1.0) -> np.ndarray:
    """crepe_eval_utils.get_one2many_rank, line for line."""
    logits_per_image = (logit_scale * image_features @ text_features.t()).detach().cpu()
    ground_truth = 0
    ranking = torch.argsort(logits_per_image, descending=True)
    return torch.where(ranking == ground_truth)[1].detach().cpu().numpy()


def get_one2many_metrics(preds: np.ndarray, name: str = "image_to_text") -> dict[str, float]:
    """crepe_eval_utils.get_one2many_metrics (its R@k lines)."""
    return {f"{name}_R@{k}": float(np.mean(preds < k)) for k in (1, 3, 5, 10)}


def authors_recall(scores: list[np.ndarray]) -> dict[str, float]:
    """The authors' loop: per item an image feature of one 1 and text 'features' equal to the
    scores, so that image @ texts.T is the score row."""
    ranks = [get_one2many_rank(torch.ones(1, 1, dtype=torch.float64),
                               torch.tensor(s, dtype=torch.float64).reshape(-1, 1)) for s in scores]
    return get_one2many_metrics(np.array(ranks))


def test_loader_reads_the_authors_files(crepe_dir: Path) -> None:
    ds = load_crepe(crepe_dir, image_root=[f"vg={crepe_dir / 'vg'}"])
    assert len(ds) == N * len(CREPE_SUBSETS)
    by_id = {it.id: it for it in ds}
    rel, column = crepe_file("syst_laion_unseen_comp")
    with open(crepe_dir / rel, encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    it = by_id["crepe/syst_laion_unseen_comp/1"]
    assert [t.text for t in it.captions] == [rows[1]["caption"], *ast.literal_eval(rows[1][column])]
    assert it.tags["compounds"] == ("unseen",) and it.tags["train_dataset"] == ("laion",)
    box = tuple(float(rows[1][k]) for k in ("x", "y", "width", "height"))
    assert it.images[0].crop == box
    # the crop as torchvision's TF.crop(image, y, x, height, width) cuts it
    full = Image.open(it.images[0].path).convert("RGB")
    x, y, w, h = (int(v) for v in box)
    np.testing.assert_array_equal(np.asarray(it.images[0].load()), np.asarray(full)[y:y + h, x:x + w])
    # odd image ids are found in VG_100K_2, as get_image_by_id searches
    odd = next(i for i in ds if int(i.meta["image_id"]) % 2)
    assert odd.images[0].path.parent.name == "VG_100K_2"
    # the compound negatives of the last row are empty: the caption alone
    assert len(by_id[f"crepe/syst_cc12m_seen_comp/{N - 1}"].captions) == 1
    assert len(by_id["crepe/prod_negate_9/0"].captions) == 6
    assert by_id["crepe/prod_negate_9/0"].tags["complexity"] == ("9",)


#: The header of every released productivity file (prod_hard_negatives/<neg>/*.csv).
PROD_HEADER = ["image_id", "caption", "n", "n_objects", "n_relations", "n_attributes", "n_connected_components",
               "hard_negs", "x", "y", "width", "height"]


def test_set_literal_negatives_are_read_in_the_order_written(crepe_dir: Path, tmp_path: Path) -> None:
    """The release writes 3,768 of its 39,715 productivity cells (in every atom and negate file) as a
    set literal, which the authors' ast.literal_eval reads; the loader, `probe data info` and `probe
    eval` read them (they stopped at the first before), parsing without evaluating."""
    rel, _ = crepe_file("prod_negate_7")
    with open(crepe_dir / rel, encoding="utf-8", newline="") as fh:
        table = list(csv.reader(fh))
    assert table[0] == PROD_HEADER
    row = table[3]  # data row 2: written as a set
    cell = row[PROD_HEADER.index("hard_negs")]
    assert cell.startswith("{") and isinstance(ast.literal_eval(cell), set)
    it = load_crepe(crepe_dir, subsets="prod_negate_7").items[2]
    written = [e.value for e in ast.parse(cell, mode="eval").body.elts]  # type: ignore[attr-defined]
    assert [t.text for t in it.captions] == [row[1], *written]
    assert {t.text for t in it.captions[1:]} == ast.literal_eval(cell)  # the authors' texts, in another order
    assert it.meta["negatives_written_as"] == "set"
    result = CliRunner().invoke(app, ["data", "info", "crepe", "--data-dir", str(crepe_dir), "--json"])
    assert result.exit_code == 0, result.output
    reports = {r["name"]: r for r in json.loads(result.stdout)}
    assert reports["prod_negate_7"]["problems"] == {"hard negatives written as a set (read in the order written)": 2}
    assert not reports["prod_swap_7"]["problems"]  # the release writes no swap cell as a set
    result = CliRunner().invoke(app, ["eval", "crepe", "--model", "caption-length", "--data-dir", str(crepe_dir),
                                      "--subsets", "prod_atom_4,prod_negate_7", "--out", str(tmp_path), "--quiet"])
    assert result.exit_code == 0, result.output


def test_a_negatives_cell_is_parsed_never_evaluated() -> None:
    assert parse_negatives("['b', 'a', 'b']", "w", "f") == (["b", "a", "b"], False)
    assert parse_negatives("{'b', 'a', 'b'}", "w", "f") == (["b", "a"], True)  # a set holds a string once
    assert parse_negatives("set()", "w", "f") == ([], True)
    assert parse_negatives("('a',)", "w", "f") == (["a"], False)
    for bad in ("__import__('os').getcwd()", "[['nested']]", "{'a': 'b'}", "[1, 2]", "['a'] + ['b']", "[not a list"):
        with pytest.raises(InputError, match="field 'f' must be a list of captions"):
            parse_negatives(bad, "w", "f")


def test_the_order_of_a_rows_negatives_does_not_move_the_authors_rank() -> None:
    """A set's order follows string hashes (PYTHONHASHSEED): the authors' get_one2many_rank (line for
    line above) gives a row of six texts the same rank under every order of its negatives, ties
    included (torch sorts up to 16 values stably on the CPU), equal to vlprobe's (ties to the caption)."""
    from itertools import permutations

    from vlprobe.stats.benchmark_metrics import rank_of_first

    rng = np.random.default_rng(1)
    for _ in range(40):
        s = rng.integers(0, 3, size=6).astype(np.float64)  # a caption and five negatives; many ties
        ranks = {int(get_one2many_rank(torch.ones(1, 1, dtype=torch.float64),
                                       torch.tensor(np.r_[s[0], s[1:][list(p)]]).reshape(-1, 1))[0])
                 for p in permutations(range(5))}
        assert ranks == {int(rank_of_first(s[None, :])[0])}


def test_combined_negatives_of_systematicity(crepe_dir: Path) -> None:
    """CREPE's third systematicity type, combined (the authors' --hard-neg-types combined: column
    valid_hard_negs_combined), is a subset of its own."""
    assert {"syst_laion_seen_combined", "syst_cc12m_unseen_combined"} <= set(CREPE_SUBSETS)
    rel, column = crepe_file("syst_laion_seen_combined")
    assert column == "valid_hard_negs_combined"
    with open(crepe_dir / rel, encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    ds = load_crepe(crepe_dir, subsets="syst_laion_seen_combined")
    assert [[t.text for t in it.captions[1:]] for it in ds] == [ast.literal_eval(r[column]) for r in rows]
    assert ds.items[0].tags["hard_negative"] == ("combined",)


def test_recall_equals_the_authors_code_with_ties(crepe_dir: Path, tmp_path: Path) -> None:
    ds = load_crepe(crepe_dir, subsets="prod_swap_4,syst_yfcc_seen_comp,syst_yfcc_seen_atom")
    rng = np.random.default_rng(0)
    per_item = []
    for n, it in enumerate(ds):
        s = rng.integers(0, 4, size=len(it.captions)).astype(np.float64) * 0.25  # coarse grid: many ties
        if n % 3 == 0:
            s[:] = 0.5  # all tied: the caption ranks first
        per_item.append(s)
    path = write_item_scores(
        tmp_path / "planted.scores.jsonl", [it.id for it in ds for _ in it.captions],
        [it.images[0].id for it in ds for _ in it.captions], [t.id for it in ds for t in it.captions],
        np.concatenate(per_item))
    _, _, rows = run_eval(EvalConfig(benchmark="crepe", out=tmp_path, scores=path, data_dir=crepe_dir,
                                     subsets="prod_swap_4,syst_yfcc_seen_comp,syst_yfcc_seen_atom", bootstrap=20))
    got = {(r["subset"], r["metric"]): r for r in rows}
    for subset in ("prod_swap_4", "syst_yfcc_seen_comp", "syst_yfcc_seen_atom"):
        ref = authors_recall([s for s, it in zip(per_item, ds, strict=True) if it.meta["subset"] == subset])
        for k in (1, 3, 5, 10):
            assert got[(subset, f"recall@{k}")]["value"] == pytest.approx(100 * ref[f"image_to_text_R@{k}"], abs=1e-9)
        assert got[(subset, "recall@1")]["n"] == N
        assert "a tie goes to the caption" in got[(subset, "recall@1")]["note"]


def test_eval_with_clip_then_from_its_scores(crepe_dir: Path, tiny_clip: Path, tmp_path: Path) -> None:
    args = ["--data-dir", str(crepe_dir), "--image-root", f"vg={crepe_dir / 'vg'}",
            "--subsets", "prod_atom_5,syst_cc12m_unseen_atom"]
    result = CliRunner().invoke(app, ["eval", "crepe", "--model", "clip", "--checkpoint", str(tiny_clip), *args,
                                      "--out", str(tmp_path), "--bootstrap", "30", "--quiet"])
    assert result.exit_code == 0, result.output
    csv_path = tmp_path / "crepe" / "clip@bootstrap=30.csv"
    with open(csv_path, encoding="utf-8", newline="") as fh:
        rows = {(r["subset"], r["metric"]): r for r in csv.DictReader(fh)}
    assert rows[("prod_atom_5", "recall@10")]["value"] == "100.0"  # six texts: always within ten
    assert {("prod_atom_5/bow=different", "recall@1"), ("syst_cc12m_unseen_atom", "recall@1.ci95_low")} <= set(rows)
    manifest = json.loads((tmp_path / "crepe" / "manifest.json").read_text(encoding="utf-8"))
    entry = manifest["runs"]["clip@bootstrap=30"]
    assert entry["items_per_subset"] == {"syst_cc12m_unseen_atom": N, "prod_atom_5": N}
    again = tmp_path / "again"
    result = CliRunner().invoke(app, ["eval", "crepe", "--scores", str(csv_path.with_suffix(".scores.jsonl")),
                                      *args, "--out", str(again), "--bootstrap", "30", "--quiet"])
    assert result.exit_code == 0, result.output
    runs = json.loads((again / "crepe" / "manifest.json").read_text(encoding="utf-8"))["runs"]
    (name,) = runs
    with open(again / "crepe" / f"{name}.csv", encoding="utf-8", newline="") as fh:
        for r in csv.DictReader(fh):
            assert float(r["value"]) == pytest.approx(float(rows[(r["subset"], r["metric"])]["value"]), abs=1e-9)


def test_data_info_and_bias_gap(crepe_dir: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["data", "info", "crepe", "--data-dir", str(crepe_dir), "--json"])
    assert result.exit_code == 0, result.output
    reports = {r["name"]: r for r in json.loads(result.stdout)["subsets"]} if result.stdout.lstrip().startswith("{") \
        else {r["name"]: r for r in json.loads(result.stdout)}
    assert reports["prod_swap_12"]["items"] == N
    assert reports["syst_cc12m_seen_comp"]["problems"] == {"no hard negatives (ranked first, trivially right)": 1}
    result = CliRunner().invoke(app, ["run", "bias-gap", "--dataset", "crepe", "--data-dir", str(crepe_dir),
                                      "--subsets", "prod_swap_6,prod_negate_6", "--scorers", "caption-length",
                                      "--out", str(tmp_path), "--bootstrap", "10", "--quiet"])
    assert result.exit_code == 0, result.output
    with open(tmp_path / "bias-gap" / "crepe@bootstrap=10.csv", encoding="utf-8", newline="") as fh:
        got = {(r["subset"], r["metric"]): float(r["value"]) for r in csv.DictReader(fh)}
    # negation adds a word: the shorter caption always wins on length; a swap keeps the length: a tie, which
    # CREPE's recall@1 gives to the caption and a gap > 0 does not
    assert got[("prod_negate_6", "recall@1")] == 100.0 and got[("prod_negate_6", "gap_positive")] == 100.0
    assert got[("prod_swap_6", "recall@1")] == 100.0 and got[("prod_swap_6", "gap_positive")] == 0.0
    # a systematicity file's last row has no compound negatives: left out of the gaps, counted
    result = CliRunner().invoke(app, ["run", "bias-gap", "--dataset", "crepe", "--data-dir", str(crepe_dir),
                                      "--subsets", "syst_cc12m_seen_comp", "--scorers", "caption-length",
                                      "--out", str(tmp_path), "--bootstrap", "0", "--quiet"])
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "bias-gap" / "manifest.json").read_text(encoding="utf-8"))
    entry = manifest["runs"]["crepe@bootstrap=0"]
    assert entry["items_without_negatives"]["per_subset"] == {"syst_cc12m_seen_comp": 1}
    assert entry["n_items"] == N and entry["n_gap_items"] == N - 1  # recall@1 counts it (ranked first)


def test_refused_inputs(crepe_dir: Path, tiny_clip: Path, tmp_path: Path, one_error_line: Callable[..., str]) -> None:
    runner = CliRunner()
    aro = write_benchmark_fixture(tmp_path / "aro", "aro", n_items=2)
    one_error_line(runner.invoke(app, ["data", "info", "crepe", "--data-dir", str(aro)]),
                   "data_dir:", "another benchmark's folder")
    broken = tmp_path / "broken"
    shutil.copytree(crepe_dir, broken)
    (broken / "vg" / "VG_100K_2" / "3.jpg").unlink()
    one_error_line(runner.invoke(app, ["eval", "crepe", "--model", "clip", "--checkpoint", str(tiny_clip),
                                       "--data-dir", str(broken), "--image-root", f"vg={broken / 'vg'}",
                                       "--subsets", "prod_atom_4",
                                       "--out", str(tmp_path / "o"), "--quiet"]),
                   "prod_vg_hard_negs_atom_complexity_4.csv row 3: field 'image_id'", "3.jpg")
    rel, _ = crepe_file("prod_swap_8")
    path = broken / rel
    lines = path.read_text(encoding="utf-8").splitlines()
    path.write_text("\n".join([lines[0].replace("hard_negs", "negs"), *lines[1:]]) + "\n", encoding="utf-8")
    one_error_line(runner.invoke(app, ["eval", "crepe", "--model", "caption-length", "--data-dir", str(broken),
                                       "--subsets", "prod_swap_8", "--out", str(tmp_path / "o"), "--quiet"]),
                   "prod_vg_hard_negs_swap_complexity_8.csv: field 'hard_negs' is missing")
    rel, _ = crepe_file("prod_swap_9")
    path = broken / rel
    with open(path, encoding="utf-8", newline="") as fh:
        table = list(csv.reader(fh))
    table[1][table[0].index("hard_negs")] = "[not a list"
    with open(path, "w", encoding="utf-8", newline="") as fh:
        csv.writer(fh, lineterminator="\n").writerows(table)
    one_error_line(runner.invoke(app, ["eval", "crepe", "--model", "caption-length", "--data-dir", str(broken),
                                       "--subsets", "prod_swap_9", "--out", str(tmp_path / "o"), "--quiet"]),
                   "row 2: field 'hard_negs' must be a list of captions")
