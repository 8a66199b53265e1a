"""Per-epoch checkpoints written by rank 0 only, atomically."""
from __future__ import annotations

import time
from typing import Optional

import hvdkeras
from hvdkeras import checkpointing, compat, distributed

keras = compat.keras


class EpochCheckpoint(keras.callbacks.Callback):
    """Saves model and optimizer state to ``directory/epoch-NNNN`` every ``every_epochs``.

    Rule enforced: exactly one writer (rank 0), so ranks never race on the same
    files; each checkpoint appears complete or not at all (see
    :mod:`hvdkeras.checkpointing`); the last epoch of ``fit`` is always saved. The
    epoch-end logs it stores in ``meta.json`` are the ones it receives: place it
    after :class:`MetricAverageCallback` to store global metrics. Resume with
    :func:`hvdkeras.checkpointing.resume` and ``fit(initial_epoch=info.epoch)``.
    """

    def __init__(self, directory: str, every_epochs: int = 1, keep: int = 3):
        super().__init__()
        if every_epochs < 1:
            raise ValueError(f"every_epochs must be >= 1; received: every_epochs={every_epochs}")
        self.store = checkpointing.CheckpointStore(directory, keep=keep)
        self.every_epochs = every_epochs
        self.last_saved: Optional[checkpointing.CheckpointInfo] = None
        self._trackable = None

    def on_train_begin(self, logs=None):
        if distributed.is_chief():
            self.store.remove_stale()
            self._trackable = checkpointing.trackable_for(self.model)

    def on_epoch_end(self, epoch, logs=None):
        completed = epoch + 1
        last = completed == (self.params or {}).get("epochs")
        if not distributed.is_chief() or not (completed % self.every_epochs == 0 or last):
            return
        meta = {
            "metrics": {k: float(v) for k, v in (logs or {}).items()},
            "global_step": int(self.model.optimizer.iterations.numpy()),
            "num_ranks": distributed.size(),
            "hvdkeras_version": hvdkeras.__version__,
            "saved_at": time.time(),
        }
        self.last_saved = self.store.save(completed, self._trackable, meta)
