"""hvdkeras.spark.keras.KerasEstimator on a real Spark, Horovod's MNIST example's shape.

:func:`run_checks`, which ``spark_local_check.py --estimator`` (the driver test_spark.py shares) runs on local[2]:
several checks in one driver (each Spark session and each Horovod start costs ~10-20 s). It returns:

* ``fit``: two ranks train a model of two inputs (a 64-value DenseVector reshaped to (8, 8, 1), and an
  array column) and two outputs (a class from one-hot SparseVector labels, a regression target), each row
  weighted by a ``sample_weight_col``, the validation rows marked by a ``validation`` column; the history,
  a weight checksum, the largest difference from the same model trained in this process on the same rows,
  batches, weights and rate (``single``), the run's checkpoints;
* ``transform``: prediction columns, a row count, the argmax accuracy, the rows ``toPandas()`` gives;
* ``persist``: the model saved and loaded alone and inside a PipelineModel gives the same predictions;
* ``too_many``: hvdkeras.spark.run with num_proc=3 on two slots (local[2] only: the cluster's driver has its own);
* ``environment``: what two ranks of hvdkeras.spark.run see of secrets in the driver's environment (local[2] only);
* ``errors``: the one line for each bad input (missing column, string column, empty DataFrame,
  feature length, unknown parameter, a petastorm-only parameter).
"""
import os
import time

import numpy as np
from pyspark.ml import PipelineModel
from pyspark.ml.feature import OneHotEncoder
from pyspark.ml.functions import vector_to_array
from pyspark.ml.linalg import Vectors

import hvdkeras.spark.keras as hvd
from hvdkeras import spark as hvd_spark
from hvdkeras.common.errors import HvdkerasError
from hvdkeras.runtime.compat import keras
from hvdkeras.spark.common.backend import SparkBackend
from hvdkeras.spark.common.data import survey
from hvdkeras.spark.common.runs import RunLock
from hvdkeras.spark.common.store import Store

ROWS = 256


LOSSES, LOSS_WEIGHTS = ["categorical_crossentropy", "mse"], [1.0, 0.5]
LABEL_COLS = ["label_vec", "target"]
COLUMNS = ["features", "extra", "label", "id", "target", "weight", "is_val"]


def make_model(seed=1):
    keras.utils.set_random_seed(seed)
    image = keras.Input((8, 8, 1), name="image")
    extra = keras.Input((3,), name="extra")
    x = keras.layers.Concatenate()([keras.layers.Flatten()(image), extra])
    x = keras.layers.Dense(16, activation="relu")(x)
    return keras.Model([image, extra], [keras.layers.Dense(4, activation="softmax", name="cls")(x),
                                        keras.layers.Dense(1, name="reg")(x)])


def rows():
    """Each row: the image, the extra values, its class, its id, a target (the extra values' sum), a weight (0.5, 1
    or 1.5 by id) and whether it is a validation row (every fourth)."""
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 4, ROWS)
    images = rng.normal(size=(ROWS, 64)).astype(np.float32) + labels[:, None] * 0.5
    extras = rng.normal(size=(ROWS, 3)).astype(np.float32)
    return [(Vectors.dense(images[i].tolist()), extras[i].tolist(), int(labels[i]), i, float(extras[i].sum()),
             0.5 + (i % 3) * 0.5, i % 4 == 0) for i in range(ROWS)]


def checksum(model):
    return float(sum(np.abs(w).sum() for w in model.get_weights()))


