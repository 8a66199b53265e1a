"""Two to eight "hosts" on this machine, for a real multi-host Horovod run (needs root).

    python -m lab.hosts check                    # can this machine do it? (exit 0 yes, 1 no + reason)
    python -m lab.hosts up [--hosts N] [TMPDIR]  # build N (default 2), print what horovodrun needs (JSON)
    python -m lab.hosts down                     # tear everything down (idempotent, by fixed names)

Used by the multi-host tests (``tests/distributed/test_two_hosts.py``) and by the
benchmark's lab (``python -m benchmarks --hosts 2``, ``python -m benchmarks.exchange_scaling``),
which also shapes their links (:mod:`lab.shaper`).

What ``up`` builds, all under fixed names so that ``down`` also removes what a killed run left:

- a bridge ``hvdtest0`` in the root namespace with 198.18.213.1/24 (RFC 2544's benchmark range,
  which no real network routes): the launcher's address, where its rendezvous server is reached;
- network namespaces ``hvdtest-a``, ``hvdtest-b``, ... (up to ``hvdtest-h``, :func:`host_specs`), each
  joined to the bridge by a veth pair whose root end is ``hvdtest0-a``, ... and whose inner end is also
  named ``hvdtest0``, with 198.18.213.2, .3, ... (.9), plus loopback, no IPv6 and no default route: a
  process in them can reach the other hosts' and the launcher's addresses and nothing else;
- in each namespace an sshd listening only on that address (port 22), pinned with ``taskset`` to
  its own share of the machine's cores (:func:`host_cpus`: with two cores and two hosts each has one;
  with more hosts than cores, host ``i`` has core ``i % cores``; everything started over ssh inherits
  it, as on a real host with its own CPUs), started under ``unshare --uts --mount`` with its own hostname
  (``hvd-host-a``, ``hvd-host-b``, ...) and a hosts file bind-mounted over /etc/hosts in that mount
  namespace only, so the hostname resolves to the namespace's address (Horovod 0.28.1's
  process-set Gloo context ignores ``HOROVOD_GLOO_IFACE`` and connects to ``gethostname()``);
  the machine's own /etc/hosts is never touched;
- in TMPDIR: a client key (``id_ed25519``, authorized for root from the test subnet only), one host
  key per host, a ``known_hosts`` pinning them, an ssh client config, and ``bin/ssh``, a wrapper
  that runs the system ssh with that config and ``StrictHostKeyChecking=yes`` (horovodrun passes
  ``StrictHostKeyChecking=no``; the first value given wins), so nothing is written to
  ~/.ssh/known_hosts and nothing outside the test is used. Put ``bin`` first on horovodrun's PATH
  (``HostsInfo.env()``).

Launch with ``horovodrun -np 2 -H 198.18.213.2:1,198.18.213.3:1 --gloo --network-interfaces hvdtest0
--ssh-identity-file TMPDIR/id_ed25519 ...`` (``HostsInfo.horovodrun_args()``). The interface name
must exist on the launcher too (hence the bridge's name) and must not be ``eth0``: horovodrun takes
its rendezvous address from that interface on its own side.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import ipaddress
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from typing import Iterator, List, Optional, Sequence, Tuple

from hvdkeras.common import processes

IFACE = "hvdtest0"
SUBNET = ipaddress.ip_network("198.18.213.0/24")
LAUNCHER_ADDR = "198.18.213.1"
MIN_HOSTS, MAX_HOSTS = 2, 8
PROBE_NS = "hvdtest-probe"
# An outsider on the job's network: a namespace on the bridge with an address of the subnet and nothing else (no
# sshd, not in any hosts file), from which tests send what an attacker on that network would (:func:`outsider`).
OUTSIDER_NS, OUTSIDER_LINK, OUTSIDER_ADDR = "hvdtest-x", "hvdtest0-x", "198.18.213.250"
SSHD = "/usr/sbin/sshd"
INSTALL_HINT = "install openssh-server (make system-deps)"


def host_specs(hosts: int = MIN_HOSTS) -> Tuple[Tuple[str, str, str, str], ...]:
    """The first ``hosts`` hosts' fixed names: (hostname, network namespace, address, veth end in the root namespace).

    >>> host_specs(3)[2]
    ('hvd-host-c', 'hvdtest-c', '198.18.213.4', 'hvdtest0-c')
    """
    if not isinstance(hosts, int) or not MIN_HOSTS <= hosts <= MAX_HOSTS:
        raise ValueError(f"the lab builds {MIN_HOSTS} to {MAX_HOSTS} hosts. Received: {hosts!r}")
    first = SUBNET.network_address + 2
    return tuple((f"hvd-host-{letter}", f"hvdtest-{letter}", str(first + i), f"{IFACE}-{letter}")
                 for i, letter in enumerate("abcdefgh"[:hosts]))


# The two hosts every two-host caller uses, and all the lab can build (what down() and any_up() look for).
HOST_SPECS = host_specs(2)
ALL_HOST_SPECS = host_specs(MAX_HOSTS)


@dataclasses.dataclass
class Host:
    name: str
    netns: str
    addr: str
    sshd_pid: Optional[int] = None
    cpus: str = ""  # taskset's list, e.g. "0"; "" = every core

    def command(self, argv: List[str], own_sysfs: bool = True) -> List[str]:
        """``argv`` run inside this host without ssh: in its network namespace, on its cores.

        ``ip netns exec`` (``own_sysfs``) also mounts the namespace's own /sys, which hides
        /sys/fs/cgroup; ``nsenter --net`` (not ``own_sysfs``) enters the network namespace alone."""
        pin = ["taskset", "-c", self.cpus] if self.cpus else []
        enter = ["ip", "netns", "exec", self.netns] if own_sysfs else ["nsenter", f"--net=/run/netns/{self.netns}"]
        return [*enter, *pin, *argv]

    def daemon_command(self, argv: List[str], etc_hosts: str, own_sysfs: bool = True,
                       hide: Sequence[str] = ()) -> List[str]:
        """A daemon ``argv`` run as this host: :meth:`command`, plus the host's own hostname and
        ``etc_hosts`` bind-mounted over /etc/hosts in a private mount namespace, where each folder of
        ``hide`` is covered by an empty read-only tmpfs (this host cannot see what is in it). Every exec
        replaces the one before, so the Popen pid is the daemon's."""
        cover = "".join(f' && mount -t tmpfs -o ro,size=4k,mode=555 hvdtest-hidden "${{{i}}}"'
                        for i in range(3, 3 + len(hide)))
        return self.command(["unshare", "--uts", "--mount", "--propagation", "private", "sh", "-c",
                             f'hostname "$1" && mount --bind "$2" /etc/hosts{cover} && shift {2 + len(hide)}'
                             ' && exec "$@"', "sh", self.name, etc_hosts, *hide, *argv], own_sysfs=own_sysfs)


