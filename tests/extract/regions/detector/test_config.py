"""Reading config.yaml: the published values, key spellings and layouts, errors naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from vlprobe.extract.regions.detector import (
    DetectorInputError,
)
from vlprobe.extract.regions.detector.config import (
    config_from_dict,
    default_config_dict,
    read_config,
)
from vlprobe.fixtures.frcnn import (
    tiny_config_dict,
)


def test_default_config_is_the_published_model() -> None:
    cfg = config_from_dict(default_config_dict())
    assert (cfg.depth, cfg.num_classes, cfg.num_attrs, cfg.feature_dim) == (101, 1600, 400, 2048)
    assert cfg.num_anchors == 12 and cfg.pooler_resolution == 14 and cfg.roi_bbox_weights == (10, 10, 5, 5)
    assert cfg.input_format == "BGR" and cfg.caffe_max_pool and not cfg.res5_halve


def test_config_keys_are_read_case_insensitively_and_in_the_detectron2_layout(tmp_path: Path) -> None:
    def upper(d):
        return {k.upper(): upper(v) for k, v in d.items()} if isinstance(d, dict) else d

    data = tiny_config_dict()
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(upper(data)))
    assert read_config(tmp_path) == config_from_dict(data)
    nested = {"model": {**data.pop("model"), **{k: data.pop(k) for k in ("resnets", "rpn", "roi_heads")}}, **data}
    assert config_from_dict(nested) == config_from_dict(tiny_config_dict())


def test_config_errors_name_the_key(tmp_path: Path) -> None:
    data = tiny_config_dict()
    del data["rpn"]["post_nms_topk_test"]
    with pytest.raises(DetectorInputError, match=r"missing key 'rpn\.post_nms_topk_test'"):
        config_from_dict(data)
    data = tiny_config_dict()
    data["resnets"]["depth"] = 34
    with pytest.raises(DetectorInputError, match=r"resnets\.depth must be one of \[50, 101, 152\], got 34"):
        config_from_dict(data)
    data = tiny_config_dict()
    data["rpn"]["in_features"] = ["p2", "p3"]
    with pytest.raises(DetectorInputError, match="the C4 detector"):
        config_from_dict(data)
    (tmp_path / "config.yaml").write_text("model: [unclosed")
    with pytest.raises(DetectorInputError, match="not a readable YAML file"):
        read_config(tmp_path)
