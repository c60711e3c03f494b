"""The extraction runner: resume (also after SIGKILL), sharding and merge, layer/pooling/dtype choices."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from tests.extract.helpers import kill_when
from vlprobe.data.synthetic import make_synthetic_winoground
from vlprobe.extract.cache.merge import merge_shards
from vlprobe.extract.cache.reader import ActivationCache
from vlprobe.extract.cache.schema import parse_shard
from vlprobe.extract.runner import ExtractConfig, extract

N_IMAGES, N_TEXTS = 24, 141
STATE_NAMES = ("cls", "mean", "max", "pooled")


# -- resume ---------------------------------------------------------------------------------------


def test_rerun_of_a_complete_cache_computes_nothing(
    reference_cache: Path, make_config: Callable[..., ExtractConfig],
    copy_cache: Callable[[Path, Path], Path], assert_caches_equal: Callable[..., None], tmp_path: Path,
) -> None:
    out = copy_cache(reference_cache, tmp_path / "cache.h5")
    result = extract(make_config(out))
    assert result.complete
    assert result.rows_written == {"text": 0, "image": 0}
    assert result.rows_total == {"text": N_TEXTS, "image": N_IMAGES}
    assert_caches_equal(out, reference_cache, atol=0)


def test_resume_recomputes_exactly_the_rows_not_done(
    reference_cache: Path, make_config: Callable[..., ExtractConfig],
    copy_cache: Callable[[Path, Path], Path], assert_caches_equal: Callable[..., None], tmp_path: Path,
) -> None:
    out = copy_cache(reference_cache, tmp_path / "partial.h5")
    lost = {"text": [3, 10, 11, 12, 50, 140], "image": [0, 23]}
    sentinel_row = {"text": 5, "image": 7}  # done rows: must be left alone
    with h5py.File(out, "r+") as f:
        f.attrs["complete"] = False
        for s, rows in lost.items():
            g = f[f"streams/{s}"]
            done = g["done"][()]
            done[rows] = False
            g["done"][...] = done
            for p in STATE_NAMES:
                data = g[p][()]
                data[rows] = np.nan
                data[sentinel_row[s]] = 7.0
                g[p][...] = data
        f["scores/matrix"][...] = np.nan
        f["scores/done"][...] = False

    result = extract(make_config(out, batch_size=4))
    assert result.rows_written == {s: len(r) for s, r in lost.items()}

    with h5py.File(out, "r") as f, h5py.File(reference_cache, "r") as ref:
        assert bool(f.attrs["complete"]) is True
        assert int(f.attrs["batch_size"]) == 16  # recorded at creation, not rewritten
        for s, rows in lost.items():
            g, r = f[f"streams/{s}"], ref[f"streams/{s}"]
            assert g["done"][()].all()
            for p in STATE_NAMES:
                data = g[p][()]
                assert (data[sentinel_row[s]] == 7.0).all(), f"done row {sentinel_row[s]} of {s} was recomputed"
                np.testing.assert_allclose(data[rows], r[p][()][rows], rtol=0, atol=1e-5, err_msg=f"{s}/{p}")
                keep = np.setdiff1d(np.arange(len(data)), [*rows, sentinel_row[s]])
                np.testing.assert_array_equal(data[keep], r[p][()][keep])
        assert f["scores/done"][()].all()
        # scores come from the stored pooled embeddings, the sentinel rows included
        assert np.isfinite(f["scores/matrix"][()]).all()

    # restore the sentinels and everything equals the reference
    with h5py.File(out, "r+") as f, h5py.File(reference_cache, "r") as ref:
        for s, row in sentinel_row.items():
            for p in STATE_NAMES:
                f[f"streams/{s}/{p}"][row] = ref[f"streams/{s}/{p}"][row]
    extract_scores = extract(make_config(out))  # recomputes scores from the restored embeddings
    assert extract_scores.rows_written == {"text": 0, "image": 0}
    assert_caches_equal(out, reference_cache)


def _done_counts(path: Path) -> tuple[int, int] | None:
    """Done rows of (text, image) in a file another process is writing; None if not readable now."""
    try:
        with h5py.File(path, "r", locking=False) as f:
            return int(f["streams/text/done"][()].sum()), int(f["streams/image/done"][()].sum())
    except (OSError, KeyError):
        return None


def test_resume_after_sigkill(
    reference_cache: Path, synthetic_dir: Path, tiny_clip: Path, make_config: Callable[..., ExtractConfig],
    assert_caches_equal: Callable[..., None], tmp_path: Path,
) -> None:
    out = tmp_path / "killed.h5"
    cmd = [
        sys.executable, "-m", "vlprobe", "extract", "--model", "clip", "--checkpoint", str(tiny_clip),
        "--data-dir", str(synthetic_dir), "--variants", str(synthetic_dir / "variants.jsonl"),
        "--out", str(out), "--batch-size", "1", "--device", "cpu", "--quiet",
    ]
    # The writer keeps HDF5's default file locking; only this test's reads bypass it (locking=False).
    seen, returncode, stderr = kill_when(cmd, out, _done_counts, lambda counts: counts[0] >= 8, timeout=600)
    assert seen is not None, f"the run ended before it could be killed (rc {returncode}): {stderr[-500:]}"
    assert returncode == -signal.SIGKILL

    # The killed file opens normally (default locking, read-only), holds at least the rows seen
    # done, and is not marked complete.
    with ActivationCache(out) as c:
        assert not c.complete
        text_done, image_done = int(c.done("text").sum()), int(c.done("image").sum())
        assert text_done >= seen[0] and image_done >= seen[1]
        assert text_done < N_TEXTS or image_done < N_IMAGES
    assert not list(tmp_path.glob(".*vlprobe-tmp"))

    result = extract(make_config(out, batch_size=16))
    assert result.rows_written == {"text": N_TEXTS - text_done, "image": N_IMAGES - image_done}
    assert_caches_equal(out, reference_cache)


# -- sharding and merge ---------------------------------------------------------------------------


def test_shard_files_hold_contiguous_blocks(shard_files: list[Path]) -> None:
    text_blocks, image_blocks = [], []
    for k, path in enumerate(shard_files):
        with ActivationCache(path) as c:
            assert c.complete
            assert c.header.shard == f"{k}/3"
            assert c.header.shard == f"{k}/3"
            assert "scores" not in c.f  # a dual encoder's scores are computed at merge time
            assert len(c.table("texts")["id"]) == N_TEXTS  # tables always cover the whole run
            for s, blocks in (("text", text_blocks), ("image", image_blocks)):
                g = c.f[f"streams/{s}"]
                start, stop = int(g.attrs["row_start"]), int(g.attrs["row_stop"])
                assert len(c.done(s)) == stop - start
                assert int(g.attrs["n_rows"]) == (N_TEXTS if s == "text" else N_IMAGES)
                blocks.append((start, stop))
                col = "text" if s == "text" else "image"
                np.testing.assert_array_equal(c.rows(s)[col], np.arange(start, stop))
    assert text_blocks == [(0, 47), (47, 94), (94, 141)]
    assert image_blocks == [(0, 8), (8, 16), (16, 24)]


def test_more_shards_than_rows(
    tiny_clip: Path, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path,
    assert_caches_equal: Callable[..., None],
) -> None:
    """A shard may hold no rows of a stream (2 images, 2 texts, 3 shards)."""
    data = make_synthetic_winoground(tmp_path_factory.mktemp("one-item") / "data", n_items=1, seed=3)
    def config(out: Path, shard: str) -> ExtractConfig:
        return ExtractConfig(model="clip", checkpoint=str(tiny_clip), out=out, data_dir=data,
                             shard=shard, progress=False, device="cpu")
    whole = tmp_path / "whole.h5"
    extract(config(whole, "0/1"))
    shards = [tmp_path / f"s{k}.h5" for k in range(3)]
    for k, p in enumerate(shards):
        extract(config(p, f"{k}/3"))
    with ActivationCache(shards[0]) as c:
        assert len(c.done("text")) == 0 and len(c.done("image")) == 0
    merge_shards(shards, tmp_path / "merged.h5")
    assert_caches_equal(tmp_path / "merged.h5", whole)


@pytest.mark.parametrize(
    ("spec", "expected"), [("0/1", (0, 1)), ("2/3", (2, 3)), (" 1/4", (1, 4))]
)
def test_parse_shard(spec: str, expected: tuple[int, int]) -> None:
    assert parse_shard(spec) == expected


@pytest.mark.parametrize(
    ("spec", "match"),
    [("3/3", "0 <= K < N"), ("-1/2", "0 <= K < N"), ("0/0", "0 <= K < N"), ("a/b", "K/N"),
     ("1", "K/N"), ("1/2/3", "K/N"), ("", "K/N")],
)
def test_parse_shard_errors(spec: str, match: str) -> None:
    with pytest.raises(ValueError, match=match) as err:
        parse_shard(spec)
    assert "shard" in str(err.value) and repr(spec) in str(err.value)


# -- layers, poolings, dtype ----------------------------------------------------------------------


def test_per_stream_layers_and_cls_pooling(
    reference_cache: Path, make_config: Callable[..., ExtractConfig], h5_tree: Callable[[Path], Any], tmp_path: Path,
) -> None:
    out = tmp_path / "some.h5"
    extract(make_config(out, layers="text=0,-1;image=all", poolings=("cls",)))
    tree = h5_tree(out)
    assert {k: v for k, v in tree.items() if k.startswith("streams/")} == {
        "streams/image": "group",
        "streams/image/cls": ("float32", (N_IMAGES, 3, 32)),
        "streams/image/done": ("bool", (N_IMAGES,)),
        "streams/image/image": ("int32", (N_IMAGES,)),
        "streams/image/layers": ("int16", (3,)),
        "streams/image/pooled": ("float32", (N_IMAGES, 16)),
        "streams/image/text": ("int32", (N_IMAGES,)),
        "streams/text": "group",
        "streams/text/cls": ("float32", (N_TEXTS, 2, 32)),
        "streams/text/done": ("bool", (N_TEXTS,)),
        "streams/text/image": ("int32", (N_TEXTS,)),
        "streams/text/layers": ("int16", (2,)),
        "streams/text/pooled": ("float32", (N_TEXTS, 16)),
        "streams/text/text": ("int32", (N_TEXTS,)),
    }
    with ActivationCache(out) as c, ActivationCache(reference_cache) as r:
        assert c.layers("text") == [0, 3] and c.layers("image") == [0, 1, 2]
        assert c.layer_kinds("text") == ["embed", "self"]
        assert c.header.layers == {"text": [0, 3], "image": [0, 1, 2]}
        assert c.header.poolings == ("cls", "pooled")
        assert c.poolings("text") == ["cls", "pooled"]
        np.testing.assert_allclose(c.states("text", "cls"), r.states("text", "cls")[:, [0, 3]], rtol=0, atol=1e-5)
        np.testing.assert_allclose(c.states("text", "cls", layer=3), r.states("text", "cls", layer=3), rtol=0, atol=1e-5)
        np.testing.assert_allclose(c.states("image", "cls"), r.states("image", "cls"), rtol=0, atol=1e-5)
        np.testing.assert_allclose(c.scores()[0], r.scores()[0], rtol=0, atol=1e-5)


def test_float16(
    reference_cache: Path, make_config: Callable[..., ExtractConfig], tmp_path: Path
) -> None:
    out = tmp_path / "half.h5"
    extract(make_config(out, dtype="float16"))
    with ActivationCache(out) as c, ActivationCache(reference_cache) as r:
        assert c.header.dtype == "float16"
        for s in ("text", "image"):
            for p in STATE_NAMES:
                half, full = c.f[f"streams/{s}/{p}"], r.f[f"streams/{s}/{p}"]
                assert half.dtype == np.float16, (s, p)
                assert half.shape == full.shape
                values = half[()]
                assert np.isfinite(values).all()
                np.testing.assert_allclose(values.astype(np.float32), full[()], rtol=0, atol=2e-2, err_msg=f"{s}/{p}")
        matrix, done = c.scores()
        assert matrix.dtype == np.float32 and done.all()
        np.testing.assert_allclose(matrix, r.scores()[0], rtol=0, atol=1e-2)


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"batch_size": 0}, "batch_size"),
        ({"pair_plan": "some"}, "pair_plan"),
        ({"out": "cache.txt"}, r"out must be an HDF5 file name ending in \.h5"),
        ({"poolings": ("cls", "foo")}, "unknown pooling 'foo'"),
        ({"layers": "0,99"}, "layer 99 is out of range"),
        ({"model": "clp"}, "did you mean 'clip'"),
    ],
)
def test_extract_validates_its_config(
    overrides: dict[str, Any], match: str, make_config: Callable[..., ExtractConfig], tmp_path: Path
) -> None:
    out = tmp_path / overrides.pop("out", "cache.h5")
    with pytest.raises(ValueError, match=match):
        extract(make_config(out, **overrides))
    assert list(tmp_path.iterdir()) == []
