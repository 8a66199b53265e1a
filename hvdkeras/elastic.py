"""Elastic training: keep going when hosts leave or join (Horovod's elastic mode).

Launch with a host discovery script and a range of processes::

    horovodrun -np 2 --min-np 1 --max-np 4 --host-discovery-script tools/discover_hosts.sh \\
        python -m hvdkeras.train --config configs/digits.yaml --set elastic.enabled=true

(``tools/discover_hosts.sh`` prints the ``host:slots`` lines of ``$HVDKERAS_HOSTS_FILE``.)

How it works: :class:`TrainingState` holds the model and optimizer variables and
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

* ``keep_global_batch``: the global batch stays, each rank's batch becomes
  ``global_batch_size / ranks`` (which must divide), the learning rate stays;
* ``keep_rank_batch``: each rank keeps ``global_batch_size / initial ranks``, the
  global batch changes with the ranks, and the learning rate is rescaled by the
  config's rule for the new global batch.
"""
from __future__ import annotations

from typing import List

import numpy as np

from horovod.common.elastic import ObjectState

from hvdkeras import compat, distributed

keras = compat.keras


def run(func):
    """``hvd.elastic.run`` (horovod.tensorflow), with every failed Horovod collective a reset.

    Horovod 0.28.1 turns a failed op into a reset only when its error names
    ``HorovodAllreduce``, ``HorovodAllgather`` or ``HorovodBroadcast``, and returns
    ``None`` for any other ``UnknownError``: a peer lost during a grouped allreduce
    (``HorovodGroupedAllreduce``, how :mod:`hvdkeras.gradient_exchange` averages on
    Keras 3) ended training early as if it had finished. Here any Horovod op's error
    resets and every other error propagates.
    """
    import horovod.tensorflow as hvd
    import tensorflow as tf
    from horovod.common.elastic import run_fn
    from horovod.common.exceptions import HorovodInternalError

    def wrapper(state, *args, **kwargs):
        try:
            return func(state, *args, **kwargs)
        except tf.errors.UnknownError as exc:
            if "Horovod" in (exc.message or ""):  # HorovodGroupedAllreduce, ..., "Horovod has been shut down"
                raise HorovodInternalError(exc) from exc
            raise

    def reset():
        hvd.shutdown()
        hvd.init()

    return run_fn(wrapper, reset)


class TrainingState(ObjectState):
    """Model and optimizer variables plus ``epoch`` and ``batch``, committed in memory, synced from rank 0."""

    def __init__(self, model, epoch: int = 0, batch: int = 0):
        self.model = model
        self._saved: List[np.ndarray] = []
        import horovod.tensorflow as hvd

        super().__init__(bcast_object=lambda obj: hvd.broadcast_object(obj, root_rank=0, name="hvdkeras.elastic"),
                         get_rank=hvd.rank, epoch=epoch, batch=batch)

    def _variables(self):
        return list(self.model.variables) + compat.optimizer_variables(self.model.optimizer)

    def save(self):
        self._saved = [v.numpy() for v in self._variables()]
        super().save()

    def restore(self):
        for variable, value in zip(self._variables(), self._saved):
            variable.assign(value)
        super().restore()

    def sync(self):
        distributed.broadcast_variables(self._variables())
        super().sync()


class CommitStateCallback(keras.callbacks.Callback):
    """Records the position after every batch and commits every ``every_batches`` batches and at epoch ends."""

    def __init__(self, state: TrainingState, every_batches: int, batch_offset: int = 0):
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
