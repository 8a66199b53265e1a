"""Datasets by name, each rank reading its own shard.

One module per concern, each importing only those listed before it: :mod:`.contract` (``Shard``, ``Datasets``,
the ``REGISTRY`` of names), :mod:`.epochs` (a rank's epochs and the ``tf.data`` options), :mod:`.builtin` (``digits``
and ``synthetic``, registered on import), :mod:`.tfds` (TensorFlow Datasets) and :mod:`.own` (your own function's
data). This package imports them all, so the registry holds every built-in name whichever is imported first, and
:func:`build` picks one for ``data.name``.

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

from typing import Optional

from hvdkeras.common.scaling import for_world
from hvdkeras.config import DataConfig
from hvdkeras.training.data.builtin import digits, digits_arrays, synthetic
from hvdkeras.training.data.contract import REGISTRY, Datasets, Shard, names
from hvdkeras.training.data.epochs import (
    epoch_seed,
    finish,
    in_memory,
    shard_indices,
    sharded_train_epochs,
    shuffled_epochs,
)
from hvdkeras.training.data.own import from_function
from hvdkeras.training.data.tfds import from_tfds, not_prepared_error, split_size, tfds_builder, tfds_records

__all__ = [
    "REGISTRY", "Datasets", "Shard", "build", "digits", "digits_arrays", "epoch_seed", "finish", "from_function",
    "from_tfds", "in_memory", "names", "not_prepared_error", "shard_indices", "sharded_train_epochs",
    "shuffled_epochs", "split_size", "synthetic", "tfds_builder", "tfds_records",
]


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
