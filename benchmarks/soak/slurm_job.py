"""The soaked job as one Slurm batch job on the lab's two-node cluster (``--slurm``, :mod:`lab.slurm`).

The restart loop is Slurm's own: the generated script requeues itself on the time limit's signal (SIGUSR1 to the
batch shell, what ``#SBATCH --signal=B:USR1@<lead>`` sends), Slurm requeues it when one of its nodes fails
(``#SBATCH --requeue``), and a run that fails (a rank killed) is requeued by the soak with ``scontrol requeue``,
as a user's retry would. Each run of the one job is an attempt (:class:`SlurmRun`, which has the interface of
:class:`benchmarks.soak.attempt.Running`), counted from the moment the job is pending again, so that a fault timed
from a restart lands while the job is requeued (pending) or while it starts again. Slurm holds a requeued job for
120 s (``Reason=BeginTime``); the soak, as an operator, lifts the hold ``hold_s`` after the requeue (2 s or more:
``tests/distributed/test_slurm.py`` says why).

:class:`NodeFail` is the fault only a cluster has: a node set DOWN (Slurm ends the job on it "due to node failure"
and requeues it) and kept out (DRAIN) for a while, then RESUMEd; while it is out a requeued job waits for it.
"""
from __future__ import annotations

import os
import subprocess
import threading
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from hvdkeras.common import processes

ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY", "BOOT_FAIL",
         "DEADLINE")
REQUEUED_STATUS = 75  # an attempt that ended in a requeue: the trainer's own status for "preempted, rerun me"
SETTLE_S = 3.0  # an ended state must hold this long before the soak requeues the job itself (Slurm may first)
POLL_S = 0.5  # how often the job's state is asked for at most (scontrol)
SCRIPT_WAIT_S = 20.0  # how long a signal for the batch shell waits for the shell to run (then it is sent anyway)


def parse_job(text: str) -> Dict[str, str]:
    """``scontrol show job -o``'s one line as ``{key: value}`` (``JobState``, ``Restarts``, ``Reason``, ...)."""
    return dict(kv.split("=", 1) for kv in text.split() if "=" in kv)


def run_status(job: Dict[str, str], restarts: int) -> Optional[int]:
    """The exit status of run ``restarts`` of the job now in state ``job``, or None while that run goes on:
    :data:`REQUEUED_STATUS` once it was requeued (its ``Restarts`` passed ``restarts``), 0 when it completed, else
    the batch script's exit code (at least 1)."""
    if int(job.get("Restarts", "0")) > restarts:
        return REQUEUED_STATUS
    state = job.get("JobState", "")
    if state not in ENDED:
        return None
    if state == "COMPLETED":
        return 0
    code = job.get("ExitCode", "1:0").split(":")
    return int(code[0]) or (128 + int(code[1]) if len(code) > 1 and code[1].isdigit() and int(code[1]) else 1)


