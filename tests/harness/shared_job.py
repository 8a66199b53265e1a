"""One job of several scripts (``tests/distributed/scripts/run_scripts.py``), each script's output read apart.

A job start costs about 8-10 s here (horovodrun, TensorFlow's import in each rank); scripts that
need no launch of their own (examples, check scripts) share one: :func:`run_scripts` runs them one
after the other in the same two processes, and :class:`ScriptsJob` gives each test its own
script's lines, or a :class:`~tests.harness.ranks.Job` of them for :func:`~tests.harness.ranks.results`.
"""
import json
import os
import re
import sys

import pytest

from tests.harness.ranks import SCRIPTS, Job, horovodrun, launch

RUN_SCRIPTS = os.path.join(SCRIPTS, "run_scripts.py")
MARKER = re.compile(r"SCRIPT (\d+) (BEGIN|END) (\S+)$")


class ScriptsJob:
    """The job of :func:`run_scripts`: each script's lines by rank, by the name it was given."""

    def __init__(self, job: Job, names):
        self.job, self.names = job, list(names)
        self.by_rank = {}
        for rank in (0, 1):
            found, current = {}, None
            for line in job.lines_of(rank):
                marker = MARKER.search(line)
                if marker:
                    index, which = int(marker.group(1)), marker.group(2)
                    current = index if which == "BEGIN" else None
                    found.setdefault(index, {"lines": [], "ended": False})["ended"] |= which == "END"
                elif current is not None:
                    found[current]["lines"].append(line)
            self.by_rank[rank] = found

    def lines(self, name, rank=0):
        """What ``rank`` printed while script ``name`` ran; fails the test unless it ran to its end on both ranks,
        and the job ended well when every script did."""
        index = self.names.index(name)
        every_one = all(self.by_rank[r].get(i, {}).get("ended") for r in (0, 1) for i in range(len(self.names)))
        if (not all(self.by_rank[r].get(index, {}).get("ended") for r in (0, 1))
                or (every_one and self.job.returncode != 0)):
            pytest.fail(f"{name} did not run to its end on both ranks, or the job failed after the scripts"
                        f" (status {self.job.returncode}):\n" + self.job.output[-4000:])
        return self.by_rank[rank][index]["lines"]

    def text(self, name, rank=0):
        return "\n".join(self.lines(name, rank))

    def job_of(self, name, partial=False) -> Job:
        """Script ``name``'s stdout lines of both ranks as a job of their own (tagged ``[r]<stdout>:``), with the
        whole job's status. ``partial``: whatever it printed, even if it did not run to its end (for a script whose
        parts the tests check one by one), instead of failing the test."""
        index = self.names.index(name)
        if partial:
            lines = [f"[{rank}]<stdout>:{line}" for rank in (0, 1)
                     for line in self.by_rank[rank].get(index, {}).get("lines", [])]
        else:
            lines = [f"[{rank}]<stdout>:{line}" for rank in (0, 1) for line in self.lines(name, rank)]
        return Job(self.job.returncode, "\n".join(lines))


def run_scripts(jobs, launcher=None, env=None, timeout=600) -> ScriptsJob:
    """Runs ``jobs`` (``{name: [script, arg, ...]}``) one after the other in one job of two ranks: under
    ``horovodrun -np 2 --gloo``, or ``launcher`` (a launcher command line, e.g. an elastic one) with ``env``."""
    args = [RUN_SCRIPTS, json.dumps(list(jobs.values()))]
    if launcher is None:
        job = horovodrun(args, timeout=timeout, check=False)
    else:
        job = launch(launcher + [sys.executable, *args], env=env, timeout=timeout, check=False)
    return ScriptsJob(job, jobs)
