"""The data-parallel rules, written once: the global batch, its split over ranks, and the learning rate.

Global batch, for ``N`` ranks: the config gives exactly one of

* ``data.global_batch_size = G``: the global batch is ``G`` on any number of ranks
  (each rank's batch shrinks as ranks are added);
* ``data.per_rank_batch_size = b``: Horovod's convention, a fixed batch per rank,
  so the global batch is ``G = b * N`` and grows with the ranks.

Batch split::

    per_rank_batch  = G / N                                    (must divide evenly)
    steps_per_epoch = (num_examples // N) // per_rank_batch     (data sharded by rank, e.g. TFDS:
                                                                the smallest shard decides)
    steps_per_epoch = num_examples // G                         (one global order, in-memory data)

Learning rate: the linear scaling rule (Goyal et al. 2017), a function of the global
batch alone. ``optimizer.learning_rate`` is the rate for a *reference batch* of
examples, and the optimizer gets::

    scaled_lr = learning_rate * G / reference_batch

    optimizer.lr_scaling   reference_batch
    global_batch           optimizer.base_batch_size          (Goyal et al.: 0.1 per 256)
    ranks                  data.per_rank_batch_size           (Horovod's "lr x size": G / b = N)
    none                   G                                  (no scaling: scaled_lr = learning_rate)

So the same global batch gets the same rate on any number of ranks; ``ranks`` is
accepted only with ``data.per_rank_batch_size``, where the global batch grows with
the ranks (:mod:`hvdkeras.config.rules` refuses it with a fixed global batch).

Warmup (:mod:`hvdkeras.common.schedules`) rises per batch from
``warmup_start_lr = min(learning_rate, scaled_lr)``, the rate of the reference batch,
to ``scaled_lr``: under Horovod's convention that is ``scaled_lr / N``, Horovod's own
warmup. Pure Python: the trainer, the elastic driver, the estimator, the data
pipeline and the dry run all use these.
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Tuple

from hvdkeras.common.errors import ConfigError
from hvdkeras.config import DataConfig, OptimizerConfig


def global_batch(data: DataConfig, num_ranks: int) -> int:
    """``data.global_batch_size``, or ``data.per_rank_batch_size * num_ranks`` (Horovod's convention)."""
    if data.global_batch_size is not None:
        return data.global_batch_size
    if data.per_rank_batch_size is None:  # config.validate refuses this first, naming where each value came from
        raise ConfigError("set one of data.global_batch_size and data.per_rank_batch_size")
    return data.per_rank_batch_size * num_ranks


def eval_global_batch(data: DataConfig, num_ranks: int) -> int:
    """``data.eval_global_batch_size``, or the training global batch when that is null."""
    return data.eval_global_batch_size or global_batch(data, num_ranks)


def for_world(data: DataConfig, num_ranks: int) -> DataConfig:
    """``data`` with the global batches of ``num_ranks`` ranks written in (what the data pipeline reads)."""
    return dataclasses.replace(data, global_batch_size=global_batch(data, num_ranks),
                               eval_global_batch_size=eval_global_batch(data, num_ranks), per_rank_batch_size=None)


def world_batches(data: DataConfig) -> Tuple[int, int]:
    """(global batch, validation global batch) of a :func:`for_world` view of the data config."""
    if data.global_batch_size is None or data.eval_global_batch_size is None:
        raise ValueError("this data config is not one world's view: pass it through hvdkeras.common.scaling.for_world")
    return data.global_batch_size, data.eval_global_batch_size


def per_rank_batch(global_batch_size: int, num_ranks: int) -> int:
    """``global_batch_size / num_ranks``; a ConfigError when the ranks do not divide it."""
    if global_batch_size % num_ranks:
        raise ConfigError(f"data.global_batch_size={global_batch_size} is not divisible by the {num_ranks} ranks")
    return global_batch_size // num_ranks


def global_order_steps(num_examples: int, global_batch_size: int) -> int:
    """``num_examples // global_batch_size``: data drawn in one global order, each rank taking its slice of every
    global batch (the in-memory and synthetic data)."""
    return num_examples // global_batch_size


def steps_per_epoch(num_examples: int, global_batch_size: int, num_ranks: int) -> int:
    """``(num_examples // num_ranks) // (global_batch_size // num_ranks)``: the same on every rank of data
    sharded by rank (the in-memory data's one global order gives ``num_examples // global_batch_size``)."""
    return (num_examples // num_ranks) // per_rank_batch(global_batch_size, num_ranks)


def reference_batch(opt: OptimizerConfig, data: DataConfig) -> Optional[int]:
    """The batch ``optimizer.learning_rate`` is given for (table in the module docstring); None: no scaling."""
    if opt.lr_scaling == "global_batch":
        return opt.base_batch_size
    if opt.lr_scaling == "ranks":
        if data.per_rank_batch_size is None:
            raise ConfigError.for_key(
                "optimizer.lr_scaling", "be global_batch or none with data.global_batch_size (the global batch"
                " is fixed, so x ranks would change the rate with the rank count alone); for Horovod's"
                " convention set data.per_rank_batch_size instead", opt.lr_scaling)
        return data.per_rank_batch_size
    return None


def scaled_learning_rate(opt: OptimizerConfig, data: DataConfig, global_batch_size: int) -> float:
    """``learning_rate * global_batch_size / reference_batch(opt, data)`` (``learning_rate`` for ``none``).

    ``data`` is the data section as configured (it names the reference batch under
    ``ranks``); ``global_batch_size`` is the current world's (:func:`global_batch`).
    """
    reference = reference_batch(opt, data)
    if reference is None:
        return opt.learning_rate
    return opt.learning_rate * global_batch_size / reference


def warmup_start_lr(opt: OptimizerConfig, scaled_lr: float) -> float:
    """The first warmup batch's rate: ``min(learning_rate, scaled_lr)``, the reference batch's rate."""
    return min(opt.learning_rate, scaled_lr)


def formula(opt: OptimizerConfig, data: DataConfig, num_ranks: int) -> str:
    """The rule with this job's numbers, e.g. ``0.1 = 0.05 x global batch 64 / base_batch_size 32``."""
    g = global_batch(data, num_ranks)
    scaled = scaled_learning_rate(opt, data, g)
    batch = (f"global batch {g}" if data.global_batch_size is not None
             else f"global batch {g} (= {data.per_rank_batch_size} per rank x {num_ranks} ranks)")
    if opt.lr_scaling == "global_batch":
        return f"{scaled:g} = {opt.learning_rate:g} x {batch} / optimizer.base_batch_size {opt.base_batch_size}"
    if opt.lr_scaling == "ranks":
        return (f"{scaled:g} = {opt.learning_rate:g} x {batch} / data.per_rank_batch_size"
                f" {data.per_rank_batch_size} (Horovod's lr x {num_ranks} ranks)")
    return f"{scaled:g} = optimizer.learning_rate, unscaled (optimizer.lr_scaling: none)"


def for_resized_world(data: DataConfig, on_resize: str, initial_size: int, size: int) -> DataConfig:
    """The data section ``size`` ranks train with, in a job that started with ``initial_size`` (elastic).

    Args:
        data: the config's data section.
        on_resize: ``elastic.on_resize``. ``"keep_global_batch"``: the global batch of the initial
            world stays, each rank's becomes ``global / size``. ``"keep_rank_batch"``: each rank keeps
            its initial batch, the global batch becomes ``per-rank batch x size``.
        initial_size: the number of ranks the job started with.
        size: the number of ranks now.

    Returns:
        A :func:`for_world` view; with ``size == initial_size``, ``for_world(data, size)`` under either rule.
    """
    initial = for_world(data, initial_size)
    if on_resize == "keep_global_batch":
        return initial
    global_batch_size, eval_global_batch_size = world_batches(initial)
    per_rank = global_batch_size // initial_size
    eval_per_rank = eval_global_batch_size // initial_size
    return dataclasses.replace(initial, global_batch_size=per_rank * size, eval_global_batch_size=eval_per_rank * size)


def resized(global_batch_size: int, learning_rate: float, on_resize: str, initial_size: int,
            size: int) -> Tuple[int, float]:
    """Each rank's batch and the learning rate of ``size`` ranks in a job that started with ``initial_size``, by the
    config trainer's elastic rule (``elastic.on_resize``), for a training loop of one's own.

    Args:
        global_batch_size: the global batch of the initial world.
        learning_rate: the rate for that global batch.
        on_resize: ``"keep_global_batch"`` (each rank's batch becomes ``global / size``; the rate stays) or
            ``"keep_rank_batch"`` (each rank keeps its initial batch; the rate follows the new global batch by the
            linear rule: ``learning_rate x size / initial_size``).
        initial_size: how many ranks the job started with.
        size: how many ranks it has now.

    Returns:
        (each rank's batch, the learning rate).

    Raises:
        ConfigError: an unknown rule, or ranks that do not divide the batch.
    """
    if on_resize == "keep_global_batch":
        return per_rank_batch(global_batch_size, size), learning_rate
    if on_resize == "keep_rank_batch":
        return per_rank_batch(global_batch_size, initial_size), learning_rate * (size / initial_size)
    raise ConfigError(f"on_resize must be keep_global_batch or keep_rank_batch (Received: on_resize={on_resize!r})")

