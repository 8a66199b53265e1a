"""benchmarks.contention: the fair-share arithmetic and spinners that never outlive their block."""
import os

import pytest

from benchmarks import contention


def test_fair_share_of_two_single_threaded_ranks_on_two_cores():
    assert [contention.fair_share(2, k, cores=2) for k in (0, 1, 2, 4, 6)] == pytest.approx(
        [1.0, 2 / 3, 1 / 2, 1 / 3, 1 / 4])
    assert contention.fair_share(2, 2, cores=8) == 1.0  # enough cores: nobody waits


def test_hogs_are_n_or_n_over_sessions_and_bad_ones_echo_the_input():
    assert contention.parse_hogs("4") == (4, 4)
    assert contention.parse_hogs("4/1") == (4, 1)
    assert contention.parse_hogs("0") == (0, 0)
    with pytest.raises(ValueError, match="Received: '2/3'"):
        contention.parse_hogs("2/3")


def _spinners():
    """``{pid: session id}`` of this process's descendants that run in a session other than its own."""
    import psutil

    mine, out = os.getsid(0), {}
    for p in psutil.Process().children(recursive=True):
        try:
            sid = os.getsid(p.pid)
        except ProcessLookupError:
            continue
        if sid != mine:
            out[p.pid] = sid
    return out


def test_spinners_fill_their_sessions_and_none_outlives_the_block():
    import time

    import psutil

    # Sessions of this process's that were there before: Open MPI's orted, which an hvd.init() in an earlier test of
    # this process starts in a session of its own (keras2's Horovod build: the MPI singleton).
    before = set(_spinners())

    def look():
        # The leaders fork their spinners in their own time (slowly on a loaded machine): wait for all five.
        deadline = time.monotonic() + 30
        seen = {}
        while time.monotonic() < deadline:
            seen = {pid: sid for pid, sid in _spinners().items() if pid not in before}
            if len(seen) >= 5:
                break
            time.sleep(0.05)
        return seen

    seen = contention.with_spinners(5, look, sessions=2)
    per_session = {}
    for sid in seen.values():
        per_session[sid] = per_session.get(sid, 0) + 1
    assert sorted(per_session.values()) == [2, 3]
    deadline = time.monotonic() + 30  # killed: each is gone, or a zombie, once the kernel has delivered SIGKILL

    def alive():
        found = []
        for pid in seen:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    found.append(pid)
            except psutil.NoSuchProcess:
                pass
        return found

    while alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert alive() == []
