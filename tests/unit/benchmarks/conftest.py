"""The benchmarks' unit tests' shared pieces."""
import os
import shutil
import sys

import pytest

FAKE_JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "soak_fake_job.py")


@pytest.fixture
def fake_soak_job(tmp_path):
    """Makes the soak loop's :class:`~benchmarks.soak.loop.Job` of ``soak_fake_job.py`` training ``epochs`` epochs
    (0.05 s each) into ``tmp_path/work``; further keyword arguments go to ``Job``."""
    from benchmarks.soak.loop import Job

    def make(epochs: int, **job_args) -> Job:
        workdir = tmp_path / "work"
        python_sleep = tmp_path / "work-ranks" / "python"  # the ranks: sleep(1), named as the soak looks for them
        python_sleep.parent.mkdir()  # and with the workdir in their command line, as the soak looks for leftovers
        python_sleep.symlink_to(shutil.which("sleep"))
        return Job([sys.executable, FAKE_JOB, str(workdir), str(epochs), str(python_sleep)], dict(os.environ),
                   str(tmp_path), str(workdir), **job_args)

    return make
