"""AverageModelStatisticsCallback in one process: only non-trainable floating-point statistics are touched."""
import numpy as np

from hvdkeras.callbacks import AverageModelStatisticsCallback
from hvdkeras.callbacks.model_statistics import statistics_variables
from tests.unit.helpers import attach, small_bn_model


def test_model_statistics_sync_touches_only_non_trainable_floats(hvd_single):
    model = small_bn_model()
    cb = attach(AverageModelStatisticsCallback(), model)
    before = [v.numpy().copy() for v in model.trainable_variables]
    cb.on_epoch_begin(0)
    cb.on_epoch_end(0, {})
    assert all(np.array_equal(a, v.numpy()) for a, v in zip(before, model.trainable_variables))


def test_the_statistics_are_the_batch_norm_moving_mean_and_variance():
    model = small_bn_model()
    names = sorted(v.name.split("/")[-1].split(":")[0] for v in statistics_variables(model))
    assert names == ["moving_mean", "moving_variance"]
