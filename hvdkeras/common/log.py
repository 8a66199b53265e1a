"""The library's one logger: rank 0 informs, every rank warns.

    from hvdkeras.common import log
    log.info("trained epochs 1-5 in 12.0s")              # rank 0:      [hvdkeras] trained epochs 1-5 in 12.0s
    log.info("rank 1/2: starting fresh", every_rank=True)  # each rank's own status line
    log.warning("checkpoint ... is damaged")             # every rank:  [hvdkeras] warning: checkpoint ...
    log.stop("preempted at epoch 2, batch 4; ...")       # every rank:  hvdkeras: preempted at ...

It is Python's ``logging`` under the name ``hvdkeras`` (absl's logging, which the
command lines use, is built on the same module): ``logging.getLogger("hvdkeras")``
takes a level (``WARNING`` silences the information lines) and handlers of the
user's own. Information goes to standard output and warnings to standard error,
one line each, flushed at once so that the lines of several ranks interleave whole
under ``horovodrun``. Only the command lines (``train``, ``report``, the Horovod
build, the dry run) print directly.

Which rank this is comes from Horovod once it is initialised (by
:func:`hvdkeras.runtime.distributed.init` or by a script's own ``hvd.init()``; it follows an
elastic job's new ranks), and before that from the launcher's environment
(:func:`hvdkeras.common.horovod_env.launcher_rank`). This module never imports Horovod.
"""
from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, Callable, Optional, TextIO

from hvdkeras.common import horovod_env

NAME = "hvdkeras"
_rank_source: Optional[Callable[[], int]] = None


def set_rank_source(source: Optional[Callable[[], int]]) -> None:
    """Where the rank comes from; ``None`` (the default): Horovod's, once initialised, else the launcher's."""
    global _rank_source
    _rank_source = source


def _horovod_rank() -> int:
    hvd = sys.modules.get("horovod.tensorflow")  # already imported by whoever uses Horovod; never imported here
    if hvd is None:
        raise ValueError("Horovod is not imported")
    return int(hvd.rank())


def rank() -> int:
    """This process's rank as the logger sees it (0 in a single process)."""
    try:
        return int((_rank_source or _horovod_rank)())
    except (ValueError, RuntimeError):  # Horovod not initialised (or shut down): the launcher's rank
        return horovod_env.launcher_rank() or 0


class _Format(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage()
        if getattr(record, "hvdkeras_stop", False):
            return f"{NAME}: {text}"
        if record.levelno >= logging.WARNING:
            return f"[{NAME}] {record.levelname.lower()}: {text}"
        return f"[{NAME}] {text}"


if TYPE_CHECKING:
    _StreamHandler = logging.StreamHandler[TextIO]
else:  # subscriptable at run time from Python 3.11 only
    _StreamHandler = logging.StreamHandler


class _Stream(_StreamHandler):
    """Information to the current ``sys.stdout``, warnings to the current ``sys.stderr`` (looked up at each
    line, so a redirect or a test's capture after import is honoured)."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(_Format())

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr if record.levelno >= logging.WARNING else sys.stdout
        super().emit(record)


def _logger() -> logging.Logger:
    logger = logging.getLogger(NAME)
    if not getattr(logger, "_hvdkeras_configured", False):
        logger.addHandler(_Stream())
        logger.setLevel(logging.INFO)
        logger.propagate = False  # absl's root handler would print each line a second time
        logger._hvdkeras_configured = True  # type: ignore[attr-defined]
    return logger


def info(message: str, every_rank: bool = False) -> None:
    """An information line, on rank 0 only unless ``every_rank`` (a line about this rank itself)."""
    if every_rank or rank() == 0:
        _logger().info(message)


def warning(message: str) -> None:
    """A warning, on every rank that meets it."""
    _logger().warning(message)


def stop(line: str) -> None:
    """The line a rank stops training with (``hvdkeras: <line>``, as the command line's errors), every rank."""
    _logger().warning(line, extra={"hvdkeras_stop": True})


def warning_line(message: str) -> str:
    """A warning as the logger writes it, ``[hvdkeras] warning: <message>``, for a command that prints its own (one
    whose standard streams are another program's input, as host discovery's are Horovod's)."""
    return f"[{NAME}] warning: {message}"


def command_error(message: str) -> None:
    """A command line's one line for an error the user can fix: ``hvdkeras: error: <message>`` on stderr.

    Most start-up errors (a bad config) happen on every rank alike. Rank 0 prints at
    once; the other ranks wait a moment first, so the launcher, which stops the job
    when rank 0 exits, usually shows the line once. An error only one rank has is
    still printed, by that rank, after the pause.
    """
    if horovod_env.launcher_rank() not in (None, 0):
        import time

        time.sleep(3)
    print(f"hvdkeras: error: {message}", file=sys.stderr, flush=True)
