"""Models files: ``probe eval sugarcrepe --models FILE`` (many models, the paper's table,
resumable per model), ``probe extract --models FILE``, and the SugarCrepe example file."""

from __future__ import annotations

import csv
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from vlprobe.cli import app
from vlprobe.fixtures.model_fixture import write_model_fixture
from vlprobe.runs.model_lists import load_models_file
from vlprobe.validation import InputError

REPO = Path(__file__).resolve().parents[2]
SUBSETS = ("replace_obj", "replace_att", "replace_rel", "swap_obj", "swap_att", "add_obj", "add_att")
#: SugarCrepe's main table, its rows (the paper's names), and NegCLIP.
PAPER_ROWS = {
    "OpenAI RN50", "OpenAI RN101", "OpenAI ViT-B-32", "OpenAI RN50x4", "OpenAI RN50x16", "OpenAI ViT-L-14",
    "OpenAI RN50x64", "LAION2B roberta-ViT-B-32", "LAION2B ViT-H-14", "LAION2B ViT-g-14", "LAION2B ViT-bigG-14",
    "LAION5B xlm-roberta-base-ViT-B-32", "LAION5B xlm-roberta-large-ViT-H-14", "DataComp small ViT-B-32",
    "DataComp medium ViT-B-32", "DataComp large ViT-B-16", "DataComp xlarge ViT-L-14", "Vera (text)",
    "Grammar (text)", "NegCLIP",
}


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory, tiny_clip: Path, sugarcrepe_dir: Path) -> dict[str, Path]:
    """A CLIP and an OpenCLIP fixture, and random images for the first item of every subset."""
    from vlprobe.data.sugarcrepe import load_sugarcrepe

    root = tmp_path_factory.mktemp("model-lists")
    openclip = write_model_fixture("openclip", root / "openclip", 0, "vit")
    coco = root / "coco"
    coco.mkdir()
    for n, it in enumerate(load_sugarcrepe(sugarcrepe_dir, limit=1)):
        Image.fromarray(np.random.default_rng(n).integers(0, 256, (40, 52, 3), dtype=np.uint8)).save(
            coco / it.images[0].name)
    return {"root": root, "clip": tiny_clip, "openclip": openclip, "coco": coco, "data": sugarcrepe_dir}


def _models_file(path: Path, kit: dict[str, Path], *, broken: bool = False, more: str = "") -> Path:
    """Four models: a CLIP, the OpenCLIP fixture with GELU and with QuickGELU (its checkpoint given
    relative to the file; ``broken``: a folder that is not there yet), and caption length."""
    shutil.copytree(kit["openclip"], path.parent / "oc", dirs_exist_ok=True)
    path.write_text(f"""
[models.clip-a]
row = "Tiny CLIP"
model = "clip"
checkpoint = "{kit['clip']}"

[models.oc-gelu]
model = "openclip"
checkpoint = "oc"

[models.oc-quick]
model = "openclip"
checkpoint = "{'oc-later' if broken else 'oc'}"
options = {{ act = "quick_gelu" }}

[models.length]
model = "caption-length"
{more}""", encoding="utf-8")
    return path


def _eval(kit: dict[str, Path], models: Path, out: Path, *extra: str) -> Any:
    return CliRunner().invoke(app, [
        "eval", "sugarcrepe", "--models", str(models), "--data-dir", str(kit["data"]), "--limit", "1", "--image-dir",
        str(kit["coco"]), "--out", str(out), "--bootstrap", "0", "--device", "cpu", "--quiet", *extra])


