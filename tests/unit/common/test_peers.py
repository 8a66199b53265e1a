"""hvdkeras.common.peers: beacons, probes and the line naming a lost rank (no Horovod: sockets on this host)."""
import contextlib
import errno
import multiprocessing
import os
import signal
import socket
import threading
import time

import pytest

from hvdkeras.common import peers


def _closed_port() -> int:
    """A port nobody listens on: one a beacon held a moment ago."""
    with peers.Beacon() as beacon:
        return beacon.port


def test_a_beacon_answers_without_its_process_accepting():
    with peers.Beacon() as beacon:
        assert peers.probe("127.0.0.1", beacon.port) == peers.ALIVE
        assert peers.probe("127.0.0.1", beacon.port) == peers.ALIVE  # again: the backlog is never drained


@contextlib.contextmanager
def _beacon_process(target):
    """``target(conn)`` in a spawned process that sends its beacon's port first: (the process, the port, our end of
    the pipe); the process is continued, if stopped, and killed when the block ends."""
    ours, theirs = multiprocessing.Pipe()
    proc = multiprocessing.get_context("spawn").Process(target=target, args=(theirs,))
    proc.start()
    try:
        yield proc, ours.recv(), ours
    finally:
        if proc.is_alive():
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
            proc.join(30)


def _open_a_beacon(conn):
    """In a process of its own: a beacon; sends its port, waits until the test lets this process end."""
    beacon = peers.Beacon()
    conn.send(beacon.port)
    conn.recv()


