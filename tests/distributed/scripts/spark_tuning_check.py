"""Spark ML's tuning and persistence with the KerasEstimator (``spark_local_check.py --tuning``, test_spark_tuning.py).

:func:`run_tuning_checks` on a real Spark, as a Spark ML user tunes: a ``Pipeline`` of a ``VectorAssembler`` and the
estimator, saved and loaded unfitted; ``TrainValidationSplit`` over that pipeline with a grid of epochs and
optimizers (the learning rate), ``parallelism=2``, a Spark ML evaluator reading the model's predictions, and its
best ``PipelineModel`` saved and loaded. ``CrossValidator`` calls the estimator's ``fit`` the same way, once per
fold and parameter map: it is not run here, to keep the suite's time. The fits train in the driver (a user's backend, as
Horovod's own tests do): what is tested is the estimator inside Spark ML's machinery, not the ranks' start, which
every other Spark check covers. The backend counts the fits that run at once.
"""
import os
import threading
import time

import numpy as np
from pyspark.ml import Pipeline, PipelineModel
from pyspark.ml.evaluation import BinaryClassificationEvaluator
from pyspark.ml.feature import VectorAssembler
from pyspark.ml.tuning import TrainValidationSplit

import hvdkeras.spark.keras as hvd
from hvdkeras.runtime.compat import keras
from hvdkeras.spark.common.store import Store


class CountingBackend:
    """A user's backend that trains in the driver and counts the fits that run at the same time."""

    def __init__(self):
        self.running, self.most, self.fits = 0, 0, 0
        self.lock = threading.Lock()

    def run(self, fn, args=(), kwargs=None, env=None):
        with self.lock:
            self.running += 1
            self.fits += 1
            self.most = max(self.most, self.running)
        try:
            time.sleep(0.2)  # long enough for a second fit started beside it to be counted
            return [fn(*args, **(kwargs or {}))]
        finally:
            with self.lock:
                self.running -= 1

    def num_processes(self):
        return 1


def run_tuning_checks(spark, work):
    """Every check, the store under ``work``: what ``spark_local_check.py`` reports."""
    began, out = time.monotonic(), {"seconds": {}}
    rng = np.random.default_rng(0)
    x = rng.normal(size=(96, 3))
    y = (x @ np.array([1.0, -2.0, 0.5]) > 0).astype(float)
    df = spark.createDataFrame([(*map(float, row), float(t)) for row, t in zip(x, y)], ["a", "b", "c", "y"])
    backend, store = CountingBackend(), Store.create(os.path.join(work, "store"))
    keras.utils.set_random_seed(1)
    est = hvd.KerasEstimator(backend=backend, store=store, optimizer=keras.optimizers.SGD(0.1),
                             model=keras.Sequential([keras.Input((3,)), keras.layers.Dense(1, activation="sigmoid")]),
                             loss="binary_crossentropy", feature_cols=["features"], label_cols=["y"], batch_size=16,
                             epochs=1, verbose=0, random_seed=1)
    assembler = VectorAssembler(inputCols=["a", "b", "c"], outputCol="features")
    pipeline = Pipeline(stages=[assembler, est])
    pipeline.write().overwrite().save(os.path.join(work, "pipeline"))
    loaded = Pipeline.load(os.path.join(work, "pipeline"))
    (_, loaded_est) = loaded.getStages()
    out["unfitted"] = {"stages": [type(s).__name__ for s in loaded.getStages()], "epochs": loaded_est.getEpochs(),
                       "feature_cols": loaded_est.getFeatureCols(), "loss": loaded_est.getLoss()}
    evaluator = BinaryClassificationEvaluator(rawPredictionCol="y__output", labelCol="y")
    grid = [{est.epochs: 1, est.optimizer: keras.optimizers.SGD(0.01)},  # the learning rate through the optimizer
            {est.epochs: 4, est.optimizer: keras.optimizers.SGD(0.5)}]
    tvs = TrainValidationSplit(estimator=pipeline, estimatorParamMaps=grid, evaluator=evaluator, trainRatio=0.75,
                               parallelism=2, seed=1).fit(df)
    best = tvs.bestModel
    out["tvs"] = {"metrics": tvs.validationMetrics, "best": [type(s).__name__ for s in best.stages],
                  "best_epochs": len(best.stages[-1].getHistory()["loss"]),
                  "auc": evaluator.evaluate(best.transform(df))}
    best.write().overwrite().save(os.path.join(work, "best"))
    out["tvs"]["reloaded_auc"] = evaluator.evaluate(PipelineModel.load(os.path.join(work, "best")).transform(df))
    out["fits"], out["most_at_once"] = backend.fits, backend.most
    out["runs"] = len(os.listdir(os.path.join(work, "store", "runs")))
    out["seconds"]["all"] = round(time.monotonic() - began, 1)
    return out