@dataclasses.dataclass
class HostsInfo:
    tmpdir: str
    hosts: List[Host]
    iface: str = IFACE
    launcher_addr: str = LAUNCHER_ADDR
    identity_file: str = ""
    known_hosts: str = ""
    ssh_config: str = ""
    bin_dir: str = ""

    def host_list(self, slots: int = 1, np_: Optional[int] = None) -> str:
        """horovodrun's ``-H``: ``slots`` on each host in order, the last ones fewer or none so that the slots add up
        to ``np_`` (default: every host's). Horovod 0.28.1's Gloo launcher starts a rank in every slot listed,
        whatever ``-np`` says (``-np 3 -H a:2,b:2`` starts 4)."""
        left = len(self.hosts) * slots if np_ is None else np_
        entries = []
        for h in self.hosts:
            if left > 0:
                entries.append(f"{h.addr}:{min(slots, left)}")
                left -= slots
        return ",".join(entries)

    def horovodrun_args(self, slots: int = 1, np_: Optional[int] = None) -> List[str]:
        """The arguments that make horovodrun use these hosts (:meth:`host_list`; add ``-np`` and ``--gloo``)."""
        return ["-H", self.host_list(slots, np_), "--network-interfaces", self.iface,
                "--ssh-identity-file", self.identity_file]

    def etc_hosts(self, host: Host) -> str:
        """The hosts file ``host``'s daemons see as /etc/hosts."""
        return os.path.join(self.tmpdir, host.name, "hosts")

    def env(self, base=None) -> dict:
        """``base`` (default os.environ) with the test's ssh wrapper first on PATH."""
        env = dict(os.environ if base is None else base)
        env["PATH"] = self.bin_dir + os.pathsep + env.get("PATH", os.defpath)
        return env

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> "HostsInfo":
        d = json.loads(text)
        d["hosts"] = [Host(**h) for h in d["hosts"]]
        return cls(**d)


