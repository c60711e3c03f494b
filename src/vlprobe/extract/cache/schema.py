"""The HDF5 activation cache: one file per (checkpoint, dataset, pair plan).

Schema (version 4)
------------------
Root attributes (``/``): ``schema`` = ``"vlprobe-cache"`` and ``schema_version`` = 4 (the
same two names as vlprobe's region files), then the attributes declared once in this module:
:class:`CacheHeader` (the settings that identify a run; all but ``checkpoint`` are compared on
resume and merge) and :class:`CacheRecord` (what a run records without comparing it), each
field with its type and meaning. :data:`ROOT_ATTRS` lists them; the documentation's table
(``docs/caches.md``) is made from it (:func:`root_attrs_table`). Lists and mappings are stored as JSON text, the rest as plain
HDF5 scalars. Older files still read, with the header fields added since at their defaults:
version 1 (``vlprobe_schema`` = 1, without ``pair_states``, ``regions_fingerprint``,
``config_fingerprint``, ``tokenizer_fingerprint``, ``dataset_selection``), version 2
(without ``model_options``) and version 3 (without ``image_backend``, ``image_orientation``); a
resumed older file is relabelled version 4 (its datasets are the same); newer versions are
refused. A pixel model's older cache is not resumed: it does not say which image-processor
backend made its states (``image_backend`` differs, and is named).

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
    positions (P, K) int32   models with a joint token sequence (generative models) only: where
                             each pair's parts sit in it, one column per name of the ``/pairs``
                             attribute ``position_columns`` (JSON: length, image_start,
                             image_stop, caption_start, caption_stop, answer, target_start,
                             target_stop; -1 until done)

Each batch writes its pairs' states (every pair stream) and scores, flushes, then marks them
done; ``/scores/matrix`` is filled from ``/pairs`` when the run completes. With ``pair_states``
the pair streams' rows are exactly the rows of ``/pairs``; without, they are absent (a
cross-encoder's ``text``/``image`` streams, such as BLIP's unimodal encoders, are stored either way,
one row per text or image).

Crash safety: every dataset (states, done masks, scores) is allocated and filled in full when the
file is created under a temporary name and renamed into place (no compression, so writes never
move data, change metadata or need new space: a disk too small fails at the start); each chunk of
rows is written, flushed, and only then marked done and flushed again. A run killed at any write
loses at most the chunk in flight and resumes from the done-mask; a second run on the same file is
refused while the first holds its lock. Opening an existing file with other settings is refused,
naming the field.
"""

from __future__ import annotations

import builtins
import dataclasses
import json
import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from vlprobe.extract import sharded_h5
from vlprobe.extract.models.streams import StreamSpec
from vlprobe.extract.sharded_h5 import parse_shard
from vlprobe.io.h5 import schema_version_of
from vlprobe.validation import InputError

__all__ = [
    "COMPARED_FIELDS",
    "ROOT_ATTRS",
    "SCHEMA",
    "SCHEMA_VERSION",
    "AttrField",
    "CacheHeader",
    "CacheRecord",
    "CacheTables",
    "PairLayout",
    "StreamLayout",
    "attr_str",
    "cache_version",
    "header_diff",
    "open_h5",
    "parse_shard",
    "root_attrs_table",
]

SCHEMA = "vlprobe-cache"
#: 2: the ``schema``/``schema_version`` names; pair_states, regions_fingerprint,
#: config_fingerprint, tokenizer_fingerprint and dataset_selection required (version 1 files may
#: lack them).
#: 3: model_options (version 2 files lack it).
#: 4: image_backend, image_orientation (version 3 files lack them).
SCHEMA_VERSION = 4
#: The root attribute that named the version in version 1 files.
LEGACY_VERSION_ATTR = "vlprobe_schema"
STR_DTYPE = h5py.string_dtype(encoding="utf-8")


