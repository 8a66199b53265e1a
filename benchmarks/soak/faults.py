"""The soak's faults, each a small function or class on a running job, its workdir or its link.

* :func:`signal_rank`: a signal to one rank (SIGKILL; SIGSTOP, then :class:`Freeze` ends it);
* :func:`preempt`: SIGTERM to the launcher, as a scheduler preempts a job;
* :class:`LinkCut`: on the lab's two emulated hosts (:mod:`lab.hosts`), one host's link down for a while;
* :class:`HostLeave`: an elastic job's host out of its hosts file for a while, then written back
  (:func:`elastic_ranks` tells which host a rank runs on);
* :func:`fill_disk`: a ballast file leaving less room than one checkpoint, so the next save fails;
* :func:`damage`: the newest checkpoint's data file truncated, as the damaged-checkpoint test does.

Needs ``psutil`` (Horovod's own dependency) to find the ranks; no TensorFlow.
"""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from benchmarks.soak.output import Position, checkpoint_position
from hvdkeras.common import processes

DAMAGED_SIZE = 100  # bytes left of a data file the soak damages (the damaged-checkpoint test's truncation)


def marked(argv: Sequence[str], environ: Callable[[], Dict[str, str]], marker: str, env_key: Optional[str]) -> bool:
    """Whether a process belongs to the job marked ``marker``: in its command line ``argv``, or with ``env_key`` as
    that variable of its environment (``environ()``: a Spark rank's command line does not name the run)."""
    if env_key is None:
        return marker in " ".join(argv)
    return environ().get(env_key) == marker


def rank_pids(marker: str, env_key: Optional[str] = None) -> Dict[int, int]:
    """``{rank: pid}`` of the Python rank processes whose command line holds ``marker`` (the job's workdir), or whose
    environment has ``env_key`` set to it, on this machine's emulated hosts too (their processes share this
    machine's process table)."""
    import psutil

    found: Dict[int, int] = {}
    for proc in processes.scan(["pid", "cmdline"]):
        try:
            argv = proc.info["cmdline"] or []
            if not argv or not os.path.basename(argv[0]).startswith("python"):
                continue
            if not marked(argv, proc.environ, marker, env_key):
                continue
            rank = proc.environ().get("HOROVOD_RANK")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if rank is not None:
            found[int(rank)] = proc.pid
    return found


EXECUTOR = "org.apache.spark.executor.CoarseGrainedExecutorBackend"  # a Spark executor JVM's main class


def executor_of(pid: int) -> Optional[int]:
    """The Spark executor JVM a rank process runs under (its nearest ancestor with :data:`EXECUTOR` in its command
    line), or None (no executor: ``local[N]``, where the driver's JVM runs the tasks)."""
    import psutil

    try:
        for parent in psutil.Process(pid).parents():
            if EXECUTOR in " ".join(parent.cmdline()):
                return parent.pid
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        pass
    return None


Worker = Tuple[int, str, int, float]  # an elastic worker: pid, host, the rank it was started as, its start time


def order_workers(workers: Sequence[Worker], together_s: float = 5.0) -> List[Tuple[int, str]]:
    """An elastic job's living workers as ``(pid, host)`` in their current rank order.

    Horovod's driver ranks the hosts in the order it first saw them and keeps that order (a host that leaves
    loses its place, one that comes back goes last), and starts the workers of each new world together, each
    with the rank it has then (``HOROVOD_RANK`` in its environment stays that rank, whatever comes after). So
    the workers still there rank by when they were started (those started within ``together_s`` of each other
    as one batch), then by the rank they were started as."""
    batches: List[List[Worker]] = []
    for worker in sorted(workers, key=lambda w: w[3]):
        if batches and worker[3] - batches[-1][0][3] <= together_s:
            batches[-1].append(worker)
        else:
            batches.append([worker])
    return [(w[0], w[1]) for batch in batches for w in sorted(batch, key=lambda w: w[2])]


