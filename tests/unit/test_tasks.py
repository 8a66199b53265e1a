"""hvdkeras.tasks: the trainer is handed a task; image classification is the config path's, and a task unlike it
(regression on vectors, its own loss, metrics and unit) trains through the same trainer, drivers and files."""
import numpy as np
import pytest

from hvdkeras import compat, tasks
from hvdkeras import config as config_lib
from hvdkeras import data as data_lib
from hvdkeras.workdir import read_metrics
from tests.unit.helpers import config_file

keras = compat.keras


class Regression(tasks.Task):
    """y = x . w on 5 features: a task with no image, no class and no accuracy."""

    throughput_unit = "rows"

    def datasets(self, config, data_config, shard, seed, steps, threads):
        rng = np.random.RandomState(0)
        x = rng.normal(size=(96, 5)).astype(np.float32)
        y = (x @ np.arange(1, 6, dtype=np.float32)).astype(np.float32)
        return data_lib.in_memory(x[:64], y[:64], x[64:], y[64:], data_config, shard, seed, steps, num_classes=0,
                                  threads=threads)

    def model(self, config, data):
        return keras.Sequential([keras.Input(data.input_shape), keras.layers.Dense(1), keras.layers.Reshape(())])

    def loss(self, config, data):
        return keras.losses.MeanSquaredError(name="loss")

    def metrics(self, config, data):
        return [keras.metrics.MeanAbsoluteError(name="mae")]


def test_image_classification_is_the_config_paths_task():
    cfg = config_lib.load(config_file("digits.yaml"), [])
    task = tasks.for_config(cfg)
    assert isinstance(task, tasks.ImageClassification) and task.throughput_unit == "images"
    data = task.datasets(cfg, cfg.data, data_lib.Shard(0, 1), 42, None, None)
    assert (data.input_shape, data.num_classes) == ((8, 8, 1), 10)
    assert task.model(cfg, data).output_shape == (None, 10)
    assert [m.name for m in task.metrics(cfg, data)] == ["accuracy"]


def test_the_interface_says_what_a_task_must_give():
    with pytest.raises(NotImplementedError):
        tasks.Task().model(None, None)


def test_a_task_of_ones_own_trains_through_the_trainer(hvd_single, tmp_path, restore_environment):
    from hvdkeras.trainer import Trainer

    cfg = config_lib.load(config_file("digits.yaml"), [
        "trainer.epochs=3", "trainer.verbose=0", "data.global_batch_size=16", "schedule.warmup_epochs=0",
        "optimizer.name=adam", "optimizer.learning_rate=0.05", "checkpoint.enabled=true"])
    workdir = str(tmp_path / "run")
    final = Trainer.from_config(cfg, workdir, task=Regression()).fit()
    assert set(final) >= {"loss", "mae", "val_loss", "val_mae"}
    records = read_metrics(f"{workdir}/metrics.jsonl")
    assert [r["epoch"] for r in records] == [1, 2, 3]
    assert all(r["rows_per_sec"] > 0 for r in records) and "images_per_sec" not in records[0]
    assert records[-1]["loss"] < records[0]["loss"]  # it learns
    # the rerun resumes from the task's own checkpoint: nothing left to train
    again = Trainer.from_config(cfg, workdir, task=Regression()).fit()
    assert again["val_mae"] == pytest.approx(final["val_mae"], rel=1e-5)
