"""The batches and the time each fault cost, against what hvdkeras promises (no TensorFlow, no processes).

The promise (docs/reliability.md): a SIGTERM loses nothing (the job stops at one batch, checkpoints it
and the rerun resumes there), unless a rank is frozen when it comes (the ranks cannot agree on a batch:
the job leaves as preempted, losing what a kill loses); any other fault loses at most the batches since
the last checkpoint (the rerun resumes from the newest checkpoint that is intact). So after every attempt that ends, the
next attempt must resume at the newest checkpoint on disk that the soak itself did not damage
(:attr:`benchmarks.soak.records.Attempt.expected_next`), and a preemption must leave its ``preempted at`` line.

Where the job was when a fault hit is exact for a preemption (its line) and at start-up (nothing trained
yet); otherwise it is estimated from ``metrics.jsonl`` as the fault found it (the last epoch logged and
when) and the run's step time, so the batches lost by a kill are marked approximate (``~``).
"""
from __future__ import annotations

import math
from typing import List, Optional, Sequence

from benchmarks.soak import elastic as elastic_lib
from benchmarks.soak.output import Position, absolute
from benchmarks.soak.records import STARTUP, TRAINING, Attempt, EpochEnd, Fault, Outcome
from benchmarks.soak.schedule import DAMAGE, FREEZE, NODE_FAIL, PREEMPT, THAW


def back_at(position: int, attempt: Attempt, epoch_ends: Sequence[EpochEnd], steps: int) -> Optional[float]:
    """When ``attempt`` had trained ``position`` batches again: its first epoch end at or beyond that position, less
    the batches past it at that epoch's pace. None when it ended no such epoch (stopped in its start-up, say: when it
    resumed is then unknown, and a later attempt's time would count the next fault's cost too)."""
    for end in epoch_ends:
        if attempt.start <= end.at <= attempt.end and end.epoch * steps >= position:
            per_batch = (end.train_s or 0.0) / steps
            return end.at - (end.epoch * steps - position) * per_batch
    return None


