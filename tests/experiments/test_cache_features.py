"""What the probing experiments read from a cache: families, streams, layers, scaling."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vlprobe.experiments.cache_features import (
    check_seeds,
    load_index,
    load_states,
    read_stream,
    resolve_layers,
    resolve_stream,
    row_lookup,
    scale_states,
    stratum_keys,
    stream_layers,
    stream_pooling,
)
from vlprobe.extract.cache.reader import ActivationCache
from vlprobe.extract.runner import pair_rows
from vlprobe.fixtures.caches import ArrayStream, winoground_tables, write_array_cache
from vlprobe.validation import InputError


@pytest.fixture(scope="module")
def cache_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tables = winoground_tables(3, np.array([[2, 1], [0, 3], [1, 1]]))
    n_txt = len(tables.text_id)
    img, txt = pair_rows(tables, "item")
    rng = np.random.default_rng(0)
    return write_array_cache(tmp_path_factory.mktemp("cf") / "c.h5", tables, {
        "text": ArrayStream("text", np.full(n_txt, -1), np.arange(n_txt),
                            {"cls": rng.normal(size=(n_txt, 3, 4)).astype(np.float32)}, [0, 2, 5], n_layers=6),
        "joint": ArrayStream("pair", img, txt, {"mean": rng.normal(size=(len(img), 2, 4)).astype(np.float32)},
                             [0, 1], n_layers=2, cls_rule="none"),
    })


def test_families_hold_the_caption_then_its_variants(cache_file: Path) -> None:
    with ActivationCache(cache_file) as c:
        index = load_index(c)
        texts = c.table("texts")
    assert index.n_variants == 8
    for i, fams in enumerate(index.families):
        assert len(fams) == 2
        for k, rows in enumerate(fams):
            assert texts["id"][rows[0]] == f"winoground/{i}/c{k}"  # original first
            assert all(str(texts["id"][r]).startswith(f"winoground/{i}/c{k}/v") for r in rows[1:])
    assert [len(f) for f in index.families[1]] == [1, 4]
    keys, fams = stratum_keys(index, [0, 1, 2])
    assert fams == ["collapsed_tag", "num_main_preds"] and len(set(keys)) == 3


def test_streams_layers_and_rows(cache_file: Path) -> None:
    with ActivationCache(cache_file) as c:
        assert resolve_stream(c, None, ("text", "pair")) == "text"
        assert resolve_stream(c, None, ("pair",)) == "joint"
        assert resolve_layers(c, "text", "cls", "all") == [0, 2, 5]
        assert resolve_layers(c, "text", "cls", "-1") == [5]
        with pytest.raises(ValueError, match=r"layer\(s\) \[1\] of stream 'text' are not stored"):
            resolve_layers(c, "text", "cls", "1")
        with pytest.raises(ValueError, match="pooling 'cls' is not in stream 'joint'"):
            resolve_layers(c, "joint", "cls", "all")
        full = load_states(c, "text", "cls", [0, 2, 5])
        np.testing.assert_array_equal(load_states(c, "text", "cls", [5, 0]), full[:, [2, 0]])
        modality, lookup = row_lookup(c, "joint")
        rows = c.rows("joint")
    assert modality == "pair" and lookup[(int(rows["image"][7]), int(rows["text"][7]))] == 7


def test_scaling_and_seeds() -> None:
    x = np.random.default_rng(1).normal(3, 5, size=(50, 2, 3)).astype(np.float32)
    z = scale_states(x, "standard")
    np.testing.assert_allclose(z.mean(axis=0), 0, atol=1e-5)
    np.testing.assert_allclose(z.std(axis=0), 1, atol=1e-4)
    assert scale_states(x, "none") is x
    assert check_seeds(3) == [0, 1, 2]
    for bad in (0, -1, True, 2.5):
        with pytest.raises(ValueError, match="seeds must be a positive integer"):
            check_seeds(bad)  # type: ignore[arg-type]


def test_a_stream_without_the_preferred_pooling_reads_its_default(cache_file: Path) -> None:
    """No pooling given: the preferred one, else cls, mean, max, pooled; from ``pooled`` (no layer
    axis) the last layer."""
    with ActivationCache(cache_file) as c:
        assert stream_pooling(c, "text", None) == "cls"
        assert stream_pooling(c, "joint", None) == "mean"
        assert stream_pooling(c, "text", None, preferred="mean") == "cls"  # the text stream holds only cls
        assert stream_layers(c, "joint", None, "all") == ("mean", [0, 1])
        assert stream_layers(c, "joint", None, "all", preferred="pooled") == ("mean", [1])  # as deep as pooled
        assert stream_layers(c, "joint", None, "0", preferred="pooled") == ("mean", [0])  # layers named: kept
        read = read_stream(c, "joint", ("pair",), None, "all")
        assert read.fell_back and (read.pooling, read.asked_pooling) == ("mean", "cls")
        np.testing.assert_array_equal(read.states, load_states(c, "joint", "mean", [0, 1]))
        assert not read_stream(c, "text", ("text",), None, "all").fell_back
        with pytest.raises(ValueError, match="pooling must be one of"):
            stream_pooling(c, "text", "median")


def test_a_pooling_given_that_a_stream_lacks_is_refused(cache_file: Path) -> None:
    """``--pooling mean`` on a stream without mean states: one line, never another pooling read
    under the asked one's name."""
    with ActivationCache(cache_file) as c:
        assert stream_pooling(c, "joint", "mean") == "mean"
        for stream, pooling in (("text", "mean"), ("joint", "cls")):
            with pytest.raises(InputError, match=rf"pooling: stream '{stream}' of .* has no '{pooling}' states "
                                                 r"\(it holds .*\); leave --pooling out"):
                read_stream(c, stream, ("text", "pair"), pooling, "all")
