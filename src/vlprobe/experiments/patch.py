"""Activation patching on each benchmark's minimal pairs (``probe run patch``).

Where in the model does the difference between an item's two captions (Winoground caption 0/1,
SugarCrepe positive/negative, VALSE caption/foil) decide the image-text score? For every item
and direction, the model runs on one caption (the *recipient*) with some of one layer's states
taken from the other caption (the *donor*), and the image-text score is compared with the
recipient's own and the donor's (:mod:`vlprobe.extract.patching`):

* ``full_change`` = mean of |score(donor) - score(recipient)|, what patching everything gives;
* ``score_change`` = mean of (score(patched) - score(recipient)) x sign(score(donor) -
  score(recipient)): the move toward the donor's score (each case oriented, since the two
  directions of an item would otherwise cancel);
* ``recovered`` = score_change / full_change (ratio of the means; 1: that layer's states at those
  positions carry the whole difference, 0: none of it).

Per stream, layer and position group (column ``probe`` = ``positions=<group>``): ``all`` tokens,
the ``swapped`` ones (where the two captions' token sequences differ: the swapped words), the
``rest``, and ``cls`` (the summary position: CLIP's EOS). The token-wise groups need the two
captions to have the same token count (a word swap has); items without are left out of them
(``n`` counts the cases used). A case is one (item, direction, image); the image tower of a dual
encoder (Winoground only: two images) swaps images instead, the caption fixed, with the groups
``all`` and ``cls`` (the class token).

Dual encoders (CLIP, SigLIP; BLIP-ITM with ``score_head=itc``, its ITC towers): the text tower,
and the image tower on Winoground, scored with the model's own score of the pooled embeddings.
Cross-encoders: LXMERT ``lang`` and ``vision``, UNITER's ``text`` and ``image`` views, BLIP-ITM's
``pair`` stream (``score_head=itm``). Generative models (LLaVA, Qwen2-VL; VQAScore): their
language model's layers at the caption's tokens (``caption``; ``cls`` = its last token), at every
token (``joint``; ``cls`` = the answer position), both with the captions swapped, and at the image
tokens (``image``, Winoground); each stream's positions are found in every pair's joint sequence.
Subsets: ``all`` and the
bag-of-words slices (``bow=same`` / ``bow=different``, :mod:`vlprobe.data.bow`). 95% bootstrap
intervals resample items (``bootstrap``, ``bootstrap_seed``). Outputs in ``OUT/patch/``:
``<model>.csv`` (tidy, split ``all``) and ``manifest.json``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vlprobe.data.bow import bow_masks, bow_tag
from vlprobe.experiments.minimal_pairs import (
    PairModelOptions,
    editable_streams,
    load_pair_model,
    pair_label,
    pair_regions,
    text_side_streams,
    tower_scores,
)
from vlprobe.extract.patching import POSITION_GROUPS, joint_sources, patched_run, position_sources
from vlprobe.layers import parse_layers, stream_part
from vlprobe.progress import progress_bar, say
from vlprobe.runs.charts import Chart
from vlprobe.runs.declare import Experiment, names, option
from vlprobe.runs.option_groups import (
    BootstrapOptions,
    ProgressOption,
    ResultsOptions,
    check_layer_spec,
)
from vlprobe.runs.printout import wrote_line
from vlprobe.runs.units import units_of
from vlprobe.runs.writing import RunRows, RunSlot
from vlprobe.stats.metrics import bootstrap_indices, ci95_rows
from vlprobe.validation import InputError

__all__ = ["EXPERIMENT", "PatchConfig", "run_patch"]

#: Position groups of an image tower with a class token (patch 0: CLIP, BLIP's ITC tower).
IMAGE_GROUPS = ("all", "cls")
#: Position groups of an image side without one (a cross-encoder's regions, SigLIP's patches).
CROSS_IMAGE_GROUPS = ("all",)
#: Items whose regions a cross-encoder run holds at once.
ITEM_BLOCK = 64


@dataclass(frozen=True, kw_only=True)
class PatchConfig(PairModelOptions, BootstrapOptions, ProgressOption, ResultsOptions):
    """One run: a model and a benchmark in, ``OUT/patch/`` out.

    Attributes
    ----------
    model, checkpoint : str
        A registered model whose adapter names its layer sites (``clip``, ``siglip``, ``lxmert``,
        ``uniter``, ``blip-itm``, ``llava``, ``qwen2-vl``) and its checkpoint; ``model_config``, ``tokenizer``,
        ``model_options`` load it as ``probe extract`` does.
    dataset, data_dir, subsets, limit, image_dir, image_root
        The benchmark and its items (``limit``: SugarCrepe / VALSE per subset, as their loaders count).
    regions : Path, optional
        Region features of the dataset's images (cross-encoders that read regions: LXMERT, UNITER).
    streams : tuple of str, optional
        Default: the text side (CLIP/SigLIP ``text``, LXMERT ``lang``, UNITER ``text``, BLIP-ITM
        ``pair``, or ``text`` with ``score_head=itc``; generative ``caption`` and ``joint``) and, on Winoground, the image side where
        the adapter can edit it (``image``; LXMERT ``vision``).
    layers : str
        Layer spec per stream (``all``, ``0,4,-1``, ``lang=all;vision=-1``).
    groups : tuple of str
        Position groups (``all``, ``swapped``, ``rest``, ``cls``).
    batch_size : int
        Cases per forward pass (each runs recipients and donors together).
    """

    streams: tuple[str, ...] | None = option(
        None, parse=names, metavar="A,B",
        help="Streams to patch (default: the text side, and the image side on Winoground).",
    )
    layers: str = option("all", check=check_layer_spec, help="Layers: all | 0,4,-1 | 2:6 | per stream lang=all;vision=-1.")
    groups: tuple[str, ...] = option(POSITION_GROUPS, parse=names, choices=POSITION_GROUPS, metavar="A,B",
                                     help="Position groups: all, swapped, rest, cls.")


def _chunks(n: int, size: int) -> list[slice]:
    return [slice(a, min(a + size, n)) for a in range(0, n, size)]


def _stream_groups(adapter: Any, stream: str, text_side: bool, groups: Sequence[str]) -> list[str]:
    """The position groups of ``groups`` a stream has: every one on the text side; on an image
    side ``all``, and ``cls`` where the stream has a class token (two images' patches align one to
    one but are not words that match or differ)."""
    if text_side:
        return list(groups)
    has_cls = adapter.streams[stream].modality == "image" and adapter.streams[stream].cls_rule != "none"
    return [g for g in groups if g in (IMAGE_GROUPS if has_cls else CROSS_IMAGE_GROUPS)]


def _tower(adapter: Any, stream: str, pairs: list[tuple[Any, Any]], layers: list[int], groups: Sequence[str],
           batch_size: int, bar: Any) -> tuple[np.ndarray, dict[tuple[int, str], tuple[np.ndarray, np.ndarray]]]:
    """Pooled embeddings of one tower: the originals (2, N, D) [recipient k: member k of pair n, which
    receives from member 1 - k], and per (layer, group) the patched ones (2, N, D) with a (2, N)
    mask of the cases where the group is defined (images: :func:`_stream_groups`)."""
    groups = _stream_groups(adapter, stream, stream == "text", groups)
    n = len(pairs)
    rec = [p[k] for k in (0, 1) for p in pairs]
    don = [p[1 - k] for k in (0, 1) for p in pairs]
    sites = adapter.layer_sites(stream)
    base_parts: list[np.ndarray] = []
    patched_parts: dict[tuple[int, str], tuple[list[np.ndarray], list[np.ndarray]]] = {
        (layer, g): ([], []) for layer in layers for g in groups}
    for sl in _chunks(2 * n, batch_size):
        batch = rec[sl] + don[sl]
        m = sl.stop - sl.start
        first = adapter.encode(stream, batch, [0])
        base_parts.append(first.pooled[:m].float().cpu().numpy())
        if stream == "text":
            ids, mask = adapter.tokens(batch)
            cls = first.cls_index.cpu() if first.cls_index is not None else torch.zeros(2 * m, dtype=torch.long)

        def run(batch: list[Any] = batch) -> torch.Tensor:
            return adapter.encode(stream, batch, [0]).pooled

        for g in groups:
            if stream == "text":
                source, defined = position_sources(ids[:m], ids[m:], mask[:m], mask[m:], g, cls[:m], cls[m:])
            else:
                t = first.hidden.shape[2]
                source = torch.arange(t).repeat(m, 1) if g == "all" else torch.full((m, t), -1, dtype=torch.long)
                if g == "cls":
                    source[:, 0] = 0  # the class token
                defined = torch.ones(m, dtype=torch.bool)
            for layer in layers:
                out = patched_run(run, sites, [layer], source)[:m].float().cpu().numpy()
                patched_parts[(layer, g)][0].append(out)
                patched_parts[(layer, g)][1].append(defined.numpy())
                bar.update(m)
    base = np.concatenate(base_parts).reshape(2, n, -1)
    patched = {key: (np.concatenate(v[0]).reshape(2, n, -1), np.concatenate(v[1]).reshape(2, n))
               for key, v in patched_parts.items()}
    return base, patched


def _case_scores(own: np.ndarray, donor: np.ndarray, patched: np.ndarray, defined: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Per case (any shape): the move toward the donor's score, and the full change (NaN where undefined)."""
    sign = np.sign(donor - own)  # orient each case toward its donor
    change = np.where(defined, (patched - own) * sign, np.nan)
    full = np.where(defined, np.abs(donor - own), np.nan)
    return change, full


