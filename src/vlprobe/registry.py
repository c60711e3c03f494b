"""One registry class for everything vlprobe looks up by name.

Models, datasets, augmentation strategies and experiments each have a :class:`Registry`
instance. Entries are registered with a decorator or as a lazy ``"module:attr"`` string, so
listing names never imports torch or transformers. An experiment entry names its
:class:`~vlprobe.runs.declare.Experiment` declaration; its one-line help is what
``probe ls experiments`` and ``probe run --help`` show. Unknown names are answered with the known
names and a "did you mean" (:func:`vlprobe.validation.unknown_name_message`).

Each registry declares what its entries are (:class:`Expects`: a subclass of a base class, an
instance of a class, or a function annotated to return a class), named as lazy
``"module:attr"`` strings too; an entry is checked when it is first resolved (:meth:`Registry.get`),
and a wrong one raises a :class:`TypeError` naming the registry, the entry and what was expected.
"""

from __future__ import annotations

import importlib
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from vlprobe.validation import InputError, unknown_name_message

T = TypeVar("T")

__all__ = ["DATASETS", "EXPERIMENTS", "MODELS", "STRATEGIES", "Expects", "Registry"]


def _resolve(target: str) -> Any:
    """The object a lazy ``"package.module:attr"`` string names."""
    module_name, _, attr = target.partition(":")
    return getattr(importlib.import_module(module_name), attr)


@dataclass(frozen=True)
class Expects:
    """What a registry's entries must be.

    Attributes
    ----------
    how : {"subclass", "instance", "returns"}
        A class deriving from one of ``bases``; an instance of one; or a callable whose return
        annotation is one of them (a factory such as a dataset loader).
    bases : tuple of str
        The classes, as lazy ``"package.module:attr"`` strings (a registry imports no subpackage).
    """

    how: Literal["subclass", "instance", "returns"]
    bases: tuple[str, ...]

    def describe(self) -> str:
        names = " or ".join(b.replace(":", ".") for b in self.bases)
        return {"subclass": "a subclass of ", "instance": "an instance of ",
                "returns": "a callable returning "}[self.how] + names

    def fits(self, obj: Any) -> bool:
        """Whether ``obj`` is what the registry holds (imports the bases)."""
        bases = tuple(_resolve(b) for b in self.bases)
        if self.how == "subclass":
            return isinstance(obj, type) and issubclass(obj, bases)
        if self.how == "instance":
            return isinstance(obj, bases)
        if not callable(obj):
            return False
        try:
            returned = typing.get_type_hints(obj).get("return")
        except (NameError, TypeError):  # an annotation that does not resolve says nothing either
            return False
        return isinstance(returned, type) and issubclass(returned, bases)


class Registry(Generic[T]):
    """Names mapped to objects (classes, factories), resolved lazily and checked when resolved.

    Parameters
    ----------
    kind : str
        What the entries are ("model", "dataset", ...); used in error messages.
    expects : Expects, optional
        What every entry must be (checked once per entry, by :meth:`get`).
    hint : callable, optional
        ``hint(name, known names)``: what to say about an unknown name instead of the "did you
        mean" (None: nothing special), e.g. that a model name is a checkpoint.
    """

    def __init__(self, kind: str, expects: Expects | None = None,
                 hint: Callable[[str, list[str]], str | None] | None = None) -> None:
        self.kind = kind
        self.expects = expects
        self.hint = hint
        self._entries: dict[str, T | str] = {}
        self._help: dict[str, str] = {}
        self._checked: set[str] = set()

    def register(self, name: str, target: T | str | None = None, *, help: str = "") -> Any:
        """Register ``target`` under ``name``; without a target, act as a decorator.

        ``target`` may be the object itself or a lazy ``"package.module:attr"`` string.
        """
        if not isinstance(name, str) or not name or any(c.isspace() for c in name):
            raise ValueError(f"{self.kind} name must be a non-empty string without spaces, got {name!r}")
        if target is None:

            def decorator(obj: T) -> T:
                self._add(name, obj, help or _first_line(getattr(obj, "__doc__", None)))
                return obj

            return decorator
        self._add(name, target, help)
        return target

    def _add(self, name: str, target: T | str, help: str) -> None:
        existing = self._entries.get(name)
        if existing is not None and existing is not target and not _same_lazy(existing, target):
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = target
        self._help[name] = help
        self._checked.discard(name)

    def get(self, name: str) -> T:
        """Return the object registered as ``name``, importing it if it is lazy.

        Raises
        ------
        InputError
            No entry is named ``name`` (the message lists the known names).
        TypeError
            The entry is not what the registry holds (:attr:`expects`).
        """
        if name not in self._entries:
            raise InputError(self.unknown_message(name))
        target = self._entries[name]
        obj = _resolve(target) if isinstance(target, str) else target
        if name not in self._checked:
            self._check(name, obj, target)
        if isinstance(target, str):
            self._entries[name] = obj
            if not self._help.get(name):
                self._help[name] = _first_line(getattr(obj, "__doc__", None))
        return obj

    def _check(self, name: str, obj: Any, target: object) -> None:
        if self.expects is not None and not self.expects.fits(obj):
            where = f" ({target})" if isinstance(target, str) else ""
            raise TypeError(
                f"{self.kind} registry: {name!r}{where} is {obj!r}, not {self.expects.describe()}"
            )
        self._checked.add(name)

    def unknown_message(self, name: str) -> str:
        known = sorted(self._entries)
        return unknown_name_message(self.kind, name, known, self.hint(name, known) if self.hint else None)

    def describe(self, name: str) -> str:
        """One-line description of an entry (without importing lazy entries)."""
        if name not in self._entries:
            raise InputError(self.unknown_message(name))
        return self._help.get(name, "")

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._entries)


