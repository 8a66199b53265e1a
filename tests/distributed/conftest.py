"""Runs real Horovod ranks: `horovodrun -np N -H localhost:N --gloo` in a subprocess with a timeout.

A job that outlives its timeout is killed with its whole process tree and the test
fails with the tail of its output: a hang fails the test, not CI's clock.
"""
import dataclasses
import json
import os
import subprocess
import sys

import psutil
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts")
HOROVODRUN = os.path.join(os.path.dirname(sys.executable), "horovodrun")


@dataclasses.dataclass
class Job:
    returncode: int
    output: str

    def lines_of(self, rank: int):
        prefix = f"[{rank}]<stdout>:"
        return [line[len(prefix):] for line in self.output.splitlines() if line.startswith(prefix)]


def _kill_tree(pid: int) -> None:
    try:
        parent = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    procs = parent.children(recursive=True) + [parent]
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=10)


def horovodrun(args, np=2, timeout=300, check=True) -> Job:
    """Runs ``python <args>`` on ``np`` local ranks with Gloo; fails the test on timeout (or error if ``check``)."""
    cmd = [HOROVODRUN, "-np", str(np), "-H", f"localhost:{np}", "--gloo", sys.executable] + list(args)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_tree(proc.pid)
        out, _ = proc.communicate()
        pytest.fail(f"horovodrun hung for {timeout}s and was killed: {' '.join(args)}\n" + out[-4000:])
    job = Job(proc.returncode, out)
    if check and job.returncode != 0:
        pytest.fail(f"horovodrun exited {job.returncode}: {' '.join(args)}\n" + out[-6000:])
    return job


def rank_results(job: Job) -> dict:
    """The ``RESULT <json>`` lines a test script printed, by the rank each names."""
    out = {}
    for line in job.output.splitlines():
        if "RESULT " in line:
            res = json.loads(line.split("RESULT ", 1)[1])
            out[res["rank"]] = res
    return out


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
