"""One run of the soaked job's command: the launcher in a session of its own, its output timed line by line."""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from typing import List, Optional, Sequence, Tuple

from benchmarks.soak.faults import marked, preempt
from hvdkeras.common.processes import alive, kill_session, scan


class Running:
    """The launcher ``cmd`` started now; its output lines, each with the soak's clock (``clock()``), also go to
    ``log_path`` (each after that time in seconds)."""

    def __init__(self, cmd: Sequence[str], env: dict, cwd: str, log_path: str, clock):
        self.clock = clock
        self.started = clock()
        self.lines: List[Tuple[float, str]] = []
        self._log = open(log_path, "w")
        self.proc = subprocess.Popen(list(cmd), cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, errors="replace", start_new_session=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            at = self.clock()
            self.lines.append((at, line.rstrip("\n")))
            self._log.write(f"{at:8.2f} {line}")  # the soak's clock, as its own lines and the report give it
            self._log.flush()

    @property
    def pid(self) -> int:
        """The launcher's pid (it leads its own session)."""
        return self.proc.pid

    @property
    def name(self) -> str:
        """What the soak's lines call this attempt."""
        return f"launcher pid {self.proc.pid}"

    preempt_says = "SIGTERM to the launcher"

    def wait_started(self, timeout: float) -> bool:
        """Whether the launcher runs (it does from the start: no wait)."""
        return self.running()

    def preempt(self) -> bool:
        """SIGTERM to the launcher, as a scheduler preempts a job (``horovodrun`` forwards it to every rank);
        whether it was still running."""
        return preempt(self.proc.pid)

    def running(self) -> bool:
        """Whether the launcher has not exited yet."""
        return self.proc.poll() is None

    def kill(self) -> None:
        """Kills the launcher, every process under it and its session (a hang)."""
        kill_session(self.proc.pid)

    def finish(self) -> Optional[int]:
        """Waits for the launcher and its output; its exit status."""
        status = self.proc.wait()
        self._reader.join(timeout=30)
        self._log.close()
        return status


def left_behind(marker: str, grace: float = 10.0, env_key: Optional[str] = None) -> List[str]:
    """Processes whose command line holds ``marker`` (the job's workdir; with ``env_key``, whose environment has it
    set to ``marker``) still there ``grace`` s after the job ended, as ``pid: command``; they are killed (SIGKILL,
    then waited for) so that the next attempt starts clean."""
    import psutil

    deadline = time.monotonic() + grace
    while True:
        found = []
        for proc in scan(["pid", "cmdline", "status"]):
            try:
                argv = " ".join(proc.info["cmdline"] or [])
                if (proc.pid != os.getpid() and proc.info["status"] != psutil.STATUS_ZOMBIE
                        and marked([argv], proc.environ, marker, env_key)):
                    found.append((proc.pid, argv))
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        if not found or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    for pid, _ in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 5.0  # gone or a zombie (an orphan's zombie stays until its reaper acts)
    while time.monotonic() < deadline and any(alive(pid) for pid, _ in found):
        time.sleep(0.05)
    return [f"{pid}: {argv[:200]}" for pid, argv in found]
