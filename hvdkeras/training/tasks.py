"""What is learned: a task gives the data, the model, the loss, the metrics and the unit of throughput.

The trainer (:mod:`hvdkeras.training.trainer`) is handed a task and assumes nothing else about
what it trains; everything data-parallel (the batch split, the learning-rate rule, the
gradient exchange, exact global metrics, checkpoints) stays the trainer's::

    class Task:
        throughput_unit: str                                   # "images", "tokens", "examples" ...
        def datasets(config, shard, steps, threads) -> hvdkeras.training.data.Datasets
        def model(config, data) -> an uncompiled keras.Model
        def loss(config, data) -> a Keras loss, or a mapping of output name to one
        def metrics(config, data) -> a list of Keras metrics, or a mapping of output name to a list (made exact over
                                     ranks by the trainer)
        def loss_weights(config, data) -> None, or a mapping of output name to a weight (optional: None)
        def optimizer(config, learning_rate) -> a Keras optimizer at that rate, or None: the config's (optional)
        def callbacks(config) -> Keras callbacks added to every fit (optional: [])

:class:`ConfigTask` is the config path's: image classification with the built-in
data, models, loss and accuracy, or any of them replaced by your own function named
in the config (``"package.module:function"``). The metrics' names are the keys of
``metrics.jsonl`` and of the final validation line (``val_<name>``; ``val_<output>_<name>`` for
each output of a model with several).
"""
from __future__ import annotations

import abc
from typing import Any, Dict, List, Optional, Sequence, Union

from hvdkeras import config as config_lib
from hvdkeras.common import user_code
from hvdkeras.runtime import compat
from hvdkeras.runtime.compat import keras
from hvdkeras.training import data as data_lib
from hvdkeras.training import models as models_lib
from hvdkeras.training.losses import make_loss


class Task(abc.ABC):
    """What is learned (see the module docstring): a subclass implements every abstract method."""

    throughput_unit = "examples"

    @abc.abstractmethod
    def datasets(self, config: config_lib.Config, shard: data_lib.Shard, steps: Optional[int],
                 threads: Optional[int]) -> data_lib.Datasets:
        """This rank's data.

        Args:
            config: the config as the current world sees it: ``config.data`` holds the world's
                batches (``global_batch_size`` and ``eval_global_batch_size`` set,
                :func:`hvdkeras.common.scaling.for_world`); the seed is ``config.runtime.seed``.
            shard: this rank's place in the world.
            steps: the steps per epoch, when given (else as many as the data holds).
            threads: the size of tf.data's private thread pool (``None``: TensorFlow's).
        """

    @abc.abstractmethod
    def model(self, config: config_lib.Config, data: data_lib.Datasets) -> Any:
        """The model to train, not compiled (the trainer compiles it with the distributed optimizer)."""

    @abc.abstractmethod
    def loss(self, config: config_lib.Config, data: data_lib.Datasets) -> Any:
        """A Keras loss, or a mapping of output name to one."""

    @abc.abstractmethod
    def metrics(self, config: config_lib.Config, data: data_lib.Datasets) -> Union[List[Any], Dict[str, List[Any]]]:
        """A list of Keras metrics, or a mapping of output name to a list (made exact over ranks by the trainer)."""

    def loss_weights(self, config: config_lib.Config, data: data_lib.Datasets) -> Any:
        """How much each output's loss counts (``compile``'s ``loss_weights``); None: equally."""
        return None

    def optimizer(self, config: config_lib.Config, learning_rate: float) -> Any:
        """The optimizer to train with at ``learning_rate`` (the rate scaled to the global batch), before the
        gradient exchange wraps it; None (the default): the config's ``optimizer`` section."""
        return None

    def callbacks(self, config: config_lib.Config) -> List[Any]:
        """Keras callbacks of your own, added to every ``fit`` after the trainer's (default: none)."""
        return []