def elastic_ranks(marker: str) -> Dict[int, Tuple[int, str]]:
    """``{rank: (pid, host)}`` of an elastic job's workers now (:func:`order_workers`), by the workdir ``marker``
    in their command line and ``HOROVOD_HOSTNAME`` in their environment."""
    import psutil

    found: List[Worker] = []
    for proc in processes.scan(["pid", "cmdline", "create_time"]):
        try:
            argv = proc.info["cmdline"] or []
            if not argv or marker not in " ".join(argv) or not os.path.basename(argv[0]).startswith("python"):
                continue
            env = proc.environ()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if "HOROVOD_HOSTNAME" in env:
            found.append((proc.pid, env["HOROVOD_HOSTNAME"], int(env.get("HOROVOD_RANK", 0)),
                          proc.info["create_time"]))
    return dict(enumerate(order_workers(found)))


def wait_for_rank(marker: str, rank: int, timeout: float, alive: Callable[[], bool],
                  find: Callable[[str], Dict[int, int]] = rank_pids) -> Optional[int]:
    """The pid of ``rank`` once it exists (``find(marker)``: ``{rank: pid}``), waiting at most ``timeout`` s
    while ``alive()``; None if it never came."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and alive():
        pid = find(marker).get(rank)
        if pid is not None:
            return pid
        time.sleep(0.1)
    return None


def signal_rank(pid: int, signum: int) -> bool:
    """Sends ``signum`` to a rank; whether it was still there."""
    try:
        os.kill(pid, signum)
        return True
    except ProcessLookupError:
        return False


def preempt(launcher_pid: int) -> bool:
    """SIGTERM to the job's launcher (``horovodrun`` forwards it to every rank); whether it was running."""
    return signal_rank(launcher_pid, signal.SIGTERM)


class Freeze:
    """A rank stopped with SIGSTOP, ended after ``seconds`` by SIGCONT (``end="cont"``) or SIGKILL, on a thread."""

    def __init__(self, pid: int, seconds: float, end: str):
        self.pid, self.seconds, self.end = pid, seconds, end
        self.ended_with: Optional[str] = None  # what ended it: "cont", "kill", or "gone" (the rank had exited)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> bool:
        """Stops the rank and starts the clock; False if the rank was gone."""
        if not signal_rank(self.pid, signal.SIGSTOP):
            return False
        self._thread.start()
        return True

    def _run(self) -> None:
        self._done.wait(self.seconds)
        sent = signal_rank(self.pid, signal.SIGCONT if self.end == "cont" else signal.SIGKILL)
        self.ended_with = self.end if sent else "gone"

    def finish(self) -> None:
        """Ends the freeze now if it still lasts (the soak is leaving) and waits for it."""
        self._done.set()
        if self._thread.is_alive():
            self._thread.join()


class LinkCut:
    """A host's link taken down (``ip link set <dev> down``) and brought up again ``seconds`` later, on a thread."""

    def __init__(self, device: str, seconds: float, run: Callable = subprocess.run):
        self.device, self.seconds, self._run = device, seconds, run
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._wait, daemon=True)

    def start(self) -> bool:
        """Takes the link down and starts the clock; False if ``ip`` refused."""
        if self._run(["ip", "link", "set", self.device, "down"], check=False).returncode != 0:
            return False
        self._thread.start()
        return True

    def _wait(self) -> None:
        self._done.wait(self.seconds)
        self._run(["ip", "link", "set", self.device, "up"], check=False)

    def finish(self) -> None:
        """Brings the link up now if it is still down (the soak is leaving) and waits for it."""
        self._done.set()
        if self._thread.is_alive():
            self._thread.join()


def without_host(text: str, host: str) -> str:
    """A hosts file's ``text`` without the lines of ``host`` (``host`` or ``host:slots``); the rest as it was."""
    kept = [line for line in text.splitlines(keepends=True)
            if line.split("#", 1)[0].strip().split(":", 1)[0] != host]
    return "".join(kept)


