"""default_callbacks: the recommended list, in its documented order."""
import pytest

from hvdkeras import callbacks as hc
from tests.unit.helpers import callback_names


def test_default_callbacks_order(hvd_single):
    cbs = hc.default_callbacks(initial_lr=0.1, warmup_epochs=2, lr_schedule=0.5, backup="/tmp/b",
                               metrics_file="/tmp/m.jsonl", tensorboard_dir="/tmp/tb")
    names = callback_names(cbs)
    assert names == ["BroadcastGlobalVariablesCallback", "DivergenceGuard", "AverageModelStatisticsCallback",
                     "MetricAverageCallback", "TerminateOnNaN", "LearningRateWarmupCallback",
                     "LearningRateScheduleCallback", "ThroughputLogger", "ProgbarLogger", "TensorBoard",
                     "JsonlMetricsLogger", "BackupAndRestore"]
    with pytest.raises(ValueError, match="lr_schedule needs initial_lr"):
        hc.default_callbacks(lr_schedule=0.5)


def test_initial_batch_reaches_both_learning_rate_callbacks():
    cbs = hc.default_callbacks(initial_lr=0.1, warmup_epochs=1, steps_per_epoch=10, initial_batch=3, size=2)
    rate = [c for c in cbs if isinstance(c, (hc.LearningRateWarmupCallback, hc.LearningRateScheduleCallback))]
    assert callback_names(rate) == ["LearningRateWarmupCallback", "LearningRateScheduleCallback"]
    assert [c.initial_batch for c in rate] == [3, 3] and [c.steps_per_epoch for c in rate] == [10, 10]
    assert callback_names(hc.default_callbacks(initial_lr=0.1, warmup_epochs=0, terminate_on_nan=False,
                                               progress=False)) == [
        "BroadcastGlobalVariablesCallback", "DivergenceGuard", "AverageModelStatisticsCallback",
        "MetricAverageCallback", "LearningRateScheduleCallback", "ThroughputLogger"]