def _table(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def test_eval_models_file_writes_the_papers_table_and_resumes(
    kit: dict[str, Path], tmp_path: Path, one_error_line: Callable[..., str],
) -> None:
    models = _models_file(tmp_path / "models.toml", kit, broken=True)
    out = tmp_path / "out"
    # the third model fails: the two before it are written, the table is not
    one_error_line(_eval(kit, models, out), "models.oc-quick", "oc-later")
    folder = out / "sugarcrepe"
    done = {p.name: p.stat().st_mtime_ns for p in folder.glob("*.csv")}
    assert sorted(done) == ["clip-a@bootstrap=0.csv", "oc-gelu@bootstrap=0.csv"]
    assert not (folder / "models.table.csv").exists()

    # mended and rerun: the two done are read back, not run again
    shutil.copytree(tmp_path / "oc", tmp_path / "oc-later")
    res = _eval(kit, models, out)
    assert res.exit_code == 0, res.output
    assert {p.name: p.stat().st_mtime_ns for p in folder.glob("*@bootstrap=0.csv") if p.name in done} == done
    table = _table(folder / "models.table.csv")
    assert list(table[0]) == ["name", "row", "model", "metric", *SUBSETS, "replace", "swap", "add", "all"]
    assert [(r["name"], r["row"], r["model"], r["metric"]) for r in table] == [
        ("clip-a", "Tiny CLIP", "clip", "accuracy"), ("oc-gelu", "oc-gelu", "openclip", "accuracy"),
        ("oc-quick", "oc-quick", "openclip", "accuracy"), ("length", "length", "caption-length", "accuracy")]
    for r in table:  # each cell is the model's own run's value; the micro-averages weigh subsets by items (1 each)
        own = {row["subset"]: row["value"] for row in _table(folder / f"{r['name']}@bootstrap=0.csv")
               if row["metric"] == "accuracy"}
        assert all(r[s] == own[s] for s in (*SUBSETS, "replace", "swap", "add", "all"))
        # a mean of 0/100 values (float sums in another order than the run's: tolerance)
        assert float(r["replace"]) == pytest.approx(np.mean([float(r[s]) for s in SUBSETS[:3]]), abs=1e-9)
    manifest = json.loads((folder / "models.table.json").read_text(encoding="utf-8"))
    assert manifest["runs"] == {n: f"{n}@bootstrap=0" for n in ("clip-a", "oc-gelu", "oc-quick", "length")}
    assert manifest["inputs"]["models"]["sha256"]
    # --dtype auto (the default): each model's own, recorded as what it resolved to
    assert manifest["config"]["dtype"] == [f"{n}=float32" for n in ("clip-a", "oc-gelu", "oc-quick", "length")]
    runs = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))["runs"]
    assert {r["config"]["dtype"] for r in runs.values()} == {"float32"}
    assert runs["oc-quick@bootstrap=0"]["config"]["model_options"] == ["act=quick_gelu"]
    assert "table: " in res.stdout and "oc-quick" in res.stdout

    # a model added to the file: only it runs; the same settings otherwise
    before = {p.name: p.stat().st_mtime_ns for p in folder.glob("*@bootstrap=0.csv")}
    _models_file(models, kit, broken=True, more=f'\n[models.clip-b]\nmodel = "clip"\ncheckpoint = "{kit["clip"]}"\n')
    res = _eval(kit, models, out)
    assert res.exit_code == 0, res.output
    assert {n: t for n, t in ((p.name, p.stat().st_mtime_ns) for p in folder.glob("*@bootstrap=0.csv"))
            if n in before} == before
    table = _table(folder / "models.table.csv")
    assert [r["name"] for r in table][-1] == "clip-b"
    assert table[-1]["all"] == table[0]["all"]  # the same checkpoint

    # other settings with the same models: refused before any work, naming the model
    one_error_line(_eval(kit, models, out, "--subsets", "replace_obj"), "models.clip-a", "subsets")


def test_extract_models_file(kit: dict[str, Path], synthetic_dir: Path, tmp_path: Path,
                             one_error_line: Callable[..., str]) -> None:
    runner = CliRunner()
    models = _models_file(tmp_path / "models.toml", kit)
    base = ["extract", "--dataset", "winoground", "--data-dir", str(synthetic_dir), "--device", "cpu", "--quiet"]
    # caption-length has no states: refused before any model runs
    one_error_line(runner.invoke(app, [*base, "--models", str(models), "--out", str(tmp_path / "c")]),
                   "models.length", "caption-length")
    assert not (tmp_path / "c").exists()
    text = models.read_text(encoding="utf-8")
    models.write_text(text[: text.index("[models.length]")], encoding="utf-8")
    res = runner.invoke(app, [*base, "--models", str(models), "--out", str(tmp_path / "c")])
    assert res.exit_code == 0, res.output
    import h5py

    for name, opts in (("clip-a", {}), ("oc-gelu", {"act": "gelu"}), ("oc-quick", {"act": "quick_gelu"})):
        with h5py.File(tmp_path / "c" / f"{name}-winoground.h5") as h5:
            assert h5.attrs["complete"] and h5.attrs["dtype"] == "float32"  # --dtype auto, resolved per model
            assert opts.items() <= json.loads(h5.attrs["model_options"] or "{}").items()
    res = runner.invoke(app, [*base, "--models", str(models), "--out", str(tmp_path / "c")])
    assert res.exit_code == 0 and res.stdout.count("text 0/") == 3, res.output  # resumed: nothing left to compute
    one_error_line(runner.invoke(app, [*base, "--models", str(models), "--model", "clip"]), "model")
    one_error_line(runner.invoke(app, [*base, "--models", str(models), "--checkpoint", str(kit["clip"])]),
                   "checkpoint", "per model")
    one_error_line(runner.invoke(app, [*base, "--models", str(models), "--shard", "0/2"]), "shard")


