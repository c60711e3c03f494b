"""The one layer-spec parser: parse_layers and parse_stream_layers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from vlprobe.layers import parse_layers, parse_stream_layers
from vlprobe.validation import InputError


@pytest.mark.parametrize(
    ("spec", "n", "expected"),
    [
        ("all", 5, [0, 1, 2, 3, 4]),
        ("ALL", 3, [0, 1, 2]),
        (" all ", 2, [0, 1]),
        ("*", 3, [0, 1, 2]),
        ("0,4,-1", 13, [0, 4, 12]),
        ("0, 4 , -1", 13, [0, 4, 12]),
        ("-1", 4, [3]),
        ("3", 4, [3]),
        ("2:6", 13, [2, 3, 4, 5]),
        (":3", 13, [0, 1, 2]),
        ("6:", 8, [6, 7]),
        ("-2:", 8, [6, 7]),
        ("::2", 7, [0, 2, 4, 6]),
        ("1::3", 10, [1, 4, 7]),
        ("::-1", 3, [0, 1, 2]),
        ("2:100", 4, [2, 3]),  # slices clip like Python slices
        ("1,3:5,-1", 13, [1, 3, 4, 12]),
        ("4,0,4,-13", 13, [0, 4]),  # sorted, unique; -13 == 0
        ("0:2,1:3", 5, [0, 1, 2]),
    ],
)
def test_parse_layers_strings(spec: str, n: int, expected: list[int]) -> None:
    assert parse_layers(spec, n) == expected


@pytest.mark.parametrize(
    ("spec", "n", "expected"),
    [
        ([0, 4, -1], 13, [0, 4, 12]),
        ((2, 1, 2), 4, [1, 2]),
        (range(3), 3, [0, 1, 2]),
        ([-4], 4, [0]),
        (np.array([0, -1]), 5, [0, 4]),
        ([np.int64(2), 1], 5, [1, 2]),
    ],
)
def test_parse_layers_sequences(spec: object, n: int, expected: list[int]) -> None:
    out = parse_layers(spec, n)  # type: ignore[arg-type]
    assert out == expected
    assert all(type(v) is int for v in out)


@pytest.mark.parametrize(
    ("spec", "n", "fragment"),
    [
        ("13", 13, "layer 13 is out of range"),
        ("-14", 13, "layer -14 is out of range"),
        ("0,4,20", 13, "layers 0..12"),
        ("", 13, "got ''"),
        ("   ", 13, "got ''"),
        ("abc", 13, "'all', a list"),
        ("1,,2", 13, "'all', a list"),
        ("1.5", 13, "'all', a list"),
        ("a:b", 13, "not a slice of integers"),
        ("1:2:3:4", 13, "not a slice"),
        ("::0", 13, "step cannot be zero"),
        ("1:1", 13, "selects no layer"),
        ("20:", 13, "selects no layer"),
    ],
)
def test_parse_layers_errors_name_the_param(spec: str, n: int, fragment: str) -> None:
    with pytest.raises(ValueError) as exc:
        parse_layers(spec, n, param="--layers")
    assert str(exc.value).startswith("--layers")
    assert fragment in str(exc.value)


def test_parse_layers_sequence_errors() -> None:
    with pytest.raises(ValueError, match=r"^layers: spec '\[\]' selects no layer"):
        parse_layers([], 4)
    with pytest.raises(ValueError, match=r"^layers: layer 4 is out of range"):
        parse_layers([0, 4], 4)
    with pytest.raises(InputError, match=r"^layers must hold integers, got True"):
        parse_layers([True], 4)
    with pytest.raises(InputError, match=r"^layers must hold integers, got 1.0"):
        parse_layers([1.0], 4)  # type: ignore[list-item]


def test_parse_layers_needs_layers() -> None:
    with pytest.raises(ValueError, match=r"^lay: the stream has no layers \(n_layers=0\)"):
        parse_layers("all", 0, param="lay")


def test_parse_stream_layers_plain_spec_applies_to_every_stream() -> None:
    streams = {"text": 13, "image": 7}
    assert parse_stream_layers("0,-1", streams) == {"text": [0, 12], "image": [0, 6]}
    assert parse_stream_layers("all", streams) == {"text": list(range(13)), "image": list(range(7))}


def test_parse_stream_layers_per_stream() -> None:
    streams = {"text": 13, "image": 7}
    out = parse_stream_layers("text=2:4;image=0,-1", streams)
    assert out == {"text": [2, 3], "image": [0, 6]}
    assert list(out) == ["text", "image"]  # the streams' order, not the spec's
    # a stream not named gets all; blank parts and spaces are fine
    assert parse_stream_layers(" image = -1 ;", streams) == {"text": list(range(13)), "image": [6]}


def test_parse_stream_layers_errors() -> None:
    streams = {"text": 13, "image": 7}
    with pytest.raises(ValueError, match=r"^layers: 'vision=0' does not name a stream .*text, image"):
        parse_stream_layers("text=0;vision=0", streams)
    with pytest.raises(ValueError, match=r"does not name a stream"):
        parse_stream_layers("text=0;5", streams)
    # the error names the stream whose spec is wrong
    with pytest.raises(ValueError, match=r"^layers\[image\]: layer 7 is out of range"):
        parse_stream_layers("text=12;image=7", streams)
    with pytest.raises(ValueError, match=r"^--layers\[text\]"):
        parse_stream_layers("text=", streams, param="--layers")
    with pytest.raises(ValueError, match=r"^layers: stream 'text' is given twice"):
        parse_stream_layers("text=0;text=1", streams)


# -- properties ----------------------------------------------------------------------------------

n_layers_st = st.integers(min_value=1, max_value=30)


@st.composite
def spec_and_n(draw: st.DrawFn) -> tuple[str, int]:
    n = draw(n_layers_st)
    parts = []
    for _ in range(draw(st.integers(1, 4))):
        if draw(st.booleans()):
            parts.append(str(draw(st.integers(-n, n - 1))))
        else:
            start = draw(st.one_of(st.none(), st.integers(-n, n - 1)))
            stop = draw(st.one_of(st.none(), st.integers(-n, n)))
            step = draw(st.one_of(st.none(), st.integers(1, 4)))
            text = f"{'' if start is None else start}:{'' if stop is None else stop}"
            if step is not None:
                text += f":{step}"
            parts.append(text)
    return ",".join(parts), n


@given(spec_and_n())
def test_property_result_sorted_unique_in_range_and_matches_python(case: tuple[str, int]) -> None:
    spec, n = case
    layers = list(range(n))
    expected: set[int] = set()
    for part in spec.split(","):
        if ":" in part:
            bounds = [int(p) if p else None for p in part.split(":")]
            expected.update(layers[slice(*bounds)])
        else:
            expected.add(layers[int(part)])
    if not all(layers[slice(*[int(p) if p else None for p in part.split(":")])]
               for part in spec.split(",") if ":" in part):
        with pytest.raises(ValueError, match="selects no layer"):
            parse_layers(spec, n)
        return
    out = parse_layers(spec, n)
    assert out == sorted(set(out))
    assert all(0 <= v < n for v in out)
    assert out == sorted(expected)


@given(n_layers_st)
def test_property_all_is_range(n: int) -> None:
    assert parse_layers("all", n) == list(range(n))
    assert parse_layers(f"0:{n}", n) == list(range(n))
    assert parse_layers(list(range(-n, 0)), n) == list(range(n))


@given(n_layers_st, st.lists(st.integers(-100, 100), min_size=1, max_size=10))
def test_property_integer_lists(n: int, values: list[int]) -> None:
    if all(-n <= v < n for v in values):
        out = parse_layers(values, n)
        assert out == sorted({v % n for v in values})
        assert parse_layers(",".join(map(str, values)), n) == out
    else:
        with pytest.raises(ValueError, match="out of range"):
            parse_layers(values, n)
