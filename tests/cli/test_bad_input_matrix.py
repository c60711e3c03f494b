"""Every command against bad input: one row per (command, case).

Each row runs the real CLI and asserts exit code 2, exactly one stderr line starting ``error:``
that names the offending thing, no traceback, and, for a writing command, that nothing in the
row's folder was created, changed or removed (inputs stay untouched too).

Writing commands meet four output cases each: ``--out`` under a regular file, ``--out`` in a
read-only folder, ``--out`` on an existing file vlprobe did not write (byte-identical afterwards),
and ``--out`` on a folder where a file is expected (or the reverse). Beside them, the damaged
inputs the commands read: images, checkpoints, region files, score files, option values.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
import shutil
import struct
import subprocess
import sys
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from vlprobe.cli import app
from vlprobe.data.benchmark_fixtures import write_benchmark_fixture
from vlprobe.fixtures.frcnn import write_tiny_frcnn
from vlprobe.fixtures.uniter import write_tiny_uniter
from vlprobe.runs.score_files import write_item_scores

Args = Callable[["Kit", Path], list[Any]]


@dataclass(frozen=True)
class Kit:
    """Valid inputs every row starts from (built once, never changed by a row)."""

    root: Path
    syn: Path
    clip: Path
    cache: Path
    shards: tuple[Path, ...]
    regions: Path
    region_shards: tuple[Path, ...]
    detector: Path
    uniter: Path
    scores_a: Path
    scores_b: Path
    results_csv: Path
    train: Path  # a synthetic training split
    train_regions: Path  # its oracle region features
    wordnet: Path | None
    readonly: Path | None  # a folder nothing can be written into (None: this machine cannot make one)


def _run(*args: Any) -> Any:
    return CliRunner().invoke(app, [str(a) for a in args])


def _sugarcrepe_scores(path: Path, seed: int, first: int = 0) -> Path:
    ids = [f"sugarcrepe/replace_att/{i}" for i in range(first, first + 40)]
    rng = np.random.default_rng(seed)
    return write_item_scores(
        path, [i for i in ids for _ in (0, 1)], [f"{i}/i0" for i in ids for _ in (0, 1)],
        [f"{i}/c{k}" for i in ids for k in (0, 1)], rng.normal(size=2 * len(ids)),
    )


@contextlib.contextmanager
def _readonly_folder(base: Path) -> Iterator[Path | None]:
    """A folder the OS refuses to write into: chmod for a normal user; for root (whom chmod does
    not stop) a read-only tmpfs; None when neither is possible."""
    folder = base / "readonly"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            yield folder
        finally:
            folder.chmod(0o755)
        return
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(folder)],
                          capture_output=True, check=False)
    if done.returncode != 0:
        yield None
        return
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], capture_output=True, check=False)


@pytest.fixture(scope="module")
def kit(
    tmp_path_factory: pytest.TempPathFactory, synthetic_dir: Path, tiny_clip: Path,
    reference_cache: Path, shard_files: list[Path], wordnet_dict: Path | None,
) -> Iterator[Kit]:
    root = tmp_path_factory.mktemp("matrix-kit")
    regions = root / "regions.h5"
    assert _run("fixtures", "regions", "--data-dir", synthetic_dir, "--out", regions, "--boxes", 3,
                "--dim", 8).exit_code == 0
    detector = write_tiny_frcnn(root / "detector", 0)
    region_shards = []
    for k in range(2):
        out = root / f"regions-{k}-of-2.h5"
        res = _run("regions", "extract", "--detector", detector, "--dataset", "winoground", "--data-dir",
                   synthetic_dir, "--out", out, "--shard", f"{k}/2", "--quiet")
        assert res.exit_code == 0, res.output
        region_shards.append(out)
    results = root / "results"
    assert _run("run", "winoground-scores", "--cache", reference_cache, "--out", results).exit_code == 0
    train, train_regions = root / "train", root / "train-regions.h5"
    assert _run("fixtures", "dataset", "--split", "train", "--n-items", 32, "--out", train).exit_code == 0
    assert _run("fixtures", "regions", "--oracle", "--data-dir", train, "--out", train_regions).exit_code == 0
    with _readonly_folder(root) as readonly:
        yield Kit(
            root=root, syn=synthetic_dir, clip=tiny_clip, cache=reference_cache, shards=tuple(shard_files),
            regions=regions, region_shards=tuple(region_shards), detector=detector,
            uniter=write_tiny_uniter(root / "uniter", 0),
            scores_a=_sugarcrepe_scores(root / "a.scores.jsonl", 0),
            scores_b=_sugarcrepe_scores(root / "b.scores.jsonl", 1),
            results_csv=next((results / "winoground-scores").glob("clip*.csv")), train=train,
            train_regions=train_regions, wordnet=wordnet_dict, readonly=readonly,
        )


# -- the writing commands: how each is called with a given --out ------------------------------


@dataclass(frozen=True)
class Writer:
    command: str
    args: Callable[[Kit, Path], list[Any]]  # (kit, out) -> argv
    out_name: str  # a fitting --out name
    folder_out: bool = False  # --out names a folder
    replay: bool = True  # run twice in test_the_same_command_replaces_its_own_output (False: too long)
    needs: str | None = None  # a resource its successful run needs ("wordnet"); the bad-input rows need none


def _extract(k: Kit, out: Path) -> list[Any]:
    return ["extract", "--model", "clip", "--checkpoint", k.clip, "--dataset", "winoground",
            "--data-dir", k.syn, "--out", out, "--device", "cpu", "--quiet"]


def _mlp(name: str) -> Callable[[Kit, Path], list[Any]]:
    return lambda k, out: ["run", name, "--cache", k.cache, "--out", out, "--epochs", 1, "--seeds", 1,
                           "--width", 8, "--test-size", 2, "--device", "cpu"]


WRITERS: dict[str, Writer] = {w.command: w for w in [
    Writer("extract", _extract, "c.h5"),
    Writer("regions import", lambda k, out: ["regions", "import", k.regions, "--format", "h5", "--out", out], "r.h5"),
    Writer("regions export", lambda k, out: ["regions", "export", k.regions, "--format", "butd-tsv", "--out", out], "r.tsv"),
    Writer("regions export uniter-npz", lambda k, out: ["regions", "export", k.regions, "--format", "uniter-npz",
                                                         "--out", out], "npz", folder_out=True),
    Writer("regions extract", lambda k, out: ["regions", "extract", "--detector", k.detector, "--dataset", "winoground",
                                              "--data-dir", k.syn, "--out", out, "--quiet"], "r.h5"),
    Writer("regions merge", lambda k, out: ["regions", "merge", *k.region_shards, "--out", out], "r.h5"),
    Writer("cache merge", lambda k, out: ["cache", "merge", *k.shards, "--out", out], "m.h5"),
    Writer("augment", lambda k, out: ["augment", "--dataset", "winoground", "--data-dir", k.syn, "--strategies",
                                      "original", "--out", out, "--quiet"], "v.jsonl"),
    *[Writer(f"run {e}", lambda k, out, e=e: ["run", e, "--cache", k.cache, "--out", out], "res", folder_out=True)
      for e in ("winoground-scores", "recall", "separability", "variant-similarity")],
    Writer("run task-adaptation", _mlp("task-adaptation"), "res", folder_out=True),
    Writer("run variant-probe", _mlp("variant-probe"), "res", folder_out=True),
    Writer("eval", lambda k, out: ["eval", "sugarcrepe", "--scores", k.scores_a, "--out", out, "--bootstrap", 10],
           "res", folder_out=True),
    Writer("refine", lambda k, out: ["refine", "--scores-a", k.scores_a, "--scores-b", k.scores_b, "--transform-a",
                                     "sigmoid", "--transform-b", "sigmoid", "--out", out], "keep.jsonl"),
    Writer("plot", lambda k, out: ["plot", k.results_csv, "--out", out], "p.png"),
    Writer("report", lambda k, out: ["report", k.results_csv.parent.parent, "--out", out], "report.html"),
    Writer("report md", lambda k, out: ["report", k.results_csv.parent.parent, "--out", out], "report.md"),
    Writer("collect", lambda k, out: ["collect", k.results_csv.parent.parent, "--out", out], "all.csv"),
    Writer("compare", lambda k, out: ["compare", k.scores_a, k.scores_b, "--out", out, "--bootstrap", 20],
           "res", folder_out=True),
    Writer("fixtures train clip", lambda k, out: ["fixtures", "train", "clip", "--data-dir", k.train, "--out", out,
                                                  "--steps", 1, "--device", "cpu", "--quiet"], "m", folder_out=True),
    Writer("fixtures train lxmert", lambda k, out: ["fixtures", "train", "lxmert", "--data-dir", k.train, "--regions",
                                                    k.train_regions, "--out", out, "--steps", 1, "--device", "cpu",
                                                    "--quiet"], "m", folder_out=True),
    Writer("fixtures regions --oracle", lambda k, out: ["fixtures", "regions", "--oracle", "--data-dir", k.syn,
                                                        "--out", out], "r.h5"),
    Writer("fixtures testbed", lambda k, out: ["fixtures", "testbed", "--out", out, "--train-items", 32, "--eval-items",
                                               4, "--clip-steps", 1, "--lxmert-steps", 1, "--jobs", 1], "tb",
           folder_out=True, replay=False),
    Writer("setup wordnet", lambda k, out: ["setup", "wordnet", "--root", out, *(["--from", k.wordnet] if k.wordnet else [])],
           "nltk", folder_out=True, needs="wordnet"),
    Writer("fixtures dataset", lambda k, out: ["fixtures", "dataset", "--out", out, "--n-items", 2], "d", folder_out=True),
    Writer("fixtures model", lambda k, out: ["fixtures", "model", "clip", "--out", out], "m", folder_out=True),
    Writer("fixtures regions", lambda k, out: ["fixtures", "regions", "--data-dir", k.syn, "--out", out, "--boxes", 3,
                                               "--dim", 8], "r.h5"),
]}


def _foreign_target(w: Writer, out: Path) -> Path:
    """Where an unrelated file is put for ``w``: the output file itself, or (for a results
    folder) the file the run would write into it."""
    # a results folder: its manifest (the CSV's name depends on the run's settings)
    if w.command.startswith("run "):
        return out / w.command.split()[1] / "manifest.json"
    if w.command == "eval":
        return out / "sugarcrepe" / "manifest.json"
    if w.command == "compare":
        return out / "compare" / "manifest.json"
    if w.command == "setup wordnet":
        return out / "corpora" / "wordnet" / "data.noun"
    if w.folder_out:
        return out / "notes.txt"
    return out


# -- the rows -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    command: str
    case: str
    build: Callable[[Kit, Path], tuple[list[Any], tuple[str, ...]]]  # (kit, work) -> (argv, needles)
    writes: bool = True
    progress: bool = False  # the command had begun and printed its stages on stdout


def _out_under_file(w: Writer) -> Row:
    def build(k: Kit, work: Path) -> tuple[list[Any], tuple[str, ...]]:
        (work / "plain-file").write_text("a file, not a folder\n")
        return w.args(k, work / "plain-file" / w.out_name), ("plain-file",)
    return Row(w.command, "out under a regular file", build)


def _out_readonly(w: Writer) -> Row:
    def build(k: Kit, work: Path) -> tuple[list[Any], tuple[str, ...]]:
        if k.readonly is None:
            pytest.skip("this machine cannot make a read-only folder (root without mount)")
        return w.args(k, k.readonly / w.out_name), (str(k.readonly),)
    return Row(w.command, "out in a read-only folder", build)


def _out_foreign(w: Writer) -> Row:
    def build(k: Kit, work: Path) -> tuple[list[Any], tuple[str, ...]]:
        out = work / w.out_name
        target = _foreign_target(w, out)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"my own notes, not vlprobe's\n")
        return w.args(k, out), (str(out),)
    return Row(w.command, "out is a file vlprobe did not write", build)


def _out_wrong_kind(w: Writer) -> Row:
    def build(k: Kit, work: Path) -> tuple[list[Any], tuple[str, ...]]:
        out = work / w.out_name
        if w.folder_out:
            out.write_text("a file where a folder belongs\n")
        else:
            out.mkdir()
            (out / "keep.txt").write_text("mine\n")
        return w.args(k, out), (w.out_name,)
    return Row(w.command, "out is a folder (file expected) or a file (folder expected)", build)


def _zero_byte_image(k: Kit, work: Path) -> tuple[list[Any], tuple[str, ...]]:
    data = _copy_dataset(k, work)
    (data / "images" / "ex_3_img_1.png").write_bytes(b"")
    return _extract_on(k, data, work / "c.h5"), ("ex_3_img_1.png", "empty")


def _truncated_image(k: Kit, work: Path) -> tuple[list[Any], tuple[str, ...]]:
    data = _copy_dataset(k, work)
    img = data / "images" / "ex_3_img_1.png"
    img.write_bytes(img.read_bytes()[:200])
    return _extract_on(k, data, work / "c.h5"), ("ex_3_img_1.png",)


def _corrupt_image(k: Kit, work: Path) -> tuple[list[Any], tuple[str, ...]]:
    data = _copy_dataset(k, work)
    (data / "images" / "ex_3_img_1.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"garbage" * 50)
    return _extract_on(k, data, work / "c.h5"), ("ex_3_img_1.png",)


def _extract_on(k: Kit, data: Path, out: Path) -> list[Any]:
    """Extraction of a damaged copy of the dataset, two texts or images a batch (the damaged image
    comes after complete batches)."""
    return ["extract", "--model", "clip", "--checkpoint", k.clip, "--dataset", "winoground", "--data-dir", data,
            "--out", out, "--device", "cpu", "--quiet", "--batch-size", 2]


def _copy_dataset(k: Kit, work: Path) -> Path:
    data = work / "data"
    shutil.copytree(k.syn, data)
    return data


def _checkpoint_copy(k: Kit, work: Path) -> Path:
    ckpt = work / "ckpt"
    shutil.copytree(k.clip, ckpt)
    return ckpt


def _truncated_safetensors(k: Kit, work: Path) -> tuple[list[Any], tuple[str, ...]]:
    ckpt = _checkpoint_copy(k, work)
    w = ckpt / "model.safetensors"
    w.write_bytes(w.read_bytes()[: w.stat().st_size // 2])
    return ["extract", "--model", "clip", "--checkpoint", ckpt, "--dataset", "winoground", "--data-dir", k.syn,
            "--out", work / "c.h5", "--quiet"], ("model.safetensors", str(ckpt))


class _RunsCode:
    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, ("echo this pickle runs code",))


def _malicious_pickle(k: Kit, work: Path) -> tuple[list[Any], tuple[str, ...]]:
    ckpt = _checkpoint_copy(k, work)
    (ckpt / "model.safetensors").unlink()
    with open(ckpt / "pytorch_model.bin", "wb") as fh:
        pickle.dump({"weight": _RunsCode()}, fh, protocol=2)
    return ["extract", "--model", "clip", "--checkpoint", ckpt, "--dataset", "winoground", "--data-dir", k.syn,
            "--out", work / "c.h5", "--quiet"], ("pytorch_model.bin", "refusing")


def _truncated_uniter_pt(k: Kit, work: Path) -> tuple[list[Any], tuple[str, ...]]:
    ckpt = work / "uniter"
    shutil.copytree(k.uniter, ckpt)
    pt = ckpt / "uniter-base.pt"
    pt.write_bytes(pt.read_bytes()[:1000])
    return ["extract", "--model", "uniter", "--checkpoint", pt, "--model-config", ckpt / "uniter-base.json",
            "--tokenizer", ckpt / "tokenizer", "--dataset", "winoground", "--data-dir", k.syn,
            "--regions", k.regions, "--out", work / "c.h5", "--quiet"], (str(pt),)


def _truncated_npz_regions(k: Kit, work: Path) -> tuple[list[Any], tuple[str, ...]]:
    folder = work / "npz"
    assert _run("regions", "export", k.regions, "--format", "uniter-npz", "--out", folder).exit_code == 0
    one = sorted(folder.glob("*.npz"))[1]
    one.write_bytes(one.read_bytes()[:100])
    return ["regions", "import", folder, "--format", "uniter-npz", "--out", work / "r.h5"], (one.name,)


def _truncated_npz_matrix(k: Kit, work: Path) -> tuple[list[Any], tuple[str, ...]]:
    m = work / "m.npz"
    np.savez(m, scores=np.random.default_rng(0).normal(size=(24, 24)))
    m.write_bytes(m.read_bytes()[:300])
    return ["run", "recall", "--scores", m, "--out", work / "res"], ("m.npz",)


def _tsv_is_a_folder(k: Kit, work: Path) -> tuple[list[Any], tuple[str, ...]]:
    (work / "tsvs").mkdir()
    return ["regions", "import", work / "tsvs", "--format", "butd-tsv", "--out", work / "r.h5"], ("tsvs", "folder")


def _threshold(value: str) -> Callable[[Kit, Path], tuple[list[Any], tuple[str, ...]]]:
    def build(k: Kit, work: Path) -> tuple[list[Any], tuple[str, ...]]:
        scores = work / "valse.scores.jsonl"
        ids = [f"valse/existence/{i}" for i in range(4)]
        write_item_scores(scores, [i for i in ids for _ in (0, 1)], [f"{i}/i0" for i in ids for _ in (0, 1)],
                          [f"{i}/c{j}" for i in ids for j in (0, 1)], np.linspace(0.1, 0.9, 8))
        return ["eval", "valse", "--scores", scores, "--out", work / "res", "--threshold", value], ("threshold", value)
    return build


def _extract_zero_byte_out(k: Kit, work: Path) -> tuple[list[Any], tuple[str, ...]]:
    (work / "c.h5").write_bytes(b"")
    return _extract(k, work / "c.h5"), ("c.h5", "not a vlprobe cache")


# -- the benchmarks' released files, damaged ----------------------------------------------------


def _fixture(work: Path, fmt: str) -> Path:
    return write_benchmark_fixture(work / fmt, fmt, n_items=3, image_size=24)


def _eval_on(benchmark: str, data: Path, out: Path, *extra: Any) -> list[Any]:
    return ["eval", benchmark, "--model", "caption-length", "--data-dir", data, "--out", out, "--bootstrap", 10, *extra]


def _crepe_file(data: Path) -> Path:
    return data / "prod_hard_negatives" / "atom" / "prod_vg_hard_negs_atom_complexity_4.csv"


def _crepe_truncated(k: Kit, work: Path) -> tuple[list[Any], tuple[str, ...]]:
    data = _fixture(work, "crepe")
    csv_file = _crepe_file(data)
    csv_file.write_bytes(csv_file.read_bytes()[:-4])  # cut inside the last row (its height)
    return _eval_on("crepe", data, work / "res", "--subsets", "prod_atom_4"), (csv_file.name, "truncated")


def _crepe_nested(k: Kit, work: Path) -> tuple[list[Any], tuple[str, ...]]:
    data = _fixture(work, "crepe")
    csv_file = _crepe_file(data)
    lines = csv_file.read_text(encoding="utf-8").splitlines(keepends=True)
    head, cell, tail = lines[2].split('"', 2)
    lines[2] = f'{head}"[{cell}]"{tail}'  # [['a', 'b', ...]]: a list of lists
    csv_file.write_text("".join(lines), encoding="utf-8")
    return _eval_on("crepe", data, work / "res", "--subsets", "prod_atom_4"), (
        f"{csv_file.name} row 3", "'hard_negs'", "list of captions")


def _mmvp_without_column(k: Kit, work: Path) -> tuple[list[Any], tuple[str, ...]]:
    data = _fixture(work, "mmvp-vlm")
    questions = data / "Questions.csv"
    rows = [line.split(",", 2) for line in questions.read_text(encoding="utf-8").splitlines()]
    questions.write_text("".join(f"{r[0]},{r[2]}\n" for r in rows), encoding="utf-8")  # the Type column gone
    return _eval_on("mmvp-vlm", data, work / "res"), ("Questions.csv", "column 'Type' is missing")


def _colorswap_without_json(k: Kit, work: Path) -> tuple[list[Any], tuple[str, ...]]:
    data = _fixture(work, "colorswap")
    (data / "test.json").unlink()
    return _eval_on("colorswap", data, work / "res"), ("test.json is missing", "--subsets train")


def _aro_box_outside(k: Kit, work: Path) -> tuple[list[Any], tuple[str, ...]]:
    data = _fixture(work, "aro")
    records_file = data / "visual_genome_relation.json"
    records = json.loads(records_file.read_text(encoding="utf-8"))
    records[1]["bbox_x"] = 5000  # right of the image
    records_file.write_text(json.dumps(records), encoding="utf-8")
    return ["eval", "aro", "--model", "clip", "--checkpoint", k.clip, "--data-dir", data, "--subsets", "vg_relation",
            "--out", work / "res", "--device", "cpu", "--bootstrap", 10, "--quiet"], ("aro/vg_relation/1/i0", "outside")


def _png_header(width: int, height: int) -> bytes:
    """A PNG whose header claims ``width`` x ``height`` pixels (nothing behind it to decode)."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b""))


