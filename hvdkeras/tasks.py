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

:class:`ImageClassification` is the first, and the config path's: the datasets of
:mod:`hvdkeras.data` (built-in or TensorFlow Datasets, ``image`` and ``label``), the
models of :mod:`hvdkeras.models` (softmax outputs), sparse categorical cross-entropy
with optional label smoothing, and accuracy. The metrics' names are the keys of
``metrics.jsonl`` and of the final validation line (``val_<name>``).
"""
from __future__ import annotations

from typing import Any, List, Optional

from hvdkeras import compat
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


class ImageClassification(Task):
    """Integer class labels, softmax outputs: hvdkeras's built-in datasets and models."""

    throughput_unit = "images"

    def datasets(self, config, data_config, shard, seed, steps, threads):
        return data_lib.build(data_config, shard, seed=seed, steps=steps, threads=threads)

    def model(self, config, data):
        return models_lib.build(data.input_shape, data.num_classes, config.model)

    def loss(self, config, data):
        return make_loss(data.num_classes, config.trainer.label_smoothing)

    def metrics(self, config, data):
        return [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]


def for_config(config: config_lib.Config) -> Task:
    """The task the config path trains: image classification (the one built in so far)."""
    del config
    return ImageClassification()
