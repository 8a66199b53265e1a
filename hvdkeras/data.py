"""Datasets by name, each rank reading its own shard.

The rules, written once here:

* **Batch**: each rank's batch is ``global_batch_size // num_ranks`` (the config
  refuses a global batch the ranks do not divide).
* **Sharding**: rank ``r`` of ``N`` owns examples ``r, r + N, r + 2N, ...`` of the
  training split, so no example belongs to two ranks.
* **Steps**: every rank runs the same number of steps per epoch,
  ``steps = (n_train // N) // per_rank_batch`` (the smallest shard decides), so no
  rank waits in an allreduce for a partner that has run out of data. Each epoch a
  rank uses ``steps * per_rank_batch`` examples of its shard; the few left over are
  a different random subset each epoch, so none is left out for good.
* **Order**: each epoch's order is a permutation drawn from ``(seed, rank, epoch)``
  with stateless random ops: reproducible, different every epoch, and the same
  after a resume at epoch ``k`` as in an uninterrupted run.
* **Validation**: rank ``r`` evaluates examples ``r, r + N, ...`` of the validation
  split, all of them (no remainder dropped); the metric callback sums the metric
  states, so every validation example counts exactly once.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Optional, Tuple

import numpy as np
import tensorflow as tf

from hvdkeras.config import ConfigError, DataConfig
from hvdkeras.registry import Registry

REGISTRY = Registry("dataset", "data.name")


def names():
    return REGISTRY.names()


@dataclasses.dataclass(frozen=True)
class Shard:
    index: int  # this rank
    count: int  # number of ranks


@dataclasses.dataclass(frozen=True)
class Datasets:
    """What a trainer needs from the data, for this rank."""

    make_train: Callable[[int, int], tf.data.Dataset]
    steps_per_epoch: int
    per_rank_batch: int
    validation: Optional[tf.data.Dataset]
    validation_examples: int  # on this rank
    input_shape: Tuple[int, ...]
    num_classes: int

    def train(self, start_epoch: int, end_epoch: int) -> tf.data.Dataset:
        """Training batches for epochs ``[start_epoch, end_epoch)``, ``steps_per_epoch`` each."""
        return self.make_train(start_epoch, end_epoch)


def per_rank_batch(global_batch_size: int, num_ranks: int) -> int:
    if global_batch_size % num_ranks:
        raise ConfigError(
            f"data.global_batch_size={global_batch_size} is not divisible by the {num_ranks} ranks"
        )
    return global_batch_size // num_ranks


def shard_indices(num_examples: int, shard: Shard) -> np.ndarray:
    """Indices of the examples rank ``shard.index`` owns: ``index, index + count, ...``."""
    return np.arange(shard.index, num_examples, shard.count)


def steps_per_epoch(num_examples: int, global_batch_size: int, num_ranks: int) -> int:
    """``(num_examples // num_ranks) // (global_batch_size // num_ranks)``: the same on every rank."""
    return (num_examples // num_ranks) // per_rank_batch(global_batch_size, num_ranks)


def _prefetch(ds: tf.data.Dataset, depth: int) -> tf.data.Dataset:
    return ds.prefetch(tf.data.AUTOTUNE if depth < 0 else depth) if depth != 0 else ds


def _check_epoch_fits(shard_examples: int, batch: int, steps: int) -> None:
    if steps * batch > shard_examples:
        raise ConfigError(
            f"an epoch of {steps} steps x {batch} examples per rank needs {steps * batch} examples, but a rank"
            f" holds only {shard_examples}; lower trainer.steps_per_epoch or data.global_batch_size"
        )


def shuffled_epochs(x: np.ndarray, y: np.ndarray, batch: int, steps: int, seed: int, shard: Shard,
                    start_epoch: int, end_epoch: int) -> tf.data.Dataset:
    """Batches of in-memory ``(x, y)`` for epochs ``[start_epoch, end_epoch)``, ``steps`` per epoch.

    Each epoch takes the first ``steps * batch`` entries of a fresh permutation seeded
    by ``(seed, shard.index, epoch)``.
    """
    n = len(x)
    _check_epoch_fits(n, batch, steps)
    x_t, y_t = tf.constant(x), tf.constant(y)
    base = tf.constant([seed, shard.index], dtype=tf.int64)

    def one_epoch(epoch):
        scores = tf.random.stateless_uniform([n], seed=base * 1_000_003 + tf.stack([epoch, 0]))
        order = tf.argsort(scores)[: steps * batch]
        return tf.data.Dataset.from_tensor_slices(tf.reshape(order, [steps, batch]))

    ds = tf.data.Dataset.range(start_epoch, end_epoch).flat_map(one_epoch)
    ds = ds.map(lambda idx: (tf.gather(x_t, idx), tf.gather(y_t, idx)), num_parallel_calls=tf.data.AUTOTUNE)
    return ds.apply(tf.data.experimental.assert_cardinality((end_epoch - start_epoch) * steps))


def in_memory(x_train, y_train, x_val, y_val, cfg: DataConfig, shard: Shard, seed: int, steps: Optional[int],
              num_classes: int) -> Datasets:
    """Shards, batches and shuffles arrays already in memory (see the module docstring)."""
    batch = per_rank_batch(cfg.global_batch_size, shard.count)
    eval_batch = per_rank_batch(cfg.eval_global_batch_size or cfg.global_batch_size, shard.count)
    available = steps_per_epoch(len(x_train), cfg.global_batch_size, shard.count)
    if available == 0:
        raise ConfigError(
            f"data.global_batch_size={cfg.global_batch_size} is larger than the {len(x_train)} training examples of"
            f" {cfg.name!r}; use a smaller global batch"
        )
    if len(x_val) < shard.count:
        raise ConfigError(
            f"{cfg.name!r} has {len(x_val)} validation examples, fewer than the {shard.count} ranks; "
            "raise data.validation_fraction or use fewer ranks"
        )
    mine = shard_indices(len(x_train), shard)
    x_mine, y_mine, steps = x_train[mine], y_train[mine], steps or available
    _check_epoch_fits(len(x_mine), batch, steps)

    def make_train(start_epoch: int, end_epoch: int) -> tf.data.Dataset:
        return _prefetch(shuffled_epochs(x_mine, y_mine, batch, steps, seed, shard, start_epoch, end_epoch),
                         cfg.prefetch)

    val_mine = shard_indices(len(x_val), shard)
    val = tf.data.Dataset.from_tensor_slices((x_val[val_mine], y_val[val_mine])).batch(eval_batch)
    return Datasets(
        make_train=make_train, steps_per_epoch=steps, per_rank_batch=batch,
        validation=_prefetch(val, cfg.prefetch), validation_examples=len(val_mine),
        input_shape=tuple(x_train.shape[1:]), num_classes=num_classes,
    )


@REGISTRY.register("digits")
def digits(cfg: DataConfig, shard: Shard, seed: int, steps: Optional[int]) -> Datasets:
    """The 1,797 8x8 handwritten digits that ship with scikit-learn (no download).

    Pixels scaled to [0, 1], shape (8, 8, 1), 10 classes. A fixed split (the same for
    any seed and any number of ranks) holds out ``validation_fraction`` for validation.
    """
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = (bunch.images / 16.0).astype(np.float32)[..., None]
    labels = bunch.target.astype(np.int32)
    order = np.random.RandomState(0).permutation(len(images))
    n_val = int(round(len(images) * cfg.validation_fraction))
    val_idx, train_idx = order[:n_val], order[n_val:]
    return in_memory(images[train_idx], labels[train_idx], images[val_idx], labels[val_idx], cfg, shard, seed,
                     steps, num_classes=10)


@REGISTRY.register("synthetic")
def synthetic(cfg: DataConfig, shard: Shard, seed: int, steps: Optional[int]) -> Datasets:
    """Random images of ``image_shape`` and labels of ``num_classes``, for throughput runs.

    One random batch per rank is generated once and repeated, as in Horovod's
    synthetic benchmarks, so the input pipeline costs nothing. An epoch is
    ``train_examples // global_batch_size`` steps (or ``trainer.steps_per_epoch``).
    """
    batch = per_rank_batch(cfg.global_batch_size, shard.count)
    eval_batch = per_rank_batch(cfg.eval_global_batch_size or cfg.global_batch_size, shard.count)
    steps = steps or cfg.train_examples // cfg.global_batch_size
    if steps == 0:
        raise ConfigError(
            f"data.train_examples={cfg.train_examples} is smaller than data.global_batch_size="
            f"{cfg.global_batch_size}; raise train_examples or set trainer.steps_per_epoch"
        )
    shape = tuple(cfg.image_shape)
    seeds = tf.constant([seed, shard.index], dtype=tf.int64)
    images = tf.random.stateless_uniform((batch,) + shape, seed=seeds, dtype=tf.float32)
    labels = tf.random.stateless_uniform((batch,), seed=seeds + 1, maxval=cfg.num_classes, dtype=tf.int32)

    def make_train(start_epoch: int, end_epoch: int) -> tf.data.Dataset:
        return _prefetch(tf.data.Dataset.from_tensors((images, labels)).repeat((end_epoch - start_epoch) * steps),
                         cfg.prefetch)

    if 0 < cfg.eval_examples < shard.count:
        raise ConfigError(
            f"data.eval_examples={cfg.eval_examples} is fewer than the {shard.count} ranks; use 0 (no validation)"
            f" or at least {shard.count}"
        )
    n_val = len(shard_indices(cfg.eval_examples, shard))
    validation = None
    if n_val:
        val_images = tf.random.stateless_uniform((n_val,) + shape, seed=seeds + 2, dtype=tf.float32)
        val_labels = tf.random.stateless_uniform((n_val,), seed=seeds + 3, maxval=cfg.num_classes, dtype=tf.int32)
        validation = tf.data.Dataset.from_tensor_slices((val_images, val_labels)).batch(eval_batch)
    return Datasets(
        make_train=make_train, steps_per_epoch=steps, per_rank_batch=batch, validation=validation, validation_examples=n_val, input_shape=shape, num_classes=cfg.num_classes,
    )


def build(cfg: DataConfig, shard: Shard, seed: int, steps: Optional[int] = None) -> Datasets:
    """This rank's datasets for ``cfg.name``; ``steps`` overrides the steps per epoch."""
    return REGISTRY.get(cfg.name)(cfg, shard, seed, steps)
