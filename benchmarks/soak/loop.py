"""The restart loop: the job's command rerun after every failure until it has trained all its epochs, with the
planned faults injected as they fall due (:mod:`benchmarks.soak.schedule`) and a deadline per attempt.

An elastic job (:attr:`Job.hosts_file` set) goes on through a lost host or worker without a restart; the next
fault then waits until rank 0 has announced the full world again (or the rejoin limit has passed), and its delay
counts from then, so that every fault hits the full world, as the promise it is judged by assumes
(:mod:`benchmarks.soak.elastic`).

A fault still waiting when the job is ``end_margin`` epochs from its last (``epochs``) fires then, its detail saying
so: the plan's delays are wall-clock seconds, and a fast machine trained the suite's short job to its end before its
last fault was due (4 of 5 injected).

A Slurm job's attempts (:attr:`Job.slurm`) are the runs of one batch job, each from its requeue
(:mod:`benchmarks.soak.slurm_job`); a node kept out outlasts the attempt it ended and is brought back when its time
is up, or when the loop ends. A Spark fit's ranks (:attr:`Job.rank_env`) are found by their environment."""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import time
from typing import Dict, List, Optional, Sequence, Tuple, Union

from benchmarks.soak import elastic as elastic_lib
from benchmarks.soak import faults as fault_lib
from benchmarks.soak import output
from benchmarks.soak.attempt import Running, left_behind
from benchmarks.soak.records import STARTUP, TRAINING, Attempt, EpochEnd, Fault
from benchmarks.soak.schedule import (
    DAMAGE,
    FREEZE,
    FULL_DISK,
    HOST_LEAVE,
    KILL_EXECUTOR,
    KILL_RANK,
    LINK_CUT,
    NODE_FAIL,
    PREEMPT,
    PlannedFault,
    due_at,
)
from benchmarks.soak.slurm_job import NodeFail, SlurmJob, SlurmRun
from hvdkeras.common.workdir import read_metrics

Run = Union[Running, SlurmRun]  # an attempt: the command run once, or one run of a Slurm job
RANK_KINDS = (KILL_RANK, FREEZE, KILL_EXECUTOR)  # faults that need a rank of the attempt to hit
# faults that need the attempt running (a damage with no checkpoint yet is a rank's kill): one due as the attempt
# went down goes to the next attempt's start-up rather than counting as "found nothing to hit"
ATTEMPT_KINDS = RANK_KINDS + (DAMAGE, PREEMPT)
RANK_WAIT_S = 30.0  # how long a rank fault waits for the rank to exist (a fault in the first seconds of a restart)
DEFAULT_CHECKPOINT_BYTES = 1 << 20  # the full disk's guess before the first checkpoint exists


@dataclasses.dataclass
class Job:
    """The command the loop reruns and where it writes."""

    cmd: Sequence[str]
    env: Dict[str, str]
    cwd: str
    workdir: str
    disk: Optional[str] = None  # the small filesystem holding the workdir (the full-disk fault's)
    links: Dict[int, str] = dataclasses.field(default_factory=dict)  # rank -> its host's link (the lab's)
    hosts_file: Optional[str] = None  # an elastic job's: the file its host discovery script prints
    slurm: Optional[SlurmJob] = None  # a Slurm batch job's (--slurm): its runs are the attempts, not ``cmd``'s
    rank_env: Optional[str] = None  # a Spark job's (--spark): the ranks' variable holding the workdir (not argv)
    lines_late: bool = False  # a Spark job's: its ranks' lines reach the soak in 64 KB chunks, often at the end

    def start(self, log_path: str, clock) -> Run:
        """The next attempt: ``cmd`` run now, or the Slurm job's next run."""
        if self.slurm is not None:
            return self.slurm.run(log_path, clock)
        return Running(self.cmd, self.env, self.cwd, log_path, clock)

    @property
    def checkpoints(self) -> str:
        """The job's checkpoint folder."""
        return os.path.join(self.workdir, "checkpoints")