def _dual_patch(adapter: Any, config: PatchConfig, items: list[Any], streams: list[str],
                layer_sets: dict[str, list[int]], bar: Any) -> dict[tuple[str, int, str], tuple[np.ndarray, np.ndarray]]:
    """A dual encoder's cases, (stream, layer, group) -> (change, full) of shape (2, N, J)."""
    captions = [(it.captions[0].text, it.captions[1].text) for it in items]
    n_img = 2 if config.dataset == "winoground" else 1
    pil = [tuple(it.images[j].load(rgb=adapter.rgb_on_load) for j in range(n_img)) for it in items]
    with torch.inference_mode():
        img_emb = np.stack([adapter.encode("image", [p[j] for p in pil], [0]).pooled.float().cpu().numpy()
                            for j in range(n_img)])  # (n_img, N, D)
        txt_emb = np.stack([adapter.encode("text", [c[k] for c in captions], [0]).pooled.float().cpu().numpy()
                            for k in (0, 1)])  # (2, N, D)
    out = {}
    for s in streams:
        inputs: list[Any] = captions if s == "text" else pil
        base, patched = _tower(adapter, s, inputs, layer_sets[s], config.groups, config.batch_size, bar)
        # text: score[k, n, j], recipient caption k of item n with image j; image: score[j, n, k]
        other = (img_emb if s == "text" else txt_emb).transpose(1, 0, 2)[None]
        own = tower_scores(adapter, base[:, :, None, :], other)
        for (layer, group), (emb, defined) in patched.items():
            out[(s, layer, group)] = _case_scores(own, own[::-1], tower_scores(adapter, emb[:, :, None, :], other),
                                                  np.broadcast_to(defined[:, :, None], own.shape))
    return out