def position_at(fault: Fault, attempt: Attempt, start_abs: int, steps: int) -> tuple:
    """(batches trained when ``fault`` came, exact?) for a fault in ``attempt``, which started at ``start_abs``."""
    if fault.kind in (PREEMPT, NODE_FAIL) and attempt.said.preempted is not None:  # Slurm SIGTERMs a failed node's job
        return absolute(attempt.said.preempted, steps), True
    resumed_at = attempt.said.resumed_at
    late = fault.phase == TRAINING and (resumed_at is None or fault.at <= resumed_at)  # the lines came after it
    if late and fault.logged_at is not None and fault.logged_at >= attempt.start and fault.step_time_s:
        base = max(start_abs, fault.epoch_logged * steps)  # a Spark fit's: estimated from its metrics alone
        return base + min(steps - 1, math.floor((fault.at - fault.logged_at) / fault.step_time_s)), False
    if fault.phase == STARTUP or resumed_at is None or fault.at <= resumed_at:
        return start_abs, True
    base, since = start_abs, resumed_at
    if fault.logged_at is not None and fault.logged_at > resumed_at and fault.epoch_logged * steps >= start_abs:
        base, since = fault.epoch_logged * steps, fault.logged_at
    elif fault.kind == PREEMPT:
        # No preemption line and no epoch ended in this attempt: the SIGTERM may have come before fit installed its
        # handler, when nothing of this attempt was trained; count nothing rather than guess.
        return start_abs, False
    within = math.floor((fault.at - since) / fault.step_time_s) if fault.step_time_s else 0
    cap = (base // steps) * steps + steps - 1  # the next epoch's line would have been logged
    return min(base + max(0, within), max(base, cap)), False


def frozen_when(fault: Fault, faults: List[Fault]) -> bool:
    """Whether a rank of ``fault``'s attempt was still frozen (stopped, not yet continued) when ``fault`` came."""
    return any(f.kind == FREEZE and f.injected and f.attempt == fault.attempt and f.at < fault.at
               and (f.freeze_end != THAW or f.at + f.freeze_s > fault.at) for f in faults)


def promised_resume(before: Attempt, nxt: Attempt, faults: List[Fault]) -> Optional[Position]:
    """Where ``nxt`` had to resume: the newest checkpoint the soak had not damaged when ``before`` (the attempt before
    it) ended, unless a damage fault hit that one while ``nxt`` started and before it restored (a fault during the
    recovery, found by the Slurm soak's run of record); then the newest older one on disk, each such hit moving it
    one further back."""
    promised = before.expected_next
    if nxt.said.resumed_at is None:
        return promised
    hit = {f.newest_checkpoint for f in faults if f.kind == DAMAGE and f.injected and f.attempt >= before.index
           and f.at < nxt.said.resumed_at and f.newest_checkpoint is not None}
    while promised is not None and promised in hit:
        older = [p for p in before.checkpoints.values() if p < promised]
        promised = max(older) if older else None
    return promised


def outcomes(faults: List[Fault], attempts: List[Attempt], steps: int,
             elastic: Optional["elastic_lib.Promise"] = None, lines_late: bool = False,
             epoch_ends: Sequence[EpochEnd] = ()) -> List[Outcome]:
    """Each fault's :class:`Outcome`: the last fault injected in an attempt that failed, before its first rank
    ended, ended it; the next attempt that said where it starts is its resume; the promise is the newest
    undamaged checkpoint when the attempt before that one ended. In an ``elastic`` job a host or worker lost
    from the full world is judged by :mod:`benchmarks.soak.elastic` instead (the job goes on, no restart).
    With ``lines_late`` (a Spark fit's) the wall time lost is measured from ``epoch_ends`` instead of the resume's
    line: from the fault to the resuming attempt's first epoch end past its position, less the batches beyond it."""
    by_index = {a.index: a for a in attempts}
    found = []
    for fault in faults:
        attempt = by_index[fault.attempt]
        if not fault.injected:
            found.append(Outcome(fault, ended_attempt=False, note="not injected"))
            continue
        if elastic is not None and elastic_lib.survived_in_place(fault.kind, attempt.said, fault.at, elastic):
            previous = by_index.get(fault.attempt - 1)
            start_abs = absolute(attempt.said.resumed or (previous.expected_next if previous else None) or (0, 0),
                                 steps)
            position, exact = position_at(fault, attempt, start_abs, steps)
            verdict = elastic_lib.judge(fault, attempt, position, exact, steps, start_abs, elastic)
            found.append(_judged(fault, position, exact, verdict))
            continue
        failing = attempt.said.failing_at
        if failing is not None and fault.at > failing:  # a rank had already ended: the job was going down anyway
            found.append(Outcome(fault, ended_attempt=False, wall_lost_s=0.0,
                                 note=f"the job was already ending (a rank exited at {failing:.1f}s)"))
            continue
        later = [f for f in faults if f.attempt == fault.attempt and f.at > fault.at and f.injected
                 and (failing is None or f.at <= failing)]
        ended = not later and (attempt.status != 0 or attempt.hang)
        out = Outcome(fault, ended_attempt=ended, hang=ended and attempt.hang)
        previous = by_index.get(fault.attempt - 1)
        start = attempt.said.resumed or (previous.expected_next if previous else None) or (0, 0)
        out.position, out.exact = position_at(fault, attempt, absolute(start, steps), steps)
        if not ended:
            if fault.kind == FREEZE and fault.freeze_end == THAW:
                out.wall_lost_s, out.note = fault.freeze_s, "the job waited and went on"
            elif fault.kind == NODE_FAIL and fault.phase == STARTUP:  # it came while the job was requeued
                started = attempt.said.resumed_at
                waited = min(fault.back_at or fault.at, started if started is not None else fault.at) - fault.at
                out.wall_lost_s, out.note = round(max(0.0, waited), 2), "the requeued job waited for the node"
            else:
                out.wall_lost_s, out.note = 0.0, "the job went on"
            found.append(out)
            continue
        nxt = next((a for a in attempts if a.index > attempt.index and a.said.resumed is not None), None)
        if nxt is None:
            out.held, out.note = False, "no later attempt resumed"
            found.append(out)
            continue
        before = by_index[nxt.index - 1]
        out.resumed = absolute(nxt.said.resumed, steps)
        out.promised = absolute(promised_resume(before, nxt, faults) or (0, 0), steps)
        out.lost = max(0, out.position - out.resumed)
        exact_stop = fault.kind == PREEMPT and not frozen_when(fault, faults)
        # A checkpoint damaged while the job restarted takes what it held from every fault before it, a
        # preemption's too: its promise then moved back (promised_resume), and so does what it may lose.
        moved_back = out.promised < absolute(before.expected_next or (0, 0), steps)
        out.allowed = 0 if exact_stop and not moved_back else max(0, out.position - out.promised)
        out.wall_lost_s = round(nxt.said.resumed_at - fault.at + out.lost * (fault.step_time_s or 0.0), 2)
        if lines_late:  # the resume's line came when its fit's output did, not when it resumed: the metrics say
            # back where it was, or where it resumed when that is further (a rank 0 that saved at a batch the
            # metrics had not logged)
            back = back_at(max(out.position, out.resumed), nxt, epoch_ends, steps) if out.position is not None else None
            out.wall_lost_s = None if back is None else round(back - fault.at, 2)
        out.held = out.resumed == out.promised and out.lost <= out.allowed and not out.hang
        if fault.kind == PREEMPT and frozen_when(fault, faults) and attempt.said.preempted is None:
            out.note = "a rank was frozen: the ranks could not agree on a batch, the rerun resumed from a checkpoint"
        elif fault.kind == PREEMPT and attempt.said.preempted is None and fault.phase == TRAINING:
            out.note = (f"no preemption line (status {attempt.status}): the SIGTERM did not stop the job at a batch"
                        if out.lost else f"no preemption line (status {attempt.status}): the SIGTERM came before"
                        " an epoch of this attempt ended, maybe before training (the handler is installed by fit)")
        elif out.resumed < out.promised:
            out.note = "resumed before the newest intact checkpoint: a checkpoint was lost"
        elif out.resumed > out.promised:
            out.note = "resumed past the newest checkpoint on disk"
        if out.hang:
            out.note = (out.note + "; " if out.note else "") + "the attempt hung and was killed"
        found.append(out)
    return found


def _judged(fault: Fault, position: int, exact: bool, verdict: elastic_lib.Verdict) -> Outcome:
    """The :class:`Outcome` of a fault an elastic job went on through, from its position and the elastic verdict."""
    return Outcome(fault, ended_attempt=verdict.ended_attempt, hang=verdict.hang, position=position, exact=exact,
                   resumed=verdict.resumed, promised=verdict.promised, lost=verdict.lost, allowed=verdict.allowed,
                   wall_lost_s=verdict.wall_lost_s, held=verdict.held, note=verdict.note,
                   rejoined_s=verdict.rejoined_s)


def unprompted(faults: List[Fault], attempts: List[Attempt]) -> List[Attempt]:
    """Attempts that failed with no fault injected in them: failures of the job itself."""
    hit = {f.attempt for f in faults}
    return [a for a in attempts if (a.status != 0 or a.hang) and a.index not in hit]


def lost_checkpoints(attempts: List[Attempt], keep: int) -> List[str]:
    """Checkpoints on disk when one attempt ended and gone when the next ended, for no reason hvdkeras gives: not
    pruned (``keep`` newer ones exist, 0: keep all) and not set aside as damaged (the trainer's warning names it)."""
    lost = []
    for before, after in zip(attempts, attempts[1:]):
        for path, position in sorted(before.checkpoints.items()):
            if path in after.checkpoints or path in after.said.damaged:
                continue
            newer = sum(p > position for p in after.checkpoints.values())
            if keep <= 0 or newer < keep:
                lost.append(f"{path} (after attempt {before.index}, gone after attempt {after.index})")
    return lost
