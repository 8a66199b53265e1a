"""How a :class:`hvdkeras.trainer.Trainer`'s model is driven through the epochs.

* :class:`~hvdkeras.drivers.plain.PlainDriver`: a fixed world; resume from the latest
  intact checkpoint on every rank, train, a lost rank ends the job with one line;
* :class:`~hvdkeras.drivers.elastic.ElasticDriver`: Horovod's elastic mode; the world
  may shrink and grow, the position is committed in memory and the data and rate follow
  the world.

Each driver owns its state (the position, the world's data, the history) and uses the
trainer through a small interface: ``write_config``, ``data_for_world``,
``preflight``, ``fit_range(data, epoch, batch, scaled_lr, size) -> history``,
``finish``, and the parts ``config``, ``process``, ``model``, ``data``, ``scaled_lr``,
``backup``. Where training continues from ``(epoch, batch)`` is
:func:`hvdkeras.checkpointing.next_position`, for both.
"""
from hvdkeras.drivers.elastic import ElasticDriver
from hvdkeras.drivers.plain import PlainDriver


def for_config(config):
    """The driver class ``config`` asks for: elastic with ``elastic.enabled``, else plain."""
    return ElasticDriver if config.elastic.enabled else PlainDriver


__all__ = ["ElasticDriver", "PlainDriver", "for_config"]
