"""What every dataset gives a trainer, and the names it is found by: :class:`Shard` (this rank's share),
:class:`Datasets` (this rank's data), ``REGISTRY`` (the built-in ``data.name``s; :mod:`.builtin` registers them)."""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional, Tuple

import tensorflow as tf

from hvdkeras.common.registry import Registry

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
