"""The data-parallel rules, written once: how a global batch splits over ranks and how the learning rate scales.

Batch split, for ``N`` ranks::

    per_rank_batch  = global_batch_size / N                   (must divide evenly)
    steps_per_epoch = (num_examples // N) // per_rank_batch    (the same on every rank)

Linear scaling rule (Goyal et al. 2017): ``optimizer.learning_rate`` is the
single-process rate; the optimizer gets::

    ranks:        scaled_lr = learning_rate * N
    global_batch: scaled_lr = learning_rate * global_batch_size / base_batch_size
    none:         scaled_lr = learning_rate

Warmup (:mod:`hvdkeras.schedules`) starts from ``scaled_lr / N``. Pure Python: the
trainer, the data pipeline and the dry run all use these.
"""
from __future__ import annotations

from hvdkeras.config import OptimizerConfig
from hvdkeras.errors import ConfigError


def per_rank_batch(global_batch_size: int, num_ranks: int) -> int:
    """``global_batch_size / num_ranks``; a ConfigError when the ranks do not divide it."""
    if global_batch_size % num_ranks:
        raise ConfigError(f"data.global_batch_size={global_batch_size} is not divisible by the {num_ranks} ranks")
    return global_batch_size // num_ranks


def steps_per_epoch(num_examples: int, global_batch_size: int, num_ranks: int) -> int:
    """``(num_examples // num_ranks) // (global_batch_size // num_ranks)``: the same on every rank."""
    return (num_examples // num_ranks) // per_rank_batch(global_batch_size, num_ranks)


def scaled_learning_rate(cfg: OptimizerConfig, num_ranks: int, global_batch_size: int) -> float:
    """The rate after the scaling rule in ``cfg.lr_scaling`` (formulas in the module docstring)."""
    if cfg.lr_scaling == "ranks":
        return cfg.learning_rate * num_ranks
    if cfg.lr_scaling == "global_batch":
        return cfg.learning_rate * global_batch_size / cfg.base_batch_size
    return cfg.learning_rate
