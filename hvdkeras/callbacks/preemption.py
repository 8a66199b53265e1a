"""Preemption: every rank stops at the same batch once any rank has been sent SIGTERM.

Schedulers stop preemptible work with SIGTERM and a grace period (30 s on the big
clouds, ``--signal`` under Slurm); ``horovodrun`` forwards its own SIGTERM to every
rank and kills them 5 s later. Ranks must agree where to stop, or one would wait in
an allreduce for a partner that has left.

* :class:`SignalFlag` notes the signal (and when it came) instead of dying on it
  (:mod:`hvdkeras.common.signals`; the trainer's process has one from its setup on, which the
  callback takes over for the fit).
* :class:`StopAgreement` turns each rank's flag into one decision shared by all: a
  two-number sum over ranks about once a second (at most once per batch), at batches
  every rank knows, so all ranks stop together at the same batch.
* :class:`Preempted` is how a rank leaves ``fit`` then: a ``SystemExit`` with status
  :data:`PREEMPTED_EXIT` carrying the one line to print (also :mod:`hvdkeras.common.signals`').

:class:`hvdkeras.callbacks.BackupAndRestore` (``preemption=True``) combines them with
a mid-epoch checkpoint; the classes here hold no Keras state and are tested alone.
"""
from __future__ import annotations

import time
from typing import Callable, Optional, Sequence, Union

import numpy as np

from hvdkeras.common.signals import PREEMPTED_EXIT, Preempted, SignalFlag

__all__ = ["PREEMPTED_EXIT", "Preempted", "SignalFlag", "StopAgreement"]


class StopAgreement:
    """One stop decision for all ranks from each rank's flag, checked about every ``interval_s`` seconds.

    ``reduce(vector, name)`` must be a collective returning the element-wise sum of
    every rank's float vector (:func:`hvdkeras.runtime.distributed.allreduce_sum`). Every rank
    calls :meth:`decide` once per batch, in the same order. A check is one sum of two
    numbers: the ranks' flags, and rank 0's proposal for how many batches to the next
    check (``interval_s`` over its mean step time since the last check, at least 1), so
    every rank checks at the same batches and all stop together, at most about
    ``interval_s`` plus one batch after the first rank got the signal, for one
    one-number collective per ``interval_s`` of training instead of one per batch.
    ``names()`` gives each check's name (the callback passes
    :func:`hvdkeras.runtime.distributed.cycled_name`: Horovod refuses a name whose last tensor
    it is still finishing).

    The sum runs on the training thread: a helper thread that overlapped it with the
    next batch made Horovod 0.28.1 refuse the per-batch NaN check's name now and then
    ("a tensor with the same name ... is currently being processed").
    """

    def __init__(self, reduce: Callable[[Sequence[float], str], Union[Sequence[float], np.ndarray]], is_root: bool,
                 names: Optional[Callable[[], str]] = None, interval_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic):
        self.reduce = reduce
        self.is_root = is_root
        self.names = names or (lambda: "hvdkeras.preemption")
        self.interval_s = interval_s
        self.clock = clock
        self.batches = 0
        self.next_check = 1
        self.checks = 0
        self._last: Optional[tuple] = None  # (batches, clock) at the last check

    def decide(self, flag: bool) -> bool:
        """True on every rank at the same call: the first check after any rank passed True."""
        self.batches += 1
        if self.batches < self.next_check:
            return False
        now = self.clock()
        proposal = 0.0
        if self.is_root:
            proposal = 1.0
            if self._last is not None and self.batches > self._last[0]:
                step = (now - self._last[1]) / (self.batches - self._last[0])
                proposal = float(max(1, int(self.interval_s / step) if step > 0 else 1))
        total = self.reduce([float(bool(flag)), proposal], self.names())
        self._last = (self.batches, now)
        self.checks += 1
        self.next_check = self.batches + max(1, int(round(total[1])))
        return total[0] > 0
