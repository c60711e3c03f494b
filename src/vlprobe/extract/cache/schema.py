"""The HDF5 activation cache: one file per (checkpoint, dataset, pair plan).

Schema (version 1)
------------------
Root attributes (``/``)::

    vlprobe_schema          int, 1
    model                   registry name ("clip")
    checkpoint              what the user passed (not compared)
    checkpoint_fingerprint  "sha256:<hex>" of the checkpoint folder (UNITER: of the .pt file), or
                            "hub:<id>@<commit>"
    dataset                 registry name ("winoground")
    dataset_fingerprint     sha256 over the dataset's files (captions, fields, image bytes)
    variants_fingerprint    sha256 of the variants file, "" without one
    pair_plan               "item" or "all" (dual encoders always score all pairs: "all")
    pair_states             bool; cross-encoders: whether pair streams (states) are stored
                            besides the scores (False: scores only; always False for dual encoders)
    regions_fingerprint     "sha256:<hex>" of the region-feature file (LXMERT, UNITER), else ""
    config_fingerprint      "sha256:<hex>" of a model config file read apart from the checkpoint
                            (UNITER's JSON), else ""
    tokenizer_fingerprint   "sha256:<hex>" of a tokenizer loaded apart from the checkpoint (UNITER's
                            --tokenizer, its default tokenizer/ folder, or "hub:<id>@<commit>"), else ""
    dataset_selection       JSON of the loader options that choose items (subsets, limit, all_items),
                            "" without any (image folders are covered by dataset_fingerprint)
    poolings                JSON list, e.g. ["cls", "mean", "max", "pooled"]
    dtype                   "float32" or "float16" (storage and model weights)
    shard                   "K/N" ("0/1" unsharded)
    layers                  JSON {stream: [layer numbers]}
    complete                bool; True once every row (and the scores) are written
    -- recorded, not compared: created, vlprobe_version, versions (JSON), git_revision,
       device, dataset_source, tags_fingerprint, model_info (JSON), batch_size,
       dataset_options (JSON: the loader's options, e.g. image_dir, subsets, limit)

Index tables (all rows of the dataset, also in shard files)::

    /items/id        (n_items,)  str   namespaced item id
    /items/tags      (n_items,)  str   JSON {tag family: [tags]}
    /images/id       (n_images,) str   canonical image order
    /images/name     (n_images,) str   benchmark image name
    /images/item     (n_images,) int32 row in /items
    /texts/id        (n_texts,)  str   originals first (canonical order), then variants
    /texts/text      (n_texts,)  str
    /texts/item      (n_texts,)  int32 row in /items
    /texts/parent    (n_texts,)  int32 row of the original caption, -1 for originals
    /texts/strategy  (n_texts,)  str   augmentation strategy, "" for originals

One group per stream, ``/streams/<name>``, attributes ``modality`` (text|image|pair),
``layer_kinds`` (JSON, every layer of the model's stream), ``cls_rule``, ``hidden_size``,
``pooled_size`` (0 = none), ``n_rows`` (rows of the whole run), ``row_start``/``row_stop`` (the
rows this file holds; a shard holds a contiguous block)::

    layers    (L,)            int16  model layer numbers stored (0 = embeddings)
    image     (R,)            int32  row in /images, -1 if the row has no image
    text      (R,)            int32  row in /texts, -1 if the row has no text
    done      (R,)            bool   the done-mask: True once the row's states are written
    cls|mean|max (R, L, H)    dtype  pooled token states per stored layer (NaN until done)
    pooled    (R, D)          dtype  the model's own pooled output

Scores, ``/scores`` (attrs ``kind``, e.g. "cosine" or "match_probability"; ``orientation`` =
"image x text"; absent in a dual encoder's shard files, where ``probe cache merge`` computes it)::

    matrix    (n_images, n_texts) float32  s(image i, text t); NaN where not computed
    done      (n_images, n_texts) bool

Cross-encoders (one forward per pair) also keep the pair plan, ``/pairs`` (attrs ``n_rows``,
``row_start``, ``row_stop`` as for streams: a shard holds a contiguous block of the plan)::

    image     (P,)  int32    row in /images
    text      (P,)  int32    row in /texts
    score     (P,)  float32  the pair's score (NaN until done)
    done      (P,)  bool     True once the pair's score and states are written

Each batch writes its pairs' states (every pair stream) and scores, flushes, then marks them
done; ``/scores/matrix`` is filled from ``/pairs`` when the run completes. With ``pair_states``
the pair streams' rows are exactly the rows of ``/pairs``; without, ``/streams`` is absent.

Crash safety: state datasets are allocated in full when the file is created (no compression, so
writes never move data or change metadata); each chunk of rows is written, flushed, and only then
marked done and flushed again. A killed run loses at most the chunk in flight and resumes from
the done-mask. Opening an existing file with other settings is refused, naming the field.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from vlprobe.extract.models.base import StreamSpec
from vlprobe.validation import InputError

__all__ = [
    "COMPARED_FIELDS",
    "SCHEMA_VERSION",
    "CacheHeader",
    "CacheTables",
    "PairLayout",
    "StreamLayout",
    "attr_str",
    "header_diff",
    "open_h5",
    "parse_shard",
]

SCHEMA_VERSION = 1
STR_DTYPE = h5py.string_dtype(encoding="utf-8")


@dataclass(frozen=True)
class CacheHeader:
    """The settings that identify a cache; all but ``checkpoint`` must match to resume."""

    model: str
    checkpoint: str
    checkpoint_fingerprint: str
    dataset: str
    dataset_fingerprint: str
    variants_fingerprint: str
    pair_plan: str
    poolings: tuple[str, ...]
    dtype: str
    shard: str
    layers: dict[str, list[int]]
    pair_states: bool = False
    regions_fingerprint: str = ""
    config_fingerprint: str = ""
    tokenizer_fingerprint: str = ""
    dataset_selection: str = ""

    def to_attrs(self) -> dict[str, Any]:
        d = asdict(self)
        d["poolings"] = json.dumps(list(self.poolings))
        d["layers"] = json.dumps(self.layers, sort_keys=True)
        return d

    @classmethod
    def from_attrs(cls, attrs: Mapping[str, Any]) -> CacheHeader:
        return cls(
            model=attr_str(attrs["model"]),
            checkpoint=attr_str(attrs["checkpoint"]),
            checkpoint_fingerprint=attr_str(attrs["checkpoint_fingerprint"]),
            dataset=attr_str(attrs["dataset"]),
            dataset_fingerprint=attr_str(attrs["dataset_fingerprint"]),
            variants_fingerprint=attr_str(attrs["variants_fingerprint"]),
            pair_plan=attr_str(attrs["pair_plan"]),
            poolings=tuple(json.loads(attr_str(attrs["poolings"]))),
            dtype=attr_str(attrs["dtype"]),
            shard=attr_str(attrs["shard"]),
            layers={k: list(v) for k, v in json.loads(attr_str(attrs["layers"])).items()},
            pair_states=bool(attrs.get("pair_states", False)),
            regions_fingerprint=attr_str(attrs.get("regions_fingerprint", "")),
            config_fingerprint=attr_str(attrs.get("config_fingerprint", "")),
            tokenizer_fingerprint=attr_str(attrs.get("tokenizer_fingerprint", "")),
            dataset_selection=attr_str(attrs.get("dataset_selection", "")),
        )


#: Header fields that must be equal for a run to resume (or shards to merge) into a file.
COMPARED_FIELDS: tuple[str, ...] = (
    "model", "checkpoint_fingerprint", "dataset", "dataset_fingerprint", "variants_fingerprint",
    "pair_plan", "pair_states", "poolings", "dtype", "shard", "layers", "regions_fingerprint",
    "config_fingerprint", "tokenizer_fingerprint", "dataset_selection",
)


@dataclass(frozen=True)
class CacheTables:
    """Index tables of a run (see the schema)."""

    item_id: list[str]
    item_tags: list[str]
    image_id: list[str]
    image_name: list[str]
    image_item: list[int]
    text_id: list[str]
    text: list[str]
    text_item: list[int]
    text_parent: list[int]
    text_strategy: list[str]


class _RowBlock:
    """Rows ``row_start:row_stop`` (None: to the end) of a run's ``image``/``text`` row arrays."""

    image: np.ndarray
    row_stop: int | None

    @property
    def n_rows(self) -> int:
        """Rows of the whole run."""
        return len(self.image)

    @property
    def stop(self) -> int:
        """End of this file's block."""
        return self.n_rows if self.row_stop is None else self.row_stop


