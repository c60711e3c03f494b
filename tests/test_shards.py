"""--shard auto: the shard, local rank and job ids read from simulated launcher environments, and
the refusals of environments that contradict each other."""

from __future__ import annotations

from pathlib import Path

import pytest

from vlprobe.shards import (
    auto_device,
    detect_placement,
    find_shard_files,
    launcher_free,
    parse_shard,
    resolve_shard,
    shard_path,
)
from vlprobe.validation import InputError

# What sbatch sets in the batch script of array task 5 of --array=0-7 (one task)
ARRAY_0_7 = {
    "SLURM_JOB_ID": "1005", "SLURM_ARRAY_JOB_ID": "1000", "SLURM_ARRAY_TASK_ID": "5",
    "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_MAX": "7", "SLURM_ARRAY_TASK_STEP": "1",
    "SLURM_ARRAY_TASK_COUNT": "8", "SLURM_NTASKS": "1", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
}
# torchrun --standalone --nproc-per-node 4: the process of rank 2
TORCHRUN_4 = {"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "0",
              "TORCHELASTIC_RUN_ID": "abc"}


def _srun(procid: int, ntasks: int, **more: str) -> dict[str, str]:
    """What srun sets in task ``procid`` of a step of ``ntasks`` tasks (4 per node)."""
    return {"SLURM_JOB_ID": "77", "SLURM_STEP_ID": "0", "SLURM_PROCID": str(procid),
            "SLURM_NTASKS": str(ntasks), "SLURM_STEP_NUM_TASKS": str(ntasks), "SLURM_LOCALID": str(procid % 4),
            **more}


@pytest.mark.parametrize(("env", "shard", "local", "source"), [
    (ARRAY_0_7, (5, 8), 0, "Slurm array task 5 of 8"),
    ({**ARRAY_0_7, "SLURM_ARRAY_TASK_ID": "6", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_MAX": "8"}, (5, 8), 0,
     "Slurm array task 5 of 8"),  # --array=1-8
    ({**ARRAY_0_7, "SLURM_ARRAY_TASK_ID": "10", "SLURM_ARRAY_TASK_MAX": "14", "SLURM_ARRAY_TASK_STEP": "2"}, (5, 8), 0,
     "Slurm array task 5 of 8"),  # --array=0-14:2
    ({k: v for k, v in ARRAY_0_7.items() if k != "SLURM_ARRAY_TASK_COUNT"}, (5, 8), 0, "Slurm array"),  # old Slurm
    (_srun(3, 8), (3, 8), 3, "srun task 3 of 8"),
    ({**_srun(3, 8), "SLURM_STEP_NUM_TASKS": ""}, (3, 8), 3, "srun task 3 of 8"),
    (TORCHRUN_4, (2, 4), 2, "torchrun rank 2 of 4"),
    # torchrun in the batch script of a one-task job: torchrun ranks the processes
    ({"SLURM_JOB_ID": "9", "SLURM_NTASKS": "1", "SLURM_PROCID": "0", **TORCHRUN_4}, (2, 4), 2, "torchrun"),
    # two srun tasks (one per node) each starting torchrun --nnodes 2 --nproc-per-node 4: RANK spans the job
    ({**_srun(1, 2), "RANK": "6", "WORLD_SIZE": "8", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "4"}, (6, 8), 2,
     "torchrun rank 6 of 8"),
    # an array of 4 jobs, each torchrun --nproc-per-node 2: 8 shards, array-major
    ({**ARRAY_0_7, "SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_MAX": "3", "SLURM_ARRAY_TASK_COUNT": "4",
      "RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}, (7, 8), 1,
     "Slurm array task 3 of 4 x torchrun rank 1 of 2"),
    ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "3", "OMPI_COMM_WORLD_LOCAL_RANK": "1"}, (1, 3), 1,
     "Open MPI rank 1 of 3"),
    ({**_srun(2, 4), "PMI_RANK": "2", "PMI_SIZE": "4"}, (2, 4), 2, "PMI rank 2 of 4"),  # srun --mpi=pmi2
    ({"ACCELERATE_USE_CPU": "False"}, (0, 1), None, "accelerate launch, one process"),
    ({"SLURM_JOB_ID": "9", "SLURM_NTASKS": "1", "SLURM_PROCID": "0"}, (0, 1), 0, "a Slurm job of one task"),
])
def test_placements(env: dict[str, str], shard: tuple[int, int], local: int | None, source: str) -> None:
    p = detect_placement(env)
    assert p is not None
    assert (p.k, p.n) == shard and p.local_rank == local
    assert all(part in p.source for part in source.split(" x ")), p.source
    assert resolve_shard("auto", env)[:2] == shard


