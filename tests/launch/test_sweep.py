"""``probe sweep``: a plan of data, two tiny CLIPs x one dataset x two experiments, stopped by a
refused step, then resumed: the finished steps are skipped by their fingerprints."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest

from vlprobe.launch.steps import StepFailed
from vlprobe.launch.sweep import load_plan, plan_steps, run_sweep
from vlprobe.validation import InputError

PLAN = """
out = "out"

[[steps]]
name = "data"
args = ["fixtures", "dataset", "--n-items", "6", "--seed", "0", "--out", "{d}/data"]

[[steps]]
name = "clip"
args = ["fixtures", "model", "clip", "--seed", "0", "--out", "{d}/clip"]

[models.a]
model = "clip"
checkpoint = "{d}/clip"
extract = ["--device", "cpu"]
after = ["clip"]

[models.b]
model = "clip"
checkpoint = "{d}/clip"
extract = ["--device", "cpu", "--layers", "{layers}"]
after = ["clip"]

[datasets.wino]
dataset = "winoground"
data_dir = "{d}/data"
after = ["data"]

[experiments.winoground-scores]

[experiments.recall]
models = ["a"]
"""


def _write(tmp_path: Path, layers: str) -> Path:
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN.replace("{d}", str(tmp_path)).replace("{layers}", layers))
    return plan


@pytest.mark.slow  # nine probe processes: about a minute on two shared cores
def test_sweep_stopped_then_resumed(tmp_path: Path) -> None:
    said: list[str] = []
    with pytest.raises(StepFailed, match=r"step 'extract b-wino' did not finish: exit 2"):
        run_sweep(_write(tmp_path, "99"), jobs=2, threads=1, echo=said.append)
    state = tmp_path / "out" / "state"
    finished = {p.stem for p in state.glob("*.json")}
    assert {"data", "clip", "extract.a-wino"} <= finished
    said.clear()
    result = run_sweep(_write(tmp_path, "all"), jobs=2, threads=1, echo=said.append)
    assert {"data", "clip", "extract a-wino"} <= set(result["skipped"])
    assert "extract b-wino" in result["steps"] and "collect" in result["steps"] and "report wino" in result["steps"]
    assert (tmp_path / "out" / "report" / "wino.html").stat().st_size > 0  # one report per dataset
    with open(result["results"], newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert {(r["experiment"], r["model"]) for r in rows} >= {("winoground-scores", "a"), ("winoground-scores", "b"),
                                                             ("recall", "a")}
    again = run_sweep(_write(tmp_path, "all"), jobs=2, echo=said.append)  # everything done: nothing runs
    assert not again["steps"] and len(again["skipped"]) == len(plan_steps(load_plan(_write(tmp_path, "all"))))


def test_plan_steps_and_refusals(tmp_path: Path) -> None:
    steps = {s.name: s for s in plan_steps(load_plan(_write(tmp_path, "all")))}
    assert set(steps) == {"data", "clip", "extract a-wino", "extract b-wino", "winoground-scores a-wino",
                          "winoground-scores b-wino", "recall a-wino", "collect", "report wino"}
    assert [n for n, s in steps.items() if not s.gpu] == ["collect", "report wino"]  # use no GPU (Slurm: none asked)
    assert steps["report wino"].args == ("report", str(tmp_path / "out" / "results" / "wino"), "--out",
                                         str(tmp_path / "out" / "report" / "wino.html"), "--quiet")
    assert steps["extract b-wino"].after == ("clip", "data")
    assert steps["winoground-scores b-wino"].exclusive == "winoground-scores wino"
    assert steps["recall a-wino"].args[:3] == ("run", "recall", "--cache")
    bad = tmp_path / "bad.toml"
    ok = "[models.a]\nmodel='clip'\n[datasets.winoground]\n[experiments.recall]\n"
    for text, match in [("[models.a]\nmodel='clip'\n", "at least one"), ("foo = 1\n", "unknown key 'foo'"),
                        ("[models.a]\n[datasets.winoground]\n", "needs model"), ("x = [", "not valid TOML"),
                        (ok + "[[steps]]\nname='s'\nargs=[]\nwait=[]\n", "steps 's': unknown key 'wait'"),
                        (ok + "[models.a.run]\nseparability=[]\n", "models.a.run.separability: no"),
                        (ok + "[[steps]]\nname='s'\nargs=[]\ncost=-1\n", "steps 's' cost must be a number"),
                        (ok + "[[steps]]\nname='s'\nargs=[]\ngpu='no'\n", "steps 's' gpu must be true or false")]:
        bad.write_text(text)
        with pytest.raises(InputError, match=match):
            plan_steps(load_plan(bad))


REFUSED_PLANS = [
    # a key no table takes, with the one it may mean
    ("[models.a]\nmodel='clip'\nchekpoint='x'\n[datasets.winoground]\n",
     "models.a: unknown key 'chekpoint'; did you mean 'checkpoint'?"),
    ("[models.a]\nmodel='clip'\n[datasets.winoground]\ndatadir='x'\n",
     "datasets.winoground: unknown key 'datadir'; did you mean 'data_dir'?"),
    ("[models.a]\nmodel='clip'\n[datasets.winoground]\n[experiments.recall]\narg=['--k', '1']\n",
     "experiments.recall: unknown key 'arg'; did you mean 'args'?"),
    ("[models.a]\nmodel='clip'\n[evals.sugarcrepe]\ndata-dir='x'\n", "evals.sugarcrepe: unknown key 'data-dir'"),
    # names vlprobe does not know
    ("[models.a]\nmodel='clipp'\n[datasets.winoground]\n", "models.a.model: unknown model 'clipp'; did you mean 'clip'?"),
    ("[models.a]\nmodel='clip'\n[datasets.wino]\n", "datasets.wino: unknown dataset 'wino'"),
    ("[models.a]\nmodel='clip'\n[datasets.winoground]\n[experiments.seperability]\n",
     "experiments.seperability: unknown experiment 'seperability'; did you mean 'separability'?"),
    ("[models.a]\nmodel='clip'\n[datasets.winoground]\n[experiments.recall]\nmodels=['b']\n",
     "experiments.recall.models: unknown model 'b'"),
    # an input that is not there and that no step makes
    ("[models.a]\nmodel='clip'\ncheckpoint='{d}/no-such-checkpoint'\n[datasets.winoground]\n",
     "step 'extract a-winoground' reads --checkpoint '{d}/no-such-checkpoint', which does not exist and which no "
     "step of the plan writes"),
    ("[models.a]\nmodel='clip'\n[datasets.winoground]\ndata_dir='{d}/nowhere'\n", "reads --data-dir '{d}/nowhere'"),
    ("[models.a]\nmodel='clip'\n[datasets.winoground]\nextract=['--variants', '{d}/v.jsonl']\n",
     "reads --variants '{d}/v.jsonl'"),
]


@pytest.mark.parametrize(("text", "match"), REFUSED_PLANS)
def test_a_plan_is_checked_before_anything_runs(text: str, match: str, tmp_path: Path, one_error_line: Any) -> None:
    """Every mistake of a plan is one line and exit 2, before any step starts (nothing is written)."""
    import re

    from typer.testing import CliRunner

    from vlprobe.cli import app

    plan = tmp_path / "plan.toml"
    plan.write_text("out = 'o'\n" + text.replace("{d}", str(tmp_path)))
    r = CliRunner().invoke(app, ["sweep", str(plan), "--jobs", "1"])
    one_error_line(r, re.sub(r"\s+", " ", match.replace("{d}", str(tmp_path))))
    assert not (tmp_path / "o").exists()


def test_inputs_made_by_a_step_of_the_plan_are_not_missing(tmp_path: Path) -> None:
    """A checkpoint a [[steps]] command writes (inside its --out) is no missing input; a hub id is
    left to the extraction."""
    plan = tmp_path / "p.toml"
    plan.write_text(f"""
