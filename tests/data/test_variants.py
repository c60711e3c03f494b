"""The caption-variants file: round trip, attach_variants, validation errors with file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vlprobe.data.synthetic import make_synthetic_winoground
from vlprobe.data.variants import (
    Variant,
    VariantSet,
    attach_variants,
    read_variants,
    write_variants,
)
from vlprobe.data.winoground import load_winoground
from vlprobe.io.ownership import OUTPUTS_LIST
from vlprobe.provenance import sha256_file


@pytest.fixture(scope="module")
def synth(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_synthetic_winoground(tmp_path_factory.mktemp("var") / "syn", n_items=4, seed=1)


@pytest.fixture(scope="module")
def dataset(synth: Path):
    return load_winoground(synth, tags=False)


SETS = [
    VariantSet(
        "winoground/1", 1,
        (Variant("v one", "lexical/synonym", {"p": 0.5, "seed": 3}), Variant("v two", "rule/passive")),
        original=None,
    ),
    VariantSet("winoground/0", 0, (Variant("ünïcode “quotes”", "x"),), original="orig"),
    VariantSet("winoground/0", 1, ()),
]


def test_round_trip(tmp_path: Path) -> None:
    path = write_variants(tmp_path / "sub" / "v.jsonl", SETS)
    assert path == tmp_path / "sub" / "v.jsonl"
    back = read_variants(path)
    assert back == SETS
    assert back[0].variants[0].params == {"p": 0.5, "seed": 3}
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 3
    first = json.loads(lines[0])
    assert list(first) == ["item", "caption", "variants"]  # no "original" when None
    assert "params" not in first["variants"][1]  # empty params are left out
    assert list(json.loads(lines[1])) == ["item", "caption", "original", "variants"]
    assert "“quotes”" in lines[1]  # written as UTF-8, not escaped
    # beside it only the folder's list of the files vlprobe wrote (no temporary file)
    assert sorted(p.name for p in tmp_path.joinpath("sub").iterdir()) == [OUTPUTS_LIST, "v.jsonl"]


def test_synthetic_file_round_trips(synth: Path, tmp_path: Path) -> None:
    sets = read_variants(synth / "variants.jsonl")
    assert len(sets) == 8
    write_variants(tmp_path / "again.jsonl", sets)
    assert (tmp_path / "again.jsonl").read_bytes() == (synth / "variants.jsonl").read_bytes()


def test_blank_lines_are_skipped(tmp_path: Path) -> None:
    p = tmp_path / "v.jsonl"
    p.write_text('\n{"item": "winoground/0", "caption": 0, "variants": []}\n\n', encoding="utf-8")
    assert read_variants(p) == [VariantSet("winoground/0", 0, ())]


def test_attach_variants(dataset, tmp_path: Path) -> None:
    c = {(it.id, k): it.texts[k].text for it in dataset for k in (0, 1)}
    lines = [  # caption 1 listed before caption 0 of the same item
        {"item": "winoground/2", "caption": 1, "original": c["winoground/2", 1], "variants": [
            {"text": "two one a", "strategy": "s/a"}, {"text": "two one b", "strategy": "s/b"}]},
        {"item": "winoground/0", "caption": 1, "variants": [{"text": "zero one a", "strategy": "s/a"}]},
        {"item": "winoground/2", "caption": 0, "variants": [
            {"text": "two zero a", "strategy": "s/c", "params": {"k": 1}}]},
        {"item": "winoground/0", "caption": 0, "variants": []},
    ]
    path = tmp_path / "v.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    out = attach_variants(dataset, path)

    assert out.fingerprint == dataset.fingerprint  # the dataset itself is unchanged
    assert out.extra_fingerprints == {"variants": sha256_file(path)}
    assert [it.id for it in out] == [it.id for it in dataset]
    item2 = out.item("winoground/2")
    assert [t.id for t in item2.texts] == [
        "winoground/2/c0", "winoground/2/c1",
        "winoground/2/c0/v0", "winoground/2/c1/v0", "winoground/2/c1/v1",
    ]
    assert [t.text for t in item2.variants] == ["two zero a", "two one a", "two one b"]
    assert [t.parent for t in item2.variants] == ["winoground/2/c0", "winoground/2/c1", "winoground/2/c1"]
    assert [t.strategy for t in item2.variants] == ["s/c", "s/a", "s/b"]
    assert all(t.is_variant for t in item2.variants)
    assert item2.captions == dataset.item("winoground/2").texts
    assert [t.id for t in out.item("winoground/0").variants] == ["winoground/0/c1/v0"]
    assert out.item("winoground/1").texts == dataset.item("winoground/1").texts
    # canonical text order: every original first, then every variant (item order, caption order)
    assert [t.id for t in out.texts()] == [t.id for t in dataset.texts()] + [
        "winoground/0/c1/v0", "winoground/2/c0/v0", "winoground/2/c1/v0", "winoground/2/c1/v1",
    ]
    assert out.images() == dataset.images()


def test_attach_keeps_other_extra_fingerprints(synth: Path) -> None:
    ds = load_winoground(synth)  # with the synthetic tag file
    out = attach_variants(ds, synth / "variants.jsonl")
    assert out.extra_fingerprints == {
        "tags": ds.extra_fingerprints["tags"],
        "variants": sha256_file(synth / "variants.jsonl"),
    }
    assert len(out.texts()) == 8 + sum(len(vs.variants) for vs in read_variants(synth / "variants.jsonl"))


def write_lines(tmp_path: Path, *lines: str) -> Path:
    p = tmp_path / "bad.jsonl"
    p.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return p


GOOD = '{"item": "winoground/0", "caption": 0, "variants": [{"text": "t", "strategy": "s"}]}'


@pytest.mark.parametrize(
    ("line", "pattern"),
    [
        ("{nope", r"line 2: not valid JSON"),
        ('["item"]', r"line 2: expected a JSON object, got list"),
        ('{"caption": 0, "variants": []}', r"line 2: 'item' must be a namespaced item id string, got None"),
        ('{"item": "", "caption": 0, "variants": []}', r"line 2: 'item' must be"),
        ('{"item": 3, "caption": 0, "variants": []}', r"line 2: 'item' must be"),
        ('{"item": "winoground/1", "variants": []}', r"line 2: 'caption' must be an integer >= 0 \(a caption index\), got None"),
        ('{"item": "winoground/1", "caption": -1, "variants": []}', r"line 2: 'caption' must be .*got -1"),
        ('{"item": "winoground/1", "caption": true, "variants": []}', r"line 2: 'caption' must be .*got True"),
        ('{"item": "winoground/1", "caption": "0", "variants": []}', r"line 2: 'caption' must be .*got '0'"),
        ('{"item": "winoground/1", "caption": 1.0, "variants": []}', r"line 2: 'caption' must be .*got 1.0"),
        ('{"item": "winoground/1", "caption": 0, "original": 5, "variants": []}', r"line 2: 'original' must be a string"),
        ('{"item": "winoground/1", "caption": 0}', r"line 2: 'variants' must be a list, got NoneType"),
        ('{"item": "winoground/1", "caption": 0, "variants": ["x"]}', r"line 2: variants\[0\] must be an object"),
        ('{"item": "winoground/1", "caption": 0, "variants": [{"text": "a", "strategy": "s"}, {"text": "  ", "strategy": "s"}]}',
         r"line 2: variants\[1\]\.text must be a non-empty string"),
        ('{"item": "winoground/1", "caption": 0, "variants": [{"strategy": "s"}]}', r"line 2: variants\[0\]\.text"),
        ('{"item": "winoground/1", "caption": 0, "variants": [{"text": "a"}]}',
         r"line 2: variants\[0\]\.strategy must be a non-empty string"),
        ('{"item": "winoground/1", "caption": 0, "variants": [{"text": "a", "strategy": ""}]}', r"line 2: variants\[0\]\.strategy"),
        ('{"item": "winoground/1", "caption": 0, "variants": [{"text": "a", "strategy": "s", "params": []}]}',
         r"line 2: variants\[0\]\.params must be an object"),
        (GOOD, r"line 2: item 'winoground/0' caption 0 appears twice"),
    ],
)
def test_read_errors_name_file_line_and_field(tmp_path: Path, line: str, pattern: str) -> None:
    path = write_lines(tmp_path, GOOD, line)
    with pytest.raises(ValueError, match=r"^variants file bad\.jsonl " + pattern):
        read_variants(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"^variants: no such file"):
        read_variants(tmp_path / "nope.jsonl")


@pytest.mark.parametrize(
    ("line", "pattern"),
    [
        ('{"item": "sugarcrepe/swap_obj/9", "caption": 0, "variants": []}',
         r"^variants file bad\.jsonl line 2: 'item' 'sugarcrepe/swap_obj/9' is not an item of dataset 'winoground' "
         r"\(its ids look like 'winoground/0'\); was the file made for another dataset\?"),
        ('{"item": "0", "caption": 0, "variants": []}', r"^variants file bad\.jsonl line 2: 'item' '0' is not an item of dataset"),
        ('{"item": "winoground/1", "caption": 2, "variants": []}',
         r"^variants file bad\.jsonl line 2: 'caption' 2 is out of range: item 'winoground/1' has 2 captions"),
        ('{"item": "winoground/1", "caption": 0, "original": "something else", "variants": []}',
         r"^variants file bad\.jsonl line 2: 'original' of item 'winoground/1' caption 0 does not match"),
    ],
)
def test_attach_errors_name_file_and_line(dataset, tmp_path: Path, line: str, pattern: str) -> None:
    path = write_lines(tmp_path, GOOD, line)
    with pytest.raises(ValueError, match=pattern):
        attach_variants(dataset, path)


def test_a_file_covering_more_items_than_the_selection_uses_the_matching_part(dataset, tmp_path: Path) -> None:
    # Made for more of the dataset than was loaded (as with --subsets or --limit): the lines of the
    # items not loaded are left out; the loaded ones get their variants.
    path = write_lines(tmp_path, GOOD, '{"item": "winoground/999", "caption": 0, "variants": [{"text": "x", "strategy": "s"}]}')
    out = attach_variants(dataset, path)
    assert [t.id for t in out.items[0].texts if t.parent] == ["winoground/0/c0/v0"]
    assert all(t.parent is None for it in out.items[1:] for t in it.texts)
    # None of the file's items loaded: an error that points at the selection.
    only_outside = write_lines(tmp_path, '{"item": "winoground/999", "caption": 0, "variants": []}')
    with pytest.raises(ValueError, match=r"^variants: none of the 1 captions in bad\.jsonl belongs to the \d+ loaded "
                                         r"winoground item\(s\).*check the selection \(--subsets, --limit, --items\)"):
        attach_variants(dataset, only_outside)


def test_sugarcrepe_selection_with_a_larger_variants_file(sugarcrepe_dir: Path, tmp_path: Path) -> None:
    """``probe extract --subsets/--limit`` with a file made for more items (load_dataset is extract's path)."""
    from vlprobe.data.loading import load_dataset
    from vlprobe.data.variants import Variant, VariantSet, write_variants

    big = load_dataset("sugarcrepe", sugarcrepe_dir, options={"subsets": "swap_obj,add_att", "limit": 3})
    sets = [VariantSet(it.id, 0, (Variant(f"v of {it.id}", "s"),), original=it.captions[0].text) for it in big.items]
    path = write_variants(tmp_path / "v.jsonl", sets)
    small = load_dataset("sugarcrepe", sugarcrepe_dir, variants=path, options={"subsets": "add_att", "limit": 2})
    assert [it.id for it in small.items] == [it.id for it in big.items if "/add_att/" in it.id][:2]
    assert [t.text for it in small.items for t in it.texts if t.parent] == [f"v of {it.id}" for it in small.items]
    # An item list selects too (the JSONL of {"item": id} that probe refine writes).
    keep = tmp_path / "keep.jsonl"
    keep.write_text(f'{{"item": "{big.items[1].id}"}}\n', encoding="utf-8")
    one = load_dataset("sugarcrepe", sugarcrepe_dir, variants=path, items=keep, options={"subsets": "swap_obj"})
    assert [it.id for it in one.items] == [big.items[1].id]
    keep.write_text('{"item": "sugarcrepe/swap_obj/999999"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"^items: 1 listed item\(s\) are not in the loaded sugarcrepe data"):
        load_dataset("sugarcrepe", sugarcrepe_dir, items=keep, options={"subsets": "swap_obj"})
