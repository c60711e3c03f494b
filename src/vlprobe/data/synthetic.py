"""A synthetic dataset in Winoground's on-disk format, for tests and the offline demo.

:func:`make_synthetic_winoground` writes, into one directory::

    examples.jsonl             one line per item, Winoground's nine fields in Winoground's order:
                               id, caption_0, caption_1, image_0, image_1, tag, secondary_tag,
                               num_main_preds, collapsed_tag
    images/ex_{id}_img_{j}.png RGB PNG, image_size x image_size; image j depicts caption j
    variants.jsonl             template paraphrases of every caption (vlprobe.data.variants format)
    new_tag_assignments.json   the "Why is Winoground Hard?" tag file format: {"0": [tags], ...}
    scenes.jsonl               the layout of every image (see "Scenes"); datasets made before it
                               existed lack it and still load
    PROVENANCE.txt             says the data is synthetic (made by vlprobe) and safe to share;
                               records n_items, seed, image_size and split

Everything is drawn from one numpy generator: the same ``(n_items, seed, image_size, split)``
gives byte-identical files.

Splits
------
``split="eval"`` (the default) draws from ``numpy.random.default_rng(seed)``: the datasets that
tests, benchmarks and the demo evaluate on. ``split="train"`` draws from a child stream of
``SeedSequence(seed)`` (spawn key :data:`TRAIN_SPAWN_KEY`) that no evaluation dataset uses, for
the models vlprobe trains on synthetic scenes; the files and the grammar are the same.

Captions
--------
Every caption reads ``"a|an [SIZE ]COLOUR SHAPE RELATION a|an [SIZE ]COLOUR SHAPE"``, e.g.
``"a red circle left of a blue square"``, ``"an orange star above a green diamond"``; the first
noun phrase is the subject. The two captions of an item hold the same multiset of words in a
different order (never the same string; the article follows the word after it, so it moves with
that word). The swap type decides Winoground's fields:

=================  =====================================================  ================  =====
swap               caption_0 / caption_1                                  tag / collapsed   preds
=================  =====================================================  ================  =====
noun               a red circle left of a blue square /                   Noun / Object     1
                   a red square left of a blue circle
adjective-colour   ... / a blue circle left of a red square               Adjective-Color   1
                                                                          / Relation
adjective-size     a big red circle above a small blue square /           Adjective-Size    1
                   a small red circle above a big blue square             / Relation
noun phrase        ... / a blue square left of a red circle               Noun Phrase       2
                                                                          / Both
=================  =====================================================  ================  =====

When ``n_items >= 3`` the noun, adjective-colour and noun-phrase swaps each occur at least once,
so all three collapsed tags are present. About a quarter of the items get a ``secondary_tag``
(``"Symbolic"``, ``"Series"``, ``"Pragmatics"``, ``"Morpheme-Level"`` or ``"Symbolic, Pragmatics"``).

Images
------
Two filled shapes (circle, square, triangle, diamond, star) in exact palette colours
(:data:`COLORS`; drawn without anti-aliasing, so every shape pixel has exactly its colour) on a
light, slightly tinted grey background that never equals a palette colour. The subject sits in the
left / right / upper / lower part of the image and the object opposite it, as the relation says;
centres, sizes and background shade are jittered per image. "big" shapes have about twice the
radius of "small" ones; in items without a size swap both shapes have similar sizes.

Variants
--------
Three to six of these templates per caption (a seeded subset, in this order), each meaning the
same as the caption; ``strategy`` is ``template/<name>`` and ``params`` is ``{"template": name}``:
``there-is`` ("there is A left of B"), ``copula`` ("A is left of B"), ``converse`` ("B is right of
A": left/right and above/below exchanged), ``phrase`` ("A to the left of B", "A higher than B"),
``in-the-picture`` ("in the picture, A is left of B"), ``picture-of`` ("a picture of A left of B").

Scenes
------
``scenes.jsonl`` has one line per image, in the order items x (image 0, image 1)::

    {"image": "ex_3_img_1", "item": 3, "caption": 1, "text": "a red circle left of a blue square",
     "relation": "left of", "width": 64, "height": 64, "background": [221, 219, 225],
     "objects": [{"role": "subject", "color": "red", "shape": "circle", "size": null,
                  "center": [17.6, 31.2], "radius": 8.9, "box": [8.7, 22.3, 26.5, 40.1]},
                 {"role": "object", ...}]}

Coordinates are pixels (x right, y down); ``box`` is ``[x1, y1, x2, y2]``, the bounds of the drawn
shape (every pixel of its colour lies inside, within one pixel of rounding); ``size`` is the
caption's size word or null.

Tags
----
About 40 % of the items have no tag; the others get one tag (most), two or three, drawn from the
six spellings in :data:`WWH_TAGS`, listed in that order.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from vlprobe import __version__
from vlprobe.data.tags import WWH_TAGS
from vlprobe.data.variants import Variant, VariantSet, write_variants
from vlprobe.data.winoground import WINOGROUND_FIELDS
from vlprobe.io.atomic import atomic_path, atomic_write
from vlprobe.io.paths import ensure_folder
from vlprobe.validation import InputError, check_choice, check_int, check_positive_int, check_seed

__all__ = [
    "COLORS",
    "RELATIONS",
    "SHAPES",
    "SPLITS",
    "SWAP_TYPES",
    "TRAIN_SPAWN_KEY",
    "WWH_TAGS",
    "grammar_words",
    "make_synthetic_winoground",
    "read_scenes",
    "synthetic_provenance",
]

#: Colour words and the exact RGB every pixel of a shape of that colour has.
COLORS: dict[str, tuple[int, int, int]] = {
    "red": (220, 30, 30),
    "blue": (30, 60, 220),
    "green": (30, 160, 50),
    "yellow": (230, 200, 20),
    "purple": (140, 50, 180),
    "orange": (240, 130, 20),
}
SHAPES: tuple[str, ...] = ("circle", "square", "triangle", "diamond", "star")
RELATIONS: tuple[str, ...] = ("left of", "right of", "above", "below")
#: Swap type -> (tag, collapsed_tag, num_main_preds).
SWAP_TYPES: dict[str, tuple[str, str, int]] = {
    "noun": ("Noun", "Object", 1),
    "adjective-color": ("Adjective-Color", "Relation", 1),
    "adjective-size": ("Adjective-Size", "Relation", 1),
    "noun-phrase": ("Noun Phrase", "Both", 2),
}
_FIELDS = tuple(WINOGROUND_FIELDS)
_SECONDARY = ("Symbolic", "Series", "Pragmatics", "Morpheme-Level", "Symbolic, Pragmatics")
_SWAP_WEIGHTS = {"noun": 0.3, "adjective-color": 0.3, "adjective-size": 0.15, "noun-phrase": 0.25}
_CONVERSE = {"left of": "right of", "right of": "left of", "above": "below", "below": "above"}
_PHRASE = {
    "left of": "to the left of", "right of": "to the right of",
    "above": "higher than", "below": "lower than",
}
_TEMPLATES = ("there-is", "copula", "converse", "phrase", "in-the-picture", "picture-of")
_PROVENANCE_MARK = "synthetic Winoground-format dataset made by vlprobe"
_IMAGE_RE = re.compile(r"ex_\d+_img_[01]\.png")
_TOP_FILES = frozenset({
    "examples.jsonl", "variants.jsonl", "new_tag_assignments.json", "scenes.jsonl",
    "PROVENANCE.txt", "images",
})
SPLITS: tuple[str, ...] = ("eval", "train")
#: Spawn key of the training split's stream: ``SeedSequence(seed, spawn_key=TRAIN_SPAWN_KEY)``.
#: ``default_rng(seed)`` (the evaluation split) has the empty spawn key, so the streams differ.
TRAIN_SPAWN_KEY: tuple[int, ...] = (0x5452_4E,)


@dataclass(frozen=True)
class _Phrase:
    size: str | None  # "big", "small" or None
    color: str
    shape: str

    def text(self) -> str:
        words = ([self.size] if self.size else []) + [self.color, self.shape]
        article = "an" if words[0][0] in "aeiou" else "a"
        return " ".join([article, *words])


@dataclass(frozen=True)
class _Scene:
    subject: _Phrase
    relation: str
    obj: _Phrase

    def caption(self) -> str:
        return f"{self.subject.text()} {self.relation} {self.obj.text()}"


def grammar_words() -> tuple[str, ...]:
    """Every word the captions and variants can use, sorted (a tokenizer must cover them)."""
    words = {"a", "an", "big", "small", "there", "is", "in", "the", "picture", "of"}
    words.update(COLORS, SHAPES)
    for phrases in (RELATIONS, _CONVERSE.values(), _PHRASE.values()):
        for phrase in phrases:
            words.update(phrase.split())
    return tuple(sorted(words))


def make_synthetic_winoground(
    out: str | os.PathLike[str], n_items: int = 40, seed: int = 0, image_size: int = 64,
    split: str = "eval",
) -> Path:
    """Write a deterministic synthetic dataset in Winoground's on-disk format.

    Parameters
    ----------
    out : path
        Target directory; created if missing. An existing non-empty directory is only reused
        (overwritten) when it holds nothing but a previous synthetic dataset.
    n_items : int
        Number of items (ids ``0 .. n_items-1``), each 2 captions x 2 images; >= 1.
    seed : int
        Seed of the one ``numpy.random.default_rng`` everything is drawn from; >= 0.
    image_size : int
        Width and height of every image in pixels, 16 to 2048.
    split : {"eval", "train"}
        Which seed stream to draw from (module docstring, "Splits").

    Returns
    -------
    Path
        ``out``.
    """
    n_items = check_positive_int(n_items, "n_items")
    seed = check_seed(seed)
    image_size = check_int(image_size, "image_size", low=16, high=2048)
    split = check_choice(split, "split", SPLITS)
    root = Path(out)
    _check_out(root)

    if split == "eval":
        rng = np.random.default_rng(seed)
    else:
        rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=TRAIN_SPAWN_KEY))
    swaps = _draw_swaps(rng, n_items)
    scenes = [_draw_pair(rng, swap) for swap in swaps]
    secondary = [
        str(_SECONDARY[rng.integers(len(_SECONDARY))]) if rng.random() < 0.25 else ""
        for _ in range(n_items)
    ]
    tags = _draw_wwh_tags(rng, n_items)
    variant_sets = [
        VariantSet(
            item=f"winoground/{i}", caption=k, original=pair[k].caption(),
            variants=_paraphrases(rng, pair[k]),
        )
        for i, pair in enumerate(scenes)
        for k in (0, 1)
    ]

    ensure_folder(root)
    # Provenance first: an interrupted run still leaves a directory this function may reuse.
    with atomic_write(root / "PROVENANCE.txt") as fh:
        fh.write(_provenance(n_items, seed, image_size, split))
    images = root / "images"
    ensure_folder(images)
    for stale in images.iterdir():  # from an earlier, larger run
        stale.unlink()
    layouts = []
    for i, pair in enumerate(scenes):
        for j in (0, 1):
            img, layout = _render(rng, pair[j], image_size)
            with atomic_path(images / f"ex_{i}_img_{j}.png") as tmp:
                img.save(tmp, format="PNG")
            layouts.append({"image": f"ex_{i}_img_{j}", "item": i, "caption": j, **layout})

    with atomic_write(root / "examples.jsonl") as fh:
        for i, (swap, pair) in enumerate(zip(swaps, scenes, strict=True)):
            tag, collapsed, preds = SWAP_TYPES[swap]
            row = {
                "id": i,
                "caption_0": pair[0].caption(),
                "caption_1": pair[1].caption(),
                "image_0": f"ex_{i}_img_0",
                "image_1": f"ex_{i}_img_1",
                "tag": tag,
                "secondary_tag": secondary[i],
                "num_main_preds": preds,
                "collapsed_tag": collapsed,
            }
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    write_variants(root / "variants.jsonl", variant_sets, kind=None)  # the folder is guarded as a whole
    with atomic_write(root / "new_tag_assignments.json") as fh:
        fh.write(json.dumps({str(i): t for i, t in enumerate(tags)}))  # one line, like WWH's file
    with atomic_write(root / "scenes.jsonl") as fh:
        for layout in layouts:
            fh.write(json.dumps(layout) + "\n")
    return root


def synthetic_provenance(root: str | os.PathLike[str]) -> dict[str, int | str] | None:
    """What ``PROVENANCE.txt`` says about a synthetic dataset, or None if ``root`` holds none.

    Returns
    -------
    dict or None
        ``n_items``, ``seed``, ``image_size`` (int) and ``split`` (``"eval"`` for datasets
        written before splits existed).
    """
    prov = Path(root) / "PROVENANCE.txt"
    try:
        lines = prov.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    if not lines or not lines[0].startswith(_PROVENANCE_MARK) or len(lines) < 2:
        return None
    fields = dict(part.partition("=")[::2] for part in lines[1].split())
    try:
        info: dict[str, int | str] = {k: int(fields[k]) for k in ("n_items", "seed", "image_size")}
    except (KeyError, ValueError):
        return None
    info["split"] = fields.get("split", "eval")
    return info


def read_scenes(root: str | os.PathLike[str]) -> list[dict]:
    """The layouts of a synthetic dataset's images (``scenes.jsonl``; module docstring).

    Raises
    ------
    InputError
        ``root`` is not a synthetic dataset, or was written before scenes were recorded.
    """
    root = Path(root)
    if synthetic_provenance(root) is None:
        raise InputError(
            f"data_dir: {str(root)!r} is not a synthetic dataset made by vlprobe (no PROVENANCE.txt "
            "of one); write one with `probe fixtures dataset --out DIR`"
        )
    path = root / "scenes.jsonl"
    if not path.is_file():
        raise InputError(
            f"data_dir: {str(root)!r} has no scenes.jsonl (written by an older vlprobe); "
            "regenerate it with `probe fixtures dataset`"
        )
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _check_out(root: Path) -> None:
    if not root.exists():
        return
    if not root.is_dir():
        raise InputError(f"out {str(root)!r} exists and is not a directory")
    entries = {p.name for p in root.iterdir()}
    if not entries:
        return
    prov = root / "PROVENANCE.txt"
    ours = prov.is_file() and prov.read_text(encoding="utf-8", errors="replace").startswith(
        _PROVENANCE_MARK
    )
    images = root / "images"
    if ours and images.exists():
        ours = images.is_dir() and all(
            p.is_file() and _IMAGE_RE.fullmatch(p.name) for p in images.iterdir()
        )
    if not ours or not entries <= _TOP_FILES:
        raise InputError(
            f"out {str(root)!r} is not empty and does not hold (only) a synthetic dataset made "
            "by vlprobe; refusing to overwrite it: choose an empty or new directory"
        )


def _draw_swaps(rng: np.random.Generator, n: int) -> list[str]:
    names = list(_SWAP_WEIGHTS)
    p = np.array([_SWAP_WEIGHTS[k] for k in names])
    swaps = [names[k] for k in rng.choice(len(names), size=n, p=p / p.sum())]
    if n >= 3:  # one of each collapsed tag: Object, Relation, Both
        at = rng.choice(n, size=3, replace=False)
        for pos, swap in zip(at, ("noun", "adjective-color", "noun-phrase"), strict=True):
            swaps[int(pos)] = swap
    return swaps


def _draw_pair(rng: np.random.Generator, swap: str) -> tuple[_Scene, _Scene]:
    c0, c1 = (str(c) for c in rng.choice(list(COLORS), size=2, replace=False))
    s0, s1 = (str(s) for s in rng.choice(SHAPES, size=2, replace=False))
    relation = str(RELATIONS[rng.integers(len(RELATIONS))])
    z0: str | None
    z1: str | None
    z0, z1 = ("big", "small") if rng.random() < 0.5 else ("small", "big")
    if swap != "adjective-size":
        z0 = z1 = None
    a, b = _Phrase(z0, c0, s0), _Phrase(z1, c1, s1)
    first = _Scene(a, relation, b)
    if swap == "noun":
        second = _Scene(replace(a, shape=s1), relation, replace(b, shape=s0))
    elif swap == "adjective-color":
        second = _Scene(replace(a, color=c1), relation, replace(b, color=c0))
    elif swap == "adjective-size":
        second = _Scene(replace(a, size=z1), relation, replace(b, size=z0))
    else:
        second = _Scene(b, relation, a)
    return first, second


def _draw_wwh_tags(rng: np.random.Generator, n: int) -> list[list[str]]:
    tagged = [i for i in range(n) if rng.random() >= 0.4]
    # The first tag cycles through a shuffled order of the six, so six tagged items cover all.
    order = [WWH_TAGS[k] for k in rng.permutation(len(WWH_TAGS))]
    out: list[list[str]] = [[] for _ in range(n)]
    for rank, i in enumerate(tagged):
        u = rng.random()
        count = 1 if u < 0.72 else 2 if u < 0.93 else 3
        chosen = {order[rank % len(order)]}
        others = [t for t in WWH_TAGS if t not in chosen]
        chosen.update(str(t) for t in rng.choice(others, size=count - 1, replace=False))
        out[i] = [t for t in WWH_TAGS if t in chosen]
    return out


def _paraphrases(rng: np.random.Generator, scene: _Scene) -> tuple[Variant, ...]:
    a, rel, b = scene.subject.text(), scene.relation, scene.obj.text()
    texts = {
        "there-is": f"there is {a} {rel} {b}",
        "copula": f"{a} is {rel} {b}",
        "converse": f"{b} is {_CONVERSE[rel]} {a}",
        "phrase": f"{a} {_PHRASE[rel]} {b}",
        "in-the-picture": f"in the picture, {a} is {rel} {b}",
        "picture-of": f"a picture of {a} {rel} {b}",
    }
    k = int(rng.integers(3, len(_TEMPLATES) + 1))
    picked = sorted(int(t) for t in rng.choice(len(_TEMPLATES), size=k, replace=False))
    names = [_TEMPLATES[t] for t in picked]
    out = tuple(Variant(texts[n], f"template/{n}", {"template": n}) for n in names)
    if len({v.text for v in out} | {scene.caption()}) != len(out) + 1:  # pragma: no cover
        raise RuntimeError(f"synthetic: duplicate paraphrase of {scene.caption()!r}")
    return out


def _render(rng: np.random.Generator, scene: _Scene, size: int) -> tuple[Image.Image, dict]:
    """Draw ``scene``: subject and object on the sides its relation names; returns the image and
    its layout (a line of ``scenes.jsonl`` without the image, item and caption fields)."""
    v = int(rng.integers(200, 246))
    tint = rng.integers(-6, 7, size=3)
    background = tuple(int(v + t) for t in tint)
    img = Image.new("RGB", (size, size), background)
    draw = ImageDraw.Draw(img)
    near, far = 0.27, 0.73
    along = {"left of": (near, far), "right of": (far, near), "above": (near, far),
             "below": (far, near)}[scene.relation]
    horizontal = scene.relation in ("left of", "right of")
    objects = []
    for role, phrase, pos in zip(("subject", "object"), (scene.subject, scene.obj), along, strict=True):
        main = pos + rng.uniform(-0.04, 0.04)
        across = 0.5 + rng.uniform(-0.1, 0.1)
        cx, cy = (main, across) if horizontal else (across, main)
        radius = _radius(rng, phrase.size) * size
        _draw_shape(draw, phrase.shape, cx * size, cy * size, radius, COLORS[phrase.color])
        objects.append({
            "role": role, "color": phrase.color, "shape": phrase.shape, "size": phrase.size,
            "center": [round(cx * size, 3), round(cy * size, 3)], "radius": round(radius, 3),
            "box": [round(v, 3) for v in _shape_box(phrase.shape, cx * size, cy * size, radius)],
        })
    layout = {
        "text": scene.caption(), "relation": scene.relation, "width": size, "height": size,
        "background": list(background), "objects": objects,
    }
    return img, layout


def _radius(rng: np.random.Generator, size: str | None) -> float:
    """Radius as a fraction of the image side (centres are >= 0.38 apart, so no overlap)."""
    if size == "big":
        return float(rng.uniform(0.18, 0.2))
    if size == "small":
        return float(rng.uniform(0.09, 0.1))
    return float(rng.uniform(0.12, 0.16))


def _draw_shape(
    draw: ImageDraw.ImageDraw, shape: str, cx: float, cy: float, r: float,
    color: tuple[int, int, int],
) -> None:
    if shape == "circle":
        draw.ellipse((cx - r, cy - r, cx + r, cy + r), fill=color)
    elif shape == "square":
        h = 0.85 * r
        draw.rectangle((cx - h, cy - h, cx + h, cy + h), fill=color)
    else:
        draw.polygon(_polygon(shape, cx, cy, r), fill=color)


def _shape_box(shape: str, cx: float, cy: float, r: float) -> tuple[float, float, float, float]:
    """Bounds ``(x1, y1, x2, y2)`` of what :func:`_draw_shape` draws, in pixels."""
    if shape == "circle":
        return cx - r, cy - r, cx + r, cy + r
    if shape == "square":
        h = 0.85 * r
        return cx - h, cy - h, cx + h, cy + h
    xs, ys = zip(*_polygon(shape, cx, cy, r), strict=True)
    return min(xs), min(ys), max(xs), max(ys)


def _polygon(shape: str, cx: float, cy: float, r: float) -> Sequence[tuple[float, float]]:
    if shape == "triangle":
        return [(cx, cy - r), (cx + 0.95 * r, cy + 0.75 * r), (cx - 0.95 * r, cy + 0.75 * r)]
    if shape == "diamond":
        return [(cx, cy - r), (cx + 0.8 * r, cy), (cx, cy + r), (cx - 0.8 * r, cy)]
    if shape == "star":
        angles = np.pi / 2 + np.arange(10) * np.pi / 5
        radii = np.where(np.arange(10) % 2 == 0, r, 0.45 * r)
        return [(float(cx + q * np.cos(t)), float(cy - q * np.sin(t)))
                for q, t in zip(radii, angles, strict=True)]
    raise InputError(f"shape must be one of {SHAPES}, got {shape!r}")


def _provenance(n_items: int, seed: int, image_size: int, split: str) -> str:
    return (
        f"{_PROVENANCE_MARK} {__version__} (vlprobe.data.synthetic.make_synthetic_winoground)\n"
        f"n_items={n_items} seed={seed} image_size={image_size} split={split}\n"
        "Drawn shapes and template captions only: no Winoground text or images. Safe to share.\n"
        "Same vlprobe version and arguments give byte-identical files.\n"
    )
