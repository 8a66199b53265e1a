"""The ranks as one Spark barrier stage: all start together or none does, and Spark retries them together.

:func:`run_gang` submits one barrier stage of ``num_proc`` tasks (``rdd.barrier()``, as ``xgboost.spark`` and
PySpark's ``TorchDistributor`` do; through a Spark Connect session a barrier ``mapInPandas``,
:mod:`hvdkeras.spark.common.connect`). Spark schedules a barrier stage only when every task has a slot, and when one
task fails it kills the others and starts the whole stage again, up to ``spark.stage.maxConsecutiveAttempts``
(4) attempts in all; past those the driver submits the stage again itself. (Spark does this for a barrier stage
whose output is shuffled, so the ranks' results go through a shuffle to one partition.) Each task:

1. reads every task's executor address from its ``BarrierTaskContext`` and places the ranks as ``horovodrun``
   does: grouped by host, in the order the hosts first appear (:func:`slot_plan`);
2. starts its rank, ``python -m hvdkeras.spark.rank --go-on-stdin`` (:mod:`hvdkeras.spark.rank`), with Horovod's
   settings for it in its environment and the GPUs Spark assigned the task (``HVDKERAS_SPARK_GPUS``), and relays its
   output to the driver (:mod:`hvdkeras.spark.relay`). The rank loads its function, TensorFlow's import among it (some
   3 s), while the tasks agree on the start, then waits for the go on its standard input;
3. the task of rank 0 asks the driver whether this start is allowed and, when it is, starts Horovod's Gloo
   rendezvous server (Horovod's own, bound to that task's executor address, not to every interface); every task
   learns that answer and the server's port, and whether each task could start its rank, in one ``allGather``
   before anything else. It is the stage's only barrier call: Spark notices that one is complete only once a
   second. Then each task gives its rank the port and waits for it;
4. returns the rank's result, or fails the stage when the rank failed.

The driver counts the gang's starts over the whole run, Spark's own retries and its own submissions alike
(:class:`hvdkeras.engines.attempts.Attempts`, asked through :class:`hvdkeras.spark.relay.Relay`): a start past
``max_retries`` retries fails at once (:class:`hvdkeras.engines.failures.RetriesExhaustedError`), and
the driver ends with one line. A run whose tasks cannot all start within ``start_timeout`` (an executor that never came
back) is cancelled with one line.
"""
from __future__ import annotations

import dataclasses
import errno
import functools
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from hvdkeras.common.errors import SetupError
from hvdkeras.engines import failures, rendezvous_server
from hvdkeras.engines.attempts import Attempts
from hvdkeras.engines.placement import interface_of, slot_plan
from hvdkeras.runtime import rendezvous as rendezvous_auth
from hvdkeras.spark.common.gpus import GPUS_VAR

CANNOT_START = "cannot start the rank's Python"  # how a failure no retry mends begins: the driver raises it at once
_CANNOT = "cannot"  # a task's word in the gang's allGather when it could not start its rank (then why)
WATCH_INTERVAL_S = 1.0


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """What each task of the stage gets from the driver."""

    payload: bytes  # cloudpickled (fn, args, kwargs)
    env: Dict[str, str]
    executable: Optional[str]
    relay: Tuple[str, int]
    token: str
    nics: Optional[Tuple[str, ...]]


def _pump(stream: Any, name: str, sender: Any) -> None:
    for raw in iter(stream.readline, b""):
        sender.line(name, raw.decode(errors="replace").rstrip("\n"))
    stream.close()


def start_rank(python: str, payload: str, result: str, env: Dict[str, str]) -> Tuple[Any, Optional[str]]:
    """The rank's process, ``python`` running :mod:`hvdkeras.spark.rank`, which waits for the go on its standard
    input: ``(process, None)``, or ``(None, why)`` when it cannot be started (:data:`CANNOT_START`, naming the Python
    and how to fix it)."""
    try:
        return subprocess.Popen([python, "-m", "hvdkeras.spark.rank", "--go-on-stdin", payload, result],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.PIPE), None
    except OSError as exc:
        return None, cannot_start(python, exc.strerror or type(exc).__name__)


