"""The testbed's CLIP models for the known-answer tests."""

from __future__ import annotations

import pytest

from tests.experiments.helpers import CLIPTestbed, build_testbed_clip


@pytest.fixture(scope="session")
def testbed_clip(tmp_path_factory: pytest.TempPathFactory) -> CLIPTestbed:
    """The known-answer testbed's CLIP models, caches and Winoground scores, once per session
    (:func:`~tests.experiments.helpers.build_testbed_clip`; minutes: only the testbed tests use it)."""
    return build_testbed_clip(tmp_path_factory.mktemp("testbed-clip"), tmp_path_factory.mktemp("testbed-models"))
