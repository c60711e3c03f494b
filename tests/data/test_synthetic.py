"""Tests for the synthetic Winoground-format dataset generator."""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vlprobe.data.synthetic import (
    COLORS,
    SHAPES,
    SWAP_TYPES,
    WWH_TAGS,
    grammar_words,
    make_synthetic_winoground,
    read_scenes,
    synthetic_provenance,
)
from vlprobe.data.variants import read_variants

FIELDS = (
    "id", "caption_0", "caption_1", "image_0", "image_1", "tag", "secondary_tag",
    "num_main_preds", "collapsed_tag",
)
FIELD_TYPES = {
    "id": int, "caption_0": str, "caption_1": str, "image_0": str, "image_1": str, "tag": str,
    "secondary_tag": str, "num_main_preds": int, "collapsed_tag": str,
}
NP = r"an? (?:(big|small) )?(\w+) (\w+)"
CAPTION_RE = re.compile(rf"{NP} (left of|right of|above|below) {NP}")
N = 40


def _rows(root: Path) -> list[dict]:
    with open(root / "examples.jsonl", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def _hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*")) if p.is_file()
    }


def _pixels(root: Path, name: str) -> np.ndarray:
    with Image.open(root / "images" / f"{name}.png") as img:
        return np.asarray(img)


def _mask(arr: np.ndarray, color: str) -> np.ndarray:
    return (arr == np.array(COLORS[color], dtype=arr.dtype)).all(axis=-1)


def _parse(caption: str) -> tuple[tuple[str | None, str, str], str, tuple[str | None, str, str]]:
    m = CAPTION_RE.fullmatch(caption)
    assert m is not None, caption
    z0, c0, s0, rel, z1, c1, s1 = m.groups()
    return (z0, c0, s0), rel, (z1, c1, s1)


@pytest.fixture(scope="module")
def ds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("syn") / "winoground"
    assert make_synthetic_winoground(out, n_items=N, seed=0) == out
    return out


def test_files_exist_and_counts_match(ds: Path) -> None:
    assert {p.name for p in ds.iterdir()} == {
        "examples.jsonl", "images", "variants.jsonl", "new_tag_assignments.json",
        "scenes.jsonl", "PROVENANCE.txt",
    }
    rows = _rows(ds)
    assert [r["id"] for r in rows] == list(range(N))
    images = sorted(p.name for p in (ds / "images").iterdir())
    assert images == sorted(f"ex_{i}_img_{j}.png" for i in range(N) for j in (0, 1))
    prov = (ds / "PROVENANCE.txt").read_text()
    assert "synthetic" in prov and "vlprobe" in prov and f"n_items={N}" in prov
    assert "seed=0" in prov and "split=eval" in prov


def test_examples_have_exactly_winogrounds_fields(ds: Path) -> None:
    for row in _rows(ds):
        assert tuple(row) == FIELDS
        for name, typ in FIELD_TYPES.items():
            assert type(row[name]) is typ, (name, row[name])
        i = row["id"]
        assert row["image_0"] == f"ex_{i}_img_0" and row["image_1"] == f"ex_{i}_img_1"
        assert row["num_main_preds"] in (1, 2)
        assert row["collapsed_tag"] in ("Object", "Relation", "Both")
        assert (row["tag"], row["collapsed_tag"], row["num_main_preds"]) in SWAP_TYPES.values()


def test_captions_are_minimal_pairs(ds: Path) -> None:
    for row in _rows(ds):
        c0, c1 = row["caption_0"], row["caption_1"]
        assert c0 != c1
        assert Counter(c0.split()) == Counter(c1.split())
        for c in (c0, c1):
            (_, col_a, shape_a), _, (_, col_b, shape_b) = _parse(c)
            assert {col_a, col_b} <= set(COLORS) and col_a != col_b
            assert {shape_a, shape_b} <= set(SHAPES) and shape_a != shape_b


def test_swap_types_match_tags(ds: Path) -> None:
    for row in _rows(ds):
        a0, rel0, b0 = _parse(row["caption_0"])
        a1, rel1, b1 = _parse(row["caption_1"])
        assert rel0 == rel1
        tag = row["tag"]
        if tag == "Noun":
            assert (a1, b1) == ((a0[0], a0[1], b0[2]), (b0[0], b0[1], a0[2]))
        elif tag == "Adjective-Color":
            assert (a1, b1) == ((a0[0], b0[1], a0[2]), (b0[0], a0[1], b0[2]))
        elif tag == "Adjective-Size":
            assert {a0[0], b0[0]} == {"big", "small"}
            assert (a1, b1) == ((b0[0], a0[1], a0[2]), (a0[0], b0[1], b0[2]))
        else:
            assert tag == "Noun Phrase"
            assert (a1, b1) == (b0, a0)


