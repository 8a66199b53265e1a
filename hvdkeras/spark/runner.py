"""``hvdkeras.spark.run``: a function as N Horovod ranks on Spark's executors, results in rank order.

It is Horovod's ``horovod.spark.run`` (an ordinary Spark job of ``num_proc`` tasks, each
starting one rank), with what makes it end clearly instead of waiting:

* ``num_proc`` above the task slots Spark has (``spark.default.parallelism``: the cores
  of ``local[N]`` or of the registered executors) is refused at once in one line; Horovod
  would wait ``start_timeout`` (600 s by default) for tasks that cannot start;
* the executors must run a Python with Horovod: on a ``local`` master one that is not this
  process's (``PYSPARK_PYTHON`` unset) is refused in one line, naming the variable to set;
* Gloo, not MPI, unless asked (``use_mpi=True``): no ``mpirun`` inside executors;
* a start that still times out (an executor lost while starting) is one line naming the timeout.
"""
from __future__ import annotations

import os
import sys
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from hvdkeras.common.errors import SetupError

DEFAULT_START_TIMEOUT_S = 120


def _spark_context() -> Any:
    import pyspark

    sc = pyspark.SparkContext._active_spark_context
    if sc is None:
        raise SetupError("hvdkeras.spark.run needs a running SparkSession: create one first"
                         " (SparkSession.builder.master('local[2]').getOrCreate(), or spark-submit)")
    return sc


def task_slots(sc: Any) -> int:
    """How many tasks Spark runs at once: ``spark.default.parallelism`` (``local[N]``'s N, or the executors' cores)."""
    return int(sc.defaultParallelism)


def check_cluster(sc: Any, num_proc: int) -> None:
    """One line for a job that could never start: more ranks than task slots, or executors without this Python.

    Raises:
        SetupError: ``num_proc`` is above :func:`task_slots`, or a local master's executors run another Python.
    """
    slots = task_slots(sc)
    if num_proc > slots:
        raise SetupError(f"num_proc={num_proc} ranks need {num_proc} Spark task slots at once, but this Spark has"
                         f" {slots} (master {sc.master}); lower num_proc to {slots} or give Spark more cores")
    python = getattr(sc, "pythonExec", None)
    if sc.master.startswith("local") and python and os.path.realpath(python) != os.path.realpath(sys.executable):
        raise SetupError(f"Spark's executors run {python}, not this Python ({sys.executable}), which has Horovod:"
                         f" set PYSPARK_PYTHON={sys.executable} before the SparkSession starts")


def run(fn: Callable[..., Any], args: Sequence[Any] = (), kwargs: Optional[Mapping[str, Any]] = None,
        num_proc: Optional[int] = None, start_timeout: Optional[int] = None, use_mpi: Optional[bool] = None,
        use_gloo: Optional[bool] = None, extra_mpi_args: Optional[str] = None,
        env: Optional[Dict[str, str]] = None, stdout: Any = None, stderr: Any = None, verbose: int = 1,
        nics: Any = None, prefix_output_with_timestamp: bool = False,
        executable: Optional[str] = None) -> List[Any]:
    """Runs ``fn(*args, **kwargs)`` as ``num_proc`` Horovod ranks in Spark tasks (Horovod's arguments and order).

    Args:
        fn: the function each rank runs; it calls ``hvd.init()`` itself.
        args: its positional arguments.
        kwargs: its keyword arguments.
        num_proc: the number of ranks (default: the task slots, :func:`task_slots`).
        start_timeout: seconds for every rank's task to start (default 120,
            ``HOROVOD_SPARK_START_TIMEOUT`` if set).
        use_mpi: launch the ranks with MPI instead of Gloo.
        use_gloo: launch them with Gloo (the default).
        extra_mpi_args: more ``mpirun`` arguments, with ``use_mpi``.
        env: the ranks' environment (default: this process's).
        stdout: where the ranks' standard output goes.
        stderr: where their standard error goes.
        verbose: Horovod's verbosity.
        nics: the network interfaces to use.
        prefix_output_with_timestamp: prefix each output line with its time.
        executable: the Python the ranks run (default: this one).

    Returns:
        Each rank's return value, in rank order.

    Raises:
        SetupError: the job cannot start (too few slots, another Python, no SparkSession, a start that timed out).
    """
    import horovod.spark
    from horovod.runner.common.util.timeout import TimeoutException

    sc = _spark_context()
    num_proc = num_proc or task_slots(sc)
    check_cluster(sc, num_proc)
    if start_timeout is None:
        start_timeout = int(os.environ.get("HOROVOD_SPARK_START_TIMEOUT", DEFAULT_START_TIMEOUT_S))
    if use_gloo is None and not use_mpi:
        use_gloo = True
    try:
        return list(horovod.spark.run(
            fn, args=tuple(args), kwargs=dict(kwargs or {}), num_proc=num_proc, start_timeout=start_timeout,
            use_mpi=use_mpi, use_gloo=use_gloo, extra_mpi_args=extra_mpi_args, env=env, stdout=stdout,
            stderr=stderr, verbose=verbose, nics=nics, prefix_output_with_timestamp=prefix_output_with_timestamp,
            executable=executable or sys.executable))
    except TimeoutException as exc:
        raise SetupError(f"the {num_proc} ranks' Spark tasks did not all start within start_timeout={start_timeout}"
                         f" s ({str(exc).splitlines()[0][:160]}); check that the executors are alive and have"
                         f" {num_proc} free task slots, or raise start_timeout") from None
