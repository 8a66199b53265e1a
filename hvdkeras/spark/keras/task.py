"""What a Spark estimator's ranks learn: a :class:`hvdkeras.training.tasks.Task` over the store's Parquet.

The estimator (:mod:`hvdkeras.spark.keras.estimator`) hands every rank a :class:`SparkTaskSpec`:
the prepared data, the model as ``.keras`` bytes, the loss, metrics and optimizer as
Keras serializes them, and your callbacks. :class:`SparkTask` gives the trainer this
rank's rows as ``tf.data``, each feature column reshaped to its model input, so the Spark
path trains through the same core as the config trainer.

By default the rows stream from the store each epoch
(:func:`hvdkeras.spark.common.reader.stream_rows`), through a shuffle buffer of at most
:data:`SHUFFLE_BUFFER_BYTES` (``shuffle_buffer_size`` rows if set), so a rank's memory does
not grow with its rows. Where the buffer holds all of a rank's rows, the batches are those
of the rows held in memory (``inmemory_cache_all=True``, read once with
:func:`hvdkeras.spark.common.reader.read_rows`): the same seed gives the same batches either way.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import tensorflow as tf

from hvdkeras import config as config_lib
from hvdkeras.common import scaling
from hvdkeras.common.errors import ConfigError
from hvdkeras.runtime import compat
from hvdkeras.runtime.compat import keras
from hvdkeras.spark.common.data import PreparedData
from hvdkeras.spark.common.reader import parquet_files, rank_range, read_rows, stream_rows
from hvdkeras.spark.common.store import FilesystemStore
from hvdkeras.spark.keras.serialization import model_from_bytes
from hvdkeras.training import data as data_lib
from hvdkeras.training.tasks import Task

SHUFFLE_BUFFER_BYTES = 32 << 20  # a streaming rank's shuffle buffer by default: rows up to this many bytes


def _without_names(tree: Any) -> Any:
    """A layer's config without its ``name`` keys, which Keras numbers by how many layers a process made."""
    if isinstance(tree, dict):
        return {k: _without_names(v) for k, v in tree.items() if k != "name"}
    if isinstance(tree, (list, tuple)):
        return [_without_names(v) for v in tree]
    return tree


def architecture(model: Any) -> str:
    """What identifies ``model``'s architecture across processes: its layers, their settings and its weights' shapes,
    not their names (``"3 layers, 59 parameters, architecture 1a2b3c4d5e6f"``)."""
    layers = [[type(layer).__name__, _without_names(layer.get_config())] for layer in model.layers]
    shapes = [list(map(int, w.shape)) for w in model.weights]
    text = json.dumps([layers, shapes], sort_keys=True, default=str)
    parameters = sum(int(np.prod(shape)) for shape in shapes)
    return (f"{len(layers)} layers, {parameters} parameters, architecture"
            f" {hashlib.sha256(text.encode()).hexdigest()[:12]}")


