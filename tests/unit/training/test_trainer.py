"""hvdkeras.training.trainer: its callback list, the driver contract, and a short single-process run."""
import os
import re
import time
import warnings

import pytest

from hvdkeras import callbacks as hc
from hvdkeras import config as config_lib
from hvdkeras.common import scaling, stack
from hvdkeras.common.errors import ConfigError
from hvdkeras.common.stack import Stack
from hvdkeras.common.workdir import Workdir, read_metrics
from hvdkeras.training import assembly
from hvdkeras.training import trainer as trainer_lib
from tests.unit.helpers import (
    callback_names,
    config_file,
    hand_built_trainer,
    regression_model,
    tensorboard_scalars,
)

EPOCHS = 2


def tiny_config(*overrides):
    return config_lib.load(config_file("digits.yaml"), [
        f"trainer.epochs={EPOCHS}", "trainer.steps_per_epoch=3", "trainer.verbose=0", "checkpoint.enabled=false",
        "trainer.check_weights_agree=false", "data.global_batch_size=16", "schedule.warmup_epochs=1",
        *overrides])


# --------------------------------------------------------------------------- the parts


@pytest.mark.parametrize("override, message", [
    ("model.name=vgg", "model.name in --set model.name=vgg must be one of mlp, resnet20, resnet50, resnet56,"
                       " small_cnn or applications.<Name> of keras.applications; received: 'vgg'"),
    ("optimizer.name=lamb", "optimizer.name in --set optimizer.name=lamb must be one of adam, adamw, rmsprop, sgd;"
                            " received: 'lamb'"),
])
def test_from_config_names_where_an_unknown_name_came_from(hvd_single, tmp_path, restore_environment, override,
                                                          message):
    with pytest.raises(ConfigError) as err:
        trainer_lib.Trainer.from_config(tiny_config(override), str(tmp_path / "run"))
    assert str(err.value) == message
    assert not (tmp_path / "run").exists()


# --------------------------------------------------------------------------- the callback list


def test_tensorboard_callback_only_when_on_and_after_the_log_writers(hvd_single, tmp_path):
    off = callback_names(hand_built_trainer(tiny_config(), str(tmp_path)).callbacks(0.1, 3, 1))
    assert "TensorBoard" not in off
    on = callback_names(hand_built_trainer(tiny_config("trainer.tensorboard=true"), str(tmp_path)).callbacks(0.1, 3, 1))
    # after metric averaging and the callbacks that put lr and images_per_sec into the logs
    assert on.index("TensorBoard") > max(on.index("MetricAverageCallback"), on.index("ThroughputLogger"),
                                         on.index("LearningRateScheduleCallback"))
    assert not os.path.exists(tmp_path / "tensorboard")


def test_callbacks_end_with_the_trainers_backup_and_count_from_the_positions_start(tmp_path):
    cfg = tiny_config("checkpoint.enabled=true")
    backup = assembly.make_backup(cfg, str(tmp_path))
    trainer = hand_built_trainer(cfg, str(tmp_path), size=2, backup=backup)
    trainer.position.continue_at(1, 2)
    cbs = trainer.callbacks(0.1, 3, 2)
    assert cbs[-1] is backup
    rate = [c for c in cbs if isinstance(c, (hc.LearningRateWarmupCallback, hc.LearningRateScheduleCallback))]
    assert [c.initial_batch for c in rate] == [2, 2] and rate[0].size == 2
    jsonl, = [c for c in cbs if isinstance(c, hc.JsonlMetricsLogger)]
    assert jsonl.path == Workdir(str(tmp_path)).metrics
    assert not os.listdir(tmp_path)  # building the trainer and its callbacks wrote nothing


