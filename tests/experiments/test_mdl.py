"""Online code length (mdl) on planted caches: the planted layer compresses its labels, noise
layers and the control task do not."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from vlprobe.experiments.mdl import MDLConfig, control_items, run_mdl
from vlprobe.fixtures.caches import planted_cache
from vlprobe.validation import InputError

SIGNAL = 1


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return planted_cache(tmp_path_factory.mktemp("mdl") / "planted.h5", n_items=40, n_variants=3, n_layers=3,
                         signal_layer=SIGNAL, hidden=4)


def _values(rows: list[dict], metric: str) -> dict[tuple, float]:
    return {(r["layer"], r["task"], r["seed"]): r["value"] for r in rows if r["metric"] == metric}


# floors measured here (40 items): variant 2.4-2.6 at the planted layer; text-score (160 examples
# only) 1.27-1.44 there, every other code 0.89-0.98
@pytest.mark.parametrize(("task", "floor", "ceiling"), [("variant", 2.0, 1.3), ("text-score", 1.15, 1.05)])
def test_the_planted_layer_has_the_short_code(planted: Path, tmp_path: Path, task: str, floor: float,
                                              ceiling: float) -> None:
    csv_path, manifest_path, rows = run_mdl(MDLConfig(cache=planted, out=tmp_path, labels=task, seeds=2,
                                                      progress=False))
    comp = _values(rows, "compression")
    online, uniform = _values(rows, "online_code"), _values(rows, "uniform_code")
    for seed in (0, 1):
        # planted: the label is a function of feature 0's signs at layer 1 (an XOR the MLP reads)
        assert comp[(SIGNAL, "target", seed)] > floor
        assert comp[(SIGNAL, "control", seed)] < ceiling  # half the items flipped: nothing to learn
        for noise in (0, 2):
            assert comp[(noise, "target", seed)] < ceiling
        assert online[(SIGNAL, "target", seed)] < uniform[(SIGNAL, "target", seed)]
    n = {r["n"] for r in rows}
    assert n == {40 * 16} if task == "variant" else n == {40 * 4}
    assert uniform[(0, "target", 0)] == float(next(iter(n)))  # one bit per binary label
    manifest = json.loads(manifest_path.read_text())["runs"][csv_path.stem]
    assert manifest["blocks"]["ends_in_items"] == [1, 2, 3, 5, 10, 20, 40]
    assert manifest["units"]["compression"].startswith("ratio")
    assert all(i.startswith("winoground/") for i in manifest["control_flipped_items"]["0"])  # item ids
    assert len(manifest["control_flipped_items"]["0"]) == 20
    assert csv_path.with_name(f"{csv_path.stem}.summary.csv").is_file()
    # whose labels is a setting with a column of its own (the tidy "task" is target/control)
    assert manifest["setting_columns"]["labels"] == "labels"
    with open(csv_path, encoding="utf-8", newline="") as fh:
        lines = list(csv.DictReader(fh))
    assert {r["labels"] for r in lines} == {task} and {r["kind"] for r in lines} == {"embed", "self"}


def test_logistic_probe_reads_a_linear_label_but_not_the_xor(planted: Path, tmp_path: Path) -> None:
    _, _, rows = run_mdl(MDLConfig(cache=planted, out=tmp_path, labels="variant", probe="logistic", seeds=1,
                                   layers=str(SIGNAL), progress=False))
    # the variant label is an XOR of sides: a linear probe on the concatenated states cannot read it
    assert _values(rows, "compression")[(SIGNAL, "target", 0)] < 1.3


def test_control_items_are_seeded_halves() -> None:
    a = control_items(10, 0)
    assert len(a) == 5 and list(a) == sorted(a)
    assert list(control_items(10, 0)) == list(a)
    assert list(control_items(10, 1)) != list(a)


def test_bad_input(planted: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="labels: unknown labels 'varaint'; did you mean 'variant'"):
        run_mdl(MDLConfig(cache=planted, out=tmp_path, labels="varaint"))
    with pytest.raises(InputError, match="probe: unknown probe"):
        run_mdl(MDLConfig(cache=planted, out=tmp_path, probe="svm"))
