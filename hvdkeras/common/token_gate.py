"""A listening socket's gate: no connection gets a thread, or more than its token's room, before it authenticates.

One thread accepts every connection and reads each one's first bytes, at most :data:`MAX_PENDING` such
connections at once (beyond that the oldest is closed) and each for at most ``wait_s`` from its accept, however
it trickles its bytes. Once a connection has sent as many bytes as the token has, they are compared whole, in
constant time (a wrong byte says nothing before then): a match goes to ``on_token``, anything else is closed
unanswered. The gate drains the listen queue on each wake, so a flood never fills it and a late peer with the
token is still let in. Users: each rank's beacon (:class:`hvdkeras.common.peers.Beacon`) and the Spark ranks'
output relay (:class:`hvdkeras.spark.relay.Relay`).
"""
from __future__ import annotations

import contextlib
import hmac
import selectors
import socket
import threading
import time
from typing import Callable, Dict, Optional, Tuple

MAX_PENDING = 256  # connections that have not sent the token yet; beyond, the oldest is closed


class TokenGate:
    """The thread behind ``server`` (a listening socket): :meth:`close` stops it.

    Args:
        server: the listening socket (made non-blocking here).
        token: what a connection must send first; None lets every connection through at once.
        wait_s: how long after its accept a connection may take to send the whole token.
        on_token: called on the gate's thread with each connection that sent the token (blocking again); it owns
            the connection from then on.
        name: the thread's name.
    """

    def __init__(self, server: socket.socket, token: Optional[bytes], wait_s: float,
                 on_token: Callable[[socket.socket], None], name: str):
        self._server = server
        self._server.setblocking(False)
        self._token = token
        self._wait_s = wait_s
        self._on_token = on_token
        self.pending: Dict[socket.socket, Tuple[float, bytes]] = {}  # not authenticated yet: (deadline, bytes)
        self._wake_r, self._wake_w = socket.socketpair()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self._server, selectors.EVENT_READ)
            selector.register(self._wake_r, selectors.EVENT_READ)
            while True:
                now = time.monotonic()
                wait = min((d for d, _ in self.pending.values()), default=None)
                ready = selector.select(timeout=None if wait is None else max(0.0, wait - now))
                if any(key.fileobj is self._wake_r for key, _ in ready):
                    break
                for key, _ in ready:
                    if key.fileobj is self._server:
                        self._accept(selector)
                    else:
                        self._read(selector, key.fileobj)  # type: ignore[arg-type]
                now = time.monotonic()
                for conn, (deadline, _) in list(self.pending.items()):
                    if now > deadline:  # no token in time: closed unanswered
                        self._drop(selector, conn)
            for conn in list(self.pending):
                self._drop(selector, conn)

    def _accept(self, selector: selectors.BaseSelector) -> None:
        """Accepts what the listen queue holds, up to a batch at a time."""
        for _ in range(MAX_PENDING):
            try:
                conn, _ = self._server.accept()
            except OSError:  # nothing more waiting, or the peer gave up meanwhile
                return
            if self._token is None:
                self._let_in(conn)
                continue
            while len(self.pending) >= MAX_PENDING:  # a flood: the oldest goes (dicts keep their insertion order)
                self._drop(selector, next(iter(self.pending)))
            conn.setblocking(False)
            self.pending[conn] = (time.monotonic() + self._wait_s, b"")
            selector.register(conn, selectors.EVENT_READ)

    def _read(self, selector: selectors.BaseSelector, conn: socket.socket) -> None:
        assert self._token is not None
        deadline, got = self.pending[conn]
        try:
            chunk = conn.recv(len(self._token) - len(got))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        got += chunk
        if not chunk:  # closed, or reset, before the whole token
            self._drop(selector, conn)
        elif len(got) < len(self._token):
            self.pending[conn] = (deadline, got)
        elif not hmac.compare_digest(got, self._token):  # not the token: closed unanswered
            self._drop(selector, conn)
        else:
            self.pending.pop(conn)
            selector.unregister(conn)
            self._let_in(conn)

    def _let_in(self, conn: socket.socket) -> None:
        conn.setblocking(True)
        try:
            self._on_token(conn)
        except OSError:
            conn.close()

    def _drop(self, selector: selectors.BaseSelector, conn: socket.socket) -> None:
        self.pending.pop(conn, None)
        with contextlib.suppress(KeyError, ValueError):
            selector.unregister(conn)
        conn.close()

    def close(self) -> None:
        """Stops the gate's thread (connections still pending are closed); the listening socket stays the caller's."""
        if self._thread.is_alive():
            with contextlib.suppress(OSError):
                self._wake_w.send(b"x")
            self._thread.join(timeout=5)
        self._wake_r.close()
        self._wake_w.close()
