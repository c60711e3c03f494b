"""Score (image, caption) pairs with any registered model: the one path ``probe eval`` uses.

:func:`load_pair_scorer` turns a registered model name into a :class:`PairScorer`:

* a dual encoder adapter (CLIP; ``Adapter.dual_encoder``): every distinct image and text is
  encoded once, in batches, through the adapter's own ``encode`` (its ``pooled`` output), and pair
  scores come from ``Adapter.scores_from_pooled`` - the same numbers ``probe extract`` stores;
* a cross-encoder (:class:`~vlprobe.extract.models.base.CrossEncoder`: LXMERT, UNITER) reads region
  features, not pixels: every distinct text is tokenised once (``prepare_texts``), the regions of
  the distinct image names are read from the ``regions`` file (``RegionStore``, keyed by the
  normalised ``ImageRef.name``) in blocks of images (``prepare_images``), and each batch of pairs
  is one ``encode_pairs`` call without states - the pass ``probe extract`` runs, so the scores
  equal the ones it stores;
* a blind text-only baseline (:class:`vlprobe.extract.models.blind.TextScorer`): each distinct text is
  scored once and the image is ignored.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vlprobe.data.items import ImageRef
from vlprobe.registry import MODELS
from vlprobe.validation import InputError, check_positive_int

__all__ = ["MATCH_THRESHOLDS", "PairScorer", "load_pair_scorer"]

#: Score kinds with a natural match / no-match threshold (VALSE's binary metrics need one).
#: ``match_probability``: LXMERT's and UNITER's softmax probability that caption and image match.
MATCH_THRESHOLDS: dict[str, float] = {"match_probability": 0.5}
#: Distinct images whose region features are held at once while scoring with a cross-encoder.
IMAGE_BLOCK = 512


@dataclass
class PairScorer:
    """A loaded model that scores (image, text) pairs.

    Attributes
    ----------
    model : str
        Registered name.
    score_kind : str
        What a score is (``cosine``, ``mean_token_logprob``, ...).
    needs_images : bool
        Whether the model reads pixels (every image needs a file).
    fingerprint : str
        The checkpoint's fingerprint ("" when the model has none).
    regions : Path or None
        Region-feature file of a cross-encoder.
    regions_fingerprint : str
        Its fingerprint ("" without one).
    input_fingerprints : dict
        Fingerprints of the model's side inputs (UNITER's ``config``, ``tokenizer``).
    info : dict
        The model's own description (recorded in the manifest).
    """

    model: str
    score_kind: str
    needs_images: bool
    fingerprint: str
    info: dict[str, Any]
    _impl: Any
    _kind: str
    batch_size: int = 32
    regions: Path | None = None
    regions_fingerprint: str = ""
    input_fingerprints: dict[str, str] = field(default_factory=dict)

    def score(self, images: Sequence[ImageRef], texts: Sequence[str]) -> np.ndarray:
        """Scores of the pairs (images[p], texts[p]).

        Parameters
        ----------
        images : sequence of ImageRef, length P
            Ignored by text-only models (may lack files then).
        texts : sequence of str, length P

        Returns
        -------
        ndarray of float64, shape (P,)
        """
        return self.score_with_logits(images, texts)[0]

    def score_with_logits(
        self, images: Sequence[ImageRef], texts: Sequence[str]
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Scores of the pairs, and the raw (no match, match) logits of a binary matching head.

        Returns
        -------
        scores : ndarray of float64, shape (P,)
        logits : ndarray of float64, shape (P, 2), or None
            For cross-encoders whose score is the softmax of two logits (LXMERT, UNITER's ITM
            head); None for every other model.
        """
        if len(images) != len(texts):
            raise InputError(f"images and texts must pair up, got {len(images)} and {len(texts)}")
        if self.needs_images:
            lacking = [im for im in images if im.path is None]
            if lacking:
                raise InputError(
                    f"model {self.model!r} needs images, but {lacking[0].id!r} has no file "
                    "(pass --image-dir for SugarCrepe, --image-root SOURCE=DIR for VALSE)"
                )
        uniq_texts = list(dict.fromkeys(texts))
        t_row = {t: i for i, t in enumerate(uniq_texts)}
        t_idx = np.array([t_row[t] for t in texts], dtype=np.int64)
        if self._kind == "text":
            return self._impl.score_texts(uniq_texts, self.batch_size)[t_idx], None
        if self._kind == "dual":
            uniq_images = list(dict.fromkeys(im.path for im in images))
            i_row = {p: i for i, p in enumerate(uniq_images)}
            i_idx = np.array([i_row[im.path] for im in images], dtype=np.int64)
            by_path = {im.path: im for im in images}
            img = self._pooled(self._streams["image"], [by_path[p] for p in uniq_images], load=True)
            txt = self._pooled(self._streams["text"], uniq_texts, load=False)
            out = np.empty(len(texts), dtype=np.float64)
            # Score in blocks of images so a large benchmark never builds its full I x T matrix.
            for start in range(0, len(uniq_images), 256):
                sel = (i_idx >= start) & (i_idx < start + 256)
                if sel.any():
                    block = type(self._impl).scores_from_pooled(img[start : start + 256], txt)
                    out[sel] = block[i_idx[sel] - start, t_idx[sel]]
            return out, None
        return self._cross_scores([im.name for im in images], uniq_texts, t_idx)

    def _cross_scores(
        self, names: list[str], uniq_texts: list[str], t_idx: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray | None]:
        from vlprobe.extract.regions.boxes import normalise_image_id
        from vlprobe.extract.regions.store import RegionStore

        keys = [normalise_image_id(n) for n in names]
        uniq = list(dict.fromkeys(keys))
        row = {k: i for i, k in enumerate(uniq)}
        i_idx = np.array([row[k] for k in keys], dtype=np.int64)
        first_name = dict(zip(keys, names, strict=True))
        out = np.empty(len(keys), dtype=np.float64)
        logits: np.ndarray | None = np.empty((len(keys), 2), dtype=np.float64)
        with RegionStore(self.regions) as store:  # type: ignore[arg-type]
            store.require([first_name[k] for k in uniq], "the")
            text_table = self._impl.prepare_texts(uniq_texts)
            # Blocks of images bound the memory of a full benchmark (36 x 2048 floats per image).
            for start in range(0, len(uniq), IMAGE_BLOCK):
                stop = min(start + IMAGE_BLOCK, len(uniq))
                regions = store.get(uniq[start:stop])
                image_table = self._impl.prepare_images(regions.features, regions.boxes, regions.mask)
                del regions
                pairs = np.flatnonzero((i_idx >= start) & (i_idx < stop))
                for b in range(0, len(pairs), self.batch_size):
                    sel = pairs[b : b + self.batch_size]
                    got = self._impl.encode_pairs(text_table, image_table, t_idx[sel], i_idx[sel] - start, None, ())
                    out[sel] = got.scores.float().cpu().numpy()
                    if got.logits is None:
                        logits = None
                    elif logits is not None:
                        logits[sel] = got.logits.float().cpu().numpy()
        return out, logits

    @property
    def _streams(self) -> dict[str, str]:
        return {spec.modality: name for name, spec in self._impl.streams.items()}

    def _pooled(self, stream: str, inputs: Sequence[Any], *, load: bool) -> np.ndarray:
        rows = []
        for start in range(0, len(inputs), self.batch_size):
            chunk = inputs[start : start + self.batch_size]
            data = [x.load() for x in chunk] if load else list(chunk)
            pooled = self._impl.encode(stream, data, [0]).pooled
            if pooled is None:
                raise InputError(f"model {self.model!r}: stream {stream!r} has no pooled output to score with")
            rows.append(pooled.float().cpu().numpy())
        return np.concatenate(rows) if rows else np.zeros((0, 0), dtype=np.float32)