def one_process_weights_differ(trained, store, train_path):
    """The largest weight difference between the ranks' model and one process trained on the ranks' global batches.

    The global batch of step t is rank 0's batch t then rank 1's, as the ranks' own data pipelines
    (SparkTask over the store's Parquet) give them; one process steps on it at the ranks' scaled rate.
    """
    import tensorflow as tf

    from hvdkeras import config as config_lib
    from hvdkeras.spark.common.data import PreparedData
    from hvdkeras.spark.keras.task import SparkTask, SparkTaskSpec
    from hvdkeras.training.data import Shard

    prepared = PreparedData(train_path=train_path, val_path=None, train_rows=0, val_rows=0,
                            columns={}, feature_cols=("features", "extra"), label_cols=tuple(LABEL_COLS),
                            sample_weight_col="weight")
    task = SparkTask(SparkTaskSpec(store=store, data=prepared, model=b"", input_shapes=((8, 8, 1), (3,)),
                                   label_shapes=((4,), (1,)), loss=None, loss_weights=None, metrics=None,
                                   optimizer=None, custom_objects={}))
    config = config_lib.from_dict({"data": {"name": "spark", "global_batch_size": 32, "eval_global_batch_size": 32},
                                   "runtime": {"seed": 1}})
    parts = [task.datasets(config, Shard(r, 2), None, None) for r in range(2)]
    steps = min(p.steps_per_epoch for p in parts)
    parts = [task.datasets(config, Shard(r, 2), steps, None) for r in range(2)]
    model = make_model()
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss=LOSSES, loss_weights=LOSS_WEIGHTS)
    streams = []
    for rank in range(2):  # each rank's shuffle also follows its global seed, runtime.seed + rank
        tf.random.set_seed(1 + rank)
        streams.append(parts[rank].train(0, 2))
    for ((x0, e0), (c0, r0), w0), ((x1, e1), (c1, r1), w1) in zip(*streams):
        model.train_on_batch((tf.concat([x0, x1], 0), tf.concat([e0, e1], 0)),
                             (tf.concat([c0, c1], 0), tf.concat([r0, r1], 0)), sample_weight=tf.concat([w0, w1], 0))
    return float(max(np.abs(a - b).max() for a, b in zip(model.get_weights(), trained.get_weights())))


def _rows(store, path):
    from hvdkeras.spark.common.reader import count_rows

    return count_rows(store, path)


def allreduce_rank():
    import horovod.tensorflow as hvd_tf
    import tensorflow as tf

    hvd_tf.init()
    total = hvd_tf.allreduce(tf.constant(float(hvd_tf.rank())), op=hvd_tf.Sum, name="spark_check")
    return {"rank": hvd_tf.rank(), "size": hvd_tf.size(), "sum": float(total.numpy())}


def rank_sees():
    """What a rank sees of the driver's environment: two secrets it must not, and its own Horovod settings."""
    return {"unrelated": os.environ.get("UNRELATED_API_TOKEN"), "aws": os.environ.get("AWS_SECRET_ACCESS_KEY"),
            "rank": os.environ.get("HOROVOD_RANK"), "path": bool(os.environ.get("PATH"))}


def intermediate_data(store_path):
    """The fits' Parquet folders left in the store (``intermediate_*_data.<run_id>.<fit>``)."""
    return sorted(n for n in os.listdir(store_path) if n.startswith("intermediate_"))


def prepared_twice_alike(df, store, path, feature_cols, label_cols, **kwargs):
    """Whether the fit's training Parquet (``path``, kept) and a second ``prepare`` of the same DataFrame (with
    ``kwargs``, into the store's dataset ``again``) hold the same rows in the same order in each file: a rank's epoch
    shuffle permutes its rows by position, so a second fit with the same seed trains on the same batches only then
    (on the cluster the rows of a file come from two executors' shuffle blocks, in the order they arrive)."""
    import pyarrow.parquet as pq

    from hvdkeras.spark.common.data import prepare
    from hvdkeras.spark.common.reader import parquet_files

    again = prepare(df, store, 2, feature_cols, label_cols, dataset_idx="again", **kwargs)

    def contents(where):
        found = []
        for name, _ in parquet_files(store, where):
            with store.fs.open(name, "rb") as f:
                found.append(pq.read_table(f).to_pydict())
        return found

    return contents(path) == contents(again.train_path)


def error_of(fn):
    try:
        fn()
    except HvdkerasError as exc:
        return str(exc)
    return None


def bad_rows(spark, df):
    """``df`` with one row's value made null, NaN or infinite in a column (the feature vector, the array, the label)."""
    from pyspark.sql import functions as F

    def at_row_7(column, value):
        return df.withColumn(column, F.when(F.col("id") == 7, value).otherwise(F.col(column)))

    nan_vector = spark.createDataFrame([(Vectors.dense([float("nan")] * 64),)], ["v"]).first().v
    with_nan = df.rdd.map(lambda r: (nan_vector if r.id in (3, 5) else r.features, *r[1:])).toDF(df.schema)
    return {"null_label": at_row_7("label_vec", F.lit(None)),
            "nan_features": with_nan,
            "inf_extra": at_row_7("extra", F.array(*[F.lit(float("inf"))] * 3).cast("array<double>"))}


