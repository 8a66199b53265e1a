"""What is learned: a task gives the data, the model, the loss, the metrics and the unit of throughput.

The trainer (:mod:`hvdkeras.trainer`) is handed a task and assumes nothing else about
what it trains; everything data-parallel (the batch split, the learning-rate rule, the
gradient exchange, exact global metrics, checkpoints) stays the trainer's::

    class Task:
        throughput_unit: str                                   # "images", "tokens", "examples" ...
        def datasets(config, data_config, shard, seed, steps, threads) -> hvdkeras.data.Datasets
        def model(config, data) -> an uncompiled keras.Model
        def loss(config, data) -> a Keras loss
        def metrics(config, data) -> a list of Keras metrics (made exact over ranks by the trainer)

:class:`ConfigTask` is the config path's: image classification with the built-in
data, models, loss and accuracy, or any of them replaced by your own function named
in the config (``"package.module:function"``). The metrics' names are the keys of
``metrics.jsonl`` and of the final validation line (``val_<name>``).
"""
from __future__ import annotations

from typing import Any, List, Optional

from hvdkeras import compat, imports
from hvdkeras import config as config_lib
from hvdkeras import data as data_lib
from hvdkeras import models as models_lib
from hvdkeras.losses import make_loss

keras = compat.keras


class Task:
    """The interface (see the module docstring); a subclass overrides every method."""

    throughput_unit = "examples"

    def datasets(self, config: config_lib.Config, data_config: config_lib.DataConfig, shard: data_lib.Shard,
                 seed: int, steps: Optional[int], threads: Optional[int]) -> data_lib.Datasets:
        """This rank's data for ``shard``; ``data_config`` holds the current world's batches
        (``global_batch_size`` and ``eval_global_batch_size`` set, :func:`hvdkeras.scaling.for_world`);
        ``steps`` overrides the steps per epoch when given."""
        raise NotImplementedError

    def model(self, config: config_lib.Config, data: data_lib.Datasets) -> Any:
        """The model to train, not compiled (the trainer compiles it with the distributed optimizer)."""
        raise NotImplementedError

    def loss(self, config: config_lib.Config, data: data_lib.Datasets) -> Any:
        raise NotImplementedError

    def metrics(self, config: config_lib.Config, data: data_lib.Datasets) -> List[Any]:
        raise NotImplementedError


class ConfigTask(Task):
    """The config path's task: every piece by a built-in name or by your own import path.

    Built in: the datasets of :mod:`hvdkeras.data` (digits, synthetic, TensorFlow Datasets:
    images and integer labels), the models of :mod:`hvdkeras.models` (softmax outputs),
    sparse categorical cross-entropy with optional label smoothing, and accuracy: image
    classification, counted in images. Your own (``"package.module:function"``,
    :mod:`hvdkeras.imports`): ``data.name`` (counted in examples), ``model.name``,
    ``trainer.loss`` and each of ``trainer.metrics``; Keras names for the last two.
    """

    def __init__(self, config: config_lib.Config):
        self.throughput_unit = "examples" if config_lib.is_import_path(config.data.name) else "images"

    @staticmethod
    def _own(config: config_lib.Config, key: str, name: str) -> Any:
        return imports.resolve(name, key, config_lib.source_of(config, key), config.folder)

    def datasets(self, config, data_config, shard, seed, steps, threads):
        if not config_lib.is_import_path(data_config.name):
            return data_lib.build(data_config, shard, seed=seed, steps=steps, threads=threads)
        function = self._own(config, "data.name", data_config.name)
        try:
            return data_lib.from_function(function, data_config, shard, seed, steps, threads)
        except config_lib.ConfigError as exc:
            raise config_lib.locate(config, exc) from None

    def model(self, config, data):
        if not config_lib.is_import_path(config.model.name):
            return models_lib.build(data.input_shape, data.num_classes, config.model)
        model = self._own(config, "model.name", config.model.name)(**config.model.args)
        if not isinstance(model, keras.Model):
            raise config_lib.locate(config, config_lib.ConfigError.for_key(
                "model.name", "return an uncompiled Keras model (keras.Model)",
                f"{config.model.name} returned a {type(model).__name__}"))
        return model

    def _keras_or_own(self, config, key: str, name: str, kind: str) -> Any:
        """A Keras loss or metric by name (checked here, built by ``compile``), or your own: a function as it
        is, a class made with no arguments."""
        if config_lib.is_import_path(name):
            own = self._own(config, key, name)
            return own() if isinstance(own, type) else own
        lookup = keras.losses.get if kind == "loss" else keras.metrics.get
        try:
            lookup(name)
        except (ValueError, TypeError):
            raise config_lib.locate(config, config_lib.ConfigError.for_key(
                key, f"be a Keras {kind} name (keras.{kind}es.get knows it) or your own package.module:function",
                name)) from None
        return name

    def loss(self, config, data):
        if config.trainer.loss == config_lib.TrainerConfig.loss:
            return make_loss(data.num_classes, config.trainer.label_smoothing)
        return self._keras_or_own(config, "trainer.loss", config.trainer.loss, "loss")

    def metrics(self, config, data):
        built = []
        for name in config.trainer.metrics:
            if name == "accuracy" and config.trainer.loss == config_lib.TrainerConfig.loss:
                built.append(keras.metrics.SparseCategoricalAccuracy(name="accuracy"))  # the default's, by name
            else:
                built.append(self._keras_or_own(config, "trainer.metrics", name, "metric"))
        return built


def for_config(config: config_lib.Config) -> Task:
    """The task the config path trains (:class:`ConfigTask`)."""
    return ConfigTask(config)
