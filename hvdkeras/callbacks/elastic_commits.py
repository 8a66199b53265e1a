"""Horovod's elastic Keras callbacks: keep an elastic state's position and commit it during ``model.fit``.

For scripts written against ``hvd.elastic`` (``horovod.tensorflow.keras.elastic``)::

    state = hvd.elastic.KerasState(model, batch=0, epoch=0)
    callbacks = [hvd.elastic.CommitStateCallback(state), hvd.elastic.UpdateBatchStateCallback(state),
                 hvd.elastic.UpdateEpochStateCallback(state)]

    @hvd.elastic.run
    def train(state):
        state.model.fit(data, steps_per_epoch=n, epochs=epochs - state.epoch, callbacks=callbacks)

Same arguments and meaning as Horovod's. ``state`` is any object with ``commit()``
and the attributes the callback updates (:class:`hvdkeras.elastic.KerasState`).
"""
from __future__ import annotations

from hvdkeras.runtime.compat import keras


class CommitStateCallback(keras.callbacks.Callback):
    """Commits ``state`` every ``batches_per_commit`` batches and at the end of every epoch.

    The count restarts at every ``fit`` (every reset), so all ranks commit at the same batches.
    """

    def __init__(self, state, batches_per_commit: int = 1):
        super().__init__()
        if int(batches_per_commit) < 1:
            raise ValueError(f"batches_per_commit must be >= 1. Received: batches_per_commit={batches_per_commit}")
        self.state = state
        self.batches_per_commit = int(batches_per_commit)
        self.batches_remaining = self.batches_per_commit

    def on_train_begin(self, logs=None):
        """Restarts the batch count, so all ranks commit at the same batches."""
        self.batches_remaining = self.batches_per_commit

    def on_train_batch_end(self, batch, logs=None):
        """Commits the state every ``batches_per_commit`` batches."""
        self.batches_remaining -= 1
        if self.batches_remaining == 0:
            self.state.commit()
            self.batches_remaining = self.batches_per_commit

    def on_epoch_end(self, epoch, logs=None):
        """Commits the state."""
        self.state.commit()


class UpdateBatchStateCallback(keras.callbacks.Callback):
    """Keeps ``state.batch`` at the index of the last finished batch of the epoch (0 again at each epoch's end).

    With a known number of steps, the first epoch after a reset is shortened by the
    batches already done (``state.batch``), as Horovod's does through ``params["steps"]``.
    """

    def __init__(self, state):
        super().__init__()
        self.state = state
        self.steps_per_epoch = None

    def on_train_begin(self, logs=None):
        """Forgets the steps per epoch of the previous ``fit``."""
        self.steps_per_epoch = None

    def on_epoch_begin(self, epoch, logs=None):
        """Shortens the epoch by the batches already done (``state.batch``) when its steps are known."""
        if self.params and self.params.get("steps"):
            if self.steps_per_epoch is None:
                self.steps_per_epoch = self.params.get("steps")
            self.params["steps"] = self.steps_per_epoch - self.state.batch

    def on_train_batch_end(self, batch, logs=None):
        """Records the finished batch in ``state.batch``."""
        self.state.batch = batch

    def on_epoch_end(self, epoch, logs=None):
        """Sets ``state.batch`` back to 0."""
        self.state.batch = 0


class UpdateEpochStateCallback(keras.callbacks.Callback):
    """Keeps ``state.epoch`` at the number of epochs finished over all resets.

    Keras numbers the epochs of every ``fit`` from 0 (Horovod's recipe calls
    ``fit(epochs=epochs - state.epoch)``), so the count offsets by ``state.epoch`` at the
    start of each ``fit``.
    """

    def __init__(self, state):
        super().__init__()
        self.state = state
        self.initial_epoch = self.state.epoch

    def on_train_begin(self, logs=None):
        """Notes the epochs already finished (``state.epoch``) as this ``fit``'s offset."""
        self.initial_epoch = self.state.epoch

    def on_epoch_end(self, epoch, logs=None):
        """Sets ``state.epoch`` to the number of epochs finished over all resets."""
        self.state.epoch = self.initial_epoch + epoch + 1