@pytest.mark.parametrize(("text", "needles"), [
    ("", ("no [models.NAME]",)),
    ("[models.a]\ncheckpoint = 'x'\n", ("models.a", "needs model")),
    ("[models.a]\nmodel = 'clip'\ncheckpont = 'x'\n", ("models.a", "checkpont")),
    ("[models.a]\nmodel = 'clipp'\n", ("models.a", "clipp")),
    ("[models.a]\nmodel = 'openclip'\noptions = { arc = 'RN50' }\n", ("models.a", "arc")),
    ("[models.a]\nmodel = 'visualbert'\n", ("models.a", "regions")),
    ("[models.a]\nmodel = 'clip'\noptions = 'arch=RN50'\n", ("models.a.options", "table")),
    ("[models.a]\nmodel = 'clip'\n[models.A]\nmodel = 'clip'\n", ("models.A",)),
    ("[models.'a b']\nmodel = 'clip'\n", ("models.a b",)),
    ("models = 3\n", ("no [models.NAME]",)),
    ("[plan]\nout = 'x'\n", ("plan",)),
    ("[models.a\n", ("not a TOML",)),
    ("[models.a]\nmodel = 'vera'\ndtype = 'fp8'\n", ("models.a.dtype", "bfloat16", "'fp8'")),
])
def test_models_file_refusals(text: str, needles: tuple[str, ...], tmp_path: Path) -> None:
    path = tmp_path / "m.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as err:
        load_models_file(path)
    msg = str(err.value)
    assert msg.startswith("models: ") and "\n" not in msg and all(n in msg for n in needles), msg


def test_sugarcrepe_example_file_lists_every_row_of_the_table() -> None:
    """The example holds every model of SugarCrepe's main table. A row SugarCrepe's main_eval.py ran
    names OpenCLIP's built-in architecture it ran (QuickGELU for OpenAI's: open_clip's
    pretrained.py sets quick_gelu for the openai tag); a row it did not run (the DataComp lines are
    commented out there, as ViT-B-32-quickgelu, a name open_clip never registered the DataComp
    tags under: pretrained.py lists them under ViT-B-32 since v2.19.0) gives no arch, so the hub
    folder's own open_clip_config.json decides (DataComp trained with GELU)."""
    from vlprobe.extract.models.openclip.archs import OpenClipConfig, arch_config

    entries = load_models_file(REPO / "examples" / "sugarcrepe-models.toml")
    rows = {e.row for e in entries}
    assert PAPER_ROWS <= rows, PAPER_ROWS - rows
    for e in entries:
        if e.model != "openclip":
            assert e.model in ("vera", "grammar") and e.checkpoint is None, e
            # SugarCrepe's text_model_eval.py loads Vera with torch_dtype='auto' (its bfloat16)
            assert e.dtype == ("bfloat16" if e.model == "vera" else None), e
            continue
        assert e.checkpoint is not None
        if e.row.startswith("DataComp"):
            assert "arch" not in e.options and "act" not in e.options, e
            assert e.checkpoint.startswith("laion/CLIP-ViT-") and "DataComp" in e.checkpoint, e
            continue
        cfg = OpenClipConfig.from_dict(arch_config(e.options["arch"]), name=e.options["arch"], param="arch",
                                       act=e.options.get("act"))
        openai = e.row.startswith("OpenAI")
        # QuickGELU: OpenAI's, OpenCLIP's roberta-ViT-B-32 config, the NegCLIP correction
        quick = openai or "roberta-ViT-B-32" == e.options["arch"]
        assert (cfg.act == "quick_gelu") == (quick or "QuickGELU" in e.row), e
        assert e.checkpoint.startswith("timm/" if openai else "laion/") or e.row.startswith("NegCLIP"), e


