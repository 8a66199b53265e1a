"""``hvdkeras.spark.run``: a function as N Horovod ranks on Spark's executors, results in rank order.

Horovod's ``horovod.spark.run`` with its arguments, its ranks started as one Spark barrier stage
(:mod:`hvdkeras.spark.gang`), and what makes it end clearly instead of waiting:

* ``num_proc`` above the task slots Spark has (``local[N]``'s N; on a cluster the slots of the
  executors registered within Spark's registration time) is refused in one line; a barrier stage
  would wait for them;
* the executors must run a Python with Horovod, TensorFlow and hvdkeras at this driver's versions: one
  Spark task asks an executor's own Python (:func:`check_executors`), and a mismatch is refused in one
  line naming what is missing and how to ship it;
* Gloo, not MPI, unless asked (``use_mpi=True``, which starts the ranks through Horovod's own runner);
* a stage whose tasks cannot start (an executor that never comes back) is cancelled after ``start_timeout``
  with one line naming it.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from hvdkeras.common.errors import RankFailedError, SetupError
from hvdkeras.engines.python_check import python_mismatch, python_probe
from hvdkeras.spark.common import environment, versions

DEFAULT_START_TIMEOUT_S = 120


def spark_context() -> Any:
    """The active SparkContext, or :class:`SetupError` in one line when no SparkSession runs."""
    import pyspark

    sc = pyspark.SparkContext._active_spark_context
    if sc is None:
        if _active_connect_session() is not None:
            raise SetupError("the active SparkSession is a Spark Connect one, which has no SparkContext: pass it on,"
                             " as hvdkeras.spark.run(..., num_proc=N, session=spark) or"
                             " SparkBackend(num_proc=N, session=spark); fit(df) on its DataFrame needs neither")
        raise SetupError("hvdkeras.spark.run needs a running SparkSession: create one first"
                         " (SparkSession.builder.master('local[2]').getOrCreate(), or spark-submit)")
    return sc


def _active_connect_session() -> Any:
    """The active Spark Connect session, or None (no session, a classic one, a pyspark without Connect)."""
    try:
        from pyspark.sql import SparkSession

        from hvdkeras.spark.common.connect import is_connect

        active = SparkSession.getActiveSession()
    except Exception:  # noqa: BLE001 - a pyspark without Connect's client, or none at all
        return None
    return active if active is not None and is_connect(active) else None


def _registered_slots(sc: Any) -> Optional[int]:
    """The registered executors' task slots (their cores over ``spark.task.cpus``), as Spark's barrier stages
    count them; None where the JVM cannot say (a stand-in context, a Spark without the call)."""
    try:
        jsc = sc._jsc.sc()
        return int(jsc.maxNumConcurrentTasks(jsc.resourceProfileManager().defaultResourceProfile()))
    except Exception:  # noqa: BLE001 - py4j's errors, an older Spark, a context without a JVM
        return None


def _registration(sc: Any) -> Tuple[Optional[int], float, float]:
    """(the application's slot cap from ``spark.cores.max`` or None, Spark's registration time in seconds
    (``spark.scheduler.maxRegisteredResourcesWaitingTime``, 30 s by default), the SparkContext's start (epoch s))."""
    conf = sc.getConf()
    cores_max = conf.get("spark.cores.max")
    cap = int(cores_max) // int(conf.get("spark.task.cpus", "1")) if cores_max else None
    wait_s = sc._jsc.sc().conf().getTimeAsMs("spark.scheduler.maxRegisteredResourcesWaitingTime", "30s") / 1000.0
    return cap, wait_s, sc.startTime / 1000.0


# The most task slots each application (by master and SparkContext start) has had registered at once: fewer now
# means an executor was lost (a killed JVM, a lost node) and the cluster manager is starting its replacement.
_SLOTS_SEEN: Dict[Tuple[str, int], int] = {}


def _counts_registered_slots(sc: Any) -> bool:
    """Whether ``sc`` is a cluster whose registered executors' slots Spark can say (not a local master)."""
    return not sc.master.startswith("local") and _registered_slots(sc) is not None


def _slots_waited(sc: Any, wanted: Optional[int]) -> Tuple[int, int]:
    """(the registered slots after waiting as :func:`task_slots` says, the most this application has had)."""
    slots = _registered_slots(sc) or 0
    cap, wait_s, started = _registration(sc)
    key = (str(sc.master), int(sc.startTime))
    seen = _SLOTS_SEEN[key] = max(_SLOTS_SEEN.get(key, 0), slots)
    targets = [n for n in (wanted, cap, seen if slots < seen else None) if n is not None]
    deadline = started + wait_s
    if slots < seen:  # an executor it had is being replaced: Spark's registration time again, from now
        deadline = max(deadline, time.time() + wait_s)
    while (not targets or slots < min(targets)) and time.time() < deadline:
        time.sleep(0.2)
        slots = _registered_slots(sc) or 0
        seen = _SLOTS_SEEN[key] = max(seen, slots)
    return slots, seen


def task_slots(sc: Any, wanted: Optional[int] = None) -> int:
    """How many tasks Spark runs at once.

    On a ``local[N]`` master N (``spark.default.parallelism``). On a cluster the registered executors'
    slots: executors register in the seconds after the SparkContext starts, and
    ``spark.default.parallelism`` is at least 2 before any has (so it says 2 for a 1-slot cluster, and for
    a 4-slot one until they have), so this waits until ``wanted`` slots are there, the application's
    ``spark.cores.max`` is reached, or Spark's registration time since the SparkContext started
    (``spark.scheduler.maxRegisteredResourcesWaitingTime``, 30 s by default) is over. Where the application
    had more slots before (an executor was lost and is being replaced), it waits that long again, from now.
    """
    if not _counts_registered_slots(sc):
        return int(sc.defaultParallelism)
    return _slots_waited(sc, wanted)[0]


def check_cluster(sc: Any, num_proc: int) -> None:
    """One line for a job that could never start: more ranks than task slots.

    Raises:
        SetupError: ``num_proc`` is above :func:`task_slots` or the application's ``spark.cores.max``.
    """
    need = f"num_proc={num_proc} ranks need {num_proc} Spark task slots at once, but"
    if not _counts_registered_slots(sc):
        slots = int(sc.defaultParallelism)
        if num_proc > slots:
            raise SetupError(f"{need} this Spark has {slots} (master {sc.master}); lower num_proc to {slots} or give"
                             " Spark more cores")
        return
    cap, wait_s, _ = _registration(sc)
    if cap is not None and cap < num_proc:
        raise SetupError(f"{need} spark.cores.max gives this application at most {cap} (master {sc.master});"
                         f" lower num_proc to {cap} or raise spark.cores.max")
    slots, seen = _slots_waited(sc, num_proc)
    if num_proc > slots:
        has = f"the executors registered within {wait_s:g} s of the SparkContext's start have {slots}"
        fix = f"lower num_proc to {slots} or give Spark more cores"
        if seen > slots:
            has = (f"{slots} are registered, where this application had {seen}: an executor was lost and not"
                   f" replaced within {wait_s:g} s")
            fix = "check the cluster manager's workers (their logs say why the executor ended), then fit again"
        elif slots == 0:
            fix = "check that the master has workers with free cores and that they reach this driver"
        raise SetupError(f"{need} {has} (master {sc.master}); {fix}")


def rank_python(python_exec: Optional[str], executor: Mapping[str, Optional[str]]) -> str:
    """The Python a rank runs on its executor: the one Spark's executors run.

    Spark's ``pythonExec`` when it is a path relative to the task's folder (an environment shipped with
    ``spark.archives``, such as ``./environment/bin/python``, unpacked there on each executor); else the
    executable one executor reported (:func:`check_executors`), which is every executor's on a cluster whose
    nodes share an image.
    """
    if python_exec and "/" in python_exec and not os.path.isabs(python_exec):
        return python_exec
    return str(executor.get("python") or sys.executable)


_checked: Dict[Tuple[str, str], Dict[str, Optional[str]]] = {}


def check_executors(sc: Any) -> Dict[str, Optional[str]]:
    """Asks one executor's own Python what it is (one Spark task, once per application); returns its answer.

    Raises:
        SetupError: it lacks Horovod, TensorFlow or hvdkeras, or has them (or Python) at other versions than this
            driver, naming what and how to ship this environment.
    """
    key = (str(sc.applicationId), str(getattr(sc, "pythonExec", "")))
    local = f"PYSPARK_PYTHON={sys.executable} before the SparkSession starts" if sc.master.startswith(
        "local") else "PYSPARK_PYTHON to a Python that has them on every executor"
    fix = f"set {local}, or ship this environment with spark.archives (docs/spark-cluster.md)"

    def cannot(exc: Exception) -> str:
        reason = next((line.strip() for line in str(exc).splitlines() if "Cannot run program" in line
                       or "No such file" in line), str(exc).strip().splitlines()[0] if str(exc).strip() else "")
        return f"Spark's executors could not run {getattr(sc, 'pythonExec', 'their Python')} ({reason[:200]}): {fix}"

    return _probed_once(key, lambda probe: sc.parallelize([0], 1).mapPartitions(probe).collect()[0], cannot, fix)


def check_rank_python(sc: Any, executable: str) -> None:
    """Refuses a ranks' Python that one executor cannot start (one Spark task), before a fit prepares its data; the
    gang's tasks check it again where they start their ranks (:func:`hvdkeras.spark.gang.start_rank`).

    Raises:
        SetupError: ``executable`` is neither a program on that executor's ``PATH`` nor an executable file there.
    """
    from hvdkeras.spark.gang import unstartable

    why = sc.parallelize([0], 1).map(lambda _: unstartable(executable)).collect()[0]
    if why is not None:
        raise SetupError(why)


def check_connect_executors(session: Any) -> Dict[str, Optional[str]]:
    """:func:`check_executors` through a Spark Connect session (one ``mapInPandas`` task, once per session).

    Raises:
        SetupError: the executors' Python lacks Horovod, TensorFlow or hvdkeras, or has them (or Python) at other
            versions than this client, naming what.
    """
    from hvdkeras.spark.common.connect import probe_executor

    def cannot(exc: Exception) -> str:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        return (f"Spark's executors could not run Python ({(lines[0] if lines else '')[:200]}): give every executor"
                " a Python with hvdkeras (docs/spark-cluster.md)")

    return _probed_once(("connect", str(getattr(session, "session_id", id(session)))),
                        lambda probe: probe_executor(session, probe), cannot,
                        "install this environment's packages on every executor (docs/spark-cluster.md)")


def _probed_once(key: Tuple[str, str], ask: Callable[[Any], Dict[str, Optional[str]]],
                 cannot: Callable[[Exception], str], fix: str) -> Dict[str, Optional[str]]:
    """An executor's answer to :func:`~hvdkeras.engines.python_check.python_probe`, asked by ``ask(probe)`` once per
    ``key`` and compared with this driver's; a failed ask is ``cannot(error)`` and a mismatch ends with ``fix``, each
    a SetupError."""
    if key not in _checked:
        probe = python_probe()
        driver = next(probe(None))
        try:
            executor = ask(probe)
        except Exception as exc:  # noqa: BLE001 - py4j's, Spark's and the Connect server's errors
            raise SetupError(cannot(exc)) from None
        mismatch = python_mismatch(driver, executor)
        if mismatch:
            raise SetupError(f"Spark's executors run {executor['python']}, which {mismatch}: {fix}")
        _checked[key] = executor
    return _checked[key]


@contextlib.contextmanager
def _quiet_cancelled_job() -> Iterator[None]:
    """While Horovod runs: its Spark thread's traceback for the job it cancelled itself is not printed.

    When a rank fails, Horovod cancels its own Spark job group, and the thread that waited on that
    job dies with a Java stack trace of ``SPARK_JOB_CANCELLED``. The failure itself is raised by
    :func:`run` as one line; any other exception in any thread is still printed.
    """
    previous = threading.excepthook

    def hook(args: Any) -> None:
        text = str(args.exc_value)
        if "SPARK_JOB_CANCELLED" in text and "horovod.spark.run" in text:
            return
        previous(args)

    threading.excepthook = hook
    try:
        yield
    finally:
        threading.excepthook = previous


def run(fn: Callable[..., Any], args: Sequence[Any] = (), kwargs: Optional[Mapping[str, Any]] = None,
        num_proc: Optional[int] = None, start_timeout: Optional[int] = None, use_mpi: Optional[bool] = None,
        use_gloo: Optional[bool] = None, extra_mpi_args: Optional[str] = None,
        env: Optional[Dict[str, str]] = None, stdout: Any = None, stderr: Any = None, verbose: int = 1,
        nics: Any = None, prefix_output_with_timestamp: bool = False,
        executable: Optional[str] = None, max_retries: int = 0, retry_hint: str = "",
        session: Any = None) -> List[Any]:
    """Runs ``fn(*args, **kwargs)`` as ``num_proc`` Horovod ranks in Spark tasks (Horovod's arguments and order).

    With Gloo (the default) the ranks start as one Spark barrier stage (:mod:`hvdkeras.spark.gang`): all or none,
    and all again when one is lost, up to ``max_retries`` times. With ``use_mpi`` they start through Horovod's own
    ``horovod.spark.run`` (``mpirun`` over its task services), once.

    Args:
        fn: the function each rank runs; it calls ``hvd.init()`` itself.
        args: its positional arguments.
        kwargs: its keyword arguments.
        num_proc: the number of ranks (default: the task slots, :func:`task_slots`; on a cluster, those of the
            executors registered within Spark's registration time).
        start_timeout: seconds the ranks' tasks may wait to start (default 120,
            ``HOROVOD_SPARK_START_TIMEOUT`` if set).
        use_mpi: launch the ranks with MPI instead of Gloo.
        use_gloo: launch them with Gloo (the default).
        extra_mpi_args: more ``mpirun`` arguments, with ``use_mpi``.
        env: the ranks' environment (default: this process's allowed variables,
            :mod:`hvdkeras.spark.common.environment`; one you give goes whole).
        stdout: where the ranks' standard output goes.
        stderr: where their standard error goes.
        verbose: Horovod's verbosity.
        nics: the network interfaces to use.
        prefix_output_with_timestamp: prefix each output line with its time.
        executable: the Python the ranks run (default: the one Spark runs each rank's task in; with ``use_mpi``,
            :func:`rank_python`).
        max_retries: how often all the ranks start again, each time a rank or its executor is lost (Gloo only).
        retry_hint: what a retry's warning line adds (where the ranks resume).
        session: a Spark Connect session to start the ranks through (:mod:`hvdkeras.spark.common.connect`; default: the
            driver's SparkContext). ``num_proc`` is then required, and Gloo the only launcher.

    Returns:
        Each rank's return value, in rank order.

    Raises:
        SetupError: the job cannot start (too few slots, another Python, no SparkSession, a start that timed out).
        RankFailedError: a rank failed, and no retry was left; its text names the rank, its host and its status.
    """
    versions.require_compatible("hvdkeras.spark.run")
    if start_timeout is None:
        start_timeout = int(os.environ.get("HOROVOD_SPARK_START_TIMEOUT", DEFAULT_START_TIMEOUT_S))
    if isinstance(nics, str):
        nics = [nics]
    ranks_env = environment.for_ranks(os.environ) if env is None else dict(env)
    if session is not None:
        from hvdkeras.spark.common.connect import ConnectStage
        from hvdkeras.spark.gang import run_gang

        if not num_proc:
            raise SetupError("through Spark Connect, give num_proc: a Connect client cannot count the executors'"
                             " task slots")
        if use_mpi:
            raise SetupError("use_mpi=True starts the ranks through Horovod's runner from the driver's SparkContext,"
                             " which a Spark Connect session has not: leave use_mpi unset (Gloo)")
        check_connect_executors(session)
        return run_gang(ConnectStage(session), fn, args, dict(kwargs or {}), num_proc, ranks_env, float(start_timeout),
                        max_retries=max_retries, executable=executable, nics=list(nics) if nics else None,
                        stdout=stdout, stderr=stderr, timestamp=prefix_output_with_timestamp, retry_hint=retry_hint)
    sc = spark_context()
    num_proc = num_proc or max(task_slots(sc), 1)
    check_cluster(sc, num_proc)
    executor = check_executors(sc)
    if use_mpi:
        return _run_horovods(sc, fn, args, kwargs, num_proc, start_timeout, extra_mpi_args, ranks_env, stdout, stderr,
                             verbose, nics, prefix_output_with_timestamp,
                             executable or rank_python(getattr(sc, "pythonExec", None), executor))
    from hvdkeras.spark.gang import ClassicStage, run_gang

    return run_gang(ClassicStage(sc), fn, args, dict(kwargs or {}), num_proc, ranks_env, float(start_timeout),
                    max_retries=max_retries, executable=executable, nics=list(nics) if nics else None,
                    stdout=stdout, stderr=stderr,
                    timestamp=prefix_output_with_timestamp, retry_hint=retry_hint)


def _run_horovods(sc: Any, fn: Callable[..., Any], args: Sequence[Any], kwargs: Optional[Mapping[str, Any]],
                  num_proc: int, start_timeout: int, extra_mpi_args: Optional[str], env: Optional[Dict[str, str]],
                  stdout: Any, stderr: Any, verbose: int, nics: Any, prefix_output_with_timestamp: bool,
                  executable: str) -> List[Any]:
    """The ranks through Horovod's ``horovod.spark.run`` with MPI; a start that timed out is one line."""
    import horovod.spark
    from horovod.runner.common.util.timeout import TimeoutException

    try:
        with _quiet_cancelled_job():
            return list(horovod.spark.run(
                fn, args=tuple(args), kwargs=dict(kwargs or {}), num_proc=num_proc, start_timeout=start_timeout,
                use_mpi=True, use_gloo=False, extra_mpi_args=extra_mpi_args, env=env, stdout=stdout,
                stderr=stderr, verbose=verbose, nics=nics, prefix_output_with_timestamp=prefix_output_with_timestamp,
                executable=executable))
    except TimeoutException as exc:
        from hvdkeras.engines import failures

        raise failures.start_timeout(num_proc, start_timeout, str(exc).splitlines()[0][:160]) from None
    except RuntimeError as exc:  # Horovod's runner: a rank exited with an error, or its Spark job failed
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        raise RankFailedError((lines[0] if lines else type(exc).__name__)[:240]) from None
