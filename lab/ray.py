"""A Ray cluster on three emulated hosts, for hvdkeras.ray on real nodes (needs root).

    python -m lab.ray up [TMPDIR]    # hosts a, b, c; a head on a, a worker node on b and on c; JSON (a driver
                                     # needs its "driver_env": the cluster's token)
    python -m lab.ray down           # stop and remove everything (idempotent)

What ``up`` builds, on top of :mod:`lab.hosts` (three hosts: their namespaces and bridge; the sshds are not used):
in each host's network namespace one ``ray start --block`` with the host's address (``--node-ip-address``), its
hostname and hosts file (as :mod:`lab.spark`'s workers), one logical CPU each (``CPUS``) and the dashboard off; the
head on host a at port 6379 (each namespace has its own ports), the others joining it. Ray's token authentication is
on (``RAY_AUTH_MODE=token``), with a new token in the cluster's Ray folder (``RAY_AUTH_TOKEN_PATH``) that every node
and driver (``ClusterInfo.env``) reads: a head started where ``~/.ray/auth_token`` exists (any local ``ray.init()``
writes one) turns it on by itself, and its workers, which do not, could not join. Every node's processes (its
GCS or raylet, agents, workers) stay in the session of its ``ray start``, and its command line names the cluster's
Ray folder (``/tmp/hvdtest-ray-*``, Ray's ``--temp-dir``, short for its sockets' paths), which is how :func:`down`
finds what a killed run left; logs and workdirs go in ``TMPDIR/hvdtest-ray``.

A Ray driver must run on a node of its cluster: run it in the head's namespace (``ClusterInfo.driver_command``),
with ``address`` (``198.18.213.2:6379``). :func:`node_sessions` and :func:`raylet_of` let a test kill one node.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import glob
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, Iterator, List, Optional, Sequence

from hvdkeras.common import processes
from lab import hosts as hosts_lib

FOLDER = "hvdtest-ray"  # fixed name of the cluster's folder (Ray's --temp-dir): down() finds its processes by it
HOSTS = 3
PORT = 6379
CPUS = 1  # logical CPUs each node offers
START_TIMEOUT_S = 90.0
TOKEN_FILE = "auth_token"  # the cluster's token, in its Ray folder


@dataclasses.dataclass
class ClusterInfo:
    """A running cluster: its hosts, folder, the ``ray start`` of each node (by host name) and the head's address."""

    hosts: hosts_lib.HostsInfo
    folder: str
    python: str
    address: str
    sessions: Dict[str, int]  # host name -> pid of its `ray start --block` (the leader of its node's session)
    ray_temp: str = ""  # Ray's --temp-dir: short, for its sockets' paths (at most 107 bytes)

    def driver_command(self, argv: List[str]) -> List[str]:
        """``argv`` run on the head node (in its namespace), where a Ray driver must run."""
        return self.hosts.hosts[0].command(argv, own_sysfs=False)

    def env(self, base: Optional[Dict[str, str]] = None) -> Dict[str, str]:
        """A driver's environment: the cluster's address and token, no usage report, each log line as it is."""
        return dict(base if base is not None else os.environ, RAY_ADDRESS=self.address, RAY_USAGE_STATS_ENABLED="0",
                    RAY_DEDUP_LOGS="0", **token_env(self.ray_temp))

    def to_json(self) -> str:
        return json.dumps({"folder": self.folder, "address": self.address, "sessions": self.sessions,
                           "driver_env": token_env(self.ray_temp), "hosts": json.loads(self.hosts.to_json())})


def token_env(ray_temp: str) -> Dict[str, str]:
    """What makes a node or driver use the cluster's token (Ray's token authentication), kept in ``ray_temp``."""
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": os.path.join(ray_temp, TOKEN_FILE)}


def _write_token(ray_temp: str) -> None:
    """A new token for the cluster, readable by its owner only."""
    fd = os.open(os.path.join(ray_temp, TOKEN_FILE), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))


def can_run() -> tuple:
    """Whether this machine can run the cluster: the lab's hosts, and Ray in this Python."""
    ok, reason = hosts_lib.can_run()
    if not ok:
        return ok, reason
    try:
        import ray  # noqa: F401
    except ImportError:
        return False, "Ray is not installed in this Python (pip install 'hvdkeras[ray]')"
    return True, ""


def _ray_pids(folder_name: str = FOLDER) -> List[int]:
    """Processes whose command line names a cluster folder (its nodes' ``ray start``, GCS, raylets, agents)."""
    found = []
    for proc in processes.scan(["pid", "cmdline"]):
        line = " ".join(proc.info.get("cmdline") or [])
        if folder_name in line and proc.info["pid"] != os.getpid():
            found.append(proc.info["pid"])
    return found


