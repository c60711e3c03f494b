"""The NL-Augmenter adapter, with fake SentenceOperation classes written by the tests."""

from __future__ import annotations

import random
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from vlprobe.augment.nlaugmenter import NLAugmenterStrategy
from vlprobe.augment.runner import augment_texts
from vlprobe.cli import app

FAKE = textwrap.dedent('''
    import random


    class SentenceOperation:
        languages = ["en"]
        tasks = ["TEXT_CLASSIFICATION"]

        def __init__(self, seed=0, verbose=False, max_outputs=1):
            self.seed = seed
            self.max_outputs = max_outputs


    class Shouty(SentenceOperation):
        """Returns a bare string (as BackTranslation does), upper-cased."""

        def generate(self, sentence):
            return sentence.upper()


    class Messy(SentenceOperation):
        """Duplicates, empties, the unchanged input, too many outputs; global random reseeded."""

        def generate(self, sentence):
            random.seed(self.seed)
            if "boom" in sentence:
                raise RuntimeError("cannot handle boom")
            words = sentence.split()
            out = [sentence, "", "   ", " ".join(reversed(words)), " ".join(reversed(words))]
            out += [" ".join(random.sample(words, len(words))) + f" #{k}" for k in range(self.max_outputs + 3)]
            return out


    class Counted(SentenceOperation):
        """Takes its count as `max_output` (singular), like ReplaceHyponyms."""

        def __init__(self, n=1, seed=0, max_output=2):
            super().__init__(seed)
            self.max_output = max_output

        def generate(self, sentence):
            return [f"{sentence} v{k}" for k in range(self.max_output)]


    class NotAnOperation:
        pass
''')


@pytest.fixture()
def nl_src(tmp_path: Path):
    """A fake NL-Augmenter checkout: nlaugmenter/transformations/fake_op/transformation.py."""
    pkg = tmp_path / "nlaugmenter" / "transformations" / "fake_op"
    pkg.mkdir(parents=True)
    for d in (tmp_path / "nlaugmenter", tmp_path / "nlaugmenter" / "transformations", pkg):
        (d / "__init__.py").write_text("")
    (pkg / "transformation.py").write_text(FAKE)
    yield tmp_path
    # the adapter put the checkout on sys.path and imported it: undo both for the next test
    sys.path[:] = [p for p in sys.path if p != str(tmp_path.resolve())]
    for name in [m for m in sys.modules if m == "nlaugmenter" or m.startswith("nlaugmenter.")]:
        del sys.modules[name]


def test_string_output_becomes_a_list(nl_src: Path) -> None:
    s = NLAugmenterStrategy("nlaugmenter.transformations.fake_op.transformation.Shouty", source=str(nl_src))
    assert s.available().ok
    assert s.generate("a dog", np.random.default_rng(0)) == ["A DOG"]
    assert s.generate("A DOG", np.random.default_rng(0)) == []  # unchanged output dropped


def test_outputs_are_normalised_limited_and_seeded_per_caption(nl_src: Path) -> None:
    s = NLAugmenterStrategy("fake_op.Messy", max_outputs=3, source=str(nl_src))  # the short form
    state = random.getstate()
    out = s.generate("a red dog near a blue cat", np.random.default_rng(1))
    assert random.getstate() == state  # the operation's reseeding does not leak
    assert len(out) == 3 and len(set(out)) == 3
    assert "a red dog near a blue cat" not in out and all(o.strip() for o in out)
    assert out[0] == "cat blue a near dog red a"  # the duplicate reversal kept once, in order
    assert out == s.generate("a red dog near a blue cat", np.random.default_rng(1))
    assert s.load() is None and s._op.max_outputs == 3  # the count went to the constructor


def test_count_argument_variants(nl_src: Path) -> None:
    s = NLAugmenterStrategy("fake_op.Counted", max_outputs=4, source=str(nl_src))
    assert s.generate("x", np.random.default_rng(0)) == ["x v0", "x v1", "x v2", "x v3"]
    assert s.provenance()["kwargs"] == {"max_output": 4}


def test_errors_are_recorded_per_caption(nl_src: Path) -> None:
    res = augment_texts(["a boom here", "a calm day"], strategies=["nlaugmenter:fake_op.Messy"],
                        options={"nlaugmenter:fake_op.Messy": {"source": str(nl_src)}}, max_per_strategy=2)
    boom, calm = res.sets
    assert boom.variants == () and len(boom.errors) == 1
    assert boom.errors[0]["strategy"] == "nlaugmenter:fake_op.Messy"
    assert "RuntimeError: cannot handle boom" in boom.errors[0]["error"]
    assert len(calm.variants) == 2 and calm.errors == ()
    assert res.n_errors == 1
    assert calm.variants[0].params["class"] == "nlaugmenter.transformations.fake_op.transformation.Messy"


def test_missing_or_wrong_classes_are_unavailable(nl_src: Path) -> None:
    ok, reason, hint = NLAugmenterStrategy("fake_op.Nope", source=str(nl_src)).available()
    assert not ok and "Nope" in reason and "--nl-augmenter" in hint
    ok, reason, _ = NLAugmenterStrategy("nonexistent_pkg_xyz.Op").available()
    assert not ok and "nonexistent_pkg_xyz" in reason
    with pytest.raises(ValueError, match="no generate"):
        NLAugmenterStrategy("fake_op.NotAnOperation", source=str(nl_src))._import()
    with pytest.raises(ValueError, match="dotted path"):
        NLAugmenterStrategy("NoDots")


def test_cli_with_nl_augmenter_path(nl_src: Path, tmp_path: Path, one_error_line) -> None:
    runner = CliRunner()
    r = runner.invoke(app, ["augment", "--text", "a calm day", "--strategies", "nlaugmenter:fake_op.Shouty",
                            "--nl-augmenter", str(nl_src)])
    assert r.exit_code == 0, r.output
    assert "[nlaugmenter:fake_op.Shouty] A CALM DAY" in r.stdout
    r = runner.invoke(app, ["augment", "--text", "a boom", "--strategies", "nlaugmenter:fake_op.Messy",
                            "--nl-augmenter", str(nl_src)])
    assert r.exit_code == 0 and "error: RuntimeError: cannot handle boom" in r.stdout
    r = runner.invoke(app, ["augment", "--text", "x", "--strategies", "nlaugmenter:fake_op.Nope",
                            "--nl-augmenter", str(nl_src), "--strict"])
    one_error_line(r, "strict", "fake_op.Nope")
