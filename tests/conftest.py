"""Shared fixtures: offline environment, a synthetic dataset, a tiny CLIP and a reference cache.

Everything expensive is built once per session under ``tmp_path_factory``. The reference cache
and the shard files are made read-only; tests that change a cache work on a copy (the
``copy_cache`` fixture). Helpers are fixtures too (``h5_tree``, ``assert_caches_equal``), so test
modules never import this file.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Before anything imports huggingface_hub (it reads these at import time) or torch.
_SESSION_TMP = Path(tempfile.mkdtemp(prefix="vlprobe-tests-env-"))
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_HOME"] = str(_SESSION_TMP / "hf-home")  # no hit in a developer's real hub cache
os.environ["VLPROBE_CACHE"] = str(_SESSION_TMP / "vlprobe-cache")
# A suite run inside a Slurm job or under torchrun is not a shard of anything: no launcher's
# variables (the tests that need them set their own).
from vlprobe.shards import launcher_free  # noqa: E402

for _name in set(os.environ) - set(launcher_free(os.environ)):
    del os.environ[_name]
# A developer's defaults for `probe extract` (VLPROBE_<MODEL>_CHECKPOINT, VLPROBE_<DATASET>) never reach a test.
for _key in [k for k in os.environ if k.startswith("VLPROBE_") and (
        k.endswith("_CHECKPOINT") or k in ("VLPROBE_WINOGROUND", "VLPROBE_SUGARCREPE", "VLPROBE_VALSE"))]:
    del os.environ[_key]
# Tiny models on a small shared CPU: several threads per 32-wide matmul only add contention.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import h5py  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)

# ``VLPROBE_TEST_HIDE=spacy,wordnet`` runs the suite as a machine without the spaCy English model
# or Debian's WordNet files would (resolution of each fails as it would there); the tests that
# need them must skip, saying why. (Without the shared data: ``VLPROBE_SHARED_DATA=/nonexistent``.)
_HIDE = {h.strip() for h in os.environ.get("VLPROBE_TEST_HIDE", "").split(",") if h.strip()}
if _HIDE - {"spacy", "wordnet"}:
    raise pytest.UsageError(f"VLPROBE_TEST_HIDE: unknown resource(s) {sorted(_HIDE - {'spacy', 'wordnet'})}")
if "spacy" in _HIDE:
    import vlprobe.augment.nlp as _nlp

    _nlp.FALLBACK_MODELS = tuple(f"{m}_hidden_by_tests" for m in _nlp.FALLBACK_MODELS)
    os.environ.pop("VLPROBE_SPACY_MODEL", None)
if "wordnet" in _HIDE:
    import vlprobe.augment.wordnet as _wordnet

    _wordnet.DEBIAN_DIR = _SESSION_TMP / "no-wordnet"
# ``VLPROBE_TEST_REQUIRE=spacy,wordnet`` (CI, which installs both) turns the skip of a test that
# needs one of them into a failure, so that a CI machine that lost a resource cannot go green by
# skipping the tests that use it.
_REQUIRE = {r.strip() for r in os.environ.get("VLPROBE_TEST_REQUIRE", "").split(",") if r.strip()}
if _REQUIRE - {"spacy", "wordnet"}:
    raise pytest.UsageError(f"VLPROBE_TEST_REQUIRE: unknown resource(s) {sorted(_REQUIRE - {'spacy', 'wordnet'})}")

from vlprobe.data.synthetic import make_synthetic_winoground  # noqa: E402
from vlprobe.extract.runner import ExtractConfig, extract  # noqa: E402
from vlprobe.fixtures.clip import write_tiny_clip  # noqa: E402


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--testbed", action="store_true",
                     help="also run the known-answer testbed tests (they train models: minutes on 2 cores)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the ``testbed`` tests unless ``--testbed`` is given (the summary counts them as
    deselected), so the default suite stays fast."""
    if config.getoption("--testbed"):
        return
    keep = [item for item in items if item.get_closest_marker("testbed") is None]
    if len(keep) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if item.get_closest_marker("testbed")])
        items[:] = keep


