"""The stand-in Slurm (:mod:`tests.launch.fake_slurm`) as a fixture."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.launch import fake_slurm


@pytest.fixture
def stand_in_slurm(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``sbatch``, ``srun``, ``sacct``, ``squeue`` and ``scancel`` of the stand-in first on ``PATH``;
    yields its state folder (``HOLD`` there keeps jobs pending); its jobs are ended afterwards."""
    pytest.importorskip("submitit", reason="submitit is the optional extra vlprobe[slurm]")
    root = tmp_path_factory.mktemp("slurm")
    for name, value in fake_slurm.install(root / "bin", root / "state").items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("VLPROBE_SLURM_POLL", "0.2")
    yield root / "state"
    fake_slurm.kill_all(root / "state")
