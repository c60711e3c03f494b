"""``probe regions extract``: images -> detector -> resumable region file; SIGKILL resume, shards
and merge, refusals, bad input, ``probe regions info``, and LXMERT/UNITER reading the result."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from typer.testing import CliRunner

from vlprobe.cli import app
from vlprobe.data.synthetic import make_synthetic_winoground
from vlprobe.extract.regions.store import RegionStore

HERE = Path(__file__).resolve().parent
N_ITEMS, N_IMAGES, BATCH = 5, 10, 4  # batches of 4, 4, 2: the grid has a short last batch


@pytest.fixture(scope="module")
def detector_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny random detector in the hub checkpoint's format (24 objects, 12 attributes, 2048-d),
    written by ``probe fixtures model frcnn``."""
    out = tmp_path_factory.mktemp("det") / "tiny-frcnn"
    r = CliRunner().invoke(app, ["fixtures", "model", "frcnn", "--out", str(out), "--seed", "0"])
    assert r.exit_code == 0, r.output
    return out


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_synthetic_winoground(tmp_path_factory.mktemp("rdata") / "data", n_items=N_ITEMS, seed=3)


def _probe(*args: Any, kill: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``probe ARGS`` in a fresh process (one thread), optionally SIGKILLed at ``kill``."""
    cmd = [sys.executable, str(HERE / "region_run.py"), *([f"--kill-at={kill}"] if kill else []),
           "--", *map(str, args)]
    env = {**__import__("os").environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    if check and kill is None:
        assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def _extract_args(detector_dir: Path, data_dir: Path, out: Path, *extra: Any) -> list[Any]:
    return ["regions", "extract", "--detector", detector_dir, "--dataset", "winoground", "--data-dir", data_dir,
            "--out", out, "--batch-size", BATCH, "--device", "cpu", "--quiet", *extra]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, detector_dir: Path, data_dir: Path) -> Path:
    """The uninterrupted run (a fresh process, like every resumed run below); read-only."""
    out = tmp_path_factory.mktemp("ref") / "regions.h5"
    _probe(*_extract_args(detector_dir, data_dir, out))
    out.chmod(0o444)
    return out


def _datasets(path: Path) -> dict[str, Any]:
    """Every dataset of an HDF5 file as (dtype, shape, raw bytes); strings as their list."""
    out: dict[str, Any] = {}

    def visit(name: str, obj: Any) -> None:
        if isinstance(obj, h5py.Dataset):
            data = obj[()]
            out[name] = (obj.dtype.str, obj.shape, [x for x in data] if data.dtype.kind == "O" else data.tobytes())

    with h5py.File(path, "r") as f:
        f.visititems(visit)
    return out


def _meta(path: Path) -> dict[str, Any]:
    with h5py.File(path, "r") as f:
        return json.loads(f.attrs["meta"])


@pytest.fixture
def cli() -> Callable[..., Any]:
    runner = CliRunner()
    return lambda *args: runner.invoke(app, [str(a) for a in args])


# -- the result -----------------------------------------------------------------------------------


def test_schema_and_metadata(reference: Path, data_dir: Path, h5_tree: Callable[[Path], dict]) -> None:
    with RegionStore(reference) as store:
        r, d = store.max_boxes, store.feature_dim
        assert store.complete and store.schema_version == 2
    assert h5_tree(reference) == {
        "image_id": ("str", (N_IMAGES,)),
        "features": ("float32", (N_IMAGES, r, d)),
        "boxes": ("float32", (N_IMAGES, r, 4)),
        "num_boxes": ("int32", (N_IMAGES,)),
        "image_w": ("int32", (N_IMAGES,)),
        "image_h": ("int32", (N_IMAGES,)),
        "extra": "group",
        "extra/objects_id": ("int64", (N_IMAGES, r)),
        "extra/objects_conf": ("float32", (N_IMAGES, r)),
        "extra/attrs_id": ("int64", (N_IMAGES, r)),
        "extra/attrs_conf": ("float32", (N_IMAGES, r)),
        "image_sha256": ("str", (N_IMAGES,)),  # fixed-length ASCII (S64)
        "done": ("bool", (N_IMAGES,)),
    }
    meta = _meta(reference)
    assert meta["source_format"] == "detector"
    assert meta["detector"]["fingerprint"].startswith("sha256:") and meta["detector"]["spec"].endswith("tiny-frcnn")
    assert meta["preset"]["name"] == "lxmert-36" and meta["preset"]["min_boxes"] == meta["preset"]["max_boxes"] == 36
    assert meta["colour_order"] == "bgr"
    assert meta["images"]["source"] == "dataset" and meta["images"]["dataset"] == "winoground"
    assert meta["images"]["n_images"] == N_IMAGES and meta["shard"] == "0/1"
    assert {"created", "versions", "git_revision", "device", "batch_size"} <= set(meta["run"])
    assert meta["run"]["batch_size"] == BATCH


def test_ids_are_the_benchmark_image_names_and_boxes_are_normalised(reference: Path, data_dir: Path) -> None:
    from vlprobe.data.loading import load_dataset

    names = [img.name for img in load_dataset("winoground", data_dir, options={"tags": False}).images()]
    with RegionStore(reference) as store:
        assert list(store.image_ids) == names
        store.require(names, "the dataset's")
        batch = store.get(names)
        assert (store.image_w == 64).all() and (store.image_h == 64).all()
        assert batch.mask.sum(1).tolist() == [36] * N_IMAGES
        real = batch.boxes[batch.mask]
        assert real.min() >= 0 and real.max() <= 1 and (real[:, 2:] >= real[:, :2]).all()
        sha = [x.decode() for x in h5py.File(reference, "r")["image_sha256"][()]]
    from vlprobe.provenance import sha256_file

    assert sha == [sha256_file(data_dir / "images" / f"{n}.png") for n in names]


def test_image_folder_source_sorted_and_normalised(tmp_path: Path, detector_dir: Path, data_dir: Path, cli) -> None:
    folder = tmp_path / "imgs"
    folder.mkdir()
    for p in sorted((data_dir / "images").glob("*.png"))[:3]:
        shutil.copy(p, folder / p.name.upper().replace(".PNG", ".png"))
    (folder / "notes.txt").write_text("not an image")
    (folder / ".hidden.png").write_bytes(b"")
    out = tmp_path / "f.h5"
    r = cli("regions", "extract", "--detector", detector_dir, "--images", folder, "--out", out, "--quiet")
    assert r.exit_code == 0, r.output
    with RegionStore(out) as store:
        assert list(store.image_ids) == sorted(p.stem for p in folder.glob("[!.]*.png"))
        assert _meta(out)["images"] == {**_meta(out)["images"], "source": "folder", "folder": str(folder.resolve())}


def test_sugarcrepe_images_are_extracted_once(tmp_path: Path, detector_dir: Path, sugarcrepe_dir: Path, cli) -> None:
    from PIL import Image

    from vlprobe.data.loading import load_dataset
    from vlprobe.extract.regions.sources import dataset_images

    opts = {"subsets": "replace_obj,replace_att", "limit": 40}
    refs = load_dataset("sugarcrepe", sugarcrepe_dir, options=opts).images()
    names = list(dict.fromkeys(r.name for r in refs))
    assert len(names) < len(refs), "this selection should repeat an image"
    image_dir = tmp_path / "coco"
    image_dir.mkdir()
    for i, name in enumerate(names):
        Image.new("RGB", (40 + i, 32), (i * 5 % 255, 80, 120)).save(image_dir / name)
    listed = dataset_images("sugarcrepe", sugarcrepe_dir, {**opts, "image_dir": image_dir})
    out = tmp_path / "sc.h5"
    r = cli("regions", "extract", "--detector", detector_dir, "--dataset", "sugarcrepe", "--data-dir", sugarcrepe_dir,
            "--image-dir", image_dir, "--subsets", opts["subsets"], "--limit", opts["limit"], "--out", out, "--quiet")
    assert r.exit_code == 0, r.output
    with RegionStore(out) as store:
        assert list(store.image_ids) == list(listed.names) == [n.rsplit(".", 1)[0] for n in names]
        store.require([ref.name for ref in refs], "the dataset's")
    # Without --image-dir SugarCrepe has no pixels: one line saying which flag gives them.
    r = cli("regions", "extract", "--detector", detector_dir, "--dataset", "sugarcrepe", "--data-dir", sugarcrepe_dir,
            "--limit", 2, "--out", tmp_path / "none.h5", "--quiet")
    assert r.exit_code == 2 and "--image-dir" in r.stderr and not (tmp_path / "none.h5").exists()


# -- resume -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kill", ["write:2", "done:1", "complete"])
def test_sigkill_then_resume_ends_identical(
    kill: str, reference: Path, detector_dir: Path, data_dir: Path, tmp_path: Path, cli,
) -> None:
    out = tmp_path / "killed.h5"
    proc = _probe(*_extract_args(detector_dir, data_dir, out), kill=kill)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    expect_done = {"write:2": BATCH, "done:1": BATCH, "complete": N_IMAGES}[kill]
    with pytest.raises(ValueError, match="incomplete"):
        RegionStore(out)
    with RegionStore(out, allow_incomplete=True) as store:
        assert not store.complete and int(store.done.sum()) == expect_done
    assert not list(tmp_path.glob(".*vlprobe-tmp"))
    r = cli(*_extract_args(detector_dir, data_dir, out)[:-1])  # not --quiet: says it resumes
    assert r.exit_code == 0, r.output
    assert "resuming" in r.stderr or kill == "complete"
    assert f"({N_IMAGES - expect_done if kill != 'complete' else 0} computed this run" in r.stdout
    # Same batch grid and one thread as the reference run: every batch is computed in the same
    # company, so the datasets are byte-identical (the meta attribute differs in timestamps only).
    assert _datasets(out) == _datasets(reference)
    with RegionStore(out) as store:
        assert store.complete


def test_rerun_of_a_complete_file_computes_nothing(reference: Path, detector_dir: Path, data_dir: Path, tmp_path: Path, cli) -> None:
    out = shutil.copy(reference, tmp_path / "again.h5")
    Path(out).chmod(0o644)
    before = Path(out).read_bytes()
    r = cli(*_extract_args(detector_dir, data_dir, out))
    assert r.exit_code == 0 and "(0 computed this run" in r.stdout
    assert Path(out).read_bytes() == before


def _other_detector(tmp_path: Path) -> Path:
    from vlprobe.fixtures.frcnn import write_tiny_frcnn

    return write_tiny_frcnn(tmp_path / "other-frcnn", seed=1)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (["--min-score", "0.5"], "preset.min_score"),
        (["--boxes", "10:36"], "preset.min_boxes"),
        (["--preset", "hf-frcnn"], "preset."),
        (["--dtype", "float16"], "dtype"),
        (["--shard", "0/2"], "shard: file has '0/1'"),
        ("detector", "detector fingerprint"),
        ("images", "n_images"),
    ],
)
def test_resume_with_other_settings_is_refused(
    change: Any, field: str, reference: Path, detector_dir: Path, data_dir: Path, tmp_path: Path, cli,
    one_error_line: Callable[..., str],
) -> None:
    out = Path(shutil.copy(reference, tmp_path / "r.h5"))
    out.chmod(0o644)
    before = out.read_bytes()
    args = _extract_args(detector_dir, data_dir, out)
    if change == "detector":
        args[3] = _other_detector(tmp_path)
    elif change == "images":
        args[7] = make_synthetic_winoground(tmp_path / "other", n_items=N_ITEMS + 1, seed=3)
    else:
        args += change
    line = one_error_line(cli(*args), "other settings", field)
    assert "use another --out" in line
    assert out.read_bytes() == before


def test_changed_image_after_extraction_is_refused(reference: Path, detector_dir: Path, data_dir: Path, tmp_path: Path, cli, one_error_line) -> None:
    data = Path(shutil.copytree(data_dir, tmp_path / "data"))
    out = tmp_path / "r.h5"
    assert cli(*_extract_args(detector_dir, data, out)).exit_code == 0
    img = sorted((data / "images").glob("*.png"))[0]
    from PIL import Image

    Image.new("RGB", (64, 64), (1, 2, 3)).save(img)
    # The dataset fingerprint changes too, but images are compared by content per row.
    one_error_line(cli(*_extract_args(detector_dir, data, out)), img.name, "changed since it was extracted")


# -- shards ------------------------------------------------------------------------------------------


def test_shards_merged_equal_one_run(reference: Path, detector_dir: Path, data_dir: Path, tmp_path: Path, cli) -> None:
    shards = []
    for k in range(3):
        out = tmp_path / f"s{k}.h5"
        assert cli(*_extract_args(detector_dir, data_dir, out, "--shard", f"{k}/3")).exit_code == 0
        shards.append(out)
    blocks = []
    for k, p in enumerate(shards):
        meta = _meta(p)
        assert meta["shard"] == f"{k}/3" and meta["images"]["n_images"] == N_IMAGES
        blocks.append((meta["row_start"], meta["row_stop"]))
    assert blocks == [(0, 3), (3, 6), (6, 10)]
    merged = tmp_path / "merged.h5"
    r = cli("regions", "merge", shards[2], shards[0], shards[1], "--out", merged)
    assert r.exit_code == 0, r.output
    assert _meta(merged)["shard"] == "0/1" and _meta(merged)["merged_from"] == ["s0.h5", "s1.h5", "s2.h5"]
    a, e = _datasets(merged), _datasets(reference)
    assert a.keys() == e.keys()
    with h5py.File(merged, "r") as fa, h5py.File(reference, "r") as fe:
        for name in e:
            if fe[name].dtype.kind == "f":
                # Shards cut the batch grid elsewhere (batches 3+1 instead of 4): a batch's
                # floats may round differently with other company; the detector guarantees
                # batch results equal single-image results to float tolerance only.
                np.testing.assert_allclose(fa[name][()], fe[name][()], rtol=0, atol=1e-4, err_msg=name)
            else:
                np.testing.assert_array_equal(fa[name][()], fe[name][()], err_msg=name)
    with RegionStore(merged) as store:
        assert store.complete and len(store) == N_IMAGES


def test_shard_auto_under_torchrun_variables(
    reference: Path, detector_dir: Path, data_dir: Path, tmp_path: Path, cli, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--shard auto`` as two torchrun processes see it: <stem>.shard-K-of-2.h5, merged by
    ``probe regions merge --out`` alone; each shard's job ids kept in the merged file."""
    out = tmp_path / "all.h5"
    for k in range(2):
        with monkeypatch.context() as m:
            for name, value in {"RANK": k, "WORLD_SIZE": 2, "LOCAL_RANK": k, "LOCAL_WORLD_SIZE": 2,
                                "TORCHELASTIC_RUN_ID": "r1"}.items():
                m.setenv(name, str(value))
            r = cli(*_extract_args(detector_dir, data_dir, out, "--shard", "auto"))
        assert r.exit_code == 0, r.output
        meta = _meta(tmp_path / f"all.shard-{k}-of-2.h5")
        assert meta["shard"] == f"{k}/2"
        assert meta["job_ids"] == [{"shard": f"{k}/2", "source": f"torchrun rank {k} of 2 (RANK, WORLD_SIZE)",
                                    "RANK": str(k), "TORCHELASTIC_RUN_ID": "r1"}]
    assert not out.exists()
    r = cli("regions", "merge", "--out", out)
    assert r.exit_code == 0, r.output
    assert [j["shard"] for j in _meta(out)["job_ids"]] == ["0/2", "1/2"]
    with h5py.File(out, "r") as fa, h5py.File(reference, "r") as fe:
        np.testing.assert_array_equal(fa["image_id"][()], fe["image_id"][()])
        # other batch company than the reference's (see test_shards_merged_equal_one_run)
        np.testing.assert_allclose(fa["features"][()], fe["features"][()], rtol=0, atol=1e-4)


def test_merge_refusals(reference: Path, detector_dir: Path, data_dir: Path, tmp_path: Path, cli, one_error_line) -> None:
    s = [tmp_path / f"s{k}.h5" for k in range(2)]
    for k, p in enumerate(s):
        assert cli(*_extract_args(detector_dir, data_dir, p, "--shard", f"{k}/2")).exit_code == 0
    one_error_line(cli("regions", "merge", s[0], "--out", tmp_path / "m.h5"), "missing shard(s) 1/2")
    one_error_line(cli("regions", "merge", s[0], s[0], "--out", tmp_path / "m.h5"), "both shard 0/2")
    one_error_line(cli("regions", "merge", s[0], s[1], "--out", reference), "already exists")
    other = tmp_path / "o1.h5"
    assert cli(*_extract_args(detector_dir, data_dir, other, "--shard", "1/2", "--min-score", "0.3")).exit_code == 0
    one_error_line(cli("regions", "merge", s[0], other, "--out", tmp_path / "m.h5"), "preset.min_score")
    imported = tmp_path / "random.h5"
    from vlprobe.fixtures.regions import random_regions

    random_regions(imported, ["a", "b"], n_boxes=2, dim=4)
    one_error_line(cli("regions", "merge", s[0], imported, "--out", tmp_path / "m.h5"), "not made by `probe regions extract`")
    killed = tmp_path / "k.h5"
    _probe(*_extract_args(detector_dir, data_dir, killed, "--shard", "1/2"), kill="complete")
    one_error_line(cli("regions", "merge", s[0], killed, "--out", tmp_path / "m.h5"), "incomplete")
    assert not (tmp_path / "m.h5").exists()


# -- bad input ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--boxes", "0"], "min_boxes must be a positive integer, got 0"),
        (["--boxes", "50:10"], "min_boxes must be <= max_boxes (10), got 50"),
        (["--boxes", "x"], "boxes: expected a count"),
        (["--boxes", "1:2:3"], "boxes: expected a count"),
        (["--min-score", "2"], "min_score must be a number in [0, 1]"),
        (["--min-score", "nan"], "min_score must be a finite number, got nan"),  # refused as the option is read
        (["--batch-size", "0"], "batch_size"),
        (["--preset", "lxmert36"], "preset"),
        (["--shard", "3/2"], "shard"),
    ],
)
def test_bad_options_are_one_line(extra: list[str], needle: str, detector_dir: Path, data_dir: Path, tmp_path: Path, cli, one_error_line) -> None:
    out = tmp_path / "r.h5"
    one_error_line(cli(*_extract_args(detector_dir, data_dir, out, *extra)), needle)
    assert not out.exists()


