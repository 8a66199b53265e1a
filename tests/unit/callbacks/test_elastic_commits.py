"""Horovod's elastic Keras callbacks, hooks called directly on a recording state."""
import pytest

from hvdkeras.callbacks.elastic_commits import CommitStateCallback, UpdateBatchStateCallback, UpdateEpochStateCallback


class State:
    def __init__(self, epoch=0, batch=0):
        self.epoch, self.batch, self.commits = epoch, batch, []

    def commit(self):
        self.commits.append((self.epoch, self.batch))


def test_commit_every_n_batches_counted_from_each_fit_and_at_epoch_ends():
    state = State()
    cb = CommitStateCallback(state, batches_per_commit=2)
    cb.on_train_begin()
    for batch in range(3):
        cb.on_train_batch_end(batch)
    cb.on_epoch_end(0)
    assert len(state.commits) == 2  # after batch 1, and at the epoch's end
    cb.on_train_begin()  # a reset: counting starts again
    cb.on_train_batch_end(0)
    cb.on_train_batch_end(1)
    assert len(state.commits) == 3


def test_commit_needs_a_positive_number_of_batches():
    with pytest.raises(ValueError, match="batches_per_commit must be >= 1. Received: batches_per_commit=0"):
        CommitStateCallback(State(), batches_per_commit=0)


def test_the_batch_is_the_last_finished_one_and_the_first_epoch_after_a_reset_is_shortened():
    state = State(batch=3)
    cb = UpdateBatchStateCallback(state)
    cb.params = {"steps": 10}
    cb.on_train_begin()
    cb.on_epoch_begin(0)
    assert cb.params["steps"] == 7  # 3 batches were done before the reset
    cb.on_train_batch_end(4)
    assert state.batch == 4
    cb.on_epoch_end(0)
    assert state.batch == 0
    cb.on_epoch_begin(1)
    assert cb.params["steps"] == 10


def test_the_epoch_counts_over_resets():
    state = State(epoch=2)
    cb = UpdateEpochStateCallback(state)
    cb.on_train_begin()  # fit(epochs=total - state.epoch) numbers its epochs from 0
    cb.on_epoch_end(0)
    assert state.epoch == 3
    cb.on_epoch_end(1)
    assert state.epoch == 4
