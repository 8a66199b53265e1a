"""hvdkeras.training.tasks: the trainer is handed a task; image classification is the config path's, and a task
unlike it (regression on vectors, its own loss, metrics and unit) trains through the same trainer, drivers and files."""
import os
import sys
import textwrap

import numpy as np
import pytest

from hvdkeras import config as config_lib
from hvdkeras.common.workdir import read_metrics
from hvdkeras.runtime import compat
from hvdkeras.training import data as data_lib
from hvdkeras.training import tasks
from tests.unit.helpers import REPO, config_file

keras = compat.keras


class Regression(tasks.Task):
    """y = x . w on 5 features: a task with no image, no class and no accuracy."""

    throughput_unit = "rows"

    def datasets(self, config, shard, steps, threads):
        rng = np.random.RandomState(0)
        x = rng.normal(size=(96, 5)).astype(np.float32)
        y = (x @ np.arange(1, 6, dtype=np.float32)).astype(np.float32)
        return data_lib.in_memory(x[:64], y[:64], x[64:], y[64:], config.data, shard, config.runtime.seed, steps,
                                  num_classes=0,
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
    assert isinstance(task, tasks.ConfigTask) and task.throughput_unit == "images"
    data = task.datasets(cfg, data_lib.Shard(0, 1), None, None)
    assert (data.input_shape, data.num_classes) == ((8, 8, 1), 10)
    assert task.model(cfg, data).output_shape == (None, 10)
    assert [m.name for m in task.metrics(cfg, data)] == ["accuracy"]


def test_the_interface_says_what_a_task_must_give():
    class NoLoss(tasks.Task):
        def datasets(self, config, shard, steps, threads): ...
        def model(self, config, data): ...
        def metrics(self, config, data): ...

    with pytest.raises(TypeError, match="abstract method.*loss"):
        NoLoss()


def test_a_task_of_ones_own_trains_through_the_trainer(hvd_single, tmp_path, restore_environment):
    from hvdkeras.training.trainer import Trainer

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


# ------------------------------------------------------------------ your own pieces by import path

TABULAR = os.path.join(REPO, "examples", "own_model_and_data", "tabular.yaml")


@pytest.fixture
def clean_imports(monkeypatch):
    """sys.path and the user modules as they were: the config's folder is appended when a piece is imported."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    for name in ("tabular_task", "own_regression", "shop_task"):
        monkeypatch.delitem(sys.modules, name, raising=False)


def test_your_own_data_model_and_metric_train_and_resume(hvd_single, tmp_path, restore_environment, clean_imports):
    from hvdkeras.training.trainer import Trainer

    workdir = str(tmp_path / "run")
    sets = ["trainer.verbose=0", "checkpoint.keep=0"]
    trainer = Trainer.from_config(config_lib.load(TABULAR, sets + ["trainer.epochs=2"]), workdir)
    assert trainer.parts.task.throughput_unit == "examples"
    assert trainer.data.input_shape == (6,) and trainer.data.steps_per_epoch == 1200 // 64
    assert trainer.model.output_shape == (None, 3)
    first = trainer.fit()
    assert set(first) >= {"loss", "accuracy", "top2", "val_loss", "val_accuracy", "val_top2"}
    final = Trainer.from_config(config_lib.load(TABULAR, sets + ["trainer.epochs=4"]), workdir).fit()
    records = read_metrics(f"{workdir}/metrics.jsonl")
    assert [r["epoch"] for r in records] == [1, 2, 3, 4]  # resumed after epoch 2: none missing, none repeated
    assert all(r["examples_per_sec"] > 0 for r in records) and "images_per_sec" not in records[0]
    assert final["val_accuracy"] > 0.8 and final["val_top2"] >= final["val_accuracy"]  # three separable clusters


def _own_regression(tmp_path, body):
    (tmp_path / "own_regression.py").write_text(textwrap.dedent("""
        import numpy as np
        import tensorflow as tf

        def data(n=96):
            x = np.random.RandomState(0).normal(size=(n, 5)).astype(np.float32)
            y = (x @ np.arange(1, 6, dtype=np.float32)).astype(np.float32)
            pairs = tf.data.Dataset.from_tensor_slices
            return pairs((x[:64], y[:64])), pairs((x[64:], y[64:]))

        def model():
            return tf.keras.Sequential([tf.keras.Input((5,)), tf.keras.layers.Dense(1), tf.keras.layers.Reshape(())])
    """) + textwrap.dedent(body))
    return str(tmp_path / "c.yaml")


def test_keras_names_for_the_loss_and_metrics_of_a_regression(hvd_single, tmp_path, restore_environment,
                                                               clean_imports):
    from hvdkeras.training.trainer import Trainer

    path = _own_regression(tmp_path, "")
    (tmp_path / "c.yaml").write_text(textwrap.dedent("""
        data: {name: "own_regression:data", global_batch_size: 16}
        model: {name: "own_regression:model"}
        optimizer: {name: adam, learning_rate: 0.05, lr_scaling: none}
        trainer: {epochs: 3, loss: mse, metrics: [mae], verbose: 0}
        checkpoint: {enabled: false}
    """))
    final = Trainer.from_config(config_lib.load(path, []), str(tmp_path / "run")).fit()
    assert set(final) >= {"loss", "mae", "val_loss", "val_mae"}
    records = read_metrics(str(tmp_path / "run" / "metrics.jsonl"))
    assert records[-1]["loss"] < records[0]["loss"]


@pytest.mark.parametrize("body, sets, expected", [
    ("def bad_model():\n    return 'a model'\n", ["model.name=own_regression:bad_model"],
     "model.name in --set model.name=own_regression:bad_model must return an uncompiled Keras model (keras.Model);"
     " received: 'own_regression:bad_model returned a str'"),
    ("def one():\n    return data()[0]\n", ["data.name=own_regression:one"],
     "data.name in --set data.name=own_regression:one must return (train, validation): two tf.data.Datasets of"
     " (features, label) pairs, validation None for none; received:"
     " 'own_regression:one returned a _TensorSliceDataset'"),
    ("def endless():\n    train, val = data()\n    return train.repeat(), val\n", ["data.name=own_regression:endless"],
     "data.name in --set data.name=own_regression:endless must return a finite train dataset: one pass over the"
     " examples, which hvdkeras shuffles and repeats per epoch (leave out .repeat()); received:"
     " 'own_regression:endless returned an infinite train dataset'"),
    ("def filtered():\n    train, val = data()\n    return train.filter(lambda x, y: y > 0), val\n",
     ["data.name=own_regression:filtered"],
     "data.name in --set data.name=own_regression:filtered must return a train dataset of known size (tf.data"
     " cannot tell it without reading it, e.g. after filter() or from a generator): add"
     " .apply(tf.data.experimental.assert_cardinality(n)); received: 'own_regression:filtered returned a train"
     " dataset of unknown size'"),
    ("def features_only():\n    train, val = data()\n    return train.map(lambda x, y: x), val\n",
     ["data.name=own_regression:features_only"], "data.name in --set data.name=own_regression:features_only must"
     " return a train dataset of (features, label) pairs or (features, label, sample_weight) triples, unbatched;"
     " received: 'own_regression:features_only returned train elements TensorSpec(shape=(5,), dtype=tf.float32,"
     " name=None)'"),
    ("", ["trainer.loss=mean_cubed_error"], "trainer.loss in --set trainer.loss=mean_cubed_error must be a Keras loss"
     " name (keras.losses.get knows it) or your own package.module:function; received: 'mean_cubed_error'"),
])
def test_your_own_pieces_fail_in_one_line_naming_the_key(hvd_single, tmp_path, restore_environment, clean_imports,
                                                         body, sets, expected):
    from hvdkeras.training.trainer import Trainer

    path = _own_regression(tmp_path, body)
    (tmp_path / "c.yaml").write_text(textwrap.dedent("""
        data: {name: "own_regression:data", global_batch_size: 16}
        model: {name: "own_regression:model"}
        trainer: {epochs: 1, loss: mse, metrics: [mae], verbose: 0}
    """))
    with pytest.raises(config_lib.ConfigError) as err:
        Trainer.from_config(config_lib.load(path, sets), str(tmp_path / "run"))
    assert str(err.value) == expected


# ------------------------------------------------------------------ several inputs and outputs

SHOP = os.path.join(REPO, "examples", "own_model_and_data", "shop.yaml")
SHOP_SETS = ["trainer.verbose=0", "trainer.epochs=1", "trainer.steps_per_epoch=2", "trainer.export=false",
             "checkpoint.enabled=false", "data.args.validation_examples=37"]


def _task(outputs, *sets):
    cfg = config_lib.load(None, list(sets))
    task = tasks.ConfigTask(cfg)
    task.outputs = outputs  # as model() leaves them
    return cfg, task


def test_one_loss_and_one_list_of_metrics_apply_to_every_output_each_with_its_own_objects():
    cfg, task = _task(["buy", "price"], "trainer.loss=mse", "trainer.metrics=[mae, accuracy]",
                      "trainer.loss_weights={price: 0.5}")
    assert task.loss(cfg, None) == {"buy": "mse", "price": "mse"}
    metrics = task.metrics(cfg, None)
    assert list(metrics) == ["buy", "price"] and metrics["buy"] == metrics["price"] == ["mae", "accuracy"]
    assert metrics["buy"] is not metrics["price"]
    assert task.loss_weights(cfg, None) == {"buy": 1.0, "price": 0.5}  # Keras 3 wants a weight for every loss
    # the default's accuracy is its own object per output
    cfg, task = _task(["a", "b"])
    metrics = task.metrics(cfg, None)
    assert metrics["a"][0] is not metrics["b"][0] and metrics["a"][0].name == "accuracy"


def test_mappings_by_output_name_go_to_keras_as_they_are_and_a_single_output_unwrapped():
    sets = ["trainer.loss={buy: binary_crossentropy, price: mse}", "trainer.metrics={price: [mae]}",
            "trainer.loss_weights={buy: 2}"]
    cfg, task = _task(["buy", "price", "extra"], *sets)
    assert task.loss(cfg, None) == {"buy": "binary_crossentropy", "price": "mse"}  # extra: no loss
    assert task.metrics(cfg, None) == {"price": ["mae"]}
    assert task.loss_weights(cfg, None) == {"buy": 2.0, "price": 1.0}
    cfg, task = _task(["price"], "trainer.loss={price: mse}", "trainer.metrics={price: [mae]}",
                      "trainer.loss_weights={price: 3}")
    assert (task.loss(cfg, None), task.metrics(cfg, None), task.loss_weights(cfg, None)) == ("mse", ["mae"], [3.0])
    cfg, task = _task(None, "trainer.loss_weights={out: 3}")  # a subclassed model: Keras takes them as they are
    assert task.loss_weights(cfg, None) == {"out": 3.0}


def test_your_own_loss_and_metric_class_by_output_name(tmp_path, clean_imports):
    path = _own_regression(tmp_path, """
        class Seen(tf.keras.metrics.Mean):
            pass

        def halved(y_true, y_pred):
            return tf.reduce_mean(tf.square(y_true - y_pred), axis=-1) / 2
    """)
    sys.path.append(os.path.dirname(path))
    cfg, task = _task(["buy", "price"], "trainer.loss={buy: binary_crossentropy, price: 'own_regression:halved'}",
                      "trainer.metrics=['own_regression:Seen']")
    loss, metrics = task.loss(cfg, None), task.metrics(cfg, None)
    assert loss["buy"] == "binary_crossentropy" and loss["price"].__name__ == "halved"
    assert type(metrics["buy"][0]).__name__ == type(metrics["price"][0]).__name__ == "Seen"
    assert metrics["buy"][0] is not metrics["price"][0]  # a class is made once per output


LABELS = ({"basket": "spec", "visitor": "spec"}, {"buy": "spec", "price": "spec"})


@pytest.mark.parametrize("sets, spec, message", [
    (["trainer.loss={buy: binary_crossentropy, prize: mse}"], LABELS,
     "trainer.loss must name outputs the model has (buy, price); received: 'prize'"),
    (["trainer.metrics={buy: [accuracy], prize: [mae]}"], LABELS,
     "trainer.metrics must name outputs the model has (buy, price); received: 'prize'"),
    (["trainer.loss=mse", "trainer.loss_weights={buy: 1, cost: 2}"], LABELS,
     "trainer.loss_weights must name outputs the model has (buy, price); received: 'cost'"),
    (["trainer.loss=mse"], (LABELS[0], {"buy": "spec"}),
     "data.name must give a label for each output with a loss (buy, price), as a mapping by output name; received:"
     " 'shop:data gives no label for price (labels for buy)'"),
    (["trainer.loss=mse"], (LABELS[0], "TensorSpec()", "weights"),
     "data.name must give the labels of a model with several outputs (buy, price) as a mapping by output name;"
     " received: 'shop:data gives labels TensorSpec()'"),
])
def test_a_mapping_or_labels_that_do_not_fit_the_models_outputs_are_one_line(sets, spec, message):
    trainer = config_lib.load(None, sets).trainer
    with pytest.raises(config_lib.ConfigError) as err:
        tasks.check_outputs(trainer, ["buy", "price"], spec, "shop:data")
    assert str(err.value) == message


def test_labels_for_the_outputs_with_a_loss_are_enough():
    trainer = config_lib.load(None, ["trainer.loss={buy: binary_crossentropy}"]).trainer
    tasks.check_outputs(trainer, ["buy", "price"], (LABELS[0], {"buy": "spec"}), "shop:data")
    tasks.check_outputs(trainer, ["buy", "price"], None, "digits")  # built-in data: not checked
    tasks.check_outputs(config_lib.load(None, ["trainer.loss=mse"]).trainer, ["out"], ("x", "y"), "own:data")


def test_two_inputs_two_outputs_and_sample_weights_train_with_a_metric_per_output(hvd_single, tmp_path,
                                                                                 restore_environment, clean_imports):
    from hvdkeras.training.trainer import Trainer

    trainer = Trainer.from_config(config_lib.load(SHOP, SHOP_SETS), str(tmp_path / "run"))
    assert trainer.parts.task.outputs == ["buy", "price"] and len(trainer.data.element_spec) == 3
    final = trainer.fit()
    metrics = {k for k in final if "loss" in k or "accuracy" in k or "mae" in k}
    assert metrics == {"loss", "buy_loss", "price_loss", "buy_binary_accuracy", "price_mae", "val_loss",
                       "val_buy_loss", "val_price_loss", "val_buy_binary_accuracy", "val_price_mae"}
    # the loss minimised weighs the outputs' losses (here on the validation data, which carries sample weights)
    assert final["val_loss"] == pytest.approx(final["val_buy_loss"] + 0.1 * final["val_price_loss"], rel=1e-5)


@pytest.mark.parametrize("sets, message", [
    (["trainer.loss.prize=mse"],  # a --set of a mapping's key adds to the file's mapping, as for model.args
     "trainer.loss in --set trainer.loss.prize=mse must name outputs the model has (buy, price); received: 'prize'"),
    (["trainer.loss=mse", "trainer.loss_weights={cost: 2}"],
     "trainer.loss_weights in --set trainer.loss_weights={cost: 2} must name outputs the model has (buy, price);"
     " received: 'cost'"),
    (["trainer.metrics={buy: [binary_accuracy], prize: [mae]}"],
     "trainer.metrics in --set trainer.metrics={buy: [binary_accuracy], prize: [mae]} must name outputs the model"
     " has (buy, price); received: 'prize'"),
])
def test_the_shop_model_refuses_a_mapping_before_training_in_one_line(hvd_single, tmp_path, restore_environment,
                                                                       clean_imports, sets, message):
    from hvdkeras.training.trainer import Trainer

    with pytest.raises(config_lib.ConfigError) as err:
        Trainer.from_config(config_lib.load(SHOP, SHOP_SETS + sets), str(tmp_path / "run"))
    assert str(err.value) == message
