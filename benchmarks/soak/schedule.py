"""The soak's fault plan: which fault comes next, and when, drawn from a seed (no TensorFlow, no processes).

A fault is timed either from the previous fault or the job's last restart, whichever is later
(``previous``: a delay drawn from the ``--interval`` range), or from the start of the attempt that
follows it (``restart``: a delay of a few seconds, so that it lands while the job starts again and
restores its checkpoint).
Kinds come in shuffled rounds, so every kind is drawn before any is drawn twice.

An elastic job (``--elastic``: ``horovodrun --min-np 1 --max-np 2`` and a host discovery script over a hosts file
of two "hosts" of this machine) has its own kinds, :data:`ELASTIC_KINDS`, each with a promise in docs/elastic.md
or docs/reliability.md:

* ``host_leave``: the host of rank 1 leaves the hosts file for ``leave_s`` and is written back; the job goes on
  with one worker from its last commit and the worker on the host that came back joins at the next commit.
  Never rank 0's host: rank 0 is Horovod's coordinator (the worker the driver tells of host changes) and
  hvdkeras's writer (metrics.jsonl, the checkpoints, the workdir's lock), so taking its host away hands all of
  those to another process at once, which the docs promise nowhere, and the soak would lose the metrics it reads
  positions from in the middle of the fault; the docs' own tests take away the host of a rank other than 0.
* ``kill_rank``: a worker killed; Horovod's driver re-forms on the other host without a restart (the survivor
  rolls back to the last commit) and blacklists the killed worker's host for a cool-down, after which it joins
  again (test_elastic.py's kill-and-join).
* ``preempt``: SIGTERM to the launcher; every worker stops at one batch with a checkpoint and exits 75, the
  elastic driver ends the job and the rerun resumes at that batch (test_elastic.py's SIGTERM test).

A Slurm job (``--slurm``: the generated ``sbatch`` script on the lab's two-node cluster, Slurm's requeue its restart
loop, :mod:`benchmarks.soak.slurm_job`) has :data:`SLURM_KINDS`: ``preempt`` there is the time limit's signal
(SIGUSR1 to the batch shell: the ranks stop at one batch and the script requeues the job), and ``node_fail`` takes
the node of a rank down and keeps it out for ``leave_s`` (Slurm ends the job "due to node failure" and requeues it;
a job already requeued waits for the node). A fault timed from a restart then lands while the job is requeued
(pending) or while it starts again. ``freeze`` and ``link_cut`` may be added with ``--kinds``; ``full_disk`` is not
a kind there (the nodes' daemons started before the soak's tmpfs could exist).

A Spark estimator's fit (``--spark``: ``KerasEstimator.fit`` on the lab's standalone cluster, one executor per host,
rerun with the same ``run_id`` after it stopped, as a user's retry; :mod:`benchmarks.soak.spark_fit`) has
:data:`SPARK_KINDS`: a rank killed, the executor JVM it runs under killed (``kill_executor``), the newest checkpoint
damaged. Its promise is a kill's (docs/spark.md): the fit stops in one line and the next resumes from the newest
intact checkpoint (one per epoch). ``preempt`` is not a kind there: the estimator has no SIGTERM path of its own
(the driver's signal ends the Spark application, a kill for the ranks).

Left out of an elastic job: ``freeze`` (a frozen worker: the docs' promise is the plain driver's one-line stop;
under the elastic driver the survivor waits in Horovod's rendezvous for a worker that neither runs nor exits, a
case no doc promises anything for), ``full_disk`` (rank 0's failed save is a worker failure there: the driver
re-forms on the other host, which meets the same full disk), ``damage_checkpoint`` (the kill after the damage does not
restart an elastic job, so no restore reads the damaged checkpoint before the next preemption writes a newer
one) and ``link_cut`` (the lab's hosts, not this machine's two names).
"""
from __future__ import annotations

import dataclasses
import random
from typing import List, Optional, Sequence, Tuple

KILL_RANK = "kill_rank"  # SIGKILL of one rank
PREEMPT = "preempt"  # SIGTERM of the job (its launcher), as a scheduler preempts
FREEZE = "freeze"  # SIGSTOP of one rank past the stall limit, then SIGCONT or SIGKILL
FULL_DISK = "full_disk"  # the workdir's filesystem filled up until a save fails
DAMAGE = "damage_checkpoint"  # the newest checkpoint's data truncated, then a rank killed
LINK_CUT = "link_cut"  # the link of one of the lab's two emulated hosts down for a while (--hosts 2)
HOST_LEAVE = "host_leave"  # an elastic job's host out of the hosts file for a while, then back (--elastic)
NODE_FAIL = "node_fail"  # a Slurm node set DOWN and kept out for a while, then back (--slurm)
KILL_EXECUTOR = "kill_executor"  # SIGKILL of the Spark executor JVM a rank runs under (--spark)
KINDS = (KILL_RANK, PREEMPT, FREEZE, FULL_DISK, DAMAGE)  # one host's
TWO_HOST_KINDS = (LINK_CUT,)
ELASTIC_KINDS = (KILL_RANK, PREEMPT, HOST_LEAVE)  # an elastic job's (see above for why these)
SLURM_KINDS = (PREEMPT, KILL_RANK, DAMAGE, NODE_FAIL)  # a Slurm job's by default (see above)
SLURM_MAY = SLURM_KINDS + (FREEZE, LINK_CUT)  # and what --kinds may add there
SPARK_KINDS = (KILL_RANK, KILL_EXECUTOR, DAMAGE)  # a Spark estimator's fit (see above)
SPARK_MAY = SPARK_KINDS + (FREEZE,)
ALL_KINDS = KINDS + TWO_HOST_KINDS + (HOST_LEAVE, NODE_FAIL, KILL_EXECUTOR)