N_ITEMS = 12
SHARDS = 3


def _shared_data() -> Path:
    """``$VLPROBE_SHARED_DATA`` or the ``shared/data`` folder beside the repository."""
    root = os.environ.get("VLPROBE_SHARED_DATA")
    return Path(root) if root else Path(__file__).resolve().parents[2] / "shared" / "data"


def _one_error_line(result: Any, *needles: str) -> str:
    """Exit code 2, exactly one stderr line starting with "error:", nothing else, no traceback."""
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr, result.exception)
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines[0]
    assert "Traceback" not in result.output
    assert result.stdout == ""
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def _missing(resource: str, reason: str) -> None:
    """Skip the test for want of ``resource`` (saying why), or fail it where the run requires it."""
    if resource in _REQUIRE:
        pytest.fail(f"{reason} (VLPROBE_TEST_REQUIRE={','.join(sorted(_REQUIRE))}: this run must have {resource})")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def missing_resource() -> Callable[[str, str], None]:
    """``missing_resource("wordnet", reason)``: skip, or fail under ``VLPROBE_TEST_REQUIRE``."""
    return _missing


@pytest.fixture(scope="session")
def wordnet_dict() -> Path | None:
    """The WordNet dict folder this machine has (Debian's), or None (also under
    ``VLPROBE_TEST_HIDE=wordnet``)."""
    import vlprobe.augment.wordnet as wordnet_mod

    debian = wordnet_mod.DEBIAN_DIR  # read at call time: VLPROBE_TEST_HIDE=wordnet moves it
    return debian if (debian / "index.sense").is_file() else None


@pytest.fixture(scope="session")
def one_error_line() -> Callable[..., str]:
    """Check a CliRunner result: one ``error:`` line containing every needle; returns it."""
    return _one_error_line


@pytest.fixture
def fake_spacy(monkeypatch: pytest.MonkeyPatch) -> None:
    """ARO's order perturbations tag captions with tests/data/aro_tagging.fake_tag instead of spaCy."""
    from tests.data.aro_tagging import fake_tag
    from vlprobe.data import aro_order

    monkeypatch.setattr(aro_order, "spacy_tagger", lambda model=None: (fake_tag, {"model": "fake", "model_version": "0"}))


@pytest.fixture(scope="session")
def wwh_tags() -> Path:
    """The real "Why is Winoground Hard?" tag file (MIT): the copy vlprobe ships."""
    from vlprobe.data.tags import shipped_tag_file

    return shipped_tag_file()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    shutil.rmtree(_SESSION_TMP, ignore_errors=True)


@pytest.fixture(scope="session")
def synthetic_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Synthetic Winoground-format dataset: 12 items, seed 0 (examples, images, variants, tags)."""
    return make_synthetic_winoground(tmp_path_factory.mktemp("data") / "synthetic", n_items=N_ITEMS, seed=0)


@pytest.fixture(scope="session")
def tiny_clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tiny random CLIP checkpoint (seed 0)."""
    return write_tiny_clip(tmp_path_factory.mktemp("models") / "tiny-clip", seed=0)


@pytest.fixture(scope="session")
def other_clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Another tiny CLIP: same architecture, other weights (seed 1)."""
    return write_tiny_clip(tmp_path_factory.mktemp("models") / "tiny-clip-seed1", seed=1)


@pytest.fixture(scope="session")
def other_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Another synthetic dataset of the same size (seed 1)."""
    return make_synthetic_winoground(tmp_path_factory.mktemp("data") / "synthetic-seed1", n_items=N_ITEMS, seed=1)


