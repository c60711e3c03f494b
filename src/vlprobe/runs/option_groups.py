"""Option groups shared by several experiments, each declared once.

An experiment config inherits the groups it takes (``class VariantProbeConfig(CacheInput,
StateOptions, SplitOptions, MLPOptions, ResultsOptions)``) and changes a default with
:meth:`~vlprobe.runs.declare.Options.redeclare`. The command line shows each group in
its own help panel.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlprobe.runs.declare import (
    Options,
    check_key_values,
    count_or_fraction,
    key_values,
    names,
    option,
)
from vlprobe.validation import (
    InputError,
    check_int,
    check_positive_float,
    check_positive_int,
    check_seed,
)

__all__ = [
    "AUTO_DTYPE",
    "DTYPES",
    "POOLINGS",
    "AllItemsOption",
    "BootstrapOptions",
    "BootstrapTestOptions",
    "CacheInput",
    "DatasetOption",
    "DatasetOptions",
    "ItemOptions",
    "MLPOptions",
    "MLPProbeRunOptions",
    "ModelOptions",
    "ProgressOption",
    "ResultsOptions",
    "SeedsOption",
    "ShardOption",
    "SplitOptions",
    "StateOptions",
    "StripCaptionsOption",
    "check_device",
    "check_layer_spec",
    "check_shard",
    "check_test_size",
    "item_loader_options",
]

#: Poolings an experiment can read from a cache.
POOLINGS = ("cls", "mean", "max", "pooled")


def check_test_size(value: int | float, param: str) -> int | float:
    """A count of items (>= 1) or a fraction in (0, 1)."""
    if isinstance(value, int):
        return check_int(value, param, low=1, meaning=" (a count of test items)")
    if not 0.0 < value < 1.0:
        raise InputError(f"{param} must be a count of items (100) or a fraction in (0, 1), got {value!r}")
    return value


def check_layer_spec(value: str, param: str) -> str:
    """The grammar of a layer spec (``all``, ``0,4,-1``, ``2:6``, ``text=all;image=-1``); the
    layers themselves are checked against the cache."""
    from vlprobe.layers import check_spec

    check_spec(value, param=param)
    return value


def check_device(value: str, param: str) -> str:
    """``auto``, ``cpu``, ``cuda``, ``cuda:N`` or ``mps`` (whether it exists is checked when used)."""
    base, _, index = value.partition(":")
    if base not in ("auto", "cpu", "cuda", "mps") or (index and (base != "cuda" or not index.isdigit())):
        raise InputError(f"{param} must be auto, cpu, cuda, cuda:N or mps, got {value!r}")
    return value


@dataclass(frozen=True, kw_only=True)
class CacheInput(Options):
    """A run over one activation cache."""

    cache: Path = option(help="A vlprobe cache (`probe extract`).", role="input")


#: The dtypes a model can be loaded in (a command may allow fewer: ``redeclare(..., choices=...)``).
DTYPES = ("float32", "float16", "bfloat16")
#: ``--dtype``'s default: the dtype the model's reference code loads it in (its class's
#: ``reference_dtype``), resolved when the model is known (:meth:`ModelOptions.resolved`).
AUTO_DTYPE = "auto"


@dataclass(frozen=True, kw_only=True)
class ModelOptions(Options):
    """The model-loading group, one declaration for every command that runs a model (``probe
    extract``, ``probe eval``, ``probe run patch|erasure``): the registered model, its checkpoint,
    what it is loaded with besides (the config file, the tokenizer, the load options it declares,
    region features), the dtype, the device and the batch size. A command changes a default or a
    help with :meth:`~vlprobe.runs.declare.Options.redeclare` (``probe eval`` makes ``model``
    optional, ``patch`` the checkpoint required).

    ``dtype`` ``auto`` (the default) is replaced, once the config is made with a model, by the
    dtype the model's reference code loads it in (``reference_dtype``: float32 but for Vera,
    bfloat16), so that ``config.dtype``, the manifest and the run's name hold that dtype; a run
    whose dtype differs from it is named by it (``vera@dtype=float32``)."""

    panel = "Model"
    rank = 1

    model: str = option(role="input", help="Registered model (see `probe ls models`).")
    checkpoint: str | None = option(
        None, role="input", help="Checkpoint directory or hub id (UNITER: the .pt file).",
    )
    model_config: Path | None = option(
        None, role="input", help="UNITER: the model config JSON (uniter-base.json).",
    )
    tokenizer: str | None = option(
        None, role="input", help="UNITER: tokenizer dir or hub id (default: tokenizer/ beside the checkpoint).",
    )
    model_options: tuple[str, ...] = option(
        (), repeat=True, role="input", metavar="NAME=VALUE", check=check_key_values,
        help="A load option the model declares, NAME=VALUE, repeatable (e.g. blip-itm: score_head=itc).",
    )
    regions: Path | None = option(
        None, role="input", help="lxmert/uniter: region features (vlprobe HDF5) of the dataset's images.",
    )
    dtype: str = option(
        AUTO_DTYPE, choices=(AUTO_DTYPE, *DTYPES),
        help="Weights' dtype; auto: the one the model's reference code loads it in (float32; vera: bfloat16).",
    )
    device: str = option(
        "auto", check=check_device, role="runtime", help="cpu, cuda, cuda:N, mps or auto (the output records the one used).",
    )
    batch_size: int = option(32, check=check_positive_int, role="runtime", help="Inputs per forward pass.")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.model:  # without one (a score file, a models file's table) auto stays until a model is known
            object.__setattr__(self, "dtype", self.resolved("dtype", self.dtype))

    def resolved(self, name: str, value: Any) -> Any:
        """``dtype`` ``auto``: the dtype the model's reference code loads it in; None without a
        model (a run that loads none, on a score file, has no dtype)."""
        if name == "dtype" and value == AUTO_DTYPE:
            if not self.model:
                return None
            from vlprobe.extract.model_inputs import model_dtype

            return model_dtype(str(self.model), AUTO_DTYPE)
        return super().resolved(name, value)

    def load_options(self) -> dict[str, Any]:
        """The keyword arguments of the model's ``load`` (None: not given)."""
        return {"model_config": self.model_config, "tokenizer": self.tokenizer,
                **key_values(self.model_options, "model_options")}

    def side_inputs(self, fingerprints: dict[str, str]) -> dict[str, Any]:
        """A manifest's ``inputs`` records of the loaded model's side inputs: ``model_<key>`` ->
        the spec given (None: the default) and the fingerprint (the adapter's ``input_fingerprints``)."""
        specs = {"config": self.model_config, "tokenizer": self.tokenizer}
        return {f"model_{key}": {"spec": None if specs.get(key) is None else str(specs[key]), "fingerprint": fp}
                for key, fp in fingerprints.items() if fp}


