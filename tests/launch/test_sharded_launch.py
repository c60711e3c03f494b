"""``probe launch``: a sharded extraction as local processes (a shard killed on purpose is run
again and resumes; a refused command is not retried), through submitit's local cluster, and the
parsing of the launched command."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from vlprobe.cli import app
from vlprobe.extract.cache.reader import ActivationCache
from vlprobe.launch.executors import LocalExecutor
from vlprobe.launch.sharded import ShardedCommand, launch_shards
from vlprobe.launch.steps import StepCrashed, StepFailed
from vlprobe.validation import InputError

HERE = Path(__file__).resolve().parent


def _extract(tiny_clip: Path, synthetic_dir: Path, out: Path, *extra: str) -> list[str]:
    return ["probe", "extract", "--model", "clip", "--checkpoint", str(tiny_clip), "--dataset", "winoground",
            "--data-dir", str(synthetic_dir), "--variants", str(synthetic_dir / "variants.jsonl"),
            "--poolings", "cls,mean,max", "--batch-size", "7", "--device", "cpu", "--quiet", "--out", str(out),
            *extra]


def _killer(marker: Path, shard: str, start_method: str = "forkserver") -> LocalExecutor:
    return LocalExecutor(jobs=2, threads=1, python=(sys.executable, str(HERE / "kill_run.py")),
                         entry="tests.launch.kill_run:probe", start_method=start_method,
                         env={"VLPROBE_TEST_KILL": f"{shard}:{marker}"})


@pytest.mark.parametrize("start_method", ["forkserver", pytest.param("spawn", marks=pytest.mark.slow)])
def test_a_killed_shard_is_run_again_and_the_merge_equals_one_run(
    tiny_clip: Path, synthetic_dir: Path, reference_cache: Path, assert_caches_equal: Callable[..., None],
    tmp_path: Path, start_method: str,
) -> None:
    out = tmp_path / "all.h5"
    said: list[str] = []
    command = ShardedCommand.parse(_extract(tiny_clip, synthetic_dir, out))
    result = launch_shards(command, 3, _killer(tmp_path / "killed-once", "1/3", start_method), retries=1,
                           echo=said.append)
    assert (tmp_path / "killed-once").exists()
    assert any(line.startswith("shard 1/3: killed by signal 9 (try 1 of 2); running it again") for line in said), said
    assert result["out"] == out and result["timings"]["steps"]["shard 1/3"]["tries"] == 2
    # the retry resumed: the first chunk written before the kill was not computed again
    log = (tmp_path / "all.launch" / "logs" / "shard.1.3.log").read_text()
    assert "# try 2" in log and "(exit -9" in log and "(exit 0" in log
    # 7-row batches against the reference's 16 (other float reductions): equal to tolerance
    assert_caches_equal(out, reference_cache)
    with ActivationCache(out) as c:
        assert c.record.merged_from == [f"all.shard-{k}-of-3.h5" for k in range(3)]
    # a rerun finds every shard and the merge done (same key, files complete): nothing runs
    said.clear()
    again = launch_shards(command, 3, LocalExecutor(jobs=1), echo=said.append)
    assert again["timings"]["skipped"] == ["shard 0/3", "shard 1/3", "shard 2/3", "merge"]
    assert not again["timings"]["steps"]


@pytest.mark.slow  # two shard processes: about 20 s on two shared cores
def test_without_retries_the_killed_shard_fails_naming_its_log(
    tiny_clip: Path, synthetic_dir: Path, tmp_path: Path,
) -> None:
    out = tmp_path / "all.h5"
    command = ShardedCommand.parse(_extract(tiny_clip, synthetic_dir, out))
    with pytest.raises(StepCrashed, match=r"step 'shard 0/2' did not finish: killed by signal 9 \(log .*shard\.0\.2\.log\)"):
        launch_shards(command, 2, _killer(tmp_path / "m", "0/2"), retries=0, echo=lambda _: None)
    assert not out.exists()
    assert (tmp_path / "all.shard-1-of-2.h5").exists()  # the other shard ran to its end


@pytest.mark.slow  # two shard processes: about 20 s on two shared cores
def test_a_refused_command_is_not_retried(tiny_clip: Path, synthetic_dir: Path, tmp_path: Path) -> None:
    argv = _extract(tiny_clip, synthetic_dir, tmp_path / "all.h5", "--layers", "99")
    said: list[str] = []
    with pytest.raises(StepFailed, match=r"did not finish: exit 2 \(log .*\): error: .*layer"):
        launch_shards(ShardedCommand.parse(argv), 2, LocalExecutor(jobs=2, threads=1), retries=3, echo=said.append)
    assert not any("running it again" in line for line in said)


@pytest.mark.slow  # two shard processes and the CLI: about 15 s on two shared cores
def test_probe_launch_local_cli(tiny_clip: Path, synthetic_dir: Path, reference_cache: Path,
                                assert_caches_equal: Callable[..., None], tmp_path: Path) -> None:
    out = tmp_path / "c.h5"
    r = CliRunner().invoke(app, ["launch", "local", "--shards", "2", "--jobs", "2", "--threads", "1", "--",
                                 *_extract(tiny_clip, synthetic_dir, out)])
    assert r.exit_code == 0, r.output
    assert r.stdout.strip().splitlines()[-1] == str(out)
    assert_caches_equal(out, reference_cache)  # to tolerance: other batches than the reference's


@pytest.mark.slow  # submitit's local cluster: each shard a pickled job in its own process (about 20 s)
def test_probe_launch_slurm_on_submitits_local_cluster(
    tiny_clip: Path, synthetic_dir: Path, reference_cache: Path, assert_caches_equal: Callable[..., None],
    tmp_path: Path,
) -> None:
    pytest.importorskip("submitit", reason="submitit is the optional extra vlprobe[slurm]")
    out = tmp_path / "s.h5"
    r = CliRunner().invoke(app, ["launch", "slurm", "--cluster", "local", "--array", "2", "--gpus-per-task", "0",
                                 "--timeout-min", "10", "--", *_extract(tiny_clip, synthetic_dir, out)])
    assert r.exit_code == 0, r.output
    assert_caches_equal(out, reference_cache)  # to tolerance: other batches than the reference's
    assert list((tmp_path / "s.launch" / "submitit").glob("*_log.out"))


@pytest.mark.parametrize(("argv", "match"), [
    ([], "give the command to run after --"),
    (["probe", "run", "recall", "--out", "x"], "runs `probe extract ...`, `probe regions extract ...` or `probe eval"),
    (["probe", "extract", "--model", "clip"], "give the merged file with --out"),
    (["probe", "extract", "--out", "a.h5", "--shard", "0/2"], "leave --shard out"),
    (["probe", "extract", "--shard=auto", "--out", "a.h5"], "leave --shard out"),
    (["probe", "extract", "--out", "a.csv"], "ending in .h5"),
])
def test_command_refusals(argv: list[str], match: str) -> None:
    with pytest.raises(InputError, match=match):
        ShardedCommand.parse(argv)


def test_command_forms(tmp_path: Path) -> None:
    c = ShardedCommand.parse([sys.executable, "-m", "vlprobe", "regions", "extract", "--detector", "d",
                              f"--out={tmp_path / 'r.h5'}", "--quiet"])
    assert c.kind == "regions" and c.out == tmp_path / "r.h5"
    assert c.shard_args(2, 4) == ("regions", "extract", "--detector", "d", "--quiet", "--shard", "2/4",
                                  "--out", str(tmp_path / "r.shard-2-of-4.h5"))
    assert c.state(2, 4) == "no file yet"
    assert ShardedCommand.parse(["vlprobe", "extract", "--out", "x.h5"]).kind == "cache"
    # the shards, then the merge as a step of its own (no GPU) that waits for them and owns the merged file
    steps = c.steps(4)
    assert [s.name for s in steps] == ["shard 0/4", "shard 1/4", "shard 2/4", "shard 3/4", "merge"]
    merge = steps[-1]
    assert merge.args == ("regions", "merge", "--out", str(tmp_path / "r.h5"),
                          *(str(tmp_path / f"r.shard-{k}-of-4.h5") for k in range(4)))
    assert merge.after == tuple(s.name for s in steps[:4]) and not merge.gpu
    assert merge.owns.files == (str(tmp_path / "r.h5"),) and steps[1].owns.files == (str(tmp_path / "r.shard-1-of-4.h5"),)
    assert [s.name for s in c.steps(4, merge=False)] == [s.name for s in steps[:4]]
    assert [s.args[-2:] for s in c.steps(1)] == [("--out", str(tmp_path / "r.h5"))]  # one shard writes OUT itself


def test_cli_refusal_is_one_line(tmp_path: Path, one_error_line: Callable[..., str]) -> None:
    r = CliRunner().invoke(app, ["launch", "local", "--", "probe", "extract", "--shard", "0/2", "--out",
                                 str(tmp_path / "a.h5")])
    one_error_line(r, "leave --shard out")
    r = CliRunner().invoke(app, ["launch", "local", "--start-method", "fork", "--", "probe", "extract", "--out",
                                 str(tmp_path / "a.h5")])
    one_error_line(r, "start-method must be forkserver or spawn, got 'fork'")


def _eval(sugarcrepe_dir: Path, out: Path, *extra: str) -> list[str]:
    return ["probe", "eval", "sugarcrepe", "--model", "caption-length", "--data-dir", str(sugarcrepe_dir),
            "--subsets", "add_att,swap_obj", "--limit", "5", "--bootstrap", "40", "--quiet", "--out", str(out), *extra]


def test_eval_command_forms(sugarcrepe_dir: Path, tmp_path: Path) -> None:
    c = ShardedCommand.parse(_eval(sugarcrepe_dir, tmp_path / "res"))
    assert c.kind == "eval" and c.out == tmp_path / "res" and c.run is not None and c.run[1] == "caption-length@bootstrap=40"
    folder = tmp_path / "res" / "sugarcrepe"
    assert c.shard_file(1, 3) == folder / "caption-length@bootstrap=40.shard-1-of-3.scores.jsonl"
    assert c.shard_file(0, 1) == folder / "caption-length@bootstrap=40.scores.jsonl"
    assert c.merged == folder / "caption-length@bootstrap=40.csv"
    assert c.launch_folder == folder / "caption-length@bootstrap=40.launch"
    assert c.shard_args(1, 3)[-4:] == ("--shard", "1/3", "--out", str(tmp_path / "res"))
    assert c.state(1, 3) == "no caption-length@bootstrap=40.shard-1-of-3.scores.jsonl yet"


@pytest.mark.parametrize(("extra", "match"), [
    (("--merge-shards",), "leave --merge-shards out"),
    (("--shard", "auto"), "leave --shard out"),
    (("--bootstrap", "x"), "command: .*bootstrap"),
    (("--limit", "0"), "limit"),
])
def test_eval_command_refusals(sugarcrepe_dir: Path, tmp_path: Path, extra: tuple[str, ...], match: str) -> None:
    with pytest.raises(InputError, match=match):
        ShardedCommand.parse(_eval(sugarcrepe_dir, tmp_path, *extra))


def test_eval_command_refuses_what_is_no_model_run(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="shards the scoring of one model"):
        ShardedCommand.parse(["probe", "eval", "sugarcrepe", "--scores", str(tmp_path / "s.jsonl"), "--out", str(tmp_path)])
    with pytest.raises(InputError, match="takes a benchmark"):
        ShardedCommand.parse(["probe", "eval", "winoground", "--model", "clip"])


def test_probe_launch_local_eval_equals_one_run(sugarcrepe_dir: Path, tmp_path: Path) -> None:
    """Two shard processes of `probe eval`, then the merge: the CSV and scores of one in-process run
    (caption-length: exact scores, so the rows are equal to the bit)."""
    one = CliRunner().invoke(app, _eval(sugarcrepe_dir, tmp_path / "one")[1:])
    assert one.exit_code == 0, one.output
    r = CliRunner().invoke(app, ["launch", "local", "--shards", "2", "--jobs", "2", "--threads", "1", "--",
                                 *_eval(sugarcrepe_dir, tmp_path / "launched")])
    assert r.exit_code == 0, r.output
    folder = tmp_path / "launched" / "sugarcrepe"
    assert r.stdout.strip().splitlines()[-1] == str(folder / "caption-length@bootstrap=40.csv")
    for name in ("caption-length@bootstrap=40.csv", "caption-length@bootstrap=40.scores.jsonl"):
        assert (folder / name).read_text(encoding="utf-8") == (tmp_path / "one" / "sugarcrepe" / name).read_text(
            encoding="utf-8")
    run = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))["runs"]["caption-length@bootstrap=40"]
    assert [f["file"] for f in run["shards"]["files"]] == [
        f"caption-length@bootstrap=40.shard-{k}-of-2.scores.jsonl" for k in range(2)]
    assert (folder / "caption-length@bootstrap=40.launch" / "logs" / "shard.1.2.log").is_file()


@pytest.mark.slow  # two submitit jobs on its local cluster, each a pickled probe process (about 6 s)
def test_probe_launch_slurm_eval_on_submitits_local_cluster(sugarcrepe_dir: Path, tmp_path: Path) -> None:
    """``probe launch slurm -- probe eval ...``: the shards as submitit jobs (its local cluster),
    then the merge: the CSV of one in-process run (caption length: exact scores)."""
    pytest.importorskip("submitit", reason="submitit is the optional extra vlprobe[slurm]")
    one = CliRunner().invoke(app, _eval(sugarcrepe_dir, tmp_path / "one")[1:])
    assert one.exit_code == 0, one.output
    r = CliRunner().invoke(app, ["launch", "slurm", "--cluster", "local", "--array", "2", "--gpus-per-task", "0",
                                 "--timeout-min", "10", "--", *_eval(sugarcrepe_dir, tmp_path / "launched")])
    assert r.exit_code == 0, r.output
    folder = tmp_path / "launched" / "sugarcrepe"
    name = "caption-length@bootstrap=40.csv"
    assert (folder / name).read_text(encoding="utf-8") == (tmp_path / "one" / "sugarcrepe" / name).read_text(
        encoding="utf-8")
    assert list((folder / "caption-length@bootstrap=40.launch" / "submitit").glob("*_log.out"))


def test_slurm_help_names_the_extra() -> None:
    r = CliRunner().invoke(app, ["launch", "slurm", "--help"])
    assert r.exit_code == 0 and "pip install 'vlprobe[slurm]'" in " ".join(r.output.split())


def test_cache_merge_after_a_one_process_run(reference_cache: Path, tmp_path: Path, one_error_line: Callable[..., str]) -> None:
    """``--shard auto`` under one process writes OUT itself: ``probe cache merge --out OUT`` then has
    nothing to merge, and says so (exit 0); a file that is no complete run is still refused."""
    import shutil

    out = tmp_path / "clip.h5"
    shutil.copy(reference_cache, out)
    out.chmod(0o644)
    r = CliRunner().invoke(app, ["cache", "merge", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "the whole run already" in r.output and "nothing to merge" in r.output
    r = CliRunner().invoke(app, ["cache", "merge", "--out", str(tmp_path / "none.h5")])
    one_error_line(r, "no shard files")


@pytest.mark.slow  # two shard processes: about 20 s on two shared cores
def test_a_killed_shard_without_retries_is_one_line_and_no_bug(
    tiny_clip: Path, synthetic_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A shard killed (out of memory, preempted) is the machine's doing, not vlprobe's: one line
    naming the shard, its exit and its log, exit code 1, no traceback."""
    from vlprobe.launch import executors

    monkeypatch.setattr(executors, "local_executor", lambda **_: _killer(tmp_path / "m", "0/2"))
    r = CliRunner().invoke(app, ["launch", "local", "--shards", "2", "--retries", "0", "--",
                                 *_extract(tiny_clip, synthetic_dir, tmp_path / "all.h5")])
    assert r.exit_code == 1, r.output
    lines = r.stderr.strip().splitlines()
    assert lines[-1].startswith("error: step 'shard 0/2' did not finish: killed by signal 9"), lines
    assert "Traceback" not in r.output and "bug" not in r.output