def link_ends(hosts: int = MIN_HOSTS) -> List[Tuple[Optional[str], str]]:
    """Both ends of the first ``hosts`` hosts' links, by their fixed names: (network namespace or None, device)."""
    return [end for _, netns, _, root_end in host_specs(hosts) for end in ((netns, IFACE), (None, root_end))]


def _run(cmd, check=True, **kwargs) -> subprocess.CompletedProcess:
    res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kwargs)
    if check and res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {res.returncode}: {res.stdout.strip()}")
    return res


def _subnet_users() -> List[str]:
    """Addresses and routes of the root namespace that overlap SUBNET, outside our own bridge."""
    found = []
    addrs = json.loads(_run(["ip", "-j", "-4", "addr", "show"]).stdout or "[]")
    for link in addrs:
        if link.get("ifname") == IFACE:
            continue
        for a in link.get("addr_info", []):
            net = ipaddress.ip_network(f"{a['local']}/{a.get('prefixlen', 32)}", strict=False)
            if net.overlaps(SUBNET):
                found.append(f"{a['local']}/{a.get('prefixlen')} on {link.get('ifname')}")
    routes = json.loads(_run(["ip", "-j", "-4", "route", "show"]).stdout or "[]")
    for r in routes:
        dst = r.get("dst", "")
        if dst in ("default", "") or r.get("dev") == IFACE:
            continue
        if ipaddress.ip_network(dst, strict=False).overlaps(SUBNET):
            found.append(f"route {dst} dev {r.get('dev')}")
    return found