def _attr(doc: str, *, compared: bool = True, since: int = 2) -> dict[str, Any]:
    """Field metadata of a root attribute: what it means, whether resume and merge compare it, and
    the first schema version whose header must have it (older files may lack it)."""
    return {"doc": doc, "compared": compared, "since": since}


@dataclass(frozen=True, kw_only=True)
class CacheHeader:
    """The settings that identify a cache; every field but ``checkpoint`` must match to resume.

    Each field's metadata holds its meaning (``doc``) and whether it is ``compared``; fields
    with a default may be missing from files older than their ``since`` version (version 1 for
    most, 3 for ``model_options``, 4 for the image fields). Resume reports the first differing
    field in this order.
    """

    model: str = field(metadata=_attr('registry name ("clip")'))
    checkpoint: str = field(metadata=_attr("what the user passed", compared=False))
    checkpoint_fingerprint: str = field(metadata=_attr(
        '"sha256:<hex>" of the checkpoint folder (UNITER: of the .pt file), or "hub:<id>@<commit>"'))
    dataset: str = field(metadata=_attr('registry name ("winoground")'))
    dataset_fingerprint: str = field(metadata=_attr(
        "sha256 over the dataset's files (captions, fields, image bytes)"))
    variants_fingerprint: str = field(metadata=_attr('sha256 of the variants file, "" without one'))
    pair_plan: str = field(metadata=_attr('"item" or "all" (dual encoders always score all pairs: "all")'))
    pair_states: bool = field(default=False, metadata=_attr(
        "cross-encoders: whether pair streams (states) are stored besides the scores (False: scores "
        "only; always False for dual encoders)"))
    poolings: tuple[str, ...] = field(metadata=_attr('stored poolings, e.g. ["cls", "mean", "max", "pooled"]'))
    dtype: str = field(metadata=_attr(
        '"float32", "float16" or "bfloat16" (model weights; storage, bfloat16 stored as float32): '
        '`--dtype auto` resolved, never "auto"'))
    shard: str = field(metadata=_attr('"K/N" ("0/1" unsharded)'))
    layers: dict[str, list[int]] = field(metadata=_attr("{stream: [stored layer numbers]}"))
    regions_fingerprint: str = field(default="", metadata=_attr(
        '"sha256:<hex>" of the region-feature file (LXMERT, UNITER), else ""'))
    config_fingerprint: str = field(default="", metadata=_attr(
        '"sha256:<hex>" of a model config file read apart from the checkpoint (UNITER\'s JSON), else ""'))
    tokenizer_fingerprint: str = field(default="", metadata=_attr(
        '"sha256:<hex>" of a tokenizer loaded apart from the checkpoint (UNITER\'s --tokenizer, its '
        'default tokenizer/ folder, or "hub:<id>@<commit>"), else ""'))
    dataset_selection: str = field(default="", metadata=_attr(
        'JSON of the loader options that choose items (subsets, limit, all_items), "" without any '
        "(image folders are covered by dataset_fingerprint)"))
    model_options: str = field(default="", metadata=_attr(
        'JSON of the load options that change what the model computes (BLIP-ITM\'s score_head), "" '
        "without any", since=3))
    image_backend: str = field(default="", metadata=_attr(
        'pixel models: the transformers image-processor backend that preprocessed the images ("pil", '
        'as the reference code; never chosen by what the machine has installed), else ""', since=4))
    image_orientation: str = field(default="", metadata=_attr(
        'pixel models: how image files were decoded ("stored": the EXIF Orientation tag ignored, as '
        'the reference code\'s Image.open does), else "" (region files record their own)', since=4))

    def to_attrs(self) -> dict[str, Any]:
        """The HDF5 root attributes of this header."""
        return _to_attrs(self)

    def compared(self) -> dict[str, Any]:
        """The fields compared on resume and merge (:data:`COMPARED_FIELDS`), in that order."""
        return {name: getattr(self, name) for name in COMPARED_FIELDS}

    @classmethod
    def from_attrs(cls, attrs: Mapping[str, Any], version: int = SCHEMA_VERSION, where: str = "cache") -> CacheHeader:
        """The header of a file's root attributes; fields may be missing in versions before their ``since``."""
        return cls(**_from_attrs(cls, attrs, version, where))