def cannot_start(python: str, why: str) -> str:
    """The one line for a rank's Python that cannot be started on an executor, ``why`` being the system's reason."""
    return (f"{CANNOT_START} {python!r} on this executor ({why}): pass SparkBackend(executable=...) a Python every"
            " executor has, or leave it unset to run the task's own")


def unstartable(python: str) -> Optional[str]:
    """On an executor: :func:`cannot_start`'s line when ``python`` (a path, or a name on ``PATH``) is no program this
    process could start, else None."""
    if shutil.which(python) is not None:
        return None
    found = os.sep in python and os.path.exists(python)
    return cannot_start(python, os.strerror(errno.EACCES if found else errno.ENOENT))


def run_task(spec: TaskSpec, _rows: Iterator[Any]) -> Iterator[Tuple[int, bytes]]:
    """One task of the barrier stage (see the module docstring); yields ``(rank, cloudpickled result)``.

    Raises:
        RuntimeError: :func:`hvdkeras.engines.failures.carried`'s, for ``RetriesExhaustedError`` (the attempt is
            past ``max_retries``), ``RankExitedError`` or ``CannotStartError`` (:mod:`hvdkeras.engines.failures`).
    """
    from pyspark import BarrierTaskContext

    from hvdkeras.spark.relay import Sender

    ctx = BarrierTaskContext.get()
    index = ctx.partitionId()
    hosts = [info.address.rsplit(":", 1)[0] for info in ctx.getTaskInfos()]
    plan = slot_plan(hosts)
    slot = plan[index]
    sender = Sender(spec.relay, spec.token, slot.rank)
    secret = rendezvous_server.gang_secret(spec.token)
    chief = next(i for i, s in enumerate(plan) if s.rank == 0)
    server, folder, proc = None, None, None
    try:
        env = dict(spec.env)  # the rendezvous' port comes with the go
        env.update(rendezvous_server.rank_environment(slot, (hosts[chief], 0), interface_of(hosts[index], spec.nics),
                                                      secret))
        resources = ctx.resources()
        if "gpu" in resources:
            env[GPUS_VAR] = ",".join(str(a) for a in resources["gpu"].addresses)
        folder = tempfile.mkdtemp(prefix="hvdkeras-rank-")
        payload, result = os.path.join(folder, "payload"), os.path.join(folder, "result")
        with open(payload, "wb") as f:
            f.write(spec.payload)
        unpatched = rendezvous_auth.horovod_unpatched() if env.get(rendezvous_auth.OPEN_RENDEZVOUS_ENV) != "1" else None
        proc, cannot = ((None, f"{CANNOT_START} with an authenticated rendezvous on {slot.hostname}: {unpatched}")
                        if unpatched else start_rank(spec.executable or sys.executable, payload, result, env))
        pumps = [threading.Thread(target=_pump, args=(stream, name, sender), daemon=True)
                 for stream, name in ((proc.stdout, "stdout"), (proc.stderr, "stderr"))] if proc else []
        for pump in pumps:
            pump.start()
        if slot.rank == 0 and cannot is None and sender.start():  # the driver counts the gang's starts
            server = rendezvous_server.start(hosts[index], plan, secret)
        # Every task learns rank 0's answer before it could wait on anything else: a task that Spark kills while it
        # waits in a barrier call takes its executor down with it (exit code 50), and the next job needs another.
        mine = f"{_CANNOT} {cannot}" if cannot else f"start {server.server_address[1]}" if server else "ready"
        answers = ctx.allGather(mine)
        unstartable = [a[len(_CANNOT) + 1:] for a in answers if a.startswith(_CANNOT + " ")]
        if unstartable:  # no retry mends it: every task fails with the same line
            raise failures.carried(failures.CannotStartError(unstartable[0]))
        if not answers[chief].startswith("start "):
            raise failures.carried(failures.RetriesExhaustedError("no retry left"))
        assert proc is not None and proc.stdin is not None
        try:
            proc.stdin.write(json.dumps({"HOROVOD_GLOO_RENDEZVOUS_PORT": answers[chief].split()[1]}).encode() + b"\n")
            proc.stdin.close()
        except OSError:  # the rank has ended already: its status says how
            pass
        status = proc.wait()
        for pump in pumps:
            pump.join(timeout=10)
        if status != 0:
            reason = f"rank {slot.rank} on {slot.hostname} exited with status {status}"
            sender.failed(reason)
            raise failures.carried(failures.RankExitedError(reason))
        with open(result, "rb") as f:
            data = f.read()
    finally:
        if proc is not None and proc.poll() is None:  # the gang does not start: its rank ends before it trains
            proc.kill()
            proc.wait()
        sender.close()
        if server is not None:
            server.shutdown()
            server.server_close()
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
    yield slot.rank, data


