"""The config trainer's ranks on a Ray cluster (``python -m hvdkeras.train --launcher ray``), started again after a
lost worker or node.

Each attempt is one :class:`~hvdkeras.ray.executor.RayExecutor` of ``np`` ranks running the trainer's rank function;
a lost worker ends the attempt (:class:`~hvdkeras.engines.failures.RankExitedError`) and the run's
:class:`~hvdkeras.engines.attempts.Attempts` starts the next, up to ``max_retries``: the ranks resume from the
workdir's last checkpoint, as ranks that ``horovodrun`` starts again do. A user error (a changed config, a workdir
another job holds, a cluster that cannot hold the ranks) is raised at once, never retried.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Optional, Sequence

from hvdkeras.engines import failures
from hvdkeras.engines.attempts import Attempts
from hvdkeras.launch.ray import RayOptions
from hvdkeras.ray import cluster
from hvdkeras.ray.executor import RayExecutor, Settings

RETRY_HINT = " (the ranks resume from the workdir's last checkpoint)"
PASSED_ENV = ("TF_CPP_MIN_LOG_LEVEL", "TFDS_DATA_DIR")  # the driver's, to every rank when set


def passed_environment(environ: Dict[str, str]) -> Dict[str, str]:
    """The driver's variables every rank gets (a quiet TensorFlow by default, the data folders)."""
    env = {name: environ[name] for name in PASSED_ENV if environ.get(name)}
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


def run_ranks(fn: Callable[..., Any], args_for: Callable[[int], Sequence[Any]], np_: int, options: RayOptions,
              settings: Optional[Settings] = None) -> List[Any]:
    """``fn(*args_for(attempt))`` on ``np_`` ranks of the Ray cluster at ``options.address``, again after a lost
    worker while ``options.max_retries`` allow.

    Returns:
        Each rank's return value of the attempt that finished, in rank order.

    Raises:
        HvdkerasError: a user error, from the driver or a rank.
        RetriesExhaustedError: the last allowed attempt failed too.
    """
    settings = settings or Settings()
    cluster.connect(options.address, timeout_s=float(settings.timeout_s))
    attempts = Attempts(options.max_retries, RETRY_HINT)
    env = passed_environment(dict(os.environ))

    def once() -> List[Any]:
        executor = RayExecutor(settings, num_workers=np_, cpus_per_worker=options.cpus_per_worker,
                               use_gpu=options.gpus_per_worker > 0, gpus_per_worker=options.gpus_per_worker or None)
        try:
            executor.start(extra_env_vars=env)
            return executor.run(fn, list(args_for(attempts.starts - 1)))
        finally:
            executor.shutdown()

    try:
        return attempts.retry(once, retry_on=(failures.RankExitedError,))
    except BaseException:
        cluster.leave()  # the command's one line is its last: no worker's output forwarded after it
        raise