def test_tag_mix(ds: Path) -> None:
    rows = _rows(ds)
    assert {r["collapsed_tag"] for r in rows} == {"Object", "Relation", "Both"}
    assert {r["num_main_preds"] for r in rows} == {1, 2}
    secondary = [r["secondary_tag"] for r in rows]
    assert 0.05 * N <= sum(bool(s) for s in secondary) <= 0.5 * N
    allowed = {"Symbolic", "Series", "Pragmatics", "Morpheme-Level"}
    for s in secondary:
        if s:
            assert {t.strip() for t in s.split(",")} <= allowed


@pytest.mark.parametrize("seed", range(8))
def test_three_items_cover_all_collapsed_tags(tmp_path: Path, seed: int) -> None:
    out = make_synthetic_winoground(tmp_path / "d", n_items=3, seed=seed)
    assert {r["collapsed_tag"] for r in _rows(out)} == {"Object", "Relation", "Both"}


def test_single_item(tmp_path: Path) -> None:
    out = make_synthetic_winoground(tmp_path / "d", n_items=1, seed=5)
    assert len(_rows(out)) == 1
    assert len(read_variants(out / "variants.jsonl")) == 2
    assert list(json.loads((out / "new_tag_assignments.json").read_text())) == ["0"]


def test_deterministic_and_seed_dependent(tmp_path: Path, ds: Path) -> None:
    again = make_synthetic_winoground(tmp_path / "a", n_items=N, seed=0)
    first = _hashes(ds)
    assert len(first) == 2 * N + 5
    assert _hashes(again) == first
    other = _hashes(make_synthetic_winoground(tmp_path / "b", n_items=N, seed=1))
    assert other.keys() == first.keys()
    for name in ("examples.jsonl", "variants.jsonl", "new_tag_assignments.json", "scenes.jsonl"):
        assert other[name] != first[name]
    assert sum(other[k] != first[k] for k in first if k.startswith("images/")) >= N


def test_images_size_and_mode(ds: Path, tmp_path: Path) -> None:
    for p in (ds / "images").iterdir():
        with Image.open(p) as img:
            assert img.format == "PNG" and img.mode == "RGB" and img.size == (64, 64)
    small = make_synthetic_winoground(tmp_path / "s", n_items=3, seed=2, image_size=16)
    for row in _rows(small):
        for j in (0, 1):
            arr = _pixels(small, row[f"image_{j}"])
            assert arr.shape == (16, 16, 3)
            (_, col_a, _), _, (_, col_b, _) = _parse(row[f"caption_{j}"])
            assert _mask(arr, col_a).any() and _mask(arr, col_b).any()


def test_images_vary(ds: Path) -> None:
    digests = set()
    for row in _rows(ds):
        a, b = _pixels(ds, row["image_0"]), _pixels(ds, row["image_1"])
        assert not np.array_equal(a, b)
        digests.update({a.tobytes(), b.tobytes()})
    assert len(digests) == 2 * N
    backgrounds = {tuple(_pixels(ds, f"ex_{i}_img_0")[0, 0]) for i in range(N)}
    assert len(backgrounds) > 5
    assert not backgrounds & set(COLORS.values())


def test_images_depict_their_captions(ds: Path) -> None:
    """Relation by colour centroids; size by extent; shape by how it fills its bounding box."""
    for row in _rows(ds):
        for j in (0, 1):
            arr = _pixels(ds, row[f"image_{j}"])
            (z_a, col_a, shape_a), rel, (z_b, col_b, shape_b) = _parse(row[f"caption_{j}"])
            mask_a, mask_b = _mask(arr, col_a), _mask(arr, col_b)
            assert mask_a.sum() > 0 and mask_b.sum() > 0
            # Only the two named colours occur besides the background.
            others = [c for c in COLORS if c not in (col_a, col_b)]
            assert not any(_mask(arr, c).any() for c in others)
            ya, xa = np.argwhere(mask_a).mean(axis=0)
            yb, xb = np.argwhere(mask_b).mean(axis=0)
            gap = 64 * 0.2
            if rel == "left of":
                assert xa + gap < xb
            elif rel == "right of":
                assert xa > xb + gap
            elif rel == "above":
                assert ya + gap < yb
            else:
                assert ya > yb + gap
            if z_a is not None:
                big, small = (mask_a, mask_b) if z_a == "big" else (mask_b, mask_a)
                assert z_b != z_a and _extent(big) > 1.4 * _extent(small)
            for mask, shape in ((mask_a, shape_a), (mask_b, shape_b)):
                _check_shape(mask, shape)