def can_run() -> Tuple[bool, str]:
    """(True, "") if this machine can build the lab's hosts, else (False, one-line reason)."""
    if os.geteuid() != 0:
        return False, f"needs root to create network namespaces (running as uid {os.geteuid()})"
    for tool, package in (("ip", "iproute2"), ("unshare", "util-linux"), ("taskset", "util-linux"),
                          ("mount", "mount")):
        if shutil.which(tool) is None:
            return False, f"'{tool}' not found: install {package}"
    if not os.access(SSHD, os.X_OK):
        return False, f"{SSHD} not found: {INSTALL_HINT}"
    for tool in ("ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            return False, f"'{tool}' not found: {INSTALL_HINT}"
    _run(["ip", "netns", "del", PROBE_NS], check=False)
    made = _run(["ip", "netns", "add", PROBE_NS], check=False)
    if made.returncode != 0:
        return False, f"cannot create a network namespace: {' '.join(made.stdout.split())}"
    _run(["ip", "netns", "del", PROBE_NS], check=False)
    busy = _subnet_users()
    if busy:
        return False, f"test subnet {SUBNET} is already in use here ({'; '.join(busy)})"
    return True, ""


def _pids_in(netns: str) -> List[int]:
    res = _run(["ip", "netns", "pids", netns], check=False)
    return [int(p) for p in res.stdout.split() if p.isdigit()] if res.returncode == 0 else []


def _netns_exists(netns: str) -> bool:
    return os.path.exists(os.path.join("/run/netns", netns))


def _link_exists(dev: str) -> bool:
    return os.path.exists(f"/sys/class/net/{dev}")


def any_up() -> bool:
    """Whether a namespace of any of the lab's eight hosts exists: they are up, for a job, or a killed run left them."""
    return any(_netns_exists(netns) for _, netns, _, _ in ALL_HOST_SPECS)


def down(info: Optional[HostsInfo] = None) -> None:
    """Stops every process in the namespaces of all eight possible hosts (sshd, ssh sessions, ranks), then
    removes the namespaces, veths and bridge. Idempotent; works from fixed names, ``info`` is optional."""
    errors = []
    if info is not None:
        processes.stop([h.sshd_pid for h in info.hosts if h.sshd_pid])
    for _, netns, _, root_end in ALL_HOST_SPECS:
        if _netns_exists(netns):
            processes.stop(_pids_in(netns))
            res = _run(["ip", "netns", "del", netns], check=False)
            if res.returncode != 0 and _netns_exists(netns):
                errors.append(res.stdout.strip())
        if _link_exists(root_end):
            _run(["ip", "link", "del", root_end], check=False)
    if _link_exists(IFACE):
        res = _run(["ip", "link", "del", IFACE], check=False)
        if res.returncode != 0:
            errors.append(res.stdout.strip())
    if _netns_exists(PROBE_NS):
        _run(["ip", "netns", "del", PROBE_NS], check=False)
    _outsider_down()
    if info is not None:
        errors += [f"sshd {h.sshd_pid} still running" for h in info.hosts if h.sshd_pid and processes.alive(h.sshd_pid)]
    errors += [f"namespace {ns} still exists" for _, ns, _, _ in ALL_HOST_SPECS if _netns_exists(ns)]
    errors += [f"link {dev} still exists" for dev in [IFACE] + [s[3] for s in ALL_HOST_SPECS]
               if _link_exists(dev)]
    if errors:
        raise RuntimeError("lab.hosts.down left something behind: " + "; ".join(errors))


def _outsider_down() -> None:
    if _netns_exists(OUTSIDER_NS):
        processes.stop(_pids_in(OUTSIDER_NS))
        _run(["ip", "netns", "del", OUTSIDER_NS], check=False)
    if _link_exists(OUTSIDER_LINK):
        _run(["ip", "link", "del", OUTSIDER_LINK], check=False)


@contextlib.contextmanager
def outsider(info: HostsInfo) -> Iterator[Host]:
    """A namespace on the hosts' bridge at :data:`OUTSIDER_ADDR` (no sshd, in no hosts file, on no core of its
    own): what reaches the job's network from a machine that is not the job's. Removed at the end."""
    _outsider_down()
    _run(["ip", "netns", "add", OUTSIDER_NS])
    try:
        inner = OUTSIDER_LINK + "i"
        _run(["ip", "link", "add", OUTSIDER_LINK, "type", "veth", "peer", "name", inner])
        _no_ipv6(OUTSIDER_LINK)
        _run(["ip", "link", "set", inner, "netns", OUTSIDER_NS])
        _run(["ip", "-n", OUTSIDER_NS, "link", "set", inner, "name", info.iface])
        _no_ipv6(info.iface, OUTSIDER_NS)
        _run(["ip", "link", "set", OUTSIDER_LINK, "master", info.iface, "up"])
        _run(["ip", "-n", OUTSIDER_NS, "addr", "add", f"{OUTSIDER_ADDR}/{SUBNET.prefixlen}", "dev", info.iface])
        _run(["ip", "-n", OUTSIDER_NS, "link", "set", info.iface, "up"])
        _run(["ip", "-n", OUTSIDER_NS, "link", "set", "lo", "up"])
        yield Host("outsider", OUTSIDER_NS, OUTSIDER_ADDR)
    finally:
        _outsider_down()


def _no_ipv6(dev: str, netns: Optional[str] = None) -> None:
    """No IPv6 on the test links: no router solicitations or other stray traffic."""
    path = f"/proc/sys/net/ipv6/conf/{dev}/disable_ipv6"
    cmd = ["sh", "-c", f"[ ! -e {path} ] || echo 1 > {path}"]
    _run((["ip", "netns", "exec", netns] if netns else []) + cmd, check=False)


def _keygen(path: str, comment: str) -> str:
    for old in (path, path + ".pub"):  # a reused TMPDIR: ssh-keygen would ask before overwriting
        if os.path.exists(old):
            os.remove(old)
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path], stdin=subprocess.DEVNULL)
    with open(path + ".pub") as f:
        return f.read().strip()


def _write(path: str, text: str, mode: int = 0o644) -> str:
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)
    return path


