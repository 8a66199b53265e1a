"""One callback moves the run's position, ``PositionTracker``, whatever the mix of checkpoints, preemption and the
elastic commit; the others read it.

The hooks are called as Keras calls them, each callback in the list's order: the tracker first (the trainer's),
the checkpoint callback after it, the elastic commit last (the elastic driver's extra). Each move is counted.
"""
import pytest

from hvdkeras.callbacks.backup_and_restore import BackupAndRestore
from hvdkeras.callbacks.commit_position import CommitPositionCallback
from hvdkeras.callbacks.position_tracker import PositionTracker
from hvdkeras.runtime import checkpointing
from hvdkeras.runtime.position import RunPosition
from tests.unit.helpers import small_bn_model

MOVES = ("begin_fit", "begin_epoch", "end_batch", "end_epoch", "end_fit")
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


class Commits:
    """Stands in for the elastic RunState: what each commit saw of the position."""

    def __init__(self, position):
        self.position, self.commits = position, []

    def commit(self):
        self.commits.append(self.position.here)


def run_hooks(callbacks, model, epochs=EPOCHS, steps=STEPS, first=0):
    for cb in callbacks:
        cb.set_model(model)
        cb.set_params({"epochs": epochs, "steps": steps, "verbose": 0})
    for cb in callbacks:
        cb.on_train_begin()
    for epoch in range(first, epochs):
        for cb in callbacks:
            cb.on_epoch_begin(epoch)
        for batch in range(steps):
            for cb in callbacks:
                cb.on_train_batch_end(batch, {})
        for cb in callbacks:
            cb.on_epoch_end(epoch, {"loss": 1.0})
    for cb in callbacks:
        cb.on_train_end()


@pytest.mark.parametrize("mix", ["tracker+checkpoints+preemption", "tracker+checkpoints", "tracker+commit",
                                 "tracker+checkpoints+preemption+commit", "tracker", "checkpoints+preemption",
                                 "checkpoints"])
def test_one_tracker_moves_the_position_and_the_others_read_it(hvd_single, tmp_path, mix):
    model = small_bn_model()
    tracked = mix.startswith("tracker")
    parts = mix.split("+")
    shared = RunPosition(checkpointing.CheckpointStore(str(tmp_path), keep=0))
    callbacks = [PositionTracker(shared)] if tracked else []
    if "checkpoints" in parts:  # shares the tracked position, or (alone) makes and moves its own
        callbacks.append(BackupAndRestore(str(tmp_path), delete_checkpoint=False, keep=0,
                                          preemption="preemption" in parts, check_divergence=False,
                                          position=shared if tracked else None))
    position = shared if tracked else callbacks[0].position
    counts = counting(position)
    state = Commits(position)
    if "commit" in parts:
        callbacks.append(CommitPositionCallback(state, every_batches=2))
    if tracked:
        position.continue_at(0, 0)
    run_hooks(callbacks, model)
    counted_batches = tracked or "preemption" in parts  # a checkpoint callback alone without preemption has no
    assert counts == {"begin_fit": 1, "begin_epoch": EPOCHS,  # batch hooks: nothing counts them
                      "end_batch": EPOCHS * STEPS if counted_batches else 0, "end_epoch": EPOCHS, "end_fit": 1}
    assert position.here == (EPOCHS, 0) and not position.decided  # a later fit decides its start again
    if "commit" in parts:  # the state read what the tracker moved, batch by batch
        assert state.commits == [(0, 2), (1, 0), (1, 2), (2, 0)], state.commits


@pytest.mark.parametrize("offset, batches, expected", [
    (0, 5, [(1, 2), (1, 4), (2, 0)]),
    (3, 5, [(1, 4), (1, 6), (1, 8), (2, 0)]),  # a resumed epoch: its batches count from the offset
])
def test_the_elastic_commit_comes_every_n_batches_of_the_epoch_and_at_its_end(offset, batches, expected):
    position = RunPosition()
    position.continue_at(1, offset)
    state = Commits(position)
    tracker, commit = PositionTracker(position, count_batches=True), CommitPositionCallback(state, every_batches=2)
    tracker.position.begin_fit()  # as the tracker's on_train_begin does, without a model
    commit.on_train_begin()
    for hook, args in [("on_epoch_begin", (1,))] + [("on_train_batch_end", (b,)) for b in range(batches)] + [
            ("on_epoch_end", (1,))]:
        for cb in (tracker, commit):
            getattr(cb, hook)(*args)
    assert state.commits == expected and position.here == (2, 0)
    tracker.on_epoch_begin(2)
    tracker.on_train_batch_end(0)
    assert position.here == (2, 1)  # the offset was the first epoch's


@pytest.mark.parametrize("make", [
    lambda p, d: BackupAndRestore(d, position=p, check_divergence=False),
    lambda p, d: CommitPositionCallback(Commits(p), every_batches=2),
], ids=["BackupAndRestore", "CommitPositionCallback"])
def test_a_shared_position_without_a_tracker_is_refused_in_one_line(hvd_single, tmp_path, make):
    position = RunPosition(checkpointing.CheckpointStore(str(tmp_path), keep=0))
    position.continue_at(0, 0)
    with pytest.raises(ValueError, match=r"put hvdkeras.callbacks.PositionTracker\(position\) first in fit's"
                                         r" callbacks. Received: a position whose fit has not begun"):
        run_hooks([make(position, str(tmp_path))], small_bn_model())