PREVIOUS, RESTART = "previous", "restart"
THAW, KILL = "cont", "kill"  # what ends a freeze


@dataclasses.dataclass(frozen=True)
class PlannedFault:
    """One fault of the plan: its kind, what its delay counts from, and the delay."""

    index: int
    kind: str
    anchor: str  # PREVIOUS: after the previous fault; RESTART: after the next attempt starts
    delay_s: float
    freeze_s: float = 0.0  # FREEZE: how long the rank stays stopped
    freeze_end: str = ""  # FREEZE: THAW or KILL
    rank: int = 0  # the rank a rank fault hits (a link cut: the host of that rank)
    cut_s: float = 0.0  # LINK_CUT: how long the link stays down
    leave_s: float = 0.0  # HOST_LEAVE, NODE_FAIL: how long the host (always rank 1's) or node stays out


def parse_range(text: str) -> Tuple[float, float]:
    """``"30-90"`` or ``"45"`` as ``(low, high)`` seconds; ValueError with what is wrong."""
    parts = text.split("-")
    try:
        low, high = (float(parts[0]), float(parts[-1])) if len(parts) <= 2 else (None, None)
    except ValueError:
        low = high = None
    if low is None or high is None or low <= 0 or high < low:
        raise ValueError(f"a range of seconds is LOW-HIGH with 0 < LOW <= HIGH, e.g. 30-90; received: {text!r}")
    return low, high


def plan(seed: int, count: int, interval: Tuple[float, float], kinds: Sequence[str] = KINDS,
         recovery_share: float = 0.3, startup_s: float = 15.0, stall_limit_s: float = 30.0,
         ranks: int = 2, cut_s: float = 20.0, leave_s: float = 20.0) -> List[PlannedFault]:
    """``count`` faults drawn from ``seed``: kinds in shuffled rounds over ``kinds``, each fault but the first
    timed from the next restart with probability ``recovery_share`` (within ``startup_s``), else after the
    previous one by a delay in ``interval``. A freeze lasts 5 to 15 s past ``stall_limit_s``, a link cut ``cut_s``,
    a host's leave and a node's failure ``leave_s``."""
    unknown = sorted(set(kinds) - set(ALL_KINDS))
    if unknown or not kinds:
        raise ValueError(f"unknown fault kinds {unknown}; choose from {', '.join(ALL_KINDS)}")
    rng = random.Random(seed)
    order: List[str] = []
    while len(order) < count:
        batch = list(kinds)
        rng.shuffle(batch)
        order.extend(batch)
    faults = []
    for i, kind in enumerate(order[:count]):
        if i > 0 and rng.random() < recovery_share:
            anchor, delay = RESTART, rng.uniform(0.0, startup_s)
        else:
            anchor, delay = PREVIOUS, rng.uniform(*interval)
        freeze_s, end = 0.0, ""
        if kind == FREEZE:
            freeze_s, end = stall_limit_s + rng.uniform(5.0, 15.0), rng.choice((THAW, KILL))
        rank = rng.randrange(ranks)
        if kind == HOST_LEAVE:
            rank = 1  # never rank 0's host (see above)
        faults.append(PlannedFault(i, kind, anchor, round(delay, 2), round(freeze_s, 2), end, rank,
                                   cut_s if kind == LINK_CUT else 0.0, leave_s if kind in (HOST_LEAVE, NODE_FAIL)
                                   else 0.0))
    return faults


def due_at(fault: PlannedFault, previous_at: float, previous_attempt: int, attempt: int, attempt_start: float,
           interval: Tuple[float, float]) -> Optional[float]:
    """When ``fault`` fires (a clock time), given the previous fault's time and attempt and the current attempt.

    A ``previous`` fault fires ``delay_s`` after the previous fault or after the current attempt's start, whichever
    is later: the job gets that long between faults, also after a restart. A ``restart`` fault fires ``delay_s``
    after the start of the first attempt after the previous fault's; while that attempt has not come (the
    previous fault did not end the job), it fires as a ``previous`` fault would at the longest interval, so the
    soak never waits on a restart that is not coming."""
    if fault.anchor == RESTART:
        if attempt > previous_attempt:
            return attempt_start + fault.delay_s
        return previous_at + interval[1]
    return max(previous_at, attempt_start) + fault.delay_s