[[steps]]
name = "clip"
args = ["fixtures", "model", "clip", "--out", "{tmp_path}/models"]
[models.a]
model = "clip"
checkpoint = "{tmp_path}/models/clip"
after = ["clip"]
[models.hub]
model = "clip"
checkpoint = "openai/clip-vit-base-patch32"
[datasets.winoground]
""")
    assert "extract a-winoground" in {s.name for s in plan_steps(load_plan(plan))}


def test_plan_keys_of_the_testbed(tmp_path: Path) -> None:
    """What the testbed's plan needs of a plan: per-experiment run arguments of a model, a
    dataset's own results folder and report page, steps waiting for the sweep's steps, groups."""
    plan = tmp_path / "p.toml"
    plan.write_text("""
out = "o"
[models.l]
model = "lxmert"
run = { separability = ["--streams", "lang"] }
[datasets.w]
dataset = "winoground"
results = "results"
report = "report/report.html"
[experiments.separability]
[experiments.winoground-scores]
[[steps]]
name = "after all"
args = ["--version"]
after = ["collect"]
group = "report"
cost = 2.5
gpu = false
""")
    steps = {s.name: s for s in plan_steps(load_plan(plan))}
    assert steps["separability l-w"].args[-2:] == ("--streams", "lang")
    assert "--streams" not in steps["winoground-scores l-w"].args
    assert steps["separability l-w"].args[steps["separability l-w"].args.index("--out") + 1] == str(tmp_path / "o" / "results")
    assert steps["report w"].args[3] == str(tmp_path / "o" / "report" / "report.html")
    assert (steps["after all"].group, steps["after all"].cost, steps["after all"].gpu) == ("report", 2.5, False)
    assert list(steps).index("after all") > list(steps).index("collect")  # after what it waits for


def test_slurm_job_options() -> None:
    from vlprobe.launch.executors import slurm_parameters

    got = slurm_parameters(name="vlprobe-x", partition="gpu", gpus_per_task=1, cpus_per_task=8, mem_gb=32,
                           timeout_min=60, parallel=4, account="lab", qos="normal")
    assert got == {"timeout_min": 60, "gpus_per_node": 1, "tasks_per_node": 1, "nodes": 1, "name": "vlprobe-x",
                   "cpus_per_task": 8, "mem_gb": 32, "slurm_partition": "gpu", "slurm_array_parallelism": 4,
                   "slurm_account": "lab", "slurm_qos": "normal"}
    local = slurm_parameters(name="x", cluster="local", partition="gpu", gpus_per_task=0, qos="q")
    assert "slurm_partition" not in local and "slurm_qos" not in local and local["gpus_per_node"] == 0
    for bad, match in [({"gpus_per_task": -1}, "gpus-per-task"), ({"timeout_min": 0}, "timeout-min"),
                       ({"mem_gb": 0}, "mem-gb")]:
        with pytest.raises(InputError, match=match):
            slurm_parameters(name="x", **bad)


def test_sweep_launcher_refusals(tmp_path: Path, one_error_line: Any) -> None:
    import shutil

    from typer.testing import CliRunner

    from vlprobe.cli import app

    plan = _write(tmp_path, "all")
    with pytest.raises(InputError, match="partition: a Slurm job option; give it with --launcher slurm"):
        run_sweep(plan, partition="gpu", echo=lambda _: None)
    r = CliRunner().invoke(app, ["sweep", str(plan), "--mem-gb", "8"])
    one_error_line(r, "mem-gb: a Slurm job option")
    r = CliRunner().invoke(app, ["sweep", str(plan), "--launcher", "slurm", "--start-method", "spawn"])
    one_error_line(r, "start-method: how a local step starts; give it with --launcher local")
    r = CliRunner().invoke(app, ["sweep", str(plan), "--start-method", "fork"])
    one_error_line(r, "start-method must be forkserver or spawn, got 'fork'")
    if shutil.which("srun") is None:  # not a Slurm machine: one line, no traceback
        r = CliRunner().invoke(app, ["sweep", str(plan), "--launcher", "slurm", "--partition", "gpu"])
        one_error_line(r, "launcher: no Slurm here")
        r = CliRunner().invoke(app, ["launch", "slurm", "--", "probe", "extract", "--out", str(tmp_path / "a.h5")])
        one_error_line(r, "launcher: no Slurm here")


@pytest.mark.slow  # six submitit jobs, each a pickled probe process: about a minute on two shared cores
def test_sweep_on_submitits_local_cluster(tmp_path: Path) -> None:
    pytest.importorskip("submitit", reason="submitit is the optional extra vlprobe[slurm]")
    text = _write(tmp_path, "all").read_text()
    plan = tmp_path / "one.toml"  # model a only
    plan.write_text(text[:text.index("[models.b]")] + text[text.index("[datasets.wino]"):])
    result = run_sweep(plan, launcher="slurm", cluster="local", gpus_per_task=0, timeout_min=10,
                       echo=lambda _: None)
    assert set(result["steps"]) == {"data", "clip", "extract a-wino", "winoground-scores a-wino", "recall a-wino",
                                    "collect", "report wino"}
    with open(result["results"], newline="") as fh:
        assert {r["experiment"] for r in csv.DictReader(fh)} == {"winoground-scores", "recall"}
    assert list((tmp_path / "out" / "submitit").glob("*_log.out"))


def test_the_worked_example_plan_of_the_docs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/scaling-out.md's Winoground x 3 models plan: 8 shards and a merge per model, 5 runs per
    model after its cache, LXMERT after the regions, one collect, one report (run from a folder
    that holds winoground/, as the page says)."""
    from tests.docs_text import doc_page

    monkeypatch.chdir(tmp_path)
    (tmp_path / "winoground").mkdir()

    page = doc_page("scaling-out.md")
    text = page[page.index("# winoground-3.toml"):]
    plan = tmp_path / "winoground-3.toml"
    plan.write_text(text[:text.index("```")])
    steps = {s.name: s for s in plan_steps(load_plan(plan))}
    assert len(steps) == 2 + 3 * (8 + 1) + 3 * 5 + 1 + 1
    assert steps["extract lxmert-winoground 3/8"].after == ("regions", "variants")
    assert steps["extract clip-l14-winoground"].after == tuple(f"extract clip-l14-winoground {k}/8" for k in range(8))
    assert steps["variant-probe clip-b32-winoground"].after == ("extract clip-b32-winoground",)
    assert len(steps["collect"].after) == 15 and steps["report winoground"].after == steps["collect"].after


