"""Each compositionality benchmark's own metrics, as its authors' evaluation code computes them.

Every function takes the per-item scores (higher = better match) and returns per-item outcomes
or an aggregate; the aggregates are vectorised over leading axes, so one call computes a point
value (outcomes of shape (n,)) or every bootstrap resample at once (shape (B, n)). Where the
authors' code breaks ties by the position of a text, the rule is stated and followed.

ARO (mertyg/vision-language-models-are-bows, ``dataset_zoo/aro_datasets.py`` and the notebook
``Replicate ARO! VG-Relation, VG-Attribution.ipynb``):

* VG-Relation and VG-Attribution: the code scores ``[false caption, true caption]`` and takes
  ``np.argmax``, which returns the first of equal scores: an item is right iff
  score(true) > score(false), **a tie is wrong** (:func:`pair_right`). The paper's number is the
  **macro accuracy**: the mean over relations (VG-Relation) of each relation's accuracy, leaving
  out the relations the notebook lists (:data:`ARO_EXCLUDED_RELATIONS`), or over attribute pairs
  (VG-Attribution) with at least 25 items (:data:`ARO_MIN_ATTRIBUTE_ITEMS`)
  (:func:`macro_accuracy`).
* COCO-Order and Flickr30k-Order: ``[caption, four perturbations]``, ``np.argmax == 0``: right iff
  the caption scores at least as high as every perturbation, **a tie goes to the caption**
  (:func:`first_is_best`); the metric, ``Precision@1``, is the mean.

CREPE (RAIVNLab/CREPE, ``crepe_eval_utils.get_one2many_rank``): the caption is text 0 of the
retrieval set ``[caption, *hard negatives]``; its rank is its position in
``torch.argsort(scores, descending=True)``, an unstable sort: on the CPU it keeps equal scores in
input order for up to 16 texts (torch 2.x), beyond that their order varies. vlprobe's rank is the
number of negatives scoring strictly higher, **a tie goes to the caption** (:func:`rank_of_first`):
the authors' rank wherever their sort kept input order, which covers CREPE's retrieval sets.
Recall@k = mean(rank < k).

MMVP-VLM (tsb0601/MMVP, ``scripts/evaluate_vlm.py``): each statement's two image logits go through
a softmax and the statement picks image 1 iff its probability is ``> 0.5``, else image 2; a pair
is right iff both statements pick their own image (:func:`mmvp_pair_right`). Equal scores give
0.5 and pick image 2: **a tie is wrong for the first statement and right for the second**. The
script reports the percentage of right pairs per category; the paper's average is their mean.

NaturalBench (Baiqi-Li/NaturalBench, ``example.py``'s ``get_scores``; lmms-eval's copy is the
same): per sample the answers ``q{q}_i{i}`` are 1 (Yes/A), 0 (No/B) or -1 (no answer), and the
right ones are fixed: ``q0_i0 = 1, q0_i1 = 0, q1_i0 = 0, q1_i1 = 1``. Question score: per
question, right on both images (``/ 2N``); image score: per image, right for both questions
(``/ 2N``); binary score: right (question, image) pairs (``/ 4N``); group score: all four right
(``/ N``) (:func:`naturalbench_outcomes`). All four pool every sample (micro averages). Here a
scoring model's answer comes from comparing two texts (:func:`naturalbench_answers`): **a tie is
no answer, wrong everywhere**, as ``-1`` is in the authors' code.

SugarCrepe++ (Sri-Harsha/scpp, ``VLMs/test_*.py``): per sample the cosine similarities of the
image with P1, P2 and the negative; the image-to-text task (ITT) is right iff ``cos_p1 > cos_neg
and cos_p2 > cos_neg``; the scripts also print ``Image-P1-Neg`` (``cos_p1 > cos_neg``) and
``Image-P2-Neg``. Strict ``>``: **a tie is wrong**. Each is the share of right samples per file
(:func:`sugarcrepe_pp_outcomes`). The text-only task (TOT) compares text embeddings with each
other and is not computed from image-text scores.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from vlprobe.validation import InputError

__all__ = [
    "ARO_EXCLUDED_RELATIONS",
    "ARO_MIN_ATTRIBUTE_ITEMS",
    "first_is_best",
    "group_means",
    "macro_accuracy",
    "mmvp_pair_right",
    "naturalbench_answers",
    "naturalbench_outcomes",
    "pair_right",
    "rank_of_first",
    "sugarcrepe_pp_outcomes",
]

#: The relations the authors' notebook drops before averaging VG-Relation's accuracies (its list
#: ``symmetric``, in its order): relations whose swapped caption can still be true, plus those with
#: too few items.
ARO_EXCLUDED_RELATIONS: tuple[str, ...] = (
    "adjusting", "attached to", "between", "bigger than", "biting", "boarding", "brushing", "chewing",
    "cleaning", "climbing", "close to", "coming from", "coming out of", "contain", "crossing", "dragging",
    "draped over", "drinking", "drinking from", "driving", "driving down", "driving on", "eating from",
    "eating in", "enclosing", "exiting", "facing", "filled with", "floating in", "floating on", "flying",
    "flying above", "flying in", "flying over", "flying through", "full of", "going down", "going into",
    "going through", "grazing in", "growing in", "growing on", "guiding", "hanging from", "hanging in",
    "hanging off", "hanging over", "higher than", "holding onto", "hugging", "in between", "jumping off",
    "jumping on", "jumping over", "kept in", "larger than", "leading", "leaning over", "leaving", "licking",
    "longer than", "looking in", "looking into", "looking out", "looking over", "looking through",
    "lying next to", "lying on top of", "making", "mixed with", "mounted on", "moving", "on the back of",
    "on the edge of", "on the front of", "on the other side of", "opening", "painted on", "parked at",
    "parked beside", "parked by", "parked in", "parked in front of", "parked near", "parked next to",
    "perched on", "petting", "piled on", "playing", "playing in", "playing on", "playing with", "pouring",
    "reaching for", "reading", "reflected on", "riding on", "running in", "running on", "running through",
    "seen through", "sitting behind", "sitting beside", "sitting by", "sitting in front of", "sitting near",
    "sitting next to", "sitting under", "skiing down", "skiing on", "sleeping in", "sleeping on",
    "smiling at", "sniffing", "splashing", "sprinkled on", "stacked on", "standing against",
    "standing around", "standing behind", "standing beside", "standing in front of", "standing near",
    "standing next to", "staring at", "stuck in", "surrounding", "swimming in", "swinging", "talking to",
    "topped with", "touching", "traveling down", "traveling on", "tying", "typing on", "underneath",
    "wading in", "waiting for", "walking across", "walking by", "walking down", "walking next to",
    "walking through", "working in", "working on", "worn on", "wrapped around", "wrapped in", "by", "of",
    "near", "next to", "with", "beside", "on the side of", "around",
)
#: VG-Attribution's macro accuracy averages the attribute pairs with at least this many items.
ARO_MIN_ATTRIBUTE_ITEMS = 25


def _scores(scores: np.ndarray, name: str = "scores") -> np.ndarray:
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 2 or s.shape[1] < 2:
        raise InputError(f"{name} must have shape (N, K) with K >= 2 texts per item, got {s.shape}")
    if np.isnan(s).any():
        raise InputError(f"{name}: some item scores are missing (NaN)")
    return s


def pair_right(scores: np.ndarray) -> np.ndarray:
    """Per item: text 0 strictly outscores text 1 (a tie is wrong).

    Parameters
    ----------
    scores : ndarray, shape (N, 2)
        Column 0 the correct text, column 1 the wrong one.
    """
    s = _scores(scores)
    return s[:, 0] > s[:, 1]


def first_is_best(scores: np.ndarray) -> np.ndarray:
    """Per item: text 0 scores at least as high as every other text (``argmax == 0``; ties to text 0).

    Parameters
    ----------
    scores : ndarray, shape (N, K)
    """
    s = _scores(scores)
    return s[:, 0] >= s[:, 1:].max(axis=1)


def rank_of_first(scores: np.ndarray) -> np.ndarray:
    """Per item: 0-based rank of text 0 among its K texts, equal scores ranked after it.

    Parameters
    ----------
    scores : ndarray, shape (N, K)
        Text 0 the correct one; NaN marks an absent text of an item with fewer (never ranked).

    Returns
    -------
    ndarray of int64, shape (N,)
        The number of texts scoring strictly higher than text 0.
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 2 or s.shape[1] < 2:
        raise InputError(f"scores must have shape (N, K) with K >= 2, got {s.shape}")
    if np.isnan(s[:, 0]).any():
        raise InputError("scores: some items lack the score of their correct text (NaN)")
    higher = np.where(np.isnan(s[:, 1:]), False, s[:, 1:] > s[:, :1])
    return higher.sum(axis=1).astype(np.int64)


