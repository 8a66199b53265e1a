"""A rank's epochs, whatever the data: the shard of a split, the epochs of examples held in memory (one global
order, :func:`in_memory`) and of records sharded by rank (:func:`sharded_train_epochs`, reshuffled per epoch from
:func:`epoch_seed`), and the ``tf.data`` options every dataset ends with (:func:`finish`). The rules are
:mod:`hvdkeras.training.data`'s."""
from __future__ import annotations

import functools
from typing import Optional

import numpy as np
import tensorflow as tf

from hvdkeras.common.errors import ConfigError
from hvdkeras.common.scaling import global_order_steps, per_rank_batch, world_batches
from hvdkeras.config import DataConfig
from hvdkeras.training import preprocessing
from hvdkeras.training.data.contract import Datasets, Shard


def shard_indices(num_examples: int, shard: Shard) -> np.ndarray:
    """Indices of the examples rank ``shard.index`` owns: ``index, index + count, ...``."""
    return np.arange(shard.index, num_examples, shard.count)


def finish(ds: tf.data.Dataset, cfg: DataConfig, threads: Optional[int] = None) -> tf.data.Dataset:
    """Prefetch and the ``tf.data`` options from the config.

    ``threads`` sizes the private thread pool when ``data.private_threadpool_size``
    is null (auto): the rank's intra-op thread budget.
    """
    if cfg.prefetch != 0:
        ds = ds.prefetch(tf.data.AUTOTUNE if cfg.prefetch < 0 else cfg.prefetch)
    options = tf.data.Options()
    options.autotune.enabled = cfg.autotune
    options.deterministic = cfg.deterministic
    pool = cfg.private_threadpool_size if cfg.private_threadpool_size is not None else threads
    if pool:
        options.threading.private_threadpool_size = pool
    return ds.with_options(options)


def parallel_calls(cfg: DataConfig) -> int:
    """``num_parallel_calls`` of a decoding map: ``data.parallel_calls``, or AUTOTUNE when negative."""
    return tf.data.AUTOTUNE if cfg.parallel_calls < 0 else cfg.parallel_calls


# --------------------------------------------------------------------------- examples held in memory: one global order


def _check_epoch_fits(examples: int, global_batch: int, steps: int) -> None:
    if steps * global_batch > examples:
        raise ConfigError(
            f"an epoch of {steps} steps x a global batch of {global_batch} needs {steps * global_batch} examples,"
            f" but the training split holds only {examples}; lower trainer.steps_per_epoch or the global batch"
        )


def shuffled_epochs(x: np.ndarray, y: np.ndarray, batch: int, steps: int, seed: int, shard: Shard,
                    start_epoch: int, end_epoch: int) -> tf.data.Dataset:
    """This rank's batches of in-memory ``(x, y)`` (all examples) for epochs ``[start_epoch, end_epoch)``.

    Each epoch takes the first ``steps * batch * shard.count`` entries of a fresh
    permutation seeded by ``(seed, epoch)`` (the same on every rank), as ``steps``
    global batches; this rank gets the ``shard.index``-th ``batch`` of each.
    """
    n, ranks = len(x), shard.count
    _check_epoch_fits(n, batch * ranks, steps)
    x_t, y_t = tf.constant(x), tf.constant(y)
    base = tf.constant([seed, 0], dtype=tf.int64)

    def one_epoch(epoch):
        scores = tf.random.stateless_uniform([n], seed=base * 1_000_003 + tf.stack([epoch, 0]))
        order = tf.reshape(tf.argsort(scores)[: steps * batch * ranks], [steps, ranks, batch])
        return tf.data.Dataset.from_tensor_slices(order[:, shard.index])

    ds = tf.data.Dataset.range(start_epoch, end_epoch).flat_map(one_epoch)
    ds = ds.map(lambda idx: (tf.gather(x_t, idx), tf.gather(y_t, idx)), num_parallel_calls=tf.data.AUTOTUNE)
    return ds.apply(tf.data.experimental.assert_cardinality((end_epoch - start_epoch) * steps))


