"""JsonlMetricsLogger: one line per epoch in metrics.jsonl, never an epoch twice after a resume."""
from hvdkeras.callbacks import JsonlMetricsLogger
from hvdkeras.common.workdir import read_metrics
from tests.unit.helpers import attach, small_bn_model


def test_jsonl_logger_writes_one_line_per_epoch_and_drops_lines_after_resume_point(hvd_single, tmp_path):
    path = str(tmp_path / "metrics.jsonl")
    model = small_bn_model()
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