def _decompression_bomb(k: Kit, work: Path) -> tuple[list[Any], tuple[str, ...]]:
    data = _copy_dataset(k, work)
    (data / "images" / "ex_3_img_1.png").write_bytes(_png_header(20_000, 10_000))  # over twice Pillow's limit
    return _extract_on(k, data, work / "c.h5"), ("ex_3_img_1.png", "200000000 pixels", "MAX_IMAGE_PIXELS")


def _missing(what: str, argv: Callable[[Kit, Path], list[Any]]) -> Callable[[Kit, Path], tuple[list[Any], tuple[str, ...]]]:
    return lambda k, work: (argv(k, work), (what,))


SPECIFIC: list[Row] = [
    # rows already written are kept (test_extract_keeps_the_rows_before_a_bad_image)
    Row("extract", "0-byte image", _zero_byte_image, writes=False),
    Row("extract", "truncated image", _truncated_image, writes=False),
    Row("extract", "corrupt image", _corrupt_image, writes=False),
    Row("extract", "truncated model.safetensors", _truncated_safetensors),
    Row("extract", "malicious pickle in pytorch_model.bin", _malicious_pickle),
    Row("extract", "truncated UNITER .pt", _truncated_uniter_pt),
    Row("extract", "0-byte file at --out", _extract_zero_byte_out),
    Row("extract", "missing checkpoint folder", _missing("no-such-ckpt", lambda k, w: [
        "extract", "--model", "clip", "--checkpoint", w / "no-such-ckpt", "--dataset", "winoground",
        "--data-dir", k.syn, "--out", w / "c.h5"])),
    Row("regions import", "truncated UNITER .npz", _truncated_npz_regions),
    Row("regions import", "butd-tsv given a folder", _tsv_is_a_folder),
    Row("regions import", "missing source", _missing("none.tsv", lambda k, w: [
        "regions", "import", w / "none.tsv", "--format", "butd-tsv", "--out", w / "r.h5"])),
    Row("regions export", "source is not a region file", _missing("notes.h5", lambda k, w: [
        "regions", "export", _text_file(w / "notes.h5"), "--format", "butd-tsv", "--out", w / "r.tsv"])),
    Row("run recall", "truncated .npz score matrix", _truncated_npz_matrix),
    Row("eval", "valse --threshold nan", _threshold("nan")),
    Row("eval", "valse --threshold inf", _threshold("inf")),
    *[Row(f"run {e}", "missing cache", _missing("none.h5", lambda k, w, e=e: ["run", e, "--cache", w / "none.h5",
                                                                         "--out", w / "res"]))
      for e in ("winoground-scores", "recall", "separability", "variant-similarity", "task-adaptation", "variant-probe")],
    *[Row(f"run {e}", "cache is not a cache", _missing("notes.h5", lambda k, w, e=e: [
        "run", e, "--cache", _text_file(w / "notes.h5"), "--out", w / "res"]))
      for e in ("winoground-scores", "recall", "separability", "variant-similarity", "task-adaptation", "variant-probe")],
    Row("cache merge", "a shard is missing", _missing("missing shard", lambda k, w: [
        "cache", "merge", *k.shards[:2], "--out", w / "m.h5"])),
    Row("regions merge", "a shard is missing", _missing("missing", lambda k, w: [
        "regions", "merge", k.region_shards[0], "--out", w / "r.h5"])),
    Row("refine", "missing score file", _missing("none.jsonl", lambda k, w: [
        "refine", "--scores-a", w / "none.jsonl", "--scores-b", k.scores_b, "--out", w / "keep.jsonl"])),
    Row("plot", "csv is not a tidy CSV", _missing("notes.csv", lambda k, w: [
        "plot", _text_file(w / "notes.csv"), "--out", w / "p.png"])),
    Row("augment", "unknown strategy", _missing("no-such-strategy", lambda k, w: [
        "augment", "--dataset", "winoground", "--data-dir", k.syn, "--strategies", "no-such-strategy",
        "--out", w / "v.jsonl"])),
    Row("setup wordnet", "source folder without WordNet", _missing("empty-dict", lambda k, w: [
        "setup", "wordnet", "--root", w / "nltk", "--from", _folder(w / "empty-dict")])),
    Row("fixtures model", "unknown model", _missing("'blip'", lambda k, w: [
        "fixtures", "model", "blip", "--out", w / "m"])),
    # the benchmarks' released files, damaged
    Row("eval crepe", "truncated CSV file", _crepe_truncated),
    Row("eval crepe", "negatives nested one level deeper", _crepe_nested),
    Row("eval mmvp-vlm", "Questions.csv without its Type column", _mmvp_without_column),
    Row("eval colorswap", "folder without test.json", _colorswap_without_json),
    Row("eval aro", "box outside its image", _aro_box_outside),
    Row("extract", "image over twice Pillow's decompression-bomb limit", _decompression_bomb, writes=False),
    # commands that only read
    Row("cache info", "not a cache", _missing("notes.h5", lambda k, w: ["cache", "info", _text_file(w / "notes.h5")])),
    Row("cache info", "a folder given for the cache", _missing("is a folder", lambda k, w: [
        "cache", "info", _folder(w / "c.h5")])),
    Row("regions info", "a cache given for a region file", _missing("not a vlprobe region file", lambda k, w: [
        "regions", "info", k.cache])),
    Row("data info", "folder without the benchmark's files", _missing("expected files", lambda k, w: [
        "data", "info", "sugarcrepe", "--data-dir", _folder(w / "sc")])),
    Row("ls", "unknown kind", _missing("nothing", lambda k, w: ["ls", "nothing"])),
    # the results commands' own inputs
    Row("compare", "b is not a result file", _missing("notes.csv", lambda k, w: [
        "compare", k.scores_a, _text_file(w / "notes.csv"), "--out", w / "res"])),
    Row("compare", "a folder given for a run", _missing("is a folder", lambda k, w: [
        "compare", k.scores_a, _folder(w / "b.scores.jsonl"), "--out", w / "res"])),
    Row("compare", "runs on different items", _missing("different items", lambda k, w: [
        "compare", k.scores_a, _sugarcrepe_scores(w / "other.scores.jsonl", 2, first=20), "--out", w / "res"])),
    Row("report", "folder without results", _missing("holds no vlprobe results", lambda k, w: [
        "report", _folder(w / "empty"), "--out", w / "r.html"])),
    Row("report", "unknown --format", _missing("'pdf'", lambda k, w: [
        "report", k.results_csv.parent.parent, "--out", w / "r.html", "--format", "pdf"])),
    Row("collect", "folder without results", _missing("holds no vlprobe results", lambda k, w: [
        "collect", _folder(w / "empty"), "--out", w / "all.csv"])),
    Row("plot", "unknown subset", _missing("'nope'", lambda k, w: [
        "plot", k.results_csv, "--out", w / "p.png", "--subset", "nope"])),
    Row("plot", "a folder without results given for the CSV", _missing("holds no vlprobe results", lambda k, w: [
        "plot", _folder(w / "x.csv"), "--out", w / "p.png"])),
    Row("run winoground-scores", "a folder without caches given for the cache", _missing(
        "holds no finished activation cache", lambda k, w: [
            "run", "winoground-scores", "--cache", _folder(w / "c.h5"), "--out", w / "res"])),
    # the testbed's commands
    Row("fixtures train clip", "evaluation split as training data", _missing("evaluation split", lambda k, w: [
        "fixtures", "train", "clip", "--data-dir", k.syn, "--out", w / "m", "--steps", 1, "--device", "cpu"])),
    Row("fixtures train lxmert", "regions of other images", _missing("no features for image", lambda k, w: [
        "fixtures", "train", "lxmert", "--data-dir", k.train, "--regions", k.regions, "--out", w / "m", "--steps", 1,
        "--device", "cpu"])),
    *[Row(f"fixtures train {model}", case, _missing(needle, lambda k, w, model=model, data=data, extra=extra: [
        "fixtures", "train", model, "--data-dir", data(k, w), *(["--regions", k.train_regions] if model == "lxmert" else []),
        "--out", w / "m", "--device", "cpu", *extra]))
      for model in ("clip", "lxmert")
      for case, needle, data, extra in [
          ("--steps 0", "steps must be a positive integer", lambda k, w: k.train, ["--steps", 0]),
          ("misspelt --text-order", "unknown text order 'shufle'", lambda k, w: k.train,
           ["--steps", 1, "--text-order", "shufle"]),
          ("data dir that is not a synthetic dataset", "not a synthetic dataset",
           lambda k, w: _text_file(_folder(w / "photos") / "examples.jsonl").parent, ["--steps", 1]),
      ]],
    Row("fixtures testbed", "--jobs 0", _missing("jobs", lambda k, w: [
        "fixtures", "testbed", "--out", w / "tb", "--jobs", 0])),
    # the refusal of one of its commands, in a worker process (the testbed has begun: writes=False)
    Row("fixtures testbed", "a file where its training data goes", _missing("train-data", lambda k, w: [
        "fixtures", "testbed", "--out", w / "tb", "--models-dir", _holding(_folder(w / "models"), "train-data"),
        "--train-items", 32, "--eval-items", 4, "--clip-steps", 1, "--lxmert-steps", 1, "--jobs", 1]), writes=False,
        progress=True),
    Row("fixtures regions --oracle", "not a synthetic dataset", _missing("not a synthetic dataset", lambda k, w: [
        "fixtures", "regions", "--oracle", "--data-dir", _folder(w / "d"), "--out", w / "r.h5"])),
    Row("fixtures regions --oracle", "--noise nan", _missing("noise", lambda k, w: [
        "fixtures", "regions", "--oracle", "--data-dir", k.syn, "--out", w / "r.h5", "--noise", "nan"])),
]