@dataclass(frozen=True, kw_only=True)
class ItemOptions(Options):
    """Where a dataset's files are and which of its items to take: the dataset loaders'
    selection options, declared once for every command that loads a benchmark."""

    data_dir: Path | None = option(
        None, role="input",
        help="Local copy of the dataset (default: $VLPROBE_<DATASET>, e.g. VLPROBE_WINOGROUND; else the hub).",
    )
    # The item selection is part of the input: a rerun with another one under the same name is refused.
    subsets: str | None = option(
        None, role="input", metavar="A,B", help="SugarCrepe/VALSE/ARO: comma-separated subsets (file stems); default all.",
    )
    limit: int | None = option(
        None, check=check_positive_int, role="input", help="SugarCrepe/VALSE/ARO: first N items per subset.",
    )
    image_dir: Path | None = option(None, role="input", help="SugarCrepe: the COCO val2017 image folder.")
    image_root: tuple[str, ...] = option(
        (), repeat=True, role="input", metavar="[SOURCE=]DIR",
        help="SOURCE=DIR per image source, repeatable; a bare DIR for all. VALSE: visual7w, coco2017, coco2014, "
             "swig, visdial; ARO: vg, coco, flickr30k.",
    )

    def loader_options(self) -> dict[str, Any]:
        """The selection options given, as the dataset loader's keyword arguments."""
        return item_loader_options(subsets=self.subsets, limit=self.limit, image_dir=self.image_dir,
                                   image_root=self.image_root, all_items=getattr(self, "all_items", None),
                                   strip_captions=getattr(self, "strip_captions", None))


