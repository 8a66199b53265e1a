"""SIGTERM in a rank: noted instead of fatal, and the process's one flag, from process setup to its end.

Schedulers stop preemptible work with SIGTERM and a grace period. While training, the preemption
callback stops every rank at the same batch with a checkpoint (:mod:`hvdkeras.callbacks.preemption`);
before that (TensorFlow imported, the model and the data being built) there is nothing to save,
and a SIGTERM must still end the rank as a preemption does: status :data:`PREEMPTED_EXIT` and one line.

* :class:`SignalFlag` notes a signal (and when it came) instead of dying on it; given ``leave``, it
  also acts on the first signal at once unless someone :meth:`~SignalFlag.watch`-es it.
* :class:`Preempted` is how a rank leaves then: a ``SystemExit`` with status :data:`PREEMPTED_EXIT`
  carrying its one line.
* :func:`install_process_flag` is the process's flag, installed by the one owner of the process's state
  (:func:`hvdkeras.runtime.distributed.init`): until a fit watches it, a SIGTERM prints
  :data:`NOTHING_TO_SAVE` and raises :class:`Preempted`; a fit with the preemption callback takes it
  over (:func:`process_flag`), so a signal that came before the fit is seen by it.
* The process's flag also stands for the launcher: when the launcher's end of the rank's output closes
  (``horovodrun`` ending a remote rank's ssh client, a launcher killed), :mod:`hvdkeras.common.launcher_watch`
  sends the rank SIGTERM, so it stops as a preempted rank does instead of training on, orphaned.
* :func:`preempted_instead`: a job that ends on a failed collective after a SIGTERM (a rank frozen or lost,
  so the ranks could not agree to stop) still leaves as a preemption, with the failure's line.
"""
from __future__ import annotations

import signal
import threading
import time
from typing import Callable, Dict, Optional, Sequence

from hvdkeras.common import log
from hvdkeras.common.launcher_watch import LauncherWatch

PREEMPTED_EXIT = 75  # EX_TEMPFAIL: "try again later", distinct from a failure (1, 2) and a kill (137, 143)
NOTHING_TO_SAVE = ("preempted (SIGTERM) outside training's preemption checks (during start-up, or without"
                   " checkpoint.preemption): nothing to save; rerun the same command to resume from the last"
                   " checkpoint, if any")


class Preempted(SystemExit):
    """Leaves ``fit`` (and the process, if uncaught) with status :data:`PREEMPTED_EXIT`."""

    code: int  # PREEMPTED_EXIT (SystemExit's code may be any status)

    def __init__(self, line: str):
        super().__init__(PREEMPTED_EXIT)
        self.line = line

    def __str__(self) -> str:
        return self.line


class SignalFlag:
    """Records the first of ``signals`` instead of letting it end the process; :meth:`uninstall` undoes it.

    ``leave``: called with the first signal's number from its handler (on the main thread, between two
    Python instructions; it may raise, e.g. :class:`Preempted`), unless the flag is watched (:meth:`watch`)
    by code that acts on :attr:`pending` itself.
    """

    def __init__(self, signals: Sequence[int] = (signal.SIGTERM,), leave: Optional[Callable[[int], None]] = None):
        self.signals = tuple(signals)
        self.signum: Optional[int] = None
        self.received_at: Optional[float] = None  # time.monotonic() of the first signal
        self.count = 0  # every signal caught, the first included
        self.leave = leave
        self.watched = False
        self._previous: Dict[int, object] = {}

    @property
    def pending(self) -> bool:
        """Whether a signal has been received."""
        return self.signum is not None

    def install(self) -> bool:
        """Catches the signals from now on; False (and nothing changed) off the main thread."""
        if threading.current_thread() is not threading.main_thread():
            return False
        for signum in self.signals:
            if signum not in self._previous:
                self._previous[signum] = signal.signal(signum, self._handle)
        return True

    def uninstall(self) -> None:
        """Puts back the handlers :meth:`install` replaced (only the main thread can; elsewhere nothing changes)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)  # type: ignore[arg-type]  # what signal.signal returned
        self._previous = {}

    def watch(self) -> None:
        """From now on the signals are only noted: the caller acts on :attr:`pending` (a fit's stop agreement)."""
        self.watched = True

    def unwatch(self) -> None:
        """Acts on the signals again, at once on one that came while watched and was not acted on."""
        self.watched = False
        if self.pending and self.leave is not None:
            self.leave(self.signum)  # type: ignore[arg-type]  # pending: not None

    def _handle(self, signum: int, frame: object) -> None:
        self.count += 1
        if self.signum is None:
            self.signum, self.received_at = signum, time.monotonic()
            if self.leave is not None and not self.watched:
                self.leave(signum)

    def seconds_since(self) -> Optional[float]:
        """Seconds since the first signal, or ``None`` if none came."""
        return None if self.received_at is None else time.monotonic() - self.received_at


def _leave_with_nothing_to_save(signum: int) -> None:
    log.stop(NOTHING_TO_SAVE)
    raise Preempted(NOTHING_TO_SAVE)


_process_flag: Optional[SignalFlag] = None
_launcher_watch: Optional[LauncherWatch] = None


def install_process_flag(output_after_launcher: Optional[str] = None) -> Optional[SignalFlag]:
    """The process's SIGTERM flag, new and installed (a previous one uninstalled); ``None`` off the main thread.

    Until a fit watches it, a SIGTERM ends the rank as a preemption with nothing to save: the line
    ``hvdkeras: <NOTHING_TO_SAVE>`` and :class:`Preempted` (status :data:`PREEMPTED_EXIT`). The launcher's
    end of the rank's output closing sends the SIGTERM too (:class:`~hvdkeras.common.launcher_watch.LauncherWatch`),
    after pointing the output at ``output_after_launcher`` (a file; default ``/dev/null``).
    """
    global _process_flag, _launcher_watch
    if threading.current_thread() is not threading.main_thread():
        return None  # a job in a thread (a tuning's fit on an in-process backend): the handlers stay the main's
    uninstall_process_flag()
    flag = SignalFlag(leave=_leave_with_nothing_to_save)
    if not flag.install():
        return None
    _process_flag = flag
    _launcher_watch = LauncherWatch(divert_to=output_after_launcher)
    _launcher_watch.start()
    return flag


def process_flag() -> Optional[SignalFlag]:
    """The flag :func:`install_process_flag` installed, if any."""
    return _process_flag


def preempted_instead(error: BaseException) -> Optional[Preempted]:
    """The preemption ``error`` becomes when the process's flag caught a SIGTERM before it, else ``None``.

    A rank frozen or lost never joins the allreduce by which the ranks agree to stop, so a SIGTERM then ends
    in that collective's failure (``error``: the peers' one line, which names the checkpoint a rerun resumes
    from: rank 0's last whole batch, when it could save it alone). The rank still leaves as preempted,
    status :data:`PREEMPTED_EXIT`, so that a requeue or a retry loop starts the job again; the line says what
    stopped it.
    """
    flag = _process_flag
    if flag is None or not flag.pending:
        return None
    return Preempted(f"preempted (SIGTERM) but the ranks could not stop together: {error}")


def uninstall_process_flag() -> None:
    """Puts back the SIGTERM handler the process's flag replaced and stops watching the launcher (tests, and a
    new job in the same process)."""
    global _process_flag, _launcher_watch
    if _launcher_watch is not None:
        _launcher_watch.stop()
        _launcher_watch = None
    if _process_flag is not None:
        _process_flag.uninstall()
        _process_flag = None