def _first_line(doc: str | None) -> str:
    return (doc or "").strip().splitlines()[0] if (doc or "").strip() else ""


def _same_lazy(a: object, b: object) -> bool:
    """True when two registrations name the same object (lazy string and/or the object).

    Two objects are the same only if identical: distinct objects may share a
    ``module:qualname`` (instances without one, closures made by one factory).
    """
    if not isinstance(a, str) and not isinstance(b, str):
        return a is b

    def key(x: object) -> object:
        return x if isinstance(x, str) else f"{getattr(x, '__module__', '')}:{getattr(x, '__qualname__', '')}"

    return key(a) == key(b)


def checkpoint_hint(name: str, known: list[str]) -> str | None:
    """What to say when a checkpoint is given as ``--model``: a hub id (``openai/clip-vit-base-patch32``)
    or a folder. The family is the known model whose name appears, as whole words, in the
    repository's name (else in the whole id, else in the folder's ``config.json`` ``model_type``):
    ``that is a checkpoint: --model clip --checkpoint openai/clip-vit-base-patch32``."""
    import json
    import re
    from pathlib import Path

    def words(text: str) -> list[str]:
        return [w for w in re.split(r"[^a-z0-9]+", text.lower()) if w]

    path = Path(name).expanduser()
    try:
        there = path.exists()
    except OSError:  # a name no path can be (too long for the file system): no folder
        there = False
    if "/" not in name and "\\" not in name and not there:
        return None
    try:
        model_type = str(json.loads((path / "config.json").read_text(encoding="utf-8")).get("model_type", ""))
    except (OSError, ValueError, AttributeError):  # no config.json, or not one
        model_type = ""
    places = [words(name.rsplit("/", 1)[-1]), words(name), words(model_type)]

    def found(place: list[str]) -> list[str]:
        hits = []
        for k in known:
            parts = words(k)
            if any(place[i:i + len(parts)] == parts for i in range(len(place) - len(parts) + 1)):
                hits.append(k)
        return hits

    for place in places:
        hits = found(place)
        if hits:
            family = max(hits, key=len)
            return f"that is a checkpoint: --model {family} --checkpoint {name}"
    return f"that looks like a checkpoint: pass it as --checkpoint {name}, with --model naming its family"


#: Model classes: adapters (dual and cross-encoders) and blind text scorers.
MODELS: Registry[Callable[..., Any]] = Registry("model", Expects(
    "subclass", ("vlprobe.extract.models.base:Adapter", "vlprobe.extract.models.blind:TextScorer")),
    hint=checkpoint_hint)