def _wait_listening(addr: str, proc: subprocess.Popen, log: str, timeout=15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            with open(log) as f:
                raise RuntimeError(f"sshd for {addr} exited {proc.returncode}: {f.read()[-2000:]}")
        try:
            socket.create_connection((addr, 22), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"sshd for {addr} is not listening after {timeout}s (log: {log})")


def host_cpus(index: int, hosts: int, cores: Optional[List[int]] = None) -> str:
    """The cores host ``index`` of ``hosts`` runs on: every ``hosts``-th core of this process's, from ``index``.

    With fewer cores than hosts, host ``index`` has the one core ``index % cores`` (of this process's, in order).
    """
    cores = sorted(os.sched_getaffinity(0)) if cores is None else cores
    if len(cores) < hosts:
        return str(cores[index % len(cores)])
    return ",".join(str(c) for c in cores[index::hosts])


def up(tmpdir, hosts: int = MIN_HOSTS) -> HostsInfo:
    """Builds ``hosts`` hosts, 2 to 8 (first removing leftovers of an earlier run), and returns how to reach
    them. On any failure everything built so far is removed again and the error is raised."""
    specs = host_specs(hosts)
    ok, reason = can_run()
    if not ok:
        raise RuntimeError(reason)
    down()
    tmpdir = os.path.abspath(str(tmpdir))
    os.makedirs(tmpdir, exist_ok=True)
    info = HostsInfo(tmpdir=tmpdir, hosts=[Host(n, ns, a, cpus=host_cpus(i, len(specs)))
                                           for i, (n, ns, a, _) in enumerate(specs)])
    try:
        _build(info)
    except BaseException:
        try:
            down(info)
        finally:
            raise
    return info


def _build(info: HostsInfo) -> None:
    tmp = info.tmpdir
    prefix = SUBNET.prefixlen
    # network: bridge in the root namespace, one veth into each host namespace
    _run(["ip", "link", "add", IFACE, "type", "bridge"])
    _no_ipv6(IFACE)
    _run(["ip", "addr", "add", f"{LAUNCHER_ADDR}/{prefix}", "dev", IFACE])
    _run(["ip", "link", "set", IFACE, "up"])
    for _, netns, addr, root_end in host_specs(len(info.hosts)):
        _run(["ip", "netns", "add", netns])
        inner = root_end + "i"  # renamed to IFACE once inside the namespace
        _run(["ip", "link", "add", root_end, "type", "veth", "peer", "name", inner])
        _no_ipv6(root_end)
        _run(["ip", "link", "set", inner, "netns", netns])
        _run(["ip", "-n", netns, "link", "set", inner, "name", IFACE])
        _no_ipv6(IFACE, netns)
        _no_ipv6("lo", netns)
        _run(["ip", "link", "set", root_end, "master", IFACE, "up"])
        _run(["ip", "-n", netns, "addr", "add", f"{addr}/{prefix}", "dev", IFACE])
        _run(["ip", "-n", netns, "link", "set", IFACE, "up"])
        _run(["ip", "-n", netns, "link", "set", "lo", "up"])

    # ssh: a client key for root from the test subnet, a pinned host key per host
    info.identity_file = os.path.join(tmp, "id_ed25519")
    client_pub = _keygen(info.identity_file, "hvdkeras-two-hosts-test")
    authorized = _write(os.path.join(tmp, "authorized_keys"),
                        f'from="{SUBNET}",no-pty,no-port-forwarding,no-agent-forwarding,no-X11-forwarding '
                        f"{client_pub}\n", 0o600)
    hosts_file = "127.0.0.1\tlocalhost\n" + f"{LAUNCHER_ADDR}\thvd-launcher\n" + "".join(
        f"{h.addr}\t{h.name}\n" for h in info.hosts)
    known = []
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege-separation directory
    procs = []
    for host in info.hosts:
        hdir = os.path.join(tmp, host.name)
        os.makedirs(hdir, exist_ok=True)
        host_key = os.path.join(hdir, "ssh_host_ed25519_key")
        known.append(f"{host.addr},{host.name} {' '.join(_keygen(host_key, host.name).split()[:2])}")
        etc_hosts = _write(info.etc_hosts(host), hosts_file)
        cfg = _write(os.path.join(hdir, "sshd_config"), "\n".join([
            f"ListenAddress {host.addr}:22",
            f"HostKey {host_key}",
            f"PidFile {os.path.join(hdir, 'sshd.pid')}",
            f"AuthorizedKeysFile {authorized}",
            "AllowUsers root",
            "PermitRootLogin prohibit-password",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "StrictModes no",
            "UseDNS no",
            "PrintMotd no",
            "PrintLastLog no",
            "X11Forwarding no",
            "AllowTcpForwarding no",
            "AllowAgentForwarding no",
            "PermitTunnel no",
            "MaxStartups 64",
            "LogLevel INFO",
        ]) + "\n")
        log = os.path.join(hdir, "sshd.log")
        cmd = host.daemon_command([SSHD, "-D", "-e", "-f", cfg], etc_hosts)
        with open(log, "w") as logf:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                                    start_new_session=True, close_fds=True)
        host.sshd_pid = proc.pid
        procs.append((host, proc, log))
    for host, proc, log in procs:
        _wait_listening(host.addr, proc, log)

    info.known_hosts = _write(os.path.join(tmp, "known_hosts"), "\n".join(known) + "\n")
    info.ssh_config = _write(os.path.join(tmp, "ssh_config"), "\n".join([
        "Host *",
        "  User root",
        f"  IdentityFile {info.identity_file}",
        "  IdentitiesOnly yes",
        f"  UserKnownHostsFile {info.known_hosts}",
        "  GlobalKnownHostsFile /dev/null",
        "  StrictHostKeyChecking yes",
        "  BatchMode yes",
        "  ConnectTimeout 10",
        "  LogLevel ERROR",
    ]) + "\n")
    info.bin_dir = os.path.join(tmp, "bin")
    os.makedirs(info.bin_dir, exist_ok=True)
    ssh = shutil.which("ssh")
    _write(os.path.join(info.bin_dir, "ssh"),
           f'#!/bin/sh\nexec {ssh} -F {info.ssh_config} -o StrictHostKeyChecking=yes "$@"\n', 0o755)
    _write(os.path.join(tmp, "hosts.json"), info.to_json())
    _verify(info)


