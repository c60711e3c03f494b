"""ARO: the loader on a fixture in the authors' file format, the order perturbations, `probe data info aro`,
`probe fixtures dataset --format aro`, and bad input (one line naming the file and the field)."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.data.aro_tagging import NOUNS, fake_tag
from vlprobe.cli import app
from vlprobe.data import aro_order
from vlprobe.data.aro import ARO_FILES, ARO_SUBSETS, aro_report, load_aro
from vlprobe.data.aro_order import ORDER_PERTURBATIONS, perturb, pre_caption, trigrams
from vlprobe.data.benchmark_fixtures import write_benchmark_fixture
from vlprobe.data.bow import bag_of_words
from vlprobe.registry import DATASETS
from vlprobe.validation import InputError


@pytest.fixture(scope="module")
def aro_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_benchmark_fixture(tmp_path_factory.mktemp("aro") / "aro", "aro", n_items=6, seed=3)


def roots(root: Path) -> list[str]:
    return [f"coco={root / 'coco'}", f"flickr30k={root / 'flickr30k'}"]


def test_vg_subsets_as_items(aro_dir: Path) -> None:
    ds = DATASETS.get("aro")(aro_dir, subsets="vg_relation,vg_attribution")
    raw = json.loads((aro_dir / "visual_genome_relation.json").read_text(encoding="utf-8"))
    assert ds.name == "aro" and len(ds) == 12
    item = ds.item("aro/vg_relation/2")
    rec = raw[2]
    assert [t.text for t in item.texts] == [rec["true_caption"], rec["false_caption"]]
    assert [t.id for t in item.texts] == ["aro/vg_relation/2/c0", "aro/vg_relation/2/c1"]
    assert item.tags == {"subset": ("vg_relation",), "relation": (rec["relation_name"],)}
    image = item.images[0]
    assert image.crop == (rec["bbox_x"], rec["bbox_y"], rec["bbox_w"], rec["bbox_h"])
    # the vg images default to <data_dir>/images; the crop is what the model sees
    assert image.path == aro_dir / "images" / rec["image_path"]
    assert image.load().size == (rec["bbox_w"], rec["bbox_h"])
    attr = ds.item("aro/vg_attribution/1")
    raw_a = json.loads((aro_dir / "visual_genome_attribution.json").read_text(encoding="utf-8"))[1]
    assert attr.tags["attributes"] == ("_".join(raw_a["attributes"]),)
    # two items of one image with different boxes are distinct images to a model
    assert len({(im.path, im.crop) for im in ds.images()}) == 6


def test_order_subsets_and_their_perturbations(aro_dir: Path, fake_spacy: None) -> None:
    ds = load_aro(aro_dir, subsets="coco_order", image_root=roots(aro_dir))
    raw = json.loads((aro_dir / "coco" / "coco_karpathy_test.json").read_text(encoding="utf-8"))
    assert len(ds) == 5 * len(raw)
    item = ds.item("aro/coco_order/7")  # image 1, caption 2
    assert item.meta["caption_index"] == 2 and item.images[0].name == raw[1]["image"]
    assert item.images[0].path == aro_dir / "coco" / raw[1]["image"]
    caption = raw[1]["caption"][2]
    texts = [t.text for t in item.texts]
    assert len(texts) == 5 and texts[0] == pre_caption(caption)
    for text in texts[1:]:  # every perturbation keeps the caption's words
        assert bag_of_words(text) == bag_of_words(texts[0])
    # the same items whatever is selected, and another seed gives other perturbations
    again = load_aro(aro_dir, subsets="coco_order", limit=8, image_root=roots(aro_dir))
    assert [t.text for t in again.item("aro/coco_order/7").texts] == texts
    other = load_aro(aro_dir, subsets="coco_order", order_seed=1, image_root=roots(aro_dir))
    assert [t.text for it in other for t in it.texts] != [t.text for it in ds for t in it.texts]
    assert other.fingerprint != ds.fingerprint


def test_default_subsets_are_the_files_present(aro_dir: Path, tmp_path: Path, fake_spacy: None) -> None:
    ds = load_aro(aro_dir, limit=2, image_root=roots(aro_dir))
    assert Counter(it.meta["subset"] for it in ds) == {s: 2 for s in ARO_SUBSETS}
    # the authors' layout: the Karpathy files lie in the image roots, so without them only the VG files
    assert {it.meta["subset"] for it in load_aro(aro_dir)} == {"vg_relation", "vg_attribution"}
    only = tmp_path / "only"
    only.mkdir()
    (only / ARO_FILES["vg_relation"]).write_bytes((aro_dir / ARO_FILES["vg_relation"]).read_bytes())
    assert {it.meta["subset"] for it in load_aro(only)} == {"vg_relation"}
    with pytest.raises(FileNotFoundError, match=r"visual_genome_attribution\.json"):
        load_aro(only, subsets="vg_attribution")


def test_the_karpathy_files_where_the_authors_code_reads_them(aro_dir: Path, tmp_path: Path, fake_spacy: None,
                                                               one_error_line: Callable[..., str]) -> None:
    """COCO_Order / Flickr30k_Order download the Karpathy file into their image root and read it from
    there: the loader finds it there (or in data_dir, read first), and the fixture is laid out so."""
    assert not (aro_dir / ARO_FILES["coco_order"]).exists()
    assert (aro_dir / "coco" / ARO_FILES["coco_order"]).is_file()
    assert (aro_dir / "flickr30k" / ARO_FILES["flickr30k_order"]).is_file()
    # a data_dir with none of ARO's files, the Karpathy file only in the image root
    empty = tmp_path / "aro-root"
    empty.mkdir()
    ds = load_aro(empty, image_root=[f"coco={aro_dir / 'coco'}"])
    assert {it.meta["subset"] for it in ds} == {"coco_order"} and len(ds) == 30
    assert ds.items[0].images[0].path.is_relative_to(aro_dir / "coco" / "val2014")
    # data_dir is read first
    copy = tmp_path / "with-copy"
    copy.mkdir()
    records = json.loads((aro_dir / "coco" / ARO_FILES["coco_order"]).read_text(encoding="utf-8"))[:1]
    (copy / ARO_FILES["coco_order"]).write_text(json.dumps(records), encoding="utf-8")
    assert len(load_aro(copy, image_root=[f"coco={aro_dir / 'coco'}"])) == 5
    with pytest.raises(FileNotFoundError, match=r"flickr30k_test\.json .* image root of flickr30k"):
        load_aro(aro_dir, subsets="flickr30k_order")
    result = CliRunner().invoke(app, ["data", "info", "aro", "--data-dir", str(empty), "--image-root",
                                      f"flickr30k={aro_dir / 'flickr30k'}", "--json"])
    assert result.exit_code == 0, result.output
    assert {r["name"]: r["items"] for r in json.loads(result.stdout)}["flickr30k_order"] == 30
    one_error_line(CliRunner().invoke(app, ["data", "info", "aro", "--data-dir", str(empty)]),
                   "holds none of ARO's files")


def test_pre_caption_as_the_authors() -> None:
    assert pre_caption('A man (left) riding a "horse".  Fast!') == "a man left riding a horse fast"
    assert pre_caption(" ".join(["w"] * 40)) == " ".join(["w"] * 30)
    assert pre_caption("one, two; three") == "one, two three"  # commas stay


def test_perturbations_move_only_what_they_name() -> None:
    caption = "a red circle next to a blue square and a green star"
    tagged = fake_tag(caption)
    for seed in range(5):
        out = perturb(caption, "shuffle_nouns_and_adj", np.random.default_rng(seed), fake_tag).split(" ")
        for (tok, tag), new in zip(tagged, out, strict=True):
            if tag == "DT":
                assert new == tok  # neither noun nor adjective: in place
            else:
                assert (new in NOUNS) == (tag == "NN")  # a noun stays among the nouns
        out = perturb(caption, "shuffle_allbut_nouns_and_adj", np.random.default_rng(seed), fake_tag).split(" ")
        assert [t for t, (_, tag) in zip(out, tagged, strict=True) if tag != "DT"] == [
            t for t, tag in tagged if tag != "DT"]
    groups = trigrams(["a", "b", "c", "d", "e"])
    assert groups == [["a", "b", "c"], ["d", "e"]]
    within = perturb("a b c d e", "shuffle_within_trigrams", np.random.default_rng(0)).split(" ")
    assert sorted(within[:3]) == ["a", "b", "c"] and sorted(within[3:]) == ["d", "e"]
    across = perturb("a b c d e f g", "shuffle_trigrams", np.random.default_rng(1)).split(" ")
    assert sorted(" ".join(across).split(" ")) == list("abcdefg")
    assert {" ".join(across[i:i + 3]) for i in (0, 3, 4, 1)} & {"a b c", "d e f", "g"}
    with pytest.raises(InputError, match="tagger"):
        perturb(caption, ORDER_PERTURBATIONS[0], np.random.default_rng(0))


def test_order_with_the_real_spacy_model(aro_dir: Path) -> None:
    try:
        tag, info = aro_order.spacy_tagger()
    except InputError as exc:
        pytest.skip(f"no spaCy English model here: {exc}")
    tags = dict(tag("a red bus parked near a tall building"))
    assert tags["bus"].startswith("NN") and tags["red"] == "JJ"
    ds = load_aro(aro_dir, subsets="flickr30k_order", limit=3, image_root=roots(aro_dir))
    assert len(ds) == 3 and "tagger" in ds.source and info["model"] in ds.source


def test_images_are_checked_and_hashed(aro_dir: Path, tmp_path: Path) -> None:
    base = load_aro(aro_dir, subsets="vg_relation")
    assert base.fingerprint == load_aro(aro_dir, subsets="vg_relation").fingerprint
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / ARO_FILES["vg_relation"]).write_bytes((aro_dir / ARO_FILES["vg_relation"]).read_bytes())
    no_images = load_aro(bare)
    assert no_images.items[0].images[0].path is None and no_images.fingerprint != base.fingerprint
    with pytest.raises(FileNotFoundError, match=r"image '2300000.jpg' is not in .*\(6 of 6 images missing"):
        load_aro(bare, image_root=[f"vg={tmp_path}"])


@pytest.mark.parametrize(("field", "value", "expected"), [
    ("relation_name", None, "field 'relation_name' must be a string"),
    ("bbox_w", "wide", "field 'bbox_w' must be a number"),
    ("bbox_h", 0, "field 'bbox_h' must be positive"),
    ("true_caption", 3, "field 'true_caption' must be a string"),
])
def test_a_record_with_a_bad_field_is_named(aro_dir: Path, tmp_path: Path, field: str, value: object,
                                            expected: str) -> None:
    records = json.loads((aro_dir / ARO_FILES["vg_relation"]).read_text(encoding="utf-8"))
    if value is None:
        del records[4][field]
    else:
        records[4][field] = value
    (tmp_path / ARO_FILES["vg_relation"]).write_text(json.dumps(records), encoding="utf-8")
    with pytest.raises(InputError, match=re.escape(f"data_dir: visual_genome_relation.json record 4: {expected}")):
        load_aro(tmp_path)


def test_bad_input_on_the_command_line(aro_dir: Path, tmp_path: Path, sugarcrepe_dir: Path,
                                        one_error_line: Callable[..., str]) -> None:
    runner = CliRunner()
    # another benchmark's folder
    result = runner.invoke(app, ["data", "info", "aro", "--data-dir", str(sugarcrepe_dir)])
    one_error_line(result, "data_dir", "holds none of ARO's files", "another benchmark")
    # a record lacking a field
    records = json.loads((aro_dir / ARO_FILES["vg_attribution"]).read_text(encoding="utf-8"))
    del records[0]["attributes"]
    (tmp_path / ARO_FILES["vg_attribution"]).write_text(json.dumps(records), encoding="utf-8")
    result = runner.invoke(app, ["eval", "aro", "--model", "caption-length", "--data-dir", str(tmp_path),
                                 "--out", str(tmp_path / "out")])
    one_error_line(result, "visual_genome_attribution.json record 0", "'attributes'")
    # not a list
    (tmp_path / ARO_FILES["vg_attribution"]).write_text("{}", encoding="utf-8")
    result = runner.invoke(app, ["data", "info", "aro", "--data-dir", str(tmp_path)])
    one_error_line(result, "visual_genome_attribution.json must hold one JSON array")


def test_data_info_and_report(aro_dir: Path) -> None:
    reports = {r.name: r for r in aro_report(aro_dir, roots(aro_dir))}
    assert reports["vg_relation"].items == 6 and reports["vg_relation"].images == 6
    assert reports["coco_order"].items == 30 and reports["coco_order"].images == 6
    assert all(not r.problems for r in reports.values())
    result = CliRunner().invoke(app, ["data", "info", "aro", "--data-dir", str(aro_dir), "--image-root",
                                      f"coco={aro_dir / 'coco'}"])
    assert result.exit_code == 0, result.output
    assert "flickr30k_order" in result.output and "aro/coco_order/29" in result.output
    (aro_dir / "coco" / "val2014" / "COCO_val2014_000000391895.jpg").rename(aro_dir / "moved.jpg")
    try:
        missing = {r.name: r for r in aro_report(aro_dir, roots(aro_dir))}["coco_order"]
        assert missing.problems == {"image missing (items)": 5}  # one image, five captions
    finally:
        (aro_dir / "moved.jpg").rename(aro_dir / "coco" / "val2014" / "COCO_val2014_000000391895.jpg")


def test_fixture_command_writes_the_format_and_refuses_other_folders(tmp_path: Path,
                                                                     one_error_line: Callable[..., str]) -> None:
    runner = CliRunner()
    out = tmp_path / "fx"
    result = runner.invoke(app, ["fixtures", "dataset", "--format", "aro", "--out", str(out), "--n-items", "3"])
    assert result.exit_code == 0, result.output
    first = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert {"visual_genome_relation.json", "visual_genome_attribution.json", "coco/coco_karpathy_test.json",
            "flickr30k/flickr30k_test.json"} <= {p.as_posix() for p in first}
    # a rerun reuses its own folder, byte for byte
    assert runner.invoke(app, ["fixtures", "dataset", "--format", "aro", "--out", str(out), "--n-items", "3"]).exit_code == 0
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == first
    (out / "mine.txt").write_text("not vlprobe's", encoding="utf-8")
    result = runner.invoke(app, ["fixtures", "dataset", "--format", "aro", "--out", str(out)])
    one_error_line(result, "refusing to overwrite")
    assert (out / "mine.txt").is_file()
    result = runner.invoke(app, ["fixtures", "dataset", "--format", "nope", "--out", str(tmp_path / "n")])
    one_error_line(result, "format")
