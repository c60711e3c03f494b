"""Target and control probes (``train_target_control``): the chunking of the probes does not change them."""

from __future__ import annotations

import numpy as np
import pytest

from vlprobe.experiments.mlp_runs import train_target_control
from vlprobe.probes.ensemble import ensemble_memory, mlp_dims, models_per_chunk
from vlprobe.probes.splits import ItemSplit
from vlprobe.runs.option_groups import MLPOptions

SETTINGS = MLPOptions(depth=3, width=16, lr=1e-2, epochs=20, batch_size=16, device="cpu")


def test_scores_do_not_depend_on_the_memory_budget() -> None:
    """One probe per chunk (a budget below one model) against all 12 in one chunk: the same probes.

    Each probe draws its initialisation and batch order from its own seed, whatever shares its
    chunk, so only the rounding of the batched products differs (logits agree to about 1e-5, see
    tests/probes/test_mlp_probe.py). A prediction can differ only where a logit lies within that
    rounding of zero; the tolerance allows one such example per probe and side, and most probes
    must agree exactly.
    """
    rng = np.random.default_rng(3)
    items, per_item = 40, 4
    X = rng.normal(size=(2, items * per_item, 6)).astype(np.float32)  # 2 feature groups
    labels = np.stack([(X[g, :, g] + 0.5 * X[g, :, 2] > 0).astype(int) for g in range(2)])
    example_items = np.repeat(np.arange(items), per_item)
    split = ItemSplit(train=np.arange(30), test=np.arange(30, items), seed=0, strata={})
    seeds = [0, 1, 2]
    dims = mlp_dims(6, SETTINGS.depth, SETTINGS.width)
    big = 12 * ensemble_memory(1, dims, SETTINGS.batch_size)
    assert models_per_chunk(dims, SETTINGS.batch_size, "cpu", 1) == 1
    assert models_per_chunk(dims, SETTINGS.batch_size, "cpu", big) == 12  # 2 groups x target/control x 3 seeds

    alone, flips_alone = train_target_control(X, labels, example_items, split, seeds, SETTINGS, memory_budget=1)
    together, flips_together = train_target_control(X, labels, example_items, split, seeds, SETTINGS,
                                                    memory_budget=big)
    assert flips_alone == flips_together
    assert len(alone) == len(together) == 12 * 2
    exact = 0
    for a, b in zip(alone, together, strict=True):
        assert (a.group, a.task, a.seed, a.split, a.n) == (b.group, b.task, b.seed, b.split, b.n)
        np.testing.assert_array_equal(a.items, b.items)
        assert abs(a.accuracy - b.accuracy) <= 100 / a.n + 1e-9
        assert np.count_nonzero(a.item_accuracy != b.item_accuracy) <= 1
        exact += a.accuracy == b.accuracy
    assert exact >= 20
    # The probes learned the rule: the training target accuracy is well above chance.
    assert min(s.accuracy for s in together if s.task == "target" and s.split == "train") > 75


@pytest.mark.parametrize(("seconds", "text"), [
    (4.2, "4 s"), (89, "89 s"), (600, "10 min"), (5340, "89 min"), (5400, "1 h 30 min"), (17280, "4 h 48 min"),
    (3 * 86400 + 7200, "3 d 2 h"),
])
def test_durations_read_as_a_person_says_them(seconds: float, text: str) -> None:
    from vlprobe.experiments.mlp_estimate import format_duration

    assert format_duration(seconds) == text