@dataclass(frozen=True)
class CacheRecord:
    """What a cache records about its run without comparing it on resume."""

    complete: bool = field(default=False, metadata=_attr(
        "True once every row (and the scores) are written", compared=False))
    created: str = field(default="", metadata=_attr("creation time, ISO 8601", compared=False))
    vlprobe_version: str = field(default="", metadata=_attr("the vlprobe that wrote the file", compared=False))
    versions: dict[str, str] = field(default_factory=dict, metadata=_attr(
        "versions of python and the packages used", compared=False))
    git_revision: str = field(default="", metadata=_attr("git revision of vlprobe's source, if known", compared=False))
    device: str = field(default="", metadata=_attr('the device the model ran on ("cpu", "cuda:0")', compared=False))
    dataset_source: str = field(default="", metadata=_attr("where the dataset was read from", compared=False))
    tags_fingerprint: str = field(default="", metadata=_attr('sha256 of the tag file, "" without one', compared=False))
    model_info: dict[str, Any] = field(default_factory=dict, metadata=_attr(
        "facts about the loaded model (the adapter's describe())", compared=False))
    batch_size: int = field(default=0, metadata=_attr("rows per forward pass", compared=False))
    dataset_options: dict[str, Any] = field(default_factory=dict, metadata=_attr(
        "every option of the dataset's loader, image folders included", compared=False))
    merged_from: list[str] = field(default_factory=list, metadata=_attr(
        "merged files only: the shard files joined", compared=False))
    defaults: dict[str, str] = field(default_factory=dict, metadata=_attr(
        "the inputs not given and what was taken for each (checkpoint, data_dir, variants, out, regions), "
        "{} when every input was given", compared=False))
    job_ids: list[dict[str, str]] = field(default_factory=list, metadata=_attr(
        'one entry per run under a launcher that wrote the file (created or resumed it): its "shard", '
        '"source" and the job ids set (SLURM_JOB_ID, SLURM_ARRAY_JOB_ID, TORCHELASTIC_RUN_ID, ...); a '
        "merged file has its shards' entries", compared=False))

    def to_attrs(self) -> dict[str, Any]:
        """The HDF5 root attributes of this record (``merged_from`` only when set)."""
        out = _to_attrs(self)
        if not self.merged_from:
            del out["merged_from"]
        return out

    @classmethod
    def from_attrs(cls, attrs: Mapping[str, Any], version: int = SCHEMA_VERSION, where: str = "cache") -> CacheRecord:
        """The record of a file's root attributes (every field has a default)."""
        return cls(**_from_attrs(cls, attrs, version, where))


@dataclass(frozen=True)
class AttrField:
    """One declared root attribute of a cache (derived from :class:`CacheHeader` and
    :class:`CacheRecord`)."""

    name: str
    #: As the documentation names it: ``str``, ``bool``, ``int``, ``JSON list``, ``JSON object``.
    type: str
    compared: bool
    doc: str
    #: The Python type of the value (``tuple``, ``list``, ``dict`` are stored as JSON text).
    python: builtins.type  # the field ``type`` above shadows the builtin in this class body
    #: ``CacheHeader`` or ``CacheRecord``.
    owner: str

    @property
    def json(self) -> bool:
        return self.python in (tuple, list, dict)


def _fields_of(cls: type) -> tuple[AttrField, ...]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        t = hints[f.name]
        out.append(AttrField(
            f.name, _type_name(t), bool(f.metadata["compared"]), str(f.metadata["doc"]),
            typing.get_origin(t) or t, cls.__name__,
        ))
    return tuple(out)


