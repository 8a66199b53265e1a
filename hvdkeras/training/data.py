"""Datasets by name, each rank reading its own shard.

The rules, written once here:

* **Batch**: each rank's batch is ``global_batch // num_ranks`` (the config
  refuses a global batch the ranks do not divide; the global batch and its two
  conventions are :mod:`hvdkeras.common.scaling`'s).
* **In-memory data** (``digits``): one global order, the same on any number of ranks.
  Each epoch is a permutation of the training split drawn from ``(seed, epoch)`` with
  stateless random ops; its first ``steps * global_batch`` examples form ``steps``
  global batches, and rank ``r`` of ``N`` takes the ``r``-th contiguous
  ``per_rank_batch`` of each. So step ``t`` sees the same examples on 1 rank x 64 as on
  2 ranks x 32, and data-parallel training is the same training as one process on
  the global batch (``steps = n_train // global_batch``; the few examples left over
  are a different random subset each epoch, so none is left out for good). Every
  rank runs the same steps, so no rank waits in an allreduce for one that ran out.
* **Validation**: rank ``r`` evaluates examples ``r, r + N, ...`` of the validation
  split, all of them (no remainder dropped); the metric callback sums the metric
  states, so every validation example counts exactly once.

TensorFlow Datasets (any other ``data.name``) shard *before* anything is read or
decoded, as a large dataset must: ``tfds.even_splits(split, N)``
gives rank ``r`` the ``r``-th contiguous 1/N of the split (sizes differ by at most
one), and only those records are read. Each epoch a rank shuffles its records
with a buffer of ``data.shuffle_buffer`` seeded by ``(seed, rank, epoch)``, takes
the first ``steps * per_rank_batch`` and decodes and augments them in parallel
(stateless random ops seeded per example). The remainder, fewer than
``per_rank_batch + 1`` records per rank, is the tail of that epoch's shuffled
order, so a different subset waits each epoch and none is left out for good.
Validation reads each rank's even split completely. A dataset that is not
prepared in ``data.data_dir`` stops the job with one line saying which files go
where and which command prepares it (nothing is downloaded at run time).
"""
from __future__ import annotations

import dataclasses
import functools
import os
import re
from typing import Any, Callable, Optional, Tuple

import numpy as np
import tensorflow as tf

from hvdkeras.common.data_sizes import DIGITS_FILE, digits_split
from hvdkeras.common.errors import ConfigError
from hvdkeras.common.registry import Registry
from hvdkeras.common.scaling import for_world, global_order_steps, per_rank_batch, steps_per_epoch, world_batches
from hvdkeras.config import DataConfig
from hvdkeras.training import preprocessing

REGISTRY = Registry("dataset", "data.name")


def names():
    """The registered dataset names (``data.name``)."""
    return REGISTRY.names()


@dataclasses.dataclass(frozen=True)
class Shard:
    """This rank's share of the data: its index among ``count`` ranks."""

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
    # One unbatched training element's structure, (features, labels[, sample weights]) as tf.TypeSpecs, where the
    # data are your own (the labels are checked against the model's outputs before training); None: built-in data.
    element_spec: Any = None

    def train(self, start_epoch: int, end_epoch: int) -> tf.data.Dataset:
        """Training batches for epochs ``[start_epoch, end_epoch)``, ``steps_per_epoch`` each."""
        return self.make_train(start_epoch, end_epoch)


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
    """Shards, batches and shuffles arrays already in memory (see the module docstring)."""
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


# --------------------------------------------------------------------------- TensorFlow Datasets


def _tfds():
    import tensorflow_datasets as tfds  # imported on first use: most jobs never need it

    return tfds


def tfds_builder(cfg: DataConfig):
    """The TFDS builder for ``data.name`` in ``data.data_dir``; a ConfigError for an unknown name."""
    tfds = _tfds()
    try:
        return tfds.builder(cfg.name, data_dir=cfg.data_dir)
    except tfds.core.registered.DatasetNotFoundError:
        raise ConfigError(
            f"data.name={cfg.name!r} is neither a built-in dataset ({', '.join(names())}) nor a TensorFlow Datasets"
            " name (catalog: https://www.tensorflow.org/datasets/catalog/overview)"
        ) from None


def not_prepared_error(builder, cfg: DataConfig) -> ConfigError:
    """One line: where the dataset's files must go and which command prepares it."""
    data_dir = cfg.data_dir or os.path.dirname(os.path.dirname(builder.data_dir))
    name = builder.name
    if builder.MANUAL_DOWNLOAD_INSTRUCTIONS:
        manual_dir = cfg.manual_dir or os.path.join(data_dir, "downloads", "manual")
        files = sorted(set(re.findall(r"[\w.-]+\.(?:tar|zip|tar\.gz|tgz)\b", builder.MANUAL_DOWNLOAD_INSTRUCTIONS)))
        catalog = "https://www.tensorflow.org/datasets/catalog/" + name
        what = " and ".join(files) if files else f"the files named at {catalog}"
        return ConfigError(
            f"{name} is not prepared in {data_dir} (data.data_dir) and is a manual download: put {what} in"
            f" {manual_dir} (data.manual_dir), then run once: tfds build {name} --data_dir={data_dir}"
            f" --manual_dir={manual_dir}"
        )
    return ConfigError(
        f"{name} is not prepared in {data_dir} (data.data_dir) and nothing is downloaded at run time: run"
        f" `tfds build {name} --data_dir={data_dir}` on a machine with internet access and copy"
        f" {os.path.join(data_dir, name)} here"
    )