EVAL_PLAN = """
out = "out"
shards = 2

[[steps]]
name = "crepe"
args = ["fixtures", "dataset", "--format", "crepe", "--n-items", "4", "--seed", "3", "--image-size", "32",
        "--out", "{d}/crepe"]

[[steps]]
name = "clip"
args = ["fixtures", "model", "clip", "--seed", "0", "--out", "{d}/clip"]

[models.a]
model = "clip"
checkpoint = "{d}/clip"
eval = ["--device", "cpu", "--image-root", "vg={d}/crepe/vg"]   # (caption length reads no image)
after = ["clip"]

[models.len]
model = "caption-length"

[evals.crepe]
data_dir = "{d}/crepe"
args = ["--subsets", "prod_atom_5,syst_cc12m_unseen_atom", "--bootstrap", "30"]
after = ["crepe"]
"""


def _eval_plan(tmp_path: Path, shards: int = 2) -> Path:
    plan = tmp_path / "evals.toml"
    plan.write_text(EVAL_PLAN.replace("{d}", str(tmp_path)).replace("shards = 2", f"shards = {shards}"))
    return plan


def test_eval_steps_of_a_plan(tmp_path: Path) -> None:
    """``[evals.NAME]``: one ``probe eval`` per model (in shards and a merge when the plan asks), a
    model's ``eval`` arguments on its steps, then the collect and the eval's report."""
    steps = {s.name: s for s in plan_steps(load_plan(_eval_plan(tmp_path)))}
    assert set(steps) == {"crepe", "clip", "eval crepe a 0/2", "eval crepe a 1/2", "eval crepe a", "eval crepe len 0/2",
                          "eval crepe len 1/2", "eval crepe len", "collect", "report crepe"}
    out = str(tmp_path / "out" / "results" / "crepe")
    shard = steps["eval crepe a 1/2"]
    assert shard.args[:6] == ("eval", "crepe", "--model", "clip", "--name", "a") and shard.args[-2:] == ("--shard", "1/2")
    assert "--device" in shard.args and shard.args[shard.args.index("--out") + 1] == out
    assert shard.after == ("clip", "crepe") and not shard.exclusive  # shards write their own score files
    merge = steps["eval crepe a"]
    assert merge.args[-1] == "--merge-shards" and merge.after == ("eval crepe a 0/2", "eval crepe a 1/2")
    assert merge.exclusive == steps["eval crepe len"].exclusive == "eval crepe"  # the runs share a manifest
    assert shard.gpu and not merge.gpu  # the merge reads score files: no GPU
    # a run under a new key is removed by the first of its steps to start, never after a shard wrote
    assert shard.owns.runs == merge.owns.runs == ((f"{out}/crepe", "a"),) and not shard.owns.files
    assert "--checkpoint" not in steps["eval crepe len 0/2"].args and "--device" not in steps["eval crepe len 0/2"].args
    assert steps["collect"].args[1:2] == (out,) and steps["report crepe"].after == ("eval crepe a", "eval crepe len")
    bare = tmp_path / "bare.toml"  # tables with no keys: the registered names, every default
    bare.write_text("[models.clip]\nmodel = 'clip'\n[datasets.winoground]\n[experiments.recall]\n")
    assert [s.name for s in plan_steps(load_plan(bare))][-2:] == ["collect", "report winoground"]
    one = {s.name for s in plan_steps(load_plan(_eval_plan(tmp_path, shards=1)))}
    assert one == {"crepe", "clip", "eval crepe a", "eval crepe len", "collect", "report crepe"}
    bad = tmp_path / "bad.toml"
    for text, match in [("[models.a]\nmodel='clip'\n[evals.foo]\n", "evals.foo: benchmark 'foo' is not one of"),
                        ("[models.a]\nmodel='clip'\n[evals.x]\nbenchmark='valse'\n[datasets.x]\n",
                         "'x' is both a dataset and an eval")]:
        bad.write_text(text)
        with pytest.raises(InputError, match=match):
            load_plan(bad)


