"""The ranks' output on the driver: each Spark task sends its rank's lines to a socket the driver listens on.

A rank started in a Spark task writes to that task's pipes, and a task's own output lands in its executor's
log, far from the user. As ``horovodrun`` and Horovod's ``horovod.spark.run`` do, the driver prints every
rank's lines as ``[<rank>]<stdout>:<line>`` (or ``<stderr>``), to its own output or to the streams the caller
passes. :class:`Relay` listens on the driver's address (``spark.driver.host``) on a port the kernel picks;
each task connects, proves it belongs to this run with the run's random token, and sends one message per line.
Anything else that connects is dropped without an answer. Until a connection has sent the token it has no
thread of its own and no buffer beyond the token's length: one thread reads every such connection, at most
:data:`MAX_PENDING` of them at once (the oldest closed first beyond that), each closed when it has not sent the
token within :data:`CONNECT_TIMEOUT_S` of its accept, however it trickles its bytes. The token is compared
whole, in constant time, once all its bytes are in: a wrong byte says nothing until then. A task that cannot
reach the driver writes its rank's lines to its own output instead (:class:`Sender`).

Messages are JSON lines: ``{"rank": r, "stream": "stdout"|"stderr", "line": text}``, ``{"failed": text}``
for why a rank failed, which the driver keeps (:attr:`Relay.failures`), or ``{"start": true}``, which rank 0's
task sends before its rank starts. The relay counts those starts, the attempts of the whole gang, and answers
``go`` or, past ``max_retries`` retries, ``stop``; a retry is logged on the driver as one warning line.
"""
from __future__ import annotations

import contextlib
import hmac
import json
import secrets
import selectors
import socket
import sys
import threading
import time
from typing import IO, Any, Dict, List, Optional, Tuple

from hvdkeras.common import log

MAX_LINE = 64 * 1024  # a longer line is cut there
CONNECT_TIMEOUT_S = 10.0  # from accept: a connection that has not sent the whole token by then is closed
MAX_PENDING = 256  # connections that have not sent the token yet; beyond, the oldest is closed


def _prefixed(rank: int, stream: str, line: str, timestamp: bool) -> str:
    stamp = time.strftime("%a %b %d %H:%M:%S %Y") if timestamp else ""
    return f"{stamp}[{rank}]<{stream}>:{line}\n"