class ConfigTask(Task):
    """The config path's task: every piece by a built-in name or by your own import path.

    Built in: the datasets of :mod:`hvdkeras.training.data` (digits, synthetic, TensorFlow Datasets:
    images and integer labels), the models of :mod:`hvdkeras.training.models` (softmax outputs),
    sparse categorical cross-entropy with optional label smoothing, and accuracy: image
    classification, counted in images. Your own (``"package.module:function"``,
    :mod:`hvdkeras.common.user_code`): ``data.name`` (counted in examples), ``model.name``,
    ``trainer.loss`` and each of ``trainer.metrics``; Keras names for the last two.

    A model with several outputs: ``trainer.loss``, ``trainer.metrics`` and ``trainer.loss_weights``
    may map output names (:func:`hvdkeras.runtime.compat.output_names`) to their values, and one loss or
    one list of metrics applies to every output (each output its own metric objects, on both
    stacks). :meth:`model` checks the mappings against the model's outputs and your data's
    labels against the outputs with a loss, and remembers the names for :meth:`loss`,
    :meth:`metrics` and :meth:`loss_weights`, which the trainer calls after it.
    """

    def __init__(self, config: config_lib.Config):
        self.throughput_unit = "examples" if config_lib.is_import_path(config.data.name) else "images"
        self.outputs: Optional[List[str]] = None  # the model's output names, once model() has built it

    @staticmethod
    def _own(config: config_lib.Config, key: str, name: str) -> Any:
        return user_code.resolve(name, key, config_lib.source_of(config, key), config.folder)

    def datasets(self, config: config_lib.Config, shard: data_lib.Shard, steps: Optional[int],
                 threads: Optional[int]) -> data_lib.Datasets:
        """The built-in dataset ``data.name`` names, or your own function's, for ``shard``."""
        data_config, seed = config.data, config.runtime.seed
        if not config_lib.is_import_path(data_config.name):
            return data_lib.build(data_config, shard, seed=seed, steps=steps, threads=threads)
        function = self._own(config, "data.name", data_config.name)
        try:
            return data_lib.from_function(function, data_config, shard, seed, steps, threads)
        except config_lib.ConfigError as exc:
            raise config_lib.locate(config, exc) from None

    def model(self, config: config_lib.Config, data: data_lib.Datasets) -> Any:
        """The built-in model ``model.name`` names, or your own function's, with its outputs checked."""
        if not config_lib.is_import_path(config.model.name):
            model = models_lib.build(data.input_shape, data.num_classes, config.model)
        else:
            model = self._own(config, "model.name", config.model.name)(**config.model.args)
            if not isinstance(model, keras.Model):
                raise config_lib.locate(config, config_lib.ConfigError.for_key(
                    "model.name", "return an uncompiled Keras model (keras.Model)",
                    f"{config.model.name} returned a {type(model).__name__}"))
        self.outputs = compat.output_names(model)
        if self.outputs is not None:
            try:
                check_outputs(config.trainer, self.outputs, data.element_spec, config.data.name)
            except config_lib.ConfigError as exc:
                raise config_lib.locate(config, exc) from None
        return model

    def _keras_or_own(self, config: config_lib.Config, key: str, name: str, kind: str) -> Any:
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

    def _one_output(self) -> Optional[str]:
        return self.outputs[0] if self.outputs is not None and len(self.outputs) == 1 else None

    def _several_outputs(self) -> bool:
        return self.outputs is not None and len(self.outputs) > 1

    def loss(self, config: config_lib.Config, data: data_lib.Datasets) -> Any:
        """The loss ``trainer.loss`` names (the default: sparse categorical cross-entropy), per output if several."""
        loss = config.trainer.loss
        if isinstance(loss, dict):
            built = {output: self._keras_or_own(config, "trainer.loss", name, "loss") for output, name in loss.items()}
            one = self._one_output()
            return built[one] if one is not None else built  # a single output: as Keras 3's Sequential takes it
        if loss == config_lib.TrainerConfig.loss:
            one_loss = make_loss(data.num_classes, config.trainer.label_smoothing)
        else:
            one_loss = self._keras_or_own(config, "trainer.loss", loss, "loss")
        return {output: one_loss for output in self.outputs or ()} if self._several_outputs() else one_loss

    def _metric_list(self, config: config_lib.Config, names: Sequence[str]) -> List[Any]:
        built = []
        for name in names:
            if name == "accuracy" and config.trainer.loss == config_lib.TrainerConfig.loss:
                built.append(keras.metrics.SparseCategoricalAccuracy(name="accuracy"))  # the default's, by name
            else:
                built.append(self._keras_or_own(config, "trainer.metrics", name, "metric"))
        return built

    def metrics(self, config: config_lib.Config, data: data_lib.Datasets) -> Union[List[Any], Dict[str, List[Any]]]:
        """The metrics ``trainer.metrics`` names, per output if several (each output its own objects)."""
        metrics = config.trainer.metrics
        if isinstance(metrics, dict):
            one = self._one_output()
            if one is not None:
                return self._metric_list(config, metrics.get(one, ()))
            return {output: self._metric_list(config, names) for output, names in metrics.items() if names}
        if self._several_outputs():  # Keras 2's rule on both stacks: each output gets the list, its own objects
            return {output: self._metric_list(config, metrics) for output in self.outputs or ()}
        return self._metric_list(config, metrics)

    def loss_weights(self, config: config_lib.Config, data: data_lib.Datasets) -> Any:
        """``trainer.loss_weights`` in ``compile``'s form, 1.0 for an output it omits; None: equally."""
        weights, loss = config.trainer.loss_weights, config.trainer.loss
        if weights is None or self.outputs is None:
            return weights
        if len(self.outputs) == 1:
            return [weights.get(self.outputs[0], 1.0)]
        weighed = [output for output in self.outputs if not isinstance(loss, dict) or output in loss]
        return {output: weights.get(output, 1.0) for output in weighed}  # Keras 3 wants one per loss


