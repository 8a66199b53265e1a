"""Which rank, on which host, is gone when a collective fails.

Horovod reports a lost peer without naming it: Gloo's ``Timed out waiting 30000ms
for recv operation to complete`` or ``Horovod has been shut down``. To name it, each
rank keeps a :class:`Beacon`: a listening TCP socket on an ephemeral port, nothing
more. The kernel completes a connection to a listening socket without the process's
help, so a probe tells three states apart, even for a rank that is busy or frozen:

* ``alive``: the connection is accepted (the process holds its socket open);
* ``exited``: refused (the host answers, the process and its socket are gone);
* ``unreachable``: no answer within the timeout, or no route (the host or the link is down).

The ranks exchange ``(host, port)`` once at start (:class:`PeerTable`, gathered by
the caller with any collective); after a failed collective each rank probes the
others in parallel and :func:`lost_line` names the lost ones in one line.

The same probe tells a rank when another has really exited: after a preemption the
other ranks leave only once rank 0's process is gone (:meth:`PeerTable.wait_until_gone`,
with rank 0's beacon held open until its process ends, :meth:`Beacon.hold_until_exit`),
because a launcher stops the whole job when its first rank exits.

:func:`watching` puts it together for a driver: the exchange, and a failed
collective inside its block turned into one line naming the lost ranks
(:class:`~hvdkeras.common.errors.PeerLostError`) or Horovod's stall shutdown
(:class:`~hvdkeras.common.errors.StallError`). No TensorFlow or Horovod here: the driver
hands in the collective and the test for a failed one (:mod:`hvdkeras.runtime.distributed`'s).
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import errno
import os
import socket
import time
from typing import Any, Callable, Iterator, List, Optional, Sequence

from hvdkeras.common.errors import HvdkerasError, PeerLostError, StallError

ALIVE, EXITED, UNREACHABLE = "alive", "exited", "unreachable"
PROBE_TIMEOUT_S = 3.0
# After a preemption, how long a rank other than 0 waits at most for rank 0's process to be gone before it
# leaves too (rank 0 needs about a second after its line; a rank 0 stuck longer is not waited for).
LEAVE_WAIT_S = 30.0


def own_host() -> str:
    """How the other ranks reach this one: the launcher's name for this host, else the hostname.

    ``horovodrun`` sets ``HOROVOD_HOSTNAME`` to the host as given in ``-H`` (a name or an
    address the launcher itself reached); ``mpirun`` and Slurm leave the machine's hostname.
    """
    return os.environ.get("HOROVOD_HOSTNAME") or socket.gethostname()


class Beacon:
    """A listening socket on every address of this host; :attr:`port` is what peers probe."""

    def __init__(self, host: str = "0.0.0.0"):
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, 0))
        # Probes wait in the backlog (nobody accepts them; the close drops them). Room for every rank's
        # probes while they wait for this one to exit (the kernel caps it at net.core.somaxconn).
        self._sock.listen(1024)
        self.port = self._sock.getsockname()[1]
        self._held: Optional[int] = None

    def hold_until_exit(self) -> None:
        """Keeps the port listening until this process ends, even after :meth:`close`.

        A second descriptor of the socket that no Python object owns: the kernel closes it when the
        process is gone, so a probe says "exited" only then, not when Python leaves the ``with``
        block, which may be seconds before the interpreter and the libraries have shut down.
        """
        if self._held is None:
            self._held = os.dup(self._sock.fileno())

    def close(self) -> None:
        """Closes the listening socket (a port held by :meth:`hold_until_exit` stays open)."""
        self._sock.close()

    def __enter__(self) -> "Beacon":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def probe(host: str, port: int, timeout: float = PROBE_TIMEOUT_S) -> str:
    """:data:`ALIVE`, :data:`EXITED` or :data:`UNREACHABLE` for the beacon at ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return ALIVE
    except ConnectionRefusedError:
        return EXITED
    except (socket.timeout, TimeoutError):
        return UNREACHABLE
    except OSError as exc:
        if exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EHOSTDOWN, errno.ENETDOWN):
            return UNREACHABLE
        if exc.errno == errno.ECONNRESET:
            return EXITED
        return UNREACHABLE  # the name no longer resolves, or another failure to reach it


@dataclasses.dataclass(frozen=True)
class Peer:
    """One rank's beacon address: its rank, host and port."""

    rank: int
    host: str
    port: int


@dataclasses.dataclass(frozen=True)
class Finding:
    """A peer found not alive, with its probe's state (:data:`EXITED` or :data:`UNREACHABLE`)."""

    peer: Peer
    state: str