def _cross_cases(n_items: int, n_img: int, text_side: bool) -> tuple[np.ndarray, ...]:
    """Recipient and donor (text row, image row) of every case, flattened from shape (2, N, J).

    Text rows: caption k of item n at ``2n + k``; image rows: image j of item n at ``n_img n + j``.
    Text side: case (k, n, j) is caption k with image j receiving from caption 1 - k; image side
    (Winoground): case (j, n, k) is image j with caption k receiving from image 1 - j.
    """
    a, n, b = np.meshgrid(np.arange(2), np.arange(n_items), np.arange(n_img if text_side else 2), indexing="ij")
    if text_side:
        img = n * n_img + b
        return (2 * n + a).ravel(), img.ravel(), (2 * n + 1 - a).ravel(), img.ravel()
    txt = 2 * n + b
    return txt.ravel(), (n * n_img + a).ravel(), txt.ravel(), (n * n_img + 1 - a).ravel()


def _cross_patch(adapter: Any, config: PatchConfig, items: list[Any], streams: list[str], text_streams: list[str],
                 layer_sets: dict[str, list[int]], store: Any, bar: Any
                 ) -> dict[tuple[str, int, str], tuple[np.ndarray, np.ndarray]]:
    """A cross-encoder's cases (every recipient and donor is an image-caption pair run through
    the adapter's plain pass), (stream, layer, group) -> (change, full) of shape (2, N, J)."""
    from vlprobe.extract.scoring import ImageSource

    n_img = 2 if config.dataset == "winoground" else 1
    parts: dict[tuple[str, int, str], list[tuple[np.ndarray, np.ndarray]]] = {}
    for lo in range(0, len(items), ITEM_BLOCK):  # hold the regions of a block of items at a time
        block = items[lo:lo + ITEM_BLOCK]
        texts = adapter.prepare_texts([it.captions[k].text for it in block for k in (0, 1)])
        refs = [it.images[j] for it in block for j in range(n_img)]
        images = adapter.prepare_images(ImageSource.for_adapter(adapter, refs, store).read(np.arange(len(refs))))
        for s in streams:
            text_side = s in text_streams
            groups = _stream_groups(adapter, s, text_side, config.groups)
            rec_t, rec_i, don_t, don_i = _cross_cases(len(block), n_img, text_side)
            shape = (2, len(block), n_img if text_side else 2)
            own, donor = np.empty(rec_t.shape), np.empty(rec_t.shape)
            got = {(layer, g): (np.empty(rec_t.shape), np.zeros(rec_t.shape, dtype=bool))
                   for layer in layer_sets[s] for g in groups}
            sites = adapter.layer_sites(s)
            for sl in _chunks(len(rec_t), config.batch_size):
                m = sl.stop - sl.start
                t_idx = np.concatenate([rec_t[sl], don_t[sl]])
                i_idx = np.concatenate([rec_i[sl], don_i[sl]])

                def run(t_idx: np.ndarray = t_idx, i_idx: np.ndarray = i_idx, texts: Any = texts,
                        images: Any = images) -> torch.Tensor:
                    return adapter.plain_pair_scores(texts, images, t_idx, i_idx)

                with torch.inference_mode():
                    first = run().float().cpu().numpy()
                own[sl], donor[sl] = first[:m], first[m:]
                at = None
                if hasattr(adapter, "stream_positions"):  # a view of a joint sequence at varying positions
                    at = adapter.stream_positions(s, texts, images, t_idx, i_idx)
                    ids, mask, zero = at.ids, at.mask, at.cls
                elif text_side:
                    ids, mask = texts.take(t_idx)
                    zero = torch.zeros(2 * m, dtype=torch.long)  # the summary token of BERT-style text: 0
                else:
                    mask = images.mask[torch.from_numpy(i_idx)].long()
                    ids, zero = mask, None
                for g in groups:
                    source, defined = position_sources(ids[:m], ids[m:], mask[:m], mask[m:], g,
                                                       None if zero is None else zero[:m],
                                                       None if zero is None else zero[m:])
                    if at is not None:
                        source = joint_sources(source, at.index[:m], at.index[m:], at.width)
                    for layer in layer_sets[s]:
                        with torch.inference_mode():
                            out = patched_run(run, sites, [layer], source)[:m].float().cpu().numpy()
                        got[(layer, g)][0][sl] = out
                        got[(layer, g)][1][sl] = defined.numpy()
                        bar.update(m)
            for (layer, g), (scores, ok) in got.items():
                parts.setdefault((s, layer, g), []).append(_case_scores(
                    own.reshape(shape), donor.reshape(shape), scores.reshape(shape), ok.reshape(shape)))
    return {key: (np.concatenate([c for c, _ in v], axis=1), np.concatenate([f for _, f in v], axis=1))
            for key, v in parts.items()}