def _extent(mask: np.ndarray) -> int:
    ys, xs = np.nonzero(mask)
    return int(max(xs.max() - xs.min(), ys.max() - ys.min())) + 1


def _check_shape(mask: np.ndarray, shape: str) -> None:
    ys, xs = np.nonzero(mask)
    box = mask[ys.min() : ys.max() + 1, xs.min() : xs.max() + 1]
    fill = box.mean()
    bottom = box[-1].mean()
    if shape == "square":
        assert fill > 0.97
    elif shape == "circle":
        assert 0.7 < fill < 0.86
    elif shape == "triangle":
        assert 0.46 < fill < 0.6 and bottom > 0.8
    elif shape == "diamond":
        assert 0.46 < fill < 0.6 and bottom < 0.3
    else:
        assert shape == "star" and fill < 0.47


def test_variants_cover_every_caption(ds: Path) -> None:
    rows = {f"winoground/{r['id']}": r for r in _rows(ds)}
    sets = read_variants(ds / "variants.jsonl")
    assert [(s.item, s.caption) for s in sets] == [
        (f"winoground/{i}", k) for i in range(N) for k in (0, 1)
    ]
    strategies = set()
    for s in sets:
        original = rows[s.item][f"caption_{s.caption}"]
        assert s.original == original
        texts = [v.text for v in s.variants]
        assert 3 <= len(texts) <= 6
        assert len(set(texts)) == len(texts) and original not in texts
        for v in s.variants:
            assert v.strategy.startswith("template/")
            assert v.params == {"template": v.strategy.removeprefix("template/")}
            strategies.add(v.strategy)
            # A paraphrase names the same two noun phrases.
            (z_a, col_a, shape_a), _, (z_b, col_b, shape_b) = _parse(original)
            for z, col, shape in ((z_a, col_a, shape_a), (z_b, col_b, shape_b)):
                assert f"{z + ' ' if z else ''}{col} {shape}" in v.text
    assert "template/converse" in strategies and len(strategies) >= 5


def test_converse_variant_swaps_the_relation(ds: Path) -> None:
    converse = {"left of": "right of", "right of": "left of", "above": "below", "below": "above"}
    seen = 0
    for s in read_variants(ds / "variants.jsonl"):
        for v in s.variants:
            if v.strategy == "template/converse":
                a, rel, b = _parse(s.original or "")
                a2, rel2, b2 = _parse(v.text.replace(" is ", " ", 1))
                assert (a2, rel2, b2) == (b, converse[rel], a)
                seen += 1
    assert seen > 0


def test_tag_file(ds: Path) -> None:
    tags = json.loads((ds / "new_tag_assignments.json").read_text())
    assert list(tags) == [str(i) for i in range(N)]
    counts = Counter(len(v) for v in tags.values())
    assert 0.2 * N <= counts[0] <= 0.6 * N
    assert counts[1] > counts[2] + counts[3]
    assert set(counts) <= {0, 1, 2, 3}
    used = set()
    for v in tags.values():
        assert len(set(v)) == len(v) and set(v) <= set(WWH_TAGS)
        used.update(v)
    assert used == set(WWH_TAGS)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"n_items": 0}, "n_items"),
        ({"n_items": -3}, "n_items"),
        ({"n_items": 2.0}, "n_items"),
        ({"n_items": True}, "n_items"),
        ({"seed": -1}, "seed"),
        ({"seed": "0"}, "seed"),
        ({"image_size": 15}, "image_size"),
        ({"image_size": 5000}, "image_size"),
        ({"image_size": "64"}, "image_size"),
    ],
)
def test_bad_arguments(tmp_path: Path, kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        make_synthetic_winoground(tmp_path / "d", **kwargs)
    assert not (tmp_path / "d").exists()


def test_refuses_foreign_directory(tmp_path: Path) -> None:
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match="out"):
        make_synthetic_winoground(foreign, n_items=2)
    assert [p.name for p in foreign.iterdir()] == ["notes.txt"]

    # A real Winoground copy has the same file names but no synthetic provenance.
    real = tmp_path / "real"
    (real / "images").mkdir(parents=True)
    (real / "examples.jsonl").write_text("{}\n")
    (real / "images" / "ex_0_img_0.png").write_bytes(b"not ours")
    with pytest.raises(ValueError, match="out"):
        make_synthetic_winoground(real, n_items=2)
    assert (real / "examples.jsonl").read_text() == "{}\n"

    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(ValueError, match="out"):
        make_synthetic_winoground(a_file, n_items=2)


def test_extra_file_in_own_output_is_refused(tmp_path: Path) -> None:
    out = make_synthetic_winoground(tmp_path / "d", n_items=2)
    (out / "images" / "photo.jpg").write_bytes(b"x")
    with pytest.raises(ValueError, match="out"):
        make_synthetic_winoground(out, n_items=2)