class Relay:
    """The driver's end: a listening socket and a thread that prints what the tasks send.

    Args:
        host: the address the executors reach the driver at.
        stdout: where the ranks' standard output goes (default: this process's).
        stderr: where their standard error goes (default: this process's).
        timestamp: prefix each line with its time.
        max_retries: how many starts of the gang after the first are allowed.
        retry_hint: what a retry's warning line adds (where the ranks resume).
    """

    def __init__(self, host: str, stdout: Optional[IO[str]] = None, stderr: Optional[IO[str]] = None,
                 timestamp: bool = False, max_retries: int = 0, retry_hint: str = ""):
        self.token = secrets.token_hex(16)
        self.max_retries = max_retries
        self.retry_hint = retry_hint
        self.starts = 0
        self._attempt_failures = 0  # where the current attempt's failures begin in :attr:`failures`
        self._count_lock = threading.Lock()
        self._out = {"stdout": stdout, "stderr": stderr}
        self._timestamp = timestamp
        self._server = socket.create_server((host, 0))
        self._server.setblocking(False)
        self.address = (host, self._server.getsockname()[1])
        self._stop = threading.Event()
        self._write_lock = threading.Lock()
        self._threads: List[threading.Thread] = []  # one per authenticated connection: the run's tasks
        self._pending: Dict[socket.socket, Tuple[float, bytes]] = {}  # not authenticated yet: (deadline, bytes)
        self._wake_r, self._wake_w = socket.socketpair()
        self.failures: List[str] = []
        self._accepting = threading.Thread(target=self._accept, name="hvdkeras-relay", daemon=True)
        self._accepting.start()

    def _stream(self, name: str) -> IO[str]:
        chosen = self._out.get(name)
        return chosen if chosen is not None else (sys.stdout if name == "stdout" else sys.stderr)

    def _accept(self) -> None:
        """Accepts connections and reads each one's token, all on this thread; a connection that sends it gets a
        thread of its own (:meth:`_serve`)."""
        with selectors.DefaultSelector() as selector:
            selector.register(self._server, selectors.EVENT_READ)
            selector.register(self._wake_r, selectors.EVENT_READ)
            while not self._stop.is_set():
                now = time.monotonic()
                wait = min((d for d, _ in self._pending.values()), default=now + 1.0) - now
                for key, _ in selector.select(timeout=max(0.0, min(wait, 1.0))):
                    if key.fileobj is self._server:
                        self._take(selector)
                    elif key.fileobj is not self._wake_r:
                        self._read_token(selector, key.fileobj)  # type: ignore[arg-type]
                now = time.monotonic()
                for conn, (deadline, _) in list(self._pending.items()):
                    if now > deadline:
                        self._drop(selector, conn)
            for conn in list(self._pending):
                self._drop(selector, conn)

    def _take(self, selector: selectors.BaseSelector) -> None:
        """Accepts what the listen queue holds (a flood never fills it), up to a batch at a time."""
        for _ in range(MAX_PENDING):
            try:
                conn, _ = self._server.accept()
            except OSError:  # nothing more waiting, or the peer gave up meanwhile
                return
            while len(self._pending) >= MAX_PENDING:  # a flood: the oldest goes (dicts keep their insertion order)
                self._drop(selector, next(iter(self._pending)))
            conn.setblocking(False)
            self._pending[conn] = (time.monotonic() + CONNECT_TIMEOUT_S, b"")
            selector.register(conn, selectors.EVENT_READ)

    def _read_token(self, selector: selectors.BaseSelector, conn: socket.socket) -> None:
        wanted = self.token.encode() + b"\n"
        deadline, got = self._pending[conn]
        try:
            chunk = conn.recv(len(wanted) - len(got))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        got += chunk
        if not chunk:  # closed before the whole token
            self._drop(selector, conn)
        elif len(got) == len(wanted) and not hmac.compare_digest(got, wanted):  # not this run's: no answer
            self._drop(selector, conn)
        elif len(got) == len(wanted):
            self._pending.pop(conn)
            selector.unregister(conn)
            conn.setblocking(True)
            self._threads = [t for t in self._threads if t.is_alive()]
            thread = threading.Thread(target=self._serve, args=(conn,), name="hvdkeras-relay-conn", daemon=True)
            thread.start()
            self._threads.append(thread)
        else:
            self._pending[conn] = (deadline, got)

    def _drop(self, selector: selectors.BaseSelector, conn: socket.socket) -> None:
        self._pending.pop(conn, None)
        with contextlib.suppress(KeyError, ValueError):
            selector.unregister(conn)
        conn.close()

    def _serve(self, conn: socket.socket) -> None:
        """One of this run's tasks, authenticated: its messages until it closes."""
        with conn, conn.makefile("r", encoding="utf-8", errors="replace", newline="\n") as lines:
            for raw in iter(lambda: lines.readline(MAX_LINE), ""):
                answer = self.handle(raw)
                if answer is not None:
                    try:
                        conn.sendall((answer + "\n").encode())
                    except OSError:
                        return

    def start(self) -> str:
        """Counts a start of the gang: ``go N`` (attempt N, from 0), or ``stop`` past ``max_retries`` retries."""
        with self._count_lock:
            self.starts += 1
            attempt = self.starts - 1
            why = self.why(self._attempt_failures)
            self._attempt_failures = len(self.failures)
        if attempt > self.max_retries:
            return "stop"
        if attempt > 0:
            log.warning(f"a rank failed ({why}); starting the ranks again, retry {attempt} of {self.max_retries}"
                        f"{self.retry_hint}")
        return f"go {attempt}"

    def count_attempt_since(self, starts: int) -> None:
        """Counts an attempt of the gang that failed before its rank 0 asked to start (:attr:`starts` still
        ``starts``), under the lock :meth:`start` counts with."""
        with self._count_lock:
            if self.starts == starts:
                self.starts += 1

    def why(self, since: int = 0) -> str:
        """The ranks' failures from :attr:`failures`'s index ``since`` on, in one clause (the first three)."""
        found = list(dict.fromkeys(self.failures[since:]))
        return "; ".join(found[:3]) if found else "a rank or its executor was lost"

    def handle(self, raw: str) -> Optional[str]:
        """Prints or keeps one message; returns the answer to a start. One that is not a message of
        :class:`Sender`'s is dropped."""
        try:
            msg = json.loads(raw[:MAX_LINE])
        except ValueError:
            return None
        if not isinstance(msg, dict):
            return None
        if msg.get("start") is True:
            return self.start()
        if isinstance(msg.get("failed"), str):
            self.failures.append(msg["failed"][:MAX_LINE])
            return None
        rank, stream, line = msg.get("rank"), msg.get("stream"), msg.get("line")
        if not isinstance(rank, int) or stream not in ("stdout", "stderr") or not isinstance(line, str):
            return None
        with self._write_lock:
            out = self._stream(stream)
            out.write(_prefixed(rank, stream, line[:MAX_LINE], self._timestamp))
            out.flush()
        return None

    def close(self, drain_s: float = 2.0) -> None:
        """Stops listening; waits up to ``drain_s`` for the connections still sending."""
        self._stop.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        self._accepting.join(timeout=2)
        self._server.close()
        self._wake_r.close()
        self._wake_w.close()
        deadline = time.time() + drain_s
        for thread in self._threads:
            thread.join(timeout=max(deadline - time.time(), 0))