def _data_and_estimator(spark, store_path):
    """The DataFrame (its labels one-hot encoded too), and the estimator of the checks, with changes."""
    df = spark.createDataFrame(rows(), COLUMNS)
    df = OneHotEncoder(inputCols=["label"], outputCols=["label_vec"], dropLast=False).fit(df).transform(df)
    store = Store.create("file://" + os.path.abspath(store_path))

    def estimator(**kw):
        args = dict(num_proc=2, store=store, model=make_model(), optimizer=keras.optimizers.SGD(0.05),
                    loss=LOSSES, loss_weights=LOSS_WEIGHTS, metrics={"cls": ["accuracy"]},
                    feature_cols=["features", "extra"], label_cols=LABEL_COLS, sample_weight_col="weight",
                    batch_size=16, epochs=2, random_seed=1, verbose=0, validation="is_val", run_id="run1")
        args.update(kw)
        return hvd.KerasEstimator(**args)

    return df, store, estimator


def fit_check(spark, store_path):
    """The two-output fit with weighted rows and a validation column against one process (``fit`` above):
    ``(what tests/harness/spark_checks.assert_fit checks, the fitted KerasModel, the DataFrame)``."""
    df, store, estimator = _data_and_estimator(spark, store_path)
    keras_model = estimator(keep_intermediate_data=True).fit(df).setOutputCols(["label_prob", "target_pred"])
    history = keras_model.getHistory()
    fit = {"history_keys": sorted(history), "epochs": len(history.get("loss", [])),
           "checksum": checksum(keras_model.getModel()),
           "checkpoints": sorted(os.listdir(os.path.join(store_path, "runs", "run1", "checkpoints"))),
           "run_id": keras_model.getRunId(), "kept": intermediate_data(store_path),
           "seconds": keras_model.getFitSeconds()}
    (train_data,) = [n for n in fit["kept"] if n.startswith("intermediate_train_data.")]
    train_path = f"{store.prefix_path}/{train_data}"
    fit["single"] = one_process_weights_differ(keras_model.getModel(), store, train_path)
    fit["same_files"] = prepared_twice_alike(df, store, train_path, ["features", "extra"], LABEL_COLS,
                                             sample_weight_col="weight", validation="is_val", seed=1)
    fit["rows"] = {"train": _rows(store, train_path),
                   "val": _rows(store, f"{store.prefix_path}/{train_data.replace('_train_', '_val_')}")}
    return fit, keras_model, df


def differences_from_predict(model, rows, array_rows):
    """The largest difference, for each output column type, between ``transform``'s predictions and the model's own
    ``predict`` on the same rows' features (the vector output, the double output, and the array output of
    ``array_rows``)."""

    def values(v):
        return v.toArray() if hasattr(v, "toArray") else np.asarray(v, dtype=np.float64)

    def predict(some):
        inputs = [np.stack([values(r[name]) for r in some]).reshape((len(some), *tuple(t.shape)[1:]))
                  for name, t in zip(("features", "extra"), model.inputs)]
        return [np.asarray(p) for p in model.predict(inputs, verbose=0)]

    probs, targets = predict(rows)
    (array_probs, _) = predict(array_rows)
    return {"vector": float(np.max(np.abs(np.stack([values(r.label_prob) for r in rows]) - probs))),
            "double": float(np.max(np.abs(np.asarray([r.target_pred for r in rows]) - targets[:, 0]))),
            "array": float(np.max(np.abs(np.stack([values(r.label_prob) for r in array_rows]) - array_probs)))}


def transform_check(keras_model, df):
    """``fit_check``'s model transforms the DataFrame (its one-hot labels dropped): what
    tests/harness/spark_checks.assert_transform checks."""
    predicted = keras_model.transform(df.drop("label_vec"))
    collected = predicted.orderBy("id").collect()  # once: each action would run the model on every row again
    # a label column of arrays (not vectors) makes that output an array<float> column with the same predictions
    arrays = df.withColumn("label_vec", vector_to_array("label_vec", "float32")).filter("id < 8").coalesce(1)
    on_arrays = keras_model.transform(arrays)
    as_arrays = on_arrays.orderBy("id").collect()
    as_vectors = {r.id: r.label_prob.toArray() for r in collected}
    # Horovod's examples read predictions with toPandas(): the [spark] extra brings pandas
    pandas_rows = len(predicted.select("id", "label_prob").toPandas())
    return {"columns": predicted.columns, "rows": len(collected), "max_diff": differences_from_predict(
                keras_model.getModel(), collected, as_arrays),
            "array_type": dict(on_arrays.dtypes)["label_prob"],
            "array_same": len(as_arrays) == 8 and all(
                isinstance(r.label_prob, list) and np.allclose(r.label_prob, as_vectors[r.id], atol=1e-6)
                for r in as_arrays),
            "accuracy": float(np.mean([int(np.argmax(r.label_prob.toArray())) == r.label for r in collected])),
            "pandas_rows": pandas_rows, "target_type": dict(predicted.dtypes)["target_pred"]}