class SlurmJob:
    """The batch ``script`` submitted once (from ``cwd``, output to ``output``) and run again after every run that
    does not complete; :meth:`run` is the restart loop's attempt factory."""

    def __init__(self, script: str, output: str, env: Dict[str, str], cwd: str, nodes: Sequence[str],
                 hold_s: float = 3.0, run: Callable = subprocess.run, settle_s: float = SETTLE_S,
                 tail_s: float = 1.0):
        self.script, self.output, self.env, self.cwd = script, output, env, cwd
        self.nodes = list(nodes)  # the job's nodes in rank order (the script's hosts follow SLURM_JOB_NODELIST)
        self.hold_s, self._run = max(hold_s, 2.0), run
        self.settle_s = settle_s  # how long an ended state must hold before the soak requeues (settled)
        self.tail_s = tail_s  # how long a run's output is read after it ended (the batch script's last lines)
        self.job_id: Optional[str] = None

    def scontrol(self, *args: str, check: bool = False) -> subprocess.CompletedProcess:
        """Runs a Slurm client (``scontrol`` unless ``args[0]`` names another) with the cluster's environment."""
        argv = list(args) if args[0] in ("sbatch", "scancel") else ["scontrol", *args]
        return self._run(argv, env=self.env, cwd=self.cwd, capture_output=True, text=True, timeout=30, check=check)

    def state(self) -> Dict[str, str]:
        """The job's state now (``{}`` before it was submitted or when Slurm did not answer)."""
        if self.job_id is None:
            return {}
        res = self.scontrol("show", "job", "-o", self.job_id)
        return parse_job(res.stdout) if res.returncode == 0 else {}

    def run(self, log_path: str, clock: Callable[[], float]) -> "SlurmRun":
        """The job's next run as an attempt: the first submits it; a later one requeues it if its last run failed
        (Slurm requeued it already if the script or a node failure asked) and lifts the requeue's hold."""
        if self.job_id is None:
            res = self.scontrol("sbatch", "--parsable", f"--output={self.output}", self.script)
            if res.returncode != 0:
                raise RuntimeError(f"sbatch {self.script} failed: {res.stderr.strip()}")
            self.job_id = res.stdout.strip().split(";")[0]
            return SlurmRun(self, log_path, clock, restarts=0, requeued_at=None)
        state = self.settled()
        restarts = int(state.get("Restarts", "0"))
        if state.get("JobState") in ENDED:  # a failed or cancelled run: the retry a user would do
            self.scontrol("requeue", self.job_id, check=True)
            restarts += 1
        return SlurmRun(self, log_path, clock, restarts=restarts, requeued_at=time.monotonic())

    def settled(self, timeout: float = 30.0) -> Dict[str, str]:
        """The job's state once it is pending again or has held an ended state for :data:`SETTLE_S` (a run that
        a node failure ended shows ``NODE_FAIL`` before Slurm requeues it)."""
        deadline, since, last = time.monotonic() + timeout, None, {}
        while time.monotonic() < deadline:
            last = self.state()
            if last.get("JobState") not in ENDED:
                return last
            since = since if since is not None else time.monotonic()
            if time.monotonic() - since >= self.settle_s:
                return last
            time.sleep(0.2)
        return last

    def cancel(self) -> None:
        """Ends the job for good (the soak is leaving)."""
        if self.job_id is not None:
            self.scontrol("scancel", self.job_id)

    def node_fail(self, rank: int, seconds: float) -> "NodeFail":
        """The fault on the node of ``rank``, not yet started."""
        return NodeFail(self, self.nodes[rank % len(self.nodes)], seconds)