def node_sessions(info: ClusterInfo) -> Dict[str, List[int]]:
    """Each host's node: the processes of its ``ray start`` session (its raylet, agents and workers)."""
    out: Dict[str, List[int]] = {}
    for proc in processes.scan(["pid"]):
        try:
            sid = os.getsid(proc.info["pid"])
        except OSError:
            continue
        for host, leader in info.sessions.items():
            if sid == leader:
                out.setdefault(host, []).append(proc.info["pid"])
    return out


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def raylet_of(info: ClusterInfo, host: str) -> Optional[int]:
    """The pid of ``host``'s raylet, None when it is gone."""
    for pid in node_sessions(info).get(host, []):
        if "/raylet/raylet " in _cmdline(pid):
            return pid
    return None


def ranks_on(info: ClusterInfo, host: str, name: str = "RankWorker") -> List[int]:
    """The pids of ``host``'s actors of class ``name`` (Ray names an actor's process ``ray::<class>``)."""
    return [pid for pid in node_sessions(info).get(host, []) if _cmdline(pid).startswith(f"ray::{name}")]


def down(info: Optional[ClusterInfo] = None) -> None:
    """Ends every node's processes (their sessions, then anything still naming a cluster folder) and the hosts,
    and removes the cluster's Ray folder; without ``info``, every Ray folder a killed run left in ``/tmp``."""
    for leader in (info.sessions.values() if info else ()):
        processes.kill_session(leader)
    processes.stop(_ray_pids())
    hosts_lib.down(info.hosts if info else None)
    for ray_temp in ([info.ray_temp] if info and info.ray_temp else _left_ray_folders()):
        shutil.rmtree(ray_temp, ignore_errors=True)


def _left_ray_folders() -> List[str]:
    """The ``/tmp/hvdtest-ray-*`` folders that Ray used as its ``--temp-dir`` (they hold its ``session_latest``),
    once no process of theirs runs."""
    return [path for path in glob.glob(os.path.join("/tmp", FOLDER + "-*"))
            if os.path.lexists(os.path.join(path, "session_latest"))]


def stop_node(info: ClusterInfo, host: str, timeout: float = 60.0) -> None:
    """Stops ``host``'s node as an operator does (SIGTERM to its ``ray start --block``, which tells the head that the
    node leaves), and returns once the head counts it gone; one line otherwise."""
    leader = info.sessions.pop(host)
    processes.stop([leader], grace=timeout / 2)
    deadline = time.monotonic() + timeout
    while _alive_nodes(info) > len(info.sessions):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the head still counts the node on {host} alive {timeout:g} s after it stopped")
        time.sleep(0.5)


def start_node(info: ClusterInfo, host: str, timeout: float = START_TIMEOUT_S, python: Optional[str] = None) -> None:
    """Starts ``host``'s worker node again (after :func:`stop_node`), with ``python`` (the cluster's by default: its
    Ray workers run that interpreter); returns once the head counts it alive."""
    target = next(h for h in info.hosts.hosts if h.name == host)
    log = os.path.join(info.folder, f"{host}.log")
    proc = _start_node(target, info, python or info.python, _node_temp(info, host), ["--address", info.address], log)
    info.sessions[host] = proc.pid
    deadline = time.monotonic() + timeout
    _started(host, proc, log, deadline)
    while _alive_nodes(info) < len(info.sessions):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the Ray node on {host} did not join the cluster: {_tail(log)}")
        time.sleep(0.5)


def _node_temp(info: ClusterInfo, host: str) -> str:
    """A worker node's own ``--temp-dir``, inside the head's (removed with it)."""
    path = os.path.join(info.ray_temp, host.rsplit("-", 1)[-1])
    os.makedirs(path, exist_ok=True)
    return path