def run_checks(spark, store_path, too_many=True):
    """Every check on ``spark``'s cluster, the store at ``store_path``: what ``spark_local_check.py`` reports."""
    out = {"seconds": {}}
    clock = [time.monotonic()]

    def lap(name):
        now = time.monotonic()
        out["seconds"][name] = round(now - clock[0], 1)
        clock[0] = now

    df, store, estimator = _data_and_estimator(spark, store_path)
    out["fit"], keras_model, _ = fit_check(spark, store_path)
    lap("fit")
    for name in intermediate_data(store_path):
        store.fs.rm(os.path.join(store_path, name), recursive=True)
    out["transform"] = transform_check(keras_model, df)

    lap("transform")
    model_path = os.path.join(store_path, "saved_model")
    keras_model.save(model_path)
    loaded = hvd.KerasModel.load(model_path)
    pipeline_path = os.path.join(store_path, "pipeline")
    PipelineModel(stages=[keras_model]).save(pipeline_path)
    from_pipeline = PipelineModel.load(pipeline_path)
    few = df.drop("label_vec").filter("id < 3").coalesce(1)
    first = [r.label_prob.toArray().tolist() for r in keras_model.transform(few).orderBy("id").collect()]
    again = [r.label_prob.toArray().tolist() for r in loaded.transform(few).orderBy("id").collect()]
    piped = [r.label_prob.toArray().tolist() for r in from_pipeline.transform(few).orderBy("id").collect()]
    out["persist"] = {"loaded_same": bool(np.allclose(first, again, atol=1e-6)),
                      "pipeline_same": bool(np.allclose(first, piped, atol=1e-6)),
                      "output_cols": loaded.getOutputCols(), "type": type(from_pipeline.stages[0]).__name__,
                      "fit_seconds_kept": loaded.getFitSeconds() == keras_model.getFitSeconds()}
    try:
        keras_model.save(model_path)
        out["persist"]["save_twice"] = None
    except Exception as exc:  # pyspark's own writer may raise its own error before ours
        out["persist"]["save_twice"] = str(exc).splitlines()[0]

    lap("persist")
    if too_many:
        out["too_many"] = error_of(lambda: hvd_spark.run(allreduce_rank, num_proc=3, verbose=0))
        secrets = {"UNRELATED_API_TOKEN": "tok-never-for-ranks", "AWS_SECRET_ACCESS_KEY": "aws-never-for-ranks"}
        os.environ.update(secrets)
        try:
            out["environment"] = hvd_spark.run(rank_sees, num_proc=2, verbose=0)
        finally:
            for name in secrets:
                del os.environ[name]
        lap("environment")
    empty = df.limit(0)
    out["errors"] = {
        "missing": error_of(lambda: estimator(feature_cols=["pixels"]).fit(df)),
        "string": error_of(lambda: estimator(feature_cols=["features", "name"], run_id="bad").fit(
            df.withColumn("name", df["id"].cast("string")))),
        "empty": error_of(lambda: estimator(run_id="bad").fit(empty)),
        "length": error_of(lambda: estimator(feature_cols=["extra", "extra"], run_id="bad").fit(df)),
        "unknown": error_of(lambda: estimator(epoch=3)),
        "petastorm": error_of(lambda: estimator(transformation_fn=lambda rows: rows)),
        "run_id_path": error_of(lambda: estimator(run_id="../../x").fit(df)),
        "other_job": error_of(lambda: estimator(batch_size=8).fit(df)),  # run1 holds the first fit's checkpoints
        "executable": error_of(lambda: estimator(
            num_proc=None, backend=SparkBackend(num_proc=2, executable="/no/such/python"), max_retries=1,
            run_id="bad").fit(df)),
    }
    bad = bad_rows(spark, df)
    for name, bad_df in bad.items():
        out["errors"][name] = error_of(lambda bad_df=bad_df: estimator(run_id="bad").fit(bad_df))
    out["nan_allowed"] = error_of(lambda: survey(bad["nan_features"], ["features"], allow_nan=True))
    with RunLock(store, "held"):
        out["errors"]["held"] = error_of(lambda: estimator(run_id="held").fit(df))
    reader = estimator(reader_pool_type="process", mp_start_method="spawn")
    out["no_effect"] = {"pool": reader.getReaderPoolType(), "start": reader.setMpStartMethod("fork").getMpStartMethod()}
    out["left"] = [n for n in intermediate_data(store_path) if ".run1." not in n]  # the refused fits wrote none
    lap("errors")
    return out

