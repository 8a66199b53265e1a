"""Patch 0009: a command that Horovod's runner terminates keeps its non-zero exit status.

Horovod's runner starts each rank as ``sh -c '<command>'`` under a middleman process; a launcher's shutdown event
(SIGTERM to ``horovodrun``, another rank's failure) terminates the shell. Before the patch the middleman's event
thread reaped the shell behind its ``Popen``, whose ``wait()`` then reported 0, so a preempted ``horovodrun`` could
exit 0. These run the installed Horovod's runner (pure Python) on real processes.
"""
import io
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import psutil
from horovod.runner.common.util import safe_shell_exec


def test_terminating_a_shell_through_its_popen_leaves_the_status_to_the_popen():
    shell = subprocess.Popen(["sh", "-c", "env A=1 sleep 60"])  # a shell and its child, as a rank is started
    try:
        deadline = time.monotonic() + 10
        while not psutil.Process(shell.pid).children() and time.monotonic() < deadline:
            time.sleep(0.02)
        safe_shell_exec.terminate_executor_shell_and_children(shell.pid, shell)
        assert shell.wait(timeout=15) != 0  # 143 (its child was terminated) or -9 (killed while stopped)
    finally:
        if shell.poll() is None:
            shell.kill()
            shell.wait()


def test_commands_ended_by_the_launchers_shutdown_event_all_report_a_failure():
    # Eight ranks' commands ended by one event, as SIGTERM to horovodrun ends them; before the patch about one in
    # six of these reported 0 on a 2-core host.
    event = threading.Event()
    with ThreadPoolExecutor(8) as pool:
        runs = [pool.submit(safe_shell_exec.execute, "sleep 60", events=[event], index=i, stdout=io.StringIO(),
                            stderr=io.StringIO()) for i in range(8)]
        time.sleep(1.0)
        event.set()
        statuses = [r.result(timeout=60) for r in runs]
    assert all(s != 0 for s in statuses), statuses