def _verify(info: HostsInfo) -> None:
    """Each host answers ssh with its own hostname, and each reaches the next (in a ring: all pairs are one bridge)."""
    ssh = os.path.join(info.bin_dir, "ssh")
    for host in info.hosts:
        res = _run([ssh, host.addr, "hostname"], check=False, timeout=30)
        if res.returncode != 0 or res.stdout.strip() != host.name:
            raise RuntimeError(f"ssh {host.addr} hostname gave {res.returncode}: {res.stdout.strip()!r}, "
                               f"expected {host.name!r}")
    for src, dst in zip(info.hosts, info.hosts[1:] + info.hosts[:1]):
        code = f"import socket; socket.create_connection(({dst.addr!r}, 22), timeout=5).close()"
        res = _run(src.command([sys.executable, "-c", code]), check=False, timeout=30)
        if res.returncode != 0:
            raise RuntimeError(f"{src.name} cannot reach {dst.addr}:22: {res.stdout.strip()[-500:]}")


def _host_count(text: str) -> int:
    """``--hosts``: an int from 2 to 8 (argparse turns the ValueError into its one-line usage error)."""
    try:
        n = int(text)
    except ValueError:
        n = -1
    if not MIN_HOSTS <= n <= MAX_HOSTS:
        raise argparse.ArgumentTypeError(f"the lab builds {MIN_HOSTS} to {MAX_HOSTS} hosts. Received: {text!r}")
    return n


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.hosts", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("check", help="say whether this machine can build the lab's hosts")
    p_up = sub.add_parser("up", help="build the hosts; prints their description as JSON")
    p_up.add_argument("--hosts", type=_host_count, default=MIN_HOSTS,
                      help=f"how many, {MIN_HOSTS} to {MAX_HOSTS} (default {MIN_HOSTS})")
    p_up.add_argument("tmpdir", nargs="?", help="where keys and configs go (default: a new temp dir)")
    sub.add_parser("down", help="remove everything up built, for any number of hosts (also after a killed run)")
    args = parser.parse_args(argv)
    if args.cmd == "check":
        ok, reason = can_run()
        print("ok" if ok else f"cannot build the lab's hosts here: {reason}")
        return 0 if ok else 1
    if args.cmd == "down":
        down()
        return 0
    ok, reason = can_run()
    if not ok:
        print(f"cannot build the lab's hosts here: {reason}", file=sys.stderr)
        return 1
    info = up(args.tmpdir or tempfile.mkdtemp(prefix="hvdkeras-hosts-"), hosts=args.hosts)
    print(info.to_json())
    print(f"# e.g.: PATH={info.bin_dir}:$PATH horovodrun -np {len(info.hosts)} {' '.join(info.horovodrun_args())} "
          f"--gloo {sys.executable} -c 'import socket; print(socket.gethostname())'", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
