"""The ranks' output on the driver: each Spark task sends its rank's lines to a socket the driver listens on.

A rank started in a Spark task writes to that task's pipes, and a task's own output lands in its executor's
log, far from the user. As ``horovodrun`` and Horovod's ``horovod.spark.run`` do, the driver prints every
rank's lines as ``[<rank>]<stdout>:<line>`` (or ``<stderr>``), to its own output or to the streams the caller
passes. :class:`Relay` listens on the driver's address (``spark.driver.host``) on a port the kernel picks;
each task connects, proves it belongs to this run with the run's random token, and sends one message per line.
Anything else that connects is dropped without an answer: until a connection has sent the token it has
no thread of its own and no room beyond the token's (:mod:`hvdkeras.common.token_gate`), and it is closed
:data:`CONNECT_TIMEOUT_S` after its accept however it trickles its bytes. A task that cannot
reach the driver writes its rank's lines to its own output instead (:class:`Sender`).

Messages are JSON lines: ``{"rank": r, "stream": "stdout"|"stderr", "line": text}``, ``{"failed": text}``
for why a rank failed, or ``{"start": true}``, which rank 0's task sends before its rank starts. The last two
go to the run's :class:`~hvdkeras.engines.attempts.Attempts`, which counts the starts and keeps the reasons; the
relay answers a start ``go N`` or, past the retries, ``stop``.
"""
from __future__ import annotations

import json
import secrets
import socket
import sys
import threading
import time
from typing import IO, Any, Dict, List, Optional

from hvdkeras.common.token_gate import TokenGate
from hvdkeras.engines.attempts import Attempts

MAX_LINE = 64 * 1024  # a longer line is cut there
CONNECT_TIMEOUT_S = 10.0  # from accept: a connection that has not sent the whole token by then is closed


def _prefixed(rank: int, stream: str, line: str, timestamp: bool) -> str:
    stamp = time.strftime("%a %b %d %H:%M:%S %Y") if timestamp else ""
    return f"{stamp}[{rank}]<{stream}>:{line}\n"


class Relay:
    """The driver's end: a listening socket and a thread that prints what the tasks send.

    Args:
        host: the address the executors reach the driver at.
        attempts: the run's starts, which the tasks' start and failure messages go to.
        stdout: where the ranks' standard output goes (default: this process's).
        stderr: where their standard error goes (default: this process's).
        timestamp: prefix each line with its time.
    """

    def __init__(self, host: str, attempts: Attempts, stdout: Optional[IO[str]] = None,
                 stderr: Optional[IO[str]] = None, timestamp: bool = False):
        self.token = secrets.token_hex(16)
        self.attempts = attempts
        self._out = {"stdout": stdout, "stderr": stderr}
        self._timestamp = timestamp
        self._server = socket.create_server((host, 0))
        self.address = (host, self._server.getsockname()[1])
        self._write_lock = threading.Lock()
        self._threads: List[threading.Thread] = []  # one per authenticated connection: the run's tasks
        self.connections = 0  # the tasks that have reached it so far
        self.gate = TokenGate(self._server, (self.token + "\n").encode(), CONNECT_TIMEOUT_S, self._let_in,
                              "hvdkeras-relay")

    def _stream(self, name: str) -> IO[str]:
        chosen = self._out.get(name)
        return chosen if chosen is not None else (sys.stdout if name == "stdout" else sys.stderr)

    def _let_in(self, conn: socket.socket) -> None:
        """A task of this run: a thread of its own for its messages."""
        self.connections += 1
        self._threads = [t for t in self._threads if t.is_alive()]
        thread = threading.Thread(target=self._serve, args=(conn,), name="hvdkeras-relay-conn", daemon=True)
        thread.start()
        self._threads.append(thread)

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
            attempt = self.attempts.start()
            return "stop" if attempt is None else f"go {attempt}"
        if isinstance(msg.get("failed"), str):
            self.attempts.failed(msg["failed"][:MAX_LINE])
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
        self.gate.close()
        self._server.close()
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
        """Asks the driver whether the gang may start (:meth:`Attempts.start`); True when it cannot be asked."""
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
