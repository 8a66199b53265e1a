"""``PositionTracker``: the one callback that moves a run's position as ``fit`` goes."""
from __future__ import annotations

from hvdkeras.runtime import compat
from hvdkeras.runtime.compat import keras
from hvdkeras.runtime.position import RunPosition


class PositionTracker(keras.callbacks.Callback):
    """Moves a :class:`hvdkeras.runtime.position.RunPosition` through a ``fit``: its start, each epoch, each batch
    and its end. Every other callback that shares the position only reads it, so put this one first.

    When ``fit`` begins, a position whose start is not decided yet resumes
    (:meth:`~hvdkeras.runtime.position.RunPosition.resume`: the latest intact checkpoint of its store, on every
    rank) and ``fit`` continues at its epoch. A :class:`hvdkeras.callbacks.BackupAndRestore` that makes its own
    position moves it with a tracker of its own; the trainer puts one first in every ``fit`` it runs.

    Args:
        position: the run's position.
        count_batches: move it after every batch too, and count the training steps that returned
            (:meth:`~hvdkeras.runtime.position.RunPosition.last_step`); ``False`` moves it at epoch ends only,
            and Keras 2 can skip its per-batch hooks.
    """

    _supports_tf_logs = True  # reads no logs: Keras need not turn them into numbers for it

    def __init__(self, position: RunPosition, count_batches: bool = True):
        super().__init__()
        self.position = position
        self.count_batches = count_batches

    def _implements_train_batch_hooks(self):
        return self.count_batches

    def on_train_begin(self, logs=None):
        """Resumes unless the start is decided, then begins the ``fit`` there."""
        if not self.position.decided:
            self.position.resume(self.model)
        epoch, _ = self.position.begin_fit()
        compat.start_fit_at_epoch(self.model, epoch)
        if self.count_batches:
            compat.count_steps(self.model, self.position.step_ran)

    def on_epoch_begin(self, epoch, logs=None):
        """The position is at epoch index ``epoch``."""
        self.position.begin_epoch(epoch)

    def on_train_batch_end(self, batch, logs=None):
        """One more batch of the epoch is done."""
        if self.count_batches:
            self.position.end_batch(batch)

    def on_epoch_end(self, epoch, logs=None):
        """The position is the start of the next epoch."""
        self.position.end_epoch(epoch)

    def on_train_end(self, logs=None):
        """The ``fit`` ended: a later one decides its start again and starts where its arguments say."""
        compat.uncount_steps(self.model)
        compat.clear_fit_start(self.model)
        self.position.end_fit()
