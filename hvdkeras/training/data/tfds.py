"""Any TensorFlow Datasets dataset with an ``image`` and a ``label`` feature, sharded by rank before anything is
read (``tfds.even_splits``), decoded and augmented by a :mod:`hvdkeras.training.preprocessing` pipeline; one line
for a dataset that is not prepared (see :mod:`hvdkeras.training.data`'s rules)."""
from __future__ import annotations

import contextlib
import os
import re
import threading
from typing import Iterator, Optional

import tensorflow as tf

from hvdkeras.common.errors import ConfigError
from hvdkeras.common.scaling import per_rank_batch, steps_per_epoch, world_batches
from hvdkeras.config import DataConfig
from hvdkeras.training import preprocessing
from hvdkeras.training.data.contract import Datasets, Shard, names
from hvdkeras.training.data.epochs import finish, parallel_calls, sharded_train_epochs


def _tfds():
    import tensorflow_datasets as tfds  # imported on first use: most jobs never need it

    return tfds


_OFFLINE = threading.Lock()


@contextlib.contextmanager
def _without_the_bucket(tfds) -> Iterator[None]:
    """TFDS' builders made without looking up a dataset's description in Google's bucket, which TFDS does for a
    dataset not prepared in ``data_dir``: hvdkeras reads prepared data only, and the look-up leaves an empty folder
    in the temp folder each time (and, where TFDS has the bucket on, as 4.9.4 has, retries for seconds on a machine
    without internet and warns about Google credentials). Other code's builders, before and after, do as TFDS does."""
    info = tfds.core.DatasetInfo
    with _OFFLINE:
        original = info.__dict__.get("initialize_from_bucket")
        if original is None:  # a TFDS without the look-up
            yield
            return
        info.initialize_from_bucket = lambda self: None
        try:
            yield
        finally:
            info.initialize_from_bucket = original


def tfds_builder(cfg: DataConfig):
    """The TFDS builder for ``data.name`` in ``data.data_dir``, made offline; a ConfigError for an unknown name."""
    tfds = _tfds()
    try:
        with _without_the_bucket(tfds):
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


def from_tfds(cfg: DataConfig, shard: Shard, seed: int, steps: Optional[int],
              threads: Optional[int] = None) -> Datasets:
    """Any TensorFlow Datasets dataset with an ``image`` and a ``label`` feature (see :mod:`hvdkeras.training.data`'s
    rules)."""
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
                                     num_parallel_calls=parallel_calls(cfg), deterministic=cfg.deterministic)
        validation = finish(validation.batch(eval_batch), cfg, threads)
    stored = tuple(features["image"].shape)
    return Datasets(make_train=make_train, steps_per_epoch=steps, per_rank_batch=batch, validation=validation,
                    validation_examples=n_val, input_shape=pipeline.output_shape(stored),
                    num_classes=features["label"].num_classes)