def test_images_or_dataset_exactly_one(detector_dir: Path, data_dir: Path, tmp_path: Path, cli, one_error_line) -> None:
    out = tmp_path / "r.h5"
    one_error_line(cli("regions", "extract", "--detector", detector_dir, "--out", out), "--images DIR", "neither")
    one_error_line(cli("regions", "extract", "--detector", detector_dir, "--out", out, "--images", data_dir / "images",
                       "--dataset", "winoground"), "both")
    empty = tmp_path / "empty"
    empty.mkdir()
    one_error_line(cli("regions", "extract", "--detector", detector_dir, "--out", out, "--images", empty), "no image files")
    one_error_line(cli("regions", "extract", "--detector", detector_dir, "--out", out, "--images", tmp_path / "nope"),
                   "is not a folder")
    assert not out.exists()


def _folder_with(tmp_path: Path, data_dir: Path, bad_name: str, bad_bytes: bytes | None) -> Path:
    folder = tmp_path / "imgs"
    folder.mkdir()
    for p in sorted((data_dir / "images").glob("*.png"))[:6]:
        shutil.copy(p, folder / p.name)
    if bad_bytes is not None:
        (folder / bad_name).write_bytes(bad_bytes)
    return folder


@pytest.mark.parametrize(
    ("kind", "needle"),
    [("empty", "empty file (0 bytes)"), ("corrupt", "not a readable image"), ("truncated", "not a readable image"),
     ("sliver", "resizes to 112x0 pixels")],
)
def test_a_bad_image_stops_the_run_keeping_earlier_batches(
    kind: str, needle: str, detector_dir: Path, data_dir: Path, tmp_path: Path, cli, one_error_line,
) -> None:
    from PIL import Image

    good = sorted((data_dir / "images").glob("*.png"))[0].read_bytes()
    sliver = tmp_path / "sliver.png"  # too thin for the backbone once resized
    Image.new("RGB", (2000, 4), (200, 10, 10)).save(sliver)
    data = {"empty": b"", "corrupt": b"\x89PNG not really", "truncated": good[: len(good) // 2],
            "sliver": sliver.read_bytes()}[kind]
    folder = _folder_with(tmp_path, data_dir, "zz_bad.png", data)  # sorts last: the second batch
    out = tmp_path / "r.h5"
    args = ["regions", "extract", "--detector", detector_dir, "--images", folder, "--out", out, "--batch-size", 4, "--quiet"]
    one_error_line(cli(*args), "zz_bad.png", needle)
    with RegionStore(out, allow_incomplete=True) as store:
        assert int(store.done.sum()) == 4 and not store.complete
    (folder / "zz_bad.png").write_bytes(good)  # fixed: the rerun resumes and finishes
    r = cli(*args)
    assert r.exit_code == 0 and "(3 computed this run" in r.stdout


def test_missing_dataset_image_is_named(detector_dir: Path, data_dir: Path, tmp_path: Path, cli, one_error_line) -> None:
    data = Path(shutil.copytree(data_dir, tmp_path / "data"))
    (data / "images" / "ex_2_img_1.png").unlink()
    one_error_line(cli(*_extract_args(detector_dir, data, tmp_path / "r.h5")), "ex_2_img_1")


def test_detector_folder_without_config(data_dir: Path, tmp_path: Path, cli, one_error_line) -> None:
    det = tmp_path / "det"
    det.mkdir()
    (det / "pytorch_model.bin").write_bytes(b"")
    one_error_line(cli(*_extract_args(det, data_dir, tmp_path / "r.h5")), "config.yaml")
    assert not (tmp_path / "r.h5").exists()


def test_unwritable_out(detector_dir: Path, data_dir: Path, tmp_path: Path, cli, one_error_line) -> None:
    plain = tmp_path / "plain"
    plain.write_text("x")
    one_error_line(cli(*_extract_args(detector_dir, data_dir, plain / "r.h5")), "out: cannot create")
    if __import__("os").geteuid() == 0:
        locked = Path("/sys")  # root writes into any mode-0555 folder; sysfs refuses even root
    else:
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o555)
    one_error_line(cli(*_extract_args(detector_dir, data_dir, locked / "r.h5")), "out: cannot create")
    one_error_line(cli(*_extract_args(detector_dir, data_dir, tmp_path / "r.txt")), "out: expected an HDF5 file name")


