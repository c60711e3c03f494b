"""Score (image, caption) pairs with any registered model: the one path ``probe eval`` uses.

:func:`load_pair_scorer` turns a registered model name into a :class:`PairScorer`:

* a dual encoder adapter (CLIP; ``Adapter.dual_encoder``): every distinct image and text is
  encoded once, in batches, through the adapter's own ``encode`` (its ``pooled`` output), and pair
  scores come from ``Adapter.scores_from_pooled`` - the same numbers ``probe extract`` stores;
* a cross-encoder adapter (``dual_encoder = False``: LXMERT, UNITER): pairs are scored in batches
  by the adapter's ``score_pairs(images, texts) -> ndarray (B,)`` (PIL images, strings); an
  adapter without that method is refused with one line;
* a blind text-only baseline (:class:`vlprobe.extract.blind.TextScorer`): each distinct text is
  scored once and the image is ignored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vlprobe.data.items import ImageRef
from vlprobe.registry import MODELS

__all__ = ["MATCH_THRESHOLDS", "PairScorer", "load_pair_scorer"]

#: Score kinds with a natural match / no-match threshold (VALSE's binary metrics need one).
MATCH_THRESHOLDS: dict[str, float] = {"itm_probability": 0.5, "match_probability": 0.5, "itm_logit_margin": 0.0}


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
    fingerprint : str
        The checkpoint's fingerprint ("" when the model has none).
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
        if len(images) != len(texts):
            raise ValueError(f"images and texts must pair up, got {len(images)} and {len(texts)}")
        if self.needs_images:
            lacking = [im for im in images if im.path is None]
            if lacking:
                raise ValueError(
                    f"model {self.model!r} needs images, but {lacking[0].id!r} has no file "
                    "(pass --image-dir for SugarCrepe, --image-root SOURCE=DIR for VALSE)"
                )
        uniq_texts = list(dict.fromkeys(texts))
        t_row = {t: i for i, t in enumerate(uniq_texts)}
        t_idx = np.array([t_row[t] for t in texts], dtype=np.int64)
        if self._kind == "text":
            return self._impl.score_texts(uniq_texts, self.batch_size)[t_idx]
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
            return out
        out = np.empty(len(texts), dtype=np.float64)
        for start in range(0, len(texts), self.batch_size):
            batch_imgs = [im.load() for im in images[start : start + self.batch_size]]
            got = np.asarray(self._impl.score_pairs(batch_imgs, list(texts[start : start + self.batch_size])), dtype=np.float64)
            if got.shape != (len(batch_imgs),):
                raise ValueError(f"model {self.model!r}: score_pairs returned shape {got.shape}, expected ({len(batch_imgs)},)")
            out[start : start + len(batch_imgs)] = got
        return out

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
                raise ValueError(f"model {self.model!r}: stream {stream!r} has no pooled output to score with")
            rows.append(pooled.float().cpu().numpy())
        return np.concatenate(rows) if rows else np.zeros((0, 0), dtype=np.float32)


def load_pair_scorer(
    model: str, checkpoint: str | None, *, device: str = "cpu", dtype: str = "float32",
    batch_size: int = 32, options: dict[str, Any] | None = None,
) -> PairScorer:
    """Load a registered model as a :class:`PairScorer` (see the module docstring).

    Parameters
    ----------
    model : str
        Registered name (``probe ls models``).
    checkpoint : str or None
        Directory or hub id (None for models without one, e.g. ``caption-length``).
    options : dict, optional
        Model-specific options (``acceptable_label`` for ``blind-grammar``).
    """
    from vlprobe.extract.blind import TextScorer

    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    cls = MODELS.get(model)
    opts = {k: v for k, v in (options or {}).items() if v is not None}
    if isinstance(cls, type) and issubclass(cls, TextScorer):
        impl = cls.load(checkpoint, device=device, dtype=dtype, **opts)
        kind = "text"
    else:
        if opts:
            raise ValueError(f"model {model!r} takes no options, got {sorted(opts)}")
        if not checkpoint:
            raise ValueError(f"checkpoint: model {model!r} needs --checkpoint (a directory or hub id)")
        impl = cls.load(checkpoint, device=device, dtype=dtype)
        if getattr(cls, "dual_encoder", False):
            kind = "dual"
        elif callable(getattr(impl, "score_pairs", None)):
            kind = "cross"
        else:
            raise ValueError(
                f"model {model!r} is a cross-encoder without score_pairs(images, texts); it cannot score "
                "benchmark pairs yet"
            )
    ckpt = getattr(impl, "checkpoint", None)
    return PairScorer(
        model=model, score_kind=str(getattr(impl, "score_kind", "") or getattr(cls, "score_kind", "")),
        needs_images=kind != "text", fingerprint=getattr(ckpt, "fingerprint", "") if ckpt else "",
        info=impl.describe() if hasattr(impl, "describe") else {}, _impl=impl, _kind=kind, batch_size=batch_size,
    )