def test_regenerates_own_output(tmp_path: Path) -> None:
    out = tmp_path / "d"
    make_synthetic_winoground(out, n_items=6, seed=0)
    make_synthetic_winoground(out, n_items=2, seed=0)
    fresh = make_synthetic_winoground(tmp_path / "fresh", n_items=2, seed=0)
    assert _hashes(out) == _hashes(fresh)
    (tmp_path / "e").mkdir()
    assert make_synthetic_winoground(tmp_path / "e", n_items=1).is_dir()


def test_scenes_record_every_images_layout(ds: Path) -> None:
    scenes = read_scenes(ds)
    rows = _rows(ds)
    assert [(s["item"], s["caption"]) for s in scenes] == [(i, j) for i in range(N) for j in (0, 1)]
    for scene in scenes:
        row = rows[scene["item"]]
        assert scene["image"] == row[f"image_{scene['caption']}"]
        assert scene["text"] == row[f"caption_{scene['caption']}"]
        (z_a, col_a, shape_a), rel, (z_b, col_b, shape_b) = _parse(scene["text"])
        assert scene["relation"] == rel and (scene["width"], scene["height"]) == (64, 64)
        subject, obj = scene["objects"]
        assert (subject["role"], obj["role"]) == ("subject", "object")
        assert (subject["size"], subject["color"], subject["shape"]) == (z_a, col_a, shape_a)
        assert (obj["size"], obj["color"], obj["shape"]) == (z_b, col_b, shape_b)
        arr = _pixels(ds, scene["image"])
        assert tuple(arr[0, 0]) == tuple(scene["background"])  # shapes never reach a corner
        for o in scene["objects"]:
            ys, xs = np.nonzero(_mask(arr, o["color"]))
            x1, y1, x2, y2 = o["box"]
            # Every pixel of the shape's colour lies in its box (one pixel of rasterisation slack).
            assert x1 - 1 <= xs.min() and xs.max() <= x2 + 1, (o, xs.min(), xs.max())
            assert y1 - 1 <= ys.min() and ys.max() <= y2 + 1, (o, ys.min(), ys.max())
            # ... and the box is tight: its extent is the drawn extent within two pixels.
            assert abs((x2 - x1) - (xs.max() - xs.min())) <= 2 and abs((y2 - y1) - (ys.max() - ys.min())) <= 2
            cx, cy = o["center"]
            assert x1 < cx < x2 and y1 < cy < y2 and o["radius"] > 0


def test_train_split_draws_another_stream(tmp_path: Path, ds: Path) -> None:
    train = make_synthetic_winoground(tmp_path / "t", n_items=N, seed=0, split="train")
    assert synthetic_provenance(train) == {"n_items": N, "seed": 0, "image_size": 64, "split": "train"}
    assert synthetic_provenance(ds)["split"] == "eval"
    assert [r["caption_0"] for r in _rows(train)] != [r["caption_0"] for r in _rows(ds)]
    again = make_synthetic_winoground(tmp_path / "t2", n_items=N, seed=0, split="train")
    assert _hashes(again) == _hashes(train)
    with pytest.raises(ValueError, match="split"):
        make_synthetic_winoground(tmp_path / "x", n_items=2, split="test")


def test_datasets_without_scenes_or_provenance(tmp_path: Path) -> None:
    out = make_synthetic_winoground(tmp_path / "old", n_items=2)
    (out / "scenes.jsonl").unlink()  # as an older vlprobe wrote it
    prov = out / "PROVENANCE.txt"
    lines = prov.read_text().splitlines()
    prov.write_text("\n".join([lines[0], lines[1].replace(" split=eval", ""), *lines[2:]]) + "\n")
    assert synthetic_provenance(out)["split"] == "eval"
    with pytest.raises(ValueError, match=r"scenes\.jsonl"):
        read_scenes(out)
    assert make_synthetic_winoground(out, n_items=2).is_dir()  # still ours: regenerated in place
    assert (out / "scenes.jsonl").is_file()
    assert synthetic_provenance(tmp_path) is None
    with pytest.raises(ValueError, match="not a synthetic dataset"):
        read_scenes(tmp_path)


def test_grammar_words_cover_captions_and_variants(ds: Path) -> None:
    words = set(grammar_words())
    texts = [t for r in _rows(ds) for t in (r["caption_0"], r["caption_1"])]
    texts += [v.text for s in read_variants(ds / "variants.jsonl") for v in s.variants]
    for text in texts:
        assert set(text.replace(",", " ").split()) <= words, text