def load_pair_scorer(
    model: str, checkpoint: str | None, *, device: str = "cpu", dtype: str = "float32",
    batch_size: int = 32, options: dict[str, Any] | None = None,
    regions: str | os.PathLike[str] | None = None,
) -> PairScorer:
    """Load a registered model as a :class:`PairScorer` (see the module docstring).

    Parameters
    ----------
    model : str
        Registered name (``probe ls models``).
    checkpoint : str or None
        Directory or hub id (None for models without one, e.g. ``caption-length``); UNITER: the
        ``.pt`` file.
    options : dict, optional
        Model-specific options, None values ignored: ``acceptable_label`` for ``blind-grammar``;
        ``model_config`` and ``tokenizer`` for a cross-encoder that declares them (UNITER).
    regions : path, optional
        Region-feature file (vlprobe HDF5) for a cross-encoder; refused for other models.
    """
    from vlprobe.extract.models.base import CrossEncoder
    from vlprobe.extract.models.blind import TextScorer
    from vlprobe.extract.runner import check_load_options

    check_positive_int(batch_size, "batch_size")
    cls = MODELS.get(model)
    opts = {k: v for k, v in (options or {}).items() if v is not None}
    store_fp = ""
    if isinstance(cls, type) and issubclass(cls, CrossEncoder):
        from vlprobe.extract.regions.store import RegionStore, regions_required

        with RegionStore(regions_required(model, regions)) as store:
            store_fp = store.fingerprint
    elif regions is not None:
        what = "scores captions only" if isinstance(cls, type) and issubclass(cls, TextScorer) else "reads pixels"
        raise InputError(f"regions: {model} {what}, not region features; drop --regions")
    if isinstance(cls, type) and issubclass(cls, TextScorer):
        impl = cls.load(checkpoint, device=device, dtype=dtype, **opts)
        kind = "text"
    else:
        if not checkpoint:
            raise InputError(f"checkpoint: model {model!r} needs --checkpoint (a directory or hub id)")
        if isinstance(cls, type) and issubclass(cls, CrossEncoder):
            load_opts = check_load_options(model, cls, {k: v for k, v in opts.items() if k in ("model_config", "tokenizer")})
            extra = sorted(set(opts) - set(load_opts))
            if extra:
                raise InputError(f"{extra[0]}: {model} does not take --{extra[0].replace('_', '-')}")
            impl = cls.load(checkpoint, device=device, dtype=dtype, **load_opts)
            kind = "cross"
        elif getattr(cls, "dual_encoder", False):
            if opts:
                name = sorted(opts)[0]
                raise InputError(f"{name}: model {model!r} takes no options, got {sorted(opts)}")
            impl = cls.load(checkpoint, device=device, dtype=dtype)
            kind = "dual"
        else:
            raise InputError(f"model {model!r} is neither a dual encoder, a cross-encoder nor a text scorer; it cannot score pairs")
    ckpt = getattr(impl, "checkpoint", None)
    return PairScorer(
        model=model, score_kind=str(getattr(impl, "score_kind", "") or getattr(cls, "score_kind", "")),
        needs_images=kind == "dual", fingerprint=getattr(ckpt, "fingerprint", "") if ckpt else "",
        info=impl.describe() if hasattr(impl, "describe") else {}, _impl=impl, _kind=kind, batch_size=batch_size,
        regions=Path(regions) if regions is not None else None, regions_fingerprint=store_fp,
        input_fingerprints=impl.input_fingerprints() if hasattr(impl, "input_fingerprints") else {},
    )