def _text_file(path: Path) -> Path:
    path.write_text("my notes\n")
    return path


def _folder(path: Path) -> Path:
    path.mkdir()
    return path


def _holding(folder: Path, name: str) -> Path:
    """``folder``, holding a file ``name`` of the user's."""
    _text_file(folder / name)
    return folder


ROWS: list[Row] = [
    *[make(w) for w in WRITERS.values() for make in (_out_under_file, _out_readonly, _out_foreign, _out_wrong_kind)],
    *SPECIFIC,
]


def _snapshot(root: Path) -> dict[str, tuple[str, int]]:
    """Every file below ``root``: relative path -> (sha256, mode)."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink():
            out[str(p.relative_to(root))] = (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mode)
    return out


def _kit_state(k: Kit) -> dict[str, tuple[int, int]]:
    out = {}
    for base in (k.root, k.syn, k.clip, k.cache.parent, k.shards[0].parent):
        for p in base.rglob("*"):
            if p.is_file():
                st = p.stat()
                out[str(p)] = (st.st_size, st.st_mtime_ns)
    return out


def test_the_matrix_covers_every_writing_command() -> None:
    """Every command that writes has its four output rows; the count is printed for the record."""
    cases = {(r.command, r.case) for r in ROWS}
    assert len(cases) == len(ROWS)
    for w in WRITERS:
        assert sum(r.command == w for r in ROWS if r.case.startswith("out ")) >= 4, w
    commands = {r.command.split()[0] if r.command.startswith("fixtures") else r.command for r in ROWS}
    print(f"bad-input matrix: {len(ROWS)} rows, {len({r.command for r in ROWS})} commands, "
          f"{len({r.case for r in ROWS})} cases ({len(commands)} command groups)")


@pytest.mark.parametrize("row", ROWS, ids=[f"{r.command} | {r.case}" for r in ROWS])
def test_bad_input(row: Row, kit: Kit, tmp_path: Path, one_error_line: Callable[..., str]) -> None:
    work = tmp_path / "work"
    work.mkdir()
    argv, needles = row.build(kit, work)
    before, kit_before = _snapshot(work), _kit_state(kit)
    result = _run(*argv)
    if row.progress:
        assert result.exit_code == 2 and "Traceback" not in result.output, result.output
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and all(n in lines[0] for n in needles), lines
    else:
        one_error_line(result, *needles)
    if row.writes:
        assert _snapshot(work) == before, "a refused command changed, left or removed files"
    assert _kit_state(kit) == kit_before, "a refused command changed one of its inputs"


def test_an_image_over_pillows_limit_is_one_warning_line(kit: Kit, tmp_path: Path) -> None:
    """Between Pillow's decompression-bomb limit and twice it, the image is decoded (as Pillow
    does) with one ``warning:`` line, not Pillow's warnings block; the limit is lowered here so a
    small image crosses it. Run in a fresh process: pytest restores the warnings filters after
    each test, so in-process the filter vlprobe sets once at import may be gone, and pytest's
    recorder (not stderr) would hide Pillow's block."""
    data = _copy_dataset(kit, tmp_path)
    big = data / "images" / "ex_3_img_1.png"
    with Image.open(big) as im:
        w, h = im.size
        im.resize((2 * w, 2 * h)).save(big)
    args = [str(a) for a in _extract_on(kit, data, tmp_path / "c.h5")]
    code = ("import sys, PIL.Image\n"
            f"PIL.Image.MAX_IMAGE_PIXELS = {3 * w * h}  # the big one (4 w h) is over it, below twice\n"
            "from vlprobe.cli.app import app\n"
            "app(sys.argv[1:], prog_name='probe')\n")
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=False,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONWARNINGS": "default"})
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(said) == 1 and said[0].startswith("warning: images: ") and "ex_3_img_1.png" in said[0], said
    assert f"{4 * w * h} pixels" in said[0] and "MAX_IMAGE_PIXELS" in said[0]


