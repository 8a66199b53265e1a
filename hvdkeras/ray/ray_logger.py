"""Values a rank logs for the driver's callbacks (``horovod.ray.ray_logger``): ``log`` on a rank, ``relay`` on the
driver.

``RayExecutor.run(..., callbacks=[...])`` (and ``execute``, and ``ElasticRayExecutor.run``) hands every value a rank
passes to :func:`log` to each callback, in the driver's process, while the ranks run, and the last of them before
the call returns. The values travel through one ``ray.util.queue.Queue`` actor of no CPU on the driver's node. The
ranks also get it in ``horovod.ray.ray_logger`` when Horovod's Ray module imports, so a function that still calls
``from horovod.ray import ray_logger`` logs the same way. Horovod documents the values as rank 0's; like Horovod, the
relay passes on what any rank logs: log on rank 0 for one value per step.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

from hvdkeras.common import log as _log

_queue: Any = None
_warned = False
_POLL_S = 0.1  # how long the driver's thread waits for a value before it looks whether the run ended


def configure(queue: Any) -> None:
    """Sends this process's :func:`log` values to ``queue`` (None: nowhere); Horovod's ``ray_logger`` too."""
    global _queue
    _queue = queue
    try:
        from horovod.ray import ray_logger as horovods
    except Exception:  # noqa: BLE001 - Horovod's Ray module may not import (its own extra's pins); ours still works
        return
    horovods.configure(queue)


def log(info_dict: Dict[str, Any]) -> None:
    """Sends ``info_dict`` (serializable values) to the driver's callbacks; a warning, once, when the driver gave
    none."""
    global _warned
    if _queue is not None:
        _queue.put(info_dict)
    elif not _warned:
        _warned = True
        _log.warning("ray_logger.log: this run has no callbacks, so the values go nowhere (pass"
                     " callbacks=[...] to RayExecutor.run or execute)")


@contextlib.contextmanager
def relay(ray: Any, callbacks: Optional[Sequence[Callable[[Any], Any]]],
          workers: Callable[[], Sequence[Any]]) -> Iterator[Optional[Any]]:
    """For the ``with`` block, the queue that carries the ranks' values to ``callbacks`` (None without callbacks).

    Args:
        ray: the ``ray`` module.
        callbacks: called with each value, in order, on a thread of the driver.
        workers: the actors to give the queue (:meth:`~hvdkeras.ray.worker.RankWorker.set_queue`) now.

    Raises:
        Exception: the first error a callback raised, once the block has ended without one of its own.
    """
    if not callbacks:
        yield None
        return
    from ray.util.queue import Empty, Queue
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = ray.get_runtime_context().get_node_id()
    # On the driver's node, never elsewhere: a soft affinity let Ray place it on another node, whose loss then
    # failed every rank's next log
    on_driver = NodeAffinitySchedulingStrategy(here, soft=False)
    queue = Queue(actor_options={"num_cpus": 0, "scheduling_strategy": on_driver})
    done = threading.Event()
    errors: List[BaseException] = []

    def pump() -> None:
        while True:
            try:
                value = queue.get(timeout=_POLL_S)
            except Empty:
                if done.is_set():
                    return
                continue
            except Exception:  # noqa: BLE001 - the queue's actor is gone: nothing more can come
                return
            for callback in callbacks:
                try:
                    callback(value)
                except Exception as exc:  # noqa: BLE001 - raised when the run ends, not on this thread
                    if not errors:
                        errors.append(exc)

    thread = threading.Thread(target=pump, name="ray-logger-relay", daemon=True)
    try:
        ray.get([w.set_queue.remote(queue) for w in workers()])
        thread.start()
        yield queue
    finally:
        done.set()
        if thread.is_alive():
            thread.join(timeout=60)
        try:
            queue.shutdown()
        except Exception:  # noqa: BLE001 - gone with the cluster
            pass
    if errors:
        raise errors[0]