@pytest.fixture(scope="session")
def make_config(synthetic_dir: Path, tiny_clip: Path) -> Callable[..., ExtractConfig]:
    """``make_config(out, **overrides)``: the reference run's config with some fields changed."""

    def make(out: Path, **overrides: Any) -> ExtractConfig:
        fields: dict[str, Any] = dict(
            model="clip", checkpoint=str(tiny_clip), out=Path(out), dataset="winoground",
            data_dir=synthetic_dir, variants=synthetic_dir / "variants.jsonl", layers="all",
            poolings=("cls", "mean", "max"), batch_size=16, device="cpu", dtype="float32",
            shard="0/1", progress=False,
        )
        fields.update(overrides)
        return ExtractConfig(**fields)

    return make


@pytest.fixture(scope="session")
def reference_cache(tmp_path_factory: pytest.TempPathFactory, make_config: Callable[..., ExtractConfig]) -> Path:
    """The complete, unsharded cache of the session dataset (with variants); read-only."""
    out = tmp_path_factory.mktemp("reference") / "reference.h5"
    result = extract(make_config(out))
    assert result.complete
    out.chmod(0o444)
    return out


@pytest.fixture(scope="session")
def shard_files(tmp_path_factory: pytest.TempPathFactory, make_config: Callable[..., ExtractConfig]) -> list[Path]:
    """The reference run split into 3 shard files (shard k at index k); read-only."""
    root = tmp_path_factory.mktemp("shards")
    paths = []
    for k in range(SHARDS):
        out = root / f"shard-{k}-of-{SHARDS}.h5"
        extract(make_config(out, shard=f"{k}/{SHARDS}", batch_size=7))
        out.chmod(0o444)
        paths.append(out)
    return paths


def _copy_cache(src: Path, dst: Path) -> Path:
    """A writable copy of a (read-only) cache file."""
    shutil.copyfile(src, dst)
    return dst


def _h5_tree(path: Path) -> dict[str, Any]:
    """Every group and dataset of an HDF5 file: path -> "group" or (dtype name, shape)."""
    out: dict[str, Any] = {}

    def visit(name: str, obj: Any) -> None:
        if isinstance(obj, h5py.Group):
            out[name] = "group"
        else:
            dtype = "str" if h5py.check_string_dtype(obj.dtype) is not None else obj.dtype.name
            out[name] = (dtype, obj.shape)

    with h5py.File(path, "r") as f:
        f.visititems(visit)
    return out


def _assert_caches_equal(actual: Path, expected: Path, *, atol: float = 1e-5) -> None:
    """Same tables, streams, layers, done masks, states (within ``atol``) and scores."""
    with h5py.File(actual, "r") as a, h5py.File(expected, "r") as e:
        for table in ("items", "images", "texts"):
            assert sorted(a[table]) == sorted(e[table]), table
            for col in e[table]:
                np.testing.assert_array_equal(a[table][col][()], e[table][col][()], err_msg=f"{table}/{col}")
        assert sorted(a.get("streams", {})) == sorted(e.get("streams", {}))
        for s in e.get("streams", {}):
            ga, ge = a[f"streams/{s}"], e[f"streams/{s}"]
            assert sorted(ga) == sorted(ge), s
            for name in ("layers", "image", "text", "done"):
                np.testing.assert_array_equal(ga[name][()], ge[name][()], err_msg=f"{s}/{name}")
            for name in sorted(set(ge) - {"layers", "image", "text", "done"}):
                assert ga[name].dtype == ge[name].dtype, f"{s}/{name}"
                np.testing.assert_allclose(ga[name][()], ge[name][()], rtol=0, atol=atol, err_msg=f"{s}/{name}")
        np.testing.assert_array_equal(a["scores/done"][()], e["scores/done"][()])
        np.testing.assert_allclose(a["scores/matrix"][()], e["scores/matrix"][()], rtol=0, atol=atol)
        assert ("pairs" in a) == ("pairs" in e)
        if "pairs" in e:  # cross-encoders' pair plan
            for name in ("image", "text", "done"):
                np.testing.assert_array_equal(a[f"pairs/{name}"][()], e[f"pairs/{name}"][()], err_msg=f"pairs/{name}")
            np.testing.assert_allclose(a["pairs/score"][()], e["pairs/score"][()], rtol=0, atol=atol)


