"""docs/scaling-out.md's Slurm examples, as written, against the stand-in Slurm
(:mod:`tests.launch.fake_slurm`): the ``sbatch`` array of ``--shard auto`` extractions with its
merge as a dependent job, and ``probe launch slurm``; the hub's checkpoint and the gated
Winoground folder are the only things replaced (by a tiny CLIP and a synthetic set)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.docs_text import DOCS, blocks_of
from tests.launch import fake_slurm

HUB_CHECKPOINT = "openai/clip-vit-base-patch32"


def _block(needle: str) -> str:
    """The text of the scaling-out page's command block that holds ``needle``."""
    [block] = [b for b in blocks_of(DOCS / "scaling-out.md") if b.is_command and needle in b.text]
    return block.text


def _folder(tmp_path: Path, tiny_clip: Path, synthetic_dir: Path) -> tuple[Path, dict[str, str]]:
    """A folder that holds winoground/ (as the page says to run from), and the environment of a
    shell with ``probe`` (this source tree) and the stand-in Slurm on PATH."""
    import vlprobe

    folder = tmp_path / "cluster"
    folder.mkdir()
    shutil.copytree(synthetic_dir, folder / "winoground")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    src = Path(vlprobe.__file__).resolve().parents[1]
    shim = bin_dir / "probe"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m vlprobe "$@"\n')
    shim.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", HF_HUB_OFFLINE="1",
               OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(src), *filter(None, [os.environ.get("PYTHONPATH")])]))
    return folder, env


def _all_ended(state: Path, timeout: float = 600) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        jobs = fake_slurm.jobs(state)
        if jobs and all(j["state"] in fake_slurm.TERMINAL for j in jobs):
            return jobs
        assert time.monotonic() < deadline, [(j["job_id"], j["state"]) for j in jobs]
        time.sleep(0.2)


@pytest.mark.slow  # eight extraction jobs and a merge job on two shared cores: about a minute
def test_the_sbatch_array_and_its_merge_run_as_written(
    stand_in_slurm: Path, tiny_clip: Path, synthetic_dir: Path, make_config: Callable[..., Any],
    assert_caches_equal: Callable[..., None], tmp_path: Path,
) -> None:
    from vlprobe.extract.cache.reader import ActivationCache
    from vlprobe.extract.runner import extract

    text = _block("JOB=$(sbatch --parsable --array=0-7")
    folder, env = _folder(tmp_path, tiny_clip, synthetic_dir)
    done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", text.replace(HUB_CHECKPOINT, str(tiny_clip))],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    jobs = _all_ended(stand_in_slurm)
    assert [j["state"] for j in jobs] == ["COMPLETED"] * 9, [(j["job_id"], j["state"], j.get("reason")) for j in jobs]
    array, merge = fake_slurm.calls(stand_in_slurm)
    assert array["tasks"] == 8 and merge["options"]["dependency"] == f"afterok:{array['job']}"
    logs = sorted(p.name for p in (folder / "logs").iterdir())
    assert logs == sorted([*(f"extract-{array['job']}_{k}.out" for k in range(8)), f"merge-{merge['job']}.out"])
    merged = folder / "caches" / "clip.h5"
    one = tmp_path / "one.h5"  # the same extraction as one process (no variants: --data-dir attaches none)
    extract(make_config(one, variants=None, data_dir=folder / "winoground"))
    assert_caches_equal(merged, one)  # each shard batches its own rows: equal to float rounding
    with ActivationCache(merged) as c:
        tasks = sorted(int(j["SLURM_ARRAY_TASK_ID"]) for j in c.record.job_ids)
        assert tasks == list(range(8)) and {j["source"].split(" (")[0] for j in c.record.job_ids} == {
            f"Slurm array task {k} of 8" for k in range(8)}


@pytest.mark.slow  # eight shard jobs and a merge job through submitit: about two minutes
def test_probe_launch_slurm_runs_as_written(
    stand_in_slurm: Path, tiny_clip: Path, synthetic_dir: Path, tmp_path: Path,
) -> None:
    from vlprobe.extract.cache.reader import ActivationCache

    text = _block("probe launch slurm --array 8")
    command = text[text.index("probe launch slurm"):text.index("# the same on this machine")]
    folder, env = _folder(tmp_path, tiny_clip, synthetic_dir)
    done = subprocess.run(["bash", "-e", "-c", command.replace(HUB_CHECKPOINT, str(tiny_clip))], cwd=folder,
                          env={**env, "VLPROBE_SLURM_POLL": "0.5"}, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "caches/clip.h5"
    shards, merge = fake_slurm.calls(stand_in_slurm)
    assert shards["tasks"] == 8 and shards["options"]["partition"] == "gpu" and shards["options"]["mem"] == "32GB"
    assert merge["options"]["dependency"] == "afterok:" + ":".join(f"{shards['job']}_{k}" for k in range(8))
    assert merge["options"]["gpus-per-node"] == "0"
    with ActivationCache(folder / "caches" / "clip.h5") as c:
        assert c.record.merged_from == [f"clip.shard-{k}-of-8.h5" for k in range(8)]
    assert (folder / "caches" / "clip.launch" / "logs" / "merge.log").is_file()
