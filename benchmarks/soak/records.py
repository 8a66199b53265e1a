"""The soak's records: an attempt of the job, a fault as injected, an epoch's end as seen, what a fault cost.

The loop writes the first three (:mod:`benchmarks.soak.loop`); :mod:`benchmarks.soak.accounting` and
:mod:`benchmarks.soak.elastic` read them, the accounting makes the last one (an elastic fault's from
:func:`benchmarks.soak.elastic.judge`'s verdict) and :mod:`benchmarks.soak.report` prints it. Plain data over
:mod:`benchmarks.soak.output`'s: every side imports this module, and it imports none of them (no TensorFlow, no
processes).
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional

from benchmarks.soak.output import Position, Said

STARTUP, TRAINING = "start-up", "training"


@dataclasses.dataclass
class Attempt:
    """One run of the job's command under the restart loop."""

    index: int
    start: float  # seconds since the soak began
    end: float
    status: Optional[int]  # the launcher's exit status (None: killed by the soak as a hang)
    said: Said
    hang: bool = False
    expected_next: Optional[Position] = None  # the newest checkpoint the soak did not damage, when it ended
    left_behind: List[str] = dataclasses.field(default_factory=list)  # processes still there after it ended
    checkpoints: Dict[str, Position] = dataclasses.field(default_factory=dict)  # the folders on disk when it ended


@dataclasses.dataclass
class Fault:
    """One fault as injected, with what the job had written when it came."""

    index: int
    kind: str
    at: float  # seconds since the soak began
    attempt: int
    phase: str  # STARTUP (before the attempt said where it starts) or TRAINING
    detail: str = ""
    freeze_s: float = 0.0
    freeze_end: str = ""
    epoch_logged: int = 0  # the last epoch in metrics.jsonl when it came
    logged_at: Optional[float] = None  # when that line was written (the file's mtime, soak seconds)
    step_time_s: Optional[float] = None  # one batch's wall time in the last epoch logged (loop.batch_seconds)
    newest_checkpoint: Optional[Position] = None
    injected: bool = True  # False: nothing to hit (the rank had gone, no disk of its own)
    back_at: Optional[float] = None  # an elastic job's host available again (host_leave: written back)


@dataclasses.dataclass(frozen=True)
class EpochEnd:
    """An epoch's record in the job's ``metrics.jsonl`` as the soak saw it appear (a Spark fit's: its lines come
    late, its metrics do not)."""

    at: float  # seconds since the soak began, when the record was written (the file's time)
    epoch: int  # epochs done
    train_s: Optional[float] = None  # the epoch's training wall time (its train_time_s)


@dataclasses.dataclass
class Outcome:
    """What one fault cost."""

    fault: Fault
    ended_attempt: bool  # the job stopped (the fault was the last one in an attempt that failed)
    hang: bool = False
    position: Optional[int] = None  # batches trained when it came (exact or estimated)
    exact: bool = False
    resumed: Optional[int] = None  # where the next attempt that trained resumed, in batches
    promised: Optional[int] = None  # where it had to resume
    lost: Optional[int] = None  # batches trained again
    allowed: Optional[int] = None  # batches the promise allows to lose
    wall_lost_s: Optional[float] = None
    held: bool = True
    note: str = ""
    rejoined_s: Optional[float] = None  # an elastic job: the full world again, this long after the host was back