def _type_name(t: Any) -> str:
    origin = typing.get_origin(t)
    if origin is None:
        return getattr(t, "__name__", str(t))
    return {tuple: "JSON list", list: "JSON list", dict: "JSON object"}[origin]


#: Every declared root attribute: the header's fields, then the record's.
ROOT_ATTRS: tuple[AttrField, ...] = _fields_of(CacheHeader) + _fields_of(CacheRecord)
_BY_NAME = {a.name: a for a in ROOT_ATTRS}
#: Header fields that must be equal for a run to resume (or shards to merge) into a file.
COMPARED_FIELDS: tuple[str, ...] = tuple(a.name for a in ROOT_ATTRS if a.compared)


def _encode(a: AttrField, value: Any) -> Any:
    if a.json:
        return json.dumps(list(value) if isinstance(value, tuple) else value, sort_keys=True)
    return value


def _decode(a: AttrField, raw: Any) -> Any:
    if a.json:
        value = json.loads(attr_str(raw))
        if not isinstance(value, dict if a.python is dict else list):
            raise TypeError(f"expected a {a.type}")
        return tuple(value) if a.python is tuple else value
    if a.python is str:
        return attr_str(raw)
    return a.python(raw)


def _to_attrs(obj: Any) -> dict[str, Any]:
    return {f.name: _encode(_BY_NAME[f.name], getattr(obj, f.name)) for f in dataclasses.fields(obj)}


def _from_attrs(cls: type, attrs: Mapping[str, Any], version: int, where: str) -> dict[str, Any]:
    out = {}
    for f in dataclasses.fields(cls):
        if f.name in attrs:
            try:
                out[f.name] = _decode(_BY_NAME[f.name], attrs[f.name])
            except (ValueError, TypeError, AttributeError):
                raise InputError(f"{where}: root attribute {f.name!r} is unreadable ({attrs[f.name]!r})") from None
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise InputError(f"{where}: the cache header lacks its {f.name!r} attribute")
        elif cls is CacheHeader and version >= f.metadata["since"]:
            raise InputError(f"{where}: the version {version} cache header lacks its {f.name!r} attribute")
    return out


def root_attrs_table() -> str:
    """The documentation's table of root attributes (``docs/caches.md``), made from :data:`ROOT_ATTRS`
    (a test compares them)."""
    rows = ["| attribute | type | compared on resume | meaning |", "|---|---|---|---|"]
    for a in ROOT_ATTRS:
        doc = re.sub(r'"[^"]*"', lambda m: f"`{m.group(0)}`", a.doc)  # literals as code
        rows.append(f"| `{a.name}` | {a.type} | {'yes' if a.compared else 'no'} | {doc} |")
    return "\n".join(rows) + "\n"


def cache_version(attrs: Mapping[str, Any], where: str) -> int:
    """The schema version of a file's root attributes (1 to :data:`SCHEMA_VERSION`); InputError for anything else."""
    if "schema" not in attrs and LEGACY_VERSION_ATTR in attrs:
        version = int(attrs[LEGACY_VERSION_ATTR])
        if version != 1:
            raise InputError(f"{where}: {LEGACY_VERSION_ATTR} = {version}; this vlprobe reads version 1 under that name")
        return 1
    return schema_version_of(attrs, SCHEMA, SCHEMA_VERSION, where, what="a vlprobe cache")


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
    #: The columns of ``/pairs/positions`` (the adapter's ``position_columns``); empty: no
    #: positions are stored.
    position_columns: tuple[str, ...] = ()


def attr_str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def header_diff(old: CacheHeader, new: CacheHeader) -> str | None:
    """The first compared field that differs: ``"field: file has A, this run has B"``; None if none."""
    return sharded_h5.header_diff(old, new)


def open_h5(path: Path, mode: str) -> h5py.File:
    """``h5py.File(path, mode)``; InputError if another process writes it or it is no HDF5 file."""
    return sharded_h5.open_h5(path, mode, f"cache {str(path)!r}")