def test_job_ids_are_recorded() -> None:
    p = detect_placement({**ARRAY_0_7, "SLURM_CLUSTER_NAME": "c1"})
    assert p is not None
    assert p.job_ids == {"SLURM_CLUSTER_NAME": "c1", "SLURM_JOB_ID": "1005", "SLURM_ARRAY_JOB_ID": "1000",
                         "SLURM_ARRAY_TASK_ID": "5", "SLURM_PROCID": "0"}
    t = detect_placement(TORCHRUN_4)
    assert t is not None and t.job_ids == {"TORCHELASTIC_RUN_ID": "abc", "RANK": "2"}


@pytest.mark.parametrize(("env", "match"), [
    ({}, "auto reads the shard from a launcher"),
    ({"HOME": "/x", "CUDA_VISIBLE_DEVICES": "0"}, "none is set here"),
    ({"RANK": "1"}, "sets RANK but not WORLD_SIZE"),
    ({"RANK": "4", "WORLD_SIZE": "4"}, "outside 0..WORLD_SIZE-1"),
    ({"RANK": "x", "WORLD_SIZE": "4"}, "RANK='x' is no integer"),
    ({**ARRAY_0_7, "SLURM_ARRAY_TASK_ID": "4", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_MAX": "9",
      "SLURM_ARRAY_TASK_COUNT": "3"}, "not a list with gaps"),  # --array=1,4,9
    ({"SLURM_ARRAY_TASK_ID": "3"}, "without SLURM_ARRAY_TASK_MIN"),
    # the batch script of a job of 4 tasks (no srun): every task would be shard 0
    ({"SLURM_JOB_ID": "9", "SLURM_NTASKS": "4", "SLURM_PROCID": "0"}, "start the command with srun"),
    # srun of 2 tasks, each a standalone torchrun of 4 processes: both would run shards 0..3
    ({**_srun(1, 2), **TORCHRUN_4}, "srun started 2 copies of torchrun"),
    ({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", **TORCHRUN_4}, "Open MPI started 2 copies"),
    ({**_srun(1, 4), "PMI_RANK": "2", "PMI_SIZE": "4"}, "the two launchers disagree"),
    ({"SLURM_JOB_ID": "1", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "2"}, "without SLURM_PROCID"),
])
def test_refusals(env: dict[str, str], match: str) -> None:
    with pytest.raises(InputError, match=match):
        resolve_shard("auto", env)


def test_explicit_shard_wins_and_keeps_the_placement() -> None:
    k, n, p = resolve_shard("1/3", TORCHRUN_4)
    assert (k, n) == (1, 3) and p is not None and p.local_rank == 2
    # a given shard is never refused for the environment's sake
    assert resolve_shard("0/2", {"RANK": "1"}) == (0, 2, None)
    assert resolve_shard("0/1", {}) == (0, 1, None)
    with pytest.raises(InputError, match="K/N"):
        resolve_shard("a/b", {})
    with pytest.raises(InputError, match="0 <= K < N"):
        parse_shard("2/2")


def test_shard_paths_and_finding_them(tmp_path: Path) -> None:
    out = tmp_path / "all.h5"
    assert shard_path(out, 0, 1) == out
    assert shard_path(out, 3, 8) == tmp_path / "all.shard-3-of-8.h5"
    with pytest.raises(InputError, match=r"no shard files all\.shard-K-of-N\.h5"):
        find_shard_files(out)
    for k in (2, 0, 1, 10):
        shard_path(out, k, 11).touch()
    (tmp_path / "other.shard-0-of-11.h5").touch()  # another run's
    (tmp_path / "all.shard-0-of-11.h5.lock").touch()
    assert find_shard_files(out) == [shard_path(out, k, 11) for k in (0, 1, 2, 10)]  # the merge names gaps
    shard_path(out, 0, 2).touch()
    with pytest.raises(InputError, match=r"different shard counts N .*: 2 \(1 files\), 11 \(4 files\)"):
        find_shard_files(out)


def test_auto_device(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    p = detect_placement(TORCHRUN_4)
    assert auto_device("cpu", p) == "cpu" and auto_device("auto", None) == "auto"
    assert auto_device("auto", detect_placement({"ACCELERATE_USE_CPU": "true"})) == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert auto_device("auto", p) == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    assert auto_device("auto", p) == "cuda:2"
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)  # Slurm bound one GPU to the task
    assert auto_device("auto", p) == "cuda:0"
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(InputError, match="local rank 2, but this process sees 2 GPUs"):
        auto_device("auto", p)


def test_launcher_free() -> None:
    env = {**_srun(0, 2), **TORCHRUN_4, "PMI_RANK": "0", "HOME": "/h", "CUDA_VISIBLE_DEVICES": "0,1"}
    assert launcher_free(env) == {"HOME": "/h", "CUDA_VISIBLE_DEVICES": "0,1"}
