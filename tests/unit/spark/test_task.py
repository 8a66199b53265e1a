"""hvdkeras.spark.keras.task: several feature and label columns feed a model's inputs and outputs in order.

The weight column comes third, as Keras takes ``(x, y, sample_weight)``.
"""
import dataclasses

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from hvdkeras import config as config_lib  # noqa: E402
from hvdkeras.common import scaling  # noqa: E402
from hvdkeras.runtime.compat import keras  # noqa: E402
from hvdkeras.spark.common.data import PreparedData  # noqa: E402
from hvdkeras.spark.common.store import Store  # noqa: E402
from hvdkeras.spark.keras.serialization import model_to_bytes  # noqa: E402
from hvdkeras.spark.keras.task import SparkTask, SparkTaskSpec  # noqa: E402
from hvdkeras.training.data import Shard  # noqa: E402

ROWS = 24


@pytest.fixture
def prepared(tmp_path):
    """One Parquet file as Spark would write it: ``id``, an 8-value image, a 2-value extra, a class, a target
    and a weight per row, each derived from ``id`` so that a batch shows which row each value came from."""
    where = tmp_path / "train"
    where.mkdir()
    ids = np.arange(ROWS)
    table = pa.table({
        "image": pa.array([[float(i)] * 8 for i in ids], pa.list_(pa.float32())),
        "extra": pa.array([[float(i), -float(i)] for i in ids], pa.list_(pa.float32())),
        "cls": pa.array(ids % 3, pa.int64()),
        "target": pa.array(ids * 10.0, pa.float64()),
        "weight": pa.array(ids / 100.0, pa.float64()),
    })
    pq.write_table(table, str(where / "part-00000.parquet"))
    data = PreparedData(train_path="file://" + str(where), val_path=None, train_rows=ROWS, val_rows=0, columns={},
                        feature_cols=("image", "extra"), label_cols=("cls", "target"), sample_weight_col="weight")
    return Store.create(str(tmp_path)), data


def _model():
    keras.utils.set_random_seed(1)
    image, extra = keras.Input((2, 4, 1), name="image"), keras.Input((2,), name="extra")
    x = keras.layers.Concatenate()([keras.layers.Flatten()(image), extra])
    return keras.Model([image, extra], [keras.layers.Dense(3, activation="softmax", name="cls")(x),
                                        keras.layers.Dense(1, name="target")(x)])


def _task(store, data):
    return SparkTask(SparkTaskSpec(store=store, data=data, model=model_to_bytes(_model()),
                                   input_shapes=((2, 4, 1), (2,)), label_shapes=None,
                                   loss=["sparse_categorical_crossentropy", "mse"], loss_weights=[1.0, 0.5],
                                   metrics=None, optimizer=None, custom_objects={}))


def _config():
    """The config two ranks' trainer hands the task: batches of 4 a rank (Horovod's convention, as the estimator's)."""
    config = config_lib.from_dict({"data": {"name": "spark", "global_batch_size": None, "per_rank_batch_size": 4},
                                   "runtime": {"seed": 1}})
    return dataclasses.replace(config, data=scaling.for_world(config.data, 2))


def test_each_column_feeds_its_input_and_output_in_order_with_its_weight(prepared):
    store, data = prepared
    datasets = _task(store, data).datasets(_config(), Shard(0, 2), None, None)
    assert datasets.steps_per_epoch == 3 and datasets.per_rank_batch == 4  # rank 0 holds rows 0-11
    (image, extra), (cls, target), weight = next(iter(datasets.train(0, 1)))
    ids = extra[:, 0].numpy()
    assert image.shape == (4, 2, 4, 1) and extra.shape == (4, 2)  # the image reshaped to the input's shape
    assert (image.numpy().reshape(4, 8) == ids[:, None]).all() and (extra[:, 1].numpy() == -ids).all()
    assert (cls.numpy() == ids % 3).all() and np.allclose(target.numpy(), ids * 10.0)
    assert np.allclose(weight.numpy(), ids / 100.0) and set(ids) <= set(range(12))