def in_memory(x_train, y_train, x_val, y_val, cfg: DataConfig, shard: Shard, seed: int, steps: Optional[int],
              num_classes: int, threads: Optional[int] = None) -> Datasets:
    """Shards, batches and shuffles arrays already in memory (see :mod:`hvdkeras.training.data`'s rules)."""
    global_batch_size, eval_global_batch_size = world_batches(cfg)
    batch = per_rank_batch(global_batch_size, shard.count)
    eval_batch = per_rank_batch(eval_global_batch_size, shard.count)
    available = global_order_steps(len(x_train), global_batch_size)
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
    steps = steps or available
    _check_epoch_fits(len(x_train), global_batch_size, steps)

    def make_train(start_epoch: int, end_epoch: int) -> tf.data.Dataset:
        return finish(shuffled_epochs(x_train, y_train, batch, steps, seed, shard, start_epoch, end_epoch), cfg,
                      threads)

    val_mine = shard_indices(len(x_val), shard)
    val = tf.data.Dataset.from_tensor_slices((x_val[val_mine], y_val[val_mine])).batch(eval_batch)
    return Datasets(
        make_train=make_train, steps_per_epoch=steps, per_rank_batch=batch,
        validation=finish(val, cfg, threads), validation_examples=len(val_mine),
        input_shape=tuple(x_train.shape[1:]), num_classes=num_classes,
    )


# --------------------------------------------------------------------------- records sharded by rank


def epoch_seed(seed: int, shard: Shard, epoch: int) -> int:
    """The seed of rank ``shard.index``'s epoch ``epoch``: ``(seed * 1000003 + rank) * 100003 + epoch``, wrapped to
    int64 as TensorFlow's int64 arithmetic would."""
    value = (seed * 1_000_003 + shard.index) * 100_003 + epoch
    return (value + 2 ** 63) % 2 ** 64 - 2 ** 63


def sharded_train_epochs(records: tf.data.Dataset, pipeline: Optional["preprocessing.Pipeline"], batch: int,
                         steps: int, seed: int, shard: Shard, start_epoch: int, end_epoch: int,
                         cfg: DataConfig) -> tf.data.Dataset:
    """Epochs ``[start_epoch, end_epoch)`` of ``steps`` batches of this rank's ``records``, reshuffled per epoch;
    TFDS examples are decoded and augmented by ``pipeline``, your own ``(features, label)`` pairs taken as they are.

    Each epoch is its own dataset, shuffled with a Python integer seed, and the epochs are
    concatenated: ``shuffle`` given a tensor seed fails while TensorFlow's global seed is 0
    (``tf.random.set_seed(0)``, ``runtime.seed: 0``; its seed check compares the tensor as a bool).
    """
    buffer = max(1, cfg.shuffle_buffer)

    def one_epoch(epoch: int) -> tf.data.Dataset:
        s = epoch_seed(seed, shard, epoch)
        ds = records.shuffle(buffer, seed=s, reshuffle_each_iteration=False).take(steps * batch)
        if pipeline is not None:
            example_seed = tf.constant(s, tf.int64)

            def transform(index, example):
                return pipeline.train(example["image"], tf.stack([example_seed, index])), example["label"]

            ds = ds.enumerate().map(transform, num_parallel_calls=parallel_calls(cfg),
                                    deterministic=cfg.deterministic)
        return ds.batch(batch, drop_remainder=True)

    epochs = [one_epoch(epoch) for epoch in range(start_epoch, end_epoch)] or [one_epoch(start_epoch).take(0)]
    ds = functools.reduce(lambda a, b: a.concatenate(b), epochs[1:], epochs[0])
    return ds.apply(tf.data.experimental.assert_cardinality((end_epoch - start_epoch) * steps))
