"""trainer.tensorboard: rank 0's event files under <workdir>/tensorboard hold the epoch metrics, lr and images/s."""
import glob
import os

import pytest
import tensorflow as tf

from hvdkeras import config as config_lib

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EPOCHS = 2


@pytest.fixture
def restore_environment():
    """Trainer exports HOROVOD_* settings into os.environ; keep them out of the other tests."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


def scalars(directory):
    """{tag: {step: value}} of the scalar summaries in the event files of ``directory``."""
    found = {}
    for path in sorted(glob.glob(os.path.join(directory, "events.out.tfevents.*"))):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.metadata.plugin_data.plugin_name == "scalars":
                    found.setdefault(value.tag, {})[event.step] = float(tf.make_ndarray(value.tensor))
    return found


def tiny_config(*overrides):
    return config_lib.load(os.path.join(REPO, "configs", "digits.yaml"), [
        f"trainer.epochs={EPOCHS}", "trainer.steps_per_epoch=3", "trainer.verbose=0", "checkpoint.enabled=false",
        "trainer.check_weights_agree=false", "data.global_batch_size=16", "schedule.warmup_epochs=1",
        *overrides])


def test_config_switch_defaults_off_and_is_keras_only():
    assert config_lib.load().trainer.tensorboard is False
    assert tiny_config("trainer.tensorboard=true").trainer.tensorboard is True
    with pytest.raises(config_lib.ConfigError, match="trainer.tensorboard .* must be false with trainer.api=estimator"):
        config_lib.load(None, ["trainer.tensorboard=true", "trainer.api=estimator"])


def test_trainer_writes_lr_and_images_per_sec_to_tensorboard(hvd_single, tmp_path, restore_environment):
    from hvdkeras.callbacks.metrics_logger import read_metrics
    from hvdkeras.trainer import Trainer

    workdir = str(tmp_path / "run")
    Trainer(tiny_config("trainer.tensorboard=true"), workdir).fit()

    train = scalars(os.path.join(workdir, "tensorboard", "train"))
    val = scalars(os.path.join(workdir, "tensorboard", "validation"))
    for tag in ("epoch_loss", "epoch_accuracy", "epoch_lr", "epoch_images_per_sec"):
        assert sorted(train[tag]) == list(range(EPOCHS)), tag
    assert sorted(val["epoch_loss"]) == sorted(val["epoch_accuracy"]) == list(range(EPOCHS))
    # the same numbers as metrics.jsonl (the global, end-of-epoch values)
    records = read_metrics(os.path.join(workdir, "metrics.jsonl"))
    for r in records:
        step = r["epoch"] - 1
        assert train["epoch_lr"][step] == pytest.approx(r["lr"], rel=1e-6)
        assert train["epoch_images_per_sec"][step] == pytest.approx(r["images_per_sec"], rel=1e-6)
        assert train["epoch_loss"][step] == pytest.approx(r["loss"], rel=1e-6)
        assert val["epoch_accuracy"][step] == pytest.approx(r["val_accuracy"], rel=1e-6)
    assert train["epoch_images_per_sec"][0] > 0
    assert train["epoch_lr"][1] < train["epoch_lr"][0]  # the cosine decay after a 1-epoch warmup


def test_tensorboard_callback_only_when_on_and_after_the_log_writers(hvd_single, tmp_path):
    from hvdkeras import trainer as trainer_lib

    cfg = tiny_config()
    assert "TensorBoard" not in [type(c).__name__ for c in trainer_lib.callbacks_for(cfg, 0.1, 3, 1, str(tmp_path))]
    on = [type(c).__name__ for c in trainer_lib.callbacks_for(tiny_config("trainer.tensorboard=true"), 0.1, 3, 1,
                                                                str(tmp_path))]
    # after metric averaging and the callbacks that put lr and images_per_sec into the logs
    assert on.index("TensorBoard") > max(on.index("MetricAverageCallback"), on.index("ThroughputLogger"),
                                         on.index("LearningRateScheduleCallback"))
    assert not os.path.exists(tmp_path / "tensorboard")


@pytest.mark.parametrize("size", [1, 2])
def test_rank_local_evaluation_scalars_only_on_one_rank(hvd_single, tmp_path, monkeypatch, size):
    """Keras writes evaluation_<metric>_vs_iterations from the un-averaged validation logs: kept on one rank only."""
    import numpy as np

    from hvdkeras import callbacks as hc
    from hvdkeras import distributed

    monkeypatch.setattr(distributed, "size", lambda: size)
    model = tf.keras.Sequential([tf.keras.layers.Dense(2, activation="softmax", input_shape=(3,))])
    model.compile("sgd", "sparse_categorical_crossentropy", metrics=["accuracy"])
    x, y = np.random.RandomState(0).rand(16, 3).astype("float32"), np.arange(16) % 2
    model.fit(x, y, epochs=2, batch_size=8, verbose=0, validation_data=(x, y),
              callbacks=[hc.TensorBoard(str(tmp_path / "tb"))])
    val = scalars(str(tmp_path / "tb" / "validation"))
    assert {"epoch_loss", "epoch_accuracy"} <= set(val)
    assert ("evaluation_loss_vs_iterations" in val) == (size == 1)


def test_tensorboard_without_the_package_is_one_line_saying_what_to_install(monkeypatch, tmp_path):
    from hvdkeras import compat
    from hvdkeras.callbacks import TensorBoard

    monkeypatch.setattr(compat, "TENSORBOARD_INSTALLED", False)
    with pytest.raises(ImportError) as err:
        TensorBoard(log_dir=str(tmp_path))
    assert str(err.value).endswith("does not install: pip install tensorboard") and "\n" not in str(err.value)