@dataclass(frozen=True)
class StreamLayout(_RowBlock):
    """Rows and layers of one stream in one file.

    ``image``/``text`` hold the rows of the whole run; this file stores rows
    ``row_start:row_stop`` of them.
    """

    spec: StreamSpec
    layers: list[int]
    image: np.ndarray
    text: np.ndarray
    row_start: int = 0
    row_stop: int | None = None
    poolings: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class PairLayout(_RowBlock):
    """The pair plan of a cross-encoder run: (image, text) table rows of every pair.

    ``image``/``text`` hold the pairs of the whole run; this file stores pairs
    ``row_start:row_stop`` of them.
    """

    image: np.ndarray
    text: np.ndarray
    row_start: int = 0
    row_stop: int | None = None


def attr_str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def header_diff(old: CacheHeader, new: CacheHeader) -> str | None:
    for name in COMPARED_FIELDS:
        a, b = getattr(old, name), getattr(new, name)
        if a != b:
            return f"{name}: file has {a!r}, this run has {b!r}"
    return None


def open_h5(path: Path, mode: str) -> h5py.File:
    try:
        return h5py.File(path, mode)
    except OSError as exc:
        msg = str(exc)
        if "lock" in msg.lower():
            raise InputError(
                f"cache {str(path)!r} is open for writing in another process "
                "(to read it meanwhile, set HDF5_USE_FILE_LOCKING=FALSE)"
            ) from None
        raise InputError(f"cache {str(path)!r} is not a readable HDF5 file ({msg.splitlines()[0]})") from None


def parse_shard(spec: str) -> tuple[int, int]:
    """``"K/N"`` -> (K, N) with 0 <= K < N."""
    try:
        k_text, n_text = spec.split("/")
        k, n = int(k_text), int(n_text)
    except ValueError:
        raise InputError(f"shard must look like K/N (e.g. 0/4), got {spec!r}") from None
    if n < 1 or not 0 <= k < n:
        raise InputError(f"shard must satisfy 0 <= K < N, got {spec!r}")
    return k, n