#: Dataset loaders: functions returning a Dataset.
DATASETS: Registry[Callable[..., Any]] = Registry("dataset", Expects("returns", ("vlprobe.data.items:Dataset",)))
#: Caption-variant strategy classes.
STRATEGIES: Registry[Callable[..., Any]] = Registry(
    "strategy", Expects("subclass", ("vlprobe.augment.base:Strategy",)))
#: Experiment declarations.
EXPERIMENTS: Registry[Any] = Registry("experiment", Expects("instance", ("vlprobe.runs.declare:Experiment",)))
#: Tiny-checkpoint writers ``write(out, seed) -> Path`` by model name (``probe fixtures model NAME``).
FIXTURES: Registry[Callable[..., Any]] = Registry("model fixture", Expects("returns", ("pathlib:Path",)))

# Built-in entries, lazy so that `probe ls` stays fast.
MODELS.register(
    "clip", "vlprobe.extract.models.clip:CLIPAdapter",
    help="CLIP dual encoder (any HF CLIP checkpoint or local directory); streams text, image",
)
MODELS.register(
    "siglip", "vlprobe.extract.models.siglip:SiglipAdapter",
    help="SigLIP dual encoder, sigmoid match scores (any HF SigLIP checkpoint or local directory); streams text, image",
)
DATASETS.register(
    "winoground", "vlprobe.data.winoground:load_winoground",
    help="Winoground (facebook/winoground on the hub, or a local examples.jsonl + images/)",
)
EXPERIMENTS.register(
    "winoground-scores", "vlprobe.experiments.winoground_scores:EXPERIMENT",
    help="Winoground text/image/group scores per tag (from a cache or a score file)",
)
EXPERIMENTS.register(
    "recall", "vlprobe.experiments.recall:EXPERIMENT",
    help="Recall@k (I2T, T2I) over the full image x caption score matrix",
)

