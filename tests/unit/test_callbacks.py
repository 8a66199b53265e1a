"""Callback hooks called directly, in one process."""
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from hvdkeras import checkpointing, compat
from hvdkeras.callbacks import (AverageModelStatisticsCallback, BackupAndRestore, BroadcastGlobalVariablesCallback,
                                JsonlMetricsLogger, MetricAverageCallback)
from hvdkeras.callbacks.metric_average import _metric_states, _results_from_states
from hvdkeras.callbacks.metrics_logger import read_metrics

keras = tf.keras


def small_model(seed=0):
    tf.random.set_seed(seed)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
                              keras.layers.BatchNormalization(), keras.layers.Dense(3, activation="softmax")])
    model.compile(keras.optimizers.SGD(0.1, momentum=0.9), "sparse_categorical_crossentropy",
                  metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")])
    return model


def xy(n, seed):
    rng = np.random.RandomState(seed)
    return rng.randn(n, 4).astype("float32"), rng.randint(0, 3, n).astype("int32")


def attach(cb, model, epochs=3, steps=2):
    cb.set_model(model)
    cb.set_params({"epochs": epochs, "steps": steps, "verbose": 0})
    return cb


# ---------------------------------------------------------------- metric averaging


def test_results_from_summed_states_are_exact_over_uneven_parts():
    """Two 'ranks' with 7 and 30 examples: summing states gives the metric on all 37."""
    model = small_model()
    xa, ya = xy(7, 1)
    xb, yb = xy(30, 2)
    model.evaluate(xa, ya, verbose=0)
    a = _metric_states(model.metrics)
    model.evaluate(xb, yb, verbose=0)
    b = _metric_states(model.metrics)
    combined = _results_from_states(model.metrics, [sa + sb for sa, sb in zip(a, b)])
    # the metric variables are left as they were
    assert all(np.array_equal(x, y) for x, y in zip(_metric_states(model.metrics), b))
    whole = model.evaluate(np.concatenate([xa, xb]), np.concatenate([ya, yb]), verbose=0, return_dict=True,
                           batch_size=37)
    assert combined["loss"] == pytest.approx(whole["loss"], rel=1e-5)
    assert combined["accuracy"] == pytest.approx(whole["accuracy"], rel=1e-6)


def test_metric_average_single_process_keeps_values(hvd_single):
    model, plain = small_model(), small_model()
    plain.set_weights(model.get_weights())
    x, y = xy(32, 0)
    history = model.fit(x, y, epochs=2, validation_data=xy(10, 1), verbose=0, shuffle=False,
                        callbacks=[MetricAverageCallback()])
    expected = plain.fit(x, y, epochs=2, validation_data=xy(10, 1), verbose=0, shuffle=False)
    for key in ("loss", "accuracy", "val_loss", "val_accuracy"):
        assert history.history[key] == pytest.approx(expected.history[key], rel=1e-5), key


def test_metric_average_reads_training_metrics_before_validation_resets_them(hvd_single):
    model = small_model()
    cb = attach(MetricAverageCallback(), model)
    model.evaluate(*xy(20, 3), verbose=0)  # stands in for the training epoch's metric states
    train_results = {k: float(v) for k, v in model.get_metrics_result().items()}
    cb.on_epoch_begin(0)
    cb.on_test_begin()  # validation starts: training states are read here
    val = model.evaluate(*xy(9, 4), verbose=0, return_dict=True)
    logs = {"loss": -1.0, "accuracy": -1.0, "val_loss": -1.0, "val_accuracy": -1.0, "lr": 0.5}
    cb.on_epoch_end(0, logs)
    assert logs["loss"] == pytest.approx(train_results["loss"])
    assert logs["accuracy"] == pytest.approx(train_results["accuracy"])
    assert logs["val_loss"] == pytest.approx(val["loss"])
    assert logs["val_accuracy"] == pytest.approx(val["accuracy"])
    assert logs["lr"] == 0.5


# ---------------------------------------------------------------- broadcast


def test_broadcast_builds_optimizer_slots_before_the_first_step(hvd_single):
    model = small_model()
    assert not compat.momentum_buffers(model.optimizer)
    before = len(model.optimizer.variables)
    cb = attach(BroadcastGlobalVariablesCallback(0), model)
    cb.on_train_begin()
    # one momentum slot per trainable variable exists (and was broadcast) before step one
    slots = compat.momentum_buffers(model.optimizer)
    assert [tuple(s.shape) for s in slots] == [tuple(v.shape) for v in model.trainable_variables]
    assert len(model.optimizer.variables) >= before + len(slots)
    assert int(model.optimizer.iterations.numpy()) == 0


# ---------------------------------------------------------------- model statistics


def test_model_statistics_sync_touches_only_non_trainable_floats(hvd_single):
    model = small_model()
    cb = attach(AverageModelStatisticsCallback(), model)
    before = [v.numpy().copy() for v in model.trainable_variables]
    cb.on_epoch_begin(0)
    cb.on_epoch_end(0, {})
    assert all(np.array_equal(a, v.numpy()) for a, v in zip(before, model.trainable_variables))


# ---------------------------------------------------------------- checkpoints


def test_backup_writes_atomically_and_keeps_the_newest(hvd_single, tmp_path):
    model = small_model()
    model.fit(*xy(8, 0), epochs=1, verbose=0)
    cb = attach(BackupAndRestore(str(tmp_path), keep=2), model, epochs=4)
    cb.on_train_begin()
    for epoch in range(4):
        cb.on_epoch_end(epoch, {"loss": 1.0 / (epoch + 1)})
    assert sorted(os.listdir(tmp_path)) == ["epoch-0003", "epoch-0004"]
    meta = json.loads((tmp_path / "epoch-0004" / "meta.json").read_text())
    assert meta["epoch"] == 4 and meta["metrics"]["loss"] == 0.25 and meta["num_ranks"] == 1


def test_every_n_epochs_and_always_the_last(hvd_single, tmp_path):
    model = small_model()
    cb = attach(BackupAndRestore(str(tmp_path), every_epochs=2, keep=0), model, epochs=5)
    cb.on_train_begin()
    for epoch in range(5):
        cb.on_epoch_end(epoch, {})
    assert sorted(os.listdir(tmp_path)) == ["epoch-0002", "epoch-0004", "epoch-0005"]


def test_crash_mid_write_leaves_previous_checkpoint_as_latest(hvd_single, tmp_path):
    model = small_model()
    store = checkpointing.CheckpointStore(str(tmp_path), keep=3)
    trackable = checkpointing.trackable_for(model)
    store.save(1, trackable, {})

    class Exploding:
        def write(self, prefix):
            trackable.write(prefix)  # the data lands, then the process dies before meta.json
            raise KeyboardInterrupt("killed")

    with pytest.raises(KeyboardInterrupt):
        store.save(2, Exploding(), {})
    assert store.latest().epoch == 1
    assert sorted(os.listdir(tmp_path)) == ["epoch-0001"]

    # a temp directory left by a hard kill is ignored, then cleaned
    os.makedirs(tmp_path / ".epoch-0002.tmp-abc")
    (tmp_path / ".epoch-0002.tmp-abc" / "ckpt.index").write_text("partial")
    os.makedirs(tmp_path / "epoch-0003")  # no meta.json: incomplete
    assert store.latest().epoch == 1
    store.remove_stale()
    assert not (tmp_path / ".epoch-0002.tmp-abc").exists()


def test_restore_round_trip_and_mismatch_error(hvd_single, tmp_path):
    model = small_model(seed=1)
    model.fit(*xy(16, 0), epochs=1, verbose=0)
    store = checkpointing.CheckpointStore(str(tmp_path))
    info = store.save(3, checkpointing.trackable_for(model), {})

    other = small_model(seed=2)
    other.optimizer.build(other.trainable_variables)
    store.restore(info, checkpointing.trackable_for(other))
    for a, b in zip(model.variables + model.optimizer.variables, other.variables + other.optimizer.variables):
        assert np.array_equal(a.numpy(), b.numpy())

    wrong = keras.Sequential([keras.Input((4,)), keras.layers.Dense(5)])
    wrong.compile(keras.optimizers.SGD(0.1), "mse")
    wrong.optimizer.build(wrong.trainable_variables)
    with pytest.raises(checkpointing.CheckpointError, match="does not fit this model"):
        store.restore(info, checkpointing.trackable_for(wrong))


# ---------------------------------------------------------------- metrics.jsonl


def test_jsonl_logger_writes_one_line_per_epoch_and_drops_lines_after_resume_point(hvd_single, tmp_path):
    path = str(tmp_path / "metrics.jsonl")
    model = small_model()
    cb = attach(JsonlMetricsLogger(path), model, epochs=4, steps=10)
    cb.on_train_begin()
    for epoch in range(3):
        cb.on_epoch_begin(epoch)
        cb.on_test_begin()
        cb.on_epoch_end(epoch, {"loss": 0.5, "val_loss": 0.6, "lr": 0.1})
    records = read_metrics(path)
    assert [r["epoch"] for r in records] == [1, 2, 3]
    assert records[0]["val_loss"] == 0.6 and records[0]["lr"] == 0.1
    assert records[0]["epoch_time_s"] >= 0

    # a crash after logging epoch 3 but with only epoch 2 checkpointed: fit restarts at epoch index 2
    cb = attach(JsonlMetricsLogger(path), model, epochs=4, steps=10)
    cb.on_train_begin()
    cb.on_epoch_begin(2)
    cb.on_epoch_end(2, {"loss": 0.4})
    assert [r["epoch"] for r in read_metrics(path)] == [1, 2, 3]
    assert read_metrics(path)[-1]["loss"] == 0.4