def run_patch(config: PatchConfig) -> tuple[Path, Path, list[dict[str, Any]]]:
    """Run the experiment and write its outputs (module docstring; :meth:`Experiment.run`).

    Returns
    -------
    csv_path, manifest_path : Path
    rows : list of dict
    """
    return EXPERIMENT.run(config)


def compute_patch(config: PatchConfig, slot: RunSlot) -> RunRows:
    """Patch every stream, layer and position group: tidy rows and the manifest's entries."""
    adapter, cross, label, items, inputs = load_pair_model(config, EXPERIMENT)
    if getattr(adapter, "score", "vqascore") != "vqascore":
        raise InputError(f"model_options: patch reads {config.model}'s VQAScore (score=vqascore); with "
                         f"score={adapter.score} each caption scores its own tokens, so a donor's states cannot give "
                         "the donor's score")
    editable = editable_streams(adapter)
    text_streams = text_side_streams(adapter, editable)
    streams = list(config.streams) if config.streams else (
        editable if config.dataset == "winoground" else text_streams)
    for s in streams:
        if s not in adapter.streams:
            raise InputError(f"streams: {config.model} has streams {', '.join(adapter.streams)}, got {s!r}")
        if s not in text_streams and config.dataset != "winoground":
            raise InputError(f"streams: the {s} stream swaps an item's two images; {config.dataset} has one")
        adapter.layer_sites(s)  # refuses a stream the adapter cannot edit
    layer_sets = {s: parse_layers(stream_part(config.layers, s, streams), adapter.streams[s].n_layers,
                                  param=f"layers[{s}]") for s in streams}
    total = sum(2 * len(items) * (2 if config.dataset == "winoground" else 1) * len(layer_sets[s])
                * len(_stream_groups(adapter, s, s in text_streams, config.groups)) for s in streams)
    say(config.progress, f"{EXPERIMENT.name}: {config.model} on {len(items)} {config.dataset} items, streams "
                         f"{', '.join(streams)}: {total} patched runs (cases x layers x position groups), batch "
                         f"{config.batch_size}, on {adapter.device}")
    with progress_bar(config.progress, total, EXPERIMENT.name, "case") as bar:
        if cross and adapter.image_input == "regions":
            with pair_regions(config, adapter, items, 2 if config.dataset == "winoground" else 1, inputs) as store:
                cases = _cross_patch(adapter, config, items, streams, text_streams, layer_sets, store, bar)
        elif cross:
            cases = _cross_patch(adapter, config, items, streams, text_streams, layer_sets, None, bar)
        else:
            cases = _dual_patch(adapter, config, items, streams, layer_sets, bar)
    tags = [{"bow": bow_tag([it.captions[0].text, it.captions[1].text])} for it in items]
    subsets = {"all": np.ones(len(items), dtype=bool), **bow_masks(tags)}
    rows: list[dict[str, Any]] = []
    for (s, layer, group), (change, full) in cases.items():
        rows += _rows(change, full, subsets, {
            "experiment": EXPERIMENT.name, "model": label, "stream": s, "layer": layer,
            "kind": adapter.streams[s].layer_kinds[layer], "pooling": "pooled" if not cross else "",
            "probe": f"positions={group}", "task": "target", "split": "all"}, config)
    return RunRows(rows, inputs, seeds=[config.bootstrap_seed], extra={
        "model": label, "n_items": len(items), "streams": {s: layer_sets[s] for s in streams},
        "score_kind": getattr(adapter, "score_kind", ""),
        "device": str(adapter.device),
        "pass": ("cross-encoder: every recipient and donor is an image-caption pair through the adapter's plain "
                 "forward pass, its own score read directly") if cross else
                ("dual encoder: the patched tower's pooled embedding, scored against the other tower's unpatched one"),
        "cases": "per item: both directions (caption k receives from caption 1 - k) x every image; image "
                 "stream: image j receives from image 1 - j, with each caption",
        "recovered": "score_change / full_change, ratio of the means over the cases used; each case's change "
                     "signed toward its donor (score_change), full_change = |donor - recipient|",
        "position_groups": {"all": "every token", "swapped": "tokens where the two captions' ids differ",
                            "rest": "tokens where they agree",
                            "cls": "the summary token (CLIP text: EOS; BERT-style text: token 0; CLIP image: patch 0; "
                                   "generative caption: its last token, joint: the answer position)",
                            "requires": "all/swapped/rest: equal token counts (cases without are left out); "
                                        "a cross-encoder's image side: equal region counts, group all only"},
        "bootstrap": {"resamples": config.bootstrap, "seed": config.bootstrap_seed, "level": 0.95,
                      "kind": "percentile; items resampled (all their cases)"},
        "units": units_of(rows),
    })


