"""ThroughputLogger in one process: examples per second from the loss tracker, step and training time."""
from hvdkeras import callbacks as hc
from tests.unit.helpers import model_and_data


def test_throughput_logger_counts_examples_from_the_loss_tracker(hvd_single):
    model, x, y = model_and_data(n=40)
    tp = hc.ThroughputLogger(unit="images")
    history = model.fit(x, y, epochs=2, batch_size=8, verbose=0, validation_data=(x[:8], y[:8]), callbacks=[tp])
    assert history.history["images_per_sec"][-1] > 0
    assert history.history["images_per_sec_per_rank"][-1] == history.history["images_per_sec"][-1]  # one rank
    assert 0 < history.history["step_time_s"][-1] <= history.history["train_time_s"][-1]
    assert 0 < history.history["cpu_cores_per_rank"][-1] < 64  # CPU seconds over training seconds
