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
      "SLURM_ARRAY_TASK_COUNT": "3"}, "not a list"),  # --array=1,4,9
    ({"SLURM_ARRAY_TASK_ID": "3"}, "without SLURM_ARRAY_TASK_MIN"),
    # the batch script of a job of 4 tasks (no srun): every task would be shard 0
    ({"SLURM_JOB_ID": "9", "SLURM_NTASKS": "4", "SLURM_PROCID": "0"}, "start the command with srun"),
    # srun of 2 tasks, each a standalone torchrun of 4 processes: both would run shards 0..3
    ({**_srun(1, 2), **TORCHRUN_4}, "srun started 2 copies of torchrun"),
    ({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", **TORCHRUN_4}, "Open MPI started 2 copies"),
    # srun -n 4 mpirun -np 1: four MPI worlds of one process, each would be shard 0/1
    ({**_srun(2, 4), "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1"}, "srun started 4 tasks, each an MPI world"),
    ({"PMIX_RANK": "1"}, "PMIX_RANK is set without"),
    ({"SLURM_JOB_ID": "1", "SLURM_STEP_ID": "x"}, "SLURM_STEP_ID='x' is no step id"),
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


# -- every environment as its launcher sets it ------------------------------------------------------
# Read off Slurm's source (src/common/env.c setup_env and env_array_for_batch_job, slurmstepd's
# task.c, slurmctld's job_mgr.c for the array variables), Open MPI's mpirun and Intel MPI's
# hydra (ranks started through an srun step of their daemons), torchrun's elastic agent.

#: What every task of a Slurm job sees (job 4242 on node gpu07, cluster c1).
_JOB = {"SLURM_CLUSTER_NAME": "c1", "SLURM_JOB_ID": "4242", "SLURM_JOBID": "4242", "SLURM_JOB_NAME": "wrap",
        "SLURM_JOB_NODELIST": "gpu07", "SLURM_NODELIST": "gpu07", "SLURM_JOB_NUM_NODES": "1", "SLURM_NNODES": "1",
        "SLURM_JOB_PARTITION": "gpu", "SLURM_SUBMIT_DIR": "/home/u", "SLURM_SUBMIT_HOST": "login1",
        "SLURM_JOB_CPUS_PER_NODE": "8", "SLURM_CPUS_ON_NODE": "8", "SLURM_TASKS_PER_NODE": "1",
        "SLURMD_NODENAME": "gpu07", "SLURM_GPUS_ON_NODE": "1", "CUDA_VISIBLE_DEVICES": "0"}


def _batch(step_id: str = "-5", **more: str) -> dict[str, str]:
    """The batch script's own environment: Slurm's batch step (SLURM_BATCH_SCRIPT, printed with %d)."""
    return {**_JOB, "ENVIRONMENT": "BATCH", "SLURM_STEP_ID": step_id, "SLURM_STEPID": step_id, "SLURM_PROCID": "0",
            "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_TASK_PID": "31337", **more}


def _array_task(task: int, lo: int, hi: int, step: int, count: int) -> dict[str, str]:
    """What slurmctld adds for an array task: min, max and count of the indices, and the number
    after the first ':' of --array as the step (1 without one)."""
    return {"SLURM_ARRAY_JOB_ID": "4200", "SLURM_ARRAY_TASK_ID": str(task), "SLURM_ARRAY_TASK_MIN": str(lo),
            "SLURM_ARRAY_TASK_MAX": str(hi), "SLURM_ARRAY_TASK_STEP": str(step), "SLURM_ARRAY_TASK_COUNT": str(count)}


def _step(procid: int, ntasks: int, nodes: int = 1, step_id: str = "0", **more: str) -> dict[str, str]:
    """A task of an srun step (srun overwrites SLURM_NTASKS with the step's count)."""
    per_node = ntasks // nodes
    return {**_JOB, "SLURM_STEP_ID": step_id, "SLURM_STEPID": step_id, "SLURM_PROCID": str(procid),
            "SLURM_LOCALID": str(procid % per_node), "SLURM_NODEID": str(procid // per_node),
            "SLURM_NTASKS": str(ntasks), "SLURM_NPROCS": str(ntasks), "SLURM_STEP_NUM_TASKS": str(ntasks),
            "SLURM_STEP_NUM_NODES": str(nodes), "SLURM_STEP_TASKS_PER_NODE": f"{per_node}(x{nodes})", **more}


def _torchrun(rank: int, world: int, local_world: int, **more: str) -> dict[str, str]:
    return {"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank % local_world),
            "LOCAL_WORLD_SIZE": str(local_world), "GROUP_RANK": str(rank // local_world), "ROLE_RANK": str(rank),
            "ROLE_WORLD_SIZE": str(world), "TORCHELASTIC_RUN_ID": "none", "TORCHELASTIC_RESTART_COUNT": "0",
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "OMP_NUM_THREADS": "1", **more}


def _open_mpi(rank: int, size: int, local_size: int) -> dict[str, str]:
    """A rank of Open MPI's mpirun (4.x; 5.x adds the PMIx names it sets too)."""
    return {"OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_SIZE": str(size),
            "OMPI_COMM_WORLD_LOCAL_RANK": str(rank % local_size), "OMPI_COMM_WORLD_LOCAL_SIZE": str(local_size),
            "OMPI_COMM_WORLD_NODE_RANK": str(rank % local_size), "OMPI_UNIVERSE_SIZE": str(size),
            "PMIX_RANK": str(rank), "PMIX_NAMESPACE": "prterun-login1-1234@1"}


LAUNCHED = [
    # sbatch --array=0-7 --gres=gpu:1 --wrap "probe extract ... --shard auto" (no --ntasks: no SLURM_NTASKS)
    ("sbatch --array=0-7 --wrap", {**_batch(), **_array_task(5, 0, 7, 1, 8)}, (5, 8), 0),
    ("sbatch --array=0-7 --ntasks=1 --wrap", {**_batch(SLURM_NTASKS="1", SLURM_NPROCS="1"), **_array_task(5, 0, 7, 1, 8)},
     (5, 8), 0),
    ("sbatch --array=1-8 (old Slurm: batch step unsigned)", {**_batch("4294967291"), **_array_task(6, 1, 8, 1, 8)},
     (5, 8), 0),
    ("sbatch --array=0-14:2", {**_batch(), **_array_task(10, 0, 14, 2, 8)}, (5, 8), 0),
    ("sbatch --array=0-15%4", {**_batch(), **_array_task(15, 0, 15, 1, 16)}, (15, 16), 0),
    ("sbatch --wrap (one job, one task)", _batch(SLURM_NTASKS="1"), (0, 1), 0),
    ("salloc's interactive step, one task", _batch("-6", SLURM_NTASKS="1"), (0, 1), 0),
    # an array of 4 jobs of 2 tasks each, the script runs `srun probe extract --shard auto`
    ("sbatch --array=0-3 --ntasks=2: srun", {**_step(1, 2), **_array_task(2, 0, 3, 1, 4)}, (5, 8), 1),
    ("srun -n 8 -N 2", _step(6, 8, nodes=2), (6, 8), 2),
    # torchrun in the batch script of a job of 2 tasks (--ntasks-per-node=2 --gres=gpu:2)
    ("sbatch --ntasks=2: torchrun --nproc-per-node 2",
     {**_batch(SLURM_NTASKS="2", SLURM_NTASKS_PER_NODE="2"), **_torchrun(1, 2, 2)}, (1, 2), 1),
    ("sbatch --array=0-3: torchrun --nproc-per-node 2", {**_batch(), **_array_task(3, 0, 3, 1, 4), **_torchrun(1, 2, 2)},
     (7, 8), 1),
    # srun -N 2 --ntasks-per-node=1 torchrun --nnodes 2 --nproc-per-node 4 --rdzv-backend c10d ...
    ("srun -N 2: torchrun --nnodes 2 --nproc-per-node 4", {**_step(1, 2, nodes=2), **_torchrun(6, 8, 4)}, (6, 8), 2),
    ("torchrun --standalone --nproc-per-node 4", _torchrun(2, 4, 4), (2, 4), 2),
    # mpirun -np 4 in the batch script of 2 nodes x 2 tasks (Open MPI 4): its daemons (orted) are one
    # srun step of 2 tasks, whose SLURM_PROCID and SLURM_LOCALID the ranks inherit
    ("sbatch -N 2 --ntasks-per-node=2: mpirun -np 4 (Open MPI)",
     {**_step(1, 2, nodes=2, SLURM_NTASKS_PER_NODE="2"), **_open_mpi(3, 4, 2)}, (3, 4), 1),
    ("sbatch -N 2: mpirun -np 4 (Intel MPI, hydra)",
     {**_step(1, 2, nodes=2), "PMI_RANK": "3", "PMI_SIZE": "4", "PMI_FD": "7", "MPI_LOCALRANKID": "1",
      "MPI_LOCALNRANKS": "2", "I_MPI_HYDRA_BOOTSTRAP": "slurm"}, (3, 4), 1),
    ("mpirun -np 3 (Open MPI, no Slurm)", _open_mpi(1, 3, 3), (1, 3), 1),
    ("srun --mpi=pmix -n 4", {**_step(2, 4), "PMIX_RANK": "2", "PMIX_NAMESPACE": "slurm.pmix.4242.0"}, (2, 4), 2),
    ("srun --mpi=pmi2 -n 4", {**_step(2, 4), "PMI_RANK": "2", "PMI_SIZE": "4", "PMI_FD": "9", "PMI_JOBID": "4242.0"},
     (2, 4), 2),
    ("accelerate launch --cpu", {"ACCELERATE_USE_CPU": "True", "ACCELERATE_MIXED_PRECISION": "no"}, (0, 1), None),
    ("accelerate launch --multi_gpu --num_processes 2", {**_torchrun(1, 2, 2), "ACCELERATE_MIXED_PRECISION": "no"},
     (1, 2), 1),
]


@pytest.mark.parametrize(("env", "shard", "local"), [case[1:] for case in LAUNCHED], ids=[c[0] for c in LAUNCHED])
def test_environments_as_their_launchers_set_them(env: dict[str, str], shard: tuple[int, int], local: int | None) -> None:
    p = detect_placement(env)
    assert p is not None and (p.k, p.n) == shard and p.local_rank == local, p


REFUSED = [
    # --array=0-3:2,5: tasks 0, 2, 5; Slurm gives each min 0, max 5, step 2 (the number after the ':'),
    # count 3: refused by every task (the first two would otherwise run as shards 0/3 and 1/3)
    ("sbatch --array=0-3:2,5 (task 0)", {**_batch(), **_array_task(0, 0, 5, 2, 3)}, "not a list"),
    ("sbatch --array=0-3:2,5 (task 2)", {**_batch(), **_array_task(2, 0, 5, 2, 3)}, "not a list"),
    ("sbatch --array=1,4,9", {**_batch(), **_array_task(4, 1, 9, 1, 3)}, "not a list"),
    ("sbatch --ntasks=4 without srun", _batch(SLURM_NTASKS="4"), "start the command with srun"),
    ("srun -n 2 torchrun --standalone --nproc-per-node 4", {**_step(1, 2), **_torchrun(3, 4, 4)},
     "srun started 2 copies of torchrun"),
    ("srun -n 4 mpirun -np 1", {**_step(2, 4), **_open_mpi(0, 1, 1)}, "srun started 4 tasks, each an MPI world of 1"),
]


@pytest.mark.parametrize(("env", "match"), [case[1:] for case in REFUSED], ids=[c[0] for c in REFUSED])
def test_environments_refused_as_their_launchers_set_them(env: dict[str, str], match: str) -> None:
    with pytest.raises(InputError, match=match):
        detect_placement(env)
