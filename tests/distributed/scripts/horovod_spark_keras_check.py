"""What Horovod's own Spark Keras tests (``test/integration/test_spark_keras.py``) do through its public API, switched
to hvdkeras by the import lines, on local[2].

:func:`run_scenarios` (``spark_local_check.py --scenarios NAME,...``, the driver test_horovod_spark_keras.py shares)
runs each scenario of those tests that uses only Horovod's public names
(``horovod.spark.keras``, ``horovod.spark.common.store``, ``horovod.tensorflow.keras.callbacks``), each with the
imports below instead of Horovod's and Keras 3's own migration (``learning_rate=``, ``input_shape=``). What the
originals read of Horovod's internals (a mocked ``fit_fn``, ``util.prepare_data``, ``_load_model_from_checkpoint``)
is replaced by what a user sees: the store's files, the returned model, the history. Their in-process backend
(a ``Backend`` whose ``run`` calls the function once, here) is the user's own backend class. It returns
``{name: "passed" | the failure's last line, "seconds": {name: seconds}}``.
"""
import os
import tempfile
import time
import traceback

import numpy as np
import pyspark.sql.types as T
import tensorflow as tf
from pyspark.ml.feature import VectorAssembler
from pyspark.ml.functions import vector_to_array
from pyspark.ml.linalg import DenseVector, VectorUDT
from pyspark.sql.functions import udf

import hvdkeras.spark.keras as hvd  # was: import horovod.spark.keras as hvd
from hvdkeras.keras.callbacks import BestModelCheckpoint  # was: from horovod.tensorflow.keras.callbacks import ...
from hvdkeras.runtime.compat import keras
from hvdkeras.spark.common.store import LocalStore  # was: from horovod.spark.common.store import LocalStore


class InProcessBackend:
    """A user's backend that runs the training function once, in the driver: like Horovod's tests' own
    ``CallbackBackend``, a plain class with ``run`` and ``num_processes``, no base class."""

    def run(self, fn, args=(), kwargs=None, env=None):
        return [fn(*args, **(kwargs or {}))]

    def num_processes(self):
        return 1


def xor_model():
    model = keras.models.Sequential()
    model.add(keras.Input((2,)))
    model.add(keras.layers.Dense(8))
    model.add(keras.layers.Activation("tanh"))
    model.add(keras.layers.Dense(1))
    model.add(keras.layers.Activation("sigmoid"))
    return model


def digits_model():
    return keras.models.Sequential([
        keras.Input((8, 8, 1)), keras.layers.Conv2D(32, kernel_size=(3, 3), activation="relu"),
        keras.layers.MaxPooling2D(pool_size=(2, 2)), keras.layers.Dropout(0.25), keras.layers.Flatten(),
        keras.layers.Dense(10, activation="softmax")])


def xor_rows(spark, with_val=False):
    """Horovod's XOR rows: x1, x2 assembled into ``features``, a float label ``y``, a ``weight`` (and ``val``)."""
    rows = [(0, 0, 0.0, 0.1, 1), (0, 1, 1.0, 0.2, 0), (1, 0, 1.0, 0.3, 1), (1, 1, 0.0, 0.4, 0)]
    rows = rows * 2 if with_val else [r[:4] for r in rows]
    fields = [T.StructField("x1", T.IntegerType()), T.StructField("x2", T.IntegerType()),
              T.StructField("y", T.FloatType()), T.StructField("weight", T.FloatType())]
    if with_val:
        fields.append(T.StructField("val", T.IntegerType()))
    raw = spark.createDataFrame(rows, T.StructType(fields))
    return VectorAssembler(inputCols=["x1", "x2"], outputCol="features").transform(raw)


def digits_rows(spark):
    """Horovod's MNIST-shaped rows: ten of one 64-value image labelled 2, one-hot in ``label_vec``."""
    schema = T.StructType([T.StructField("features", VectorUDT()), T.StructField("label_vec", VectorUDT()),
                           T.StructField("label", T.FloatType())])
    row = [DenseVector([1.0] * 64), DenseVector([0.0, 0.0, 1.0] + [0.0] * 7), 2.0]
    return spark.createDataFrame([row] * 10, schema)


def sgd():
    return keras.optimizers.SGD(learning_rate=0.1)  # was: lr=0.1


def predicts_one_float32(model):
    pred = model.predict([np.ones([1, 2], dtype=np.float32)], verbose=0)
    assert len(pred) == 1 and pred.dtype == np.float32, pred


def test_fit_model(spark, store):
    est = hvd.KerasEstimator(num_proc=2, store=store, model=xor_model(), optimizer=sgd(), loss="binary_crossentropy",
                             feature_cols=["features"], label_cols=["y"], batch_size=1, random_seed=1, epochs=3,
                             verbose=2, use_gpu=False, mp_start_method="spawn")
    assert not est.getUseGpu()
    assert est.getMpStartMethod() == "spawn"
    est.setMpStartMethod("forkserver")
    assert est.getMpStartMethod() == "forkserver"
    predicts_one_float32(est.fit(xor_rows(spark)).getModel())


def test_fit_model_with_tensorflow_dataset_prefetch_buffer_size(spark, store):
    est = hvd.KerasEstimator(num_proc=2, store=store, model=xor_model(), optimizer=sgd(), loss="binary_crossentropy",
                             feature_cols=["features"], label_cols=["y"], batch_size=1, random_seed=1, epochs=3,
                             verbose=2, use_gpu=False, mp_start_method="spawn",
                             tensorflow_dataset_prefetch_buffer_size=1)
    predicts_one_float32(est.fit(xor_rows(spark)).getModel())