@dataclass(frozen=True, kw_only=True)
class AllItemsOption(Options):
    """VALSE's invalid items (a command that loads VALSE whole takes it beside :class:`ItemOptions`)."""

    all_items: bool = option(False, role="input", help="VALSE: keep invalid items too.")


@dataclass(frozen=True, kw_only=True)
class StripCaptionsOption(Options):
    """SugarCrepe's captions stripped of surrounding whitespace (a command that reads its captions
    takes it beside :class:`ItemOptions`)."""

    strip_captions: bool = option(
        False, role="input",
        help="SugarCrepe: strip leading and trailing whitespace from both captions (default: as released, as "
             "the authors' main_eval.py and text_model_eval.py read them).",
    )


@dataclass(frozen=True, kw_only=True)
class DatasetOption(Options):
    """A registered dataset by name."""

    dataset: str = option("winoground", role="input", help="Registered dataset (see `probe ls datasets`).")


@dataclass(frozen=True, kw_only=True)
class DatasetOptions(StripCaptionsOption, AllItemsOption, ItemOptions, DatasetOption):
    """A registered dataset and its items, for the hand-written commands that load one (``probe
    extract``, ``probe augment``, ``probe regions extract``, ``probe fixtures regions``): the
    dataset, then :class:`ItemOptions`, :class:`AllItemsOption` and :class:`StripCaptionsOption`
    (fields in that order)."""


def item_loader_options(**options: Any) -> dict[str, Any]:
    """Dataset loader options the user gave: None, False and empty ones (the loader's default)
    left out; ``image_root`` as a list."""
    out = {k: v for k, v in options.items()
           if v is not None and v is not False and not (isinstance(v, tuple | list) and not v)}
    if "image_root" in out:
        out["image_root"] = list(out["image_root"])
    return out


@dataclass(frozen=True, kw_only=True)
class StateOptions(Options):
    """Which states of the cache a probe reads (shown, and named in a run's name, before the
    probe's own settings)."""

    panel = "States"
    rank = 5

    streams: tuple[str, ...] | None = option(
        None, parse=names, metavar="A,B", help="Streams to read, comma-separated (default: text, else every text or pair stream).",
    )
    pooling: str | None = option(
        None, choices=POOLINGS,
        help="Pooling to read (default: cls, or a stream's own where it has none, said on stderr); one given is "
             "read from every stream, or refused where a stream lacks it.",
    )
    layers: str = option(
        "all", check=check_layer_spec, help="Layers: all | 0,4,-1 | 2:6 | per stream text=all;image=-1.",
    )


@dataclass(frozen=True, kw_only=True)
class SeedsOption(Options):
    """A number of seeds: runs 0..N-1."""

    seeds: int = option(11, check=check_positive_int, help="Number of seeds (0..N-1): initialisation, example order, control labels.")


@dataclass(frozen=True, kw_only=True)
class SplitOptions(Options):
    """The item split of the trained probes: seeded and tag-stratified, or from a file."""

    panel = "Item split"
    rank = 30

    test_size: int | float = option(
        0.25, parse=count_or_fraction, check=check_test_size, metavar="N|F",
        help="Test items: a count (100) or a fraction (0.25).",
    )
    split_seed: int = option(0, check=check_seed, help="Seed of the item split.")
    stratify: tuple[str, ...] | None = option(
        None, parse=names, metavar="A,B", help="Tag families to stratify on (default: collapsed_tag,num_main_preds where present).",
    )
    split_file: Path | None = option(
        None, role="input", help='JSON {"train": [ids], "test": [ids]} instead of a seeded split.',
    )