def _spark_refusal(error: BaseException) -> Optional[str]:
    """Spark's own refusal of a barrier stage, from its text (Spark's words, not ours); None if it is not one."""
    for line in str(error).splitlines():
        if "Barrier execution mode" in line:
            return line[line.index("Barrier execution mode"):].strip()
    return None


class _StartWatch:
    """Calls ``cancel`` when ``running()`` has said no for ``timeout_s``: the gang cannot start."""

    def __init__(self, running: Callable[[], bool], cancel: Callable[[], None], timeout_s: float):
        self.running, self.cancel, self.timeout_s = running, cancel, timeout_s
        self.fired = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hvdkeras-gang-start-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        idle_since = time.time()
        while not self._stop.wait(WATCH_INTERVAL_S):
            try:
                running = self.running()
            except Exception:  # noqa: BLE001 - py4j while the context stops
                return
            if running:
                idle_since = time.time()
            elif time.time() - idle_since > self.timeout_s:
                self.fired = True
                self.cancel()
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2 * WATCH_INTERVAL_S + 1)


class ClassicStage:
    """The ranks' barrier stage from the driver's SparkContext (``rdd.barrier()``); its jobs in a job group.

    :class:`hvdkeras.spark.common.connect.ConnectStage` is the same through a Spark Connect session.

    Args:
        sc: the active SparkContext.
    """

    def __init__(self, sc: Any):
        self.sc = sc

    def conf(self, key: str, default: Optional[str] = None) -> Optional[str]:
        """A Spark setting of the application, or ``default``."""
        value = self.sc.getConf().get(key, default)
        return default if value is None else str(value)

    def begin(self, group: str) -> None:
        """This thread's jobs are in job group ``group`` from now on."""
        self.sc.setJobGroup(group, "hvdkeras.spark.run: Horovod ranks", interruptOnCancel=True)

    def running(self, group: str) -> bool:
        """Whether a task of job group ``group`` runs now."""
        tracker = self.sc.statusTracker()
        for job in tracker.getJobIdsForGroup(group):
            info = tracker.getJobInfo(job)
            for stage in (info.stageIds if info is not None else []):
                stage_info = tracker.getStageInfo(stage)
                if stage_info is not None and stage_info.numActiveTasks > 0:
                    return True
        return False

    def cancel(self, group: str) -> None:
        """Cancels job group ``group`` (from another thread)."""
        self.sc.cancelJobGroup(group)

    def end(self, group: str) -> None:
        """This thread's jobs are in no job group."""
        for key in ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel"):
            self.sc.setLocalProperty(key, None)

    def collect(self, task: Callable[[Iterator[Any]], Iterator[Tuple[int, bytes]]], num_proc: int) -> List[
            Tuple[int, bytes]]:
        """Runs ``task`` as ``num_proc`` barrier tasks; their ``(rank, result)`` pairs."""
        # The barrier stage feeds a shuffle: Spark starts a failed barrier stage again only when it is a map stage
        # (a failed barrier result stage aborts its job).
        ranks = self.sc.parallelize(range(num_proc), num_proc).barrier().mapPartitions(task)
        return list(ranks.repartition(1).collect())