def _wait_until_stopped(pid, timeout=30.0):
    """Until the kernel has stopped every thread of ``pid`` (SIGSTOP is delivered asynchronously)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        tasks = os.listdir(f"/proc/{pid}/task")
        if all(open(f"/proc/{pid}/task/{t}/stat").read().rsplit(")", 1)[1].split()[0] == "T" for t in tasks):
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} did not stop")


def test_a_stopped_process_is_unresponsive_not_alive_and_answers_again_once_continued():
    # The kernel completes the connection to a stopped process's listening socket (the soak's SIGSTOP past Gloo's
    # timeout looked alive); only the beacon's answer tells a running process from a frozen one.
    with _beacon_process(_open_a_beacon) as (proc, port, _):
        assert peers.probe("127.0.0.1", port, reply_timeout=2) == peers.ALIVE
        os.kill(proc.pid, signal.SIGSTOP)
        _wait_until_stopped(proc.pid)
        assert peers.probe("127.0.0.1", port) == peers.ALIVE  # the connection alone: the wait for an exit
        assert peers.probe("127.0.0.1", port, reply_timeout=0.3) == peers.UNRESPONSIVE
        table = peers.PeerTable.from_gathered([("127.0.0.1", 9), ("127.0.0.1", port)], own_rank=0)
        found = table.lost(timeout=0.3, reply_timeout=0.3)
        assert [(f.peer.rank, f.state) for f in found] == [(1, peers.UNRESPONSIVE)]
        assert peers.lost_line(found) is None
        assert peers.unresponsive_line(found, reply_timeout=0.3) == (
            "rank 1 on host 127.0.0.1 is not responding (the process is there but did not answer within 0.3 s:"
            " stopped, e.g. by SIGSTOP, or hung)")
        os.kill(proc.pid, signal.SIGCONT)
        assert peers.probe("127.0.0.1", port, reply_timeout=2) == peers.ALIVE  # the probes in its backlog answered


def test_a_closed_beacon_reads_as_an_exited_process():
    assert peers.probe("127.0.0.1", _closed_port()) == peers.EXITED


def _hold_a_closed_beacon(conn):
    """In a process of its own: a beacon held until this process ends, then closed; sends its port, waits."""
    beacon = peers.Beacon()
    beacon.hold_until_exit()
    beacon.close()
    conn.send(beacon.port)
    conn.recv()  # until the test lets this process end


def test_a_held_beacon_answers_after_its_close_until_its_process_has_ended():
    with _beacon_process(_hold_a_closed_beacon) as (proc, port, ours):
        assert peers.probe("127.0.0.1", port) == peers.ALIVE  # closed by Python, held for the process
        ours.send("end")
        proc.join(30)
        assert proc.exitcode == 0
        assert peers.probe("127.0.0.1", port) == peers.EXITED


def test_waiting_until_a_rank_is_gone_ends_when_its_beacon_closes_or_at_the_timeout():
    beacon = peers.Beacon()
    threading.Timer(0.3, beacon.close).start()
    tic = time.monotonic()
    assert peers.wait_until_gone("127.0.0.1", beacon.port, timeout=60)
    assert time.monotonic() - tic < 30  # on the close, not at the timeout
    with peers.Beacon() as alive:
        table = peers.PeerTable.from_gathered([("127.0.0.1", alive.port), ("127.0.0.1", 9)], own_rank=1)
        assert not table.wait_until_gone(0, timeout=0.5)  # rank 0 still there: gives up, says so
        assert peers.probe("127.0.0.1", alive.port) == peers.ALIVE  # every probe found room in the backlog


@pytest.mark.parametrize("failure", [socket.timeout("timed out"), OSError(errno.EHOSTUNREACH, "No route to host"),
                                     OSError(errno.ENETUNREACH, "Network is unreachable")])
def test_a_host_that_does_not_answer_is_unreachable(monkeypatch, failure):
    # A silent host cannot be made without root here; the link-down test on two namespace hosts has the real one.
    def connect(address, timeout):
        raise failure

    monkeypatch.setattr(socket, "create_connection", connect)
    assert peers.probe("198.18.213.3", 9, timeout=0.3) == peers.UNREACHABLE


def test_a_name_that_does_not_resolve_is_unreachable():
    assert peers.probe("no-such-host.invalid", 9, timeout=0.3) == peers.UNREACHABLE


def test_the_table_probes_the_other_ranks_only_and_names_the_lost_ones_in_rank_order():
    with peers.Beacon() as alive:
        table = peers.PeerTable.from_gathered(
            [("127.0.0.1", _closed_port()), ("127.0.0.1", alive.port), ("no-such-host.invalid", 9),
             ("127.0.0.1", alive.port)], own_rank=1)
        found = table.lost(timeout=0.3)
    assert [(f.peer.rank, f.state) for f in found] == [(0, peers.EXITED), (2, peers.UNREACHABLE)]
    assert peers.lost_line(found, timeout=0.3) == (
        "lost rank 0 on host 127.0.0.1 (its process has exited; the host answers), rank 2 on host"
        " no-such-host.invalid (unreachable: no answer within 0.3 s; the host or its link is down)")


def test_nothing_lost_is_no_line_and_a_long_list_is_cut():
    assert peers.lost_line([]) is None
    many = [peers.Finding(peers.Peer(r, f"h{r}", 1), peers.EXITED) for r in range(7)]
    line = peers.lost_line(many, limit=2)
    assert line.startswith("lost rank 0 on host h0") and "rank 1 on host h1" in line and line.endswith("and 5 more")


def test_own_host_is_the_launchers_name_for_it_else_the_hostname(monkeypatch):
    monkeypatch.setenv("HOROVOD_HOSTNAME", "198.18.213.2")
    assert peers.own_host() == "198.18.213.2"
    monkeypatch.delenv("HOROVOD_HOSTNAME")
    assert peers.own_host() == socket.gethostname()


def test_a_stop_request_ends_the_wait_for_a_peer_still_there():
    with peers.Beacon() as beacon:
        tic = time.monotonic()
        assert peers.wait_until_gone("127.0.0.1", beacon.port, timeout=30, stop=lambda: time.monotonic() - tic > 0.3)
        assert time.monotonic() - tic < 5


# --------------------------------------------------------------------------- watching: a failed collective in one line


class ShutDownError(Exception):
    """Stands for Horovod's failed op (what distributed.is_collective_failure recognises)."""


