"""resolve_checkpoint: local directories (fingerprinted) and hub ids (offline: fail fast)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from vlprobe.extract.models.hf import fingerprint_dir, resolve_checkpoint


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    d = tmp_path / "model"
    (d / "sub").mkdir(parents=True)
    (d / "config.json").write_text('{"model_type": "clip"}', encoding="utf-8")
    (d / "model.safetensors").write_bytes(bytes(range(256)) * 4)
    (d / "sub" / "extra.txt").write_text("x", encoding="utf-8")
    return d


@pytest.fixture
def offline_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Offline, with an empty hub cache (huggingface_hub reads both at import time)."""
    import huggingface_hub.constants as hc

    home = tmp_path / "hf-home"
    home.mkdir()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hc, "HF_HOME", str(home))
    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(home / "hub"))
    return home


def test_local_directory(ckpt: Path) -> None:
    r = resolve_checkpoint(str(ckpt))
    assert r.spec == str(ckpt)
    assert r.path == ckpt.resolve()
    assert r.fingerprint == "sha256:" + fingerprint_dir(ckpt)
    assert len(r.fingerprint) == len("sha256:") + 64


def test_fingerprint_is_stable_and_content_keyed(ckpt: Path, tmp_path: Path) -> None:
    first = resolve_checkpoint(str(ckpt)).fingerprint
    assert resolve_checkpoint(str(ckpt)).fingerprint == first
    # a copy elsewhere has the same fingerprint (names are relative)
    import shutil

    copy = tmp_path / "elsewhere" / "copy"
    shutil.copytree(ckpt, copy)
    assert resolve_checkpoint(str(copy)).fingerprint == first
    # hidden files do not count
    (ckpt / ".DS_Store").write_bytes(b"junk")
    assert resolve_checkpoint(str(ckpt)).fingerprint == first

    data = bytearray((ckpt / "model.safetensors").read_bytes())
    data[100] ^= 1
    (ckpt / "model.safetensors").write_bytes(bytes(data))
    changed = resolve_checkpoint(str(ckpt)).fingerprint
    assert changed != first

    (ckpt / "sub" / "extra.txt").rename(ckpt / "sub" / "renamed.txt")
    assert resolve_checkpoint(str(ckpt)).fingerprint not in (first, changed)


def test_relative_and_home_paths(ckpt: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ckpt.parent)
    assert resolve_checkpoint("./model").path == ckpt.resolve()
    monkeypatch.setenv("HOME", str(ckpt.parent))
    assert resolve_checkpoint("~/model").path == ckpt.resolve()


@pytest.mark.parametrize("spec", ["./missing", "/no/such/dir", "../missing", "~/missing-ckpt-xyz",
                                  "a/b/c"])
def test_missing_local_path_is_not_a_directory(
    spec: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, offline_hub: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"^checkpoint: .* is not a directory"):
        resolve_checkpoint(spec)


def test_a_file_is_not_a_directory(ckpt: Path) -> None:
    with pytest.raises(ValueError, match=r"^--checkpoint: .* is not a directory"):
        resolve_checkpoint(str(ckpt / "config.json"), param="--checkpoint")


@pytest.mark.parametrize("spec", ["", "   "])
def test_empty_spec(spec: str) -> None:
    with pytest.raises(ValueError, match="must be a local directory or a hub id"):
        resolve_checkpoint(spec)


def test_hub_id_offline_fails_fast_with_advice(
    offline_hub: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    start = time.monotonic()
    with pytest.raises(ValueError) as exc:
        resolve_checkpoint("openai/clip-vit-base-patch32", param="checkpoint")
    assert time.monotonic() - start < 10
    msg = str(exc.value)
    assert msg.startswith("checkpoint: 'openai/clip-vit-base-patch32'")
    assert "offline" in msg
    assert "save_pretrained" in msg and "--checkpoint DIR" in msg
    assert not (offline_hub / "hub" / "models--openai--clip-vit-base-patch32" / "snapshots").exists()


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("not a valid id!", "is neither a directory nor a valid hub id"),
        ("-leading/dash", "is neither a directory nor a valid hub id"),
        ("org/name with space", "is neither a directory nor a valid hub id"),
        ("bad//id", "is not a directory"),
    ],
)
def test_invalid_hub_id(
    spec: str, fragment: str, offline_hub: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError) as exc:
        resolve_checkpoint(spec)
    assert str(exc.value) == f"checkpoint: {spec!r} {fragment}" + (
        " (expected a checkpoint folder or a hub id)" if "not a directory" in fragment else ""
    )


def test_hub_id_uses_the_snapshot(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import huggingface_hub

    snap = tmp_path / "snapshots" / ("a" * 40)
    snap.mkdir(parents=True)
    seen: dict[str, object] = {}

    def fake(repo_id: str, **kwargs: object) -> str:
        seen.update(kwargs, repo_id=repo_id)
        return str(snap)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)
    monkeypatch.chdir(tmp_path)
    r = resolve_checkpoint("org/model", allow_patterns=["*.json"])
    assert r.path == snap
    assert r.fingerprint == f"hub:org/model@{'a' * 40}"
    assert seen == {"repo_id": "org/model", "allow_patterns": ["*.json"]}
