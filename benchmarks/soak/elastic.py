"""What an elastic job promises when a host leaves or a worker dies, and whether it held (no TensorFlow, no processes).

The promise (docs/elastic.md, docs/reliability.md): the job goes on with the workers that remain, without a
restart, from its last commit (at most ``elastic.commit_every_batches`` batches trained again, none past an
epoch's end), and a host that comes back joins at the next commit. So a ``host_leave`` or a ``kill_rank`` that
finds the full world is held when, in the same attempt, rank 0 announced a smaller world after it (the job went
on), resuming no earlier than the last epoch end ``metrics.jsonl`` had logged when the fault came (an epoch's
end is a commit), and announced the full world again within :attr:`Promise.rejoin_limit_s` of the host being
back (``host_leave``: when its line was written back; ``kill_rank``: the fault plus the upper end of Horovod's
blacklist cool-down, which the soak sets). Not held: the job ended instead of going on, rolled back past that
epoch end, or never scaled back in time. The batches lost come from a position estimated from ``metrics.jsonl``
and the step time (:func:`benchmarks.soak.accounting.position_at`), so they are reported against
``commit_every_batches``, not judged.

A fault that finds a smaller world (a host not back yet) is a restart's fault: killing the last worker ends the
job, and :mod:`benchmarks.soak.accounting` judges it as a kill.
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

from benchmarks.soak.output import Said, absolute
from benchmarks.soak.records import Attempt, Fault
from benchmarks.soak.schedule import HOST_LEAVE, KILL_RANK

SURVIVED_KINDS = (HOST_LEAVE, KILL_RANK)  # the kinds an elastic job goes on through, without a restart


@dataclasses.dataclass(frozen=True)
class Promise:
    """The elastic job's settings its promise is stated in."""

    full_size: int  # the ranks of the full world (horovodrun -np)
    commit_every: int  # elastic.commit_every_batches
    rejoin_limit_s: float  # how soon after a host is back the full world must form again
    cooldown_s: float  # the upper end of horovodrun --blacklist-cooldown-range: a killed worker's host is back


def size_at(said: Said, at: float) -> Optional[int]:
    """The number of ranks of the last world rank 0 announced before ``at`` (None: none yet)."""
    before = [w for w in said.worlds if w.at <= at]
    return before[-1].size if before else None


def survived_in_place(kind: str, said: Said, at: float, promise: Promise) -> bool:
    """Whether a fault of ``kind`` at ``at`` is judged by this module: a host or worker lost from the full world."""
    return kind in SURVIVED_KINDS and size_at(said, at) == promise.full_size


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What a fault the job had to go on through cost, and whether the promise held: the fields of its
    :class:`~benchmarks.soak.records.Outcome` this module judges, which the caller writes into its record."""

    held: bool = True
    ended_attempt: bool = False  # the job ended instead of going on
    hang: bool = False
    resumed: Optional[int] = None  # where the smaller world resumed, in batches
    promised: Optional[int] = None  # the last epoch end logged when the fault came: a commit
    lost: Optional[int] = None
    allowed: Optional[int] = None  # elastic.commit_every_batches
    wall_lost_s: Optional[float] = None
    note: str = ""
    rejoined_s: Optional[float] = None  # the full world again, this long after the host was back


def judge(fault: Fault, attempt: Attempt, position: int, exact: bool, steps: int, start_abs: int,
          promise: Promise) -> Verdict:
    """The :class:`Verdict` on ``fault``, which the job had to go on through, at ``position`` batches (``exact`` or
    estimated) in ``attempt``, which started at ``start_abs``. Reads its arguments, writes none of them."""
    said, full = attempt.said, promise.full_size
    after = [w for w in said.worlds if w.at > fault.at]
    shrunk = next((w for w in after if w.size < full), None)
    if shrunk is None:
        if attempt.status != 0 or attempt.hang:
            return Verdict(held=False, ended_attempt=True, hang=attempt.hang,
                           note=f"the job ended (status {attempt.status}) instead of going on with fewer ranks")
        return Verdict(held=False, note="the job never went on with fewer ranks")
    held = True
    resumed = absolute(shrunk.position, steps)
    promised = max(start_abs, fault.epoch_logged * steps)  # the last epoch end logged: a commit
    wall_lost_s = round(max(0.0, shrunk.at - fault.at + (position - resumed) * (fault.step_time_s or 0.0)), 2)
    notes = [f"{full}->{shrunk.size} ranks {shrunk.at - fault.at:.1f}s after it"]
    if resumed < promised:
        held = False
        notes.append("rolled back past the last epoch end logged")
    back = fault.back_at if fault.back_at is not None else fault.at
    rejoined = next((w for w in after if w.at > shrunk.at and w.size >= full), None)
    rejoined_s = None
    if rejoined is None:
        held = False
        notes.append(f"never back to {full} ranks" + (" (the job finished first: raise --epochs)"
                                                      if attempt.status == 0 else
                                                      f" (the attempt ended, status {attempt.status})"))
    else:
        rejoined_s = round(rejoined.at - back, 1)
        notes.append(f"->{rejoined.size} ranks {rejoined_s:g}s after the host was back"
                     f" ({rejoined.at - shrunk.at:.1f}s with fewer ranks)")
        if rejoined_s > promise.rejoin_limit_s:
            held = False
            notes.append(f"later than the {promise.rejoin_limit_s:g}s promised")
    if not exact:
        notes.append(f"lost estimated, against at most {promise.commit_every} since the last commit")
    return Verdict(held=held, resumed=resumed, promised=promised, lost=max(0, position - resumed),
                   allowed=promise.commit_every, wall_lost_s=wall_lost_s, note="; ".join(notes),
                   rejoined_s=rejoined_s)


def world_changed(attempts: Sequence[Attempt], full_size: int) -> bool:
    """Whether any attempt trained in a world other than the full one (its end then cannot equal a quiet run's)."""
    return any(w.size != full_size for a in attempts for w in a.said.worlds)