def test_fit_model_multiclass(spark, store):
    df = digits_rows(spark)
    est = hvd.KerasEstimator(num_proc=2, store=store, model=digits_model(), optimizer=keras.optimizers.Adadelta(1.0),
                             loss=keras.losses.categorical_crossentropy, metrics=["accuracy"],
                             feature_cols=["features"], label_cols=["label_vec"], batch_size=2, epochs=2, verbose=2)
    pred_df = est.fit(df).setOutputCols(["label_prob"]).transform(df)
    argmax = udf(lambda v: float(np.argmax(v)), returnType=T.DoubleType())
    preds = pred_df.withColumn("label_pred", argmax(pred_df.label_prob)).collect()
    assert len(preds) == df.count()
    label_prob = preds[0].label_prob.toArray().tolist()
    assert label_prob[int(preds[0].label_pred)] == max(label_prob)


def test_restore_from_checkpoint(spark, store):
    df = xor_rows(spark)
    est = hvd.KerasEstimator(backend=InProcessBackend(), store=store, model=xor_model(), optimizer=sgd(),
                             loss="binary_crossentropy", feature_cols=["features"], label_cols=["y"], batch_size=1,
                             epochs=3, verbose=2, run_id="run01")
    ckpt_path = store.get_checkpoint_path("run01")
    assert not store.exists(ckpt_path)
    predicts_one_float32(est.fit(df).getModel())
    assert store.exists(ckpt_path)
    resumed = est.setEpochs(4).fit(df)  # the original asserts the second fit loads the checkpoint: it trains one epoch
    assert len(resumed.getHistory()["loss"]) == 4, resumed.getHistory()
    assert sorted(os.listdir(store.get_localized_path(ckpt_path)))[-1] == "epoch-0004"


def write_parquet(df, store, validation):
    """The rows as Horovod's ``util.prepare_data`` leaves them in the store (features as arrays), by the public API."""
    df = df.withColumn("features", vector_to_array("features", "float32")).select("features", "y", "weight", "val")
    train, val = (df, None) if validation is None else (df.filter("val = 0"), df.filter("val = 1"))
    train.drop("val").write.mode("overwrite").parquet(store.get_train_data_path())
    if val is not None:
        val.drop("val").write.mode("overwrite").parquet(store.get_val_data_path())


def test_keras_direct_parquet_train(spark, store):
    df = xor_rows(spark, with_val=True)
    for validation in ["val"]:  # Horovod's loop also trains without; test_keras_model_checkpoint_callback does
        write_parquet(df, store, validation)
        est = hvd.KerasEstimator(backend=InProcessBackend(), store=store, model=xor_model(), optimizer=sgd(),
                                 loss="binary_crossentropy", feature_cols=["features"], label_cols=["y"], batch_size=1,
                                 epochs=3, reader_pool_type="thread", validation=validation, inmemory_cache_all=True,
                                 verbose=2)
        transformer = est.fit_on_parquet()
        assert transformer.transform(df).count() == df.count()
        assert ("val_loss" in transformer.getHistory()) == (validation is not None)


def test_keras_model_checkpoint_callback(spark, store):
    df = xor_rows(spark, with_val=True)
    write_parquet(df, store, None)
    last = {}

    class LastWeights(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            last["weights"] = self.model.get_weights()

    est = hvd.KerasEstimator(backend=InProcessBackend(), store=store, model=xor_model(), optimizer=sgd(),
                             loss="binary_crossentropy", metrics=["binary_crossentropy"], feature_cols=["features"],
                             label_cols=["y"], batch_size=1, epochs=3, verbose=2, callbacks=[LastWeights()],
                             checkpoint_callback=BestModelCheckpoint(monitor="binary_crossentropy", mode="max"))
    transformer = est.fit_on_parquet()
    history = transformer.getHistory()["binary_crossentropy"]
    returned = transformer.getModel().get_weights()
    assert int(np.argmax(history)) != len(history) - 1, history  # the best (highest) epoch is not the last
    assert not all(np.array_equal(a, b) for a, b in zip(returned, last["weights"]))  # the best model, not the last


def test_model_serialization(spark, store):
    df = xor_rows(spark)
    est = hvd.KerasEstimator(model=xor_model(), optimizer=sgd(), loss="binary_crossentropy",
                             feature_cols=["features"], label_cols=["y"], batch_size=1, epochs=3, verbose=2)
    with tempfile.TemporaryDirectory() as tmp:
        saved_path = os.path.join(tmp, "saved")
        est.save(saved_path)
        loaded = hvd.KerasEstimator.load(saved_path)
    model = loaded.fit(df, params={loaded.backend: InProcessBackend(), loaded.store: store}).getModel()
    predicts_one_float32(model)


SCENARIOS = [test_fit_model, test_fit_model_with_tensorflow_dataset_prefetch_buffer_size, test_fit_model_multiclass,
             test_restore_from_checkpoint, test_keras_direct_parquet_train, test_keras_model_checkpoint_callback,
             test_model_serialization]

def run_scenarios(spark, root, wanted):
    """Each scenario named in ``wanted``, on ``spark``, its store under ``root``: ``{name: "passed" | the failure's
    last line, "seconds": {name: how long it took}}``."""
    outcome = {"seconds": {}}
    for scenario in SCENARIOS:
        if scenario.__name__ not in wanted:
            continue
        began = time.monotonic()
        tf.keras.backend.clear_session()
        store = LocalStore(os.path.join(root, scenario.__name__))
        try:
            scenario(spark, store)
            outcome[scenario.__name__] = "passed"
        except Exception:  # noqa: BLE001 - each scenario's failure is reported by name
            outcome[scenario.__name__] = traceback.format_exc().strip().splitlines()[-1]
            traceback.print_exc()
        outcome["seconds"][scenario.__name__] = round(time.monotonic() - began, 1)
    return outcome

