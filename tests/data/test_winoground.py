"""Winoground loader on the synthetic dataset: items, order, tags, fingerprint, errors, hub path."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest

from vlprobe.data.items import Dataset
from vlprobe.data.synthetic import make_synthetic_winoground
from vlprobe.data.tags import TAG_FILE_NAME, WWH_TAGS_SHA256, load_tag_file, shipped_tag_file
from vlprobe.data.winoground import HUB_ID, WINOGROUND_FIELDS, load_winoground
from vlprobe.provenance import sha256_file

N = 8
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(autouse=True)
def _offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("VLPROBE_CACHE", str(tmp_path / "vlprobe-cache"))

    import urllib.request

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("network access attempted")

    monkeypatch.setattr(urllib.request, "urlopen", refuse)


@pytest.fixture(scope="module")
def synth(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Read-only synthetic dataset (tests that change files use ``copy``)."""
    return make_synthetic_winoground(tmp_path_factory.mktemp("wino") / "syn", n_items=N, seed=0)


@pytest.fixture(scope="module")
def rows(synth: Path) -> list[dict]:
    lines = (synth / "examples.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


@pytest.fixture
def copy(synth: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(synth, tmp_path / "copy"))


def write_rows(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def test_items_ids_and_names(synth: Path, rows: list[dict]) -> None:
    ds = load_winoground(synth)
    assert isinstance(ds, Dataset)
    assert ds.name == "winoground"
    assert len(ds) == N
    assert ds.source == str(synth.resolve())
    for i, (item, row) in enumerate(zip(ds, rows, strict=True)):
        assert item.id == f"winoground/{i}"
        assert [im.id for im in item.images] == [f"winoground/{i}/i0", f"winoground/{i}/i1"]
        assert [im.name for im in item.images] == [f"ex_{i}_img_0", f"ex_{i}_img_1"]
        assert [im.path for im in item.images] == [
            synth / "images" / f"ex_{i}_img_{j}.png" for j in (0, 1)
        ]
        assert [t.id for t in item.texts] == [f"winoground/{i}/c0", f"winoground/{i}/c1"]
        assert [t.text for t in item.texts] == [row["caption_0"], row["caption_1"]]
        assert all(t.parent is None and t.strategy is None for t in item.texts)
        assert item.variants == ()
        assert item.meta == {"winoground_id": i, "num_main_preds": row["num_main_preds"]}
    assert ds.item("winoground/3").id == "winoground/3"
    with pytest.raises(ValueError, match="item id 'winoground/99' is not in dataset 'winoground'"):
        ds.item("winoground/99")


def test_canonical_order(synth: Path) -> None:
    ds = load_winoground(synth)
    assert [im.id for im in ds.images()] == [f"winoground/{i}/i{j}" for i in range(N) for j in (0, 1)]
    assert [t.id for t in ds.texts()] == [f"winoground/{i}/c{k}" for i in range(N) for k in (0, 1)]
    # image 2i+k matches caption 2i+k
    for k, (im, txt) in enumerate(zip(ds.images(), ds.texts(), strict=True)):
        assert im.id.rsplit("/", 1)[0] == txt.id.rsplit("/", 1)[0]
        assert im.id[-1] == txt.id[-1] == str(k % 2)


def test_images_load_as_rgb(synth: Path) -> None:
    img = load_winoground(synth).images()[0].load()
    assert img.mode == "RGB" and img.size == (64, 64)


def test_tag_families(synth: Path, rows: list[dict]) -> None:
    ds = load_winoground(synth)
    wwh = load_tag_file(synth / TAG_FILE_NAME)
    for item, row in zip(ds, rows, strict=True):
        assert set(item.tags) == {"tag", "secondary_tag", "collapsed_tag", "num_main_preds", "wwh"}
        assert item.tags["tag"] == (row["tag"],)
        assert item.tags["collapsed_tag"] == (row["collapsed_tag"],)
        assert item.tags["num_main_preds"] == (str(row["num_main_preds"]),)
        expected_secondary = tuple(s.strip() for s in row["secondary_tag"].split(",") if s.strip())
        assert item.tags["secondary_tag"] == expected_secondary
        assert item.tags["wwh"] == wwh.tags[row["id"]]
    # the synthetic set has an empty secondary tag and a comma-separated one
    assert () in [it.tags["secondary_tag"] for it in ds]
    assert ds.item("winoground/1").tags["secondary_tag"] == ("Symbolic", "Pragmatics")
    assert () in [it.tags["wwh"] for it in ds]  # NoTag
    assert ds.extra_fingerprints == {"tags": sha256_file(synth / TAG_FILE_NAME)}


def test_fingerprint_stable_and_content_keyed(synth: Path, copy: Path) -> None:
    fp = load_winoground(synth).fingerprint
    assert len(fp) == 64
    assert load_winoground(synth).fingerprint == fp
    assert load_winoground(copy).fingerprint == fp  # independent of location
    assert load_winoground(synth, tags=False).fingerprint == fp  # tags are side inputs
    img = copy / "images" / "ex_5_img_1.png"
    data = bytearray(img.read_bytes())
    data[-20] ^= 0xFF
    img.write_bytes(bytes(data))
    assert load_winoground(copy).fingerprint != fp


def test_fingerprint_changes_with_a_caption(copy: Path, rows: list[dict], synth: Path) -> None:
    changed = [dict(r) for r in rows]
    changed[0]["caption_0"] += "!"
    write_rows(copy / "examples.jsonl", changed)
    assert load_winoground(copy).fingerprint != load_winoground(synth).fingerprint


def test_data_subfolder_layout(synth: Path, tmp_path: Path) -> None:
    outer = tmp_path / "hub-like"
    shutil.copytree(synth, outer / "data")
    ds = load_winoground(outer)
    direct = load_winoground(synth)
    assert [it.id for it in ds] == [it.id for it in direct]
    assert ds.fingerprint == direct.fingerprint
    assert [it.tags for it in ds] == [it.tags for it in direct]  # data/new_tag_assignments.json
    # a tag file beside data/ (not inside) is found too
    shutil.move(outer / "data" / TAG_FILE_NAME, outer / TAG_FILE_NAME)
    assert [it.tags for it in load_winoground(outer)] == [it.tags for it in direct]


def test_jpg_images_are_found(copy: Path) -> None:
    (copy / "images" / "ex_2_img_0.png").rename(copy / "images" / "ex_2_img_0.jpg")
    ds = load_winoground(copy)
    assert ds.item("winoground/2").images[0].path == copy / "images" / "ex_2_img_0.jpg"


# -- errors --------------------------------------------------------------------------------------


def test_missing_dir(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"^data_dir: no such directory"):
        load_winoground(tmp_path / "nope")


def test_no_examples(tmp_path: Path) -> None:
    (tmp_path / "images").mkdir()
    with pytest.raises(ValueError, match=r"^data_dir: .* holds no examples.jsonl"):
        load_winoground(tmp_path)


def test_empty_examples(copy: Path) -> None:
    (copy / "examples.jsonl").write_text("\n\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"^data_dir: .*examples.jsonl holds no examples"):
        load_winoground(copy)


def test_missing_image_is_named(copy: Path) -> None:
    (copy / "images" / "ex_3_img_1.png").unlink()
    with pytest.raises(ValueError, match=r"^data_dir: image 'ex_3_img_1' not found in .*images"):
        load_winoground(copy)


def test_images_zip_not_unpacked(copy: Path) -> None:
    with zipfile.ZipFile(copy / "images.zip", "w") as zf:
        for p in sorted((copy / "images").iterdir()):
            zf.write(p, f"images/{p.name}")
    shutil.rmtree(copy / "images")
    with pytest.raises(ValueError, match=r"^data_dir: unpack .*images.zip into .*images first"):
        load_winoground(copy)
    (copy / "images.zip").unlink()
    with pytest.raises(ValueError, match=r"has examples.jsonl but no images/ folder"):
        load_winoground(copy)


@pytest.mark.parametrize("field", list(WINOGROUND_FIELDS))
def test_a_line_lacking_a_field(copy: Path, rows: list[dict], field: str) -> None:
    bad = [dict(r) for r in rows]
    del bad[2][field]
    write_rows(copy / "examples.jsonl", bad)
    with pytest.raises(ValueError, match=rf"^data_dir: examples.jsonl line 3 lacks Winoground field '{field}'$"):
        load_winoground(copy)


@pytest.mark.parametrize(
    ("field", "value", "want", "got"),
    [
        ("id", "2", "int", "str"),
        ("id", 2.0, "int", "float"),
        ("id", True, "int", "bool"),
        ("num_main_preds", False, "int", "bool"),
        ("caption_0", 5, "str", "int"),
        ("secondary_tag", None, "str", "NoneType"),
        ("tag", ["Noun"], "str", "list"),
    ],
)
def test_wrong_type(copy: Path, rows: list[dict], field: str, value: object, want: str, got: str) -> None:
    bad = [dict(r) for r in rows]
    bad[4][field] = value
    write_rows(copy / "examples.jsonl", bad)
    with pytest.raises(
        ValueError, match=rf"^data_dir: examples.jsonl line 5 field '{field}' must be {want}, got {got}$"
    ):
        load_winoground(copy)


def test_bad_json_and_non_object_lines(copy: Path, rows: list[dict]) -> None:
    text = "".join(json.dumps(r) + "\n" for r in rows[:2]) + "{oops\n"
    (copy / "examples.jsonl").write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=r"^data_dir: examples.jsonl line 3 is not valid JSON"):
        load_winoground(copy)
    (copy / "examples.jsonl").write_text("[1, 2]\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"^data_dir: examples.jsonl line 1 is not a JSON object"):
        load_winoground(copy)


def test_repeated_id(copy: Path, rows: list[dict]) -> None:
    bad = [dict(r) for r in rows]
    bad[6]["id"] = 1
    write_rows(copy / "examples.jsonl", bad)
    with pytest.raises(ValueError, match=r"^data_dir: examples.jsonl line 7 repeats id 1$"):
        load_winoground(copy)


# -- WWH tags ------------------------------------------------------------------------------------


def test_real_tag_file_joins_by_id(wwh_tags: Path, synth: Path) -> None:
    real = load_tag_file(wwh_tags)
    ds = load_winoground(synth, tags=wwh_tags)
    for i, item in enumerate(ds):
        assert item.tags["wwh"] == real.tags[i]
    assert ds.extra_fingerprints == {"tags": WWH_TAGS_SHA256}
    assert load_winoground(synth, tags=str(wwh_tags)).extra_fingerprints == {"tags": WWH_TAGS_SHA256}


def test_tags_false_gives_no_wwh_family(synth: Path) -> None:
    ds = load_winoground(synth, tags=False)
    assert all("wwh" not in item.tags for item in ds)
    assert ds.extra_fingerprints == {}


def test_auto_mode_picks_the_data_dir_file(synth: Path) -> None:
    auto = load_winoground(synth)
    explicit = load_winoground(synth, tags=synth / TAG_FILE_NAME)
    assert [it.tags for it in auto] == [it.tags for it in explicit]
    assert auto.extra_fingerprints == {"tags": sha256_file(synth / TAG_FILE_NAME)}
    assert load_winoground(synth, tags=True).extra_fingerprints == auto.extra_fingerprints


def test_auto_mode_without_a_file_takes_the_shipped_tags_offline(
    copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No tag file beside the dataset, offline (the fixture refuses any download): the tag file
    vlprobe ships, joined by id, and nothing said."""
    (copy / TAG_FILE_NAME).unlink()
    ds = load_winoground(copy)
    shipped = load_tag_file(shipped_tag_file())
    assert [it.tags["wwh"] for it in ds] == [shipped.tags[i] for i in range(N)]
    assert ds.extra_fingerprints == {"tags": WWH_TAGS_SHA256}
    assert capsys.readouterr().err == ""
    assert load_winoground(copy, tags=True).extra_fingerprints == {"tags": WWH_TAGS_SHA256}


def test_ids_beyond_winogrounds_warn_and_get_no_shipped_tags(
    copy: Path, rows: list[dict], capsys: pytest.CaptureFixture[str]
) -> None:
    """A Winoground-format dataset that is not Winoground (ids past 399): the shipped tags would be
    other items', so none are joined, with a warning; tags=True refuses."""
    (copy / TAG_FILE_NAME).unlink()
    write_rows(copy / "examples.jsonl", [{**r, "id": r["id"] + 1000} for r in rows])
    ds = load_winoground(copy)
    assert all("wwh" not in item.tags for item in ds)
    err = capsys.readouterr().err
    assert err.startswith("warning: no 'Why is Winoground Hard?' tags") and "--tags PATH" in err, err
    with pytest.raises(ValueError, match=r"^tags: ids \[1000, 1001, 1002\] are not in the shipped tag file"):
        load_winoground(copy, tags=True)


def test_id_missing_from_the_tag_file(synth: Path, tmp_path: Path) -> None:
    tags = json.loads((synth / TAG_FILE_NAME).read_text(encoding="utf-8"))
    del tags["5"]
    p = tmp_path / "partial.json"
    p.write_text(json.dumps(tags), encoding="utf-8")
    with pytest.raises(ValueError, match=r"^tags: Winoground id 5 is missing from .*partial.json"):
        load_winoground(synth, tags=p)


def test_missing_tag_file(synth: Path, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"^tags: no such file"):
        load_winoground(synth, tags=tmp_path / "nope.json")


# -- hub path ------------------------------------------------------------------------------------


def snapshot_zip(synth: Path, root: Path) -> Path:
    """A fake hub snapshot like facebook/winoground's: data/examples.jsonl + data/images.zip."""
    snap = root / "snapshots" / COMMIT
    (snap / "data").mkdir(parents=True)
    shutil.copyfile(synth / "examples.jsonl", snap / "data" / "examples.jsonl")
    with zipfile.ZipFile(snap / "data" / "images.zip", "w") as zf:
        zf.writestr("images/", "")
        zf.writestr("images/README.txt", "not an image")
        for p in sorted((synth / "images").iterdir()):
            zf.write(p, f"images/{p.name}")
    (snap / "README.md").write_text("fake", encoding="utf-8")
    return snap


def snapshot_parquet(synth: Path, rows: list[dict], root: Path) -> Path:
    """A fake snapshot holding parquet shards with Winoground's columns (images as structs)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    snap = root / "snapshots" / COMMIT
    (snap / "data").mkdir(parents=True)
    image = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    schema = pa.schema([
        ("id", pa.int64()), ("image_0", image), ("image_1", image),
        ("caption_0", pa.string()), ("caption_1", pa.string()), ("tag", pa.string()),
        ("secondary_tag", pa.string()), ("num_main_preds", pa.int64()),
        ("collapsed_tag", pa.string()),
    ])
    records = []
    for r in reversed(rows):  # shard order must not matter
        rec = {k: r[k] for k in WINOGROUND_FIELDS if not k.startswith("image_")}
        for j in (0, 1):
            data = (synth / "images" / f"{r[f'image_{j}']}.png").read_bytes()
            rec[f"image_{j}"] = {"bytes": data, "path": None}
        records.append(rec)
    half = len(records) // 2
    pq.write_table(pa.Table.from_pylist(records[:half], schema=schema),
                   snap / "data" / "test-00000-of-00002.parquet")
    pq.write_table(pa.Table.from_pylist(records[half:], schema=schema),
                   snap / "data" / "test-00001-of-00002.parquet")
    return snap


def assert_same_dataset(a: Dataset, b: Dataset) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.id == y.id
        assert x.texts == y.texts
        assert x.tags == y.tags
        assert x.meta == y.meta
        assert [im.id for im in x.images] == [im.id for im in y.images]
        assert [im.name for im in x.images] == [im.name for im in y.images]
        assert [im.path.read_bytes() for im in x.images] == [im.path.read_bytes() for im in y.images]


@pytest.fixture
def fake_hub(monkeypatch: pytest.MonkeyPatch) -> dict:
    import huggingface_hub

    state: dict = {"calls": []}

    def fake_snapshot_download(repo_id: str, **kwargs: object) -> str:
        state["calls"].append((repo_id, kwargs))
        if "error" in state:
            raise state["error"]
        return str(state["snap"])

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    return state


@pytest.mark.parametrize("kind", ["zip", "parquet"])
def test_hub_snapshot_loads_like_the_local_copy(
    kind: str, synth: Path, rows: list[dict], tmp_path: Path, fake_hub: dict
) -> None:
    fake_hub["snap"] = (
        snapshot_zip(synth, tmp_path / "hub") if kind == "zip"
        else snapshot_parquet(synth, rows, tmp_path / "hub")
    )
    tags = synth / TAG_FILE_NAME
    ds = load_winoground(tags=tags, revision="main", token="tok")
    assert_same_dataset(ds, load_winoground(synth, tags=tags))
    assert ds.source == f"hub:{HUB_ID}@{COMMIT}"
    local = tmp_path / "vlprobe-cache" / "winoground" / COMMIT
    assert (local / "examples.jsonl").is_file()
    assert sorted(p.name for p in (local / "images").iterdir()) == sorted(
        p.name for p in (synth / "images").iterdir()
    )
    assert ds.images()[0].path == local / "images" / "ex_0_img_0.png"
    assert not [p for p in local.parent.iterdir() if p.name.startswith(".")]  # no temp dirs left
    repo_id, kwargs = fake_hub["calls"][0]
    assert repo_id == HUB_ID
    assert kwargs["repo_type"] == "dataset"
    assert kwargs["revision"] == "main" and kwargs["token"] == "tok"
    if kind == "zip":  # the same bytes as the local copy, so the same fingerprint
        assert ds.fingerprint == load_winoground(synth).fingerprint

    # a second load reuses the unpacked copy
    shutil.rmtree(fake_hub["snap"] / "data")
    again = load_winoground(tags=tags)
    assert_same_dataset(again, ds)
    assert again.fingerprint == ds.fingerprint


def test_hub_snapshot_without_data(tmp_path: Path, fake_hub: dict) -> None:
    snap = tmp_path / "snapshots" / COMMIT
    (snap / "data").mkdir(parents=True)
    fake_hub["snap"] = snap
    with pytest.raises(ValueError, match=r"^dataset: facebook/winoground snapshot .* has neither"):
        load_winoground(tags=False)
    assert not (tmp_path / "vlprobe-cache" / "winoground" / COMMIT).exists()
    assert list((tmp_path / "vlprobe-cache" / "winoground").iterdir()) == []


def test_hub_offline_says_use_data_dir(fake_hub: dict) -> None:
    from huggingface_hub.errors import LocalEntryNotFoundError

    fake_hub["error"] = LocalEntryNotFoundError("not cached")
    with pytest.raises(ValueError) as exc:
        load_winoground(tags=False)
    msg = str(exc.value)
    assert msg.startswith("dataset: facebook/winoground is not in the local hub cache")
    assert "--data-dir" in msg and "HF_TOKEN" in msg


def test_hub_gated_says_accept_the_licence(fake_hub: dict) -> None:
    from huggingface_hub.errors import GatedRepoError

    err = GatedRepoError.__new__(GatedRepoError)
    Exception.__init__(err, "gated")
    fake_hub["error"] = err
    with pytest.raises(ValueError, match=r"^dataset: no access to gated facebook/winoground; accept"):
        load_winoground(tags=False)


def test_wwh_masks_are_the_papers_sets_and_the_corrected_ones() -> None:
    from vlprobe.data.tags import wwh_masks

    # Id 313 is untagged in the file but missing from the paper code's 171-id NoTag list.
    masks = wwh_masks([313, 5, 7, 9], [[], [], ["Non Minimal"], ["Visually Difficult"]])
    assert masks["wwh=NoTag"].tolist() == [False, True, False, False]
    assert masks["wwh=Easier"].tolist() == [False, True, True, False]
    assert masks["wwh=Harder"].tolist() == [True, False, False, True]
    assert masks["wwh=NoTag-corrected"].tolist() == [True, True, False, False]
    assert masks["wwh=Easier-corrected"].tolist() == [True, True, True, False]
    assert masks["wwh=Harder-corrected"].tolist() == [False, False, False, True]
