"""data.loading: the one dataset loader of extract, eval, augment and the region fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

from vlprobe.data.loading import check_dataset_options, load_dataset, loader_options


def test_loader_options_follow_the_signatures() -> None:
    assert loader_options("sugarcrepe") == ("image_dir", "subsets", "limit", "strip_captions")
    assert "tags" in loader_options("winoground") and "data_dir" not in loader_options("winoground")


def test_unknown_option_names_the_option_and_what_is_taken() -> None:
    with pytest.raises(ValueError, match=r"image_root: dataset 'sugarcrepe' does not take --image-root \(it takes --image-dir"):
        check_dataset_options("sugarcrepe", {"image_root": ["coco=/x"]})
    assert check_dataset_options("valse", {"image_root": None, "limit": 3}) == {"limit": 3}


def test_required_data_dir_and_unknown_dataset() -> None:
    with pytest.raises(ValueError, match="data_dir: dataset 'valse' needs --data-dir"):
        load_dataset("valse")
    with pytest.raises(ValueError, match="unknown dataset 'winogrond'; did you mean 'winoground'"):
        load_dataset("winogrond")


def test_variants_attached(synthetic_dir: Path) -> None:
    plain = load_dataset("winoground", synthetic_dir, options={"tags": False})
    with_variants = load_dataset("winoground", synthetic_dir, variants=synthetic_dir / "variants.jsonl",
                                 options={"tags": False})
    assert len(with_variants.texts()) > len(plain.texts()) == 2 * len(plain.items)
    assert len(with_variants.extra_fingerprints["variants"]) == 64  # sha256 hex of the file
