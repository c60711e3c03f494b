"""Registry: decorator and lazy registration, lazy import, errors, the built-in entries."""

from __future__ import annotations

import sys
import typing
from pathlib import Path

import pytest

from vlprobe.registry import DATASETS, EXPERIMENTS, MODELS, STRATEGIES, Expects, Registry


@pytest.fixture
def lazy_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A throwaway importable module that has not been imported yet."""
    name = f"vlprobe_lazy_target_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(
        'class Thing:\n    """A lazily registered thing.\n\n    More text.\n    """\n',
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


def test_decorator_registers_and_returns_the_object() -> None:
    reg: Registry[type] = Registry("widget")

    @reg.register("spinner")
    class Spinner:
        """Spins things.

        Details that are not part of the help line.
        """

    assert reg.get("spinner") is Spinner
    assert "spinner" in reg
    assert reg.names() == ["spinner"]
    assert list(reg) == ["spinner"]
    assert len(reg) == 1
    assert reg.describe("spinner") == "Spins things."


def test_register_with_explicit_target_and_help() -> None:
    reg: Registry[object] = Registry("widget")

    def factory() -> int:
        return 1

    assert reg.register("f", factory, help="makes ones") is factory
    assert reg.get("f") is factory
    assert reg.describe("f") == "makes ones"


def test_lazy_entry_is_imported_only_on_get(lazy_module: str) -> None:
    reg: Registry[type] = Registry("widget")
    reg.register("thing", f"{lazy_module}:Thing")
    assert lazy_module not in sys.modules
    # Listing, membership and describe do not import the target.
    assert reg.names() == ["thing"]
    assert "thing" in reg
    assert reg.describe("thing") == ""
    assert lazy_module not in sys.modules

    obj = reg.get("thing")
    assert lazy_module in sys.modules
    assert obj is sys.modules[lazy_module].Thing
    assert reg.get("thing") is obj
    # Help falls back to the first docstring line once the target is imported.
    assert reg.describe("thing") == "A lazily registered thing."


def test_lazy_help_given_at_registration_is_kept(lazy_module: str) -> None:
    reg: Registry[type] = Registry("widget")
    reg.register("thing", f"{lazy_module}:Thing", help="given help")
    reg.get("thing")
    assert reg.describe("thing") == "given help"


def test_unknown_name_suggests_and_lists_known() -> None:
    reg: Registry[object] = Registry("model")
    reg.register("clip", object())
    reg.register("lxmert", object())
    with pytest.raises(ValueError) as exc:
        reg.get("clpi")
    msg = str(exc.value)
    assert "unknown model 'clpi'" in msg
    assert "did you mean 'clip'?" in msg
    assert "known: clip, lxmert" in msg


def test_unknown_name_without_close_match_has_no_suggestion() -> None:
    reg: Registry[object] = Registry("model")
    reg.register("clip", object())
    with pytest.raises(ValueError) as exc:
        reg.get("zzzzzzzz")
    assert "did you mean" not in str(exc.value)
    assert "known: clip" in str(exc.value)
    with pytest.raises(ValueError, match="unknown model"):
        reg.describe("zzzzzzzz")


def test_unknown_name_in_empty_registry() -> None:
    with pytest.raises(ValueError, match=r"known: none"):
        Registry("probe").get("linear")


@pytest.mark.parametrize("bad", ["", " clip", "clip ", "cl ip", "clip\n"])
def test_bad_names_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="model name"):
        Registry("model").register(bad, object())


def test_duplicate_registration_of_a_different_object_is_refused() -> None:
    reg: Registry[object] = Registry("model")
    first, second = object(), object()
    reg.register("m", first)
    with pytest.raises(ValueError, match="model 'm' is already registered"):
        reg.register("m", second)
    with pytest.raises(ValueError, match="already registered"):
        reg.register("m", "some.module:Other")
    assert reg.get("m") is first


def test_distinct_objects_sharing_a_qualname_are_refused() -> None:
    def make() -> object:
        def factory() -> None:
            return None

        return factory

    reg: Registry[object] = Registry("model")
    reg.register("m", make())
    with pytest.raises(ValueError, match="already registered"):
        reg.register("m", make())


def test_duplicate_lazy_strings_naming_different_targets_are_refused() -> None:
    reg: Registry[object] = Registry("model")
    reg.register("m", "pkg.mod:A")
    with pytest.raises(ValueError, match="already registered"):
        reg.register("m", "pkg.mod:B")


def test_reregistering_the_same_object_is_accepted() -> None:
    reg: Registry[object] = Registry("model")
    target = object()
    reg.register("m", target)
    reg.register("m", target)
    assert reg.get("m") is target


def test_lazy_string_then_the_class_itself_is_accepted(lazy_module: str) -> None:
    """What vlprobe.extract.models.clip does: the registry names it lazily, the module decorates it."""
    reg: Registry[type] = Registry("model")
    reg.register("thing", f"{lazy_module}:Thing")
    module = __import__(lazy_module)
    assert reg.register("thing")(module.Thing) is module.Thing
    assert reg.get("thing") is module.Thing
    # And the lazy string again, after resolution.
    reg.register("thing", f"{lazy_module}:Thing")
    assert reg.get("thing") is module.Thing


def test_builtin_registries() -> None:
    assert "clip" in MODELS
    assert "winoground" in DATASETS
    assert MODELS.describe("clip")
    assert DATASETS.describe("winoground")
    from vlprobe.data.winoground import load_winoground
    from vlprobe.extract.models.clip import CLIPAdapter

    assert MODELS.get("clip") is CLIPAdapter
    assert DATASETS.get("winoground") is load_winoground


# -- every entry is what its registry holds ------------------------------------------------------------


@pytest.fixture
def bases_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A module with a base class, a subclass, an instance and two factories (one lying about what it returns)."""
    name = f"vlprobe_registry_bases_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(
        "from __future__ import annotations\n"
        "class Base:\n    pass\n"
        "class Good(Base):\n    pass\n"
        "class Other:\n    pass\n"
        "ONE = Good()\n"
        "def make() -> Good:\n    return Good()\n"
        "def make_other() -> Other:\n    return Other()\n"
        "def unannotated():\n    return Good()\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


