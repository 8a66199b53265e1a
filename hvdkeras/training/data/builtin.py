"""The built-in datasets, registered in ``REGISTRY`` by name when this module is imported (the package imports
it): ``digits``, the 8x8 digits the package ships, held in memory; ``synthetic``, random images for throughput."""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np
import tensorflow as tf

from hvdkeras.common.data_sizes import DIGITS_FILE, digits_split
from hvdkeras.common.errors import ConfigError
from hvdkeras.common.scaling import global_order_steps, per_rank_batch, world_batches
from hvdkeras.config import DataConfig
from hvdkeras.training.data.contract import REGISTRY, Datasets, Shard
from hvdkeras.training.data.epochs import finish, in_memory, shard_indices


def digits_arrays() -> Tuple[np.ndarray, np.ndarray]:
    """The 8x8 handwritten digits: (1797 x 64 pixels in 0..16, 1797 labels 0-9).

    Read from the copy the package ships (``hvdkeras/resources/digits.csv.gz``: 64 pixels and the
    label per line), which is scikit-learn's own file, so these are the arrays
    ``sklearn.datasets.load_digits()`` returns as ``(data, target)``; its README names the source.
    """
    table = np.loadtxt(DIGITS_FILE, delimiter=",")
    return table[:, :-1], table[:, -1].astype(int)


@REGISTRY.register("digits")
def digits(cfg: DataConfig, shard: Shard, seed: int, steps: Optional[int], threads: Optional[int] = None) -> Datasets:
    """The 1,797 8x8 handwritten digits that ship with the package (no download).

    Pixels scaled to [0, 1], shape (8, 8, 1), 10 classes. A fixed split (the same for
    any seed and any number of ranks) holds out ``validation_fraction`` for validation.
    """
    pixels, target = digits_arrays()
    images = (pixels.reshape(-1, 8, 8) / 16.0).astype(np.float32)[..., None]
    labels = target.astype(np.int32)
    order = np.random.RandomState(0).permutation(len(images))
    n_val = digits_split(len(images), cfg.validation_fraction)[1]
    val_idx, train_idx = order[:n_val], order[n_val:]
    return in_memory(images[train_idx], labels[train_idx], images[val_idx], labels[val_idx], cfg, shard, seed,
                     steps, num_classes=10, threads=threads)


@REGISTRY.register("synthetic")
def synthetic(cfg: DataConfig, shard: Shard, seed: int, steps: Optional[int],
              threads: Optional[int] = None) -> Datasets:
    """Random images of ``image_shape`` and labels of ``num_classes``, for throughput runs.

    One random batch per rank is generated once and repeated, as in Horovod's
    synthetic benchmarks, so the input pipeline costs nothing. An epoch is
    ``train_examples // global_batch_size`` steps (or ``trainer.steps_per_epoch``).
    """
    global_batch_size, eval_global_batch_size = world_batches(cfg)
    batch = per_rank_batch(global_batch_size, shard.count)
    eval_batch = per_rank_batch(eval_global_batch_size, shard.count)
    steps = steps or global_order_steps(cfg.train_examples, global_batch_size)
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
        return finish(tf.data.Dataset.from_tensors((images, labels)).repeat((end_epoch - start_epoch) * steps),
                      cfg, threads)

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
        validation = finish(tf.data.Dataset.from_tensor_slices((val_images, val_labels)).batch(eval_batch), cfg,
                            threads)
    return Datasets(
        make_train=make_train, steps_per_epoch=steps, per_rank_batch=batch, validation=validation,
        validation_examples=n_val, input_shape=shape, num_classes=cfg.num_classes,
    )
