"""Exactly one callback moves the run's position on each hook, whatever the mix of checkpoints, preemption and
the elastic commit (:meth:`hvdkeras.runtime.position.RunPosition.claim_moves`); the others read it.

The hooks are called as Keras calls them, each callback in the list's order: the checkpoint callback first (the
trainer's), the elastic commit last (the elastic driver's extra). Each move of the position is counted.
"""
import pytest

from hvdkeras.callbacks.backup_and_restore import BackupAndRestore
from hvdkeras.callbacks.commit_position import CommitPositionCallback
from hvdkeras.runtime import checkpointing
from hvdkeras.runtime.position import RunPosition
from tests.unit.helpers import small_bn_model
from tests.unit.test_elastic import RecordingState

MOVES = ("begin_fit", "begin_epoch", "end_batch", "end_epoch")
EPOCHS, STEPS = 2, 3


def counting(position):
    """``position`` with each move counted: ``{move: calls}``."""
    counts = dict.fromkeys(MOVES, 0)
    for name in MOVES:
        real = getattr(position, name)

        def counted(*args, _real=real, _name=name):
            counts[_name] += 1
            return _real(*args)

        setattr(position, name, counted)
    return counts


def run_hooks(callbacks, model):
    for cb in callbacks:
        cb.set_model(model)
        cb.set_params({"epochs": EPOCHS, "steps": STEPS, "verbose": 0})
    for cb in callbacks:
        cb.on_train_begin()
    for epoch in range(EPOCHS):
        for cb in callbacks:
            cb.on_epoch_begin(epoch)
        for batch in range(STEPS):
            for cb in callbacks:
                cb.on_train_batch_end(batch, {})
        for cb in callbacks:
            cb.on_epoch_end(epoch, {"loss": 1.0})
    for cb in callbacks:
        cb.on_train_end()


@pytest.mark.parametrize("mix", ["checkpoints+preemption", "checkpoints", "commit", "checkpoints+preemption+commit",
                                 "checkpoints+commit"])
def test_one_mover_per_hook(hvd_single, tmp_path, mix):
    model = small_bn_model()
    position = RunPosition(checkpointing.CheckpointStore(str(tmp_path), keep=0))
    position.continue_at(0, 0)
    counts = counting(position)
    callbacks, state = [], RecordingState()
    if mix.startswith("checkpoints"):
        callbacks.append(BackupAndRestore(str(tmp_path), delete_checkpoint=False, keep=0,
                                          preemption="preemption" in mix, check_divergence=False,
                                          position=position))
    if mix.endswith("commit"):
        callbacks.append(CommitPositionCallback(state, every_batches=2, position=position))
    run_hooks(callbacks, model)
    counted_batches = "preemption" in mix or "commit" in mix  # a checkpoint callback alone without preemption
    assert counts == {"begin_fit": 1, "begin_epoch": EPOCHS,  # has no batch hooks: nothing counts them
                      "end_batch": EPOCHS * STEPS if counted_batches else 0, "end_epoch": EPOCHS}, counts
    assert (position.epoch, position.batch) == (EPOCHS, 0)
    if "commit" in mix:  # the state read what the mover moved, batch by batch
        assert state.commits == [(0, 2), (1, 0), (1, 2), (2, 0)], state.commits