@pytest.mark.parametrize("kind", ["text", "hdf5", "regions"])
def test_an_existing_file_vlprobe_did_not_write_is_never_replaced(
    kind: str, detector_dir: Path, data_dir: Path, tmp_path: Path, cli, one_error_line,
) -> None:
    out = tmp_path / "mine.h5"
    if kind == "text":
        out.write_text("my notes")
    elif kind == "hdf5":
        with h5py.File(out, "w") as f:
            f["x"] = [1, 2, 3]
    else:
        from vlprobe.fixtures.regions import random_regions

        random_regions(out, ["a"], n_boxes=2, dim=4)
    before = out.read_bytes()
    one_error_line(cli(*_extract_args(detector_dir, data_dir, out)), "refusing to")
    assert out.read_bytes() == before


# -- progress, info, readers -----------------------------------------------------------------------


def test_progress_on_stderr_and_quiet(detector_dir: Path, data_dir: Path, tmp_path: Path, cli) -> None:
    r = cli(*_extract_args(detector_dir, data_dir, tmp_path / "a.h5")[:-1])
    assert r.exit_code == 0 and "img/s" in r.stderr and f"{N_IMAGES}/{N_IMAGES}" in r.stderr
    r = cli(*_extract_args(detector_dir, data_dir, tmp_path / "b.h5"))
    assert r.exit_code == 0 and r.stderr == ""


