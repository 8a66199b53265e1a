"""The distributed tests' harness: real Horovod ranks (`horovodrun -np N -H localhost:N --gloo`, `--mpi` or
`mpirun`) in a subprocess with a timeout. A plain module: `from tests.harness.ranks import horovodrun`.

A job that outlives its timeout is killed with its whole process tree and the test
fails with the tail of its output: a hang fails the test, not CI's clock.
"""
import contextlib
import dataclasses
import json
import os
import re
import subprocess
import sys
import threading
import time
from typing import Optional

import pytest

from hvdkeras.common.processes import kill_session, kill_tree, scan
from hvdkeras.common.workdir import read_metrics
from hvdkeras.launch import MPIRUN_FLAGS
from tests.harness.command_lines import CommandLines

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = os.path.join(REPO, "tests", "distributed", "scripts")
HOROVODRUN = os.path.join(os.path.dirname(sys.executable), "horovodrun")
# Elastic jobs' host discovery, the installed command (horovodrun runs it through the shell).
DISCOVER_HOSTS = f"{sys.executable} -m hvdkeras.discover_hosts"


@dataclasses.dataclass
class Job:
    returncode: int
    output: str
    command_lines: Optional[CommandLines] = None  # every process's arguments while it ran, when asked for

    def lines_of(self, rank: int):
        """What ``rank`` printed to stdout: horovodrun --gloo tags lines ``[r]<stdout>:``, MPI ``[1,r]<stdout>:``."""
        tag = re.compile(rf"^\[(?:\d+,)?{rank}\]<stdout>:")
        return [line[tag.match(line).end():] for line in self.output.splitlines() if tag.match(line)]


# OpenMPI refuses root without these (the Makefile exports them too; tests may run without make),
# and its shared-memory single-copy path needs ptrace rights containers rarely grant.
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_btl_vader_single_copy_mechanism": "none"}
LAUNCHERS = ("gloo", "mpi", "mpirun")


def mpi_skip_reason():
    """Why MPI launches cannot run here, or None when Horovod has MPI built in and mpirun exists."""
    import shutil

    if shutil.which("mpirun") is None:
        return "OpenMPI is not installed (make install-mpi, then make install rebuilds Horovod with MPI)"
    import horovod.common.util as hvd_util

    if not hvd_util.mpi_built():
        return "this Horovod build has no MPI (OpenMPI was installed after it: run make install to rebuild)"
    return None


def launch_command(np, launcher="gloo"):
    """The command that starts ``np`` local ranks: ``horovodrun --gloo``, ``horovodrun --mpi`` or ``mpirun``."""
    if launcher == "mpirun":
        # The library's flags, plus what the harness needs to tell ranks apart and see output at once.
        return ["mpirun", "-np", str(np), *MPIRUN_FLAGS, "--tag-output", "-x", "PYTHONUNBUFFERED"]
    if launcher in ("gloo", "mpi"):
        return [HOROVODRUN, "-np", str(np), "-H", f"localhost:{np}", f"--{launcher}"]
    raise ValueError(f"launcher must be one of {LAUNCHERS}; received: {launcher!r}")


def train_args(workdir, *sets, config=os.path.join(REPO, "configs", "digits.yaml"), export=False):
    """``python -m hvdkeras.train``'s arguments for ``config`` (the digits job) in ``workdir``, without
    progress bars, with each ``section.key=value`` of ``sets`` as a ``--set``: for :func:`horovodrun`.

    Without ``export``, the job writes no ``export/`` at the end (``trainer.export=false``): the export
    costs about 0.5 s per job here, and its own tests (``tests/unit/runtime/test_export.py``, the default job's
    run in ``test_two_ranks.py``, ``test_own_pieces_two_ranks.py``) write and load it."""
    args = ["-m", "hvdkeras.train", "--config", config, "--workdir", str(workdir), "--set", "trainer.verbose=0"]
    if not export:
        args += ["--set", "trainer.export=false"]
    for s in sets:
        args += ["--set", s]
    return args


def horovodrun(args, np=2, timeout=300, check=True, launcher="gloo", command_lines=False) -> Job:
    """Runs ``python <args>`` on ``np`` local ranks (Gloo unless ``launcher`` says otherwise);
    fails the test on timeout (or error if ``check``)."""
    return launch(launch_command(np, launcher) + [sys.executable] + list(args), env=dict(os.environ, **MPI_ENV),
                  timeout=timeout, check=check, command_lines=command_lines)