@pytest.mark.slow  # ten probe processes (forks of one server): about half a minute on two shared cores
def test_sweep_of_evals_in_shards_equals_one_eval(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from vlprobe.cli import app

    result = run_sweep(_eval_plan(tmp_path), jobs=2, threads=1, echo=lambda _: None)
    assert "eval crepe a 1/2" in result["steps"] and "report crepe" in result["steps"]
    folder = tmp_path / "out" / "results" / "crepe" / "crepe"
    one = tmp_path / "one"
    r = CliRunner().invoke(app, ["eval", "crepe", "--model", "caption-length", "--name", "len", "--data-dir",
                                 str(tmp_path / "crepe"), "--subsets",
                                 "prod_atom_5,syst_cc12m_unseen_atom", "--bootstrap", "30", "--out", str(one), "--quiet"])
    assert r.exit_code == 0, r.output
    [merged] = folder.glob("len*.csv")
    [alone] = (one / "crepe").glob("len*.csv")
    # caption length is exact arithmetic on the captions: the merged run's rows are the one process's
    assert merged.read_text(encoding="utf-8") == alone.read_text(encoding="utf-8")
    with open(result["results"], newline="") as fh:
        assert {(r["experiment"], r["model"]) for r in csv.DictReader(fh)} >= {("crepe", "a"), ("crepe", "len")}
    assert (tmp_path / "out" / "report" / "crepe.html").stat().st_size > 0


SHARDED_EVAL_PLAN = """
out = "out"
shards = 2
[models.len]
model = "caption-length"
[evals.crepe]
data_dir = "{d}/crepe"
args = ["--subsets", "prod_atom_5,syst_cc12m_unseen_atom", "--bootstrap", "30"]
"""


@pytest.mark.slow  # two sweeps of five probe processes (forks of one server): about 15 s on two shared cores
def test_an_eval_in_shards_reruns_on_data_changed_in_place(tmp_path: Path) -> None:
    """The data rewritten in place keeps the run's name, so the new shards write score files of the
    same names as the old ones: replacing the old run must not take the new shards' files along
    (the merge used to remove them, then stop on "no shard files", and every rerun again)."""
    from vlprobe.data.benchmark_fixtures import write_benchmark_fixture

    plan = tmp_path / "evals.toml"
    plan.write_text(SHARDED_EVAL_PLAN.replace("{d}", str(tmp_path)))
    folder = tmp_path / "out" / "results" / "crepe" / "crepe"
    runs = []
    for seed in (3, 4):
        write_benchmark_fixture(tmp_path / "crepe", "crepe", n_items=4, seed=seed, image_size=32)
        result = run_sweep(plan, jobs=1, threads=1, echo=lambda _: None)
        assert "eval crepe len" in result["steps"]
        [csv_path] = folder.glob("len*.csv")
        runs.append(csv_path.read_text(encoding="utf-8"))
    assert runs[0] != runs[1]  # the new data's captions, not the old ones'


def test_dry_run_lists_the_steps_and_runs_none(tmp_path: Path) -> None:
    """``probe sweep --dry-run``: every step, done before or to run (the same keys a run skips
    by), what it waits for, its command; nothing runs, nothing is written."""
    from typer.testing import CliRunner

    from vlprobe.cli import app
    from vlprobe.launch.records import write_record
    from vlprobe.launch.steps import plan_keys

    plan = _eval_plan(tmp_path)
    r = CliRunner().invoke(app, ["sweep", str(plan), "--dry-run"])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0].startswith("10 steps of the plan, 10 to run, 0 done before")
    assert "run   eval crepe a  (after eval crepe a 0/2, eval crepe a 1/2)  [no GPU]" in lines
    assert f"      probe fixtures model clip --seed 0 --out {tmp_path / 'clip'}" in lines
    assert not (tmp_path / "out").exists() and not (tmp_path / "crepe").exists()
    steps = plan_steps(load_plan(plan))
    (tmp_path / "out" / "state").mkdir(parents=True)
    write_record(tmp_path / "out", "crepe", plan_keys(steps, tmp_path / "out")["crepe"], ())  # as a run records it
    result = run_sweep(plan, dry_run=True, echo=lambda _: None)
    assert result["skipped"] == ["crepe"] and len(result["planned"]) == 9 and not result["steps"]
    r = CliRunner().invoke(app, ["sweep", str(plan), "--dry-run", "--launcher", "slurm", "--timeout-min", "60"])
    assert "run   eval crepe a 0/2  (after clip, crepe)  [60 min]" in r.stdout.splitlines(), r.stdout