class Sender:
    """A task's end: sends its rank's lines to the driver's :class:`Relay`, or writes them to the task's own output
    when the driver cannot be reached.

    Args:
        address: the relay's (host, port).
        token: the run's token (:attr:`Relay.token`).
        rank: the rank whose lines these are.
    """

    def __init__(self, address: Any, token: str, rank: int):
        self.rank = rank
        self._lock = threading.Lock()
        self._sock: Optional[socket.socket] = None
        try:
            self._sock = socket.create_connection(tuple(address), timeout=CONNECT_TIMEOUT_S)
            self._sock.settimeout(None)
            self._sock.sendall((token + "\n").encode())
        except OSError:
            self._sock = None

    def _send(self, msg: Dict[str, Any]) -> bool:
        if self._sock is None:
            return False
        data = (json.dumps(msg) + "\n").encode()
        with self._lock:
            try:
                self._sock.sendall(data)
                return True
            except OSError:
                self._sock = None
                return False

    def line(self, stream: str, text: str) -> None:
        """Sends one line of the rank's ``stream`` ("stdout" or "stderr")."""
        if not self._send({"rank": self.rank, "stream": stream, "line": text}):
            out = sys.stdout if stream == "stdout" else sys.stderr
            out.write(_prefixed(self.rank, stream, text, False))
            out.flush()

    def start(self) -> bool:
        """Asks the driver whether the gang may start (see :meth:`Relay.start`); True when it cannot be asked."""
        sock = self._sock
        if sock is None or not self._send({"start": True}):
            return True
        try:
            sock.settimeout(CONNECT_TIMEOUT_S)
            answer = sock.makefile("r", encoding="utf-8", errors="replace").readline(256)
            sock.settimeout(None)
        except OSError:
            return True
        return not answer.startswith("stop")

    def failed(self, text: str) -> None:
        """Tells the driver why this rank failed."""
        self._send({"failed": text})

    def close(self) -> None:
        """Closes the connection."""
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
            self._sock = None