def _rows(change: np.ndarray, full: np.ndarray, subsets: dict[str, np.ndarray], base: dict[str, Any],
          config: PatchConfig) -> list[dict[str, Any]]:
    """Tidy rows of one (stream, layer, group): means over cases, intervals over items.

    ``change``, ``full``: (2, N, J) per direction, item and image, NaN where the group is undefined.
    """
    out: list[dict[str, Any]] = []
    per_item_change = np.nansum(change, axis=(0, 2))
    per_item_full = np.nansum(full, axis=(0, 2))
    per_item_n = np.isfinite(change).sum(axis=(0, 2))
    for subset, mask in subsets.items():
        cols = np.flatnonzero(mask & (per_item_n > 0))
        row = {**base, "subset": subset, "n": int(per_item_n[cols].sum()), "seed": None}
        if not len(cols):
            out += [{**row, "metric": m, "value": float("nan")} for m in ("score_change", "full_change", "recovered")]
            continue
        idx = cols[bootstrap_indices(len(cols), config.bootstrap, config.bootstrap_seed)]
        c, f, k = per_item_change[cols].sum(), per_item_full[cols].sum(), per_item_n[cols].sum()
        bc, bf, bk = per_item_change[idx].sum(1), per_item_full[idx].sum(1), per_item_n[idx].sum(1)
        with np.errstate(divide="ignore", invalid="ignore"):
            stats = {"score_change": (c / k, bc / bk), "full_change": (f / k, bf / bk),
                     "recovered": (c / f if f else float("nan"), np.where(bf != 0, bc / bf, np.nan))}
        for metric, (value, boot) in stats.items():
            out.append({**row, "metric": metric, "value": float(value)})
            out += ci95_rows(row, metric, np.asarray(boot, dtype=np.float64))
    return out


def report(config: PatchConfig, result: tuple[Path, Path, list[dict[str, Any]]]) -> list[str]:
    """The recovered fraction per stream, layer and position group; then the files written."""
    csv_path, _, rows = result
    lines = [f"{r['stream']:<8} layer {r['layer']!s:>3} {r['probe']:<18} recovered {r['value']:6.3f}  (n={r['n']})"
             for r in rows if r["metric"] == "recovered" and r["subset"] == "all"]
    return [*lines, wrote_line(csv_path)]


# Version 2: settings-keyed run names and setting columns; cross-encoders.
EXPERIMENT = Experiment("patch", 2, PatchConfig, compute_patch, report, label=pair_label,
                        swept=("streams", "layers", "groups"),
                        chart=Chart("layers", ("recovered", "score_change"), split="all", panel="probe", floor=None))