def _watching(second, **kwargs):
    """peers.watching on rank 0 of two, rank 1 at ``second`` (host, port), failures of the kind ShutDownError."""
    return peers.watching(0, lambda own: [own, second], lambda exc: isinstance(exc, ShutDownError), **kwargs)


def _closed_port():
    with peers.Beacon() as beacon:
        return beacon.port


def test_a_collective_failure_with_a_peer_gone_becomes_one_line_naming_it():
    from hvdkeras.common.errors import PeerLostError

    with pytest.raises(PeerLostError, match=r"^lost rank 1 on host 127\.0\.0\.1 \(its process has exited; the host "
                                            r"answers\); rerun the same command to resume from the last checkpoint$"):
        with _watching(("127.0.0.1", _closed_port())):
            raise ShutDownError("Horovod has been shut down. This was caused by ...")


def test_a_collective_failure_with_a_peer_frozen_becomes_one_line_naming_it_and_what_to_do(monkeypatch):
    from hvdkeras.common.errors import PeerUnresponsiveError

    # A listening socket nobody answers: what a stopped (SIGSTOP) rank's beacon is to the kernel.
    frozen = socket.socket()
    frozen.bind(("127.0.0.1", 0))
    frozen.listen(8)
    monkeypatch.setattr(peers, "REPLY_TIMEOUT_S", 0.3)
    with frozen, pytest.raises(PeerUnresponsiveError, match=(
            r"^rank 1 on host 127\.0\.0\.1 is not responding \(the process is there but did not answer within"
            r" 0\.3 s: stopped, e\.g\. by SIGSTOP, or hung\); the launcher ends it once this rank has left \(if it is"
            r" still there, end it\); rerun the same command to resume from the last checkpoint \(checkpoint epoch"
            r" 2, batch 3 of epoch 3\)$")) as caught:
        saved = []  # on_failure comes first (rank 0 saving alone), and the line names what it saved
        with _watching(("127.0.0.1", frozen.getsockname()[1]), on_failure=lambda: saved.append("epoch 2, batch 3"),
                       resume_point=lambda: saved[-1] + " of epoch 3",
                       stall_shutdown_seconds=10):  # a frozen rank is named, not taken for a stall
            raise ShutDownError("Timed out waiting 30000ms for recv operation to complete")
    assert isinstance(caught.value.__cause__, ShutDownError)


def test_a_stall_shutdown_with_every_rank_alive_names_the_setting():
    from hvdkeras.common.errors import StallError

    with peers.Beacon() as alive:
        with pytest.raises(StallError, match=r"horovod.stall_shutdown_seconds=10 .*every rank was still alive"):
            with _watching(("127.0.0.1", alive.port), stall_shutdown_seconds=10):
                raise ShutDownError("Horovod has been shut down. This was caused by ...")
        # Without that setting, Horovod's own error stays as it was.
        with pytest.raises(ShutDownError):
            with _watching(("127.0.0.1", alive.port)):
                raise ShutDownError("Horovod has been shut down.")


def test_other_errors_pass_through_without_probing(monkeypatch):
    monkeypatch.setattr(peers.PeerTable, "lost", lambda self, timeout=0: pytest.fail("probed"))
    with pytest.raises(KeyError):
        with _watching(("127.0.0.1", _closed_port())):
            raise KeyError("a bug of our own")


def test_the_checkpoint_to_resume_from_is_named_and_a_preempted_rank_waits_for_rank_0():
    from hvdkeras.common.errors import PeerLostError

    tables = []
    with pytest.raises(PeerLostError, match=r"; rerun the same command to resume from the last checkpoint"
                                            r" \(checkpoint epoch 3\)$"):
        with _watching(("127.0.0.1", _closed_port()), resume_point=lambda: "epoch 3") as table:
            tables.append(table)
            raise ShutDownError("Horovod has been shut down.")
    started = time.monotonic()
    assert tables[0].wait_until_root_gone()  # rank 0 (here the closed port's) is gone: no wait
    assert time.monotonic() - started < 5


