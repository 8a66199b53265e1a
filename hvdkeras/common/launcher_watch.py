"""The launcher's end of a rank's output: when it closes, the rank stops as on a SIGTERM.

A launcher that goes away without signalling its ranks leaves them running. ``horovodrun`` stops a rank
on another host by ending its ssh client (status 255): the ssh session closes, but nothing is sent to the
process, which trains on, orphaned, holding its workdir (and, on a GPU host, its GPU). What every
launcher's rank has is its output: a pipe, socket or terminal whose other end is the launcher's (ssh,
``horovodrun``'s reader, ``srun``, ``orted``, Spark's task). When that end closes, ``poll()`` on the
rank's stdout or stderr reports it at once (``POLLERR`` for a pipe, ``POLLHUP`` for a socket or a
terminal). :class:`LauncherWatch` polls for it on a thread; then it points both at a file (the trainer's:
``<workdir>/logs/after-launcher-<host>-<pid>.log``), or at ``/dev/null`` (a later print would raise
``BrokenPipeError``), and sends its own process SIGTERM, so the rank stops as a
preempted one does (:mod:`hvdkeras.common.signals`): the ranks agree on a batch and rank 0 writes its
checkpoint, or, before training, the rank leaves with nothing to save. Outputs that are regular files
have no other end and are not watched.
"""
from __future__ import annotations

import os
import select
import signal
import stat
import threading
from typing import Callable, List, Optional, Sequence

from hvdkeras.common import log

GONE = select.POLLERR | select.POLLHUP
OUTPUTS = (1, 2)  # stdout, stderr
INTERVAL_S = 0.2


def watchable(fd: int) -> bool:
    """Whether ``fd`` is open and has another end that can close: a pipe, a socket or a terminal."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)


def closed(fds: Sequence[int], timeout_s: float = 0.0) -> List[int]:
    """The descriptors among ``fds`` whose other end has closed, waiting up to ``timeout_s`` for one.

    Args:
        fds: open descriptors written to (stdout, stderr).
        timeout_s: how long to wait for one to close; 0 looks once.

    Returns:
        Those reporting ``POLLERR`` or ``POLLHUP``, in ``fds``' order (empty if none did in time). A
        descriptor closed in this process (``POLLNVAL``) is not among them.
    """
    poller = select.poll()
    for fd in fds:
        poller.register(fd, 0)  # no event asked for: errors and hang-ups are always reported
    found = {fd for fd, event in poller.poll(int(timeout_s * 1000)) if event & GONE}
    return [fd for fd in fds if fd in found]


def divert(fds: Sequence[int], path: Optional[str] = None) -> str:
    """Points ``fds`` at the end of the file ``path`` (created, with its folder), or at ``/dev/null`` when
    ``path`` is ``None`` or cannot be opened, so that writes to them neither fail nor block.

    Returns:
        Where they point now.
    """
    fd, target = -1, os.devnull
    if path is not None:
        try:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            fd, target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644), path
        except OSError:
            pass
    if fd < 0:
        fd = os.open(os.devnull, os.O_WRONLY)
    try:
        for out in fds:
            os.dup2(fd, out)
    finally:
        os.close(fd)
    return target


def stop_as_on_sigterm(fds: Sequence[int], path: Optional[str] = None) -> None:
    """Diverts ``fds`` to ``path`` (:func:`divert`), says why there, and sends this process SIGTERM."""
    divert(fds, path)  # first: nothing could be written to them any more
    log.warning("the launcher's end of this rank's output closed (the launcher, or the ssh session it ran this"
                " rank in, is gone): stopping as on a SIGTERM; this rank's output continues here")
    os.kill(os.getpid(), signal.SIGTERM)


class LauncherWatch:
    """A daemon thread that calls ``on_gone(fds)`` once, when the other end of any of ``fds`` closes.

    Args:
        fds: the descriptors to watch; those that are not :func:`watchable` are left out.
        on_gone: what to do then (default: :func:`stop_as_on_sigterm`).
        interval_s: how often the thread wakes to see whether it was stopped.
        divert_to: the file the default ``on_gone`` points ``fds`` at (default ``/dev/null``).
    """

    def __init__(self, fds: Sequence[int] = OUTPUTS, on_gone: Optional[Callable[[Sequence[int]], None]] = None,
                 interval_s: float = INTERVAL_S, divert_to: Optional[str] = None):
        self.fds = [fd for fd in fds if watchable(fd)]
        self.outputs = list(self.fds)  # all of them go to ``on_gone``, also one pointed at a file meanwhile
        self.on_gone = on_gone or (lambda fds: stop_as_on_sigterm(fds, divert_to))
        self.interval_s = interval_s
        self.gone: List[int] = []
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> bool:
        """Starts the thread; False (nothing started) when no descriptor can be watched."""
        if not self.fds:
            return False
        self._thread = threading.Thread(target=self._run, name="hvdkeras-launcher-watch", daemon=True)
        self._thread.start()
        return True

    def stop(self) -> None:
        """Stops the thread (within ``interval_s``) without calling ``on_gone``."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5 * self.interval_s + 1)

    def _run(self) -> None:
        # Polled: those that have another end now. One may point at a file for a while (TensorFlow's import
        # captures stderr, hvdkeras.runtime.tensorflow_import) and at its pipe again later; one closed here would
        # be reported at once. ``on_gone`` gets every output watched at the start, so that what is said then
        # goes to the file, not into a capture that may never be read.
        while not self._stop.is_set():
            self.fds = [fd for fd in self.outputs if watchable(fd)]
            if not self.fds:
                return
            gone = closed(self.fds, self.interval_s)
            if gone and not self._stop.is_set():
                self.gone = gone
                self.on_gone(self.outputs)
                return