def check_outputs(trainer: config_lib.TrainerConfig, outputs: Sequence[str], element_spec: Any,
                  data_name: str) -> None:
    """One :class:`~hvdkeras.common.errors.ConfigError` line if ``trainer.loss``, ``trainer.metrics`` or
    ``trainer.loss_weights`` name an output the model lacks (``outputs``), or if the labels of your data
    (``element_spec``: ``(features, labels[, sample_weights])``; None: not checked) lack an output with a loss.

    The model and the data's structure are the same on every rank, so every rank stops here alike,
    before training starts.
    """
    listing = ", ".join(outputs)
    for key, mapping in (("trainer.loss", trainer.loss), ("trainer.metrics", trainer.metrics),
                         ("trainer.loss_weights", trainer.loss_weights)):
        unknown = [name for name in mapping if name not in outputs] if isinstance(mapping, dict) else []
        if unknown:
            raise config_lib.ConfigError.for_key(key, f"name outputs the model has ({listing})", unknown[0])
    if element_spec is None:
        return
    labels = element_spec[1]
    with_loss = [output for output in outputs if not isinstance(trainer.loss, dict) or output in trainer.loss]
    if isinstance(labels, dict):
        missing = [output for output in with_loss if output not in labels]
        if missing:
            given = ", ".join(sorted(labels)) or "no output"
            raise config_lib.ConfigError.for_key(
                "data.name", f"give a label for each output with a loss ({', '.join(with_loss)}), as a mapping by"
                " output name", f"{data_name} gives no label for {', '.join(missing)} (labels for {given})")
    elif len(outputs) > 1:
        raise config_lib.ConfigError.for_key(
            "data.name", f"give the labels of a model with several outputs ({listing}) as a mapping by output name",
            f"{data_name} gives labels {labels}")


def for_config(config: config_lib.Config) -> Task:
    """The task the config path trains (:class:`ConfigTask`)."""
    return ConfigTask(config)
