"""The workflow vlprobe was asked for, typed as written, in an empty folder:

    probe extract --model lxmert
    probe extract --model clip
    probe run separability --layers all
    probe plot results/separability/

with a hub cache laid out as ``huggingface_hub`` lays it out (``probe fixtures hub-cache``: the
tiny fixtures under the real repository names) and a local Winoground-format copy named by
``VLPROBE_WINOGROUND`` (``probe fixtures dataset``), offline. Nothing else is typed: the
checkpoints, the dataset, the regions, the cache paths, the results folder and the figures'
names are the defaults."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import vlprobe
from vlprobe.extract.cache.reader import ActivationCache
from vlprobe.fixtures.hub_cache import hub_fixture_repos, repo_folder, write_hub_cache
from vlprobe.validation import InputError

COMMANDS = (
    "probe extract --model lxmert",
    "probe extract --model clip",
    "probe run separability --layers all",
    "probe plot results/separability/",
)


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The hub cache with the fixtures the four commands load: CLIP, LXMERT and the detector."""
    root = tmp_path_factory.mktemp("hub") / "hub"
    write_hub_cache(root, ("clip", "lxmert", "frcnn"), seed=0)
    return root


def test_the_hub_cache_is_laid_out_as_the_hub_client_lays_it_out(hub: Path) -> None:
    from huggingface_hub import scan_cache_dir, snapshot_download

    assert hub_fixture_repos()["lxmert"] == "unc-nlp/lxmert-base-uncased"
    assert hub_fixture_repos()["frcnn"] == "unc-nlp/frcnn-vg-finetuned"
    info = scan_cache_dir(hub)
    assert not info.warnings  # huggingface_hub reads every folder as a cache entry it knows
    repos = {r.repo_id: r for r in info.repos}
    assert set(repos) == {"openai/clip-vit-base-patch32", "unc-nlp/lxmert-base-uncased", "unc-nlp/frcnn-vg-finetuned"}
    for repo_id, repo in repos.items():
        (rev,) = repo.revisions
        assert rev.refs == frozenset({"main"})
        names = {f.file_name for f in rev.files}
        assert "VLPROBE_FIXTURE.json" in names
        got = Path(snapshot_download(repo_id, cache_dir=hub, local_files_only=True))
        assert got == hub / repo_folder(repo_id) / "snapshots" / rev.commit_hash
        link = got / "config.json" if (got / "config.json").exists() else got / "config.yaml"
        assert link.is_symlink() and link.resolve().parent.name == "blobs"
    # the same fixtures again: the same revision; an entry vlprobe did not write is never replaced
    before = (hub / repo_folder("openai/clip-vit-base-patch32") / "refs" / "main").read_text()
    again = write_hub_cache(hub, ("clip",), seed=0)
    assert again["openai/clip-vit-base-patch32"].name == before
    real = hub.parent / "real"
    (real / repo_folder("openai/clip-vit-base-patch32") / "snapshots" / "abc").mkdir(parents=True)
    with pytest.raises(InputError, match=r"^out: .*models--openai--clip-vit-base-patch32 is a hub-cache entry vlprobe "
                                         r"did not write"):
        write_hub_cache(real, ("lxmert", "clip"))
    assert not (real / repo_folder("unc-nlp/lxmert-base-uncased")).exists()  # refused before any was written


@pytest.mark.slow  # five processes, each loading torch; the region detector and LXMERT on CPU
def test_the_four_commands_as_typed(tmp_path: Path, hub: Path) -> None:
    data = tmp_path / "winoground"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(hub), "VLPROBE_WINOGROUND": str(data)}
    # the commands run in another folder: they import the vlprobe this test imports
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(Path(vlprobe.__file__).parents[1]), env.get("PYTHONPATH")) if p)
    probe = [sys.executable, "-m", "vlprobe"]
    made = subprocess.run([*probe, "fixtures", "dataset", "--out", str(data), "--n-items", "2", "--seed", "0"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr
    work = tmp_path / "work"
    work.mkdir()
    out = {}
    for line in COMMANDS:
        argv = shlex.split(line)
        assert argv[0] == "probe"
        done = subprocess.run([*probe, *argv[1:]], cwd=work, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
        out[line] = done

    assert sorted(os.listdir(work)) == ["caches", "results"]  # the defaults' folders, nothing else
    caches = work / "caches"
    assert sorted(p.name for p in caches.iterdir()) == [
        "clip-winoground.h5", "lxmert-winoground.h5", "winoground-lxmert-36-regions.h5"]
    with ActivationCache(caches / "lxmert-winoground.h5") as cache:
        assert cache.complete and cache.header.checkpoint == "unc-nlp/lxmert-base-uncased"
        defaults = cache.record.defaults
    assert set(defaults) == {"checkpoint", "data_dir", "variants", "out", "regions"}
    assert defaults["checkpoint"] == ("unc-nlp/lxmert-base-uncased (reference checkpoint of lxmert, a vlprobe test "
                                      "fixture: random weights)")
    assert defaults["regions"] == ("caches/winoground-lxmert-36-regions.h5 (made by vlprobe: detector "
                                   "unc-nlp/frcnn-vg-finetuned (reference detector), preset lxmert-36)")
    assert defaults["data_dir"] == f"{data.resolve()} (VLPROBE_WINOGROUND)"
    with ActivationCache(caches / "clip-winoground.h5") as cache:
        assert cache.header.checkpoint == "openai/clip-vit-base-patch32"
        assert cache.info()["texts"] > 4  # the variants beside the data were attached
    assert "is a vlprobe test fixture" in out[COMMANDS[0]].stderr

    results = work / "results" / "separability"
    for model in ("clip", "lxmert"):
        assert (results / f"{model}.csv").stat().st_size > 0
        assert (results / f"{model}.png").stat().st_size > 0 and (results / f"{model}.pdf").stat().st_size > 0
    manifest = json.loads((results / "manifest.json").read_text())
    assert manifest["runs"]["lxmert"]["inputs"]["cache"]["defaults"] == defaults  # the run records them too
    summary = out[COMMANDS[2]].stdout.splitlines()
    at = summary.index("separability: 2 of 2 caches run")
    assert summary[at + 1].startswith("clip    separable (train) highest at text layer ")
    assert summary[at + 1].endswith("-> results/separability/clip.csv")
    assert summary[at + 2].startswith("lxmert  separable (train) highest at ")
    assert out[COMMANDS[3]].stdout.splitlines() == [
        f"wrote results/separability/{m}.png and results/separability/{m}.pdf" for m in ("clip", "lxmert")]
