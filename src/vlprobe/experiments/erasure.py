"""Concept erasure with LEACE, fed back into the model (``probe run erasure``).

The probes find, at some layer, what tells an item's two captions apart. Does the model *use* it?
LEACE (Belrose, Schneider-Joseph, Ravfogel, Cotterell, Raff & Biderman 2023, "LEACE: Perfect
linear concept erasure in closed form"; the ``concept-erasure`` package) fits, at one layer of
the text tower, the least-squares-optimal affine map after which no linear classifier can tell
the concept's classes apart better than a constant (the class-conditional means become equal).
The map is applied to every token state of that layer while the model runs on (a forward hook,
:mod:`vlprobe.extract.models.hooks`), and the model's own benchmark scores are compared with
and without it.

The concept is the caption's side of its minimal pair: ``0`` for Winoground's caption 0, SugarCrepe's
positive and VALSE's caption, ``1`` for the other one; the eraser is fitted on the token states
(real tokens only) of every item's two captions at the layer. The control erases a concept with
the same class sizes but the labels of a seeded half of the items swapped (``seeds``), so the
difference between target and control is what erasing the minimal-pair direction costs beyond
erasing an arbitrary direction of the same kind. The eraser is fitted and evaluated on the same
items (erasure is a transformation of the states, not a prediction).

Dual encoders (CLIP, SigLIP; BLIP-ITM with ``score_head=itc``): the text tower, from the erased
layer on. Cross-encoders (LXMERT ``lang``,
UNITER's ``text`` view, BLIP-ITM's ``pair`` stream): the text side's states depend on the image,
so the eraser is fitted on every pair's text-token states (each caption with each of its item's
images) and applied to the text positions while the model's plain pass runs on. Generative
models (LLaVA, Qwen2-VL): the same at the caption's tokens (stream ``caption``) of each pair's joint
sequence, wherever they sit. Rows (``OUT/erasure/``): per layer
(and ``layer`` empty for the unedited model, ``probe`` = ``none``), ``probe`` = ``leace``, task =
target | control (per seed): Winoground ``text``, ``image``, ``group``; SugarCrepe and VALSE
``accuracy`` (the caption scored above its foil); percentages with 95% bootstrap intervals over
items (one index set for every row: paired). ``manifest.json`` holds the config and fingerprints.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vlprobe.experiments.minimal_pairs import (
    PairModelOptions,
    editable_streams,
    load_pair_model,
    pair_label,
    pair_regions,
    tower_scores,
)
from vlprobe.extract.models.hooks import edited_layers
from vlprobe.layers import parse_layers, stream_part
from vlprobe.progress import progress_bar, say
from vlprobe.runs.charts import WINOGROUND_CHANCE, Chart
from vlprobe.runs.declare import Experiment, option
from vlprobe.runs.option_groups import (
    BootstrapOptions,
    ProgressOption,
    ResultsOptions,
    SeedsOption,
    check_layer_spec,
)
from vlprobe.runs.printout import wrote_line
from vlprobe.runs.units import units_of
from vlprobe.runs.writing import RunRows, RunSlot
from vlprobe.stats.metrics import (
    bootstrap_indices,
    ci95_rows,
    pair_correct,
    winoground_outcomes,
)

__all__ = ["EXPERIMENT", "ErasureConfig", "fit_token_eraser", "run_erasure"]



@dataclass(frozen=True, kw_only=True)
class ErasureConfig(PairModelOptions, SeedsOption, BootstrapOptions, ProgressOption, ResultsOptions):
    """One run: a model and a benchmark in, ``OUT/erasure/`` out.

    Attributes
    ----------
    model, checkpoint : str
        A registered model whose adapter names its layer sites (``clip``, ``siglip``, ``lxmert``,
        ``uniter``, ``blip-itm``, ``llava``, ``qwen2-vl``) and its checkpoint.
    dataset, data_dir, subsets, limit, image_dir, image_root, regions
        The benchmark, its items and the region features of cross-encoders that read them.
    layers : str
        Layers of the text side to erase at, one at a time.
    seeds : int
        Control concepts (seeds 0..seeds-1).
    """

    layers: str = option("all", check=check_layer_spec, help="Text-side layers to erase at, one at a time: all | 0,4,-1 | 2:6.")
    seeds: int = SeedsOption.redeclare("seeds", 1, help="Control concepts (seeds 0..N-1).")


def fit_token_eraser(states: list[torch.Tensor], masks: list[torch.Tensor], labels: torch.Tensor,
                     device: torch.device | str = "cpu") -> Any:
    """A LEACE eraser fitted on the real tokens' states of every text.

    Parameters
    ----------
    states : list of Tensor, each shape (B_b, T_b, H)
        Per batch of texts, in order (batches may differ in token count).
    masks : list of Tensor, each shape (B_b, T_b)
        1 for real tokens.
    labels : Tensor of int, shape (sum B_b,)
        The concept class of each text (broadcast to its tokens).
    device : torch.device or str
        Where the eraser is applied (the model's device; it is fitted in float64 on the CPU).

    Returns
    -------
    concept_erasure.LeaceEraser
        Callable on states of shape (..., H).
    """
    from concept_erasure import LeaceEraser

    X, z, start = [], [], 0
    for h, m in zip(states, masks, strict=True):
        keep = m.bool()
        X.append(h[keep])
        z.append(labels[start:start + len(h), None].expand(keep.shape)[keep])
        start += len(h)
    eraser = LeaceEraser.fit(torch.cat(X).double(), torch.cat(z).long())
    return dataclasses.replace(eraser, proj_left=eraser.proj_left.to(device), proj_right=eraser.proj_right.to(device),
                               bias=None if eraser.bias is None else eraser.bias.to(device))


def _recorder(store: dict[int, torch.Tensor], layer: int) -> Any:
    """An identity edit that keeps a CPU float32 copy of the layer's states in ``store[layer]``."""
    def keep(h: torch.Tensor) -> torch.Tensor:
        store[layer] = h.detach().float().cpu()
        return h
    return keep


def _text_states(adapter: Any, texts: list[str], layers: list[int], batch_size: int) -> tuple[dict[int, list], list]:
    """Token states of every text at ``layers`` (recorded by hooks), per batch, with the masks."""
    sites = adapter.layer_sites("text")
    states: dict[int, list[torch.Tensor]] = {layer: [] for layer in layers}
    masks = []
    for a in range(0, len(texts), batch_size):
        batch = texts[a:a + batch_size]
        got: dict[int, torch.Tensor] = {}
        with edited_layers(sites, {layer: _recorder(got, layer) for layer in layers}):
            adapter.encode("text", batch, [0])
        _, mask = adapter.tokens(batch)
        masks.append(mask)
        for layer in layers:
            states[layer].append(got[layer])
    return states, masks


def _erased_pooled(adapter: Any, texts: list[str], layer: int, eraser: Any, batch_size: int) -> np.ndarray:
    """Pooled text embeddings with ``eraser`` applied to every token state of ``layer``, (N, D)."""
    sites = adapter.layer_sites("text")

    def erase(h: torch.Tensor) -> torch.Tensor:
        return eraser(h.double()).to(h.dtype)

    out = []
    with edited_layers(sites, {layer: erase}):
        for a in range(0, len(texts), batch_size):
            out.append(adapter.encode("text", texts[a:a + batch_size], [0]).pooled.float().cpu().numpy())
    return np.concatenate(out)


class _DualRuns:
    """A dual encoder's text tower run with an edit, scored against the unedited image tower (also
    BLIP-ITM scoring with its ITC head: its unimodal text tower)."""

    def __init__(self, adapter: Any, items: list[Any], n_img: int, batch_size: int) -> None:
        self.adapter, self.n, self.batch_size = adapter, len(items), batch_size
        self.texts = [it.captions[k].text for k in (0, 1) for it in items]  # caption k of item i at k * n + i
        self.labels = torch.tensor([k for k in (0, 1) for _ in items])
        self.owner = np.tile(np.arange(self.n), 2)
        with torch.inference_mode():
            self.img = np.concatenate([adapter.encode("image", [it.images[j].load(rgb=adapter.rgb_on_load) for it in items], [0]).pooled
                                       .float().cpu().numpy() for j in range(n_img)])  # image j of item i at j * n + i
        self.n_img = n_img

    def states(self, layers: list[int]) -> tuple[dict[int, list[torch.Tensor]], list[torch.Tensor]]:
        with torch.inference_mode():
            return _text_states(self.adapter, self.texts, layers, self.batch_size)

    def scores(self, layer: int | None = None, eraser: Any = None) -> np.ndarray:
        """s[i, k, j]: caption k of item i with its image j, (N, 2, n_img)."""
        with torch.inference_mode():
            if eraser is None:
                txt = np.concatenate([self.adapter.encode("text", self.texts[a:a + self.batch_size], [0]).pooled
                                      .float().cpu().numpy() for a in range(0, len(self.texts), self.batch_size)])
            else:
                txt = _erased_pooled(self.adapter, self.texts, int(layer), eraser, self.batch_size)  # type: ignore[arg-type]
        n, d = self.n, txt.shape[-1]
        t = txt.reshape(2, n, d).transpose(1, 0, 2)[:, :, None, :]  # (N, 2, 1, D)
        i = self.img.reshape(self.n_img, n, d).transpose(1, 0, 2)[:, None, :, :]  # (N, 1, n_img, D)
        return tower_scores(self.adapter, i, t)


class _CrossRuns:
    """A cross-encoder's pairs (caption k of item i with its image j) through its plain pass, the
    text side's states edited at one layer (the text positions only of a joint sequence)."""

    def __init__(self, adapter: Any, items: list[Any], n_img: int, batch_size: int, store: Any, stream: str) -> None:
        from vlprobe.extract.scoring import ImageSource

        self.adapter, self.n, self.n_img, self.batch_size = adapter, len(items), n_img, batch_size
        self.stream = stream
        self.sites = adapter.layer_sites(stream)
        self.text_table = adapter.prepare_texts([it.captions[k].text for it in items for k in (0, 1)])
        refs = [it.images[j] for it in items for j in range(n_img)]
        self.image_table = adapter.prepare_images(ImageSource.for_adapter(adapter, refs, store).read(np.arange(len(refs))))
        i, k, j = np.meshgrid(np.arange(self.n), np.arange(2), np.arange(n_img), indexing="ij")
        self.t_idx, self.i_idx = (2 * i + k).ravel(), (n_img * i + j).ravel()  # pairs in (N, 2, n_img) order
        self.labels = torch.from_numpy(k.ravel().copy())
        self.owner = i.ravel()

    def _batches(self) -> list[slice]:
        return [slice(a, min(a + self.batch_size, len(self.t_idx))) for a in range(0, len(self.t_idx), self.batch_size)]

    def _run(self, sl: slice, edits: dict[int, Any]) -> np.ndarray:
        with torch.inference_mode(), edited_layers(self.sites, edits):
            return self.adapter.plain_pair_scores(self.text_table, self.image_table, self.t_idx[sl],
                                                  self.i_idx[sl]).float().cpu().numpy()

    def _positions(self, sl: slice) -> tuple[torch.Tensor, torch.Tensor]:
        """(mask (B, W) of the text tokens, index (B, W) of each in the pass's sequence, -1: none) of a
        batch: the first W positions (LXMERT's language side, UNITER's text before its regions), or
        a generative model's caption tokens wherever they sit in its joint sequence."""
        if hasattr(self.adapter, "stream_positions"):
            at = self.adapter.stream_positions(self.stream, self.text_table, self.image_table, self.t_idx[sl],
                                               self.i_idx[sl])
            return at.mask, at.index
        _, mask = self.text_table.take(self.t_idx[sl])
        return mask, torch.arange(mask.shape[1]).expand(mask.shape[0], -1)

    def states(self, layers: list[int]) -> tuple[dict[int, list[torch.Tensor]], list[torch.Tensor]]:
        states: dict[int, list[torch.Tensor]] = {layer: [] for layer in layers}
        masks = []
        for sl in self._batches():
            mask, index = self._positions(sl)
            got: dict[int, torch.Tensor] = {}
            self._run(sl, {layer: _recorder(got, layer) for layer in layers})
            masks.append(mask)
            rows = torch.arange(len(index))[:, None]
            for layer in layers:
                states[layer].append(got[layer][rows, index.clamp(min=0)])  # the text positions of the sequence
        return states, masks

    def scores(self, layer: int | None = None, eraser: Any = None) -> np.ndarray:
        out = []
        for sl in self._batches():
            _, index = self._positions(sl)

            def erase(h: torch.Tensor, index: torch.Tensor = index) -> torch.Tensor:
                r, p = torch.nonzero(index >= 0, as_tuple=True)
                r, at = r.to(h.device), index[r, p].to(h.device)
                h = h.clone()
                h[r, at] = eraser(h[r, at].double()).to(h.dtype)
                return h

            out.append(self._run(sl, {} if eraser is None else {int(layer): erase}))  # type: ignore[arg-type]
        return np.concatenate(out).reshape(self.n, 2, self.n_img)


def run_erasure(config: ErasureConfig) -> tuple[Path, Path, list[dict[str, Any]]]:
    """Run the experiment and write its outputs (module docstring; :meth:`Experiment.run`).

    Returns
    -------
    csv_path, manifest_path : Path
    rows : list of dict
    """
    return EXPERIMENT.run(config)


def compute_erasure(config: ErasureConfig, slot: RunSlot) -> RunRows:
    """Erase the concept at every layer, target and controls: tidy rows and the manifest's entries."""
    from contextlib import ExitStack

    adapter, cross, label, items, inputs = load_pair_model(config, EXPERIMENT, minimum=2)
    stream = editable_streams(adapter)[0]
    layers = parse_layers(stream_part(config.layers, stream, [stream]), adapter.streams[stream].n_layers, param="layers")
    n = len(items)
    n_img = 2 if config.dataset == "winoground" else 1
    with ExitStack() as stack:
        store = None
        if cross and adapter.image_input == "regions":
            store = stack.enter_context(pair_regions(config, adapter, items, n_img, inputs))
        runs: _DualRuns | _CrossRuns = (_CrossRuns(adapter, items, n_img, config.batch_size, store, stream) if cross
                                        else _DualRuns(adapter, items, n_img, config.batch_size))
        states, masks = runs.states(layers)
        base_scores = runs.scores()
    idx = bootstrap_indices(n, config.bootstrap, config.bootstrap_seed)
    seeds = list(range(config.seeds))

    def metrics(s_item: np.ndarray) -> dict[str, np.ndarray]:
        """Per-item 0/1 outcomes of every metric from scores s_item[i, k, j] (caption k, image j)."""
        if config.dataset == "winoground":
            return {m: v.astype(np.float64) for m, v in winoground_outcomes(s_item).items() if m != "matching"}
        return {"accuracy": pair_correct(s_item[:, 0, 0], s_item[:, 1, 0]).astype(np.float64)}

    base = {"experiment": EXPERIMENT.name, "model": label, "stream": stream, "pooling": "" if cross else "pooled",
            "split": "all", "subset": "all", "n": n}
    rows: list[dict[str, Any]] = []

    def add(outcomes: dict[str, np.ndarray], row: dict[str, Any]) -> None:
        for metric, v in outcomes.items():
            rows.append({**row, "metric": metric, "value": float(100.0 * v.mean())})
            rows.extend(ci95_rows(row, metric, 100.0 * v[idx].mean(axis=1)))

    add(metrics(base_scores), {**base, "layer": None, "probe": "none", "task": "target", "seed": None})
    say(config.progress, f"{EXPERIMENT.name}: {config.model} on {n} {config.dataset} items, stream {stream}: "
                         f"{len(layers) * (1 + len(seeds))} LEACE fits and runs on ({len(layers)} layers x target + "
                         f"{len(seeds)} control(s)) on {adapter.device}")
    kinds = adapter.streams[stream].layer_kinds
    z = runs.labels
    with progress_bar(config.progress, len(layers) * (1 + len(seeds)), EXPERIMENT.name, "fit") as bar:
        for layer in layers:
            fits: list[tuple[str, int | None, torch.Tensor]] = [("target", None, z)]
            for seed in seeds:
                swapped = np.random.default_rng([seed, 2]).permutation(n)[: n // 2]
                flip = torch.from_numpy(np.isin(runs.owner, swapped))
                fits.append(("control", seed, torch.where(flip, 1 - z, z)))  # the half's captions trade classes
            for task, fit_seed, labels in fits:
                eraser = fit_token_eraser(states[layer], masks, labels, device=adapter.device)
                add(metrics(runs.scores(layer, eraser)), {**base, "layer": layer, "kind": kinds[layer],
                                                          "probe": "leace", "task": task, "seed": fit_seed})
                bar.update()
    return RunRows(rows, inputs, seeds=seeds, extra={
        "model": label, "n_items": n, "stream": stream, "layers": layers,
        "score_kind": getattr(adapter, "score_kind", ""), "device": str(adapter.device),
        "eraser": "LEACE (concept-erasure LeaceEraser), fitted per layer on the real tokens' states of every "
                  "item's two captions; applied to every token state of that layer while the text tower runs on"
                  if not cross else
                  "LEACE (concept-erasure LeaceEraser), fitted per layer on the real text tokens' states of every "
                  "pair (each caption with each of its item's images); applied to every text position of that "
                  "layer while the model's plain pass runs on, the region positions left alone",
        "concept": "0: Winoground caption 0 / SugarCrepe positive / VALSE caption; 1: the other caption",
        "control": "the same concept with the two captions of half the items (numpy default_rng([seed, 2])) "
                   "trading classes",
        "bootstrap": {"resamples": config.bootstrap, "seed": config.bootstrap_seed, "level": 0.95,
                      "kind": "percentile; items resampled; one index set for every row"},
        "units": units_of(rows),
    })


def report(config: ErasureConfig, result: tuple[Path, Path, list[dict[str, Any]]]) -> list[str]:
    """The unedited model's scores, then per erased layer the target concept's; then the files written."""
    csv_path, _, rows = result
    lines = [f"{'unedited' if r['layer'] is None else 'erased at layer ' + str(r['layer']):<22} {r['metric']:<9} "
             f"{r['value']:6.2f}" for r in rows if "." not in r["metric"] and r["task"] == "target"]
    return [*lines, wrote_line(csv_path)]


# Version 2: settings-keyed run names and setting columns; cross-encoders.
EXPERIMENT = Experiment("erasure", 2, ErasureConfig, compute_erasure, report, label=pair_label, swept=("layers", "seeds"),
                        chart=Chart("layers", ("group", "accuracy", "text", "image"), split="all",
                                    chance={**WINOGROUND_CHANCE, "accuracy": 50.0}, reference="none"))
