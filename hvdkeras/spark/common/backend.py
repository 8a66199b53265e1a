"""Where a Spark estimator's training runs: Horovod's ``Backend`` and ``SparkBackend``."""
from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence


class Backend:
    """Runs the training function on every rank (Horovod's interface); a subclass implements both methods."""

    def run(self, fn: Callable[..., Any], args: Sequence[Any] = (), kwargs: Optional[Mapping[str, Any]] = None,
            env: Optional[Dict[str, str]] = None) -> List[Any]:
        """Runs ``fn`` on every rank; each rank's result, in rank order."""
        raise NotImplementedError

    def num_processes(self) -> int:
        """The number of ranks."""
        raise NotImplementedError


class SparkBackend(Backend):
    """Runs the training function through :func:`hvdkeras.spark.run` on the active SparkSession.

    Args:
        num_proc: the number of ranks (default: Spark's task slots).
        env: the ranks' environment (default: this process's).
        **kwargs: more arguments for :func:`hvdkeras.spark.run` (``start_timeout``, ``stdout``, ...).
    """

    def __init__(self, num_proc: Optional[int] = None, env: Optional[Dict[str, str]] = None, **kwargs: Any):
        from hvdkeras.spark.runner import _spark_context, task_slots

        self._num_proc = num_proc or max(task_slots(_spark_context()), 1)
        self._env = env
        self._kwargs = kwargs

    def run(self, fn: Callable[..., Any], args: Sequence[Any] = (), kwargs: Optional[Mapping[str, Any]] = None,
            env: Optional[Dict[str, str]] = None) -> List[Any]:
        """Runs ``fn`` as :meth:`num_processes` ranks; each rank's result, in rank order.

        The ranks see every GPU (``CUDA_VISIBLE_DEVICES`` is dropped): each pins its own by local rank.
        """
        from hvdkeras.spark.runner import run

        full_env = dict(self._env or os.environ)
        full_env.update(env or {})
        full_env.pop("CUDA_VISIBLE_DEVICES", None)
        return run(fn, args=args, kwargs=kwargs, num_proc=self._num_proc, env=full_env, **self._kwargs)

    def num_processes(self) -> int:
        """The number of ranks."""
        return self._num_proc
