"""The suite on a machine without WordNet: the tests that need it skip, saying why; none fails.

A fresh clone's ``make test`` has no Debian WordNet (installing it needs root). The suite is run
here in a child pytest with ``VLPROBE_TEST_HIDE=wordnet`` (tests/conftest.py points vlprobe's
WordNet lookup at a missing folder, as on such a machine): the augment tests and the matrix's
``setup wordnet`` rows. The bad-input rows need no WordNet (``setup wordnet`` checks ``--root``
before it looks for the dict files), so they must pass, not skip. Other tests may skip too where
the clone has no shared data folder (VLPROBE_SHARED_DATA) or no spaCy model, each saying which. Under
``VLPROBE_TEST_REQUIRE=wordnet`` (what CI sets) the same missing WordNet is a failure.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: What the skip of a test for want of a resource other than WordNet names (tests/conftest.py).
OTHER_RESOURCES = ("VLPROBE_SHARED_DATA", "spaCy")


def _child_pytest(tmp_path: Path, name: str, env: dict[str, str], *args: str) -> dict[str, tuple[str, str]]:
    """Run pytest in a child process; test id -> (outcome, message) from its JUnit XML."""
    xml = tmp_path / f"{name}.xml"
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("VLPROBE_TEST_")}
    child_env.update(env)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp", str(tmp_path / name),
         f"--junitxml={xml}", *args],
        cwd=ROOT, env=child_env, capture_output=True, text=True, timeout=900,
    )
    assert xml.is_file(), proc.stdout[-3000:] + proc.stderr[-3000:]
    out: dict[str, tuple[str, str]] = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        test_id = f"{case.get('classname')}::{case.get('name')}"
        outcome, message = "passed", ""
        for kind in ("failure", "error", "skipped"):
            node = case.find(kind)
            if node is not None:
                outcome, message = kind, node.get("message", "")
                break
        out[test_id] = (outcome, message)
    return out


@pytest.mark.slow
def test_without_wordnet_the_tests_that_need_it_skip_and_the_rest_pass(tmp_path: Path) -> None:
    hide = {"VLPROBE_TEST_HIDE": "wordnet"}
    cases = _child_pytest(tmp_path, "augment", hide, "tests/augment")
    cases.update(_child_pytest(tmp_path, "matrix", hide, "tests/cli/test_bad_input_matrix.py", "-k", "wordnet"))
    bad = {t: o for t, o in cases.items() if o[0] in ("failure", "error")}
    assert not bad, bad
    skipped = {t: m for t, (o, m) in cases.items() if o == "skipped"}
    for test_id in (
        "tests.augment.test_augment_wordnet::test_setup_copies_files_nltk_accepts",
        "tests.augment.test_augment_runner::test_variants_file_format_and_provenance",
        "tests.cli.test_bad_input_matrix::test_the_same_command_replaces_its_own_output[setup wordnet]",
    ):
        assert test_id in skipped, (test_id, sorted(cases))
    # a clone without the shared data (or the spaCy model) skips other tests too, each naming what it lacks
    others = {t: m for t, m in skipped.items() if "WordNet" not in m}
    assert all(any(r in m for r in OTHER_RESOURCES) for m in others.values()), others
    matrix_rows = {t: o for t, (o, _) in cases.items() if "test_bad_input[setup wordnet" in t}
    assert len(matrix_rows) >= 5 and set(matrix_rows.values()) == {"passed"}, matrix_rows
    assert sum(o == "passed" for o, _ in cases.values()) > 50  # the augment tests without WordNet still ran


def test_a_run_that_requires_wordnet_fails_without_it(tmp_path: Path) -> None:
    cases = _child_pytest(tmp_path, "require", {"VLPROBE_TEST_HIDE": "wordnet", "VLPROBE_TEST_REQUIRE": "wordnet"},
                          "tests/augment/test_augment_wordnet.py::test_setup_copies_files_nltk_accepts")
    outcome, message = cases["tests.augment.test_augment_wordnet::test_setup_copies_files_nltk_accepts"]
    assert outcome in ("failure", "error") and "this run must have wordnet" in message, (outcome, message)