# -- the other side of the rule: a command may replace (or resume) its own earlier output -------


@pytest.mark.parametrize("command", [c for c, w in WRITERS.items() if w.replay])
def test_the_same_command_replaces_its_own_output(
    command: str, kit: Kit, tmp_path: Path, missing_resource: Callable[[str, str], None],
) -> None:
    w = WRITERS[command]
    if w.needs == "wordnet" and kit.wordnet is None:
        missing_resource("wordnet", f"{command} needs WordNet's dict files to succeed; this machine has none")
    out = tmp_path / w.out_name
    for attempt in ("first", "again"):
        result = _run(*w.args(kit, out))
        assert result.exit_code == 0, (attempt, result.output)
    assert out.exists()
    assert not [p for p in tmp_path.rglob("*vlprobe-tmp*")], "a temporary file was left behind"


def test_extract_keeps_the_rows_before_a_bad_image(kit: Kit, tmp_path: Path, one_error_line: Callable[..., str]) -> None:
    """The image read ahead on the prefetch thread fails as one line naming the file, at the batch
    that needs it: the batches before it stay written. The dataset's fingerprint covers its image
    bytes, so after the file is mended the cache counts as made from other inputs (one line)."""
    from vlprobe.extract.cache.reader import ActivationCache

    data = _copy_dataset(kit, tmp_path)
    bad = data / "images" / "ex_3_img_1.png"
    good = bad.read_bytes()
    bad.write_bytes(good[:200])
    out = tmp_path / "c.h5"
    one_error_line(_run(*_extract_on(kit, data, out)), str(bad))
    with ActivationCache(out) as c:
        image_done = c.done("image")
        assert not c.complete
        assert image_done[:6].all() and not image_done[7]  # images 0-5 in three batches of 2; 7 is the bad one
        assert c.done("text").all()  # the text stream ran first
    before = out.read_bytes()
    one_error_line(_run(*_extract_on(kit, data, out)), str(bad))  # the same run stops at the same image
    with ActivationCache(out) as c:
        np.testing.assert_array_equal(c.done("image"), image_done)
    bad.write_bytes(good)
    one_error_line(_run(*_extract_on(kit, data, out)), "dataset_fingerprint")
    assert out.read_bytes() == before