def test_resnet_yaml_schedule_at_chosen_steps(hvd_single, tmp_path):
    """resnet.yaml on 8 ranks: warmup 0.1 -> 0.4 over 5 epochs (Goyal et al.), then x0.1 at epochs 30, 60 and 80,
    to epoch 90."""
    cfg = config_lib.load(config_file("resnet.yaml"))
    size, steps = 8, 1281167 // cfg.data.global_batch_size
    scaled = scaling.scaled_learning_rate(cfg.optimizer, cfg.data, cfg.data.global_batch_size)
    assert scaled == pytest.approx(0.4)
    trainer = hand_built_trainer(cfg, str(tmp_path), size=size, scaled_lr=scaled)
    cbs = [cb for cb in trainer.callbacks(scaled, steps, size)
           if isinstance(cb, (hc.LearningRateWarmupCallback, hc.LearningRateScheduleCallback))]
    model = regression_model()
    for cb in cbs:
        cb.set_model(model)
        cb.set_params({"epochs": 90, "steps": steps})
        cb.on_train_begin()

    def lr_at(epoch, batch):
        for cb in cbs:
            cb.on_epoch_begin(epoch)
        for cb in cbs:
            cb.on_train_batch_begin(batch)
        return float(model.optimizer.learning_rate.numpy())

    warm = lambda e: 0.1 + (0.4 - 0.1) * e / 5  # noqa: E731
    expected = {
        (0, 0): 0.1,
        (0, 600): warm(600 / steps),
        (2, 0): warm(2),
        (4, steps - 1): warm(4 + (steps - 1) / steps),
        (5, 0): 0.4,
        (29, steps - 1): 0.4,
        (30, 0): 0.04,
        (59, steps - 1): 0.04,
        (60, 0): 0.004,
        (80, 0): 0.0004,
        (89, steps - 1): 0.0004,  # the last step
    }
    for (epoch, batch), lr in expected.items():
        assert lr_at(epoch, batch) == pytest.approx(lr, rel=1e-5), (epoch, batch)


# --------------------------------------------------------------------------- a run


def test_trainer_writes_lr_and_images_per_sec_to_tensorboard(hvd_single, tmp_path, restore_environment):
    workdir = str(tmp_path / "run")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer_lib.Trainer.from_config(tiny_config("trainer.tensorboard=true"), workdir).fit()
    # Keras 3 warns when fit's shuffle=True meets a dataset; the trainer's datasets shuffle themselves
    assert not [w for w in caught if "shuffle" in str(w.message)], [str(w.message) for w in caught]

    train = tensorboard_scalars(os.path.join(workdir, "tensorboard", "train"))
    val = tensorboard_scalars(os.path.join(workdir, "tensorboard", "validation"))
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
    saved = config_lib.read_yaml(os.path.join(workdir, "config.yaml"))  # the resolved config, host choices in
    assert saved["horovod"]["cycle_time_ms"] is None and saved["trainer"]["epochs"] == EPOCHS
    # each chosen value with its reason, and what the job resolved that is not a key; and it loads again
    text = open(os.path.join(workdir, "config.yaml")).read()
    assert re.search(r"\n  intra_op_threads: \d+  # \(auto\) cores // ranks on this host = \d+ // 1\n", text)
    assert "  compression: none\n" in text
    assert "#   learning rate 0.025 = 0.05 x global batch 16 / optimizer.base_batch_size 32" in text
    assert "#   steps per epoch 3: trainer.steps_per_epoch" in text
    import tensorflow as tf

    recorded = Stack.from_config_text(text)  # the stack that trained it, as the running TensorFlow says
    assert recorded == stack.current() and recorded.tensorflow == tf.__version__
    config_lib.from_dict(saved, source="config.yaml")


def _train_end_recorder():
    """A Keras callback noting when training ended (``.ended``, after the last epoch's validation)."""
    from hvdkeras.runtime.compat import keras

    class TrainEnd(keras.callbacks.Callback):
        ended = None

        def on_train_end(self, logs=None):
            self.ended = time.monotonic()

    return TrainEnd()


def test_fit_returns_at_once_after_its_last_epoch(hvd_single, tmp_path, restore_environment):
    """A hang check, not a timing: ``fit`` returns within seconds of its last epoch (it returns in
    milliseconds). The trainer's ``fit`` once ended with a 13-15 s idle pause: tf.data's autotuner holding
    the training iterator's end (``data.autotune=true``; test_data.py's iterator test has the cause)."""
    os.makedirs(tmp_path / "run")
    trainer = trainer_lib.Trainer.from_config(tiny_config(), str(tmp_path / "run"))
    end = _train_end_recorder()
    trainer.fit_range(trainer.data, 0, 0, trainer.scaled_lr, 1, extra_callbacks=lambda: [end])
    returned = time.monotonic() - end.ended
    assert returned < 5.0, f"fit returned {returned:.1f} s after its last epoch ended"
