"""Where a Spark estimator's training runs: Horovod's ``Backend`` and ``SparkBackend``, and :func:`run_retrying`."""
from __future__ import annotations

import copy
import os
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from hvdkeras.common.errors import SetupError
from hvdkeras.engines.attempts import Attempts
from hvdkeras.spark.common import environment


class Backend:
    """Runs the training function on every rank (Horovod's interface); a subclass implements both methods."""

    def run(self, fn: Callable[..., Any], args: Sequence[Any] = (), kwargs: Optional[Mapping[str, Any]] = None,
            env: Optional[Dict[str, str]] = None) -> List[Any]:
        """Runs ``fn`` on every rank; each rank's result, in rank order."""
        raise NotImplementedError

    def num_processes(self) -> int:
        """The number of ranks."""
        raise NotImplementedError

    def check(self) -> None:
        """Refuses, in one line, ranks that could never start here; a fit calls it before it writes anything."""

    def recover(self) -> None:
        """Waits for what a lost rank took with it (an executor Spark replaces) before a fit starts its ranks again."""

    def run_retrying(self, fn: Callable[..., Any], args: Sequence[Any] = (), env: Optional[Dict[str, str]] = None,
                     max_retries: int = 0, retry_hint: str = "") -> List[Any]:
        """Runs ``fn`` on every rank, all of them again after a failure, up to ``max_retries`` times.

        Args:
            fn: what each rank runs.
            args: its arguments.
            env: what the ranks' environment adds.
            max_retries: how often the ranks start again.
            retry_hint: what a retry's warning line adds (where the ranks resume).

        Returns:
            Each rank's result, in rank order.

        Raises:
            RankFailedError: the last attempt failed; its text says why.
        """
        return _retry_loop(self, fn, args, env, max_retries, retry_hint)


def _retry_loop(backend: Any, fn: Callable[..., Any], args: Sequence[Any], env: Optional[Dict[str, str]],
                max_retries: int, retry_hint: str) -> List[Any]:
    """The retries of a backend that runs the gang whole (:meth:`Attempts.retry`), recovering it between them."""
    return Attempts(max_retries, retry_hint).retry(lambda: list(backend.run(fn, args=args, env=env)),
                                                   getattr(backend, "recover", lambda: None))


def run_retrying(backend: Any, fn: Callable[..., Any], args: Sequence[Any], env: Optional[Dict[str, str]],
                 max_retries: int, retry_hint: str = "") -> List[Any]:
    """:meth:`Backend.run_retrying` on ``backend``, or the same loop around the ``run`` of a backend that has only
    Horovod's interface."""
    retrying = getattr(backend, "run_retrying", None)
    if retrying is not None:
        return list(retrying(fn, args=args, env=env, max_retries=max_retries, retry_hint=retry_hint))
    return _retry_loop(backend, fn, args, env, max_retries, retry_hint)


