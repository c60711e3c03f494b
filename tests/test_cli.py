"""The ``probe`` command, in-process through typer's CliRunner (and twice as a real process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from vlprobe import registry
from vlprobe.cli import app
from vlprobe.extract.cache.reader import ActivationCache
from vlprobe.extract.cache.schema import ROOT_ATTRS

N_IMAGES, N_TEXTS = 24, 141


@pytest.fixture(scope="module")
def runner() -> CliRunner:
    return CliRunner()  # click >= 8.2: result.stdout and result.stderr are kept apart


def run(runner: CliRunner, *args: str | Path):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def extract_args(synthetic_dir: Path, tiny_clip: Path) -> list[str]:
    """``probe extract`` arguments of the reference run, without --out."""
    return [
        "extract", "--model", "clip", "--checkpoint", str(tiny_clip), "--data-dir", str(synthetic_dir),
        "--variants", str(synthetic_dir / "variants.jsonl"), "--batch-size", "16", "--device", "cpu", "--quiet",
    ]


def with_option(args: list[str], option: str, value: str) -> list[str]:
    """``args`` with ``option`` set to ``value`` (replaced if present, else appended)."""
    args = list(args)
    if option in args:
        args[args.index(option) + 1] = value
    else:
        args += [option, value]
    return args


# -- ls ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("what", "reg"), [("models", registry.MODELS), ("datasets", registry.DATASETS),
                                          ("experiments", registry.EXPERIMENTS), ("fixtures", registry.FIXTURES)])
def test_ls(runner: CliRunner, what: str, reg: registry.Registry) -> None:
    result = run(runner, "ls", what)
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    if len(reg):
        assert [line.split()[0] for line in lines] == reg.names()
    else:
        assert lines == [f"(no {what} registered yet)"]


def test_ls_lists_the_builtin_entries(runner: CliRunner) -> None:
    models = run(runner, "ls", "models").stdout.splitlines()
    assert any(line.startswith("clip ") and "CLIP dual encoder" in line for line in models)
    assert any(line.startswith("winoground ") for line in run(runner, "ls", "datasets").stdout.splitlines())


#: Every row of the three papers' model tables: (paper, row as the reproduction table names it).
PAPER_ROWS = [
    ("Why is Winoground Hard?", "CLIP ViT-B/32"), ("Why is Winoground Hard?", "LXMERT"),
    ("Why is Winoground Hard?", "UNITER base, large"),
    ("VALSE", "CLIP"), ("VALSE", "LXMERT"), ("VALSE", "ViLBERT"), ("VALSE", "ViLBERT 12-in-1"),
    ("VALSE", "VisualBERT"), ("VALSE", "GPT-1, GPT-2"),
    ("SugarCrepe", "OpenAI RN50 ... RN50x64, ViT-B-32, ViT-L-14"),
    ("SugarCrepe", "LAION2B ViT-H-14, ViT-g-14, ViT-bigG-14"),
    ("SugarCrepe", "LAION2B roberta-ViT-B-32; LAION5B xlm-roberta-base-ViT-B-32, xlm-roberta-large-ViT-H-14"),
    ("SugarCrepe", "DataComp small, medium, large, xlarge"), ("SugarCrepe", "NegCLIP"),
    ("SugarCrepe", "Vera (text), Grammar (text)"),
]


def test_ls_models_lists_every_model_of_the_papers_tables(runner: CliRunner) -> None:
    """The reproduction table (docs) has a row for each model of the three papers' tables; each
    names models `probe ls models` lists and fixtures `probe ls fixtures` lists."""
    from tests.docs_text import doc_page

    page = doc_page("reproducing.md")
    table = page[page.index("## Every model of the papers' tables"):]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()
            if line.startswith("| ") and not line.startswith("| paper ")]
    assert [(r[0], r[1]) for r in rows] == PAPER_ROWS
    listed = {line.split()[0] for line in run(runner, "ls", "models").stdout.splitlines()}
    fixtures = {line.split()[0] for line in run(runner, "ls", "fixtures").stdout.splitlines()}
    for paper, row, models, _, fixture in rows:
        names = [m.strip("` ") for m in models.split(",")]
        assert names and set(names) <= listed, (paper, row, names)
        for f in fixture.split(","):
            assert f.strip("` ").split()[0] in fixtures, (paper, row, f)


def test_ls_unknown(one_error_line: Callable[..., str], runner: CliRunner) -> None:
    one_error_line(run(runner, "ls", "bogus"), "'bogus'", "models")


# -- fixtures ---------------------------------------------------------------------------------------


def test_fixtures_dataset(runner: CliRunner, tmp_path: Path) -> None:
    from vlprobe.data.winoground import load_winoground

    out = tmp_path / "data"
    result = run(runner, "fixtures", "dataset", "--out", out, "--n-items", "3", "--seed", "5", "--image-size", "32")
    assert result.exit_code == 0, result.output
    assert "wrote 3" in result.stdout
    dataset = load_winoground(out)
    assert [it.id for it in dataset.items] == ["winoground/0", "winoground/1", "winoground/2"]
    assert dataset.images()[0].load().size == (32, 32)
    assert (out / "variants.jsonl").is_file()


def test_fixtures_model_clip(runner: CliRunner, tmp_path: Path) -> None:
    from transformers import AutoImageProcessor, AutoTokenizer, CLIPModel

    out = tmp_path / "clip"
    result = run(runner, "fixtures", "model", "clip", "--out", out, "--seed", "2")
    assert result.exit_code == 0, result.output
    assert str(out) in result.stdout
    model = CLIPModel.from_pretrained(out)
    assert model.config.projection_dim == 16
    tokenizer = AutoTokenizer.from_pretrained(out)
    ids = tokenizer("a red circle")["input_ids"]
    assert ids[-1] == tokenizer.eos_token_id == max(tokenizer.get_vocab().values())
    # as openai/clip-vit-base-patch32's config.json: the legacy eos id 2, so CLIP pools at the highest id (argmax)
    assert model.config.text_config.eos_token_id == 2
    assert AutoImageProcessor.from_pretrained(out) is not None


def test_fixtures_model_unknown(one_error_line: Callable[..., str], runner: CliRunner, tmp_path: Path) -> None:
    one_error_line(run(runner, "fixtures", "model", "blip", "--out", tmp_path / "m"), "'blip'", "clip")


# -- extract ----------------------------------------------------------------------------------------


def test_extract_writes_a_complete_cache(
    runner: CliRunner, extract_args: list[str], reference_cache: Path,
    assert_caches_equal: Callable[..., None], tmp_path: Path,
) -> None:
    out = tmp_path / "cli.h5"
    result = run(runner, *extract_args, "--out", out)
    assert result.exit_code == 0, result.output
    assert result.stderr == ""  # --quiet
    assert result.stdout.startswith(f"wrote {out} (text {N_TEXTS}/{N_TEXTS} rows, image {N_IMAGES}/{N_IMAGES} rows")
    with ActivationCache(out) as c:
        assert c.complete
    assert_caches_equal(out, reference_cache)

    again = run(runner, *extract_args, "--out", out)  # resume of a complete file: nothing to do
    assert again.exit_code == 0, again.output
    assert f"text 0/{N_TEXTS} rows, image 0/{N_IMAGES} rows" in again.stdout


def test_extract_progress_goes_to_stderr(runner: CliRunner, extract_args: list[str], tmp_path: Path) -> None:
    args = [a for a in extract_args if a != "--quiet"]
    result = run(runner, *with_option(args, "--layers", "-1"), "--poolings", "mean", "--out", tmp_path / "p.h5")
    assert result.exit_code == 0, result.output
    assert len(result.stdout.splitlines()) == 1 and result.stdout.startswith("wrote ")  # bars: stderr
    assert "Traceback" not in result.output


def test_extract_layers_and_pooling_options(runner: CliRunner, extract_args: list[str], tmp_path: Path) -> None:
    out = tmp_path / "opts.h5"
    result = run(runner, *extract_args, "--layers", "text=0,-1;image=all", "--poolings", "cls", "--out", out)
    assert result.exit_code == 0, result.output
    with ActivationCache(out) as c:
        assert c.layers("text") == [0, 3] and c.layers("image") == [0, 1, 2]
        assert c.poolings("text") == c.poolings("image") == ["cls", "pooled"]


# -- cache info / merge -----------------------------------------------------------------------------


def test_cache_info(runner: CliRunner, reference_cache: Path, tiny_clip: Path) -> None:
    result = run(runner, "cache", "info", reference_cache)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "schema vlprobe-cache version 4  complete" in out and "INCOMPLETE" not in out
    assert f"12 items, {N_IMAGES} images, {N_TEXTS} texts ({N_TEXTS - 24} variants)" in out
    lines = out.splitlines()
    # every declared attribute on its own line, the compared ones marked
    for a in ROOT_ATTRS:
        if a.name != "complete":
            mark = "*" if a.compared else " "
            assert any(line.startswith(f"  {mark} {a.name} ") for line in lines), a.name
    assert any(line.split() == ["checkpoint", str(tiny_clip)] for line in lines)
    assert any(line.split() == ["*", "dtype", "float32"] for line in lines)
    assert any(line.split() == ["*", "pair_plan", "all"] for line in lines)
    assert f"stream     text (text): {N_TEXTS}/{N_TEXTS} rows done; layers [0, 1, 2, 3]" in out
    assert f"scores     cosine image x text ({N_IMAGES}, {N_TEXTS}), {N_IMAGES * N_TEXTS} computed" in out


def test_cache_info_json(runner: CliRunner, reference_cache: Path) -> None:
    result = run(runner, "cache", "info", reference_cache, "--json")
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    assert info["path"] == str(reference_cache)
    assert info["size_bytes"] == reference_cache.stat().st_size
    assert (info["schema"], info["schema_version"], info["complete"]) == ("vlprobe-cache", 4, True)
    a = info["header"]
    assert set(a) | set(info["recorded"]) | {"complete"} == {f.name for f in ROOT_ATTRS}
    assert a["model"] == "clip"
    assert a["layers"] == {"image": [0, 1, 2], "text": [0, 1, 2, 3]}
    assert a["poolings"] == ["cls", "mean", "max", "pooled"]
    assert a["shard"] == "0/1" and a["dtype"] == "float32" and a["pair_plan"] == "all"
    r = info["recorded"]
    assert isinstance(r["versions"], dict) and "torch" in r["versions"]
    assert isinstance(r["model_info"], dict) and r["batch_size"] == 16
    assert (info["items"], info["images"], info["texts"], info["variants"]) == (12, N_IMAGES, N_TEXTS, N_TEXTS - 24)
    text = info["streams"]["text"]
    assert text["modality"] == "text" and text["cls_rule"] == "eos" and text["hidden_size"] == 32
    assert text["layers"] == [0, 1, 2, 3] and text["layer_kinds"] == ["embed", "self", "self", "self"]
    assert text["poolings"] == {"cls": [N_TEXTS, 4, 32], "mean": [N_TEXTS, 4, 32], "max": [N_TEXTS, 4, 32],
                                "pooled": [N_TEXTS, 16]}
    assert text["rows"] == [0, N_TEXTS] and text["n_rows"] == N_TEXTS and text["done"] == N_TEXTS
    assert info["streams"]["image"]["cls_rule"] == "patch0"
    assert info["scores"]["shape"] == [N_IMAGES, N_TEXTS] and info["scores"]["kind"] == "cosine"


def test_cache_info_errors(one_error_line: Callable[..., str], runner: CliRunner, tmp_path: Path) -> None:
    one_error_line(run(runner, "cache", "info", tmp_path / "none.h5"), "no such file")
    (tmp_path / "notes.h5").write_text("hello")
    one_error_line(run(runner, "cache", "info", tmp_path / "notes.h5"), "not a readable HDF5 file")


def test_cache_merge(one_error_line: Callable[..., str],
    runner: CliRunner, shard_files: list[Path], reference_cache: Path,
    assert_caches_equal: Callable[..., None], tmp_path: Path,
) -> None:
    out = tmp_path / "merged.h5"
    result = run(runner, "cache", "merge", shard_files[1], shard_files[2], shard_files[0], "--out", out)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"merged 3 shards into {out}"
    assert_caches_equal(out, reference_cache)

    # the same merge again replaces its own output; a file it did not write is never replaced
    again = run(runner, "cache", "merge", *shard_files, "--out", out)
    assert again.exit_code == 0, again.output
    assert_caches_equal(out, reference_cache)
    other = tmp_path / "notes.h5"
    other.write_text("my notes\n")
    one_error_line(run(runner, "cache", "merge", *shard_files, "--out", other), "not an earlier merge")
    assert other.read_text() == "my notes\n"
    one_error_line(run(runner, "cache", "merge", *shard_files, "--out", reference_cache), "not an earlier merge")
    missing = run(runner, "cache", "merge", shard_files[0], shard_files[2], "--out", tmp_path / "m2.h5")
    one_error_line(missing, "missing shard(s) 1/3")


# -- bad input: one line, exit code 2 ---------------------------------------------------------------


def _write_variants(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


GOOD_VARIANT_LINE = json.dumps({"item": "winoground/0", "caption": 0, "variants": [{"text": "x", "strategy": "s"}]})


@pytest.mark.parametrize(
    ("option", "value", "needles"),
    [
        ("--model", "clp", ("unknown model 'clp'", "did you mean 'clip'")),
        # a newcomer's guesses: a checkpoint's short name, capitals, the checkpoint itself
        ("--model", "clip-vit-b32", ("unknown model 'clip-vit-b32'", "did you mean 'clip'?")),
        ("--model", "CLIP", ("unknown model 'CLIP'", "did you mean 'clip'?")),
        ("--model", "openai/clip-vit-base-patch32",
         ("that is a checkpoint: --model clip --checkpoint openai/clip-vit-base-patch32",)),
        ("--layers", "0,99", ("layers", "layer 99 is out of range")),
        ("--poolings", "cls,foo", ("poolings", "'foo'")),
        ("--shard", "3/3", ("shard", "'3/3'")),
        ("--shard", "a/b", ("shard", "K/N")),
        ("--dtype", "float64", ("dtype", "'float64'")),
        ("--device", "cuda" if not torch.cuda.is_available() else "mps", ("device",)),
        ("--batch-size", "0", ("batch_size",)),
        ("--pair-plan", "some", ("pair_plan",)),
        ("--data-dir", "MISSING", ("data_dir", "no such directory")),
        ("--out", "cache.txt", ("out", ".h5")),
        ("--variants", "BAD_LINE", ("line 2", "not valid JSON")),
        ("--variants", "UNKNOWN_ITEM", ("none of the 1 captions in v.jsonl", "check the selection")),
        ("--variants", "MISSING", ("variants", "no such file")),
        ("--checkpoint", "MISSING_DIR", ("checkpoint", "is not a directory")),
        ("--dataset", "winogrand", ("unknown dataset 'winogrand'", "did you mean 'winoground'")),
    ],
)
def test_extract_bad_input(one_error_line: Callable[..., str],
    runner: CliRunner, extract_args: list[str], tmp_path: Path, option: str, value: str, needles: tuple[str, ...]
) -> None:
    out = tmp_path / "out.h5"
    if value == "MISSING":
        value = str(tmp_path / "does-not-exist")
    elif value == "MISSING_DIR":
        value = str(tmp_path / "no-such-model")
    elif value == "BAD_LINE":
        value = str(_write_variants(tmp_path / "v.jsonl", [GOOD_VARIANT_LINE, "{not json"]))
    elif value == "UNKNOWN_ITEM":
        value = str(_write_variants(tmp_path / "v.jsonl", [GOOD_VARIANT_LINE.replace("winoground/0", "winoground/999")]))
    elif option == "--out":
        out = tmp_path / value
    args = with_option([*extract_args, "--out", str(out)], option, value)
    one_error_line(run(runner, *args), *needles)
    assert not out.exists()


def test_extract_hub_id_fails_fast_offline(one_error_line: Callable[..., str], runner: CliRunner, extract_args: list[str], tmp_path: Path) -> None:
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    args = with_option([*extract_args, "--out", str(tmp_path / "hub.h5")], "--checkpoint", "openai/clip-vit-base-patch32")
    t0 = time.monotonic()
    result = run(runner, *args)
    elapsed = time.monotonic() - t0
    line = one_error_line(result, "'openai/clip-vit-base-patch32'", "HF_HUB_OFFLINE", "--checkpoint")
    assert "save_pretrained" in line or "hf download" in line
    assert elapsed < 10, f"offline hub failure took {elapsed:.1f} s"


def test_extract_without_data_dir_fails_fast_offline(one_error_line: Callable[..., str],
    runner: CliRunner, extract_args: list[str], tmp_path: Path
) -> None:
    """No --data-dir means the gated hub dataset: offline, one clear line at once."""
    i = extract_args.index("--data-dir")
    args = [*extract_args[:i], *extract_args[i + 2 :], "--out", str(tmp_path / "hub.h5")]
    args = [a for a in args if a not in ("--variants", str(Path(extract_args[i + 1]) / "variants.jsonl"))]
    t0 = time.monotonic()
    result = run(runner, *args)
    one_error_line(result, "facebook/winoground", "offline", "--data-dir")
    assert time.monotonic() - t0 < 10


def test_usage_errors_are_one_line(runner: CliRunner, extract_args: list[str], tmp_path: Path) -> None:
    """Click's own usage errors (a non-integer --batch-size) keep the one-line contract too.

    Typer alone prints "Usage: ... / Try ... / a rich box" over several stderr lines for
    option-parsing errors; ``OneLineErrors`` (src/vlprobe/cli/__init__.py) makes them one line.
    """
    args = with_option([*extract_args, "--out", str(tmp_path / "u.h5")], "--batch-size", "abc")
    result = run(runner, *args)
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), (
        "CLI bug: click/typer usage errors are not turned into one 'error:' line:\n" + result.stderr
    )


# -- real processes ---------------------------------------------------------------------------------


def _subprocess(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run(
        [sys.executable, "-m", "vlprobe", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_subprocess_bad_argument(extract_args: list[str], tmp_path: Path) -> None:
    args = with_option([*extract_args, "--out", str(tmp_path / "x.h5")], "--shard", "3/3")
    proc = _subprocess(*args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: shard"), proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "x.h5").exists()