CONTENT_PLAN = """
out = "out"
[models.a]
model = "clip"
checkpoint = "{ckpt}"
extract = ["--device", "cpu"]
[datasets.wino]
dataset = "winoground"
data_dir = "data"
[experiments.winoground-scores]
"""


@pytest.mark.slow  # four sweeps of a tiny CLIP (an extraction, a probe run, collect, report each): about 2 minutes
def test_a_sweep_decides_by_content_not_by_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan given by an absolute path reruns nothing; weights overwritten in place rerun the
    extraction and everything after it (the dry run says so first); a checkpoint changed in the
    plan does the same, replacing the cache and results the sweep made before."""
    from vlprobe.data.synthetic import make_synthetic_winoground
    from vlprobe.extract.cache.reader import ActivationCache
    from vlprobe.fixtures.clip import write_tiny_clip

    monkeypatch.chdir(tmp_path)
    write_tiny_clip(tmp_path / "ckpt", seed=0)
    make_synthetic_winoground(tmp_path / "data", n_items=6, seed=0)
    plan = tmp_path / "plan.toml"
    plan.write_text(CONTENT_PLAN.replace("{ckpt}", "ckpt"))
    everything = {"extract a-wino", "winoground-scores a-wino", "collect", "report wino"}
    quiet: list[str] = []

    def fingerprint() -> str:
        with ActivationCache(tmp_path / "out" / "caches" / "a-wino.h5") as c:
            return c.header.checkpoint_fingerprint

    def results() -> str:
        return (tmp_path / "out" / "results" / "wino" / "winoground-scores" / "a.csv").read_text()

    first = run_sweep("plan.toml", jobs=2, threads=1, echo=quiet.append)
    assert set(first["steps"]) == everything
    seed0, scores0 = fingerprint(), results()

    same = run_sweep(plan.resolve(), jobs=2, threads=1, echo=quiet.append)  # the same plan by its absolute path
    assert not same["steps"] and set(same["skipped"]) == everything

    write_tiny_clip(tmp_path / "ckpt", seed=1)  # the weights overwritten in place
    assert set(run_sweep("plan.toml", dry_run=True, echo=quiet.append)["planned"]) == everything
    again = run_sweep("plan.toml", jobs=2, threads=1, echo=quiet.append)
    assert set(again["steps"]) == everything
    seed1, scores1 = fingerprint(), results()
    assert seed1 != seed0 and scores1 != scores0  # the new weights' states and scores, not the old ones

    write_tiny_clip(tmp_path / "ckpt2", seed=2)  # another checkpoint in the plan
    plan.write_text(CONTENT_PLAN.replace("{ckpt}", str(tmp_path / "ckpt2")))
    assert set(run_sweep(plan, dry_run=True, echo=quiet.append)["planned"]) == everything
    said: list[str] = []
    third = run_sweep(plan, jobs=2, threads=1, echo=said.append)
    assert set(third["steps"]) == everything
    assert fingerprint() not in (seed0, seed1) and results() not in (scores0, scores1)
    assert any(line.startswith("extract a-wino: its inputs or options changed; removed what its earlier run made")
               for line in said), said
    assert not run_sweep(plan, jobs=2, threads=1, echo=quiet.append)["steps"]
