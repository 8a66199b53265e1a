"""BackupAndRestore in one process: what it writes, how often, and how fit continues from it."""
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from hvdkeras import callbacks as hc
from hvdkeras.compat import keras
from tests.unit.helpers import attach, epoch_recorder, model_and_data, small_bn_model, xy


def test_backup_writes_atomically_and_keeps_the_newest(hvd_single, tmp_path):
    model = small_bn_model()
    model.fit(*xy(8, 0), epochs=1, verbose=0)
    cb = attach(hc.BackupAndRestore(str(tmp_path), keep=2), model, epochs=4)
    cb.on_train_begin()
    for epoch in range(4):
        cb.on_epoch_end(epoch, {"loss": 1.0 / (epoch + 1)})
    assert sorted(os.listdir(tmp_path)) == ["epoch-0003", "epoch-0004"]
    meta = json.loads((tmp_path / "epoch-0004" / "meta.json").read_text())
    assert meta["epoch"] == 4 and meta["metrics"]["loss"] == 0.25 and meta["num_ranks"] == 1


def test_every_n_epochs_and_always_the_last(hvd_single, tmp_path):
    model = small_bn_model()
    cb = attach(hc.BackupAndRestore(str(tmp_path), every_epochs=2, keep=0), model, epochs=5)
    cb.on_train_begin()
    for epoch in range(5):
        cb.on_epoch_end(epoch, {})
    assert sorted(os.listdir(tmp_path)) == ["epoch-0002", "epoch-0004", "epoch-0005"]


def test_backup_and_restore_continues_fit_at_the_saved_epoch(hvd_single, tmp_path):
    model, x, y = model_and_data()
    seen = epoch_recorder()
    model.fit(x, y, epochs=2, batch_size=8, verbose=0,
              callbacks=[hc.BackupAndRestore(str(tmp_path), delete_checkpoint=False), seen])
    assert seen.epochs == [0, 1] and sorted(os.listdir(tmp_path)) == ["epoch-0002"]
    saved = [v.numpy() for v in model.variables]
    iterations = int(model.optimizer.iterations.numpy())

    fresh, _, _ = model_and_data(lr=0.3)
    fresh.layers[0].kernel.assign(tf.zeros_like(fresh.layers[0].kernel))
    seen = epoch_recorder()

    class AtStart(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self.weights = [v.numpy() for v in self.model.variables]
            self.iterations = int(self.model.optimizer.iterations.numpy())

    at_start = AtStart()
    fresh.fit(x, y, epochs=4, batch_size=8, verbose=0,
              callbacks=[hc.BackupAndRestore(str(tmp_path)), at_start, seen])
    assert seen.epochs == [2, 3]
    assert all(np.array_equal(a, b) for a, b in zip(saved, at_start.weights))
    assert at_start.iterations == iterations
    assert not tmp_path.exists()  # delete_checkpoint=True after a finished fit

    again = epoch_recorder()  # no backup left: a new fit starts at 0
    fresh.fit(x, y, epochs=1, batch_size=8, verbose=0, callbacks=[hc.BackupAndRestore(str(tmp_path)), again])
    assert again.epochs == [0]


def test_backup_and_restore_rejects_what_it_cannot_do():
    with pytest.raises(ValueError, match=r"Received: save_freq=100"):
        hc.BackupAndRestore("/tmp/x", save_freq=100)
    with pytest.raises(ValueError, match="save_before_preemption=True"):
        hc.BackupAndRestore("/tmp/x", save_before_preemption=True)
    with pytest.raises(ValueError, match="every_epochs must be >= 1; received: every_epochs=0"):
        hc.BackupAndRestore("/tmp/x", every_epochs=0)
