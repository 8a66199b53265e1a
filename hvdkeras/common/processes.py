"""Ending processes: this one without the interpreter's teardown, and process trees (a launcher and the ranks
under it), nothing left behind.

The one place that ends processes for hvdkeras, its tests, its benchmarks and its lab: the
build's smoke check, the test harness's hung jobs, the two-host tests' cut-off launchers, the
contention benchmark's spinners, and the lab's sshd and Slurm daemons. Needs only ``psutil`` (Horovod's own dependency).
"""
from __future__ import annotations

import atexit
import os
import signal
import sys
import time
from typing import Any, Iterable, Iterator, List, NoReturn, Sequence


def exit_now(status: int, exit_handlers: bool = True) -> NoReturn:
    """Ends this process with ``status`` after a flush of its output, without the interpreter's teardown, which frees
    every object one by one: with TensorFlow imported it takes most of a second (a Spark rank pays it at every start
    of its gang).

    Args:
        status: the exit status.
        exit_handlers: run the ``atexit`` handlers first (Horovod's shutdown, logging's flush, the user's own), as
            ``sys.exit`` would; without them, a rank whose peers are gone does not wait on them in Horovod's
            shutdown.
    """
    try:
        if exit_handlers:
            atexit._run_exitfuncs()  # what sys.exit would run, in the same order
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed or broken pipe: nothing more can reach it
                pass
        os._exit(status)


def scan(attrs: Sequence[str]) -> Iterator[Any]:
    """Every process now, as ``psutil.process_iter(attrs)`` yields them (each a ``psutil.Process`` with ``info``), but
    read afresh.

    ``process_iter`` keeps the ``Process`` of every PID it has seen. psutil 7 leaves a PID out of the next scan once it
    has found it reused by another process, so a new process with a reused PID (frequent here: a suite starts
    thousands, and ``pid_max`` is 32768) could be missed by the one scan that looks for it.

    Args:
        attrs: the ``info`` to read, as ``process_iter``'s.

    Returns:
        The processes, in PID order.
    """
    import psutil

    getattr(psutil.process_iter, "cache_clear", lambda: None)()
    return psutil.process_iter(list(attrs))


def kill_tree(pid: int, timeout: float = 10.0) -> None:
    """Kills ``pid`` and every process under it (a launcher's ranks), then waits up to ``timeout`` seconds for them.

    Args:
        pid: the root of the tree; a process that is already gone is no error.
        timeout: how long to wait for the killed processes to be reaped.
    """
    import psutil

    try:
        root = psutil.Process(pid)
        procs = root.children(recursive=True) + [root]
    except psutil.NoSuchProcess:
        return
    for proc in procs:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=timeout)


def kill_group(pgid: int) -> None:
    """SIGKILLs the process group ``pgid`` (a process started with ``start_new_session=True`` leads its own).

    Catches what a tree walk misses: processes whose parent died and that were re-parented.
    A group that is gone, or not ours to signal, is no error.
    """
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_session(pid: int) -> None:
    """:func:`kill_tree` of ``pid``, then :func:`kill_group` of the session it leads: a launcher started in a
    session of its own, its ranks, and those a dead launcher left."""
    kill_tree(pid)
    kill_group(pid)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not); reaps it first when it is this process's child."""
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    except ChildProcessError:
        pass
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def stop(pids: Iterable[int], grace: float = 3.0) -> None:
    """SIGTERM to each of ``pids``, then SIGKILL to those still running after ``grace`` seconds (this process
    excepted); returns once all are gone, or ``grace`` after the SIGKILL."""
    remaining: List[int] = [p for p in pids if p != os.getpid()]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in remaining:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            remaining = [p for p in remaining if alive(p)]
            if not remaining:
                return
            time.sleep(0.05)