def test_info_text_json_and_labels(reference: Path, tmp_path: Path, cli, one_error_line) -> None:
    from vlprobe.fixtures.frcnn import write_tiny_labels

    labels = write_tiny_labels(tmp_path / "vg-vocab")  # bottom-up-attention's files, not the checkpoint's
    r = cli("regions", "info", reference)
    assert r.exit_code == 0, r.output
    assert "complete" in r.stdout and "detector" in r.stdout and "colour order bgr" in r.stdout
    assert "min_boxes=36" in r.stdout and "min 36 / mean 36.0 / max 36" in r.stdout
    info = json.loads(cli("regions", "info", reference, "--json").stdout)
    assert info["complete"] and info["done"] == info["images"] == N_IMAGES
    r = cli("regions", "info", reference, "--labels", labels, "--top", 2)
    assert r.exit_code == 0, r.output
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("ex_")]
    assert len(lines) == N_IMAGES and all(ln.count(",") == 1 for ln in lines)
    from vlprobe.extract.regions.detector import load_labels

    objects, attributes = load_labels(str(labels))
    dets = json.loads(cli("regions", "info", reference, "--labels", labels, "--json").stdout)["detections"]
    first = dets["ex_0_img_0"]
    assert len(first) == 5 and [d["object_conf"] for d in first] == sorted((d["object_conf"] for d in first), reverse=True)
    with h5py.File(reference, "r") as f:
        best = int(np.argmax(f["extra/objects_conf"][0]))
        assert first[0]["object"] == objects[int(f["extra/objects_id"][0, best])]
        assert first[0]["attribute"] == attributes[int(f["extra/attrs_id"][0, best])]
    for d in first:
        named = d["attribute_conf"] > 0.1  # as the bottom-up-attention demo names attributes
        assert d["name"] == (f"{d['attribute']} {d['object']}" if named else d["object"])
    assert lines[0].startswith(f"ex_0_img_0: {first[0]['name']} {first[0]['object_conf']:.2f}, ")
    few = tmp_path / "few"
    few.mkdir()
    (few / "objects_vocab.txt").write_text("thing\n")
    (few / "attributes_vocab.txt").write_text("red\n")
    one_error_line(cli("regions", "info", reference, "--labels", few), "labels:", "outside the 1 object names")


