"""How a :class:`hvdkeras.training.trainer.Trainer`'s model is driven through the epochs.

* :class:`~hvdkeras.training.drivers.plain.PlainDriver`: a fixed world; resume from the latest
  intact checkpoint on every rank, train, a lost rank ends the job with one line;
* :class:`~hvdkeras.elastic.driver.ElasticDriver`: Horovod's elastic mode; the world
  may shrink and grow, the position is committed in memory and the data and rate follow
  the world.

Each driver owns what changes as it drives (the world's data, the history) and uses
the trainer through :class:`hvdkeras.training.drivers.loop.Loop`, the one declared contract between them. Where the
run is and how it resumes is the parts' :class:`hvdkeras.runtime.position.RunPosition`; where
training continues from ``(epoch, batch)`` is :func:`hvdkeras.runtime.checkpointing.next_position`,
for both.
"""
