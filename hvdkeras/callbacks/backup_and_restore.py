"""Resume after a crash or preemption, on every rank, from rank 0's latest backup."""
from __future__ import annotations

import shutil
import time
from typing import Optional

import hvdkeras
from hvdkeras import checkpointing, compat, distributed

keras = compat.keras


class BackupAndRestore(keras.callbacks.Callback):
    """Keras' ``BackupAndRestore`` made rank-correct; same arguments, plus ``keep`` and ``every_epochs``.

    Rule enforced: when training starts, rank 0 finds the latest backup in
    ``backup_dir`` (model weights, optimizer slots and step counter), loads it and
    broadcasts it, and every rank continues ``fit`` at the epoch after it, so the
    learning-rate callbacks (which compute the rate from the epoch) pick up the
    schedule where it was. If rank 0 cannot load it, every rank stops with the same
    :class:`~hvdkeras.errors.CheckpointError` instead of waiting for rank 0.
    Only rank 0 writes: after every ``every_epochs`` epochs (and the last), an
    atomic ``epoch-NNNN`` directory (see :mod:`hvdkeras.checkpointing`), keeping the
    newest ``keep``. With ``delete_checkpoint=True`` (Keras' default) the backups
    are removed when ``fit`` ends normally, as in Keras.

    :meth:`restore` can also be called before ``fit`` (collectively) to learn the
    epoch to start at, e.g. to build an input pipeline positioned there.
    """

    def __init__(self, backup_dir: str, save_freq="epoch", delete_checkpoint: bool = True,
                 save_before_preemption: bool = False, keep: int = 1, every_epochs: int = 1):
        super().__init__()
        if save_freq != "epoch":
            raise ValueError(
                "BackupAndRestore saves at epoch ends only: mid-epoch positions cannot be restored exactly from a"
                f" tf.data pipeline here. Received: save_freq={save_freq!r} (use 'epoch')"
            )
        if save_before_preemption:
            raise ValueError("save_before_preemption needs a TPU/MultiWorkerMirroredStrategy preemption handler,"
                             " which Horovod jobs do not have. Received: save_before_preemption=True")
        if every_epochs < 1:
            raise ValueError(f"every_epochs must be >= 1; received: every_epochs={every_epochs}")
        self.backup_dir = backup_dir
        self.delete_checkpoint = delete_checkpoint
        self.every_epochs = every_epochs
        self.store = checkpointing.CheckpointStore(backup_dir, keep=keep)
        self.restored: Optional[checkpointing.CheckpointInfo] = None
        self.last_saved: Optional[checkpointing.CheckpointInfo] = None
        self._start_epoch: Optional[int] = None
        self._trackable = None

    def restore(self, model=None) -> int:
        """Collective: loads the latest backup on rank 0, broadcasts it; returns the epochs it holds (0: none)."""
        model = model or self.model
        optimizer = model.optimizer
        if not compat.optimizer_built(optimizer):
            compat.build_optimizer(optimizer, model.trainable_variables)
        self.restored = checkpointing.resume(self.store, checkpointing.trackable_for(model))
        if self.restored is not None:
            distributed.broadcast_variables(model.variables)
            distributed.broadcast_variables(compat.optimizer_variables(optimizer))
        self._start_epoch = self.restored.epoch if self.restored else 0
        return self._start_epoch

    def continue_at(self, epoch: int) -> None:
        """The next ``fit`` starts at ``epoch`` with the weights it has, loading nothing (elastic restarts)."""
        self._start_epoch = epoch

    def on_train_begin(self, logs=None):
        if self._start_epoch is None:
            self.restore(self.model)
        compat.start_fit_at_epoch(self.model, self._start_epoch)
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

    def on_train_end(self, logs=None):
        compat.clear_fit_start(self.model)
        self._start_epoch = None  # a later fit looks again
        if self.delete_checkpoint and distributed.is_chief():
            shutil.rmtree(self.backup_dir, ignore_errors=True)
