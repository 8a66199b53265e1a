"""hvdkeras.runtime.position: one object for where a run is, where the next fit starts, and what it resumes from."""
import numpy as np
import pytest

from hvdkeras.runtime import checkpointing
from hvdkeras.runtime.position import RunPosition
from tests.unit.helpers import small_bn_model, xy


def test_a_fit_starts_where_it_was_decided_and_counts_its_batches_from_there():
    position = RunPosition()
    with pytest.raises(RuntimeError, match="before resume"):
        position.begin_fit()
    assert position.start == (0, 0) and not position.decided
    position.continue_at(2, 3)  # the rest of epoch 3, from its fourth batch
    assert position.begin_fit() == (2, 3) and (position.epoch, position.batch) == (2, 3)
    position.begin_epoch(2)  # the fit's first epoch: the offset stays
    position.end_batch(0)
    position.end_batch(1)
    assert (position.epoch, position.batch) == (2, 5)
    position.end_epoch(2)
    assert (position.epoch, position.batch) == (3, 0)
    position.begin_epoch(3)
    position.end_batch(0)  # the next epoch counts from its own first batch
    assert (position.epoch, position.batch) == (3, 1)
    position.end_fit()
    assert not position.decided and position.start == (0, 0)


def test_the_last_step_that_returned_says_which_batches_the_variables_hold_between_two_batches_only():
    # The soak's finding: a callback's collective (the NaN check) before the callbacks count a batch can fail after
    # the batch's step ran; the steps that returned, not the batches counted, say where the variables are.
    position = RunPosition()
    position.continue_at(2, 3)  # a resumed partial epoch of 10 batches: this fit runs its last 7
    position.begin_fit()
    position.begin_epoch(2)
    assert position.last_step(7) is None  # no step of this fit yet: nothing beyond the checkpoint it resumed
    position.step_ran()
    position.end_batch(0)
    position.step_ran()  # the second step ran; its batch was not counted
    assert position.last_step(7) == (2, 5) and (position.epoch, position.batch) == (2, 4)
    for _ in range(5):
        position.step_ran()
    assert position.last_step(7) is None  # the epoch's last step ran: its end may be under way
    position.end_epoch(2)
    position.begin_epoch(3)
    assert position.last_step(10) is None
    position.step_ran()
    assert position.last_step(10) == (3, 1) and position.last_step(None) == (3, 1)


def test_without_a_store_a_run_starts_fresh_and_names_no_checkpoint(hvd_single):
    position = RunPosition()
    assert position.resume(small_bn_model()) == (0, 0) and position.decided
    assert position.resume_on_chief(small_bn_model()) == (0, 0)
    assert position.existing() is None and position.resume_point() is None


def test_restore_loads_the_latest_checkpoint_and_the_last_save_is_what_a_rerun_resumes_from(hvd_single, tmp_path):
    trained = small_bn_model(seed=1)
    trained.fit(*xy(16, 0), epochs=1, verbose=0)
    store = checkpointing.CheckpointStore(str(tmp_path), keep=3)
    first = store.save(1, checkpointing.trackable_for(trained), {}, batch=4)

    position = RunPosition(store)
    fresh = small_bn_model(seed=2)
    assert position.resume(fresh) == (1, 4) and position.restored.path == first.path
    assert all(np.array_equal(a.numpy(), b.numpy()) for a, b in zip(fresh.variables, trained.variables))
    assert position.existing().path == first.path
    assert position.resume_point() == first.describe()

    second = store.save(2, checkpointing.trackable_for(trained), {})
    position.saved(second)
    assert position.resume_point() == second.describe()  # the last save wins over what was restored

    elastic = RunPosition(store)
    assert elastic.resume_on_chief(small_bn_model(seed=3)) == (2, 0)  # rank 0 alone, no collective
    assert elastic.restored.path == second.path and not elastic.decided
