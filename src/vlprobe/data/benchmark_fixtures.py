"""Tiny synthetic copies of benchmarks in their exact on-disk formats (``probe fixtures dataset
--format NAME``), so loaders, ``probe data info`` and ``probe eval`` run offline on files laid
out as the authors distribute them.

Each writer fills a new (or empty) folder with the benchmark's annotation files, field for field,
and small PIL-drawn images at the paths those files name, under the folder layout the loader's
``image_root`` expects. Captions come from a small grammar (coloured shapes and their relations);
everything is drawn from ``numpy.random.default_rng(seed)``, so one ``(format, n_items, seed)``
gives byte-identical files. ``PROVENANCE.txt`` says the data are synthetic and lists every file
written; a folder is only ever overwritten when it holds a previous fixture and nothing else.

=========  ======================================================================================
format     what is written (``n`` = ``n_items``)
=========  ======================================================================================
aro        the authors' three roots: ``visual_genome_relation.json`` and
           ``visual_genome_attribution.json`` (n records each, boxes inside ``images/<id>.jpg``)
           in ``<out>`` (their ``ARO_ROOT``); ``coco/coco_karpathy_test.json`` (n images x 5
           captions) beside ``coco/val2014/COCO_val2014_<12 digits>.jpg`` (``COCO_ROOT``: their
           ``COCO_Order`` reads the Karpathy file from the image root); ``flickr30k/flickr30k_test.json``
           (n images x 5) beside ``flickr30k/flickr30k-images/<id>.jpg`` (``FLICKR_ROOT``);
           ``image_root``: ``coco=<out>/coco``, ``flickr30k=<out>/flickr30k`` (``vg`` is the
           default ``<out>/images``)
mmvp-vlm   ``Questions.csv`` (the release's header ``Question ID,Type,Statement``, then ``n`` pairs
           of rows, at most 135; ids 1, 2, 3, ...; categories by position, 15 pairs each, the
           type the release's folder name of the category: ``Orientation`` ... ``Camera
           Perspective``) and ``MLLM_VLM Images/<type>/<qid>.jpg``
naturalbench  ``data/train-0000<k>-of-00003.parquet`` (the release's three shards): ``n`` samples of
           each question type spread over them, the dataset's columns and its ``huggingface``
           schema metadata (the features), images embedded as ``{"bytes", "path"}`` structs
           (JPEG), answers in the pattern the authors' scoring assumes
eqben      ``eqben_subset_10percent_final.json`` (``n`` records of each of the 7 sub-datasets,
           ``{image0, image1, caption0, caption1}``, sub-datasets interleaved as the shuffled
           release) and ``image_subset/<sub-dataset>/<clip>/<frame>.png`` (PNG frames as the
           release, the folder ``subset_image.tar.gz`` unpacks to; YouCook2: ``.npy`` BGR
           frames, as the authors' loader reads them)
colorswap  ``test.json`` and ``train.json`` (``n`` examples each, ids running on across the
           splits, ``{id, caption_1, caption_2, image_1, image_2, image_source, caption_source}``)
           and ``images/img_<id>_<k>.png``
sugarcrepe-pp  ``swap_obj.json``, ``swap_att.json``, ``replace_obj.json``, ``replace_att.json``,
           ``replace_rel.json`` (``n`` records each, ``{id, filename, caption, caption2,
           negative_caption}``) and ``val2017/<12 digits>.jpg`` (the ``image_dir``)
crepe      ``syst_hard_negatives/syst_vg_hard_negs_<seen|unseen>_compounds_in_<cc12m|yfcc|laion>.csv``
           (``n`` rows each: ``region_id, caption, x, y, width, height, valid_hard_negs_comp,
           valid_hard_negs_atom, image_id, valid_hard_negs_combined``; the last row of each has no
           compound negatives) and ``prod_hard_negatives/<atom|negate|swap>/
           prod_vg_hard_negs_<neg>_complexity_<4..12>.csv`` (``n`` rows with the release's header
           ``image_id, caption, n, n_objects, n_relations, n_attributes, n_connected_components,
           hard_negs, x, y, width, height``, the box as floats, five negatives each, written as a
           set literal ``{...}`` in every third row of the atom and negate files, as the release
           writes some); images ``vg/VG_100K/<id>.jpg`` (even ids) and ``vg/VG_100K_2/<id>.jpg``
           (odd); ``image_root``: ``vg=<out>/vg``
vl-checklist  ``data/<the 56 annotation files>`` (``n`` records each, ``[image path, {"POS": [...],
           "NEG": [...]}]``) and ``n`` images per source under ``vg/VG_100K/``,
           ``hake/hake_images_20200614/`` and ``swig/``; ``image_root``: ``<out>`` (the authors'
           ``$DATASET``)
=========  ======================================================================================
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from vlprobe.io.atomic import atomic_path, atomic_write
from vlprobe.io.paths import ensure_folder
from vlprobe.validation import InputError, check_choice, check_int, check_positive_int, check_seed

__all__ = ["FIXTURE_FORMATS", "write_benchmark_fixture"]

_MARK = "vlprobe synthetic benchmark fixture"
COLOURS = {"red": (220, 30, 30), "green": (30, 170, 60), "blue": (30, 70, 220), "yellow": (230, 200, 20),
           "purple": (140, 40, 170), "orange": (240, 130, 20)}
SHAPES = ("circle", "square", "triangle", "star")
OBJECTS = ("dog", "cat", "table", "cup", "shirt", "horse", "car", "tree")
RELATIONS = ("on", "behind", "under", "holding", "near", "wearing")
ATTRIBUTES = ("white", "black", "wooden", "small", "large", "red")


class _Writer:
    """Writes a fixture's files under ``root`` and remembers them for ``PROVENANCE.txt``."""

    def __init__(self, root: Path, fmt: str, n_items: int, seed: int, image_size: int) -> None:
        self.root, self.fmt, self.size = root, fmt, image_size
        self.header = f"format={fmt} n_items={n_items} seed={seed} image_size={image_size}"
        self.files: list[str] = []

    def json(self, rel: str, obj: Any) -> None:
        path = self._path(rel)
        with atomic_write(path) as fh:
            fh.write(json.dumps(obj, ensure_ascii=False))

    def text(self, rel: str, text: str) -> None:
        path = self._path(rel)
        with atomic_write(path) as fh:
            fh.write(text)

    def image(self, rel: str, rng: np.random.Generator, *, size: tuple[int, int] | None = None) -> tuple[int, int]:
        """A picture of two or three coloured shapes on a grey ground; returns its (width, height)."""
        w, h = size or (self.size, self.size)
        img = Image.new("RGB", (w, h), tuple(int(v) for v in rng.integers(150, 230, size=3)))
        draw = ImageDraw.Draw(img)
        for _ in range(int(rng.integers(2, 4))):
            colour = list(COLOURS.values())[int(rng.integers(len(COLOURS)))]
            r = int(rng.integers(max(2, min(w, h) // 10), max(3, min(w, h) // 4)))
            cx, cy = int(rng.integers(r, w - r)), int(rng.integers(r, h - r))
            draw.ellipse((cx - r, cy - r, cx + r, cy + r), fill=colour)
        path = self._path(rel)
        with atomic_path(path) as tmp:
            img.save(tmp, format="PNG" if rel.endswith(".png") else "JPEG", quality=90)
        return w, h

    def _path(self, rel: str) -> Path:
        path = self.root / rel
        ensure_folder(path.parent)
        self.files.append(rel)
        return path

    def finish(self) -> None:
        with atomic_write(self.root / "PROVENANCE.txt") as fh:
            fh.write(f"{_MARK} (made by vlprobe; synthetic, safe to share)\n{self.header}\n")
            fh.write("".join(f"{f}\n" for f in self.files))


def _check_out(root: Path) -> None:
    """A new or empty folder, or one that holds a previous fixture (and nothing else): emptied."""
    if not root.exists():
        return
    if not root.is_dir():
        raise InputError(f"out: {str(root)!r} exists and is not a directory")
    entries = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() or p.is_symlink())
    if not entries:
        return
    prov = root / "PROVENANCE.txt"
    lines = prov.read_text(encoding="utf-8", errors="replace").splitlines() if prov.is_file() else []
    listed = set(lines[2:]) | {"PROVENANCE.txt"}
    if not lines or not lines[0].startswith(_MARK) or not set(entries) <= listed:
        raise InputError(
            f"out: {str(root)!r} is not empty and does not hold (only) a benchmark fixture made by vlprobe; "
            "refusing to overwrite it: choose an empty or new directory"
        )
    for rel in entries:
        (root / rel).unlink()


def _caption_shape(rng: np.random.Generator) -> str:
    colours = list(COLOURS)
    a, b = rng.choice(len(colours), 2, replace=False)
    s, t = rng.choice(len(SHAPES), 2, replace=False)
    return f"A {colours[a]} {SHAPES[s]} next to a {colours[b]} {SHAPES[t]}."


def _aro(w: _Writer, rng: np.random.Generator, n: int) -> None:
    relation, attribution = [], []
    for i in range(n):
        image_id = str(2300000 + i)
        width, height = w.image(f"images/{image_id}.jpg", rng, size=(w.size + 16, w.size))
        o1, o2 = (OBJECTS[int(k)] for k in rng.choice(len(OBJECTS), 2, replace=False))
        rel = RELATIONS[i % len(RELATIONS)]
        x, y = int(rng.integers(0, width // 4)), int(rng.integers(0, height // 4))
        box = {"bbox_x": x, "bbox_y": y, "bbox_w": int(rng.integers(width // 2, width - x)),
               "bbox_h": int(rng.integers(height // 2, height - y))}
        relation.append({"image_id": image_id, "relation_name": rel, **box,
                         "true_caption": f"the {o1} is {rel} the {o2}", "false_caption": f"the {o2} is {rel} the {o1}",
                         "image_path": f"{image_id}.jpg"})
        a1, a2 = (ATTRIBUTES[int(k)] for k in rng.choice(len(ATTRIBUTES), 2, replace=False))
        if i % 2:  # repeat pairs so that some reach the macro average's 25-item floor at larger n
            a1, a2 = ATTRIBUTES[0], ATTRIBUTES[1]
        attribution.append({"image_id": image_id, "attributes": [a1, a2], **box,
                            "true_caption": f"the {a1} {o1} and the {a2} {o2}",
                            "false_caption": f"the {a2} {o1} and the {a1} {o2}", "image_path": f"{image_id}.jpg"})
    w.json("visual_genome_relation.json", relation)
    w.json("visual_genome_attribution.json", attribution)
    coco, flickr = [], []
    for i in range(n):
        name = f"val2014/COCO_val2014_{391895 + i:012d}.jpg"
        w.image(f"coco/{name}", rng)
        coco.append({"image": name, "caption": [_caption_shape(rng) for _ in range(5)]})
        fname = f"flickr30k-images/{1000092795 + i}.jpg"
        w.image(f"flickr30k/{fname}", rng)
        flickr.append({"image": fname, "caption": [_caption_shape(rng) for _ in range(5)]})
    w.json("coco/coco_karpathy_test.json", coco)  # in the image roots, where the authors' code reads them
    w.json("flickr30k/flickr30k_test.json", flickr)


def _mmvp_vlm(w: _Writer, rng: np.random.Generator, n: int) -> None:
    from vlprobe.data.mmvp_vlm import (
        MMVP_CATEGORIES,
        MMVP_CSV,
        MMVP_IMAGES,
        MMVP_PAIRS_PER_CATEGORY,
        MMVP_TYPES,
    )

    n = min(n, len(MMVP_CATEGORIES) * MMVP_PAIRS_PER_CATEGORY)
    lines = ["Question ID,Type,Statement"]
    colours = list(COLOURS)
    for p in range(n):
        qtype = MMVP_TYPES[p // MMVP_PAIRS_PER_CATEGORY]
        a, b = (colours[int(k)] for k in rng.choice(len(colours), 2, replace=False))
        shape = SHAPES[int(rng.integers(len(SHAPES)))]
        for k, colour in enumerate((a, b)):
            qid = 2 * p + 1 + k
            w.image(f"{MMVP_IMAGES}/{qtype}/{qid}.jpg", rng)
            statement = f"the {shape} is {colour}"
            lines.append(f'{qid},{qtype},"{statement}"' if "," in statement else f"{qid},{qtype},{statement}")
    w.text(MMVP_CSV, "\n".join(lines) + "\n")


def _naturalbench(w: _Writer, rng: np.random.Generator, n: int) -> None:
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    from vlprobe.data.naturalbench import (
        NATURALBENCH_ANSWERS,
        NATURALBENCH_COLUMNS,
        NATURALBENCH_PATTERN,
        NATURALBENCH_SHARDS,
    )

    rows: dict[str, list[Any]] = {c: [] for c in NATURALBENCH_COLUMNS}
    colours = list(COLOURS)
    for k in range(2 * n):
        qtype = "yes_no" if k % 2 == 0 else "multiple_choice"
        for j in (0, 1):
            img = Image.new("RGB", (w.size, w.size), tuple(int(v) for v in rng.integers(0, 255, size=3)))
            buf = io.BytesIO()
            img.save(buf, format="JPEG", quality=90)
            rows[f"Image_{j}"].append({"bytes": buf.getvalue(), "path": None})
        a, b = (colours[int(c)] for c in rng.choice(len(colours), 2, replace=False))
        shape = SHAPES[int(rng.integers(len(SHAPES)))]
        if qtype == "yes_no":
            questions = (f"Is the {shape} {a}?", f"Is the {shape} {b}?")
        else:
            questions = (f"What colour is the {shape}? A. {a} B. {b}", f"What colour is the {shape}? A. {b} B. {a}")
        for q in (0, 1):
            rows[f"Question_{q}"].append(questions[q])
            for i in (0, 1):
                rows[f"Image_{i}_Question_{q}"].append(NATURALBENCH_ANSWERS[qtype][1 - NATURALBENCH_PATTERN[q][i]])
        rows["Index"].append(k)
        rows["Question Type"].append(qtype)
        rows["Source"].append(("Flickr30K", "DOCCI")[int(rng.integers(2))])
    image = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    features = {c: {"_type": "Image"} if c in ("Image_0", "Image_1") else
                {"dtype": "int64" if c == "Index" else "string", "_type": "Value"} for c in NATURALBENCH_COLUMNS}
    schema = pa.schema([(c, pa.int64() if c == "Index" else image if c in ("Image_0", "Image_1") else pa.string())
                        for c in NATURALBENCH_COLUMNS],
                       metadata={"huggingface": json.dumps({"info": {"features": features}})})
    table = pa.table(rows, schema=schema)
    for k, part in enumerate(np.array_split(np.arange(table.num_rows), NATURALBENCH_SHARDS)):  # the release's 3
        path = w._path(f"data/train-{k:05d}-of-{NATURALBENCH_SHARDS:05d}.parquet")
        with atomic_path(path) as tmp:
            pq.write_table(table.slice(int(part[0]) if len(part) else 0, len(part)), tmp)


def _eqben(w: _Writer, rng: np.random.Generator, n: int) -> None:
    from vlprobe.data.eqben import EQBEN_SUBSETS

    records = []
    for k in range(n):
        for subset in EQBEN_SUBSETS:
            pair = []
            for j in (0, 1):
                if subset == "eqbenyoucook2":
                    rel = f"image_subset/{subset}/clip{k:03d}/{j:04d}.npy"
                    frame = rng.integers(0, 256, size=(w.size, w.size + 8, 3), dtype=np.uint8)
                    with atomic_path(w._path(rel)) as tmp, open(tmp, "wb") as fh:
                        np.save(fh, frame, allow_pickle=False)
                else:
                    rel = f"image_subset/{subset}/clip{k:03d}/{j:04d}.png"
                    w.image(rel, rng)
                pair.append(rel.removeprefix("image_subset/"))
            first = _caption_shape(rng)
            words = first.rstrip(".").split()
            words[1], words[6] = words[6], words[1]  # the colours swapped
            second = " ".join(words) + "."
            records.append({"image0": pair[0], "image1": pair[1], "caption0": first, "caption1": second})
    order = rng.permutation(len(records))
    w.json("eqben_subset_10percent_final.json", [records[int(i)] for i in order])


def _colorswap(w: _Writer, rng: np.random.Generator, n: int) -> None:
    for s, split in enumerate(("test", "train")):
        records = []
        for k in range(n):
            ident = s * n + k
            for j in (1, 2):
                w.image(f"images/img_{ident}_{j}.png", rng)
            words = _caption_shape(rng).rstrip(".").split()
            first = " ".join(words)
            words[1], words[6] = words[6], words[1]  # the colour words swapped
            records.append({"id": ident, "caption_1": first, "caption_2": " ".join(words),
                            "image_1": f"images/img_{ident}_1.png", "image_2": f"images/img_{ident}_2.png",
                            "image_source": ("midjourney", "dalle3", "stable-diffusion")[int(rng.integers(3))],
                            "caption_source": ("human", "gpt-4")[int(rng.integers(2))]})
        w.json(f"{split}.json", records)


def _sugarcrepe_pp(w: _Writer, rng: np.random.Generator, n: int) -> None:
    from vlprobe.data.sugarcrepe_pp import SUGARCREPE_PP_SUBSETS

    colours = list(COLOURS)
    for s, subset in enumerate(SUGARCREPE_PP_SUBSETS):
        records = []
        for k in range(n):
            filename = f"{100000 + s * n + k:012d}.jpg"
            w.image(f"val2017/{filename}", rng)
            words = _caption_shape(rng).rstrip(".").split()  # A <c1> <s1> next to a <c2> <s2>
            caption2 = f"Beside a {words[6]} {words[7]} is a {words[1]} {words[2]}."
            neg = list(words)
            if subset.startswith("swap"):
                i, j = (1, 6) if subset == "swap_att" else (2, 7)
                neg[i], neg[j] = neg[j], neg[i]
            elif subset == "replace_rel":
                neg[3:5] = ["far", "from"]
            else:
                i = 1 if subset == "replace_att" else 2
                pool = colours if i == 1 else list(SHAPES)
                neg[i] = next(c for c in pool if c not in (words[1], words[6], words[2], words[7]))
            records.append({"id": k, "filename": filename, "caption": " ".join(words) + ".", "caption2": caption2,
                            "negative_caption": " ".join(neg) + "."})
        w.json(f"{subset}.json", records)


def _crepe(w: _Writer, rng: np.random.Generator, n: int) -> None:
    import csv
    import io

    from vlprobe.data.crepe import (
        CREPE_COMPLEXITIES,
        CREPE_PROD_NEGATIVES,
        CREPE_SYST_SPLITS,
        CREPE_TRAIN_DATASETS,
        crepe_file,
    )

    colours = list(COLOURS)
    sizes: dict[int, tuple[int, int]] = {}
    for k in range(n):
        image_id = 2 + k
        sizes[image_id] = w.image(f"vg/{'VG_100K' if image_id % 2 == 0 else 'VG_100K_2'}/{image_id}.jpg", rng,
                                  size=(w.size + 8, w.size))

    def table(header: list[str], rows: list[list[Any]]) -> str:
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)
        return buf.getvalue()

    def region(k: int) -> tuple[int, int, int, int, int]:
        image_id = 2 + k % n
        width, height = sizes[image_id]
        x, y = int(rng.integers(0, width // 4)), int(rng.integers(0, height // 4))
        return image_id, x, y, int(rng.integers(width // 2, width - x)), int(rng.integers(height // 2, height - y))

    def phrase(parts: int) -> list[str]:  # distinct words, so that every negative differs from the caption
        cs, os_ = rng.choice(len(colours), parts, replace=False), rng.choice(len(OBJECTS), parts, replace=False)
        return [w for c, o in zip(cs, os_, strict=True) for w in (colours[int(c)], OBJECTS[int(o)])]

    for train in CREPE_TRAIN_DATASETS:
        for split in CREPE_SYST_SPLITS:
            rows = []
            for k in range(n):
                image_id, x, y, bw, bh = region(k)
                a, o1, b, o2 = phrase(2)
                caption = f"a {a} {o1} and a {b} {o2}"
                others = [c for c in colours if c not in (a, b)]
                atom = [f"a {c} {o1} and a {b} {o2}" for c in others[:2]]
                comp = [] if k == n - 1 else [f"a {a} {o2} and a {b} {o1}", f"a {b} {o1} and a {a} {o2}"]
                rows.append([str(100 + k), caption, x, y, bw, bh, repr(comp), repr(atom), str(image_id),
                             repr(atom + comp)])
            rel = crepe_file(f"syst_{train}_{split}_atom")[0]
            w.text(rel, table(["region_id", "caption", "x", "y", "width", "height", "valid_hard_negs_comp",
                               "valid_hard_negs_atom", "image_id", "valid_hard_negs_combined"], rows))
    for neg in CREPE_PROD_NEGATIVES:
        for complexity in CREPE_COMPLEXITIES:
            rows = []
            for k in range(n):
                image_id, x, y, bw, bh = region(k)
                words = phrase(max(1, complexity // 3))
                caption = "a " + " ".join(words)
                negs = []
                for j in range(5):
                    alt = list(words)
                    if neg == "atom":
                        alt[0] = colours[(colours.index(words[0]) + j + 1) % len(colours)]
                    elif neg == "swap":
                        i1, i2 = (int(v) for v in rng.choice(len(alt), 2, replace=False))
                        alt[i1], alt[i2] = alt[i2], alt[i1]
                    else:
                        alt.insert(min(j, len(alt)), "no")
                    negs.append("a " + " ".join(alt))
                # the release writes some atom and negate cells as a set literal: {'a', 'b'}
                cell = "{" + repr(negs)[1:-1] + "}" if neg != "swap" and k % 3 == 2 else repr(negs)
                parts = len(words) // 2
                rows.append([str(image_id), caption, complexity, 2 * parts, parts - 1, parts, 1, cell,
                             float(x), float(y), float(bw), float(bh)])
            rel = crepe_file(f"prod_{neg}_{complexity}")[0]
            w.text(rel, table(["image_id", "caption", "n", "n_objects", "n_relations", "n_attributes",
                               "n_connected_components", "hard_negs", "x", "y", "width", "height"], rows))


def _vl_checklist(w: _Writer, rng: np.random.Generator, n: int) -> None:
    from vlprobe.data.vl_checklist import VLC_FILES, VLC_SOURCES

    colours = list(COLOURS)
    images: dict[str, list[str]] = {}
    for source in ("vg", "hake", "swig"):
        names = []
        for k in range(n):
            rel = {"vg": f"VG_100K/{2 + k}.jpg", "hake": f"hake_images_20200614/img_{k:04d}.jpg",
                   "swig": f"{('jumping', 'riding', 'carrying')[k % 3]}_{100 + k}.jpg"}[source]
            w.image(f"{source}/{rel}", rng)
            names.append(rel)
        images[source] = names
    for subset, rel in VLC_FILES.items():
        records = []
        for k in range(n):
            a, b = (colours[int(c)] for c in rng.choice(len(colours), 2, replace=False))
            o1, o2 = (OBJECTS[int(c)] for c in rng.choice(len(OBJECTS), 2, replace=False))
            if subset.startswith("Attribute"):
                pos, neg = [f"the {a} {o1}", f"a {a} {o1}"], [f"the {b} {o1}"]
            elif subset.startswith("Object"):
                pos, neg = [f"a {o1} next to a {a} {SHAPES[k % len(SHAPES)]}"], [f"a {o2} next to a {a} {SHAPES[k % len(SHAPES)]}"]
            else:
                r1, r2 = (RELATIONS[int(c)] for c in rng.choice(len(RELATIONS), 2, replace=False))
                pos, neg = [f"the {o1} {r1} the {o2}"], [f"the {o1} {r2} the {o2}", f"the {o2} {r2} the {o1}"]
            records.append([images[VLC_SOURCES[subset]][k], {"POS": pos, "NEG": neg}])
        w.json(f"data/{rel}", records)


#: Format -> writer of its files.
_WRITERS: dict[str, Callable[[_Writer, np.random.Generator, int], None]] = {
    "aro": _aro, "mmvp-vlm": _mmvp_vlm, "naturalbench": _naturalbench, "eqben": _eqben,
    "colorswap": _colorswap, "sugarcrepe-pp": _sugarcrepe_pp, "crepe": _crepe,
    "vl-checklist": _vl_checklist}
FIXTURE_FORMATS: tuple[str, ...] = tuple(_WRITERS)


def write_benchmark_fixture(
    out: str | os.PathLike[str], fmt: str, *, n_items: int = 8, seed: int = 0, image_size: int = 48,
) -> Path:
    """Write a synthetic copy of benchmark ``fmt`` in its on-disk format (module docstring).

    Parameters
    ----------
    out : path
        A new or empty folder, or one holding a previous fixture.
    fmt : str
        One of :data:`FIXTURE_FORMATS`.
    n_items : int
        Items per file (per subset).
    seed : int
    image_size : int
        Image side in pixels (16 to 1024).

    Returns
    -------
    Path
        ``out``.
    """
    fmt = check_choice(fmt, "format", FIXTURE_FORMATS)
    n_items = check_positive_int(n_items, "n_items")
    seed = check_seed(seed)
    image_size = check_int(image_size, "image_size", low=16, high=1024)
    root = Path(out)
    _check_out(root)
    ensure_folder(root)
    w = _Writer(root, fmt, n_items, seed, image_size)
    w.text("PROVENANCE.txt", f"{_MARK} (being written)\n")
    w.files.remove("PROVENANCE.txt")
    _WRITERS[fmt](w, np.random.default_rng(seed), n_items)
    w.finish()
    return root
