"""The elastic driver: Horovod's elastic mode for a :class:`hvdkeras.training.trainer.Trainer`.

On a resize, ``elastic.on_resize`` decides:

* ``keep_global_batch``: the global batch stays (with ``data.per_rank_batch_size``:
  the one of the initial ranks), each rank's batch becomes ``global / ranks`` (which
  must divide), and so the learning rate stays, since the scaling rule is a function
  of the global batch alone (:mod:`hvdkeras.common.scaling`);
* ``keep_rank_batch``: each rank keeps its initial batch, the global batch becomes
  ``per-rank batch x ranks``, and the learning rate follows it by the linear rule:
  ``learning_rate x new global batch / reference batch``.

Either way the rate is :func:`hvdkeras.common.scaling.scaled_learning_rate` of the new
world's global batch, printed with the resume line. The data section of each world
is :meth:`hvdkeras.training.assembly.JobConfig.data_config_for_world`
(:func:`hvdkeras.common.scaling.for_resized_world`).
"""
from __future__ import annotations

from typing import Dict, List

from hvdkeras import config as config_lib
from hvdkeras.callbacks.commit_position import CommitPositionCallback
from hvdkeras.common import log, scaling
from hvdkeras.runtime import checkpointing, distributed
from hvdkeras.runtime.elastic_state import RunState, run
from hvdkeras.training.drivers.loop import Loop


class ElasticDriver:
    """Trains a trainer's model under :func:`run`, re-forming on every resize.

    It owns what changes with the world: the committed state (:class:`RunState`: the weights and the
    run's :class:`hvdkeras.runtime.position.RunPosition`), the data and learning rate for the current
    number of ranks, and the history so far. Workers that join later start :meth:`fit` while the others
    are mid-training, so every collective happens inside the elastic function, after the state sync: the
    checkpoint is loaded on rank 0 alone and reaches the others through that sync.
    """

    def __init__(self, trainer: Loop):
        self.trainer = trainer
        self.parts = trainer.parts
        self.config = trainer.parts.config
        self.data = trainer.parts.data
        self.history: Dict[str, List[float]] = {}

    def fit(self) -> Dict[str, float]:
        """Trains under Horovod's elastic run from the committed position to the last epoch; the final metrics."""
        self.trainer.write_config()
        if self.config.checkpoint.resume:  # rank 0 alone loads it, and its position: the state sync shares both
            self.parts.position.resume_on_chief(self.parts.model)
        run(self._train)(RunState(self.parts.model, self.parts.position))
        return self.trainer.finish({k: float(v[-1]) for k, v in self.history.items()}, self.data)

    def _train(self, state: RunState) -> None:
        """One attempt at the rest of the training in the current world (re-run by Horovod after a reset)."""
        cfg, trainer, job = self.config, self.trainer, self.parts.job
        size, rank = distributed.size(), distributed.rank()
        data_cfg = job.data_config_for_world(size)
        config_lib.validate_for_world(job.for_world(size), size)
        self.data = trainer.data_for_world(rank, size)
        scaled_lr = scaling.scaled_learning_rate(cfg.optimizer, cfg.data, scaling.world_batches(data_cfg)[0])
        trainer.preflight(self.data, scaled_lr)
        epoch, batch = checkpointing.next_position(*state.position.here, self.data.steps_per_epoch)
        log.info(f"rank {rank}/{size}: elastic {'resuming' if epoch or batch else 'starting'} at"
                 f" epoch {epoch + 1}, batch {batch} (global batch {data_cfg.global_batch_size} = {size} x"
                 f" {self.data.per_rank_batch}, lr {scaled_lr:g})", every_rank=True)
        every = cfg.elastic.commit_every_batches
        # The schedule counts in whole epochs of the current sharding, also in a partial epoch.
        history = trainer.fit_range(self.data, epoch, batch, scaled_lr, size,
                                    extra_callbacks=lambda: [CommitPositionCallback(state, every)])
        for key, values in history.items():
            self.history.setdefault(key, []).extend(values)