class PeerTable:
    """Every rank's beacon address, in rank order (gathered by the caller at start)."""

    def __init__(self, peers: Sequence[Peer], own_rank: int):
        self.peers = list(peers)
        self.own_rank = own_rank

    @classmethod
    def from_gathered(cls, gathered: Sequence[Sequence[Any]], own_rank: int) -> "PeerTable":
        """From ``[(host, port), ...]`` in rank order (one ``allgather`` of :func:`own_host` and the port)."""
        return cls([Peer(r, str(h), int(p)) for r, (h, p) in enumerate(gathered)], own_rank)

    def lost(self, timeout: float = PROBE_TIMEOUT_S) -> List[Finding]:
        """The other ranks that are not alive, probed in parallel, in rank order."""
        others = [p for p in self.peers if p.rank != self.own_rank]
        if not others:
            return []
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(32, len(others))) as pool:
            states = list(pool.map(lambda p: probe(p.host, p.port, timeout), others))
        return [Finding(p, s) for p, s in zip(others, states) if s != ALIVE]

    def wait_until_gone(self, rank: int, timeout: float, stop: Callable[[], bool] = lambda: False) -> bool:
        """Waits until rank ``rank``'s process has exited or cannot be reached, at most ``timeout`` s, or
        ``stop()`` is true; whether it did (:func:`wait_until_gone`)."""
        peer = self.peers[rank]
        return wait_until_gone(peer.host, peer.port, timeout, stop=stop)

    def wait_until_root_gone(self, stop: Callable[[], bool] = lambda: False) -> bool:
        """Waits until rank 0's process is gone, at most :data:`LEAVE_WAIT_S` s, or ``stop()`` is true.

        After a preemption the other ranks leave this way, because a launcher stops the whole
        job when its first rank exits (``stop``: a further SIGTERM, which horovodrun sends to
        the ranks still running once rank 0 has left).
        """
        return self.wait_until_gone(0, timeout=LEAVE_WAIT_S, stop=stop)


def wait_until_gone(host: str, port: int, timeout: float, first_poll_s: float = 0.05, max_poll_s: float = 0.1,
                    probe_timeout: float = 1.0, stop: Callable[[], bool] = lambda: False) -> bool:
    """Probes the beacon at ``host:port`` until it is not :data:`ALIVE`; whether that came within ``timeout``.

    The polls start ``first_poll_s`` apart and double up to ``max_poll_s``: at most ten probes a
    second, well within the beacon's backlog, so a rank notices a departure within a tenth of a
    second (a launcher that stops the job on its first exit is about that quick). ``stop()`` true
    ends the wait at once, as if the peer were gone (the caller knows it is by other means).
    """
    deadline = time.monotonic() + timeout
    poll = first_poll_s
    while True:
        if stop() or probe(host, port, timeout=probe_timeout) != ALIVE:
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(poll, left))
        poll = min(poll * 2, max_poll_s)


def lost_line(findings: Sequence[Finding], timeout: float = PROBE_TIMEOUT_S, limit: int = 4) -> Optional[str]:
    """One line naming the lost ranks and hosts (None if none is lost).

    ``lost rank 1 on host 198.18.213.3 (unreachable: no answer within 3 s; the host or its link is down)``
    """
    if not findings:
        return None
    why = {UNREACHABLE: f"unreachable: no answer within {timeout:g} s; the host or its link is down",
           EXITED: "its process has exited; the host answers"}
    parts = [f"rank {f.peer.rank} on host {f.peer.host} ({why[f.state]})" for f in findings[:limit]]
    more = f" and {len(findings) - limit} more" if len(findings) > limit else ""
    return "lost " + ", ".join(parts) + more


@contextlib.contextmanager
def watching(rank: int, gather_objects: Callable[[Any], Sequence[Any]],
             is_collective_failure: Callable[[BaseException], bool],
             resume_point: Callable[[], Optional[str]] = lambda: None,
             stall_shutdown_seconds: Optional[float] = None) -> Iterator[PeerTable]:
    """Collective: a collective that fails inside names the lost ranks and hosts in one line.

    Every rank opens a :class:`Beacon` and the ranks exchange their addresses with
    ``gather_objects``; when a Horovod op fails, the other ranks are probed and, if any is
    gone, :class:`PeerLostError` replaces Horovod's error. If every rank is alive, Horovod
    shut down and ``stall_shutdown_seconds`` is set, its stall inspector stopped the job:
    :class:`StallError`. Other errors pass through unchanged.

    Args:
        rank: this process's rank.
        gather_objects: an allgather of one object per rank.
        is_collective_failure: whether an exception is a failed Horovod op (Gloo's timeout,
            "Horovod has been shut down").
        resume_point: the checkpoint a rerun would continue from, described, named in the line
            (:meth:`hvdkeras.runtime.position.RunPosition.resume_point`).
        stall_shutdown_seconds: Horovod's stall shutdown, if set.

    Returns:
        A context manager giving the :class:`PeerTable` (e.g. for
        :meth:`PeerTable.wait_until_root_gone` after a preemption).
    """
    with Beacon() as beacon:
        table = PeerTable.from_gathered(gather_objects((own_host(), beacon.port)), rank)
        try:
            yield table
        except SystemExit:  # leaving the process (a preemption's Preempted is one)
            beacon.hold_until_exit()  # "gone" once this process has ended, not when this block has
            raise
        except Exception as exc:
            if isinstance(exc, HvdkerasError) or not is_collective_failure(exc):
                raise
            line = lost_line(table.lost())
            saved = resume_point()
            resume = "rerun the same command to resume from the last checkpoint" + (
                f" (checkpoint {saved})" if saved else "")
            if line is not None:
                raise PeerLostError(f"{line}; {resume}") from exc
            if stall_shutdown_seconds and "shut down" in str(exc):
                raise StallError(
                    f"Horovod stopped the job: a rank stalled longer than horovod.stall_shutdown_seconds="
                    f"{stall_shutdown_seconds} (Horovod's stall warning above names it under 'Missing ranks');"
                    f" every rank was still alive; {resume}") from exc
            raise