@dataclass(frozen=True, kw_only=True)
class MLPOptions(Options):
    """The MLP probes' hyperparameters (see :class:`~vlprobe.probes.MLPProbe`)."""

    panel = "MLP probe"
    rank = 40

    depth: int = option(4, check=check_positive_int, help="Linear layers of the MLP.")
    width: int = option(1024, check=check_positive_int, help="Hidden width.")
    lr: float = option(1e-4, check=check_positive_float, help="Adam learning rate.")
    epochs: int = option(200, check=check_positive_int, help="Training epochs.")
    batch_size: int = option(200, check=check_positive_int, help="Examples per training batch.")
    device: str = option(
        "auto", check=check_device, role="runtime", help="cpu, cuda, cuda:N, mps or auto (the manifest records the one used).",
    )
    threads: int | None = option(
        None, check=check_positive_int, role="runtime",
        help="CPU threads of the training (default: torch's, one per core; on a shared machine give the free "
             "cores: threads waiting on a busy core slow every product; the manifest records the count).",
    )


def check_bootstrap(value: Any, name: str) -> int:
    """Bootstrap resamples: an integer >= 0 (0 = no interval rows)."""
    return check_int(value, name, low=0, meaning=" (0: no intervals)")


@dataclass(frozen=True, kw_only=True)
class BootstrapOptions(Options):
    """Seeded 95% bootstrap intervals."""

    panel = "Bootstrap"
    rank = 50

    bootstrap: int = option(1000, check=check_bootstrap,
                            help="Bootstrap resamples for the 95% intervals (0: no intervals).")
    bootstrap_seed: int = option(0, check=check_seed, help="Seed of the bootstrap resamples.")


@dataclass(frozen=True, kw_only=True)
class BootstrapTestOptions(BootstrapOptions):
    """The bootstrap intervals and the paired sign-flip permutation test of target vs control,
    both seeded by ``bootstrap_seed``."""

    bootstrap_seed: int = BootstrapOptions.redeclare(
        "bootstrap_seed", help="Seed of the bootstrap resamples and of the permutation test.",
    )
    permutations: int = option(
        10_000, check=check_positive_int,
        help="Sign flips of the target-vs-control permutation test (all 2^items when fewer).",
    )


@dataclass(frozen=True, kw_only=True)
class ProgressOption(Options):
    """Progress on stderr: what a run will compute, then a bar with an ETA (results never go there)."""

    progress: bool = option(True, role="runtime", off=("--quiet", "-q"), help="Progress on stderr (off with --quiet).")


def check_shard(value: str, param: str) -> str:
    """``K/N`` (0 <= K < N) or ``auto`` (:func:`vlprobe.shards.resolve_shard` reads it from the
    launcher when the run starts)."""
    from vlprobe.shards import parse_shard

    text = str(value).strip()
    if text.lower() == "auto":
        return "auto"
    parse_shard(text)
    return text


@dataclass(frozen=True, kw_only=True)
class ShardOption(Options):
    """Which block of a run's rows this process runs (:mod:`vlprobe.shards`), declared once for
    every sharded command (``probe extract``, ``probe regions extract``, ``probe eval``); each
    says in its help which file a shard writes and what joins them."""

    shard: str = option(
        "0/1", check=check_shard, role="runtime",
        help="Run block K of N (K/N), or auto: K/N from Slurm, torchrun, accelerate or MPI.",
    )


@dataclass(frozen=True, kw_only=True)
class ResultsOptions(Options):
    """Where the results go and the label that names them."""

    out: Path = option(Path("results"), help="Results folder; writes OUT/{experiment}/<name>.csv and manifest.json.",
                       role="output")
    name: str | None = option(
        None, role="output",
        help="Results label: names the run and its files (default: the input's model name).",
    )


@dataclass(frozen=True, kw_only=True)
class MLPProbeRunOptions(CacheInput, StateOptions, SeedsOption, SplitOptions, MLPOptions, BootstrapTestOptions,
                         ProgressOption, ResultsOptions):
    """Every group of an experiment that trains MLP probes on a cache's states, target and control
    per seed, on an item split, with bootstrap intervals and the permutation test (task adaptation,
    the variant probe: what :func:`~vlprobe.experiments.mlp_runs.train_probes` reads)."""