def test_incomplete_file_is_refused_by_probe_extract(
    detector_dir: Path, data_dir: Path, tmp_path: Path, tiny_lxmert: Path, cli, one_error_line,
) -> None:
    out = tmp_path / "k.h5"
    _probe(*_extract_args(detector_dir, data_dir, out), kill="done:1")
    info = json.loads(cli("regions", "info", out, "--json").stdout)
    assert not info["complete"] and info["done"] == BATCH
    assert "INCOMPLETE: 4 of 10" in cli("regions", "info", out).stdout
    one_error_line(
        cli("extract", "--model", "lxmert", "--checkpoint", tiny_lxmert, "--regions", out, "--data-dir", data_dir,
            "--out", tmp_path / "lx.h5", "--device", "cpu", "--quiet"),
        "incomplete", "rerun",
    )


def test_too_few_boxes_names_the_image(detector_dir: Path, data_dir: Path, tmp_path: Path, cli, one_error_line) -> None:
    # The tiny detector proposes 48 boxes per image: 60 cannot be met, and no image borrows another's.
    out = tmp_path / "r.h5"
    one_error_line(cli(*_extract_args(detector_dir, data_dir, out, "--boxes", "60")), "ex_0_img_0.png", "needs at least 60")
    with RegionStore(out, allow_incomplete=True) as store:
        assert int(store.done.sum()) == 0


