"""hvdkeras.callbacks single-rank logic, hooks called directly or through a one-process fit."""
import os

import numpy as np
import pytest
import tensorflow as tf

from hvdkeras import callbacks as hc
from hvdkeras import compat
from hvdkeras.callbacks.model_checkpoint import _atomic_save

keras = tf.keras


def model_and_data(lr=0.1, momentum=0.9, n=32):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])
    model.compile(keras.optimizers.SGD(lr, momentum=momentum), "sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    rng = np.random.RandomState(0)
    return model, rng.randn(n, 4).astype("float32"), rng.randint(0, 3, n).astype("int32")


class SeenEpochs(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.epochs = []

    def on_epoch_begin(self, epoch, logs=None):
        self.epochs.append(epoch)


def test_momentum_correction_rescales_velocity_by_the_rate_ratio(hvd_single):
    model, x, y = model_and_data(lr=0.2)
    model.fit(x, y, epochs=1, batch_size=8, verbose=0)  # velocity slots now hold something
    cb = hc.LearningRateScheduleCallback(0.2, multiplier=0.25, start_epoch=1)
    cb.set_model(model)
    cb.set_params({"epochs": 3, "steps": 4})
    cb.on_train_begin()
    before = [v.numpy().copy() for v in model.optimizer.momentums]
    cb.on_epoch_begin(1)  # lr 0.2 -> 0.05
    assert float(model.optimizer.learning_rate.numpy()) == pytest.approx(0.05)
    for a, v in zip(before, model.optimizer.momentums):
        np.testing.assert_allclose(v.numpy(), a * 0.25, rtol=1e-6)
    cb.on_epoch_begin(2)  # no change: no rescale
    for a, v in zip(before, model.optimizer.momentums):
        np.testing.assert_allclose(v.numpy(), a * 0.25, rtol=1e-6)


def test_momentum_correction_off_and_for_adam(hvd_single):
    model, x, y = model_and_data()
    model.fit(x, y, epochs=1, batch_size=8, verbose=0)
    cb = hc.LearningRateScheduleCallback(0.1, 0.5, momentum_correction=False)
    cb.set_model(model)
    cb.set_params({"epochs": 1, "steps": 4})
    cb.on_train_begin()
    before = [v.numpy().copy() for v in model.optimizer.momentums]
    cb.on_epoch_begin(0)
    assert all(np.array_equal(a, v.numpy()) for a, v in zip(before, model.optimizer.momentums))

    adam = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    adam.compile(keras.optimizers.Adam(0.1), "mse")
    cb = hc.LearningRateScheduleCallback(0.1, 0.5)
    cb.set_model(adam)
    cb.set_params({"epochs": 1, "steps": 4})
    cb.on_train_begin()
    cb.on_epoch_begin(0)
    assert float(adam.optimizer.learning_rate.numpy()) == pytest.approx(0.05)


def test_keras_learning_rate_schedule_as_multiplier_after_warmup(hvd_single):
    model, x, y = model_and_data()
    decay = keras.optimizers.schedules.CosineDecay(1.0, decay_steps=8)
    rec = []

    class Rec(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            rec.append(float(self.model.optimizer.learning_rate.numpy()))

    cbs = [hc.LearningRateWarmupCallback(0.4, warmup_epochs=1, size=2),
           hc.LearningRateScheduleCallback(0.4, decay, start_epoch=1), Rec()]
    model.fit(x, y, epochs=3, batch_size=8, verbose=0, callbacks=cbs)
    assert rec[:4] == pytest.approx([0.2 * (b / 4 + 1) for b in range(4)], rel=1e-6)
    assert rec[4:] == pytest.approx([0.4 * float(decay(s)) for s in range(8)], rel=1e-5)


def test_backup_and_restore_continues_fit_at_the_saved_epoch(hvd_single, tmp_path):
    model, x, y = model_and_data()
    seen = SeenEpochs()
    model.fit(x, y, epochs=2, batch_size=8, verbose=0,
              callbacks=[hc.BackupAndRestore(str(tmp_path), delete_checkpoint=False), seen])
    assert seen.epochs == [0, 1] and sorted(os.listdir(tmp_path)) == ["epoch-0002"]
    saved = [v.numpy() for v in model.variables]
    iterations = int(model.optimizer.iterations.numpy())

    fresh, _, _ = model_and_data(lr=0.3)
    fresh.layers[0].kernel.assign(tf.zeros_like(fresh.layers[0].kernel))
    seen = SeenEpochs()

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

    again = SeenEpochs()  # no backup left: a new fit starts at 0
    fresh.fit(x, y, epochs=1, batch_size=8, verbose=0, callbacks=[hc.BackupAndRestore(str(tmp_path)), again])
    assert again.epochs == [0]


def test_backup_and_restore_rejects_what_it_cannot_do():
    with pytest.raises(ValueError, match=r"Received: save_freq=100"):
        hc.BackupAndRestore("/tmp/x", save_freq=100)
    with pytest.raises(ValueError, match="save_before_preemption=True"):
        hc.BackupAndRestore("/tmp/x", save_before_preemption=True)


def test_terminate_on_nan_single_rank(hvd_single):
    model, x, y = model_and_data()
    x[16:24] = np.nan
    seen = []

    class Batches(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            seen.append(batch)

    model.fit(x, y, epochs=3, batch_size=8, shuffle=False, verbose=0, callbacks=[hc.TerminateOnNaN(), Batches()])
    assert seen == [0, 1, 2]


def test_model_checkpoint_best_only_keep_and_format_errors(hvd_single, tmp_path):
    model, _, _ = model_and_data()
    cb = hc.ModelCheckpoint(str(tmp_path / "w-{epoch:02d}-{val_loss:.2f}.weights.h5"), save_best_only=True,
                            save_weights_only=True, keep=2)
    cb.set_model(model)
    for epoch, val_loss in enumerate([0.9, 0.8, 0.85, 0.5, 0.4]):
        cb.on_epoch_end(epoch, {"val_loss": val_loss})
    assert sorted(os.listdir(tmp_path)) == ["w-04-0.50.weights.h5", "w-05-0.40.weights.h5"]
    assert cb.best == 0.4

    acc = hc.ModelCheckpoint(str(tmp_path / "acc.weights.h5"), monitor="val_accuracy", save_best_only=True,
                             save_weights_only=True)
    acc.set_model(model)
    acc.on_epoch_end(0, {"val_accuracy": 0.5})
    acc.on_epoch_end(1, {"val_accuracy": 0.4})  # mode auto: accuracy is maximised
    assert acc.best == 0.5

    bad = hc.ModelCheckpoint(str(tmp_path / "m-{val_los}.weights.h5"), save_weights_only=True)
    bad.set_model(model)
    with pytest.raises(KeyError, match=r'Failed to format this callback filepath: ".*m-\{val_los\}\.weights\.h5"'):
        bad.on_epoch_end(0, {"val_loss": 1.0})
    with pytest.raises(ValueError, match="Received: mode='best'"):
        hc.ModelCheckpoint("x.h5", mode="best")
    if compat.KERAS_3:  # a name Keras 3 cannot save weights to fails before training, not at the first save
        with pytest.raises(ValueError, match=r"must end in `\.weights\.h5`"):
            hc.ModelCheckpoint("x.h5", save_weights_only=True)


def test_atomic_save_failure_leaves_previous_file(tmp_path):
    target = tmp_path / "model.h5"
    target.write_text("old")

    def half_then_crash(tmp):
        with open(tmp, "w") as f:
            f.write("partial")
        raise OSError("disk full")

    with pytest.raises(OSError):
        _atomic_save(str(target), half_then_crash)
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["model.h5"]


def test_throughput_logger_counts_examples_from_the_loss_tracker(hvd_single):
    model, x, y = model_and_data(n=40)
    tp = hc.ThroughputLogger(unit="images")
    history = model.fit(x, y, epochs=2, batch_size=8, verbose=0, validation_data=(x[:8], y[:8]), callbacks=[tp])
    assert history.history["images_per_sec"][-1] > 0
    assert history.history["images_per_sec_per_rank"][-1] == history.history["images_per_sec"][-1]  # one rank
    assert 0 < history.history["step_time_s"][-1] <= history.history["train_time_s"][-1]


def test_chief_only_loggers_write_on_rank_0(hvd_single, tmp_path, monkeypatch):
    model, x, y = model_and_data()
    model.fit(x, y, epochs=2, batch_size=8, verbose=0,
              callbacks=[hc.CSVLogger(str(tmp_path / "log.csv")), hc.TensorBoard(str(tmp_path / "tb"))])
    assert (tmp_path / "log.csv").read_text().count("\n") == 3
    assert (tmp_path / "tb").is_dir()
    assert isinstance(hc.ProgbarLogger(), keras.callbacks.ProgbarLogger)  # so Keras adds no bar of its own

    from hvdkeras import distributed

    monkeypatch.setattr(distributed, "is_chief", lambda: False)  # any other rank: runs along, writes nothing
    other = [hc.CSVLogger(str(tmp_path / "other.csv")), hc.TensorBoard(str(tmp_path / "other_tb")), hc.ProgbarLogger()]
    model.fit(x, y, epochs=1, batch_size=8, verbose=1, callbacks=other)
    assert not (tmp_path / "other.csv").exists() and not (tmp_path / "other_tb").exists()
    assert all(cb.model is model for cb in other)


def test_default_callbacks_order(hvd_single):
    cbs = hc.default_callbacks(initial_lr=0.1, warmup_epochs=2, lr_schedule=0.5, backup="/tmp/b",
                               metrics_file="/tmp/m.jsonl", tensorboard_dir="/tmp/tb")
    names = [type(c).__name__ for c in cbs]
    assert names == ["BroadcastGlobalVariablesCallback", "AverageModelStatisticsCallback", "MetricAverageCallback",
                     "TerminateOnNaN", "LearningRateWarmupCallback", "LearningRateScheduleCallback",
                     "ThroughputLogger", "ProgbarLogger", "TensorBoard", "JsonlMetricsLogger", "BackupAndRestore"]
    with pytest.raises(ValueError, match="lr_schedule needs initial_lr"):
        hc.default_callbacks(lr_schedule=0.5)