def tfds_records(builder, split: str, shard: Shard, encoded: bool, cfg: DataConfig) -> tf.data.Dataset:
    """Rank ``shard.index``'s even part of ``split``, undecoded when ``encoded`` (images stay bytes)."""
    tfds = _tfds()
    part = tfds.even_splits(split, n=shard.count, drop_remainder=False)[shard.index]
    decoders = {"image": tfds.decode.SkipDecoding()} if encoded else None
    read_config = tfds.ReadConfig(try_autocache=False, add_tfds_id=False)
    try:
        return builder.as_dataset(split=part, decoders=decoders, shuffle_files=False, read_config=read_config)
    except AssertionError as exc:
        if "could not find data" in str(exc):
            raise not_prepared_error(builder, cfg) from None
        raise
    except ValueError as exc:
        if "split" in str(exc).lower():
            available = ", ".join(builder.info.splits.keys()) or "see the dataset's catalog page"
            raise ConfigError(f"split {split!r} of {builder.name} cannot be read ({str(exc).splitlines()[0]});"
                              f" available splits: {available}") from None
        raise


def split_size(builder, split: str) -> int:
    """The number of examples in a TFDS builder's ``split``, counted from the dataset if its info lacks it.

            Raises:
                ConfigError: The count is unknown either way.
    """
    try:
        return int(builder.info.splits[split].num_examples)
    except (KeyError, ValueError, TypeError):  # mocked or unusual builders: count from the dataset itself
        count = int(builder.as_dataset(split=split).cardinality())
        if count < 0:
            raise ConfigError(f"cannot tell how many examples {builder.name}[{split}] holds") from None
        return count


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

            ds = ds.enumerate().map(transform, num_parallel_calls=_parallel(cfg), deterministic=cfg.deterministic)
        return ds.batch(batch, drop_remainder=True)

    epochs = [one_epoch(epoch) for epoch in range(start_epoch, end_epoch)] or [one_epoch(start_epoch).take(0)]
    ds = functools.reduce(lambda a, b: a.concatenate(b), epochs[1:], epochs[0])
    return ds.apply(tf.data.experimental.assert_cardinality((end_epoch - start_epoch) * steps))


def _parallel(cfg: DataConfig) -> int:
    return tf.data.AUTOTUNE if cfg.parallel_calls < 0 else cfg.parallel_calls


def from_tfds(cfg: DataConfig, shard: Shard, seed: int, steps: Optional[int],
              threads: Optional[int] = None) -> Datasets:
    """Any TensorFlow Datasets dataset with an ``image`` and a ``label`` feature (see the module docstring)."""
    builder = tfds_builder(cfg)
    features = builder.info.features
    if "image" not in features or "label" not in features:
        raise ConfigError(f"{cfg.name} has no 'image' and 'label' features (it has {', '.join(features.keys())});"
                          " hvdkeras trains image classifiers")
    family = cfg.pipeline if cfg.pipeline != "auto" else preprocessing.AUTO.get(cfg.name)
    if family is None:
        raise ConfigError(f"data.pipeline is auto but {cfg.name} has no standard pipeline; set data.pipeline to one"
                          f" of {', '.join(sorted(preprocessing.pipelines(224)))}")
    pipeline = preprocessing.pipelines(cfg.image_shape[0])[family]
    global_batch_size, eval_global_batch_size = world_batches(cfg)
    batch = per_rank_batch(global_batch_size, shard.count)
    eval_batch = per_rank_batch(eval_global_batch_size, shard.count)
    train_records = tfds_records(builder, cfg.train_split, shard, pipeline.encoded, cfg)
    total = split_size(builder, cfg.train_split)
    available = steps_per_epoch(total, global_batch_size, shard.count)
    if available == 0 and not steps:
        raise ConfigError(f"data.global_batch_size={cfg.global_batch_size} is larger than the {total} examples of"
                          f" {cfg.name}[{cfg.train_split}]; use a smaller global batch")
    steps = steps or available

    def make_train(start_epoch: int, end_epoch: int) -> tf.data.Dataset:
        return finish(sharded_train_epochs(train_records, pipeline, batch, steps, seed, shard, start_epoch,
                                           end_epoch, cfg), cfg, threads)

    validation, n_val = None, 0
    if cfg.eval_split:
        val_records = tfds_records(builder, cfg.eval_split, shard, pipeline.encoded, cfg)
        n_val = int(val_records.cardinality())
        validation = val_records.map(lambda ex: (pipeline.evaluate(ex["image"]), ex["label"]),
                                     num_parallel_calls=_parallel(cfg), deterministic=cfg.deterministic)
        validation = finish(validation.batch(eval_batch), cfg, threads)
    stored = tuple(features["image"].shape)
    return Datasets(make_train=make_train, steps_per_epoch=steps, per_rank_batch=batch, validation=validation,
                    validation_examples=n_val, input_shape=pipeline.output_shape(stored),
                    num_classes=features["label"].num_classes)


# --------------------------------------------------------------------------- your own data


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


def build(cfg: DataConfig, shard: Shard, seed: int, steps: Optional[int] = None,
          threads: Optional[int] = None) -> Datasets:
    """This rank's datasets: a built-in ``data.name``, else TensorFlow Datasets.

    ``steps`` overrides the steps per epoch; ``threads`` is the rank's thread budget
    (sizes tf.data's private pool unless the config sets it).
    """
    cfg = for_world(cfg, shard.count)
    if cfg.name in REGISTRY.names():
        return REGISTRY.get(cfg.name)(cfg, shard, seed, steps, threads)
    return from_tfds(cfg, shard, seed, steps, threads)