@pytest.mark.parametrize(("how", "good", "bad", "expected"), [
    ("subclass", "Good", "Other", "a subclass of {m}.Base"),
    ("instance", "ONE", "Good", "an instance of {m}.Base"),
    ("returns", "make", "make_other", "a callable returning {m}.Base"),
    ("returns", "make", "unannotated", "a callable returning {m}.Base"),
])
def test_a_wrong_entry_is_refused_when_resolved(bases_module: str, how: str, good: str, bad: str,
                                                expected: str) -> None:
    m = bases_module
    reg: Registry[object] = Registry("widget", Expects(how, (f"{m}:Base",)))  # type: ignore[arg-type]
    reg.register("good", f"{m}:{good}")
    reg.register("bad", f"{m}:{bad}")
    assert reg.names() == ["bad", "good"]  # listing imports and checks nothing
    assert m not in sys.modules
    got = reg.get("good")
    assert reg.get("good") is got
    with pytest.raises(TypeError) as err:
        reg.get("bad")
    message = str(err.value)
    assert message.startswith(f"widget registry: 'bad' ({m}:{bad}) is ")
    assert message.endswith(f", not {expected.format(m=m)}")
    with pytest.raises(TypeError):  # still refused: a wrong entry never counts as checked
        reg.get("bad")


def test_objects_registered_directly_are_checked_too(bases_module: str) -> None:
    module = __import__(bases_module)
    reg: Registry[type] = Registry("widget", Expects("subclass", (f"{bases_module}:Base",)))
    reg.register("good")(module.Good)
    reg.register("bad", module.Other)
    assert reg.get("good") is module.Good
    with pytest.raises(TypeError, match=r"^widget registry: 'bad' is <class .*Other'>, not a subclass of "):
        reg.get("bad")


def test_every_builtin_entry_is_what_its_registry_holds() -> None:
    from vlprobe.augment.base import Strategy
    from vlprobe.data.items import Dataset
    from vlprobe.extract.models.base import Adapter
    from vlprobe.extract.models.blind import TextScorer
    from vlprobe.runs.declare import Experiment

    for name in MODELS.names():
        cls = MODELS.get(name)
        assert isinstance(cls, type) and issubclass(cls, Adapter | TextScorer), name
    for name in DATASETS.names():
        loader = DATASETS.get(name)
        assert typing.get_type_hints(loader)["return"] is Dataset, name
    for name in STRATEGIES.names():
        cls = STRATEGIES.get(name)
        assert isinstance(cls, type) and issubclass(cls, Strategy), name
    for name in EXPERIMENTS.names():
        assert isinstance(EXPERIMENTS.get(name), Experiment), name


@pytest.mark.parametrize(("name", "meant"), [
    ("CLIP", "clip"), ("Lxmert", "lxmert"),  # case
    ("clip-vit-b32", "clip"), ("lxmert-base-uncased", "lxmert"), ("blip-itm-large", "blip-itm"),  # a name and more
    ("clpi", "clip"),  # spelling
])
def test_closest_name_reads_a_newcomers_guess(name: str, meant: str) -> None:
    from vlprobe.validation import closest_name

    assert closest_name(name, ["blip-itm", "clip", "lxmert", "openclip", "siglip"]) == meant


@pytest.mark.parametrize(("name", "family"), [
    ("openai/clip-vit-base-patch32", "clip"), ("unc-nlp/lxmert-base-uncased", "lxmert"),
    ("Salesforce/blip-itm-base-coco", "blip-itm"), ("google/siglip-base-patch16-224", "siglip"),
    ("Qwen/Qwen2-VL-2B-Instruct", "qwen2-vl"), ("llava-hf/llava-1.5-7b-hf", "llava"),
    ("openai-community/gpt2-large", "gpt2"),
])
def test_a_checkpoint_given_as_the_model_is_named_as_one(name: str, family: str) -> None:
    from vlprobe.registry import MODELS

    with pytest.raises(ValueError) as exc:
        MODELS.get(name)
    assert f"; that is a checkpoint: --model {family} --checkpoint {name} (known: " in str(exc.value)


def test_a_checkpoint_folder_given_as_the_model_is_named_by_its_model_type(tmp_path: Path) -> None:
    from vlprobe.registry import MODELS

    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "lxmert"}', encoding="utf-8")
    with pytest.raises(ValueError, match=f"that is a checkpoint: --model lxmert --checkpoint {folder}"):
        MODELS.get(str(folder))
    with pytest.raises(ValueError, match="that looks like a checkpoint: pass it as --checkpoint someone/thing"):
        MODELS.get("someone/thing")


def test_a_model_name_too_long_for_a_path_is_an_unknown_name(tmp_path: Path) -> None:
    """The checkpoint hint looks for a folder of that name; a name the file system cannot hold
    (ENAMETOOLONG) is no folder, not an OSError."""
    from vlprobe.registry import MODELS

    with pytest.raises(ValueError, match="unknown model 'aaaa"):
        MODELS.get("a" * 300)
    with pytest.raises(ValueError, match="that looks like a checkpoint"):  # in a folder that exists
        MODELS.get(str(tmp_path / ("b" * 300)))