# --------------------------------------------------------------------------- the beacon answers only the job


def test_a_beacon_with_a_token_answers_only_a_probe_that_sends_it():
    token = b"0123456789abcdef"
    with peers.Beacon("127.0.0.1", token) as beacon:
        assert peers.probe("127.0.0.1", beacon.port, reply_timeout=2, token=token) == peers.ALIVE
        assert peers.probe("127.0.0.1", beacon.port, reply_timeout=0.5, token=b"f" * 16) == peers.EXITED  # closed
        assert peers.probe("127.0.0.1", beacon.port, reply_timeout=0.5) == peers.UNRESPONSIVE  # nothing sent
        with socket.create_connection(("127.0.0.1", beacon.port)) as outsider:  # an HTTP request, say
            outsider.sendall(b"GET / HTTP/1.0\r\n\r\n")
            outsider.settimeout(3)
            try:
                answer = outsider.recv(16)
            except ConnectionResetError:  # closed with the request's rest unread
                answer = b""
            assert answer == b""  # closed unanswered
        assert peers.probe("127.0.0.1", beacon.port, reply_timeout=2, token=token) == peers.ALIVE  # still there


def test_a_beacon_listens_on_the_jobs_interface_only(monkeypatch):
    monkeypatch.setenv("HOROVOD_GLOO_IFACE", "lo")
    assert peers.bind_address() == "127.0.0.1"
    with peers.Beacon(peers.bind_address(), b"t" * 16) as beacon:
        assert peers.probe("127.0.0.1", beacon.port, reply_timeout=2, token=b"t" * 16) == peers.ALIVE
        assert peers.probe("127.0.0.2", beacon.port, timeout=1) == peers.EXITED  # another address: nobody listens
    monkeypatch.setenv("HOROVOD_GLOO_IFACE", "no-such-iface")
    monkeypatch.setenv("HOROVOD_HOSTNAME", "localhost")
    assert peers.bind_address() == "127.0.0.1"
    monkeypatch.setenv("HOROVOD_HOSTNAME", "no-such-host.invalid")
    assert peers.bind_address() == "0.0.0.0"


def test_the_table_probes_each_peer_with_its_token_at_its_address():
    with peers.Beacon("127.0.0.1", b"a" * 16) as first, peers.Beacon("127.0.0.1", b"b" * 16) as second:
        table = peers.PeerTable.from_gathered(
            [("me", 9, "", ""), ("host-a", first.port, (b"a" * 16).hex(), "127.0.0.1"),
             ("host-b", second.port, (b"x" * 16).hex(), "127.0.0.1")], own_rank=0)
        found = table.lost(timeout=1, reply_timeout=0.5)
    assert [(f.peer.rank, f.peer.host, f.state) for f in found] == [(2, "host-b", peers.EXITED)]  # wrong token


def test_a_flood_of_trickling_strangers_is_bounded_and_a_probe_with_the_token_is_still_answered():
    from hvdkeras.common import token_gate
    from tests.harness.flood import trickling, wait_for

    token = b"t" * peers.TOKEN_BYTES
    with peers.Beacon("127.0.0.1", token) as beacon:
        threads_before = threading.active_count()
        with trickling(("127.0.0.1", beacon.port), connections=2000) as closed:
            assert len(beacon.gate.pending) <= token_gate.MAX_PENDING
            assert peers.probe("127.0.0.1", beacon.port, reply_timeout=3, token=token) == peers.ALIVE
            assert threading.active_count() <= threads_before + 1  # the flood's own thread
            assert wait_for(lambda: closed() == 2000, 20), closed()  # each closed TOKEN_WAIT_S after its accept
