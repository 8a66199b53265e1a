"""A two-node Slurm cluster on the two emulated hosts, for submitting generated ``sbatch`` scripts (needs root).

    python -m lab.slurm check          # can this machine run it? (exit 0 yes, 1 no + reason)
    python -m lab.slurm up [TMPDIR]    # hosts, munged, slurmctld, one slurmd per host; JSON
    python -m lab.slurm down           # stop and remove everything (idempotent, by fixed names)

What ``up`` builds, on top of :mod:`lab.hosts` (its namespaces, bridge and sshds):

- ``TMPDIR/hvdtest-slurm/``: a munge key, ``slurm.conf``, the controller's state, each node's spool,
  pid files and logs. Every daemon's command line names this folder, which is how ``down`` finds
  what a killed run left (the folder name is fixed; the parent is not);
- ``munged`` as the ``munge`` user with a fresh key and its socket in ``/run/hvdtest-slurm/`` (no
  system munge is used or touched); the nodes reach it through the filesystem, as Slurm's daemons
  on one machine share one munged;
- ``slurmctld`` in the root namespace, reached at the launcher's bridge address (198.18.213.1);
- in each host's namespace a ``slurmd -N hvd-host-a`` (``-b``), started like that host's sshd: with
  the host's hostname, its hosts file and its cores, so a job step sees the node it was given.

Jobs run as root with the submitter's environment (``sbatch`` exports it): ``ClusterInfo.env()``
gives ``SLURM_CONF`` and puts the hosts' ssh wrapper first on ``PATH``, which is how a real
cluster's nodes reach each other over ssh without asking. Ports 16817/16818 keep clear of a real
Slurm's 6817/6818.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Tuple

from hvdkeras.common import processes
from lab import hosts as hosts_lib

FOLDER = "hvdtest-slurm"  # fixed name of the cluster's folder: down() finds the daemons by it
# munged's socket, key and log: the munge user must reach them, which it cannot under pytest's 0700 tmp.
MUNGE_DIR = f"/run/{FOLDER}"
CLUSTER = "hvdtest"
PARTITION = "hvdtest"
CTLD_PORT, SLURMD_PORT = 16817, 16818
DAEMONS = {"munged": "/usr/sbin/munged", "slurmctld": "/usr/sbin/slurmctld", "slurmd": "/usr/sbin/slurmd"}
CLIENTS = ("sbatch", "squeue", "scontrol", "scancel", "sinfo", "srun")
INSTALL_HINT = "install slurm-wlm and munge (make system-deps, as root)"


@dataclasses.dataclass
class ClusterInfo:
    hosts: hosts_lib.HostsInfo
    folder: str
    conf: str
    nodes: List[str]

    def env(self, base=None) -> dict:
        """``base`` (default os.environ) for Slurm's clients: ``SLURM_CONF``, and the hosts' ssh wrapper on PATH."""
        return dict(self.hosts.env(base), SLURM_CONF=self.conf)

    def to_json(self) -> str:
        return json.dumps({"hosts": json.loads(self.hosts.to_json()), "folder": self.folder, "conf": self.conf,
                           "nodes": self.nodes}, indent=2)

    @classmethod
    def from_json(cls, text: str) -> "ClusterInfo":
        """A running cluster as :meth:`to_json` described it (``up`` writes it to ``cluster.json`` in its folder)."""
        d = json.loads(text)
        return cls(hosts=hosts_lib.HostsInfo.from_json(json.dumps(d["hosts"])), folder=d["folder"], conf=d["conf"],
                   nodes=d["nodes"])


def can_run() -> Tuple[bool, str]:
    """Whether this machine can run the cluster, and if not why (one line)."""
    ok, reason = hosts_lib.can_run()
    if not ok:
        return False, reason
    missing = [path for path in DAEMONS.values() if not os.path.exists(path)]
    missing += [tool for tool in CLIENTS if shutil.which(tool) is None]
    if missing:
        return False, f"{', '.join(missing)} not found: {INSTALL_HINT}"
    try:
        pwd.getpwnam("munge")
    except KeyError:
        return False, f"no munge user: {INSTALL_HINT}"
    return True, ""


def slurm_conf(folder: str, nodes: List[Tuple[str, str]], cpus: int, controller: Tuple[str, str]) -> str:
    """The cluster's ``slurm.conf``: ``nodes`` are ``(name, address)``, ``controller`` the same for slurmctld.

    ``proctrack/linuxproc`` and ``task/none`` need neither cgroups nor systemd; ``cons_tres`` with
    ``CR_CPU`` hands out CPUs as a cluster with GPUs would hand out GPUs; ``ReturnToService=2``
    lets a node that went down come back by itself.
    """
    name, addr = controller
    lines = [
        f"ClusterName={CLUSTER}",
        f"SlurmctldHost={name}({addr})",
        f"SlurmctldPort={CTLD_PORT}",
        f"SlurmdPort={SLURMD_PORT}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={MUNGE_DIR}/munge.socket",
        "SlurmUser=root",
        "SlurmdUser=root",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "MpiDefault=none",
        "ReturnToService=2",
        "JobAcctGatherType=jobacct_gather/none",
        "MinJobAge=3600",  # finished jobs stay visible to scontrol (no accounting database here)
        "KillWait=10",  # between a job's SIGTERM (scancel, time limit) and its SIGKILL
        # Pending jobs are looked at every second, not every 60 s (main loop) or 30 s (backfill): a requeued
        # job becomes eligible when its begin time passes, an event no scheduling pass is triggered by.
        "SchedulerParameters=sched_interval=1,bf_interval=1",
        f"StateSaveLocation={os.path.join(folder, 'state')}",
        f"SlurmdSpoolDir={os.path.join(folder, 'spool', '%n')}",
        f"SlurmctldPidFile={os.path.join(folder, 'run', 'slurmctld.pid')}",
        f"SlurmdPidFile={os.path.join(folder, 'run', 'slurmd-%n.pid')}",
        f"SlurmctldLogFile={os.path.join(folder, 'slurmctld.log')}",
        f"SlurmdLogFile={os.path.join(folder, 'slurmd-%n.log')}",
        # Each node's own temporary folder, as on separate machines: PMIx (srun --mpi=pmix) makes its
        # per-step folders there, and the two nodes share one filesystem here.
        f"TmpFS={os.path.join(folder, 'tmp', '%n')}",
    ]
    lines += [f"NodeName={node} NodeAddr={node_addr} CPUs={cpus} State=UNKNOWN" for node, node_addr in nodes]
    lines.append(f"PartitionName={PARTITION} Nodes={','.join(n for n, _ in nodes)} Default=YES MaxTime=INFINITE"
                 " State=UP")
    return "\n".join(lines) + "\n"


def _daemon_pids() -> List[int]:
    """Every munged, slurmctld and slurmd whose command line names a cluster folder (this module's)."""

    pids = []
    for proc in processes.scan(["pid", "cmdline"]):
        cmd = proc.info["cmdline"] or []
        if cmd and os.path.basename(cmd[0]) in DAEMONS and any(f"/{FOLDER}/" in a for a in cmd):
            pids.append(proc.info["pid"])
    return pids


def down(info: Optional[ClusterInfo] = None) -> None:
    """Stops the daemons (and any job step in the hosts), then removes the two hosts. Idempotent."""
    processes.stop(_daemon_pids())
    shutil.rmtree(MUNGE_DIR, ignore_errors=True)
    hosts_lib.down(info.hosts if info is not None else None)
    left = _daemon_pids()
    if left:
        raise RuntimeError(f"slurm.down left daemons running: {left}")


def _start_munged() -> None:
    """munged as the munge user with a fresh key, all under :data:`MUNGE_DIR`."""
    shutil.rmtree(MUNGE_DIR, ignore_errors=True)
    munge = pwd.getpwnam("munge")
    os.makedirs(MUNGE_DIR, mode=0o755)
    os.chown(MUNGE_DIR, munge.pw_uid, munge.pw_gid)
    os.chmod(MUNGE_DIR, 0o755)  # the socket's folder: every user may connect
    key = os.path.join(MUNGE_DIR, "munge.key")
    with open(key, "wb") as f:
        f.write(os.urandom(1024))
    os.chown(key, munge.pw_uid, munge.pw_gid)
    os.chmod(key, 0o400)
    hosts_lib._run(["runuser", "-u", "munge", "--", DAEMONS["munged"], f"--socket={MUNGE_DIR}/munge.socket",
                    f"--key-file={key}", f"--pid-file={MUNGE_DIR}/munged.pid", f"--log-file={MUNGE_DIR}/munged.log",
                    f"--seed-file={MUNGE_DIR}/munged.seed"])


def _start_slurmd(host: hosts_lib.Host, conf: str, etc_hosts: str, log: str) -> None:
    """``slurmd -N <host>`` run as the host (as its sshd). Entered with ``nsenter``, not ``ip netns
    exec``: that remounts /sys, hiding /sys/fs/cgroup, and slurmd 22.05 will not start without it even
    when no cgroup plugin is configured."""
    cmd = host.daemon_command([DAEMONS["slurmd"], "-D", "-N", host.name, "-f", conf], etc_hosts, own_sysfs=False)
    with open(log, "w") as out:
        subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                         start_new_session=True, close_fds=True)


