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

The config path's driver (the world's data and learning rate on a resize,
``elastic.on_resize``) is :class:`hvdkeras.training.drivers.elastic.ElasticDriver`; this module
is Horovod's elastic API, also for scripts of one's own (:mod:`hvdkeras.keras`): names re-exported from
:mod:`hvdkeras.runtime.elastic_state` and :mod:`hvdkeras.callbacks.commit_position`.
"""
from hvdkeras.callbacks.commit_position import CommitPositionCallback
from hvdkeras.runtime.elastic_state import KerasState, run

__all__ = ["CommitPositionCallback", "KerasState", "run"]
