"""SugarCrepe and VALSE loaders on the real JSON files (read where they lie, see the conftest), and `probe data info`."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner

from vlprobe.cli import app
from vlprobe.data.sugarcrepe import (
    SUGARCREPE_COUNTS,
    SUGARCREPE_SUBSETS,
    load_sugarcrepe,
    sugarcrepe_report,
)
from vlprobe.data.valse import (
    VALSE_FILES,
    VALSE_VALID_COUNTS,
    load_valse,
    parse_image_roots,
    valse_report,
)
from vlprobe.registry import DATASETS

# Pinned from the data (Heidelberg-NLP/VALSE 2152d90): (records, valid = mturk caption >= 2 and caption != foil).
VALSE_PINNED = {
    "existence": (534, 505), "plurals": (1000, 851), "counting-hard": (1000, 868),
    "counting-small-quant": (1000, 900), "counting-adversarial": (756, 691), "relations": (614, 535),
    "action-replacement": (779, 648), "actant-swap": (1042, 949), "coreference-standard": (916, 708),
    "coreference-hard": (141, 104), "foil-it": (1000, 943),
}


# --- SugarCrepe --------------------------------------------------------------------------------------


def test_sugarcrepe_real_counts_and_ids(sugarcrepe_dir: Path) -> None:
    ds = DATASETS.get("sugarcrepe")(sugarcrepe_dir)
    assert ds.name == "sugarcrepe" and len(ds) == 7511
    counts = Counter(it.meta["subset"] for it in ds)
    assert counts == SUGARCREPE_COUNTS and counts["swap_obj"] == 245
    assert list(dict.fromkeys(it.meta["subset"] for it in ds)) == list(SUGARCREPE_SUBSETS)
    ids = [it.id for it in ds]
    assert len(set(ids)) == len(ids)
    # Keys repeat across files and swap_obj lacks "108": ids keep the keys, never re-indexed.
    assert "sugarcrepe/swap_obj/107" in ids and "sugarcrepe/swap_obj/109" in ids
    assert "sugarcrepe/swap_obj/108" not in ids and "sugarcrepe/swap_obj/245" in ids
    assert sum(i.endswith("/0") for i in ids) == 7
    item = ds.item("sugarcrepe/swap_obj/0")
    raw = json.loads((sugarcrepe_dir / "swap_obj.json").read_text(encoding="utf-8"))["0"]
    assert [t.id for t in item.texts] == ["sugarcrepe/swap_obj/0/c0", "sugarcrepe/swap_obj/0/c1"]
    assert (item.texts[0].text, item.texts[1].text) == (raw["caption"].strip(), raw["negative_caption"].strip())
    assert item.images[0].name == raw["filename"] and item.images[0].path is None
    assert item.tags == {"subset": ("swap_obj",), "group": ("swap",)}
    assert len({it.images[0].name for it in ds}) == 1560  # distinct COCO images


def test_sugarcrepe_captions_as_released_and_stripped_as_an_option(sugarcrepe_dir: Path) -> None:
    """The default reads the captions as the authors' main_eval.py and text_model_eval.py do (json.load,
    no strip); strip_captions strips both captions of every item, and the fingerprint says which."""
    raw = load_sugarcrepe(sugarcrepe_dir)
    stripped = load_sugarcrepe(sugarcrepe_dir, strip_captions=True)
    padded = [it for it in raw if any(t.text != t.text.strip() for t in it.texts)]
    assert len(padded) == 1074
    add_obj = [it for it in raw if it.meta["subset"] == "add_obj"]
    # 307 add_obj positives carry surrounding whitespace (298 a trailing space), no negative does
    assert sum(it.texts[0].text != it.texts[0].text.strip() for it in add_obj) == 307
    assert not any(it.texts[1].text != it.texts[1].text.strip() for it in add_obj)
    files = json.loads((sugarcrepe_dir / "add_obj.json").read_text(encoding="utf-8"))
    assert [(it.texts[0].text, it.texts[1].text) for it in add_obj] == [
        (r["caption"], r["negative_caption"]) for r in files.values()]
    assert all(t.text == t.text.strip() for it in stripped for t in it.texts)
    assert raw.fingerprint != stripped.fingerprint  # same files, other texts
    assert "stripped" in stripped.source and "as released" in raw.source


def test_sugarcrepe_subsets_limit_and_images(sugarcrepe_dir: Path, tmp_path: Path) -> None:
    ds = load_sugarcrepe(sugarcrepe_dir, subsets="swap_obj,add_att", limit=3)
    assert [it.id for it in ds] == [f"sugarcrepe/{s}/{k}" for s in ("swap_obj", "add_att") for k in (0, 1, 2)]
    for it in ds:
        Image.new("RGB", (8, 8)).save(tmp_path / it.images[0].name)
    with_images = load_sugarcrepe(sugarcrepe_dir, subsets=["swap_obj", "add_att"], limit=3, image_dir=tmp_path)
    assert all(it.images[0].path == tmp_path / it.images[0].name for it in with_images)
    assert with_images.fingerprint != ds.fingerprint  # image bytes are part of it
    first = ds.items[0].images[0].name
    (tmp_path / first).unlink()
    with pytest.raises(FileNotFoundError, match=f"image '{first}' is not in"):
        load_sugarcrepe(sugarcrepe_dir, subsets="swap_obj", limit=3, image_dir=tmp_path)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"subsets": "swap_objects"}, "unknown subset 'swap_objects'; did you mean 'swap_obj'"),
    ({"subsets": ","}, "at least one"),
    ({"limit": 0}, "limit must be a positive integer"),
    ({"image_dir": "/nonexistent-vlprobe"}, "no such directory"),
])
def test_sugarcrepe_bad_arguments(sugarcrepe_dir: Path, kwargs: dict, match: str) -> None:
    with pytest.raises((ValueError, FileNotFoundError), match=match):
        load_sugarcrepe(sugarcrepe_dir, **kwargs)


def test_sugarcrepe_bad_files(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="holds none of the expected files"):
        load_sugarcrepe(tmp_path)
    (tmp_path / "swap_obj.json").write_text('{"0": {"filename": "x.jpg", "caption": "a"}}', encoding="utf-8")
    with pytest.raises(ValueError, match=r"swap_obj\.json key '0' must have string fields"):
        load_sugarcrepe(tmp_path, subsets="swap_obj")
    with pytest.raises(FileNotFoundError, match=r"add_att\.json is missing"):
        load_sugarcrepe(tmp_path, subsets="add_att")


def test_sugarcrepe_report(sugarcrepe_dir: Path) -> None:
    reports = {r.name: r for r in sugarcrepe_report(sugarcrepe_dir)}
    assert {k: r.items for k, r in reports.items()} == SUGARCREPE_COUNTS
    assert sum(r.problems.get("caption with surrounding whitespace", 0) for r in reports.values()) == 1074
    assert reports["swap_obj"].problems["keys not contiguous (gaps)"] == 1
    assert "keys not contiguous (gaps)" not in reports["swap_att"].problems
    assert reports["swap_obj"].sha256.startswith("073cdb8e253d0")  # the pinned commit's file


# --- VALSE -----------------------------------------------------------------------------------------


def test_valse_real_counts(valse_dir: Path) -> None:
    ds = DATASETS.get("valse")(valse_dir)
    assert len(ds) == 7702
    assert Counter(it.meta["subset"] for it in ds) == {k: v[1] for k, v in VALSE_PINNED.items()} == VALSE_VALID_COUNTS
    assert all(it.meta["valid"] for it in ds)
    everything = load_valse(valse_dir, all_items=True)
    assert Counter(it.meta["subset"] for it in everything) == {k: v[0] for k, v in VALSE_PINNED.items()}
    assert len(everything) == 8782 and sum(not it.meta["valid"] for it in everything) == 8782 - 7702
    ids = [it.id for it in everything]
    assert len(set(ids)) == len(ids)  # keys repeat across files, ids do not


def test_valse_pinned_counts_follow_from_the_rule(valse_dir: Path) -> None:
    for stem, (total, valid) in VALSE_PINNED.items():
        raw = json.loads((valse_dir / f"{stem}.json").read_text(encoding="utf-8"))
        assert len(raw) == total, stem
        by_vote = [r for r in raw.values() if r["mturk"]["caption"] >= 2]
        assert sum(r["caption"] != r["foil"] for r in by_vote) == valid, stem
        # The vote already removes the items whose caption equals the foil.
        assert len(by_vote) == valid, stem


def test_valse_item_layout(valse_dir: Path) -> None:
    ds = load_valse(valse_dir, subsets="actant-swap", limit=2)
    it = ds.items[0]
    raw = json.loads((valse_dir / "actant-swap.json").read_text(encoding="utf-8"))
    key = next(k for k, r in raw.items() if r["mturk"]["caption"] >= 2 and r["caption"] != r["foil"])
    assert it.id == f"valse/actant-swap/{key}"
    assert [t.text for t in it.texts] == [raw[key]["caption"], raw[key]["foil"]]
    assert it.images[0].name == raw[key]["image_file"]
    assert it.tags == {"subset": ("actant-swap",), "phenomenon": ("actions",), "source": ("swig",)}


def test_valse_image_roots(valse_dir: Path, tmp_path: Path) -> None:
    swig, v7w = tmp_path / "swig", tmp_path / "v7w"
    swig.mkdir()
    v7w.mkdir()
    names = [it.images[0].name for it in load_valse(valse_dir, subsets="actant-swap", limit=3)]
    for n in names:
        Image.new("RGB", (8, 8)).save(swig / n)
    ds = load_valse(valse_dir, subsets="actant-swap", limit=3, image_root=[f"swig={swig}"])
    assert [it.images[0].path for it in ds] == [swig / n for n in names]
    assert load_valse(valse_dir, subsets="actant-swap", limit=3, image_root=[str(swig)]).items[0].images[0].path == swig / names[0]
    with pytest.raises(ValueError, match=r"no folder for 1 source\(s\): 'visual7w' \(needed by existence\); "
                                         r"pass --image-root visual7w=DIR"):
        load_valse(valse_dir, subsets="actant-swap,existence", limit=3, image_root=[f"swig={swig}"])
    # every missing source in the one line, not the first only
    with pytest.raises(ValueError, match=r"no folder for 4 source\(s\): 'visual7w' \(needed by existence, counting-hard, "
                                         r"counting-small-quant, counting-adversarial\); 'coco2017' .*'visdial' .*'coco2014' .*"
                                         r"pass --image-root visual7w=DIR --image-root coco2017=DIR"):
        load_valse(valse_dir, limit=3, image_root=[f"swig={swig}"])
    with pytest.raises(FileNotFoundError, match="images missing"):
        load_valse(valse_dir, subsets="existence", limit=3, image_root=[f"visual7w={v7w}"])
    with pytest.raises(ValueError, match="unknown source 'coco'"):
        parse_image_roots([f"coco={swig}"])
    assert set(parse_image_roots({"swig": swig, "visual7w": v7w})) == {"swig", "visual7w"}


def test_valse_report(valse_dir: Path) -> None:
    reports = {r.name: r for r in valse_report(valse_dir)}
    assert set(reports) == set(VALSE_FILES)
    assert {k: (r.items, r.kept) for k, r in reports.items()} == VALSE_PINNED
    equal = {k: r.problems.get("caption equals foil", 0) for k, r in reports.items()}
    assert {k: v for k, v in equal.items() if v} == {"actant-swap": 14, "counting-hard": 9, "existence": 1}
    assert not any("images not checked" in p for r in reports.values() for p in r.problems)  # none asked


def test_valse_report_names_every_source_without_a_folder(valse_dir: Path, tmp_path: Path) -> None:
    swig = tmp_path / "swig"
    swig.mkdir()
    reports = {r.name: r for r in valse_report(valse_dir, [f"swig={swig}"])}
    unchecked = {k: p for k, r in reports.items() for p in r.problems if p.startswith("images not checked")}
    assert set(unchecked) == set(VALSE_FILES) - {"actant-swap", "action-replacement"}
    assert unchecked["existence"] == "images not checked: no --image-root for source 'visual7w'"
    assert reports["existence"].problems[unchecked["existence"]] == VALSE_PINNED["existence"][1]
    assert reports["actant-swap"].problems["image missing (valid items)"] == VALSE_PINNED["actant-swap"][1]


# --- probe data info ----------------------------------------------------------------------------------


def test_cli_data_info(sugarcrepe_dir: Path, valse_dir: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["data", "info", "sugarcrepe", "--data-dir", str(sugarcrepe_dir)])
    assert res.exit_code == 0, res.output
    assert "swap_obj" in res.stdout and "keys not contiguous (gaps): 1" in res.stdout
    assert res.stdout.splitlines()[-1].split() == ["total", "7511", "7511"]
    res = runner.invoke(app, ["data", "info", "valse", "--data-dir", str(valse_dir), "--json"])
    assert res.exit_code == 0, res.output
    got = {r["name"]: (r["items"], r["kept"]) for r in json.loads(res.stdout)}
    assert got == VALSE_PINNED


def test_cli_data_info_errors(one_error_line: Callable[..., str], tmp_path: Path, valse_dir: Path) -> None:
    runner = CliRunner()
    one_error_line(runner.invoke(app, ["data", "info", "crepes", "--data-dir", str(tmp_path)]), "benchmark must be one of")
    one_error_line(runner.invoke(app, ["data", "info", "valse", "--data-dir", str(tmp_path / "none")]), "no such directory")
    one_error_line(runner.invoke(app, ["data", "info", "valse", "--data-dir", str(valse_dir), "--image-root", "x=/tmp"]),
                   "unknown source 'x'")
