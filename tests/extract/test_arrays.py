"""Caches written from arrays read back through ActivationCache exactly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vlprobe.extract.arrays import ArrayStream, planted_cache, winoground_tables, write_array_cache
from vlprobe.extract.cache.reader import ActivationCache
from vlprobe.extract.runner import pair_rows


def test_array_cache_round_trip(tmp_path: Path) -> None:
    tables = winoground_tables(3, np.array([[1, 2], [0, 1], [2, 0]]))
    assert tables.text_parent[:6] == [-1] * 6 and tables.text_id[6] == "winoground/0/c0/v0"
    img, txt = pair_rows(tables, "item")
    states = np.arange(len(img) * 2 * 3, dtype=np.float32).reshape(len(img), 2, 3)
    path = write_array_cache(tmp_path / "a.h5", tables, {
        "joint": ArrayStream("pair", img, txt, {"mean": states}, [1, 3], n_layers=4, cls_rule="none"),
    })
    with ActivationCache(path) as c:
        assert c.complete and c.streams == ["joint"] and c.layers("joint") == [1, 3]
        np.testing.assert_array_equal(c.states("joint", "mean"), states)
        np.testing.assert_array_equal(c.rows("joint")["text"], txt)
        assert c.info()["variants"] == 6
        assert c.header.pair_states is True  # pair streams are stored (the header says so)
    with pytest.raises(ValueError, match="exists"):
        write_array_cache(path, tables, {})


def test_planted_signal_sits_at_one_layer(tmp_path: Path) -> None:
    path = planted_cache(tmp_path / "p.h5", n_items=4, n_variants=2, n_layers=3, signal_layer=1, hidden=3)
    with ActivationCache(path) as c:
        text = c.states("text", "cls")
        parent = c.table("texts")["parent"]
    caption = np.where(parent < 0, np.arange(len(parent)), parent) % 2
    assert (np.sign(text[:, 1, 0]) == np.where(caption == 0, 1, -1)).all()
    with pytest.raises(ValueError, match="signal_layer"):
        planted_cache(tmp_path / "q.h5", n_layers=2, signal_layer=2)