# Benchmark scoring: SugarCrepe, VALSE, blind text-only baselines, evaluations.
DATASETS.register(
    "sugarcrepe", "vlprobe.data.sugarcrepe:load_sugarcrepe",
    help="SugarCrepe (7 JSON files; images from a COCO val2017 folder via --image-dir)",
)
DATASETS.register(
    "valse", "vlprobe.data.valse:load_valse",
    help="VALSE (11 JSON files; valid items by default; images via --image-root SOURCE=DIR)",
)
DATASETS.register(
    "aro", "vlprobe.data.aro:load_aro",
    help="ARO: VG-Relation, VG-Attribution (cropped VG images), COCO-Order, Flickr30k-Order (authors' JSON files)",
)
# 2x2 benchmarks after SugarCrepe (keep these lines together)
DATASETS.register(
    "mmvp-vlm", "vlprobe.data.mmvp_vlm:load_mmvp_vlm",
    help="MMVP-VLM: 135 statement pairs x 2 images in 9 categories (Questions.csv + 'MLLM_VLM Images/')",
)
DATASETS.register(
    "sugarcrepe-pp", "vlprobe.data.sugarcrepe_pp:load_sugarcrepe_pp",
    help="SugarCrepe++: COCO image, two positive captions and a hard negative (5 JSON files + COCO val2017)",
)
DATASETS.register(
    "colorswap", "vlprobe.data.colorswap:load_colorswap",
    help="ColorSwap: 2 images x 2 captions with colour words swapped (test.json/train.json + images/)",
)
DATASETS.register(
    "eqben", "vlprobe.data.eqben:load_eqben",
    help="EqBen: 2 images x 2 captions per item in 7 sub-datasets (the labelled 10% subset's JSON + its images)",
)
DATASETS.register(
    "naturalbench", "vlprobe.data.naturalbench:load_naturalbench",
    help="NaturalBench: 2 questions x 2 images per sample, yes/no or A/B (the dataset's parquet shards)",
)
DATASETS.register(
    "vl-checklist", "vlprobe.data.vl_checklist:load_vl_checklist",
    help="VL-CheckList: 56 annotation files (Object/Attribute/Relation x VG, VAW, HAKE, SWiG; --image-root DIR)",
)
DATASETS.register(
    "crepe", "vlprobe.data.crepe:load_crepe",
    help="CREPE: systematicity and productivity hard-negative CSVs (cropped Visual Genome regions; --image-root vg=DIR)",
)
MODELS.register(
    "blind-lm", "vlprobe.extract.models.blind:CausalLMScorer",
    help="Blind baseline: token-normalised log-likelihood of the caption under any HF causal LM",
)
MODELS.register(
    "blind-grammar", "vlprobe.extract.models.blind:SequenceClassifierScorer",
    help="Blind baseline: P(acceptable) of any HF sequence classifier (e.g. a CoLA model)",
)
MODELS.register(
    "gpt2", "vlprobe.extract.models.valse_lm:GPT2Scorer",
    help="VALSE's GPT-2 baseline: minus the caption's perplexity as VALSE computes it (gpt2-large; perplexity=token-mean corrects it)",
)
MODELS.register(
    "openai-gpt", "vlprobe.extract.models.valse_lm:GPT1Scorer",
    help="VALSE's GPT-1 baseline: minus the caption's perplexity as VALSE computes it (openai-gpt; perplexity=token-mean corrects it)",
)
MODELS.register(
    "vera", "vlprobe.extract.models.vera:VeraScorer",
    help="SugarCrepe's Vera baseline: calibrated plausibility of the caption (liujch1998/vera, T5 encoder + head)",
)
MODELS.register(
    "grammar", "vlprobe.extract.models.blind:GrammarScorer",
    help="SugarCrepe's grammar baseline: P(LABEL_1) of textattack/distilbert-base-uncased-CoLA",
)
MODELS.register(
    "caption-length", "vlprobe.extract.models.blind:CaptionLengthScorer",
    help="Blind baseline: minus the caption length in characters (no checkpoint)",
)
EXPERIMENTS.register(
    "sugarcrepe", "vlprobe.experiments.benchmark_eval:SUGARCREPE",
    help="SugarCrepe accuracy per subset and Replace/Swap/Add (`probe eval sugarcrepe`)",
)
EXPERIMENTS.register(
    "valse", "vlprobe.experiments.benchmark_eval:VALSE",
    help="VALSE acc_r, AUROC, caption/foil rates and precisions (`probe eval valse`)",
)
EXPERIMENTS.register(
    "aro", "vlprobe.experiments.benchmark_eval:ARO",
    help="ARO macro accuracy (VG-Relation, VG-Attribution) and Precision@1 (COCO/Flickr30k-Order) (`probe eval aro`)",
)
# 2x2 benchmarks after SugarCrepe (keep these lines together)
EXPERIMENTS.register(
    "mmvp-vlm", "vlprobe.experiments.benchmark_eval:MMVP_VLM",
    help="MMVP-VLM pair accuracy per category and their mean (`probe eval mmvp-vlm`)",
)
EXPERIMENTS.register(
    "sugarcrepe-pp-tot", "vlprobe.experiments.sugarcrepe_pp_tot:EXPERIMENT",
    help="SugarCrepe++ text-only task (TOT) from a cache's pooled text embeddings, per file",
)
EXPERIMENTS.register(
    "sugarcrepe-pp", "vlprobe.experiments.benchmark_eval:SUGARCREPE_PP",
    help="SugarCrepe++ image-to-text accuracy (ITT) and each positive against the negative (`probe eval sugarcrepe-pp`)",
)
EXPERIMENTS.register(
    "colorswap", "vlprobe.experiments.benchmark_eval:COLORSWAP",
    help="ColorSwap text, image and group scores per split (`probe eval colorswap`)",
)
EXPERIMENTS.register(
    "eqben", "vlprobe.experiments.benchmark_eval:EQBEN",
    help="EqBen text, image and group scores per sub-dataset (`probe eval eqben`)",
)
EXPERIMENTS.register(
    "naturalbench", "vlprobe.experiments.benchmark_eval:NATURALBENCH",
    help="NaturalBench question, image, binary and group accuracies (`probe eval naturalbench`)",
)
EXPERIMENTS.register(
    "vl-checklist", "vlprobe.experiments.benchmark_eval:VL_CHECKLIST",
    help="VL-CheckList ITC accuracy per file, per aspect (the radar's 13) and per category (`probe eval vl-checklist`)",
)
EXPERIMENTS.register(
    "crepe", "vlprobe.experiments.benchmark_eval:CREPE",
    help="CREPE image-to-text Recall@1/3/5/10 over hard negatives per file (`probe eval crepe`)",
)
EXPERIMENTS.register(
    "bias-gap", "vlprobe.experiments.bias_gap:EXPERIMENT",
    help="SugarCrepe's bias analysis: blind scorers' gaps and the benchmark's own metric, Figure 1's bars beside VLM runs",
)
EXPERIMENTS.register(
    "refine", "vlprobe.experiments.refine:EXPERIMENT",
    help="SugarCrepe's adversarial refinement of two blind scorers' gaps (`probe refine`)",
)