def group_means(values: np.ndarray, groups: Sequence[str] | np.ndarray) -> dict[str, np.ndarray]:
    """Mean of ``values`` over the last axis within each group (first-seen order).

    Parameters
    ----------
    values : ndarray, shape (..., n)
    groups : sequence of str, length n
        The group of each column.

    Returns
    -------
    dict of str to ndarray of shape ``values.shape[:-1]``
    """
    v = np.asarray(values, dtype=np.float64)
    g = np.asarray(groups)
    if g.shape != v.shape[-1:]:
        raise InputError(f"groups must have length {v.shape[-1]}, got shape {g.shape}")
    return {str(name): v[..., g == name].mean(axis=-1) for name in dict.fromkeys(g.tolist())}


def macro_accuracy(
    correct: np.ndarray, groups: Sequence[str] | np.ndarray, *, exclude: Sequence[str] = (), min_items: int = 1,
) -> tuple[np.ndarray, list[str]]:
    """The unweighted mean over groups of each group's accuracy (ARO's macro accuracy).

    Parameters
    ----------
    correct : ndarray of bool, shape (..., n)
    groups : sequence of str, length n
    exclude : sequence of str
        Groups left out (VG-Relation: :data:`ARO_EXCLUDED_RELATIONS`).
    min_items : int
        Groups with fewer columns are left out (VG-Attribution: 25).

    Returns
    -------
    value : ndarray of shape ``correct.shape[:-1]`` (NaN when no group is left)
    used : list of str
        The groups averaged.
    """
    g = np.asarray(groups)
    dropped = set(exclude)
    counts = {name: int((g == name).sum()) for name in dict.fromkeys(g.tolist())}
    used = [name for name, c in counts.items() if name not in dropped and c >= min_items]
    means = group_means(correct, g)
    shape = np.asarray(correct).shape[:-1]
    if not used:
        return np.full(shape, np.nan), used
    return np.mean([means[name] for name in used], axis=0), used