def describe(value: Any) -> str:
    """A loss, metric or optimizer that :func:`to_portable` made travel, as one short line that is the same in every
    process: a Keras object as ``SGD(learning_rate=0.1, momentum=0.0, ...)`` (its settings but its name, which
    Keras numbers by how many a process made, and those left at None), anything else as JSON."""
    if isinstance(value, tuple) and len(value) == 2 and value[0] == "keras" and isinstance(value[1], dict):
        config = value[1].get("config", {})
        settings = ", ".join(f"{k}={_short_float(v)}" for k, v in sorted(_without_names(config).items())
                             if v is not None)
        return f"{value[1].get('class_name', '?')}({settings})"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(describe(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {describe(v)}" for k, v in sorted(value.items())) + "}"
    return json.dumps(value, sort_keys=True, default=lambda v: getattr(v, "__qualname__", type(v).__name__))


def _short_float(value: Any) -> Any:
    """A float32 setting as it was written (0.10000000149011612 -> 0.1)."""
    if isinstance(value, float) and float(np.float32(value)) == value:
        return float(str(np.float32(value)))
    return value


def to_portable(value: Any, kind: str) -> Any:
    """A loss, metric or optimizer in a form that travels to the ranks: names and functions as they are,
    Keras objects as Keras serializes them (``("keras", config)``); lists and dicts item by item."""
    if isinstance(value, (list, tuple)):
        return [to_portable(v, kind) for v in value]
    if isinstance(value, dict):
        return {k: to_portable(v, kind) for k, v in value.items()}
    if isinstance(value, str) or value is None or (callable(value) and not hasattr(value, "get_config")):
        return value
    module = {"loss": keras.losses, "metric": keras.metrics, "optimizer": keras.optimizers}[kind]
    return ("keras", module.serialize(value))


def from_portable(value: Any, kind: str, custom_objects: Optional[Dict[str, Any]] = None) -> Any:
    """The object :func:`to_portable` made travel."""
    if isinstance(value, tuple) and len(value) == 2 and value[0] == "keras":
        module = {"loss": keras.losses, "metric": keras.metrics, "optimizer": keras.optimizers}[kind]
        return module.deserialize(value[1], custom_objects=custom_objects or {})
    if isinstance(value, list):
        return [from_portable(v, kind, custom_objects) for v in value]
    if isinstance(value, dict):
        return {k: from_portable(v, kind, custom_objects) for k, v in value.items()}
    return value


@dataclasses.dataclass(frozen=True)
class SparkTaskSpec:
    """What every rank of a Spark estimator's ``fit`` is given (pickled to the ranks).

    Attributes:
        store: the store holding the data and the run.
        data: the prepared data (:func:`hvdkeras.spark.common.data.prepare`).
        model: the model as :func:`model_to_bytes` wrote it.
        input_shapes: each model input's shape without the batch (``-1`` for an unknown size).
        label_shapes: the shape each label column is reshaped to, or ``None`` each: as read.
        loss: the loss(es), :func:`to_portable`.
        loss_weights: each output's weight in the loss, or ``None``.
        metrics: the metrics, :func:`to_portable`.
        optimizer: the optimizer, :func:`to_portable`; its ``learning_rate`` is one rank's, the trainer scales it.
        custom_objects: Keras' custom objects for loading the model and its pieces.
        callbacks: your Keras callbacks.
        shuffle_buffer_size: the shuffle buffer of each rank (``None``: all its rows).
        shuffle: whether each epoch reshuffles this rank's rows (False: read in the order they were written).
        checkpoint_callback: your ``ModelCheckpoint`` (Horovod's ``checkpoint_callback``), run after your callbacks;
            the rank sets its ``filepath`` inside the run.
        use_gpu: whether the ranks may use GPUs.
        inmemory_cache_all: read this rank's rows once and keep them in memory (Horovod's parameter); else they
            stream from the store each epoch.
        last_callbacks: hvdkeras' own callbacks, run after the checkpoint callback (rank 0's publishing to the store).
    """

    store: FilesystemStore
    data: PreparedData
    model: bytes
    input_shapes: Tuple[Tuple[int, ...], ...]
    label_shapes: Optional[Tuple[Optional[Tuple[int, ...]], ...]]
    loss: Any
    loss_weights: Any
    metrics: Any
    optimizer: Any
    custom_objects: Dict[str, Any]
    callbacks: Tuple[Any, ...] = ()
    shuffle_buffer_size: Optional[int] = None
    shuffle: bool = True
    checkpoint_callback: Any = None
    use_gpu: bool = True
    inmemory_cache_all: bool = False
    last_callbacks: Tuple[Any, ...] = ()


def _one_or_tuple(values: Sequence[Any]) -> Any:
    return values[0] if len(values) == 1 else tuple(values)


def _row_bytes(element: Any) -> int:
    """Bytes one row of ``element`` (arrays of rows) takes."""
    arrays = tf.nest.flatten(element)
    rows = max(1, len(arrays[0]))
    return sum(int(a.nbytes) for a in arrays) // rows


class SparkTask(Task):
    """The Spark estimator's task: this rank's Parquet rows, your model, loss, metrics, optimizer and callbacks.

    Args:
        spec: what the estimator sent.
    """

    throughput_unit = "examples"

    def __init__(self, spec: SparkTaskSpec):
        self.spec = spec
        # The assembly asks for the datasets again once the ranks agree on the steps: read the Parquet once.
        self._read: Dict[Tuple[str, int, int], Tuple[Any, ...]] = {}

    def _arrays(self, path: str, shard: data_lib.Shard) -> Tuple[Any, ...]:
        """(features, labels[, weights]) of this rank's rows in ``path``, reshaped for the model (read once)."""
        key = (path, shard.index, shard.count)
        if key not in self._read:
            self._read[key] = self._read_arrays(path, shard)
        return self._read[key]

    def _columns(self) -> List[str]:
        prepared = self.spec.data
        weights = [prepared.sample_weight_col] if prepared.sample_weight_col else []
        return [*prepared.feature_cols, *prepared.label_cols, *weights]

    def _element(self, columns: Dict[str, np.ndarray]) -> Tuple[Any, ...]:
        """(features, labels[, weights]) of these rows, reshaped for the model."""
        spec, prepared = self.spec, self.spec.data
        features = [columns[c].reshape((-1, *shape)).astype(np.float32, copy=False)
                    for c, shape in zip(prepared.feature_cols, spec.input_shapes)]
        labels = []
        for i, column in enumerate(prepared.label_cols):
            shape = spec.label_shapes[i] if spec.label_shapes else None
            labels.append(columns[column] if shape is None else columns[column].reshape((-1, *shape)))
        element = [_one_or_tuple(features), _one_or_tuple(labels)]
        if prepared.sample_weight_col:
            element.append(columns[prepared.sample_weight_col].astype(np.float32, copy=False))
        return tuple(element)

    def _read_arrays(self, path: str, shard: data_lib.Shard) -> Tuple[Any, ...]:
        return self._element(read_rows(self.spec.store, path, shard.index, shard.count, self._columns()))

    def _records(self, path: str, shard: data_lib.Shard) -> Tuple[tf.data.Dataset, int, int]:
        """(this rank's rows of ``path`` as single records, how many, bytes a row) : held in memory with
        ``inmemory_cache_all``, else streamed from the store on each pass."""
        if self.spec.inmemory_cache_all:
            arrays = self._arrays(path, shard)
            rows = len(tf.nest.flatten(arrays)[0])
            return tf.data.Dataset.from_tensor_slices(arrays), rows, _row_bytes(arrays)
        store, columns = self.spec.store, self._columns()
        files = parquet_files(store, path)
        start, stop = rank_range(sum(n for _, n in files), shard.index, shard.count)

        def chunks() -> Iterator[Tuple[Any, ...]]:
            for chunk in stream_rows(store, path, shard.index, shard.count, columns, files=files):
                yield self._element(chunk)

        first = next(chunks(), None)
        if first is None:  # no rows here: read_rows's empty arrays give the structure
            return tf.data.Dataset.from_tensor_slices(self._read_arrays(path, shard)), 0, 0
        signature = tf.nest.map_structure(lambda a: tf.TensorSpec((None, *a.shape[1:]), tf.as_dtype(a.dtype)), first)
        # from_generator calls chunks() again for each pass over the dataset (each epoch, each evaluation)
        records = tf.data.Dataset.from_generator(chunks, output_signature=signature).unbatch()
        return records, stop - start, _row_bytes(first)

    def datasets(self, config: config_lib.Config, shard: data_lib.Shard, steps: Optional[int],
                 threads: Optional[int]) -> data_lib.Datasets:
        """This rank's rows of the store's training and validation Parquet as batches.

        Each epoch reshuffles this rank's rows (seeded by the run's seed, the rank and the
        epoch; in the order they were written without ``shuffle``) and takes ``steps`` full
        batches; validation reads this rank's validation rows once an evaluation.
        """
        prepared = self.spec.data
        global_batch, eval_global_batch = scaling.world_batches(config.data)
        batch = scaling.per_rank_batch(global_batch, shard.count)
        eval_batch = scaling.per_rank_batch(eval_global_batch, shard.count)
        records, rows, row_bytes = self._records(prepared.train_path, shard)
        available = rows // batch
        if available == 0:
            raise ConfigError(f"rank {shard.index} holds {rows} training rows, fewer than its batch of {batch};"
                              " lower batch_size or num_proc")
        steps = min(steps or available, available)
        buffer = 1 if not self.spec.shuffle else self.spec.shuffle_buffer_size or (
            rows if self.spec.inmemory_cache_all else min(rows, max(batch, SHUFFLE_BUFFER_BYTES // max(1, row_bytes))))
        shuffled = dataclasses.replace(config.data, shuffle_buffer=buffer)

        def make_train(start_epoch: int, end_epoch: int) -> tf.data.Dataset:
            return data_lib.finish(data_lib.sharded_train_epochs(records, None, batch, steps, config.runtime.seed,
                                                                 shard, start_epoch, end_epoch, shuffled),
                                   config.data, threads)

        validation, val_rows = None, 0
        if prepared.val_path is not None:
            val, val_rows, _ = self._records(prepared.val_path, shard)
            validation = data_lib.finish(val.batch(eval_batch), config.data, threads)
        return data_lib.Datasets(make_train=make_train, steps_per_epoch=steps, per_rank_batch=batch,
                                 validation=validation, validation_examples=val_rows,
                                 input_shape=tuple(self.spec.input_shapes[0]), num_classes=0,
                                 element_spec=records.element_spec)

    def model(self, config: config_lib.Config, data: data_lib.Datasets) -> Any:
        """Your model, as the estimator was given it (weights too)."""
        return model_from_bytes(self.spec.model, self.spec.custom_objects)

    def loss(self, config: config_lib.Config, data: data_lib.Datasets) -> Any:
        """Your loss(es)."""
        return from_portable(self.spec.loss, "loss", self.spec.custom_objects)

    def metrics(self, config: config_lib.Config, data: data_lib.Datasets) -> Union[List[Any], Dict[str, List[Any]]]:
        """Your metrics."""
        return from_portable(self.spec.metrics, "metric", self.spec.custom_objects) or []

    def loss_weights(self, config: config_lib.Config, data: data_lib.Datasets) -> Any:
        """Your loss weights."""
        return self.spec.loss_weights

    def optimizer(self, config: config_lib.Config, learning_rate: float) -> Any:
        """Your optimizer, at ``learning_rate`` (one rank's rate scaled to the global batch)."""
        optimizer = from_portable(self.spec.optimizer, "optimizer", self.spec.custom_objects)
        compat.set_learning_rate(optimizer, learning_rate)
        return optimizer

    def callbacks(self, config: config_lib.Config) -> List[Any]:
        """Your callbacks, then your checkpoint callback, then the publishing of what it saved."""
        extra = [self.spec.checkpoint_callback] if self.spec.checkpoint_callback is not None else []
        return [*self.spec.callbacks, *extra, *self.spec.last_callbacks]
