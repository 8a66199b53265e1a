"""How a :class:`hvdkeras.training.trainer.Trainer`'s model is driven through the epochs.

* :class:`~hvdkeras.training.drivers.plain.PlainDriver`: a fixed world; resume from the latest
  intact checkpoint on every rank, train, a lost rank ends the job with one line;
* :class:`~hvdkeras.training.drivers.elastic.ElasticDriver`: Horovod's elastic mode; the world
  may shrink and grow, the position is committed in memory and the data and rate follow
  the world.

Each driver owns what changes as it drives (the world's data, the history) and uses
the trainer through :class:`hvdkeras.training.drivers.loop.Loop`, the one declared contract between them. Where the
run is and how it resumes is the parts' :class:`hvdkeras.runtime.position.RunPosition`; where
training continues from ``(epoch, batch)`` is :func:`hvdkeras.runtime.checkpointing.next_position`,
for both.
"""
from __future__ import annotations

from typing import Type, Union

from hvdkeras import config as config_lib
from hvdkeras.training.drivers.elastic import ElasticDriver
from hvdkeras.training.drivers.plain import PlainDriver


def driver_for(config: config_lib.Config) -> Type[Union[PlainDriver, ElasticDriver]]:
    """The driver class ``config`` asks for: elastic with ``elastic.enabled``, else plain."""
    return ElasticDriver if config.elastic.enabled else PlainDriver