def batch_seconds(record: dict, steps: Optional[int]) -> Optional[float]:
    """The wall time of one batch in the epoch of a ``metrics.jsonl`` ``record``: its ``train_time_s`` over the
    ``steps`` of an epoch, else its ``step_time_s``. ``step_time_s`` times the step alone: it was half the wall time
    per batch in the digits job (0.022 s against 0.044 s), which put estimated positions twice as far as the job was."""
    if steps and record.get("train_time_s"):
        return float(record["train_time_s"]) / steps
    return record.get("step_time_s")


def _preempted_together(folder: str) -> bool:
    """Whether the checkpoint in ``folder`` is one the ranks wrote together on a preemption (not rank 0 alone)."""
    try:
        with open(os.path.join(folder, "meta.json")) as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return False
    return bool(meta.get("preempted")) and not meta.get("alone")


class Loop:
    """Runs ``job`` until it succeeds, ``plan``'s faults injected; :attr:`faults` and :attr:`attempts` after."""

    def __init__(self, job: Job, plan: Sequence[PlannedFault], interval: Tuple[float, float], deadline_s: float,
                 logs: str, max_attempts: int, say=print, tick_s: float = 0.2,
                 promise: Optional[elastic_lib.Promise] = None, epochs: Optional[int] = None, end_margin: int = 3):
        self.job, self.plan, self.interval, self.deadline_s = job, list(plan), interval, deadline_s
        self.epochs, self.end_margin = epochs, end_margin  # a fault still due this near the end fires at once
        self._done: Tuple[float, int] = (-1.0, 0)  # metrics.jsonl's mtime and the last epoch it logged
        self.promise = promise  # an elastic job's (with job.hosts_file)
        self.tick_s = tick_s  # how often the loop looks at the job
        self.logs, self.max_attempts, self.say = logs, max_attempts, say
        self.faults: List[Fault] = []
        self.attempts: List[Attempt] = []
        self.damaged: Dict[str, str] = {}  # checkpoint folder -> the data file the soak truncated
        self.lasting: List[NodeFail] = []  # faults that outlast their attempt (a node out while the job is requeued)
        self.epoch_ends: List[EpochEnd] = []  # with job.lines_late: each epoch's record as it appeared
        self._t0 = time.monotonic()

    def clock(self) -> float:
        """Seconds since the soak began."""
        return time.monotonic() - self._t0

    def run(self) -> bool:
        """Reruns the job until it exits 0; whether it did (False: more than ``max_attempts`` attempts)."""
        try:
            return self._run()
        finally:
            for lasting in self.lasting:
                lasting.finish()

    def _run(self) -> bool:
        self._t0 = time.monotonic()
        previous_at, previous_attempt = 0.0, 0
        while len(self.attempts) < self.max_attempts:
            index = len(self.attempts)
            run = self.job.start(os.path.join(self.logs, f"attempt-{index:03d}.log"), self.clock)
            self.say(f"[soak] {run.started:7.1f}s attempt {index} started ({run.name})")
            freezes: List[fault_lib.Freeze] = []
            try:
                hang, previous_at, previous_attempt, ballast = self._watch(run, index, freezes, previous_at,
                                                                           previous_attempt)
            except BaseException:  # the soak itself stops (Ctrl-C, a bug): nothing of the job is left running
                for freeze in freezes:
                    freeze.finish()
                run.kill()
                raise
            status = run.finish()
            for freeze in freezes:
                freeze.finish()
            if ballast and os.path.exists(ballast):
                os.remove(ballast)  # the operator frees the space before the job is rerun
            leftovers = left_behind(self.job.workdir, env_key=self.job.rank_env)
            newest = fault_lib.newest_intact(self.job.checkpoints, self.damaged)
            said = self._read(run.lines)
            before = self.attempts[-1].checkpoints if self.attempts else {}
            if said.preempted is None and newest and newest[0] not in before and _preempted_together(newest[0]):
                # Ranks whose launcher went away (ssh sessions ended: the lab's hosts) stop as preempted, but
                # their line went where their output went after it (the workdir's logs); the checkpoint says it.
                said.preempted = newest[1]
            attempt = Attempt(index, run.started, self.clock(), None if hang else status, said,
                              hang=hang, expected_next=newest[1] if newest else None, left_behind=leftovers,
                              checkpoints=fault_lib.checkpoints(self.job.checkpoints))
            self.attempts.append(attempt)
            self.say(f"[soak] {attempt.end:7.1f}s attempt {index} ended: status {attempt.status}"
                     + (f"; {attempt.said.errors[0]}" if attempt.said.errors else "")
                     + (f"; left behind: {leftovers}" if leftovers else ""))
            if status == 0 and not hang:
                return True
        return False

    def _watch(self, run: Run, index: int, freezes: List[fault_lib.Freeze], previous_at: float,
               previous_attempt: int):
        """Watches attempt ``index`` until it exits or hangs, injecting the faults that fall due; (hang?, the last
        fault's time and attempt, the ballast written or None)."""
        hang, seen, last_progress, ballast = False, (0, -1.0), run.started, None
        awaiting: Optional[Fault] = None  # an elastic job's fault whose full world has not formed again yet
        while run.running():
            now = self.clock()
            progress = (len(run.lines), self._metrics_mtime())
            if self.job.lines_late and progress[1] != seen[1]:
                self._note_epoch_end(progress[1])
            if progress != seen:
                seen, last_progress = progress, now
            elif now - last_progress > self.deadline_s:
                hang = True
                self.say(f"[soak] {now:7.1f}s attempt {index}: no progress and no exit in {self.deadline_s:g}s:"
                         " a hang; killing it")
                run.kill()
                break
            if awaiting is not None:
                awaiting, back = self._rejoined(awaiting, run, now)
                previous_at = max(previous_at, back or 0.0)
            if len(self.faults) < len(self.plan) and awaiting is None:
                planned = self.plan[len(self.faults)]
                due = due_at(planned, previous_at, previous_attempt, index, run.started, self.interval)
                early = now < due and self._near_end(progress[1])
                if now >= due or early:
                    fault, freeze, filled = self._inject(planned, run, index)
                    if early:
                        fault.detail += (f" (early, {due - fault.at:.1f}s before due: epoch {self._done[1]} of"
                                         f" {self.epochs} logged)")
                    if not fault.injected and planned.kind in ATTEMPT_KINDS and not run.running():
                        # due as the attempt went down: its ranks were gone; the next attempt's start-up gets it
                        self.say(f"[soak] {fault.at:7.1f}s fault {fault.index} {fault.kind}: the attempt ended"
                                 f" before it was hit ({fault.detail}); it goes to the next attempt")
                        continue
                    self.faults.append(fault)
                    freezes += [freeze] if freeze else []
                    ballast = filled or ballast
                    previous_at, previous_attempt = fault.at, index
                    self.say(f"[soak] {fault.at:7.1f}s fault {fault.index} {fault.kind} ({fault.phase}):"
                             f" {fault.detail}")
                    if self.promise is not None and fault.injected and elastic_lib.survived_in_place(
                            fault.kind, self._read(run.lines), fault.at, self.promise):
                        awaiting = fault
            time.sleep(self.tick_s)
        last = self._metrics_mtime()
        if self.job.lines_late and last != seen[1]:  # the last epoch, written as the run ended
            self._note_epoch_end(last)
        return hang, previous_at, previous_attempt, ballast

    def _read(self, lines) -> output.Said:
        return output.read(list(lines), elastic=self.promise is not None)

    def _rejoined(self, fault: Fault, run: Run, now: float):
        """(``fault`` while its full world has not formed again, else None; when it formed, or None)."""
        after = [w for w in self._read(run.lines).worlds if w.at > fault.at]
        shrunk = next((w for w in after if w.size < self.promise.full_size), None)
        rejoined = next((w for w in after if shrunk and w.at > shrunk.at and w.size >= self.promise.full_size), None)
        if rejoined is not None:
            self.say(f"[soak] {rejoined.at:7.1f}s {rejoined.size} ranks again after fault {fault.index}")
            return None, rejoined.at
        if now > (fault.back_at or fault.at) + self.promise.rejoin_limit_s:
            self.say(f"[soak] {now:7.1f}s fault {fault.index}: no full world within {self.promise.rejoin_limit_s:g}s"
                     " of the host being back; the next fault comes anyway")
            return None, now
        return fault, None

    def _rank_pids(self, marker: str) -> Dict[int, int]:
        if self.job.hosts_file is None:
            return fault_lib.rank_pids(marker, self.job.rank_env)
        return {rank: pid for rank, (pid, _) in fault_lib.elastic_ranks(marker).items()}

    def _note_epoch_end(self, mtime: float) -> None:
        """Notes the newest record of ``metrics.jsonl``, written at ``mtime`` (:class:`EpochEnd`)."""
        records = read_metrics(os.path.join(self.job.workdir, "metrics.jsonl"))
        if records and mtime > 0:
            last = records[-1]
            self.epoch_ends.append(EpochEnd(round(self.clock() - (time.time() - mtime), 2), int(last["epoch"]),
                                            last.get("train_time_s")))

    def _near_end(self, mtime: float) -> bool:
        """Whether the job has logged an epoch within ``end_margin`` of its last (``mtime``: metrics.jsonl's)."""
        if self.epochs is None or mtime < 0:
            return False
        if mtime != self._done[0]:
            records = read_metrics(os.path.join(self.job.workdir, "metrics.jsonl"))
            self._done = (mtime, int(records[-1]["epoch"]) if records else 0)
        return self._done[1] >= self.epochs - self.end_margin

    def _metrics_mtime(self) -> float:
        try:
            return os.path.getmtime(os.path.join(self.job.workdir, "metrics.jsonl"))
        except FileNotFoundError:
            return -1.0

    def _inject(self, planned: PlannedFault, run: Run, index: int):
        """Injects ``planned`` into ``run``; (the :class:`Fault`, what lasts (a :class:`Freeze` or a :class:`LinkCut`)
        or None, a ballast path or None)."""
        pid = None
        if planned.kind == PREEMPT:  # a scheduler signals a running job: a requeued one is signalled once it runs
            run.wait_started(RANK_WAIT_S)
        if planned.kind in RANK_KINDS:  # at start-up the ranks may not exist yet: they will
            pid = fault_lib.wait_for_rank(self.job.workdir, planned.rank, RANK_WAIT_S, run.running, self._rank_pids)
        phase = TRAINING if self._read(run.lines).resumed is not None else STARTUP
        if self.job.lines_late:  # the metrics say whether this attempt trained: an epoch ended since it started
            phase = TRAINING if self._metrics_mtime() > time.time() - (self.clock() - run.started) else STARTUP
        fault = Fault(planned.index, planned.kind, self.clock(), index, phase, freeze_s=planned.freeze_s,
                      freeze_end=planned.freeze_end)
        records = read_metrics(os.path.join(self.job.workdir, "metrics.jsonl"))
        if records:
            fault.epoch_logged = int(records[-1]["epoch"])
            fault.step_time_s = batch_seconds(records[-1], self._read(list(run.lines)).steps)
            fault.logged_at = fault.at - (time.time() - self._metrics_mtime())
        newest = fault_lib.newest_intact(self.job.checkpoints, self.damaged)
        fault.newest_checkpoint = newest[1] if newest else None
        freeze, ballast = None, None
        if planned.kind == PREEMPT:
            fault.injected = run.preempt()
            fault.detail = run.preempt_says + ("" if fault.injected else " (not sent: the run had ended)")
        elif planned.kind == FULL_DISK and self.job.disk is None:
            fault.detail, fault.injected = "no disk of its own to fill", False
        elif planned.kind == FULL_DISK:
            size = fault_lib.folder_bytes(newest[0]) if newest else DEFAULT_CHECKPOINT_BYTES
            ballast, written = fault_lib.fill_disk(self.job.disk, size)
            fault.detail = f"disk filled ({written / 1e6:.1f} MB ballast, {size // 2 / 1e6:.2f} MB left)"
        elif planned.kind == DAMAGE and newest is not None:
            damaged = fault_lib.damage(newest[0])
            if damaged:
                self.damaged[newest[0]] = damaged
            fault.detail = f"{os.path.basename(newest[0])} truncated"
            if phase == TRAINING:  # a crash that tore it: the rerun must meet it (at start-up the restore does)
                fault.detail += "; " + self._signal_rank(run, planned.rank, signal.SIGKILL)
        elif planned.kind == DAMAGE:
            fault.detail = "no checkpoint yet; " + self._signal_rank(run, planned.rank, signal.SIGKILL)
            fault.injected = "not found" not in fault.detail
        elif planned.kind == KILL_EXECUTOR:
            executor = fault_lib.executor_of(pid) if pid is not None else None
            fault.injected = executor is not None and fault_lib.signal_rank(executor, signal.SIGKILL)
            fault.detail = (f"SIGKILL to the Spark executor (pid {executor}) of rank {planned.rank}" if fault.injected
                            else f"no Spark executor found for rank {planned.rank}")
        elif planned.kind == KILL_RANK:
            fault.injected = pid is not None and fault_lib.signal_rank(pid, signal.SIGKILL)
            fault.detail = (f"SIGKILL to rank {planned.rank} (pid {pid})" if fault.injected
                            else f"rank {planned.rank} not found")
            if self.promise is not None:  # its host is blacklisted until the cool-down ends
                fault.back_at = fault.at + self.promise.cooldown_s
        elif planned.kind == HOST_LEAVE:
            freeze = self._host_leave(planned, run, fault)
        elif planned.kind == NODE_FAIL and self.job.slurm is None:
            fault.detail, fault.injected = "not a Slurm job: no node to fail", False
        elif planned.kind == NODE_FAIL:
            node = self.job.slurm.node_fail(planned.rank, planned.leave_s)
            fault.injected = node.start()
            if fault.injected:  # it outlasts the attempt it ends: the requeued job waits for the node
                self.lasting.append(node)
                fault.back_at = fault.at + planned.leave_s
            fault.detail = (f"node {node.node} (rank {planned.rank}'s) DOWN, drained for {planned.leave_s:g}s"
                            + ("" if fault.injected else ": refused"))
        elif planned.kind == FREEZE:
            freeze = fault_lib.Freeze(pid, planned.freeze_s, planned.freeze_end) if pid else None
            if freeze is not None and freeze.start():
                fault.detail = (f"rank {planned.rank} (pid {pid}) stopped for {planned.freeze_s:g}s,"
                                f" then {planned.freeze_end}")
            else:
                freeze, fault.detail, fault.injected = None, f"rank {planned.rank} not found", False
        elif planned.kind == LINK_CUT:
            device = self.job.links.get(planned.rank)
            freeze = fault_lib.LinkCut(device, planned.cut_s) if device else None
            if freeze is not None and freeze.start():
                fault.detail = f"the link of rank {planned.rank}'s host ({device}) down for {planned.cut_s:g}s"
            else:
                freeze, fault.injected = None, False
                fault.detail = f"no link to cut for rank {planned.rank} (not in the lab)"
        return fault, freeze, ballast

    def _host_leave(self, planned: PlannedFault, run: Run, fault: Fault) -> Optional[fault_lib.HostLeave]:
        """Takes rank ``planned.rank``'s host out of the hosts file (an elastic job's); what writes it back."""
        if self.job.hosts_file is None:
            fault.detail, fault.injected = "not an elastic job: no hosts file", False
            return None
        found = None
        deadline = time.monotonic() + RANK_WAIT_S
        while found is None and time.monotonic() < deadline and run.running():
            found = fault_lib.elastic_ranks(self.job.workdir).get(planned.rank)
            time.sleep(0.0 if found else 0.1)
        leave = fault_lib.HostLeave(self.job.hosts_file, found[1], planned.leave_s) if found else None
        if leave is None or not leave.start():
            fault.detail, fault.injected = f"no rank {planned.rank} on a host of the hosts file", False
            return None
        fault.at = self.clock()
        fault.back_at = fault.at + planned.leave_s
        fault.detail = (f"host {found[1]} (rank {planned.rank}, pid {found[0]}) out of the hosts file"
                        f" for {planned.leave_s:g}s")
        return leave

    def _signal_rank(self, run: Run, rank: int, signum: int) -> str:
        pid = fault_lib.wait_for_rank(self.job.workdir, rank, RANK_WAIT_S, run.running, self._rank_pids)
        if pid is None or not fault_lib.signal_rank(pid, signum):
            return f"rank {rank} not found"
        return f"{signal.Signals(signum).name} to rank {rank} (pid {pid})"