def write_atomically(path: str, text: str) -> None:
    """Replaces the file at ``path`` by ``text`` in one rename, so that a reader never sees half of it."""
    tmp = f"{path}.soak-tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


class HostLeave:
    """An elastic job's ``host`` taken out of its hosts file (which Horovod's discovery reads about once a
    second) and written back ``seconds`` later, on a thread."""

    def __init__(self, hosts_file: str, host: str, seconds: float):
        self.hosts_file, self.host, self.seconds = hosts_file, host, seconds
        self._text = ""
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._wait, daemon=True)

    def start(self) -> bool:
        """Writes the file without the host and starts the clock; False if the host was not in it."""
        with open(self.hosts_file) as f:
            self._text = f.read()
        left = without_host(self._text, self.host)
        if left == self._text:
            return False
        write_atomically(self.hosts_file, left)
        self._thread.start()
        return True

    def _wait(self) -> None:
        self._done.wait(self.seconds)
        write_atomically(self.hosts_file, self._text)

    def finish(self) -> None:
        """Writes the host back now if it is still out (the attempt ended, or the soak is leaving) and waits."""
        self._done.set()
        if self._thread.is_alive():
            self._thread.join()


def checkpoints(directory: str) -> Dict[str, Position]:
    """``{folder: position}`` of the complete-looking checkpoints in ``directory`` (no ``damaged-``, no temporary)."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return {}
    found = {}
    for name in names:
        position = checkpoint_position(name)
        if position is not None and os.path.isfile(os.path.join(directory, name, "meta.json")):
            found[os.path.join(directory, name)] = position
    return found


def data_file(folder: str) -> Optional[str]:
    """The checkpoint's first ``ckpt.data-*`` file, or None."""
    try:
        names = sorted(n for n in os.listdir(folder) if n.startswith("ckpt.data"))
    except FileNotFoundError:
        return None
    return os.path.join(folder, names[0]) if names else None


def damage(folder: str) -> Optional[str]:
    """Truncates the checkpoint's data file to :data:`DAMAGED_SIZE` bytes; the file, or None if it had none."""
    path = data_file(folder)
    if path is None:
        return None
    try:
        with open(path, "r+b") as f:
            f.truncate(DAMAGED_SIZE)
    except FileNotFoundError:
        return None
    return path


def damaged_by_us(folder: str, damaged: Dict[str, str]) -> bool:
    """Whether ``folder`` is a checkpoint the soak damaged and that still is (not a new save of the same name)."""
    path = damaged.get(folder)
    return path is not None and os.path.exists(path) and os.path.getsize(path) == DAMAGED_SIZE


def newest_intact(directory: str, damaged: Dict[str, str]) -> Optional[Tuple[str, Position]]:
    """The newest checkpoint in ``directory`` the soak did not damage: ``(folder, position)``, or None."""
    found = [(pos, path) for path, pos in checkpoints(directory).items() if not damaged_by_us(path, damaged)]
    if not found:
        return None
    pos, path = max(found)
    return path, pos


def folder_bytes(folder: str) -> int:
    """The size of the files in ``folder``."""
    total = 0
    for root, _, names in os.walk(folder):
        for name in names:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except FileNotFoundError:
                pass
    return total


def ballast_bytes(free: int, checkpoint_bytes: int) -> int:
    """How much to write so that half a checkpoint's room is left: the next save fails, a metrics line still fits."""
    return max(0, free - max(checkpoint_bytes // 2, 64 * 1024))


def fill_disk(disk: str, checkpoint_bytes: int) -> Tuple[str, int]:
    """Writes the ballast file ``<disk>/ballast``; (its path, its size)."""
    stats = os.statvfs(disk)
    size = ballast_bytes(stats.f_bavail * stats.f_frsize, checkpoint_bytes)
    path = os.path.join(disk, "ballast")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        if size:
            os.posix_fallocate(fd, 0, size)
    except OSError:
        pass  # as full as it gets
    finally:
        os.close(fd)
    return path, size