@pytest.fixture(scope="session")
def copy_cache() -> Callable[[Path, Path], Path]:
    """``copy_cache(src, dst)``: a writable copy of a cache file."""
    return _copy_cache


@pytest.fixture(scope="session")
def h5_tree() -> Callable[[Path], dict[str, Any]]:
    """``h5_tree(path)``: path -> "group" or (dtype name | "str", shape) for the whole file."""
    return _h5_tree


@pytest.fixture(scope="session")
def assert_caches_equal() -> Callable[..., None]:
    """``assert_caches_equal(actual, expected, atol=1e-5)``."""
    return _assert_caches_equal


# --- benchmark scoring: the real SugarCrepe / VALSE JSON files, read where they lie ----


@pytest.fixture(scope="session")
def sugarcrepe_dir() -> Path:
    """The real SugarCrepe JSON folder (MIT), never copied."""
    path = _shared_data() / "sugar-crepe" / "data"
    if not (path / "swap_obj.json").is_file():
        pytest.skip(f"the shared SugarCrepe files are absent ({path}); set VLPROBE_SHARED_DATA")
    return path


@pytest.fixture(scope="session")
def valse_dir() -> Path:
    """The real VALSE JSON folder (MIT), never copied."""
    path = _shared_data() / "valse" / "data"
    if not (path / "existence.json").is_file():
        pytest.skip(f"the shared VALSE files are absent ({path}); set VLPROBE_SHARED_DATA")
    return path


@pytest.fixture(scope="session")
def tiny_gpt2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tiny random GPT-2 causal LM (seed 0), for the blind-lm baseline."""
    from vlprobe.fixtures.text_models import write_tiny_gpt2

    return write_tiny_gpt2(tmp_path_factory.mktemp("models") / "tiny-gpt2", seed=0)


@pytest.fixture(scope="session")
def tiny_bert_classifier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tiny random BERT sequence classifier (seed 0), for the blind-grammar baseline."""
    from vlprobe.fixtures.text_models import write_tiny_bert_classifier

    return write_tiny_bert_classifier(tmp_path_factory.mktemp("models") / "tiny-bert-cls", seed=0)


# -- cross-encoders: tiny LXMERT and UNITER, region features of the session dataset (xmodels) ----


@pytest.fixture(scope="session")
def tiny_lxmert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tiny random LxmertForPreTraining checkpoint (seed 0): real depth 9/5/5, width 32."""
    from vlprobe.fixtures.lxmert import write_tiny_lxmert

    return write_tiny_lxmert(tmp_path_factory.mktemp("models") / "tiny-lxmert", seed=0)


@pytest.fixture(scope="session")
def tiny_uniter(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tiny random UNITER in the official format (seed 0): DIR/uniter-base.pt, uniter-base.json, tokenizer/."""
    from vlprobe.fixtures.uniter import write_tiny_uniter

    return write_tiny_uniter(tmp_path_factory.mktemp("models") / "tiny-uniter", seed=0)


@pytest.fixture(scope="session")
def tiny_siglip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tiny random SiglipModel checkpoint (seed 0): text 3 layers, vision 2, width 32."""
    from vlprobe.fixtures.siglip import write_tiny_siglip

    return write_tiny_siglip(tmp_path_factory.mktemp("models") / "tiny-siglip", seed=0)


@pytest.fixture(scope="session")
def tiny_blip_itm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tiny random BlipForImageTextRetrieval checkpoint (seed 0): text 3 layers, vision 2, width 32."""
    from vlprobe.fixtures.blip import write_tiny_blip_itm

    return write_tiny_blip_itm(tmp_path_factory.mktemp("models") / "tiny-blip-itm", seed=0)


