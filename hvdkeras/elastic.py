"""Elastic training: keep going when hosts leave or join (Horovod's elastic mode).

Launch with a host discovery script and a range of processes::

    horovodrun -np 2 --min-np 1 --max-np 4 --host-discovery-script "python -m hvdkeras.discover_hosts" \\
        python -m hvdkeras.train --config configs/digits.yaml --set elastic.enabled=true

(:mod:`hvdkeras.discover_hosts` prints the ``host:slots`` lines of ``$HVDKERAS_HOSTS_FILE``.)

How it works: :class:`KerasState` holds the model and optimizer variables and
the training position (``epoch``, ``batch`` within it). Every
``elastic.commit_every_batches`` batches, and at each epoch end, the state is
*committed*: copied in memory on every rank (and Horovod checks for new hosts).
When a rank dies, the survivors roll back to the last commit; when hosts join,
everyone stops at the next commit. Then Horovod re-forms the ring, rank 0's state
is broadcast to all (new workers included), the input pipeline is rebuilt for
the new number of ranks, and training continues *at the committed position*:
the rest of the interrupted epoch, then the remaining epochs, numbered from the
committed epoch (``fit(initial_epoch=...)``, so the epoch counter, the learning-rate
schedule and ``metrics.jsonl`` carry on; Horovod's own recipe restarts ``fit``
with ``epochs=total - epoch``, which numbers from 0 again).

On a resize, ``elastic.on_resize`` decides:

* ``keep_global_batch``: the global batch stays (with ``data.per_rank_batch_size``:
  the one of the initial ranks), each rank's batch becomes ``global / ranks`` (which
  must divide), and so the learning rate stays, since the scaling rule is a function
  of the global batch alone (:mod:`hvdkeras.scaling`);
* ``keep_rank_batch``: each rank keeps its initial batch, the global batch becomes
  ``per-rank batch x ranks``, and the learning rate follows it by the linear rule:
  ``learning_rate x new global batch / reference batch``.

Either way the rate is :func:`hvdkeras.scaling.scaled_learning_rate` of the new
world's global batch, printed with the resume line.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Tuple

import numpy as np
import tensorflow as tf
from horovod.common.elastic import ObjectState, run_fn
from horovod.common.exceptions import HorovodInternalError

from hvdkeras import checkpointing, compat, distributed, log, scaling
from hvdkeras import config as config_lib

keras = compat.keras


def run(func):
    """``hvd.elastic.run`` (horovod.tensorflow), with every failed Horovod collective a reset.

    Horovod 0.28.1 turns a failed op into a reset only when its error names
    ``HorovodAllreduce``, ``HorovodAllgather`` or ``HorovodBroadcast``, and returns
    ``None`` for any other ``UnknownError``: a peer lost during a grouped allreduce
    (``HorovodGroupedAllreduce``, how :mod:`hvdkeras.gradient_exchange` averages on
    Keras 3) ended training early as if it had finished. Nor does the op in flight
    when a peer dies always name Horovod: it can fail with Gloo's text alone
    (``Read error ...: Connection reset by peer`` at ``{{node hvdkeras.grad.6}}``).
    Here any Horovod op's error (:func:`hvdkeras.distributed.is_horovod_op_failure`)
    resets and every other error propagates.
    """
    def wrapper(state, *args, **kwargs):
        try:
            return func(state, *args, **kwargs)
        except tf.errors.UnknownError as exc:
            if distributed.is_horovod_op_failure(exc):
                raise HorovodInternalError(exc) from exc
            raise

    return run_fn(wrapper, distributed.reinit)


class KerasState(ObjectState):
    """Horovod's ``hvd.elastic.KerasState``: a model's and its optimizer's variables, plus ``kwargs``, kept in step.

    ``commit()`` copies them in memory on every rank (and checks for new hosts);
    after a lost rank, ``restore()`` rolls every rank back to the last commit; after a
    reset, ``sync()`` gives every rank rank 0's state (new workers included). The
    keyword arguments (``epoch=0, batch=0``) become attributes, committed and synced
    the same way.

    Unlike Horovod's (whose copy of the optimizer state is taken when the state is
    made and then misses the slots the first step creates), each commit records the
    variables that exist at that moment, and ``sync`` first creates the optimizer's
    slots, so a state made before ``fit`` covers the whole optimizer on Keras 2 and 3.
    The model must be built (Horovod's rule), or the variables to sync do not exist yet.
    """

    def __init__(self, model, optimizer=None, **kwargs):
        if not getattr(model, "built", True) or not model.variables:
            raise ValueError("KerasState needs a built model, so there are weights to keep: add keras.Input(shape) "
                             "as the first layer or call model.build(input_shape) first. "
                             f"Received: model={getattr(model, 'name', model)!r} with no variables")
        self.model = model
        self.optimizer = optimizer if optimizer is not None else model.optimizer
        self._saved: List[Tuple[object, np.ndarray]] = []
        super().__init__(bcast_object=lambda obj: distributed.broadcast_object(obj, name="hvdkeras.elastic"),
                         get_rank=distributed.rank, **kwargs)
        self._save_variables()

    def _variables(self):
        optimizer = [] if self.optimizer is None else compat.optimizer_variables(self.optimizer)
        return list(self.model.variables) + optimizer

    def _save_variables(self):
        self._saved = [(v, v.numpy()) for v in self._variables()]

    def save(self):
        self._save_variables()
        super().save()

    def restore(self):
        for variable, value in self._saved:
            variable.assign(value)
        super().restore()

    def sync(self):
        if self.optimizer is not None and not compat.optimizer_built(self.optimizer):
            compat.build_optimizer(self.optimizer, self.model.trainable_variables)
        distributed.broadcast_variables(self._variables())
        self._save_variables()
        super().sync()


class CommitPositionCallback(keras.callbacks.Callback):
    """The elastic driver's: records the position (``epoch``, batches done) after every batch; commits every
    ``every_batches`` batches and at epoch ends."""
    def __init__(self, state: KerasState, every_batches: int, batch_offset: int = 0):
        super().__init__()
        self.state = state
        self.every_batches = every_batches
        self.batch_offset = batch_offset  # batches of this epoch done before this fit (a resumed epoch)

    def on_epoch_begin(self, epoch, logs=None):
        self.state.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        self.state.batch = self.batch_offset + batch + 1
        if self.state.batch % self.every_batches == 0:
            self.state.commit()

    def on_epoch_end(self, epoch, logs=None):
        self.batch_offset = 0
        self.state.epoch = epoch + 1
        self.state.batch = 0
        self.state.commit()


def data_config_for(cfg: config_lib.Config, initial_size: int, size: int) -> config_lib.DataConfig:
    """The data section for ``size`` ranks under ``elastic.on_resize`` (see the module docstring)."""
    initial = scaling.for_world(cfg.data, initial_size)
    if cfg.elastic.on_resize == "keep_global_batch":
        return initial
    per_rank = initial.global_batch_size // initial_size
    eval_per_rank = initial.eval_global_batch_size // initial_size
    return dataclasses.replace(initial, global_batch_size=per_rank * size, eval_global_batch_size=eval_per_rank * size)


class ElasticDriver:
    """Trains a :class:`hvdkeras.trainer.Trainer`'s model under :func:`run`, re-forming on every resize.

    It owns what changes with the world: the training position (:class:`KerasState`),
    the data and learning rate for the current number of ranks, and the history so far.
    Workers that join later start :meth:`fit` while the others are mid-training, so
    every collective happens inside the elastic function, after the state sync: the
    checkpoint is loaded on rank 0 alone and reaches the others through that sync.
    """

    def __init__(self, trainer):
        self.trainer = trainer
        self.config = trainer.config
        self.initial_size = trainer.process.size
        self.data = trainer.data
        self.history: Dict[str, List[float]] = {}

    def _restored_position(self) -> Tuple[int, int]:
        """Rank 0 alone loads the latest intact checkpoint (the state sync shares it); ``(epoch, batch)``."""
        backup = self.trainer.backup
        if backup is None or not self.config.checkpoint.resume or not distributed.is_chief():
            return 0, 0
        latest = backup.store.latest_intact(warn=log.warning)
        if latest is None:
            return 0, 0
        backup.store.restore(latest, checkpointing.trackable_for(self.trainer.model))
        return latest.position

    def fit(self) -> Dict[str, float]:
        epoch, batch = self._restored_position()
        state = KerasState(self.trainer.model, epoch=epoch, batch=batch)
        run(self._train)(state)
        return self.trainer.finish({k: float(v[-1]) for k, v in self.history.items()}, self.data)

    def _train(self, state: KerasState) -> None:
        """One attempt at the rest of the training in the current world (re-run by Horovod after a reset)."""
        cfg, trainer = self.config, self.trainer
        size, rank = distributed.size(), distributed.rank()
        data_cfg = data_config_for(cfg, self.initial_size, size)
        config_lib.validate_for_world(dataclasses.replace(cfg, data=data_cfg), size)
        self.data = trainer.data_for_world(data_cfg, rank, size)
        scaled_lr = scaling.scaled_learning_rate(cfg.optimizer, cfg.data, data_cfg.global_batch_size)
        trainer.preflight(self.data, scaled_lr)
        epoch, batch = state.epoch, min(state.batch, self.data.steps_per_epoch)
        log.info(f"rank {rank}/{size}: elastic {'resuming' if epoch or batch else 'starting'} at"
                 f" epoch {epoch + 1}, batch {batch} (global batch {data_cfg.global_batch_size} = {size} x"
                 f" {self.data.per_rank_batch}, lr {scaled_lr:g})", every_rank=True)
        every = cfg.elastic.commit_every_batches
        # The schedule counts in whole epochs of the current sharding, also in a partial epoch.
        trainer.fit_from(self.data, epoch, batch, scaled_lr, size, self.history,
                         extra_callbacks=lambda initial_batch: [CommitPositionCallback(state, every, initial_batch)])
