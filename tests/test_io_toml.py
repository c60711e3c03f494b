"""vlprobe.io.toml.dumps: what vlprobe writes as TOML (plans) reads back equal."""

from __future__ import annotations

import pytest

from vlprobe.io.toml import dumps, loads


def test_dumps_reads_back_equal() -> None:
    table = {
        "out": "/tmp/x y",
        "shards": 2,
        "steps": [{"name": "train clip", "args": ["--out", 'a "quoted" \\ path', "é"], "after": [], "cost": 85.0},
                  {"name": "b", "args": ["--version"], "group": "data"}],
        "models": {"clip-trained": {"model": "clip", "run": {"separability": ["--streams", "lang"]}},
                   "a.b": {"flag": True}},
        "experiments": {"recall": {}},
    }
    text = dumps(table)
    assert loads(text) == table
    assert "[models]" not in text  # a table holding only tables is implied by them
    assert '[models."a.b"]' in text and "[experiments.recall]" in text  # quoted key; an empty table kept


def test_dumps_refuses_what_toml_has_no_value_for() -> None:
    with pytest.raises(TypeError, match=r"models.a.checkpoint: NoneType"):
        dumps({"models": {"a": {"checkpoint": None}}})
