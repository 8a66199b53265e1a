"""One user of the lab at a time on the machine: its namespaces, bridge, links and daemons exist once.

The lab's hosts (``lab/hosts.py``) have fixed names and addresses, and Slurm's and Spark's test clusters are built on
them, so two test modules that bring the lab up at the same time break each other: for instance both stacks' suites,
which ``make test`` runs side by side (``tools/test_stacks.sh``). A module marked ``lab`` holds an exclusive
``flock`` on :data:`PATH` from its first test to its last; another waits for it.

Waiting is time lost on that suite's lane, so the suites also keep out of each other's way: one that starts with
its unit tests runs its lab modules first, one that starts with its distributed tests runs them last
(:func:`place_lab_modules`, asked for by the Makefile's ``--lab-modules``).
"""
import contextlib
import fcntl
import os
import tempfile
import time
from typing import Iterator, List, Sequence, TypeVar

PATH = os.path.join(tempfile.gettempdir(), "hvdkeras-lab.lock")
# A lab module takes 3 minutes at most here (the Spark cluster's); waiting for one much longer means a stuck holder.
WAIT_S = 1200.0


@contextlib.contextmanager
def held(path: str = PATH, wait_s: float = WAIT_S) -> Iterator[float]:
    """Holds the lab's lock for the block; yields the seconds spent waiting for it.

    Raises:
        TimeoutError: another process held it for ``wait_s`` seconds (named by its PID, written in the file).
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        tic = time.monotonic()
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() - tic > wait_s:
                    holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
                    raise TimeoutError(f"the lab's lock {path} was held for {wait_s:.0f}s by pid {holder}; is a"
                                       " stuck test or lab still running? (python -m lab.hosts down)") from None
                time.sleep(0.5)
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield time.monotonic() - tic
    finally:
        os.close(fd)  # releases the lock


WHERE = ("first", "last", "in-place")
Item = TypeVar("Item")


def place_lab_modules(items: Sequence[Item], is_lab, where: str) -> List[Item]:
    """``items`` (pytest's collected tests, in order) with the lab modules' tests moved ``where``.

    Args:
        items: the collected tests.
        is_lab: tells a lab module's test (marked ``lab``) from another.
        where: ``first``, ``last`` or ``in-place``; each group keeps its own order, so a module's tests stay together.

    Returns:
        The reordered list.
    """
    if where not in WHERE:
        raise ValueError(f"where must be one of {', '.join(WHERE)}; received: {where!r}")
    if where == "in-place":
        return list(items)
    lab = [item for item in items if is_lab(item)]
    rest = [item for item in items if not is_lab(item)]
    return lab + rest if where == "first" else rest + lab
