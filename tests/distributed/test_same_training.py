"""Data-parallel training is the same training: 2 ranks x 32 against 1 rank x 64, on both stacks.

Two jobs side by side (``scripts/same_training.py`` on one rank and on two) train the trainer's
default digits job (dropout off, 20 steps) and a user's ``model.fit`` with hvdkeras'
optimizer and callbacks on the same global batches. The weights after 20 steps agree
within float32 rounding, and they have moved far beyond that tolerance. The two-rank
job also trains under mixed precision with fp16 compression while one rank's batch
overflows: both ranks skip that step alike. And every path a Keras user applies gradients
by (``scripts/training_paths.py``: a custom ``train_step`` with ``apply_gradients``,
``apply`` or ``minimize``, ``DistributedGradientTape`` in a custom loop, with gradient
accumulation and loss scaling) gives two ranks one process's weights.
"""
import json
import os

import numpy as np
import pytest

from tests.harness.ranks import SCRIPTS, finish, horovodrun, start_ranks

SCRIPT = os.path.join(SCRIPTS, "same_training.py")
# float32 sums in another order (one batch of 64 against two means of 32 averaged), over 20 steps
RTOL, ATOL = 1e-4, 1e-5


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The script on 1 rank and on 2, side by side: the one-rank job's single process (its imports and tracing run on
    one core) uses the core the two ranks leave between their steps, instead of leaving the other core idle after
    them (about a third of the pair's time on 2 cores). Nothing here depends on timing: the results are the weights."""
    out = tmp_path_factory.mktemp("same_training")
    one = start_ranks([SCRIPT, str(out), str(out / "work1")], np=1)
    try:
        horovodrun([SCRIPT, str(out), str(out / "work2")], np=2, timeout=300)
    finally:
        output = finish(one, timeout=300)
    assert one.returncode == 0, output[-3000:]
    loaded = {}
    for np_ in (1, 2):
        with np.load(out / f"{np_}.npz") as z:
            loaded[np_] = {k: z[k] for k in z.files}
    reports = [json.loads((out / f"2-rank{r}.json").read_text()) for r in (0, 1)]
    return loaded, reports


def arrays(saved, prefix):
    keys = sorted((k for k in saved if k.startswith(prefix) and k[len(prefix):].isdigit()),
                  key=lambda k: int(k[len(prefix):]))
    assert keys
    return [saved[k] for k in keys]


@pytest.mark.parametrize("path", ["trainer", "fit"])
def test_two_ranks_of_32_train_the_weights_one_rank_of_64_trains(runs, path):
    loaded, _ = runs
    one, two = arrays(loaded[1], f"{path}_"), arrays(loaded[2], f"{path}_")
    start = arrays(loaded[1], f"{path}_initial_")
    for a, b in zip(arrays(loaded[1], f"{path}_initial_"), arrays(loaded[2], f"{path}_initial_")):
        assert np.array_equal(a, b)  # the same start
    moved = max(float(np.max(np.abs(a - s))) for a, s in zip(one, start))
    assert moved > 100 * ATOL  # training changed the weights far beyond the tolerance
    for a, b in zip(one, two):
        np.testing.assert_allclose(b, a, rtol=RTOL, atol=ATOL)


def test_an_overflow_on_one_rank_skips_the_step_on_both_under_mixed_precision_and_fp16(runs):
    _, (r0, r1) = runs
    assert r0["digest"] == r1["digest"] and r0["finite"] and r1["finite"]
    assert r0["scales"] == r1["scales"]
    # the scale holds until step 3, where rank 1's batch overflowed, then halves on rank 0 as well: the
    # allreduced gradient was not finite on both ranks, so both skipped that step
    assert r0["scales"][:3] == [r0["initial_scale"]] * 3 and r0["scales"][3] == r0["initial_scale"] / 2


PATHS = ["apply_gradients", "apply_gradients_accumulated", "apply_gradients_loss_scale", "tape", "tape_eager",
         "tape_loss_scale", "tape_and_optimizer", "tape_and_accumulating_optimizer", "apply", "apply_accumulated",
         "apply_loss_scale", "minimize", "minimize_accumulated", "minimize_loss_scale"]


@pytest.mark.parametrize("case", PATHS)
def test_every_path_of_applying_gradients_averages_once(runs, case):
    """Two ranks hold the same weights, equal to one process on the global batch (a rank training alone, or
    gradients averaged twice under op=Sum, would not)."""
    loaded, (r0, r1) = runs
    if f"path_{case}_0" not in loaded[1]:
        pytest.skip(f"{case}: not a path on this Keras version (apply*: Keras 3; minimize*: Keras 2)")
    assert r0["paths"][case] == r1["paths"][case]
    one, two = arrays(loaded[1], f"path_{case}_"), arrays(loaded[2], f"path_{case}_")
    start = arrays(loaded[1], "path_initial_")
    assert max(float(np.max(np.abs(a - s))) for a, s in zip(one, start)) > 100 * ATOL  # it trained
    for a, b in zip(one, two):
        np.testing.assert_allclose(b, a, rtol=RTOL, atol=ATOL)