def mmvp_pair_right(scores: np.ndarray) -> np.ndarray:
    """Per pair: both statements pick their own image, as MMVP's ``evaluate_vlm.py`` decides.

    Parameters
    ----------
    scores : ndarray, shape (N, 2, 2)
        ``[pair, statement, image]``; statement k matches image k.

    Returns
    -------
    ndarray of bool, shape (N,)
        Statement 0 right iff ``score[0, 0] > score[0, 1]`` (softmax probability of image 1
        above 0.5); statement 1 right iff it does not pick image 1, ``score[1, 0] <= score[1, 1]``
        (a tie picks image 2).
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 3 or s.shape[1:] != (2, 2):
        raise InputError(f"scores must have shape (N, 2, 2) (pair, statement, image), got {s.shape}")
    if np.isnan(s).any():
        raise InputError("scores: some pair scores are missing (NaN)")
    return (s[:, 0, 0] > s[:, 0, 1]) & ~(s[:, 1, 0] > s[:, 1, 1])


def naturalbench_answers(scores: np.ndarray) -> np.ndarray:
    """Per sample, the answer to each question on each image read off the scores of its texts.

    Parameters
    ----------
    scores : ndarray, shape (N, 4, 2)
        ``[sample, text, image]``; texts ``2q`` (question q + Yes/A) and ``2q + 1`` (+ No/B).

    Returns
    -------
    ndarray of int64, shape (N, 2, 2)
        ``[sample, question, image]``: 1 where text ``2q`` scores higher, 0 where lower, -1 on a tie.
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 3 or s.shape[1:] != (4, 2):
        raise InputError(f"scores must have shape (N, 4, 2) (sample, text, image), got {s.shape}")
    if np.isnan(s).any():
        raise InputError("scores: some sample scores are missing (NaN)")
    first, second = s[:, 0::2, :], s[:, 1::2, :]
    return np.where(first > second, 1, np.where(first < second, 0, -1)).astype(np.int64)


def naturalbench_outcomes(answers: np.ndarray) -> dict[str, np.ndarray]:
    """Per sample, its share of each of NaturalBench's four scores (``get_scores``'s counts over
    their denominators), so that the mean over samples is the authors' pooled score.

    Parameters
    ----------
    answers : ndarray of int, shape (N, 2, 2)
        ``[sample, question, image]`` in {1, 0, -1}.

    Returns
    -------
    dict of str to ndarray of float64, shape (N,)
        ``question_accuracy`` (right questions / 2), ``image_accuracy`` (right images / 2),
        ``binary_accuracy`` (right answers / 4), ``group_accuracy`` (1 iff all four right).
    """
    a = np.asarray(answers)
    if a.ndim != 3 or a.shape[1:] != (2, 2):
        raise InputError(f"answers must have shape (N, 2, 2), got {a.shape}")
    right = a == np.array([[1, 0], [0, 1]])
    questions = right.all(axis=2).sum(axis=1)  # q0 on i0 and i1; q1 on i0 and i1
    images = right.all(axis=1).sum(axis=1)  # i0 for q0 and q1; i1 for q0 and q1
    return {
        "question_accuracy": questions / 2.0,
        "image_accuracy": images / 2.0,
        "binary_accuracy": right.sum(axis=(1, 2)) / 4.0,
        "group_accuracy": ((questions == 2) & (images == 2)).astype(np.float64),
    }


def sugarcrepe_pp_outcomes(scores: np.ndarray) -> dict[str, np.ndarray]:
    """Per sample, SugarCrepe++'s image-to-text outcomes as the authors' scripts decide them.

    Parameters
    ----------
    scores : ndarray, shape (N, 3) or (N, 3, 1)
        ``[sample, text]``: P1, P2, the negative, each scored with the sample's image.

    Returns
    -------
    dict of str to ndarray of bool, shape (N,)
        ``itt`` (both positives beat the negative), ``image_p1_neg`` (P1 beats it),
        ``image_p2_neg`` (P2 beats it); strict ``>``.
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim == 3 and s.shape[2] == 1:
        s = s[:, :, 0]
    if s.ndim != 2 or s.shape[1] != 3:
        raise InputError(f"scores must have shape (N, 3) (P1, P2, negative), got {np.asarray(scores).shape}")
    if np.isnan(s).any():
        raise InputError("scores: some sample scores are missing (NaN)")
    p1, p2 = s[:, 0] > s[:, 2], s[:, 1] > s[:, 2]
    return {"itt": p1 & p2, "image_p1_neg": p1, "image_p2_neg": p2}
