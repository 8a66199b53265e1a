"""hvdkeras.spark.relay: the ranks' lines reach the driver prefixed, strangers are dropped, starts are counted."""
import io
import socket
import time

import pytest

from hvdkeras.engines.attempts import Attempts
from hvdkeras.spark import relay as relay_lib


@pytest.fixture
def relay():
    out, err = io.StringIO(), io.StringIO()
    r = relay_lib.Relay("127.0.0.1", Attempts(max_retries=1, retry_hint=", from the top"), stdout=out, stderr=err)
    r.out, r.err = out, err
    yield r
    r.close()


def _wait(predicate, timeout=5.0):
    deadline = time.time() + timeout
    while not predicate() and time.time() < deadline:
        time.sleep(0.02)
    assert predicate()


def test_a_ranks_lines_reach_the_drivers_streams_as_horovodrun_prints_them(relay):
    sender = relay_lib.Sender(relay.address, relay.token, 1)
    sender.line("stdout", "epoch 1")
    sender.line("stderr", "a warning")
    sender.failed("rank 1 on h exited with status -9")
    sender.close()
    _wait(lambda: relay.attempts.failures)
    assert relay.out.getvalue() == "[1]<stdout>:epoch 1\n"
    assert relay.err.getvalue() == "[1]<stderr>:a warning\n"
    assert relay.attempts.why() == "rank 1 on h exited with status -9"
    assert relay.connections == 1  # what a Spark Connect stage's start watch goes by


def test_a_connection_without_the_runs_token_is_dropped_unanswered(relay):
    with socket.create_connection(relay.address) as conn:
        conn.sendall(b"not the token\n" + b'{"rank": 0, "stream": "stdout", "line": "injected"}\n{"start": true}\n')
        conn.settimeout(2)
        try:
            assert conn.recv(100) == b""  # closed, no answer
        except ConnectionResetError:  # closed with the rest unread: the kernel resets it
            pass
    assert relay.out.getvalue() == "" and relay.attempts.starts == 0 and relay.connections == 0


def test_malformed_messages_are_dropped(relay):
    for raw in ("{", "[]", '{"rank": "0", "stream": "stdout", "line": "x"}', '{"rank": 0, "stream": "tty", "line": 1}'):
        assert relay.handle(raw) is None
    assert relay.out.getvalue() == relay.err.getvalue() == ""


def test_starts_are_counted_the_retry_is_one_warning_line_and_one_past_max_retries_is_stopped(relay, capsys):
    first = relay_lib.Sender(relay.address, relay.token, 0)
    assert first.start() and relay.attempts.starts == 1
    first.failed("rank 1 on h exited with status -9")
    first.close()
    _wait(lambda: relay.attempts.failures)
    second = relay_lib.Sender(relay.address, relay.token, 0)
    assert second.start()
    third = relay_lib.Sender(relay.address, relay.token, 0)
    assert not third.start()  # max_retries=1: a third start is past it
    second.close()
    third.close()
    err = capsys.readouterr().err
    assert err.count("starting the ranks again") == 1
    assert ("a rank failed (rank 1 on h exited with status -9); starting the ranks again, retry 1 of 1, from the top"
            in err)


def test_a_sender_that_cannot_reach_the_driver_writes_to_its_own_output(capsys):
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        address = unused.getsockname()  # nothing listens there
    sender = relay_lib.Sender(address, "token", 3)
    sender.line("stdout", "alone")
    assert sender.start()  # nobody to ask: the rank starts
    assert capsys.readouterr().out == "[3]<stdout>:alone\n"


def test_a_flood_of_trickling_strangers_gets_no_thread_and_no_room_and_the_runs_tasks_still_get_through(
        monkeypatch):
    """2,000 connections that never send the token and trickle a byte every 0.2 s: the relay keeps at most
    MAX_PENDING of them, on its one reading thread, closes each CONNECT_TIMEOUT_S after its accept however it
    trickles, and a task of the run still gets its lines through while the flood goes on."""
    import threading

    from hvdkeras.common import token_gate
    from tests.harness.flood import trickling, wait_for

    monkeypatch.setattr(relay_lib, "CONNECT_TIMEOUT_S", 1.5)
    out = io.StringIO()
    relay = relay_lib.Relay("127.0.0.1", Attempts(), stdout=out)
    threads_before = threading.active_count()
    try:
        with trickling(relay.address, connections=2000) as closed:
            assert len(relay.gate.pending) <= token_gate.MAX_PENDING
            sender = relay_lib.Sender(relay.address, relay.token, 0)
            sender.line("stdout", "through the flood")
            assert wait_for(lambda: "[0]<stdout>:through the flood" in out.getvalue(), 10), out.getvalue()
            assert threading.active_count() <= threads_before + 2  # the flood's thread and the task's
            assert wait_for(lambda: closed() == 2000, 20), closed()  # every stranger closed, trickling or not
            assert len(relay.gate.pending) == 0
            sender.close()
    finally:
        relay.close()