@pytest.mark.slow  # three launches of two shard processes and a merge, and one extraction: about 2 minutes
def test_a_relaunch_with_other_inputs_runs_again_and_never_returns_old_results(
    tiny_clip: Path, other_clip: Path, synthetic_dir: Path, make_config: Callable[..., Any],
    assert_caches_equal: Callable[..., None], tmp_path: Path,
) -> None:
    """Relaunching into the same --out with another checkpoint, or other poolings: the shards and
    the merge run again (their earlier files removed first), and the cache is the new run's; shard
    files this launcher did not make are refused in one line."""
    from vlprobe.extract.runner import extract

    out = tmp_path / "all.h5"

    def launch(checkpoint: Path, *extra: str, said: list[str] | None = None) -> dict[str, Any]:
        command = ShardedCommand.parse(_extract(checkpoint, synthetic_dir, out, *extra))
        return launch_shards(command, 2, LocalExecutor(jobs=2, threads=1), echo=(said if said is not None else []).append)

    launch(tiny_clip)
    said: list[str] = []
    again = launch(other_clip, said=said)
    assert again["timings"]["skipped"] == [] and set(again["timings"]["steps"]) == {"shard 0/2", "shard 1/2", "merge"}
    assert any("removed what its earlier run made" in line and "all.shard-0-of-2.h5" in line for line in said), said
    fresh = tmp_path / "fresh.h5"
    extract(make_config(fresh, checkpoint=str(other_clip), batch_size=7))
    assert_caches_equal(out, fresh)  # the new checkpoint's states (to tolerance: other batches)
    with ActivationCache(out) as c, ActivationCache(fresh) as f:
        assert c.header.checkpoint_fingerprint == f.header.checkpoint_fingerprint

    narrower = launch(other_clip, "--poolings", "cls")
    assert set(narrower["timings"]["steps"]) == {"shard 0/2", "shard 1/2", "merge"}
    with ActivationCache(out) as c:
        assert c.header.poolings == ("cls", "pooled")

    import shutil

    shutil.rmtree(tmp_path / "all.launch")  # shard files no record of this launcher names
    with pytest.raises(StepFailed, match=r"step 'shard \d/2' did not finish: exit 2 .*made with other settings"):
        launch(tiny_clip)