class SlurmRun:
    """Run ``restarts`` of a :class:`SlurmJob`, with :class:`benchmarks.soak.attempt.Running`'s interface: its lines
    (the job's output file from where it was when the attempt began, each with the soak's clock), whether it goes
    on, its status; ``preempt`` is the time limit's signal, ``kill`` a ``scancel``."""

    def __init__(self, job: SlurmJob, log_path: str, clock: Callable[[], float], restarts: int,
                 requeued_at: Optional[float]):
        self.job, self.clock, self.restarts = job, clock, restarts
        self.started = clock()
        self.lines: List[Tuple[float, str]] = []
        self._offset = os.path.getsize(job.output) if os.path.exists(job.output) else 0
        self._log = open(log_path, "w")
        self._done = threading.Event()
        self._state: Tuple[float, Dict[str, str]] = (0.0, {})
        self._tail = threading.Thread(target=self._follow, daemon=True)
        self._tail.start()
        self._release = None
        if requeued_at is not None:
            self._release = threading.Thread(target=self._lift_hold, args=(requeued_at,), daemon=True)
            self._release.start()

    @property
    def name(self) -> str:
        """What the soak's lines call this attempt."""
        return f"Slurm job {self.job.job_id}, run {self.restarts}"

    def _follow(self) -> None:
        pending = ""
        while True:
            last = self._done.is_set()
            try:
                with open(self.job.output, errors="replace") as f:
                    f.seek(self._offset)
                    text = f.read()
                    self._offset = f.tell()
            except FileNotFoundError:
                text = ""
            pending += text
            *whole, pending = pending.split("\n")
            for line in whole:
                at = self.clock()
                self.lines.append((at, line))
                self._log.write(f"{at:8.2f} {line}\n")
            self._log.flush()
            if last:
                break
            self._done.wait(0.2)
        if pending:
            self.lines.append((self.clock(), pending))
        self._log.close()

    def _lift_hold(self, requeued_at: float) -> None:
        """Lifts Slurm's hold on the requeued job ``hold_s`` after the requeue (and no earlier than 2 s after)."""
        self._done.wait(max(0.0, requeued_at + self.job.hold_s - time.monotonic()))
        while not self._done.is_set():
            state = self.state()
            if state.get("JobState") != "PENDING" or state.get("Reason") != "BeginTime":
                return
            if self.job.scontrol("update", f"JobId={self.job.job_id}", "StartTime=now+1").returncode == 0:
                return
            self._done.wait(1.0)

    def state(self) -> Dict[str, str]:
        """The job's state, asked for at most every :data:`POLL_S`."""
        at, state = self._state
        if time.monotonic() - at >= POLL_S:
            state = self.job.state()
            self._state = (time.monotonic(), state)
        return state

    def running(self) -> bool:
        """Whether this run goes on (pending, starting, running)."""
        state = self.state()
        return not state or run_status(state, self.restarts) is None

    def wait_started(self, timeout: float) -> bool:
        """Waits at most ``timeout`` s for the batch script to run (not pending); whether it does."""
        deadline = time.monotonic() + timeout
        while self.state().get("JobState") != "RUNNING" and self.running() and time.monotonic() < deadline:
            time.sleep(0.1)
        return self.state().get("JobState") == "RUNNING" and self.running()

    preempt_says = "the time limit's signal (scancel --batch --signal=USR1)"

    def _script_started(self, timeout: float) -> bool:
        """Waits at most ``timeout`` s for the batch script's shell to run (slurmd's ``job%05u/slurm_script``):
        Slurm says RUNNING a few seconds before it, while the node prepares the job, and a signal for the batch
        shell sent then is lost (seen once beside a busy suite: the job went on); whether it runs."""

        marker = f"job{int(self.job.job_id):05d}/slurm_script"
        deadline = time.monotonic() + timeout
        while True:
            for proc in processes.scan(["cmdline"]):
                if any(marker in part for part in (proc.info["cmdline"] or [])):
                    time.sleep(0.3)  # its first lines are the traps
                    return True
            if time.monotonic() >= deadline or not self.running():
                return False
            time.sleep(0.1)

    def preempt(self) -> bool:
        """The time limit's signal, SIGUSR1 to the batch shell (``scancel --batch --signal=USR1``), if the run has
        started (a scheduler signals running jobs only), once the shell runs; whether it was sent."""
        if not self.wait_started(0.0):
            return False
        self._script_started(SCRIPT_WAIT_S)
        return self.job.scontrol("scancel", "--batch", "--signal=USR1", str(self.job.job_id)).returncode == 0

    def kill(self) -> None:
        """Cancels the job (a hang); the next attempt requeues it."""
        self.job.cancel()

    def finish(self) -> Optional[int]:
        """Waits for the run to end and for its output; its status (:func:`run_status`)."""
        while self.running():
            time.sleep(POLL_S)
        self._state = (0.0, {})
        state = self.job.settled()
        time.sleep(self.job.tail_s)  # the last lines of the batch script
        self._done.set()
        self._tail.join(timeout=30)
        if self._release is not None:
            self._release.join(timeout=30)
        return run_status(state, self.restarts)


class NodeFail:
    """A node set DOWN (Slurm ends a job running on it and requeues it), kept out as DRAIN for ``seconds`` so that
    it does not come back by itself (the cluster's ``ReturnToService=2``), then RESUMEd, on a thread."""

    REASON = "hvdkeras-soak"

    def __init__(self, job: SlurmJob, node: str, seconds: float):
        self.job, self.node, self.seconds = job, node, seconds
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._wait, daemon=True)

    def _set(self, state: str) -> bool:
        return self.job.scontrol("update", f"NodeName={self.node}", f"State={state}",
                                 *([f"Reason={self.REASON}"] if state != "RESUME" else [])).returncode == 0

    def start(self) -> bool:
        """Takes the node down and starts the clock; False if Slurm refused."""
        if not (self._set("DOWN") and self._set("DRAIN")):
            self._set("RESUME")
            return False
        self._thread.start()
        return True

    def _wait(self) -> None:
        self._done.wait(self.seconds)
        self._set("RESUME")

    def finish(self) -> None:
        """Brings the node back now if it is still out (the soak is leaving) and waits for it."""
        self._done.set()
        if self._thread.is_alive():
            self._thread.join()
