"""The one parser for layer specifications.

Layer 0 is always the embedding output, so a model with ``L`` blocks has layers
``0..L``. A spec is one of::

    all          every layer
    0,4,-1       a list; negative numbers count from the end (-1 = last layer)
    2:6          a Python slice (stop exclusive): 2, 3, 4, 5; also ``:3``, ``6:``, ``::2``
    1,3:5,-1     lists may mix numbers and slices

Per-stream specs separate streams with ``;`` and name them with ``=``:
``text=all;image=0,-1``. A stream not named gets ``all``.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence

from vlprobe.validation import InputError

__all__ = ["check_spec", "parse_layers", "parse_stream_layers", "stream_part"]


def parse_layers(spec: str | Sequence[int], n_layers: int, *, param: str = "layers") -> list[int]:
    """Resolve a layer spec against a stream with ``n_layers`` layers (embeddings included).

    Parameters
    ----------
    spec : str or sequence of int
        See the module docstring.
    n_layers : int
        Number of layers of the stream, counting layer 0 (embeddings).
    param : str
        Parameter name used in error messages.

    Returns
    -------
    list of int
        Sorted, unique, non-negative layer numbers.
    """
    if n_layers <= 0:
        raise InputError(f"{param}: the stream has no layers (n_layers={n_layers})")
    if not isinstance(spec, str):
        return _check_indices(list(spec), n_layers, param, str(list(spec)))
    text = spec.strip().lower()
    if text in ("all", "*", ""):
        if text == "":
            raise InputError(f"{param} must be 'all', a list such as '0,4,-1' or a slice such as '2:6'; got ''")
        return list(range(n_layers))
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if ":" in part:
            pieces = part.split(":")
            if len(pieces) > 3:
                raise InputError(f"{param}: {part!r} is not a slice (expected start:stop[:step])")
            try:
                bounds = [int(p) if p.strip() else None for p in pieces]
            except ValueError:
                raise InputError(
                    f"{param}: {part!r} is not a slice of integers (expected e.g. '2:6')"
                ) from None
            if len(bounds) == 3 and bounds[2] == 0:
                raise InputError(f"{param}: slice step cannot be zero in {part!r}")
            chosen = list(range(n_layers))[slice(*bounds)]
            if not chosen:
                raise InputError(f"{param}: slice {part!r} selects no layer of 0..{n_layers - 1}")
            out.extend(chosen)
        else:
            try:
                out.append(int(part))
            except ValueError:
                raise InputError(
                    f"{param} must be 'all', a list such as '0,4,-1' or a slice such as '2:6'; "
                    f"got {spec!r}"
                ) from None
    return _check_indices(out, n_layers, param, spec)


def parse_stream_layers(
    spec: str, streams: Mapping[str, int], *, param: str = "layers"
) -> dict[str, list[int]]:
    """Resolve a possibly per-stream spec (``text=all;image=0,-1``) for every stream.

    Parameters
    ----------
    spec : str
        A plain spec applies to every stream; ``name=spec`` parts separated by ``;`` apply
        to the named streams, and streams not named get ``all``.
    streams : mapping of str to int
        Stream name -> number of layers (embeddings included).
    """
    if "=" not in spec:
        return {name: parse_layers(spec, n, param=param) for name, n in streams.items()}
    given = _stream_parts(spec, streams, param)
    return {
        name: parse_layers(given.get(name, "all"), n, param=f"{param}[{name}]")
        for name, n in streams.items()
    }


def stream_part(spec: str, stream: str, streams: Sequence[str], *, param: str = "layers") -> str:
    """The part of a possibly per-stream spec that applies to ``stream``.

    A plain spec applies to every stream; in ``a=all;b=-1`` each named stream must be one of
    ``streams`` (the streams a run reads) and a stream not named gets ``all``.
    """
    if "=" not in spec:
        return spec
    given = _stream_parts(spec, streams, param)
    return given.get(stream, "all")


def check_spec(spec: str, *, param: str = "layers") -> None:
    """Check the grammar of a spec (plain or per stream) before any model or cache is known."""
    if not isinstance(spec, str):
        raise InputError(f"{param} must be a layer spec string, got {spec!r}")
    parts = _stream_parts(spec, None, param) if "=" in spec else {"": spec}
    for name, sub in parts.items():
        # Against a deep enough stream every well-formed spec selects a layer.
        parse_layers(sub, _ANY_DEPTH, param=f"{param}[{name}]" if name else param)


#: A stream depth no model reaches, for checking a spec's grammar alone.
_ANY_DEPTH = 1 << 20


def _stream_parts(spec: str, streams: Sequence[str] | Mapping[str, int] | None, param: str) -> dict[str, str]:
    """``a=all;b=-1`` -> {"a": "all", "b": "-1"}; names checked against ``streams`` when given."""
    given: dict[str, str] = {}
    for part in spec.split(";"):
        if not part.strip():
            continue
        name, sep, sub = part.partition("=")
        name = name.strip()
        if not sep or not name or (streams is not None and name not in streams):
            known = f" (streams: {', '.join(streams)})" if streams is not None else ""
            raise InputError(f"{param}: {part.strip()!r} does not name a stream{known}")
        if name in given:
            raise InputError(f"{param}: stream {name!r} is given twice in {spec!r}")
        given[name] = sub
    return given


def _check_indices(values: list[int], n_layers: int, param: str, spec: object) -> list[int]:
    resolved: set[int] = set()
    for v in values:
        if not isinstance(v, numbers.Integral) or isinstance(v, bool):
            raise InputError(f"{param} must hold integers, got {v!r}")
        v = int(v)  # numpy integers too
        if not -n_layers <= v < n_layers:
            raise InputError(
                f"{param}: layer {v} is out of range for a stream with layers 0..{n_layers - 1} "
                f"(spec {spec!r})"
            )
        resolved.add(v % n_layers)
    if not resolved:
        raise InputError(f"{param}: spec {spec!r} selects no layer")
    return sorted(resolved)