def launch(cmd, env=None, timeout=300, check=True, cwd=REPO, command_lines=False) -> Job:
    """Runs a whole launcher command line (``cmd[0]`` is e.g. HOROVODRUN with its own hosts and
    options) from ``cwd`` (REPO) with the same timeout, kill-the-tree and failure rules as ``horovodrun``;
    ``env`` (default os.environ) gets TF_CPP_MIN_LOG_LEVEL=2 and PYTHONUNBUFFERED=1. With ``command_lines``,
    every process's arguments are sampled while it runs (:attr:`Job.command_lines`)."""
    env = dict(os.environ if env is None else env, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    with CommandLines() if command_lines else contextlib.nullcontext() as seen:
        proc = subprocess.Popen(list(cmd), cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_tree(proc.pid)
            out, _ = proc.communicate()
            pytest.fail(f"launcher hung for {timeout}s and was killed: {' '.join(cmd)}\n" + out[-4000:])
    job = Job(proc.returncode, out, seen)
    if check and job.returncode != 0:
        pytest.fail(f"launcher exited {job.returncode}: {' '.join(cmd)}\n" + out[-6000:])
    return job


def start(cmd, env=None) -> subprocess.Popen:
    """Starts a whole launcher command line (e.g. ``launch_command(2) + [sys.executable, ...]``) from REPO
    without waiting, in a session of its own (:func:`finish` kills the whole group on a hang); the
    environment as :func:`launch` builds it. For tests that act on a job while it runs."""
    env = dict(os.environ if env is None else env, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1", **MPI_ENV)
    return subprocess.Popen(list(cmd), cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)


def start_ranks(args, np=2, env=None) -> subprocess.Popen:
    """:func:`start` for ``python <args>`` on ``np`` local Gloo ranks."""
    return start(launch_command(np) + [sys.executable] + list(args), env=env)


def epochs_logged(workdir) -> int:
    """How many epochs ``workdir/metrics.jsonl`` records so far (0 before it exists)."""
    path = os.path.join(str(workdir), "metrics.jsonl")
    return len(read_metrics(path)) if os.path.exists(path) else 0


def _kill(proc: subprocess.Popen) -> None:
    """Kills a job from :func:`start`: its process tree, and its session's group for ranks a dead launcher left."""
    kill_session(proc.pid)


def wait_for_epochs(proc: subprocess.Popen, workdir, n: int, timeout: float = 240) -> None:
    """Waits until a job started by :func:`start` has logged ``n`` epochs; fails the test (and kills
    the job) if it ends first or takes longer than ``timeout`` seconds."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if epochs_logged(workdir) >= n:
            return
        if proc.poll() is not None:
            pytest.fail(f"the job ended before {n} epochs:\n" + proc.communicate()[0][-3000:])
        time.sleep(0.05)
    _kill(proc)
    pytest.fail(f"no {n} epochs within {timeout}s:\n" + proc.communicate()[0][-3000:])


def finish(proc: subprocess.Popen, timeout: float = 90) -> str:
    """The output of a job started by :func:`start` once it ends; fails the test and kills the job
    after ``timeout`` seconds."""
    try:
        return proc.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        _kill(proc)
        pytest.fail(f"the job did not end within {timeout}s:\n" + proc.communicate()[0][-3000:])


class OutputWatch:
    """Reads the output of a job from :func:`start` on a thread, so a test can wait for a line while the job
    runs (an event, not a sleep) and then act on it; :meth:`finish` replaces :func:`finish` for that job."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self._lines = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self._lines.append(line)

    @property
    def text(self) -> str:
        return "".join(self._lines)

    def wait_for(self, needle: str, timeout: float, what: str) -> None:
        """Waits until ``needle`` appears in the output; fails the test (and kills the job) if the job ends
        first or ``timeout`` seconds pass."""
        deadline = time.time() + timeout
        while needle not in self.text:
            if self.proc.poll() is not None:
                self._reader.join(timeout=10)
                if needle in self.text:
                    return
                pytest.fail(f"the job ended (status {self.proc.returncode}) before {what}:\n" + self.text[-3000:])
            if time.time() > deadline:
                _kill(self.proc)
                self._reader.join(timeout=10)
                pytest.fail(f"no {what} within {timeout:g}s:\n" + self.text[-3000:])
            time.sleep(0.1)

    def finish(self, timeout: float = 90) -> str:
        """The whole output once the job ends; fails the test and kills the job after ``timeout`` seconds."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill(self.proc)
            self._reader.join(timeout=10)
            pytest.fail(f"the job did not end within {timeout}s:\n" + self.text[-3000:])
        self._reader.join(timeout=30)
        return self.text


def results(job: Job) -> list:
    """Every ``RESULT <json>`` a test script printed, in output order.

    Each is parsed up to the end of its JSON value, wherever it starts: under
    ``mpirun --tag-output`` two ranks' lines can end up on one line, or a stray tag
    after one.
    """
    decoder = json.JSONDecoder()
    out = []
    for match in re.finditer(r"RESULT (?=\{)", job.output):
        out.append(decoder.raw_decode(job.output, match.end())[0])
    return out


def rank_results(job: Job) -> dict:
    """The ``RESULT <json>`` lines a test script printed, by the rank each names."""
    return {res["rank"]: res for res in results(job)}


def rank_pid(rank: int, marker: str):
    """The PID of the rank process ``rank`` whose command line contains ``marker`` (None if not running)."""
    import psutil

    for proc in scan(["pid", "cmdline"]):
        try:
            if marker in " ".join(proc.info["cmdline"] or []) and proc.environ().get("HOROVOD_RANK") == str(rank):
                return proc.pid
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return None


def read_jsonl(path):
    """The records of a ``metrics.jsonl`` (the library's one reader)."""
    return read_metrics(str(path))