# -- cross-encoders (xmodels) ----------------------------------------------------------------------
MODELS.register(
    "lxmert", "vlprobe.extract.models.lxmert:LxmertAdapter",
    help="LXMERT cross-encoder with region features; streams lang (0..14), vision (0..10)",
)
MODELS.register(
    "uniter", "vlprobe.extract.models.uniter.adapter:UniterAdapter",
    help="UNITER cross-encoder (official .pt + config JSON) with region features; streams text, image",
)
MODELS.register(
    "visualbert", "vlprobe.extract.models.visualbert:VisualBertAdapter",
    help="VisualBERT cross-encoder (HF VisualBertForPreTraining, *-coco-pre) with region features; streams text, image",
)
MODELS.register(
    "vilbert", "vlprobe.extract.models.vilbert.adapter:ViLBertAdapter",
    help="ViLBERT / 12-in-1 cross-encoder (vilbert-multi-task .bin + config JSON; score_head=itm|vil_logit, task_id, "
         "max_regions, max_text_length) "
         "with region features; streams text, image",
)
MODELS.register(
    "openclip", "vlprobe.extract.models.openclip.adapter:OpenClipAdapter",
    help="OpenCLIP checkpoint loaded natively (hub folder, .pt/.bin/.safetensors state dict; --model-option arch=NAME, "
         "act=quick_gelu); ViT or ModifiedResNet image tower, CLIP, roberta or xlm-roberta text tower; streams text, image",
)
MODELS.register(
    "blip-itm", "vlprobe.extract.models.blip:BlipItmAdapter",
    help="BLIP image-text matching cross-encoder on pixels (ITM probability, or ITC cosine); streams text, image, pair",
)

# -- generative vision-language models ---------------------------------------------------------------
MODELS.register(
    "llava", "vlprobe.extract.models.llava:LlavaAdapter",
    help="LLaVA-1.5 generative model (HF checkpoints): VQAScore or caption log-prob; streams caption, image, joint",
)
MODELS.register(
    "qwen2-vl", "vlprobe.extract.models.qwen2_vl:Qwen2VLAdapter",
    help="Qwen2-VL generative model (HF checkpoints): VQAScore or caption log-prob; streams caption, image, joint",
)

# Probing experiments.
EXPERIMENTS.register(
    "separability", "vlprobe.experiments.separability:EXPERIMENT",
    help="Per-item linear separability of caption-0 vs caption-1 variants per layer, vs a shuffled control",
)
EXPERIMENTS.register(
    "task-adaptation", "vlprobe.experiments.task_adaptation:EXPERIMENT",
    help="MLP on fused pair embeddings (text-/image-score), item split, flipped-item control, seeds",
)
EXPERIMENTS.register(
    "variant-probe", "vlprobe.experiments.variant_probe:EXPERIMENT",
    help="MLP picks which of two options paraphrases a reference caption, per layer, with control",
)
EXPERIMENTS.register(
    "mdl", "vlprobe.experiments.mdl:EXPERIMENT",
    help="Online (prequential) code length of the variant / task-adaptation labels per layer, vs control",
)
EXPERIMENTS.register(
    "patch", "vlprobe.experiments.patch:EXPERIMENT",
    help="Activation patching on minimal pairs: per layer and token group, the score's move to the other caption's",
)
EXPERIMENTS.register(
    "erasure", "vlprobe.experiments.erasure:EXPERIMENT",
    help="LEACE-erase the caption-side concept at a text-side layer, run the model on: Winoground/SugarCrepe/VALSE scores",
)
EXPERIMENTS.register(
    "conditional", "vlprobe.experiments.conditional:EXPERIMENT",
    help="Conditional probing: bits a layer adds over a bag-of-words baseline of the same caption",
)

