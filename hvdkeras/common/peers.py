"""Which rank, on which host, is gone or frozen when a collective fails.

Horovod reports a lost peer without naming it: Gloo's ``Timed out waiting 30000ms
for recv operation to complete`` or ``Horovod has been shut down``. To name it, each
rank keeps a :class:`Beacon`: a listening TCP socket on an ephemeral port, and a thread
that answers every connection with one byte. The kernel completes a connection to a
listening socket without the process's help, even for a process that is stopped
(``SIGSTOP``); the answer needs the process running. A probe therefore tells four states apart:

* ``alive``: the connection is accepted and answered (the process runs, busy or not);
* ``unresponsive``: accepted, but no answer within the deadline (the process holds its
  socket open but does not run: stopped, or hung with Python's interpreter lock held);
* ``exited``: refused (the host answers, the process and its socket are gone);
* ``unreachable``: no answer within the timeout, or no route (the host or the link is down).

The ranks exchange ``(host, port)`` once at start (:class:`PeerTable`, gathered by
the caller with any collective); after a failed collective each rank probes the
others in parallel and :func:`lost_line` names the lost ones in one line,
:func:`unresponsive_line` the frozen ones.

The same probe, without waiting for the answer, tells a rank when another has really exited: after a
preemption the other ranks leave only once rank 0's process is gone (:meth:`PeerTable.wait_until_gone`,
with rank 0's beacon held open until its process ends, :meth:`Beacon.hold_until_exit`),
because a launcher stops the whole job when its first rank exits.

:func:`watching` puts it together for a driver: the exchange, and a failed
collective inside its block turned into one line naming the lost ranks
(:class:`~hvdkeras.common.errors.PeerLostError`), the frozen ones
(:class:`~hvdkeras.common.errors.PeerUnresponsiveError`) or Horovod's stall shutdown
(:class:`~hvdkeras.common.errors.StallError`). No TensorFlow or Horovod here: the driver
hands in the collective and the test for a failed one (:mod:`hvdkeras.runtime.distributed`'s).
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import errno
import os
import secrets
import socket
import time
from typing import Any, Callable, Iterator, List, Mapping, Optional, Sequence

from hvdkeras.common.errors import HvdkerasError, PeerLostError, PeerUnresponsiveError, StallError
from hvdkeras.common.token_gate import TokenGate

ALIVE, UNRESPONSIVE, EXITED, UNREACHABLE = "alive", "unresponsive", "exited", "unreachable"
PROBE_TIMEOUT_S = 3.0
# How long a probe after a failed collective waits for a connected beacon's answer (its thread needs the
# interpreter lock: a rank in a long TensorFlow or Horovod op has released it, so a running rank answers at once).
REPLY_TIMEOUT_S = 3.0
REPLY = b"!"
# The token a probe sends a beacon to be answered: random per rank and run, exchanged with the ranks' addresses over
# Horovod's own collective, so what reaches the port from elsewhere gets nothing. How long a connection may take to
# send it before it is closed unanswered.
TOKEN_BYTES = 16
# The beacon's listen backlog, which ``ss -ltn`` shows: not Gloo's 1024 (each Gloo pair listens with that while it
# connects), so a rank's beacon port can be told apart from the ports of Gloo, which authenticates nothing.
BACKLOG = 1000
TOKEN_WAIT_S = 2.0  # from accept, not restarted by each byte (hvdkeras.common.token_gate)
# After a preemption, how long a rank other than 0 waits at most for rank 0's process to be gone before it
# leaves too (rank 0 needs about a second after its line; a rank 0 stuck longer is not waited for).
LEAVE_WAIT_S = 30.0


def own_host() -> str:
    """How the other ranks reach this one: the launcher's name for this host, else the hostname.

    ``horovodrun`` sets ``HOROVOD_HOSTNAME`` to the host as given in ``-H`` (a name or an
    address the launcher itself reached); ``mpirun`` and Slurm leave the machine's hostname.
    """
    return os.environ.get("HOROVOD_HOSTNAME") or socket.gethostname()


def bind_address(environ: Optional[Mapping[str, str]] = None) -> str:
    """The address this rank's beacon listens on: the job's interface, not every interface.

    Horovod's Gloo interface (``HOROVOD_GLOO_IFACE``, which ``horovodrun`` sets) when it has an IPv4 address;
    else the address :func:`own_host` resolves to when it is one of this host's; else every interface
    (``0.0.0.0``), where the beacon still answers only the job's token.
    """
    environ = os.environ if environ is None else environ
    import psutil

    local = {iface: [a.address for a in addrs if a.family == socket.AF_INET]
             for iface, addrs in psutil.net_if_addrs().items()}
    iface = environ.get("HOROVOD_GLOO_IFACE", "")
    if local.get(iface):
        return local[iface][0]
    mine = {a for addrs in local.values() for a in addrs}
    try:
        resolved = socket.gethostbyname(environ.get("HOROVOD_HOSTNAME") or socket.gethostname())
    except OSError:
        return "0.0.0.0"
    return resolved if resolved in mine else "0.0.0.0"


class Beacon:
    """A listening socket (:attr:`port` is what peers probe), and a thread answering each connection with one
    byte while this process runs; with a ``token``, only a connection that sends that token first is answered.

    Args:
        host: The address to listen on (:func:`bind_address`: the job's interface).
        token: What a probe must send to be answered (None: every connection is).
    """

    def __init__(self, host: str = "0.0.0.0", token: Optional[bytes] = None):
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, 0))
        # Probes wait in the backlog until the thread takes them (after close, and while this process is
        # stopped, nobody does; the process's end drops them). Room for every rank's probes while they wait
        # for this one to exit (the kernel caps it at net.core.somaxconn).
        self._sock.listen(BACKLOG)
        self.address = host
        self.port = self._sock.getsockname()[1]
        self._held: Optional[int] = None
        # One that sent the token gets REPLY and is closed (hvdkeras.common.token_gate: bounded, one thread).
        self.gate = TokenGate(self._sock, token, TOKEN_WAIT_S, _answer, "hvdkeras-beacon")

    def hold_until_exit(self) -> None:
        """Keeps the port listening until this process ends, even after :meth:`close`.

        A second descriptor of the socket that no Python object owns: the kernel closes it when the
        process is gone, so a probe says "exited" only then, not when Python leaves the ``with``
        block, which may be seconds before the interpreter and the libraries have shut down.
        """
        if self._held is None:
            self._held = os.dup(self._sock.fileno())

    def close(self) -> None:
        """Stops the answers and closes the listening socket (a port held by :meth:`hold_until_exit` stays open)."""
        self.gate.close()
        self._sock.close()

    def __enter__(self) -> "Beacon":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _answer(conn: socket.socket) -> None:
    """A probe with the token: one byte, then closed."""
    with conn:
        try:
            conn.sendall(REPLY)
        except OSError:
            pass


def probe(host: str, port: int, timeout: float = PROBE_TIMEOUT_S, reply_timeout: Optional[float] = None,
          token: bytes = b"") -> str:
    """:data:`ALIVE`, :data:`EXITED` or :data:`UNREACHABLE` for the beacon at ``host:port``.

    With ``reply_timeout``, also sends ``token`` and waits that long for the beacon's answer: a connection the
    kernel accepted but the process never answered is :data:`UNRESPONSIVE` (without it, the connection alone is
    :data:`ALIVE`).
    """
    try:
        with socket.create_connection((host, port), timeout=timeout) as conn:
            if reply_timeout is None:
                return ALIVE
            conn.settimeout(reply_timeout)
            if token:
                conn.sendall(token)
            try:
                return ALIVE if conn.recv(1) == REPLY else EXITED  # closed unanswered: the process is ending
            except (socket.timeout, TimeoutError):
                return UNRESPONSIVE
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
    """One rank's beacon: its rank, host (as messages name it), port, the token it answers, and the address it
    listens on (empty: the host's)."""

    rank: int
    host: str
    port: int
    token: bytes = b""
    address: str = ""

    @property
    def reach(self) -> str:
        """Where a probe connects: the beacon's own address, unless it listens on every interface."""
        return self.address if self.address and self.address != "0.0.0.0" else self.host


@dataclasses.dataclass(frozen=True)
class Finding:
    """A peer found not alive, with its probe's state (:data:`EXITED`, :data:`UNREACHABLE` or :data:`UNRESPONSIVE`)."""

    peer: Peer
    state: str


class PeerTable:
    """Every rank's beacon address, in rank order (gathered by the caller at start)."""

    def __init__(self, peers: Sequence[Peer], own_rank: int):
        self.peers = list(peers)
        self.own_rank = own_rank

    @classmethod
    def from_gathered(cls, gathered: Sequence[Sequence[Any]], own_rank: int) -> "PeerTable":
        """From ``[(host, port[, token hex, address]), ...]`` in rank order (one ``allgather`` of
        :func:`own_host`, the beacon's port, its token and address)."""
        peers = []
        for r, entry in enumerate(gathered):
            host, port, token, address = (list(entry) + ["", ""])[:4]
            peers.append(Peer(r, str(host), int(port), bytes.fromhex(str(token)), str(address)))
        return cls(peers, own_rank)

    def lost(self, timeout: float = PROBE_TIMEOUT_S, reply_timeout: Optional[float] = None) -> List[Finding]:
        """The other ranks that are not alive (gone, or there but not answering within ``reply_timeout``,
        default :data:`REPLY_TIMEOUT_S`), probed in parallel, in rank order."""
        reply_timeout = REPLY_TIMEOUT_S if reply_timeout is None else reply_timeout
        others = [p for p in self.peers if p.rank != self.own_rank]
        if not others:
            return []
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(32, len(others))) as pool:
            states = list(pool.map(lambda p: probe(p.reach, p.port, timeout, reply_timeout, p.token), others))
        return [Finding(p, s) for p, s in zip(others, states) if s != ALIVE]

    def wait_until_gone(self, rank: int, timeout: float, stop: Callable[[], bool] = lambda: False) -> bool:
        """Waits until rank ``rank``'s process has exited or cannot be reached, at most ``timeout`` s, or
        ``stop()`` is true; whether it did (:func:`wait_until_gone`)."""
        peer = self.peers[rank]
        return wait_until_gone(peer.reach, peer.port, timeout, stop=stop)

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
    """One line naming the lost ranks and hosts (None if none is lost; unresponsive ones are left out).

    ``lost rank 1 on host 198.18.213.3 (unreachable: no answer within 3 s; the host or its link is down)``
    """
    gone = [f for f in findings if f.state in (EXITED, UNREACHABLE)]
    if not gone:
        return None
    why = {UNREACHABLE: f"unreachable: no answer within {timeout:g} s; the host or its link is down",
           EXITED: "its process has exited; the host answers"}
    parts = [f"rank {f.peer.rank} on host {f.peer.host} ({why[f.state]})" for f in gone[:limit]]
    more = f" and {len(gone) - limit} more" if len(gone) > limit else ""
    return "lost " + ", ".join(parts) + more


def unresponsive_line(findings: Sequence[Finding], reply_timeout: Optional[float] = None,
                      limit: int = 4) -> Optional[str]:
    """One line naming the ranks whose process is there but does not answer within ``reply_timeout``
    (default :data:`REPLY_TIMEOUT_S`; None if there is none).

    ``rank 1 on host 198.18.213.3 is not responding (its process is there but did not answer within 3 s:
    stopped, e.g. by SIGSTOP, or hung)``
    """
    frozen = [f for f in findings if f.state == UNRESPONSIVE]
    if not frozen:
        return None
    reply_timeout = REPLY_TIMEOUT_S if reply_timeout is None else reply_timeout
    names = ", ".join(f"rank {f.peer.rank} on host {f.peer.host}" for f in frozen[:limit])
    more = f" and {len(frozen) - limit} more" if len(frozen) > limit else ""
    verb = "is" if len(frozen) == 1 else "are"
    return (f"{names}{more} {verb} not responding (the process is there but did not answer within"
            f" {reply_timeout:g} s: stopped, e.g. by SIGSTOP, or hung)")


@contextlib.contextmanager
def watching(rank: int, gather_objects: Callable[[Any], Sequence[Any]],
             is_collective_failure: Callable[[BaseException], bool],
             resume_point: Callable[[], Optional[str]] = lambda: None,
             stall_shutdown_seconds: Optional[float] = None,
             on_failure: Callable[[], object] = lambda: None) -> Iterator[PeerTable]:
    """Collective: a collective that fails inside names the lost ranks and hosts in one line.

    Every rank opens a :class:`Beacon` and the ranks exchange their addresses with
    ``gather_objects``; when a Horovod op fails, the other ranks are probed and, if any is
    gone, :class:`PeerLostError` replaces Horovod's error; if none is gone but one is there without
    answering (stopped past Gloo's timeout, or hung), :class:`PeerUnresponsiveError` does. If every rank
    answers, Horovod
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
        on_failure: called once a collective has failed, before the line is made (which names
            ``resume_point()``): e.g. rank 0 saving alone when a SIGTERM is pending.

    Returns:
        A context manager giving the :class:`PeerTable` (e.g. for
        :meth:`PeerTable.wait_until_root_gone` after a preemption).
    """
    token = secrets.token_bytes(TOKEN_BYTES)
    with Beacon(bind_address(), token) as beacon:
        table = PeerTable.from_gathered(gather_objects((own_host(), beacon.port, token.hex(), beacon.address)), rank)
        try:
            yield table
        except SystemExit:  # leaving the process (a preemption's Preempted is one)
            beacon.hold_until_exit()  # "gone" once this process has ended, not when this block has
            raise
        except Exception as exc:
            if isinstance(exc, HvdkerasError) or not is_collective_failure(exc):
                raise
            findings = table.lost()
            line, frozen = lost_line(findings), unresponsive_line(findings)
            on_failure()
            saved = resume_point()
            resume = "rerun the same command to resume from the last checkpoint" + (
                f" (checkpoint {saved})" if saved else "")
            if line is not None:
                raise PeerLostError("; ".join(x for x in (line, frozen, resume) if x)) from exc
            if frozen is not None:
                raise PeerUnresponsiveError(
                    f"{frozen}; the launcher ends it once this rank has left (if it is still there, end it);"
                    f" {resume}") from exc
            if stall_shutdown_seconds and "shut down" in str(exc):
                raise StallError(
                    f"Horovod stopped the job: a rank stalled longer than horovod.stall_shutdown_seconds="
                    f"{stall_shutdown_seconds} (Horovod's stall warning above names it under 'Missing ranks');"
                    f" every rank was still alive; {resume}") from exc
            raise