def python_without_hvdkeras(folder: str, python: str = sys.executable) -> str:
    """An interpreter in ``folder`` that imports what ``python``'s venv holds (Ray, TensorFlow, Horovod) but not
    hvdkeras, as on a node where nobody installed it: a venv whose only path is that venv's ``site-packages``, whose
    ``.pth`` files (hvdkeras' editable install among them) it does not run."""
    subprocess.run([python, "-m", "venv", "--without-pip", folder], check=True)
    found = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                           capture_output=True, text=True, check=True).stdout.strip()
    ours = subprocess.run([os.path.join(folder, "bin", "python"), "-c",
                           "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    with open(os.path.join(ours, "stack.pth"), "w") as f:
        f.write(found + "\n")
    return os.path.join(folder, "bin", "python")


def _ray_cli(python: str) -> List[str]:
    """Ray's command line for ``python``: its venv's ``ray``, else Ray's entry point through ``python`` (an
    interpreter made by :func:`python_without_hvdkeras` has no scripts of its own)."""
    ray = os.path.join(os.path.dirname(python), "ray")
    if os.path.exists(ray):
        return [ray]
    return [python, "-c", "import sys; from ray.scripts.scripts import main; sys.exit(main())"]


def _start_node(host: hosts_lib.Host, info: ClusterInfo, python: str, ray_temp: str, extra: Sequence[str],
                log: str) -> subprocess.Popen:
    argv = [*_ray_cli(python), "start", "--block", "--node-ip-address", host.addr, "--num-cpus", str(CPUS),
            "--disable-usage-stats", "--temp-dir", ray_temp, *extra]
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", **token_env(info.ray_temp))
    with open(log, "w") as out:
        return subprocess.Popen(host.daemon_command(argv, info.hosts.etc_hosts(host), own_sysfs=False), env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _started(name: str, proc: subprocess.Popen, log: str, deadline: float) -> None:
    """Waits until the node of ``proc`` says it started; one line when it exits first or the deadline passes."""
    while "Ray runtime started" not in open(log, errors="replace").read():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the Ray node on {name} did not start: {_tail(log)}")
        time.sleep(0.5)


def _alive_nodes(info: ClusterInfo) -> int:
    """How many nodes the head counts alive (``ray status``, run on the head)."""
    proc = subprocess.run(info.driver_command([*_ray_cli(info.python), "status", "--address", info.address]),
                          capture_output=True, text=True, timeout=60, env=info.env())
    active = proc.stdout.split("Active:", 1)[-1].split("Pending:", 1)[0] if "Active:" in proc.stdout else ""
    return sum(1 for line in active.splitlines() if "node_" in line)


def up(tmpdir, python: str = sys.executable, timeout: float = START_TIMEOUT_S) -> ClusterInfo:
    """Builds three hosts and starts a Ray node on each, the head on the first; returns once the head counts all
    three alive. On any failure removes everything again and raises one line."""
    ok, reason = can_run()
    if not ok:
        raise RuntimeError(reason)
    down()
    tmpdir = os.path.abspath(str(tmpdir))
    hosts = hosts_lib.up(os.path.join(tmpdir, "hosts"), hosts=HOSTS)
    folder = os.path.join(tmpdir, FOLDER)
    os.makedirs(folder, exist_ok=True)
    head = hosts.hosts[0]
    info = ClusterInfo(hosts=hosts, folder=folder, python=python, address=f"{head.addr}:{PORT}", sessions={},
                       ray_temp=tempfile.mkdtemp(prefix=FOLDER + "-", dir="/tmp"))
    try:
        logs = {h.name: os.path.join(folder, f"{h.name}.log") for h in hosts.hosts}
        _write_token(info.ray_temp)
        nodes = {head.name: _start_node(head, info, python, info.ray_temp, ["--head", "--port", str(PORT),
                                                                     "--include-dashboard=false"], logs[head.name])}
        info.sessions[head.name] = nodes[head.name].pid
        deadline = time.monotonic() + timeout
        _started(head.name, nodes[head.name], logs[head.name], deadline)
        for host in hosts.hosts[1:]:  # side by side, each in a session folder of its own (nodes sharing one race)
            nodes[host.name] = _start_node(host, info, python, _node_temp(info, host.name),
                                           ["--address", info.address], logs[host.name])
            info.sessions[host.name] = nodes[host.name].pid
        for host in hosts.hosts[1:]:
            _started(host.name, nodes[host.name], logs[host.name], deadline)
        while _alive_nodes(info) < len(hosts.hosts):
            dead = [name for name, proc in nodes.items() if proc.poll() is not None]
            if dead or time.monotonic() > deadline:
                why = f"{dead[0]} exited: {_tail(logs[dead[0]])}" if dead else f"not all alive within {timeout:g} s"
                raise RuntimeError(f"the Ray cluster did not start ({why})")
            time.sleep(1)
        with open(os.path.join(folder, "cluster.json"), "w") as f:
            f.write(info.to_json())
        return info
    except BaseException:
        try:
            down(info)
        finally:
            raise


def _tail(path: str, chars: int = 300) -> str:
    try:
        with open(path, errors="replace") as f:
            return " ".join(f.read()[-chars:].split())
    except OSError:
        return "(no log)"


@contextlib.contextmanager
def running(tmpdir, python: str = sys.executable, timeout: float = START_TIMEOUT_S) -> Iterator[ClusterInfo]:
    """:func:`up` for the ``with`` block, :func:`down` after it however it ends."""
    info = up(tmpdir, python=python, timeout=timeout)
    try:
        yield info
    finally:
        down(info)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.ray", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("up", help="build the hosts and start the cluster; prints its JSON")
    start.add_argument("tmpdir", nargs="?", default=None)
    sub.add_parser("down", help="stop and remove everything")
    args = parser.parse_args(argv)
    if args.command == "down":
        down()
        return 0
    info = up(args.tmpdir or tempfile.mkdtemp(prefix="hvdtest-ray-"))
    print(info.to_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())
