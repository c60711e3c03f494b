"""Read access to a cache file (the schema is in :mod:`.schema`)."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from vlprobe.extract.cache.schema import (
    SCHEMA,
    CacheHeader,
    CacheRecord,
    attr_str,
    cache_version,
    open_h5,
)
from vlprobe.extract.models.streams import StreamSpec
from vlprobe.io.h5 import OpenH5
from vlprobe.validation import InputError, check_file

__all__ = ["ActivationCache"]


class ActivationCache(OpenH5):
    """Read access to a cache file (see the module docstring for the schema).

    Parameters
    ----------
    path : path
        A cache written by ``probe extract`` (or ``probe cache merge``).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        check_file(self.path, "cache")
        self.f = open_h5(self.path, "r")
        try:
            where = f"cache: {str(self.path)!r}"
            #: The file's schema version (1 or 2; see :mod:`.schema`).
            self.version = cache_version(self.f.attrs, where)
            self.header = CacheHeader.from_attrs(self.f.attrs, self.version, where)
            self.record = CacheRecord.from_attrs(self.f.attrs, self.version, where)
        except BaseException:
            self.f.close()
            raise

    @property
    def complete(self) -> bool:
        return self.record.complete

    @property
    def score_kind(self) -> str:
        """What a score is (``cosine``, ``match_probability``); "" without ``/scores``."""
        return attr_str(self.f["scores"].attrs.get("kind", "")) if "scores" in self.f else ""

    @property
    def has_pairs(self) -> bool:
        """Whether the file keeps a cross-encoder's pair plan (``/pairs``)."""
        return "pairs" in self.f

    def stored_rows(self, stream: str, name: str, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` of this file's ``name`` dataset (a pooling or ``pooled``) of
        ``stream``, done or not (for copying files in bounded pieces)."""
        g = self._stream(stream)
        if name not in ("cls", "mean", "max", "pooled") or name not in g:
            raise InputError(f"{name!r} is not stored in stream {stream!r} of {self.path.name}")
        return g[name][start:stop]

    def stream_spec(self, stream: str) -> StreamSpec:
        """The stream's :class:`~vlprobe.extract.models.streams.StreamSpec` as the adapter declared it."""
        g = self._stream(stream)
        return StreamSpec(
            stream, attr_str(g.attrs["modality"]), tuple(self.model_layer_kinds(stream)),
            int(g.attrs["hidden_size"]), attr_str(g.attrs["cls_rule"]), int(g.attrs["pooled_size"]) or None,
        )

    @property
    def streams(self) -> list[str]:
        return list(self.f["streams"].keys()) if "streams" in self.f else []

    def layers(self, stream: str) -> list[int]:
        return [int(x) for x in self._stream(stream)["layers"][()]]

    def layer_kinds(self, stream: str) -> list[str]:
        """Kinds of the stored layers (see :meth:`model_layer_kinds` for all of the model's)."""
        kinds = self.model_layer_kinds(stream)
        return [kinds[i] for i in self.layers(stream)]

    def model_layer_kinds(self, stream: str) -> list[str]:
        """Kind of every layer the model has in ``stream`` (stored or not), layer 0 first."""
        return list(json.loads(attr_str(self._stream(stream).attrs["layer_kinds"])))

    def modality(self, stream: str) -> str:
        """``text``, ``image`` or ``pair``: what one row of ``stream`` is."""
        return attr_str(self._stream(stream).attrs["modality"])

    def poolings(self, stream: str) -> list[str]:
        g = self._stream(stream)
        return [p for p in ("cls", "mean", "max", "pooled") if p in g]

    def done(self, stream: str) -> np.ndarray:
        return self._stream(stream)["done"][()]

    def rows(self, stream: str) -> dict[str, np.ndarray]:
        """Table rows per stored row: ``{"image": (R,), "text": (R,)}`` (-1 = none)."""
        g = self._stream(stream)
        return {"image": g["image"][()], "text": g["text"][()]}

    def states(self, stream: str, pooling: str, layer: int | None = None) -> np.ndarray:
        """Stored states.

        Parameters
        ----------
        stream, pooling : str
        layer : int, optional
            A model layer number (negative counts from the last stored); None for all.

        Returns
        -------
        ndarray
            (R, L, H) for all layers, (R, H) for one layer or for ``pooled``.
        """
        g = self._stream(stream)
        if pooling not in g or pooling in ("layers", "image", "text", "done"):
            raise InputError(
                f"pooling {pooling!r} is not in stream {stream!r} of {self.path.name} "
                f"(has {', '.join(self.poolings(stream))})"
            )
        if not bool(g["done"][()].all()):
            raise InputError(
                f"cache {self.path.name}: stream {stream!r} is incomplete "
                f"({int(g['done'][()].sum())}/{len(g['done'])} rows); resume the extraction first"
            )
        ds = g[pooling]
        if pooling == "pooled" or layer is None:
            return ds[()]
        stored = self.layers(stream)
        if layer < 0:
            layer = stored[layer] if -len(stored) <= layer else layer
        if layer not in stored:
            raise InputError(f"layer {layer} is not stored for stream {stream!r} (stored: {stored})")
        return ds[:, stored.index(layer), :]

    def table(self, name: str) -> dict[str, np.ndarray]:
        """One index table (``items``, ``images`` or ``texts``) as column -> array."""
        if name not in ("items", "images", "texts"):
            raise InputError(f"table must be items, images or texts, got {name!r}")
        g = self.f[name]
        out = {}
        for col in g:
            arr = g[col][()]
            out[col] = np.array([attr_str(x) for x in arr], dtype=object) if arr.dtype.kind == "O" else arr
        return out

    def pairs(self) -> dict[str, np.ndarray]:
        """A cross-encoder's pair plan in this file: ``image``, ``text``, ``score``, ``done`` (P,)."""
        if not self.has_pairs:
            raise InputError(f"cache {self.path.name} holds no pair plan (made by a dual encoder)")
        g = self.f["pairs"]
        return {k: g[k][()] for k in ("image", "text", "score", "done")}

    def position_columns(self) -> tuple[str, ...]:
        """The columns of ``/pairs/positions`` (empty where the file keeps none)."""
        if not self.has_pairs or "positions" not in self.f["pairs"]:
            return ()
        return tuple(json.loads(attr_str(self.f["pairs"].attrs["position_columns"])))

    def positions(self) -> dict[str, np.ndarray]:
        """Where each pair's parts sit in its joint sequence: column name -> (P,) int32 (-1 for
        pairs not done); generative models' caches only.

        Raises
        ------
        InputError
            The cache keeps no positions.
        """
        columns = self.position_columns()
        if not columns:
            raise InputError(f"cache {self.path.name} holds no pair positions (only generative models record them)")
        data = self.f["pairs/positions"][()]
        return {c: data[:, k] for k, c in enumerate(columns)}

    def scores(self) -> tuple[np.ndarray, np.ndarray]:
        """(matrix (n_images, n_texts) float32, done (n_images, n_texts) bool)."""
        if "scores" not in self.f:
            raise InputError(f"cache {self.path.name} holds no scores")
        return self.f["scores/matrix"][()], self.f["scores/done"][()]

    def provenance(self) -> dict[str, Any]:
        """What a manifest records about this cache as an input: path, hash, every header field
        (model, checkpoint and input fingerprints, pair plan, layers, ...), the score kind, the
        device the states were computed on, each stream's layer kinds (every layer of the
        model, layer 0 first) and, for a cache ``probe extract`` wrote with inputs not given, the
        defaults it took (``defaults``: field -> what was taken and why)."""
        from vlprobe.provenance import sha256_file

        return {
            "path": str(self.path), "sha256": sha256_file(self.path),
            **{k: _plain(v) for k, v in dataclasses.asdict(self.header).items()},
            "score_kind": self.score_kind, "device": self.record.device,
            "layer_kinds": {s: self.model_layer_kinds(s) for s in self.streams},
            **({"defaults": dict(self.record.defaults)} if self.record.defaults else {}),
        }

    def _stream(self, stream: str) -> h5py.Group:
        if stream not in self.streams:
            raise InputError(
                f"stream {stream!r} is not in {self.path.name} (streams: {', '.join(self.streams)})"
            )
        return self.f[f"streams/{stream}"]

    def info(self) -> dict[str, Any]:
        """A JSON-serialisable summary (what ``probe cache info`` prints): the schema, the
        declared header and record fields (:data:`~.schema.ROOT_ATTRS`), tables, streams,
        scores and pairs."""
        streams = {}
        for s in self.streams:
            g = self._stream(s)
            done = g["done"][()]
            streams[s] = {
                "modality": attr_str(g.attrs["modality"]),
                "layers": self.layers(s),
                "layer_kinds": self.layer_kinds(s),
                "cls_rule": attr_str(g.attrs["cls_rule"]),
                "hidden_size": int(g.attrs["hidden_size"]),
                "poolings": {p: list(g[p].shape) for p in self.poolings(s)},
                "rows": [int(g.attrs["row_start"]), int(g.attrs["row_stop"])],
                "n_rows": int(g.attrs["n_rows"]),
                "done": int(done.sum()),
            }
        out: dict[str, Any] = {
            "path": str(self.path),
            "size_bytes": self.path.stat().st_size,
            "schema": SCHEMA,
            "schema_version": self.version,
            "complete": self.complete,
            "header": {k: _plain(v) for k, v in dataclasses.asdict(self.header).items()},
            "recorded": {k: _plain(v) for k, v in dataclasses.asdict(self.record).items() if k != "complete"},
            "items": len(self.f["items/id"]),
            "images": len(self.f["images/id"]),
            "texts": len(self.f["texts/id"]),
            "variants": int((self.f["texts/parent"][()] >= 0).sum()),
            "streams": streams,
        }
        if "scores" in self.f:
            done = self.f["scores/done"][()]
            out["scores"] = {
                "shape": list(done.shape), "done": int(done.sum()),
                "kind": self.score_kind,
                "orientation": attr_str(self.f["scores"].attrs.get("orientation", "")),
            }
        if "pairs" in self.f:
            g = self.f["pairs"]
            out["pairs"] = {
                "rows": [int(g.attrs["row_start"]), int(g.attrs["row_stop"])],
                "n_rows": int(g.attrs["n_rows"]), "done": int(g["done"][()].sum()),
            }
        return out


def _plain(value: Any) -> Any:
    """A header or record value as JSON has it (tuples as lists)."""
    return list(value) if isinstance(value, tuple) else value