def run_gang(stage: Any, fn: Callable[..., Any], args: Sequence[Any], kwargs: Dict[str, Any], num_proc: int,
             env: Dict[str, str], start_timeout: float, max_retries: int = 0, executable: Optional[str] = None,
             nics: Optional[Sequence[str]] = None, stdout: Any = None, stderr: Any = None,
             timestamp: bool = False, retry_hint: str = "") -> List[Any]:
    """Runs ``fn(*args, **kwargs)`` as ``num_proc`` Horovod ranks in one barrier stage; their results in rank order.

    Args:
        stage: where the barrier stage is submitted: :class:`ClassicStage` (the driver's SparkContext) or
            :class:`hvdkeras.spark.common.connect.ConnectStage` (a Spark Connect session).
        fn: what each rank runs.
        args: its positional arguments.
        kwargs: its keyword arguments.
        num_proc: the number of ranks (the caller checked that Spark has the slots).
        env: the ranks' environment (Horovod's settings are added to it).
        start_timeout: seconds the stage may wait with no task running before it is cancelled.
        max_retries: how often the whole gang starts again after a rank or executor is lost.
        executable: the Python the ranks run (default: their task's).
        nics: the network interfaces the ranks may use.
        stdout: where the ranks' standard output goes (default: this process's).
        stderr: where their standard error goes.
        timestamp: prefix each line of their output with its time.
        retry_hint: what the warning line of a retry adds (where the ranks resume).

    Returns:
        Each rank's return value, in rank order.

    Raises:
        SetupError: the tasks did not start within ``start_timeout``, Spark refused the barrier stage, or a rank's
            Python cannot be started (``executable``), which no retry mends.
        RetriesExhaustedError: a rank failed on the last attempt allowed (a ``RankFailedError``); its text names
            the rank, its host and its status.
    """
    import cloudpickle

    from hvdkeras.spark.relay import Relay

    rendezvous_auth.require_authenticated_rendezvous("hvdkeras.spark.run on the driver", launcher=True)
    if str(stage.conf("spark.dynamicAllocation.enabled", "false")).lower() == "true":
        raise SetupError("hvdkeras.spark.run starts its ranks as one Spark barrier stage, which Spark refuses with"
                         " dynamic allocation: set spark.dynamicAllocation.enabled=false for this application")
    host = stage.conf("spark.driver.host") or socket.gethostname()
    attempts = Attempts(max_retries, retry_hint)
    relay = Relay(host, attempts, stdout=stdout, stderr=stderr, timestamp=timestamp)
    spec = TaskSpec(payload=cloudpickle.dumps((fn, tuple(args), dict(kwargs))), env=dict(env), executable=executable,
                    relay=relay.address, token=relay.token, nics=tuple(nics) if nics else None)
    try:
        while True:
            group = f"hvdkeras-gang-{os.getpid()}-{time.time_ns()}"
            stage.begin(group)
            watch = _StartWatch(_running(stage, group, relay), functools.partial(stage.cancel, group), start_timeout)
            seen, starts = len(attempts.failures), attempts.starts  # this job's come after
            try:
                pairs = stage.collect(lambda rows, _spec=spec: run_task(_spec, rows), num_proc)
                return [cloudpickle.loads(data) for _, data in sorted(pairs, key=lambda pair: pair[0])]
            except Exception as exc:  # noqa: BLE001 - py4j's error for the failed job: read below
                if watch.fired:
                    raise failures.start_timeout(num_proc, start_timeout) from None
                refused = _spark_refusal(exc)
                if refused:
                    raise SetupError(f"Spark refused the ranks' barrier stage: {refused[:300]}") from None
                carried = failures.received(exc)
                if isinstance(carried, failures.CannotStartError):
                    raise carried from None
                reason = attempts.why(seen) if len(attempts.failures) > seen else (
                    str(carried) if isinstance(carried, failures.RankExitedError) else _first_line(exc))
                attempts.count_attempt_since(starts)  # a job that failed before its ranks started is an attempt too
                if isinstance(carried, failures.RetriesExhaustedError) or attempts.exhausted:
                    raise failures.RetriesExhaustedError(reason) from None
                # Spark did not start the stage again itself (a local master allows no task failure): submit it
            finally:
                watch.stop()
                stage.end(group)
    finally:
        relay.close()


def _running(stage: Any, group: str, relay: Any) -> Callable[[], bool]:
    """Whether the stage's tasks run: Spark's status tracker where the stage has one, else whether a task of this
    submission has reached the relay (a Connect client sees no tasks)."""
    if hasattr(stage, "running"):
        return lambda: bool(stage.running(group))
    connected = relay.connections
    return lambda: relay.connections > connected


def _first_line(error: BaseException) -> str:
    """A failed job's reason in one line: the Python exception's line from the task's traceback, or the first."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    for line in lines:
        if line.startswith(("RuntimeError:", "Exception:", "OSError:")) or "Error:" in line.split(" ")[0]:
            return line[:240]
    return (lines[0] if lines else type(error).__name__)[:240]
