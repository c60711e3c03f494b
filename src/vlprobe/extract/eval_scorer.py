"""``probe eval``'s scorer: a registered model loaded to score a benchmark's (image, text) pairs.

:func:`load_scorer` checks the model's inputs against what its class declares
(:func:`~vlprobe.extract.model_inputs.check_model_inputs`) and loads it as a :class:`PairScorer`,
whose :meth:`PairScorer.score` takes the pairs as two parallel lists (images and captions), finds
the distinct texts and images among them and scores them through the pair-scoring engine
(:func:`~vlprobe.extract.scoring.score_pairs`), whatever kind of model it is.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vlprobe.data.items import ImageRef
from vlprobe.extract.model_inputs import (
    check_model_inputs,
    check_region_width,
    model_dtype,
    model_kind,
    require_image_files,
)
from vlprobe.extract.models.base import Adapter
from vlprobe.extract.scoring import ImageSource, PairBatch, score_pairs
from vlprobe.progress import say
from vlprobe.registry import MODELS
from vlprobe.validation import InputError, check_positive_int

__all__ = ["MATCH_THRESHOLDS", "PairScorer", "load_scorer"]

#: Score kinds with a natural match / no-match threshold (VALSE's binary metrics need one).
#: ``match_probability``: the model's probability that caption and image match (LXMERT's and
#: UNITER's softmax, BLIP's ITM head, SigLIP's sigmoid).
MATCH_THRESHOLDS: dict[str, float] = {"match_probability": 0.5}



@dataclass
class PairScorer:
    """A loaded model that scores (image, text) pairs for ``probe eval`` (see :func:`load_scorer`).

    Attributes
    ----------
    model : str
        Registered name.
    score_kind : str
        What a score is (``cosine``, ``match_probability``, ``mean_token_logprob``, ...).
    image_input : {"pixels", "regions", "none"}
        What the model reads for an image.
    fingerprint : str
        The checkpoint's fingerprint ("" when the model has none).
    info : dict
        The model's own description (recorded in the manifest).
    impl : object
        The loaded adapter or text scorer.
    batch_size : int
    regions : Path or None
        Region-feature file of a model that reads regions.
    regions_fingerprint : str
        Its fingerprint ("" without one).
    input_fingerprints : dict
        Fingerprints of the model's side inputs (UNITER's ``config``, ``tokenizer``).
    model_options : dict
        Load options that change what the model computes (BLIP's ``score_head``).
    dtype : str
        The dtype it was loaded in (``auto`` resolved).
    """

    model: str
    score_kind: str
    image_input: str
    fingerprint: str
    info: dict[str, Any]
    impl: Any
    batch_size: int = 32
    regions: Path | None = None
    regions_fingerprint: str = ""
    input_fingerprints: dict[str, str] = field(default_factory=dict)
    model_options: dict[str, Any] = field(default_factory=dict)
    dtype: str = "float32"

    @property
    def device(self) -> str:
        """The device the model runs on, as outputs record it (``cpu`` for a model without weights)."""
        from vlprobe.devices import device_name

        return device_name(getattr(self.impl, "device", None))

    def score(self, images: Sequence[ImageRef], texts: Sequence[str], *, progress: bool = False) -> np.ndarray:
        """Scores of the pairs (images[p], texts[p]), float64 of shape (P,); see :meth:`score_with_logits`."""
        return self.score_with_logits(images, texts, progress=progress)[0]

    def score_with_logits(
        self, images: Sequence[ImageRef], texts: Sequence[str], *, progress: bool = False
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Scores of the pairs (images[p], texts[p]), and a binary matching head's raw logits.

        Distinct texts (by string) and distinct images (by file and crop for pixels, by normalised name for
        region features) are encoded or read once.

        Parameters
        ----------
        images : sequence of ImageRef, length P
            Ignored by text-only models (may lack files then).
        texts : sequence of str, length P

        Returns
        -------
        scores : ndarray of float64, shape (P,)
        logits : ndarray of float64, shape (P, 2), or None
            The (no match, match) logits of a model whose score is the softmax of two (LXMERT,
            UNITER's and BLIP's ITM heads); None for every other model.
        """
        if len(images) != len(texts):
            raise InputError(f"images and texts must pair up, got {len(images)} and {len(texts)}")
        uniq_texts = list(dict.fromkeys(texts))
        t_row = {t: i for i, t in enumerate(uniq_texts)}
        t_idx = np.array([t_row[t] for t in texts], dtype=np.int64)
        out = np.empty(len(texts), dtype=np.float64)
        logits: np.ndarray | None = np.empty((len(texts), 2), dtype=np.float64)

        def collect(got: PairBatch) -> None:
            nonlocal logits
            out[got.index] = got.scores
            if got.logits is None:
                logits = None
            elif logits is not None:
                logits[got.index] = got.logits

        if self.image_input == "none":
            self._announce(progress, len(texts), len(uniq_texts), 0)
            for got in score_pairs(self.impl, uniq_texts, None, t_idx, np.zeros_like(t_idx),
                                   batch_size=self.batch_size, progress=progress):
                collect(got)
            return out, logits
        if self.image_input == "pixels":
            require_image_files(self.model, images)
            keys: list[Any] = [(im.path, im.crop) for im in images]  # a crop is an image of its own
        else:
            from vlprobe.extract.regions.boxes import normalise_image_id

            keys = [normalise_image_id(im.name) for im in images]
        first = dict(zip(keys, images, strict=True))
        order = list(dict.fromkeys(keys))
        row = {k: i for i, k in enumerate(order)}
        i_idx = np.array([row[k] for k in keys], dtype=np.int64)
        distinct = [first[k] for k in order]
        store = None
        try:
            if self.image_input == "regions":
                from vlprobe.extract.regions.store import RegionStore

                if self.regions is None:
                    raise ValueError(f"{self.model}: a region model's scorer has no region file")
                store = RegionStore(self.regions)
                store.require([im.name for im in distinct], "the")
                check_region_width(self.model, self.impl, store)
            source = ImageSource.for_adapter(self.impl, distinct, store)
            self._announce(progress, len(texts), len(uniq_texts), len(distinct))
            for got in score_pairs(self.impl, uniq_texts, source, t_idx, i_idx, batch_size=self.batch_size,
                                   progress=progress):
                collect(got)
        finally:
            if store is not None:
                store.close()
        return out, logits

    def _announce(self, progress: bool, n_pairs: int, n_texts: int, n_images: int) -> None:
        """With ``progress``, one line on stderr saying what will be scored, once the inputs are checked."""
        images = f", {n_images} images" if self.image_input != "none" else ""
        say(progress, f"{self.model}: scoring {n_pairs} pairs ({n_texts} distinct texts{images}) in batches of "
                      f"{self.batch_size}")


def load_scorer(
    model: str, checkpoint: str | None, *, device: str = "auto", dtype: str = "auto", batch_size: int = 32,
    options: Mapping[str, Any] | None = None, regions: str | os.PathLike[str] | None = None,
    image_options: Mapping[str, Any] | None = None,
) -> PairScorer:
    """Load a registered model as a :class:`PairScorer` (see the module docstring).

    Parameters
    ----------
    model : str
        Registered name (``probe ls models``).
    checkpoint : str or None
        Directory or hub id (None for models without one, e.g. ``caption-length``); UNITER: the
        ``.pt`` file.
    dtype : {"auto", "float32", "float16", "bfloat16"}
        ``auto``: the dtype the model's reference code loads it in
        (:func:`~vlprobe.extract.model_inputs.model_dtype`).
    options : mapping, optional
        Load options, None values ignored, each one the model declares (``acceptable_label`` for
        ``blind-grammar``, ``model_config`` and ``tokenizer`` for UNITER, ``score_head`` for BLIP).
    regions : path, optional
        Region-feature file (vlprobe HDF5) for a model that reads regions; refused for others.
    image_options : mapping, optional
        Image folders the dataset was loaded with; refused for models that read no pixels.
    """
    from vlprobe.extract.models.blind import TextScorer

    check_positive_int(batch_size, "batch_size")
    cls = MODELS.get(model)
    model_kind(cls)
    if not (isinstance(cls, type) and issubclass(cls, Adapter | TextScorer)):  # model_kind refused the rest
        raise TypeError(f"model {model!r} is registered as {cls!r}")
    load_opts = check_model_inputs(model, cls, regions=regions, image_options=image_options, load_options=options)
    dtype = model_dtype(cls, dtype)
    store_fp = ""
    if cls.image_input == "regions":
        from vlprobe.extract.regions.store import RegionStore

        if regions is None:
            raise ValueError(f"{model}: no region file, which check_model_inputs requires")
        with RegionStore(regions) as store:
            store_fp = store.fingerprint
    impl: Adapter | TextScorer
    if issubclass(cls, TextScorer):
        impl = cls.load(checkpoint, device=device, dtype=dtype, **load_opts)
    elif not checkpoint:
        raise InputError(f"checkpoint: model {model!r} needs a checkpoint (a directory or hub id)")
    else:
        impl = cls.load(checkpoint, device=device, dtype=dtype, **load_opts)
    ckpt = getattr(impl, "checkpoint", None)
    return PairScorer(
        model=model, score_kind=str(impl.score_kind), image_input=cls.image_input,
        fingerprint=getattr(ckpt, "fingerprint", "") if ckpt else "", info=impl.describe(), impl=impl,
        batch_size=batch_size, regions=Path(regions) if regions is not None else None, regions_fingerprint=store_fp,
        input_fingerprints=impl.input_fingerprints() if hasattr(impl, "input_fingerprints") else {},
        model_options=impl.model_options() if hasattr(impl, "model_options") else {}, dtype=dtype,
    )