def node_states(env: Dict[str, str]) -> Dict[str, str]:
    """``{node: state}`` as ``sinfo`` reports them (``idle``, ``alloc``, ``down*``, ...)."""
    res = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], env=env, capture_output=True, text=True, timeout=30)
    return dict(line.split() for line in res.stdout.splitlines() if len(line.split()) == 2)


def up(tmpdir) -> ClusterInfo:
    """Builds the hosts and the cluster and waits until both nodes are idle; on any failure removes
    everything again and raises."""
    ok, reason = can_run()
    if not ok:
        raise RuntimeError(reason)
    down()
    tmpdir = os.path.abspath(str(tmpdir))
    hosts = hosts_lib.up(os.path.join(tmpdir, "hosts"))
    folder = os.path.join(tmpdir, FOLDER)
    try:
        nodes = [h.name for h in hosts.hosts]
        for sub in ["state", "spool"] + [os.path.join("tmp", n) for n in nodes]:
            os.makedirs(os.path.join(folder, sub), exist_ok=True)
        conf = os.path.join(folder, "slurm.conf")
        with open(conf, "w") as f:
            f.write(slurm_conf(folder, [(h.name, h.addr) for h in hosts.hosts], os.cpu_count() or 1,
                               (socket.gethostname(), hosts.launcher_addr)))
        info = ClusterInfo(hosts=hosts, folder=folder, conf=conf, nodes=nodes)
        _start_munged()
        hosts_lib._run([DAEMONS["slurmctld"], "-f", conf])
        for host in hosts.hosts:
            _start_slurmd(host, conf, hosts.etc_hosts(host), os.path.join(folder, f"slurmd-{host.name}.out"))
        deadline = time.time() + 60
        states: Dict[str, str] = {}
        while time.time() < deadline:
            states = node_states(info.env())
            if all(states.get(n) == "idle" for n in nodes):
                break
            time.sleep(0.5)
        else:
            logs = "; ".join(f"{os.path.basename(p)}: {open(p).read()[-300:]!r}" for p in
                             (os.path.join(folder, f"slurmd-{n}.out") for n in nodes) if os.path.exists(p))
            raise RuntimeError(f"the Slurm nodes did not come up idle within 60 s: {states}; {logs}")
        with open(os.path.join(folder, "cluster.json"), "w") as f:
            f.write(info.to_json())
        return info
    except BaseException:
        try:
            down()
        finally:
            raise


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("check", help="say whether this machine can run the cluster")
    p_up = sub.add_parser("up", help="start the cluster; prints its description as JSON")
    p_up.add_argument("tmpdir", nargs="?", help="where keys, configs, state and logs go (default: a new temp dir)")
    sub.add_parser("down", help="stop everything up started (also after a killed run)")
    args = parser.parse_args(argv)
    if args.cmd == "check":
        ok, reason = can_run()
        print("ok" if ok else f"cannot run the Slurm test cluster here: {reason}")
        return 0 if ok else 1
    if args.cmd == "down":
        down()
        return 0
    info = up(args.tmpdir or tempfile.mkdtemp(prefix="hvdkeras-slurm-"))
    print(info.to_json())
    print(f"# e.g.: export SLURM_CONF={info.conf} PATH={info.hosts.bin_dir}:$PATH; sinfo", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