def test_valse_example_file_lists_every_row_with_its_choices() -> None:
    """examples/valse-models.toml holds every model of VALSE's table: LXMERT and GPT-1/GPT-2 as
    VALSE's scripts load them; for ViLBERT, 12-in-1 and VisualBERT (no public script) the
    release's files and vlprobe's stated choices: 12-in-1 scored by vil_logit with task 8, the
    pretrained ViLBERT by its ITM head, VisualBERT's COCO-pretrained checkpoint."""
    import tomllib

    entries = {e.name: e for e in load_models_file(REPO / "examples" / "valse-models.toml")}
    assert {e.row for e in entries.values()} == {"CLIP", "LXMERT", "ViLBERT", "ViLBERT 12-in-1", "VisualBERT", "GPT-1",
                                                 "GPT-2"}
    assert (entries["lxmert"].checkpoint, entries["gpt2"].checkpoint, entries["gpt1"].checkpoint) == (
        "unc-nlp/lxmert-base-uncased", "gpt2-large", "openai-gpt")
    assert entries["12in1"].checkpoint == "multi_task_model.bin"
    assert dict(entries["12in1"].options) == {"score_head": "vil_logit", "task_id": "8"}
    assert entries["vilbert"].checkpoint == "pretrained_model.bin" and not entries["vilbert"].options
    assert entries["visualbert"].checkpoint == "uclanlp/visualbert-vqa-coco-pre"
    assert all(e.regions for e in entries.values() if e.model in ("lxmert", "vilbert", "visualbert"))
    text = (REPO / "examples" / "valse-models.toml").read_text(encoding="utf-8")
    tomllib.loads(text)
    for said in ("RetrievalFlickr30k", "a choice", "no script is public", "lxmert_valse_eval.py",
                 "unimodal_valse_eval.py", "Index 1 of cls.seq_relationship"):
        assert said in text, said


def test_eval_valse_models_file(valse_dir: Path, tmp_path: Path) -> None:
    """VALSE's table from a models file: a region reader (its regions given relative to the file),
    ViLBERT 12-in-1 with its options, and the GPT-1/GPT-2 baselines; the table has the files, then
    ``all`` and ``mean-of-subsets``, each cell the model's own run's value."""
    from vlprobe.fixtures.regions import random_regions_for_dataset

    subsets = "existence,counting-hard"
    random_regions_for_dataset(tmp_path / "valse-regions.h5", valse_dir, dataset="valse", n_boxes=5, dim=2048, seed=0,
                               options={"subsets": subsets, "limit": 3})
    for name, arch in (("visualbert", None), ("vilbert", "multitask"), ("gpt2", None), ("openai-gpt", None)):
        write_model_fixture(name, tmp_path / name, 0, arch)
    models = tmp_path / "valse-models.toml"
    models.write_text("""
[models.visualbert]
row = "VisualBERT"
model = "visualbert"
checkpoint = "visualbert"
regions = "valse-regions.h5"

[models.12in1]
row = "ViLBERT 12-in-1"
model = "vilbert"
checkpoint = "vilbert/save/multi_task_model.bin"
regions = "valse-regions.h5"
options = { task_id = 8 }

[models.gpt1]
row = "GPT-1"
model = "openai-gpt"
checkpoint = "openai-gpt"

[models.gpt2]
row = "GPT-2"
model = "gpt2"
checkpoint = "gpt2"
""", encoding="utf-8")
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["eval", "valse", "--models", str(models), "--data-dir", str(valse_dir), "--subsets",
                                   subsets, "--limit", "3", "--out", str(out), "--bootstrap", "0", "--device", "cpu",
                                   "--quiet"])
    assert res.exit_code == 0, res.output
    folder = out / "valse"
    table = _table(folder / "valse-models.table.csv")
    assert list(table[0])[4:] == ["existence", "counting-hard", "all", "mean-of-subsets"]
    acc_r = [r for r in table if r["metric"] == "acc_r"]
    assert [r["name"] for r in acc_r] == ["visualbert", "12in1", "gpt1", "gpt2"]
    for r in acc_r:  # the mean of the two files' values (a mean of 0-100 values: tolerance)
        assert float(r["mean-of-subsets"]) == pytest.approx((float(r["existence"]) + float(r["counting-hard"])) / 2,
                                                            abs=1e-9), r
    for r in table:
        own = {row["subset"]: row["value"] for row in _table(folder / f"{r['name']}@bootstrap=0.csv")
               if row["metric"] == r["metric"]}
        assert all(r[s] == own.get(s, "") for s in ("existence", "counting-hard", "all", "mean-of-subsets")), r
    runs = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))["runs"]
    assert runs["12in1@bootstrap=0"]["config"]["model_options"] == ["task_id=8"]
    assert runs["visualbert@bootstrap=0"]["config"]["regions"] == str(tmp_path / "valse-regions.h5")
