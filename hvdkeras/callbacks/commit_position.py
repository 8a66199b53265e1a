"""The elastic driver's callback: commits the run's state, its position included, as ``fit`` goes."""
from __future__ import annotations

from hvdkeras.runtime.compat import keras
from hvdkeras.runtime.elastic_state import RunState


class CommitPositionCallback(keras.callbacks.Callback):
    """The elastic driver's: commits the run's state every ``every_batches`` batches of an epoch and at epoch ends.

    It reads the position that the :class:`hvdkeras.callbacks.position_tracker.PositionTracker` first in the list
    moves; the commit copies it with the weights (:class:`hvdkeras.runtime.elastic_state.RunState`).

    Args:
        state: the run's elastic state.
        every_batches: how many batches between commits.
    """

    def __init__(self, state: RunState, every_batches: int):
        super().__init__()
        self.state = state
        self.every_batches = every_batches

    def on_train_begin(self, logs=None):
        """Refuses a position that no tracker moves, in one line."""
        self.state.position.require_tracker("CommitPositionCallback")

    def on_train_batch_end(self, batch, logs=None):
        """Commits every ``every_batches`` batches of the epoch (counted from its first, a resumed one's too)."""
        if self.state.position.batch % self.every_batches == 0:
            self.state.commit()

    def on_epoch_end(self, epoch, logs=None):
        """Commits the start of the next epoch."""
        self.state.commit()