# -- caption-variant strategies (vlprobe.augment) and the variant-similarity experiment --------
for _name, _target, _help in (
    ("original", "vlprobe.augment.identity:OriginalStrategy", "the caption itself (the paper's 'original')"),
    ("synonym", "vlprobe.augment.lexical:SynonymStrategy", "a word -> a WordNet synonym of its most frequent sense"),
    ("hypernym", "vlprobe.augment.lexical:HypernymStrategy", "a noun -> a direct WordNet hypernym"),
    ("hyponym", "vlprobe.augment.lexical:HyponymStrategy", "a noun -> a direct WordNet hyponym"),
    ("slang", "vlprobe.augment.lexical:SlangStrategy", "a word -> an informal equivalent (vlprobe's slang list)"),
    ("role-rewrite", "vlprobe.augment.roles:RoleRewriteStrategy", "active <-> passive, adjunct fronting (spaCy parse)"),
    ("back-translation", "vlprobe.augment.neural:BackTranslationStrategy", "en -> pivot -> en with two seq2seq MT models"),
    ("diverse-back-translation", "vlprobe.augment.neural:DiverseBackTranslationStrategy",
     "back-translation, many beams, a diverse faithful subset"),
    ("paraphrase", "vlprobe.augment.neural:ParaphraseStrategy", "a seq2seq paraphraser with diverse (group) beam search"),
):
    STRATEGIES.register(_name, _target, help=_help)
EXPERIMENTS.register(
    "variant-similarity", "vlprobe.experiments.variant_similarity:EXPERIMENT",
    help="Winoground scores with S'(I,T) = (1-l)S(I,T) + l*agg S(I,T_i) over caption variants (paper 5.2)",
)

# Tiny random checkpoints in each model's real on-disk format, for tests and the demos; every
# registered adapter has one (the adapter contract test checks it).
for _name, _target, _help in (
    ("clip", "clip:write_tiny_clip", "Hugging Face CLIP folder"),
    ("siglip", "siglip:write_tiny_siglip", "Hugging Face SigLIP folder"),
    ("lxmert", "lxmert:write_tiny_lxmert", "Hugging Face LXMERT folder"),
    ("uniter", "uniter:write_tiny_uniter", "official UNITER state dict (uniter-base.pt) and config JSON"),
    ("blip-itm", "blip:write_tiny_blip_itm", "Hugging Face BLIP image-text matching folder"),
    ("llava", "llava:write_tiny_llava", "Hugging Face LLaVA-1.5 folder (CLIP tower, Llama LM, chat template)"),
    ("qwen2-vl", "qwen2_vl:write_tiny_qwen2_vl", "Hugging Face Qwen2-VL-Instruct folder (chat template)"),
    ("visualbert", "visualbert:write_tiny_visualbert", "Hugging Face VisualBertForPreTraining folder"),
    ("vilbert", "vilbert:write_tiny_vilbert", "vilbert-multi-task release tree (config/bert_base_6layer_6conect.json, save/pretrained_model.bin or save/multi_task_model.bin); --arch pretrained|multitask"),
    ("openclip", "openclip:write_tiny_openclip", "OpenCLIP hub folder (open_clip_pytorch_model.bin, open_clip_config.json); --arch vit|resnet|roberta|xlm-roberta"),
    ("frcnn", "frcnn:write_tiny_frcnn", "Visual Genome Faster R-CNN in the hub port's format (probe regions extract --detector)"),
    ("blind-lm", "text_models:write_tiny_gpt2", "Hugging Face GPT-2 causal LM folder"),
    ("gpt2", "text_models:write_tiny_gpt2", "gpt2-large's hub files (GPT-2 causal LM)"),
    ("vera", "text_models:write_tiny_vera", "liujch1998/vera's hub files (T5 encoder, bf16 shards, spiece.model)"),
    ("grammar", "text_models:write_tiny_cola_distilbert", "textattack/distilbert-base-uncased-CoLA's hub files"),
    ("openai-gpt", "text_models:write_tiny_openai_gpt", "openai-gpt's hub files (OpenAIGPTLMHeadModel)"),
    ("blind-grammar", "text_models:write_tiny_bert_classifier", "Hugging Face BERT sequence classifier folder"),
):
    FIXTURES.register(_name, f"vlprobe.fixtures.{_target}", help=_help)
