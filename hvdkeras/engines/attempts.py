"""The gang's attempts over a whole run: one object owns the retry policy, the count of starts and the reasons.

An engine may start the gang again itself (Spark retries a failed barrier stage) or be asked to (the driver
submits it again): either way rank 0's task asks :meth:`Attempts.start` before its rank starts, so every start
is counted here, and one past ``max_retries`` retries is refused. A rank that fails says why
(:meth:`Attempts.failed`); the warning of the next retry and the final error name those reasons. Plain Python.
"""
from __future__ import annotations

import threading
from typing import Callable, List, Optional, Tuple, Type, TypeVar

from hvdkeras.common import log
from hvdkeras.common.errors import HvdkerasError
from hvdkeras.engines import failures

T = TypeVar("T")

LOST = "a rank or its executor was lost"  # the reason when no rank said why


class Attempts:
    """The starts of one run's gang.

    Args:
        max_retries: how many starts of the gang after the first are allowed.
        retry_hint: what a retry's warning line adds (where the ranks resume).
    """

    def __init__(self, max_retries: int = 0, retry_hint: str = ""):
        self.max_retries = max_retries
        self.retry_hint = retry_hint
        self.starts = 0
        self.failures: List[str] = []
        self._attempt_failures = 0  # where the current attempt's failures begin in :attr:`failures`
        self._lock = threading.Lock()

    def start(self) -> Optional[int]:
        """Counts a start of the gang; returns its attempt number (from 0), or None past ``max_retries`` retries.
        A retry is logged as one warning line naming why the attempt before failed."""
        with self._lock:
            self.starts += 1
            attempt = self.starts - 1
            why = self.why(self._attempt_failures)
            self._attempt_failures = len(self.failures)
        if attempt > self.max_retries:
            return None
        if attempt > 0:
            log.warning(f"a rank failed ({why}); starting the ranks again, retry {attempt} of {self.max_retries}"
                        f"{self.retry_hint}")
        return attempt

    def failed(self, reason: str) -> None:
        """Notes why a rank of the current attempt failed."""
        with self._lock:
            self.failures.append(reason)

    def count_attempt_since(self, starts: int) -> None:
        """Counts an attempt that failed before its rank 0 asked to start (:attr:`starts` still ``starts``)."""
        with self._lock:
            if self.starts == starts:
                self.starts += 1

    @property
    def exhausted(self) -> bool:
        """Whether no retry is left."""
        return self.starts > self.max_retries

    def why(self, since: int = 0) -> str:
        """The ranks' failures from :attr:`failures`'s index ``since`` on, in one clause (the first three)."""
        found = list(dict.fromkeys(self.failures[since:]))
        return "; ".join(found[:3]) if found else LOST

    def retry(self, run_once: Callable[[], T], recover: Callable[[], None] = lambda: None,
              retry_on: Tuple[Type[BaseException], ...] = (Exception,)) -> T:
        """Runs the whole gang with ``run_once`` until it returns, again after a failure while a retry is left: the
        loop for an engine that cannot ask before each start (a backend with Horovod's interface only, a Ray job). A
        user error (:class:`~hvdkeras.common.errors.HvdkerasError`) is never retried, nor anything but ``retry_on``
        (an engine that types its lost ranks passes their class); ``recover`` runs before each retry.

        Raises:
            RetriesExhaustedError: the last attempt failed; its text is why, in one clause.
        """
        while True:
            self.start()  # never refused here: the loop ends when the last allowed attempt fails
            try:
                return run_once()
            except HvdkerasError:
                raise
            except retry_on as exc:  # a rank's process died: the engine says so in its own words
                reason = failures.reason_of(exc)
                self.failed(reason)
                if self.exhausted:
                    raise failures.RetriesExhaustedError(reason) from None
                recover()