def test_a_two_output_model_trains_on_the_tasks_batches_with_its_losses_and_weights(prepared):
    store, data = prepared
    task = _task(store, data)
    config = _config()
    datasets = task.datasets(config, Shard(1, 2), None, None)
    model = task.model(config, datasets)
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss=task.loss(config, datasets),
                  loss_weights=task.loss_weights(config, datasets))
    history = model.fit(datasets.train(0, 1), steps_per_epoch=datasets.steps_per_epoch, verbose=0)
    assert sorted(history.history) == sorted(["loss", "cls_loss", "target_loss"])
    assert np.isfinite(history.history["loss"][0])


def _mlp(units):
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(units, activation="relu"), keras.layers.Dense(2)])


def test_a_jobs_description_is_the_same_in_every_process_and_tells_jobs_apart():
    from hvdkeras.spark.keras.task import architecture, describe, to_portable

    # Keras numbers layer and optimizer names by how many a process made: the description leaves them out.
    assert architecture(_mlp(8)) == architecture(_mlp(8))
    assert architecture(_mlp(8)) != architecture(_mlp(16))
    assert architecture(_mlp(8)).startswith("2 layers, 58 parameters, architecture ")
    sgd = describe(to_portable(keras.optimizers.SGD(0.1), "optimizer"))
    assert sgd == describe(to_portable(keras.optimizers.SGD(0.1), "optimizer"))
    assert sgd.startswith("SGD(") and "learning_rate=0.1," in sgd and "name" not in sgd
    assert sgd != describe(to_portable(keras.optimizers.SGD(0.2), "optimizer"))
    assert describe(to_portable("mse", "loss")) == '"mse"'


@pytest.mark.parametrize("rank", [0, 1])
def test_streamed_rows_give_the_batches_of_rows_held_in_memory_for_the_same_seed(prepared, rank):
    # The default streams each epoch from the store; where the shuffle buffer holds all of a rank's rows, its
    # batches are those of inmemory_cache_all=True, epoch by epoch (a resumed fit starts its epoch the same way).
    store, data = prepared
    batches = {}
    for in_memory in (True, False):
        task = _task(store, data)
        task.spec = dataclasses.replace(task.spec, inmemory_cache_all=in_memory)
        datasets = task.datasets(_config(), Shard(rank, 2), None, None)
        batches[in_memory] = [[a.numpy().tolist() for a in _flat(b)] for b in datasets.train(0, 3)]
    assert len(batches[False]) == 9 and batches[False] == batches[True]


def test_a_streaming_ranks_shuffle_buffer_is_bounded_in_bytes(prepared, monkeypatch):
    from hvdkeras.spark.keras import task as task_lib

    store, data = prepared
    seen = {}
    real = task_lib.data_lib.sharded_train_epochs
    monkeypatch.setattr(task_lib.data_lib, "sharded_train_epochs",
                        lambda *a: seen.setdefault("buffer", a[-1].shuffle_buffer) and real(*a))
    row_bytes = (8 + 2) * 4 + 8 + 8 + 4  # image, extra (float32), cls (int64), target (float64), weight (float32)
    monkeypatch.setattr(task_lib, "SHUFFLE_BUFFER_BYTES", 5 * row_bytes)
    _task(store, data).datasets(_config(), Shard(0, 2), None, None).train(0, 1)
    assert seen["buffer"] == 5  # rows within the bytes, not the rank's 12
    monkeypatch.setattr(task_lib, "SHUFFLE_BUFFER_BYTES", 2 * row_bytes)
    seen.clear()
    _task(store, data).datasets(_config(), Shard(0, 2), None, None).train(0, 1)
    assert seen["buffer"] == 4  # never below a batch


def _flat(batch):
    import tensorflow as tf

    return tf.nest.flatten(batch)


def test_without_shuffle_each_epoch_reads_a_ranks_rows_in_the_order_they_were_written(prepared):
    store, data = prepared
    task = _task(store, data)
    task.spec = dataclasses.replace(task.spec, shuffle=False)
    epochs = task.datasets(_config(), Shard(1, 2), None, None).train(0, 2)
    firsts = [int(_flat(batch)[1].numpy()[0, 0]) for batch in epochs]  # the "extra" column's first value: the row id
    assert len(firsts) == 6 and firsts[:3] == firsts[3:] and firsts == sorted(firsts[:3]) * 2
