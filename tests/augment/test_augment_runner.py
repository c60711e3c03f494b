"""`probe augment`: the variants file, its provenance, determinism, presets, plug-ins, the CLI."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vlprobe.augment import plan as plan_mod
from vlprobe.augment.plan import PRESETS, build_strategy, resolve_plan
from vlprobe.augment.runner import (
    AugmentConfig,
    _variant_sets,
    augment,
    augment_texts,
    prepare_strategies,
)
from vlprobe.cli import app
from vlprobe.data.variants import attach_variants, read_variants, read_variants_header
from vlprobe.data.winoground import load_winoground
from vlprobe.registry import STRATEGIES

ROOT = Path(__file__).resolve().parents[2]


def test_preset_reproduces_the_papers_list_and_counts() -> None:
    wwh = dict(PRESETS["why-winoground-hard"])
    assert wwh == {"original": 1, "back-translation": 1, "diverse-back-translation": 3, "paraphrase": 5,
                   "role-rewrite": 3, "hyponym": 2, "hypernym": 2, "slang": 3, "synonym": 3}
    assert sum(wwh.values()) == 23  # "at most 23 variants per caption"
    assert all(name in STRATEGIES for name in wwh)
    assert resolve_plan("why-winoground-hard", None, 2)[3] == ("paraphrase", 2)
    groups = {n: build_strategy(n).group for n in wwh}
    assert groups["original"] == "identity" and groups["role-rewrite"] == "rule-based"
    assert groups["paraphrase"] == "neural" and groups["synonym"] == "lexical"


@pytest.fixture(scope="module")
def lexical_file(tmp_path_factory: pytest.TempPathFactory, synthetic_dir: Path, wordnet_root: Path, nlp) -> Path:
    out = tmp_path_factory.mktemp("aug") / "variants.jsonl"
    augment(AugmentConfig(out=out, data_dir=synthetic_dir, preset="lexical", seed=0))
    return out


def test_variants_file_format_and_provenance(lexical_file: Path, synthetic_dir: Path) -> None:
    sets = read_variants(lexical_file)
    assert len(sets) == 24  # 12 items x 2 captions
    ds = load_winoground(synthetic_dir, tags=False)
    captions = {(it.id, k): t.text for it in ds.items for k, t in enumerate(it.captions)}
    for vs in sets:
        assert vs.original == captions[(vs.item, vs.caption)]
        assert all(v.text != vs.original for v in vs.variants)
        assert len({v.text for v in vs.variants}) == len(vs.variants)
        per = {}
        for v in vs.variants:
            per[v.strategy] = per.get(v.strategy, 0) + 1
        assert all(per[s] <= n for s, n in PRESETS["lexical"] if s in per)
    prov = read_variants_header(lexical_file)
    assert prov["seed"] == 0 and prov["preset"] == "lexical"
    assert prov["wordnet"].startswith("debian-3.0")
    assert prov["spacy"]["model_version"] and prov["spacy"]["spacy_version"]
    assert set(prov["strategies"]) == {"synonym", "hypernym", "hyponym", "slang"}
    assert all("version" in p for p in prov["strategies"].values())
    assert "created" not in lexical_file.read_text()
    # the extraction side reads it
    with_variants = attach_variants(ds, lexical_file)
    assert sum(len(it.variants) for it in with_variants.items) == sum(len(v.variants) for v in sets)


def test_same_seed_byte_identical_other_seed_differs(lexical_file: Path, synthetic_dir: Path, tmp_path: Path) -> None:
    again = augment(AugmentConfig(out=tmp_path / "again.jsonl", data_dir=synthetic_dir, preset="lexical", seed=0))
    assert again.path.read_bytes() == lexical_file.read_bytes()
    other = augment(AugmentConfig(out=tmp_path / "other.jsonl", data_dir=synthetic_dir, preset="lexical", seed=1))
    assert other.path.read_bytes() != lexical_file.read_bytes()


def test_variants_do_not_depend_on_order_or_subset(wordnet_root: Path, nlp) -> None:
    strategies, _ = prepare_strategies(None, ["synonym", "hyponym", "slang"], 2)
    caps = [(f"x/{i}", k, t) for i, t in enumerate(["two dogs sat on a red couch", "a man rides a horse"])
            for k in (0, 1)]
    full = {(s.item, s.caption): s for s in _variant_sets(strategies, caps, 5, 256)}
    rev = {(s.item, s.caption): s for s in _variant_sets(strategies, caps[::-1], 5, 1)}
    sub = {(s.item, s.caption): s for s in _variant_sets(strategies[1:], caps[2:], 5, 256)}
    assert full == rev
    for key, vs in sub.items():
        assert vs.variants == tuple(v for v in full[key].variants if v.strategy != "synonym")


@pytest.mark.slow
def test_byte_identical_across_processes_with_other_hash_seeds(synthetic_dir: Path, wordnet_root: Path, tmp_path: Path, nlp) -> None:
    outs = []
    for hash_seed in ("1", "2"):
        out = tmp_path / f"h{hash_seed}.jsonl"
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(ROOT / "src")}
        subprocess.run([sys.executable, "-m", "vlprobe", "augment", "--data-dir", str(synthetic_dir),
                        "--strategies", "hyponym,hypernym,synonym", "--out", str(out), "-q"],
                       check=True, env=env, capture_output=True, timeout=300)
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]


def test_entry_point_plugins_are_registered_lazily(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "vlprobe_fake_plugin.py").write_text(
        "from vlprobe.augment.base import Proposal, Strategy\n"
        "class Exclaim(Strategy):\n"
        "    '''Adds an exclamation mark.'''\n"
        "    name = 'exclaim'\n    group = 'rule-based'\n"
        "    def propose(self, text, rng):\n        return [Proposal(text + '!')]\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    ep = importlib.metadata.EntryPoint("exclaim", "vlprobe_fake_plugin:Exclaim", plan_mod.ENTRY_POINT_GROUP)
    monkeypatch.setattr(plan_mod.importlib.metadata, "entry_points", lambda group=None: [ep] if group == plan_mod.ENTRY_POINT_GROUP else [])
    monkeypatch.setattr(plan_mod, "_plugins_loaded", False)
    try:
        assert plan_mod.load_plugins() == ["exclaim"]
        res = augment_texts(["a dog"], strategies=["exclaim"])
        assert [v.text for v in res.sets[0].variants] == ["a dog!"]
    finally:
        STRATEGIES._entries.pop("exclaim", None)
        STRATEGIES._help.pop("exclaim", None)
        sys.modules.pop("vlprobe_fake_plugin", None)


def test_cli_augment_dataset_and_text(synthetic_dir: Path, wordnet_root: Path, tmp_path: Path, nlp) -> None:
    runner = CliRunner()
    out = tmp_path / "v.jsonl"
    r = runner.invoke(app, ["augment", "--dataset", "winoground", "--data-dir", str(synthetic_dir),
                            "--strategies", "synonym,hypernym,slang", "--max-per-strategy", "3", "--out", str(out), "-q"])
    assert r.exit_code == 0, r.output
    assert f"wrote {out}" in r.stdout and "of 24 captions" in r.stdout
    assert {v.strategy for vs in read_variants(out) for v in vs.variants} <= {"synonym", "hypernym", "slang"}
    r = runner.invoke(app, ["augment", "--text", "a dog chases a cat.", "--strategies", "synonym,role-rewrite"])
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("a dog chases a cat.\n") and "[role-rewrite] a cat is chased by a dog." in r.stdout


def test_cli_unavailable_strategy_is_named_and_skipped_or_strict(wordnet_root: Path, one_error_line, nlp) -> None:
    runner = CliRunner()
    r = runner.invoke(app, ["augment", "--text", "a dog chases a cat.", "--strategies", "paraphrase,synonym"])
    assert r.exit_code == 0
    assert "skipped paraphrase: model 'tdopierre/ProtAugment-ParaphraseGenerator'" in r.stderr
    assert "[synonym]" in r.stdout
    r = runner.invoke(app, ["augment", "--text", "a dog", "--strategies", "paraphrase,synonym", "--strict"])
    one_error_line(r, "strict", "paraphrase", "ProtAugment")


def test_cli_ls_strategies_says_why_and_how(one_error_line) -> None:
    r = CliRunner().invoke(app, ["ls", "strategies"])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    para = next(i for i, line in enumerate(lines) if line.startswith("paraphrase "))
    assert "UNAVAILABLE" in lines[para]
    assert "why:" in lines[para + 1] and "fix:" in lines[para + 2] and "hf download" in lines[para + 2]
    synonym = next(line for line in lines if line.startswith("synonym "))
    # available with WordNet and the spaCy model; without either, ls says so (and why, below it)
    ok = STRATEGIES.get("synonym")().available().ok
    assert ("UNAVAILABLE" not in synonym) == ok, synonym
    if not ok:
        assert "why:" in lines[lines.index(synonym) + 1]
    assert any(line.startswith("role-rewrite ") and "may alter meaning" in line for line in lines)
    assert any(line.startswith("preset why-winoground-hard:") for line in lines)


@pytest.mark.parametrize(("args", "needles"), [
    (["--text", "x", "--strategies", "synonim"], ("unknown strategy 'synonim'", "did you mean 'synonym'")),
    (["--text", "x", "--preset", "lexical", "--strategies", "synonym"], ("give --preset or --strategies, not both",)),
    (["--text", "x", "--preset", "nope"], ("unknown preset 'nope'",)),
    (["--text", "x", "--strategies", "synonym", "--seed", "-1"], ("seed must be an integer in [0, 2**32), got -1",)),
    (["--text", "x", "--strategies", "synonym", "--max-per-strategy", "0"], ("max_per_strategy",)),
    (["--text", "x", "--strategies", "synonym", "--option", "synonym.colour=red"], ("unknown option",)),
    (["--text", "x", "--strategies", "synonym", "--option", "bad"], ("STRATEGY.KEY=VALUE",)),
    (["--text", "x", "--strategies", "synonym", "--out", "f.jsonl"], ("not both",)),
    (["--strategies", "synonym"], ("give --out",)),
])
def test_cli_bad_input_is_one_line(args: list[str], needles: tuple[str, ...], one_error_line) -> None:
    one_error_line(CliRunner().invoke(app, ["augment", *args]), *needles)


def test_paper_preset_runs_offline_with_what_is_available(wordnet_root: Path, nlp) -> None:
    res = augment_texts(["The man is riding a horse on the beach"], preset="why-winoground-hard", seed=2)
    assert set(res.skipped) == {"back-translation", "diverse-back-translation", "paraphrase"}
    made = [v.strategy for v in res.sets[0].variants]
    assert "original" not in made  # the caption itself is the variants' parent, not repeated
    assert set(made) <= {"role-rewrite", "hyponym", "hypernym", "slang", "synonym"}
    for name, n in PRESETS["why-winoground-hard"]:
        assert made.count(name) <= n
    assert res.n_variants >= 8
    assert "not repeated" in res.provenance["identity"]
    assert [p["strategy"] for p in res.provenance["plan"]] == [
        "original", "role-rewrite", "hyponym", "hypernym", "slang", "synonym"]


def test_without_preset_or_strategies_the_paper_preset_runs(wordnet_root: Path, nlp) -> None:
    assert resolve_plan(None, None, None) == resolve_plan("why-winoground-hard", None, None)
    r = CliRunner().invoke(app, ["augment", "--text", "The man is riding a horse on the beach", "--seed", "2"])
    assert r.exit_code == 0, r.output
    assert "[role-rewrite]" in r.stdout and "skipped paraphrase:" in r.stderr
    res = augment_texts(["The man is riding a horse on the beach"], seed=2)
    assert res.provenance["preset"] == "why-winoground-hard"
    assert res.n_variants == augment_texts(["The man is riding a horse on the beach"], seed=2,
                                           preset="why-winoground-hard").n_variants


def test_cli_augment_takes_the_dataset_selection(sugarcrepe_dir: Path, tmp_path: Path, one_error_line, nlp) -> None:
    runner = CliRunner()
    out = tmp_path / "v.jsonl"
    base = ["augment", "--dataset", "sugarcrepe", "--data-dir", str(sugarcrepe_dir), "--strategies", "slang", "-q"]
    r = runner.invoke(app, [*base, "--subsets", "swap_obj,add_att", "--limit", "3", "--out", str(out)])
    assert r.exit_code == 0, r.output
    items = sorted({vs.item for vs in read_variants(out)})
    assert len(items) == 6 and {i.split("/")[1] for i in items} == {"swap_obj", "add_att"}
    header = read_variants_header(out)
    assert header is not None
    assert header["selection"] == {"subsets": "swap_obj,add_att", "limit": 3} and header["n_items"] == 6
    keep = tmp_path / "keep.jsonl"
    keep.write_text(f'{{"item": "{items[0]}"}}\n{{"item": "{items[-1]}"}}\n', encoding="utf-8")
    r = runner.invoke(app, [*base, "--subsets", "swap_obj,add_att", "--items", str(keep), "--out", str(tmp_path / "k.jsonl")])
    assert r.exit_code == 0, r.output
    assert sorted({vs.item for vs in read_variants(tmp_path / "k.jsonl")}) == [items[0], items[-1]]
    one_error_line(runner.invoke(app, ["augment", "--dataset", "winoground", "--subsets", "a", "--strategies", "slang",
                                       "--out", str(tmp_path / "w.jsonl")]), "does not take --subsets")