def test_detector_with_wrong_shapes(detector_dir: Path, data_dir: Path, tmp_path: Path, cli, one_error_line) -> None:
    import torch

    det = Path(shutil.copytree(detector_dir, tmp_path / "det"))
    state = torch.load(det / "pytorch_model.bin", weights_only=True)
    name = next(k for k, v in state.items() if v.ndim == 4)
    state[name] = torch.zeros(*state[name].shape[:-1], state[name].shape[-1] + 1)
    torch.save(state, det / "pytorch_model.bin")
    one_error_line(cli(*_extract_args(det, data_dir, tmp_path / "r.h5")), name)
    assert not (tmp_path / "r.h5").exists()


@pytest.mark.parametrize("model", ["lxmert", "uniter"])
def test_cross_encoders_read_the_result(
    model: str, reference: Path, data_dir: Path, tiny_lxmert: Path, tiny_uniter: Path, tmp_path: Path, cli,
) -> None:
    from vlprobe.extract.cache.reader import ActivationCache

    checkpoint = tiny_lxmert if model == "lxmert" else tiny_uniter / "uniter-base.pt"
    out = tmp_path / f"{model}.h5"
    r = cli("extract", "--model", model, "--checkpoint", checkpoint, "--regions", reference, "--dataset", "winoground",
            "--data-dir", data_dir, "--pair-plan", "item", "--device", "cpu", "--out", out, "--quiet")
    assert r.exit_code == 0, r.output
    with RegionStore(reference) as store:
        fingerprint = store.fingerprint
    with ActivationCache(out) as cache:
        assert cache.complete and cache.header.regions_fingerprint == fingerprint
        matrix, done = cache.scores()
        assert np.isfinite(matrix[done]).all() and done.sum() == 2 * N_IMAGES


def test_more_shards_than_images(detector_dir: Path, data_dir: Path, tmp_path: Path, cli) -> None:
    out = tmp_path / "empty.h5"
    r = cli(*_extract_args(detector_dir, data_dir, out, "--shard", f"0/{N_IMAGES + 2}"))  # block [0, 0)
    assert r.exit_code == 0 and ": 0 images (0 computed" in r.stdout
    with RegionStore(out) as store:
        assert store.complete and len(store) == 0
