"""A flood of connections that trickle bytes and never authenticate: what a server must bear without growing."""
from __future__ import annotations

import contextlib
import socket
import threading
import time
from typing import Callable, Iterator, List, Tuple


@contextlib.contextmanager
def trickling(address: Tuple[str, int], connections: int = 2000, byte_every_s: float = 0.2,
              payload: bytes = b"x") -> Iterator[Callable[[], int]]:
    """``connections`` TCP connections to ``address``, each sending one byte every ``byte_every_s`` seconds, on one
    thread, while the block runs; yields a function that says how many of them the server has closed so far."""
    socks: List[socket.socket] = []
    closed = [0]
    stop = threading.Event()
    for _ in range(connections):
        try:
            sock = socket.create_connection(address, timeout=5)
        except OSError:
            closed[0] += 1  # refused or reset at once: the server did not keep it
            continue
        sock.setblocking(False)
        socks.append(sock)

    def trickle() -> None:
        while not stop.wait(byte_every_s):
            for sock in list(socks):
                try:
                    sock.send(payload)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:  # the server closed it
                    socks.remove(sock)
                    sock.close()
                    closed[0] += 1

    thread = threading.Thread(target=trickle, name="flood", daemon=True)
    thread.start()
    try:
        yield lambda: closed[0]
    finally:
        stop.set()
        thread.join(10)
        for sock in socks:
            sock.close()


def wait_for(predicate: Callable[[], bool], timeout: float, every: float = 0.05) -> bool:
    """Whether ``predicate`` turned true within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(every)
    return predicate()