@pytest.fixture(scope="session")
def tiny_llava(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tiny random LLaVA-1.5 checkpoint (seed 0)."""
    from vlprobe.fixtures.llava import write_tiny_llava

    return write_tiny_llava(tmp_path_factory.mktemp("models") / "tiny-llava", seed=0)


@pytest.fixture(scope="session")
def tiny_qwen2_vl(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tiny random Qwen2-VL-Instruct checkpoint (seed 0)."""
    from vlprobe.fixtures.qwen2_vl import write_tiny_qwen2_vl

    return write_tiny_qwen2_vl(tmp_path_factory.mktemp("models") / "tiny-qwen2-vl", seed=0)


@pytest.fixture(scope="session")
def sugarcrepe_regions(sugarcrepe_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Random regions (3 to 8 boxes) for the SugarCrepe items of ``tests.extract.helpers.SC_SELECTION``,
    written through the CLI from the JSON files alone (no image files)."""
    from typer.testing import CliRunner

    from tests.extract.helpers import SC_SELECTION
    from vlprobe.cli import app

    out = tmp_path_factory.mktemp("sc-regions") / "sc.h5"
    res = CliRunner().invoke(app, [
        "fixtures", "regions", "--dataset", "sugarcrepe", "--data-dir", str(sugarcrepe_dir), "--out", str(out),
        "--subsets", str(SC_SELECTION["subsets"]), "--limit", str(SC_SELECTION["limit"]), "--boxes", "3:8",
    ])
    assert res.exit_code == 0, res.output
    return out


@pytest.fixture(scope="session")
def synthetic_regions(tmp_path_factory: pytest.TempPathFactory, synthetic_dir: Path) -> Path:
    """Random 2048-d region features for every image of the session dataset: 3 to 8 boxes each."""
    from vlprobe.fixtures.regions import random_regions

    names = sorted(p.stem for p in (synthetic_dir / "images").glob("*.png"))
    return random_regions(tmp_path_factory.mktemp("regions") / "regions.h5", names, n_boxes=8, min_boxes=3, seed=0)


@pytest.fixture(scope="session")
def cross_config(
    synthetic_dir: Path, synthetic_regions: Path, tiny_lxmert: Path, tiny_uniter: Path,
) -> Callable[..., ExtractConfig]:
    """``cross_config(model, out, **overrides)``: an extraction of the session dataset (with
    variants) by the tiny ``lxmert`` or ``uniter`` with the session regions, plan ``item``."""

    def make(model: str, out: Path, **overrides: Any) -> ExtractConfig:
        checkpoint = {"lxmert": str(tiny_lxmert), "uniter": str(tiny_uniter / "uniter-base.pt")}[model]
        fields: dict[str, Any] = dict(
            model=model, checkpoint=checkpoint, out=Path(out), dataset="winoground", data_dir=synthetic_dir,
            variants=synthetic_dir / "variants.jsonl", regions=synthetic_regions, layers="all",
            poolings=("cls", "mean", "max"), batch_size=16, device="cpu", dtype="float32", shard="0/1",
            pair_plan="item", progress=False,
        )
        fields.update(overrides)
        return ExtractConfig(**fields)

    return make


@pytest.fixture(scope="session")
def cross_reference(tmp_path_factory: pytest.TempPathFactory, cross_config: Callable[..., ExtractConfig]) -> Callable[[str], Path]:
    """``cross_reference(model)``: the complete item-plan cache of ``cross_config(model, ...)``, read-only."""
    made: dict[str, Path] = {}

    def get(model: str) -> Path:
        if model not in made:
            out = tmp_path_factory.mktemp(f"reference-{model}") / f"{model}.h5"
            assert extract(cross_config(model, out)).complete
            out.chmod(0o444)
            made[model] = out
        return made[model]

    return get


@pytest.fixture(scope="session")
def every_experiment(tmp_path_factory: pytest.TempPathFactory, reference_cache: Path, tiny_clip: Path,
                     synthetic_dir: Path) -> Path:
    """One small run of every experiment that writes tidy CSVs, all into one results folder
    (:func:`tests.every_experiment.build_every_experiment`)."""
    from tests.every_experiment import build_every_experiment

    return build_every_experiment(tmp_path_factory.mktemp("units"), reference_cache, tiny_clip, synthetic_dir)
