"""Your own data (``data.name: package.module:function``): the ``(train, validation)`` datasets your function
returns, checked (each mistake one line naming ``data.name``), sharded by rank and reshuffled per epoch."""
from __future__ import annotations

from typing import Any, Callable, Optional

import tensorflow as tf

from hvdkeras.common.errors import ConfigError
from hvdkeras.common.scaling import per_rank_batch, steps_per_epoch, world_batches
from hvdkeras.config import DataConfig
from hvdkeras.training.data.contract import Datasets, Shard
from hvdkeras.training.data.epochs import finish, shard_indices, sharded_train_epochs


def _returned(name: str, rule: str, what: str) -> ConfigError:
    """``data.name must <rule>; received: '<name> returned <what>'``."""
    return ConfigError.for_key("data.name", rule, f"{name} returned {what}")


def _size(ds: tf.data.Dataset, which: str, name: str) -> int:
    """The number of examples of ``ds``, your ``which`` dataset; a ConfigError if tf.data cannot tell."""
    count = int(ds.cardinality())
    if count == tf.data.INFINITE_CARDINALITY:
        raise _returned(name, f"return a finite {which} dataset: one pass over the examples, which hvdkeras"
                        " shuffles and repeats per epoch (leave out .repeat())", f"an infinite {which} dataset")
    if count < 0:
        raise _returned(name, f"return a {which} dataset of known size (tf.data cannot tell it without reading it,"
                        " e.g. after filter() or from a generator): add"
                        " .apply(tf.data.experimental.assert_cardinality(n))", f"a {which} dataset of unknown size")
    return count


def _check_pairs(ds: Any, which: str, name: str) -> None:
    if not isinstance(ds, tf.data.Dataset):
        raise _returned(name, f"return a tf.data.Dataset as {which}", f"a {type(ds).__name__} as {which}")
    spec = ds.element_spec
    if not isinstance(spec, tuple) or len(spec) not in (2, 3):
        raise _returned(name, f"return a {which} dataset of (features, label) pairs or (features, label,"
                        " sample_weight) triples, unbatched", f"{which} elements {spec}")


def from_function(function: Callable, cfg: DataConfig, shard: Shard, seed: int, steps: Optional[int],
                  threads: Optional[int] = None) -> Datasets:
    """Your own data: ``function(**data.args)`` returns ``(train, validation)``, unbatched ``tf.data.Dataset``s of
    ``(features, label)`` pairs of known, finite size (``validation`` may be None). Features and labels may be
    mappings by input and output name; a third element, ``(features, label, sample_weight)``, is each example's
    weight in the loss, kept through the sharding, shuffling and batching.

    Rank ``r`` of ``N`` takes examples ``r, r + N, ...`` of each (``Dataset.shard``); each epoch
    it shuffles its part with a buffer of ``data.shuffle_buffer`` seeded by ``(seed, rank,
    epoch)`` and takes ``steps`` batches of the per-rank batch, as TensorFlow Datasets
    data (the smallest part decides the steps: :func:`hvdkeras.common.scaling.steps_per_epoch`).
    Validation reads each rank's part completely, and the metrics sum over ranks, so
    every validation example counts once.
    """
    returned = function(**cfg.args)
    if not isinstance(returned, (tuple, list)) or len(returned) != 2:
        raise _returned(cfg.name, "return (train, validation): two tf.data.Datasets of (features, label) pairs,"
                        " validation None for none", f"a {type(returned).__name__}")
    train, validation = returned
    _check_pairs(train, "train", cfg.name)
    total = _size(train, "train", cfg.name)
    global_batch_size, eval_global_batch_size = world_batches(cfg)
    batch = per_rank_batch(global_batch_size, shard.count)
    eval_batch = per_rank_batch(eval_global_batch_size, shard.count)
    available = steps_per_epoch(total, global_batch_size, shard.count)
    if available == 0:
        raise ConfigError(f"data.global_batch_size={cfg.global_batch_size} is larger than the {total} training"
                          f" examples of {cfg.name} on {shard.count} ranks; use a smaller global batch")
    steps = steps or available
    if steps * batch > total // shard.count:
        raise ConfigError(f"an epoch of {steps} steps x {batch} examples per rank needs {steps * batch} examples on"
                          f" each of {shard.count} ranks, but {cfg.name} holds {total} in all; lower"
                          " trainer.steps_per_epoch or the global batch")
    records = train.shard(shard.count, shard.index)

    def make_train(start_epoch: int, end_epoch: int) -> tf.data.Dataset:
        return finish(sharded_train_epochs(records, None, batch, steps, seed, shard, start_epoch, end_epoch, cfg),
                      cfg, threads)

    val, n_val = None, 0
    if validation is not None:
        _check_pairs(validation, "validation", cfg.name)
        total_val = _size(validation, "validation", cfg.name)
        if total_val < shard.count:
            raise ConfigError(f"{cfg.name} returned {total_val} validation examples, fewer than the {shard.count}"
                              " ranks; return more, or None for no validation")
        n_val = len(shard_indices(total_val, shard))
        val = finish(validation.shard(shard.count, shard.index).batch(eval_batch), cfg, threads)
    features = train.element_spec[0]
    shape = tuple(features.shape) if isinstance(features, tf.TensorSpec) else ()
    return Datasets(make_train=make_train, steps_per_epoch=steps, per_rank_batch=batch, validation=val,
                    validation_examples=n_val, input_shape=shape, num_classes=cfg.num_classes,
                    element_spec=train.element_spec)
