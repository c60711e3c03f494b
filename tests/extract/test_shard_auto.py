"""``probe extract --shard auto``: shards placed by the launcher's environment (simulated Slurm
arrays, and a real ``torchrun`` of two CPU processes), named ``<stem>.shard-K-of-N.h5``, merged by
``probe cache merge --out`` into the cache one run writes; the job ids recorded."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vlprobe.cli import app
from vlprobe.extract.cache.reader import ActivationCache
from vlprobe.extract.runner import ExtractConfig, extract


def _array_task(monkeypatch: pytest.MonkeyPatch, task: int, count: int, job: str = "500") -> None:
    """The environment sbatch gives array task ``task`` of ``--array=0-<count-1>``."""
    for name, value in {
        "SLURM_JOB_ID": str(int(job) + 1 + task), "SLURM_ARRAY_JOB_ID": job, "SLURM_ARRAY_TASK_ID": str(task),
        "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_MAX": str(count - 1), "SLURM_ARRAY_TASK_STEP": "1",
        "SLURM_ARRAY_TASK_COUNT": str(count), "SLURM_NTASKS": "1", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
    }.items():
        monkeypatch.setenv(name, value)


def test_slurm_array_shards_merge_into_one_run(
    make_config: Callable[..., ExtractConfig], reference_cache: Path, assert_caches_equal: Callable[..., None],
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = tmp_path / "all.h5"
    for k in range(3):
        with monkeypatch.context() as m:
            _array_task(m, k, 3)
            result = extract(make_config(out, shard="auto", device="auto", batch_size=7))
        assert result.path == tmp_path / f"all.shard-{k}-of-3.h5"
        with ActivationCache(result.path) as c:
            assert c.header.shard == f"{k}/3" and c.record.device == "cpu"
            assert c.record.job_ids == [{
                "shard": f"{k}/3", "source": f"Slurm array task {k} of 3 (SLURM_ARRAY_TASK_ID={k})",
                "SLURM_JOB_ID": str(501 + k), "SLURM_ARRAY_JOB_ID": "500", "SLURM_ARRAY_TASK_ID": str(k),
                "SLURM_PROCID": "0",
            }]
    assert not out.exists()
    r = CliRunner().invoke(app, ["cache", "merge", "--out", str(out)])  # the shards found beside --out
    assert r.exit_code == 0, r.output
    assert "merged 3 shards" in r.output
    # Shards of 7-row batches against the reference's 16: other batch company, so other float
    # reductions in the matmuls; equal to float tolerance, not bit for bit.
    assert_caches_equal(out, reference_cache)
    with ActivationCache(out) as m:
        assert [j["shard"] for j in m.record.job_ids] == ["0/3", "1/3", "2/3"]
        assert m.record.merged_from == [f"all.shard-{k}-of-3.h5" for k in range(3)]


def test_a_resume_under_another_job_is_recorded(
    make_config: Callable[..., ExtractConfig], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = tmp_path / "c.h5"
    _array_task(monkeypatch, 1, 2, job="700")
    first = extract(make_config(out, shard="auto")).path
    extract(make_config(out, shard="auto"))  # the same job again: nothing new to record
    _array_task(monkeypatch, 1, 2, job="900")  # resubmitted
    extract(make_config(out, shard="auto"))
    with ActivationCache(first) as c:
        assert [j["SLURM_ARRAY_JOB_ID"] for j in c.record.job_ids] == ["700", "900"]


def test_an_out_folder_takes_the_default_name(tmp_path: Path, tiny_clip: Path, synthetic_dir: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """``sbatch --array=0-1 --wrap "probe extract ... --shard auto --out shards/"``: each task writes
    ``shards/<model>-<dataset>.shard-K-of-2.h5`` (the default name, in the folder), which
    ``probe cache merge --out shards/<model>-<dataset>.h5`` finds; without a shard, the folder
    holds ``<model>-<dataset>.h5``."""
    base = ["extract", "--model", "clip", "--checkpoint", str(tiny_clip), "--dataset", "winoground", "--data-dir",
            str(synthetic_dir), "--quiet"]
    for k in range(2):
        with monkeypatch.context() as m:
            _array_task(m, k, 2)
            r = CliRunner().invoke(app, [*base, "--shard", "auto", "--out", str(tmp_path / "shards") + "/"])
            assert r.exit_code == 0, r.output
    assert sorted(p.name for p in (tmp_path / "shards").iterdir()) == [
        "clip-winoground.shard-0-of-2.h5", "clip-winoground.shard-1-of-2.h5"]
    r = CliRunner().invoke(app, ["cache", "merge", "--out", str(tmp_path / "shards" / "clip-winoground.h5")])
    assert r.exit_code == 0 and "merged 2 shards" in r.output, r.output
    r = CliRunner().invoke(app, [*base, "--out", str(tmp_path / "one")])  # a name without .h5: a folder
    assert r.exit_code == 0, r.output
    assert [p.name for p in (tmp_path / "one").iterdir()] == ["clip-winoground.h5"]


def test_auto_without_a_launcher_is_one_line(tmp_path: Path, tiny_clip: Path, synthetic_dir: Path,
                                             one_error_line: Callable[..., str]) -> None:
    r = CliRunner().invoke(app, ["extract", "--model", "clip", "--checkpoint", str(tiny_clip), "--dataset",
                                 "winoground", "--data-dir", str(synthetic_dir), "--shard", "auto",
                                 "--out", str(tmp_path / "x.h5")])
    one_error_line(r, "shard: auto reads the shard from a launcher", "give --shard K/N")
    assert list(tmp_path.iterdir()) == []


def test_merge_without_shard_files_beside_out(tmp_path: Path, one_error_line: Callable[..., str]) -> None:
    r = CliRunner().invoke(app, ["cache", "merge", "--out", str(tmp_path / "all.h5")])
    one_error_line(r, "no shard files all.shard-K-of-N.h5")


@pytest.mark.slow  # two fresh processes importing torch and transformers: about 20 s on two shared cores
def test_torchrun_two_cpu_processes(
    tiny_clip: Path, synthetic_dir: Path, reference_cache: Path, assert_caches_equal: Callable[..., None],
    tmp_path: Path,
) -> None:
    """A real ``torchrun --nproc-per-node 2`` of ``python -m vlprobe extract --shard auto``: two
    processes, two shard files, merged equal to the one-process cache."""
    out = tmp_path / "all.h5"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "vlprobe", "extract", "--model", "clip", "--checkpoint", str(tiny_clip), "--dataset", "winoground",
           "--data-dir", str(synthetic_dir), "--variants", str(synthetic_dir / "variants.jsonl"),
           "--poolings", "cls,mean,max", "--batch-size", "16", "--device", "auto", "--shard", "auto",
           "--out", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    shards = sorted(tmp_path.glob("all.shard-*-of-2.h5"))
    assert [p.name for p in shards] == ["all.shard-0-of-2.h5", "all.shard-1-of-2.h5"]
    run_ids = set()
    for k, p in enumerate(shards):
        with ActivationCache(p) as c:
            (job,) = c.record.job_ids
            assert job["shard"] == f"{k}/2" and job["RANK"] == str(k)
            assert job["source"] == f"torchrun rank {k} of 2 (RANK, WORLD_SIZE)"
            assert c.record.device == "cpu"  # --device auto: no CUDA here, whatever the local rank
            run_ids.add(job["TORCHELASTIC_RUN_ID"])
    assert len(run_ids) == 1  # one torchrun
    r = CliRunner().invoke(app, ["cache", "merge", "--out", str(out)])
    assert r.exit_code == 0, r.output
    # Each process encodes its half of the rows in its own batches of 16 (not the reference's
    # batches): float reductions differ in the last bits, so equal to tolerance only.
    assert_caches_equal(out, reference_cache)
