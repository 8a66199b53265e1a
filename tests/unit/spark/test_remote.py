"""hvdkeras.spark.keras.remote: what rank 0 returns when Horovod's ``checkpoint_callback`` saved the best model."""
import os

import numpy as np
import pytest

pytest.importorskip("pyspark")

from hvdkeras.callbacks.model_checkpoint import BestModelCheckpoint  # noqa: E402
from hvdkeras.runtime.compat import keras  # noqa: E402
from hvdkeras.spark.keras import remote  # noqa: E402


def test_the_best_saved_model_loads_with_the_estimators_custom_objects(tmp_path):
    # Horovod's Rossmann example: the output's activation is a function of the script, which Keras saves by name
    # only; the estimator's custom_objects name it (a function defined here, as in a script, imports from nowhere).
    def act_scaled(x):
        return keras.activations.sigmoid(x) * 3.0

    def model():
        return keras.Sequential([keras.Input((2,)), keras.layers.Dense(1, activation=act_scaled)])

    best, trained = model(), model()
    best.set_weights([np.full((2, 1), 0.5, "float32"), np.full((1,), 0.25, "float32")])
    callback = BestModelCheckpoint(monitor="val_loss")
    path = remote._place_checkpoint_callback(callback, str(tmp_path))
    os.makedirs(os.path.dirname(path))  # the checkpoint callback's folder, which the rank's trainer makes
    best.save(path)

    remote._load_saved(trained, path, callback, {"act_scaled": act_scaled})

    for got, want in zip(trained.get_weights(), best.get_weights()):
        np.testing.assert_array_equal(got, want)