class SparkBackend(Backend):
    """Runs the training function through :func:`hvdkeras.spark.run` on the active SparkSession.

    Horovod's ``SparkBackend`` arguments, with Horovod's meaning.

    Args:
        num_proc: the number of ranks (default: Spark's task slots).
        env: the ranks' environment (default: the driver's allowed variables,
            :mod:`hvdkeras.spark.common.environment`; one you give goes whole).
        stdout: where the ranks' standard output goes (default: the driver's).
        stderr: where their standard error goes.
        prefix_output_with_timestamp: prefix each line of their output with its time.
        start_timeout: seconds for every rank's task to start (:func:`hvdkeras.spark.run`'s default).
        verbose: Horovod's verbosity.
        nics: the network interfaces the ranks use.
        use_mpi: start the ranks with MPI.
        use_gloo: start them with Gloo (the default).
        extra_mpi_args: more ``mpirun`` arguments, with ``use_mpi``.
        executable: the Python the ranks run (default: the one Spark runs each rank's task in).
        session: a Spark Connect session to start the ranks through (:mod:`hvdkeras.spark.common.connect`; default: the
            driver's SparkContext); ``num_proc`` is then required. A fit on a Connect DataFrame passes its own.
    """

    def __init__(self, num_proc: Optional[int] = None, env: Optional[Dict[str, str]] = None, stdout: Any = None,
                 stderr: Any = None, prefix_output_with_timestamp: bool = False, start_timeout: Optional[int] = None,
                 verbose: int = 1, nics: Any = None, use_mpi: Optional[bool] = None, use_gloo: Optional[bool] = None,
                 extra_mpi_args: Optional[str] = None, executable: Optional[str] = None, session: Any = None):
        from hvdkeras.spark.runner import spark_context, task_slots

        if session is not None and not num_proc:
            raise SetupError("through Spark Connect, give num_proc (KerasEstimator(num_proc=...) or"
                             " SparkBackend(num_proc=...)): a Connect client cannot count the executors' task slots")
        self._num_proc = num_proc or max(task_slots(spark_context()), 1)
        self._session = session
        self._env = env
        self._kwargs: Dict[str, Any] = dict(
            stdout=stdout, stderr=stderr, prefix_output_with_timestamp=prefix_output_with_timestamp,
            start_timeout=start_timeout, verbose=verbose, nics=nics, use_mpi=use_mpi, use_gloo=use_gloo,
            extra_mpi_args=extra_mpi_args, executable=executable)

    def run(self, fn: Callable[..., Any], args: Sequence[Any] = (), kwargs: Optional[Mapping[str, Any]] = None,
            env: Optional[Dict[str, str]] = None) -> List[Any]:
        """Runs ``fn`` as :meth:`num_processes` ranks, once; each rank's result, in rank order (see
        :meth:`run_retrying`)."""
        return self.run_retrying(fn, args=args, kwargs=kwargs, env=env)

    def run_retrying(self, fn: Callable[..., Any], args: Sequence[Any] = (), env: Optional[Dict[str, str]] = None,
                     max_retries: int = 0, retry_hint: str = "",
                     kwargs: Optional[Mapping[str, Any]] = None) -> List[Any]:
        """Runs ``fn`` as :meth:`num_processes` ranks in one Spark barrier stage, which Spark (or, on a local master,
        the driver) starts again after a rank or executor is lost, up to ``max_retries`` times
        (:mod:`hvdkeras.spark.gang`); each rank's result, in rank order.

        The driver's ``CUDA_VISIBLE_DEVICES`` does not reach the ranks (Horovod's examples hide the GPUs from
        the driver while it builds the model): each rank uses the GPU Spark assigned its task, or its local
        rank's. One that ``env`` sets does (``use_gpu=False`` keeps the ranks off GPUs with it).
        """
        from hvdkeras.spark.runner import run

        full_env = dict(self._env) if self._env else environment.for_ranks(os.environ)
        full_env.pop("CUDA_VISIBLE_DEVICES", None)
        full_env.update(env or {})
        return run(fn, args=args, kwargs=kwargs, num_proc=self._num_proc, env=full_env, max_retries=max_retries,
                   retry_hint=retry_hint, session=self._session, **self._kwargs)

    def num_processes(self) -> int:
        """The number of ranks."""
        return self._num_proc

    def through(self, session: Any) -> "SparkBackend":
        """This backend, its ranks started through the Spark Connect ``session`` (a copy; self if it has one)."""
        if self._session is not None:
            return self
        other = copy.copy(self)
        other._session = session
        return other

    def check(self) -> None:
        """Refuses, in one line, more ranks than Spark's task slots, executors whose Python lacks what a rank needs,
        or an ``executable`` an executor cannot start (:func:`hvdkeras.spark.runner.check_cluster`,
        :func:`~hvdkeras.spark.runner.check_executors`, :func:`~hvdkeras.spark.runner.check_rank_python`)."""
        from hvdkeras.spark import runner

        if self._session is not None:  # a Connect client sees no task slots: a stage that cannot start times out
            runner.check_connect_executors(self._session)
            return
        sc = runner.spark_context()
        runner.check_cluster(sc, self._num_proc)
        runner.check_executors(sc)
        if self._kwargs["executable"]:
            runner.check_rank_python(sc, self._kwargs["executable"])
