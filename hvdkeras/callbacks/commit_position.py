"""The elastic driver's callback: moves the run's position and commits it into the elastic state."""
from __future__ import annotations

from hvdkeras.runtime.compat import keras
from hvdkeras.runtime.elastic_state import KerasState
from hvdkeras.runtime.position import RunPosition


class CommitPositionCallback(keras.callbacks.Callback):
    """The elastic driver's: copies the run's position into the elastic state and commits it every
    ``every_batches`` batches and at epoch ends; it moves the position itself unless a callback before it moves
    it after every batch (the checkpoint callback with preemption).

    Args:
        state: the elastic state whose ``epoch`` and ``batch`` are committed.
        every_batches: how many batches between commits.
        position: the run's position (:class:`hvdkeras.runtime.position.RunPosition`); its start must be decided
            (``continue_at``) before ``fit``.
    """

    def __init__(self, state: KerasState, every_batches: int, position: RunPosition):
        super().__init__()
        self.state = state
        self.every_batches = every_batches
        self.position = position

    def on_train_begin(self, logs=None):
        """Starts counting at the position decided for this ``fit``: it moves the position unless a callback
        before it that counts every batch does (:meth:`hvdkeras.runtime.position.RunPosition.claim_moves`)."""
        self.position.claim_moves(self, counts_batches=True)

    def on_epoch_begin(self, epoch, logs=None):
        """Moves (or reads) the position at epoch index ``epoch``; the state follows."""
        if self.position.moved_by(self):
            self.position.begin_epoch(epoch)
        self.state.epoch = self.position.epoch

    def on_train_batch_end(self, batch, logs=None):
        """Records the batches done of this epoch; commits every ``every_batches``."""
        if self.position.moved_by(self):
            self.position.end_batch(batch)
        self.state.batch = self.position.batch
        if self.state.batch % self.every_batches == 0:
            self.state.commit()

    def on_epoch_end(self, epoch, logs=None):
        """Commits the start of the next epoch."""
        if self.position.moved_by(self):
            self.position.end_epoch(epoch)
        self.state.epoch, self.state.batch = self.position.epoch, self.position.batch
        self.state.commit()
