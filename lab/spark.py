"""A standalone Spark cluster on the two emulated hosts, for hvdkeras.spark on real executors (needs root).

    python -m lab.spark check          # can this machine run it? (exit 0 yes, 1 no + reason)
    python -m lab.spark up [TMPDIR]    # hosts, a master, one worker per host; JSON
    python -m lab.spark down           # stop and remove everything (idempotent, by fixed names)

What ``up`` builds, on top of :mod:`lab.hosts` (its namespaces and bridge; the sshds are not used):

- ``TMPDIR/hvdtest-spark/``: the daemons' properties file and logs, each worker's work and local
  folders, and ``conf/spark-defaults.conf`` for drivers. Every daemon's command line names this
  folder, which is how ``down`` finds what a killed run left (the folder name is fixed; the parent is not).
  When the machine has room (:func:`in_memory`), the driver's folder and each worker's work folder,
  where shipped environments are unpacked, are in ``/dev/shm/hvdtest-spark/`` instead;
- the Master in the root namespace at the launcher's bridge address (198.18.213.1, port 17077, its
  web UI on 18080), the cluster's head node, as :mod:`lab.slurm`'s slurmctld;
- in each host's namespace a Worker (1 core, 1 GB for executors) started like that host's sshd: with
  the host's hostname, its hosts file and its cores, so its executors, their Python workers and the
  Horovod ranks they start all run as that host. It enters the host's network namespace alone
  (``own_sysfs=False``, as :mod:`lab.slurm`'s slurmd): /sys/fs/cgroup stays in sight, where a rank may
  be given a memory limit of its own.

A driver runs at the launcher's address too (``ClusterInfo.env()``: ``SPARK_CONF_DIR`` with the
master, the driver's address and small executors, and ``PYSPARK_PYTHON``), as on a cluster's gateway
whose ``spark-defaults.conf`` names the cluster: ``SparkSession.builder.getOrCreate()`` joins it.
The bridge there is named ``hvdtest0`` like the hosts' own interface, so the one interface the
tasks share is also the driver's, where Horovod's Gloo launch takes its rendezvous address from.

Every JVM gets a small heap (256 MB for the daemons, 512 MB per executor). Ports 17077/18080/18081
keep clear of a real Spark's 7077/8080/8081.

Spark schedules GPUs here as on a GPU cluster, with stand-in addresses: each worker announces one
``gpu`` through a resource discovery script (``spark.worker.resource.gpu.discoveryScript``), the
first host's address ``0`` and the second's ``1`` (``GPU_ADDRESS_ENV``), and every executor and task
asks for one (``spark.executor.resource.gpu.amount``, ``spark.task.resource.gpu.amount``), so each
task's ``TaskContext.resources()`` names its host's. No GPU is behind them: TensorFlow finds none.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from hvdkeras.common import processes
from lab import hosts as hosts_lib

FOLDER = "hvdtest-spark"  # fixed name of the cluster's folder: down() finds the daemons by it
MASTER_PORT, MASTER_UI_PORT, WORKER_UI_PORT = 17077, 18080, 18081
WORKER_CORES, WORKER_MEMORY, EXECUTOR_MEMORY, DAEMON_MEMORY = 1, "1g", "512m", "256m"
JAVA = "java"
# Every JVM here starts faster with the client compiler alone and the serial collector, and none does much work.
FAST_START = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
INSTALL_HINT = "install Java 17 (make system-deps) and pyspark (the [spark] extra, make install)"
START_TIMEOUT_S = 120.0
# In memory when the machine has room, as a gateway's and a worker's local SSD would be (a fixed name: down() removes
# it): the driver's local folder, where it copies and unpacks a shipped environment (spark.archives, 2.1 GB for
# hvdkeras's) before its executors start, and the workers' work folders, where each executor unpacks its own copy
# (1.6 GB; a SIGKILLed executor's stays until down()). On this disk two executors unpacking at once took twice as long
# as in memory (docs/records/test-timings.md).
IN_MEMORY = "/dev/shm"  # where the cluster's in-memory folder is made: a new one each up() (mkdtemp), never a name
# another user of the machine could have made first, as a link, in that world-writable folder
IN_MEMORY_PREFIX = f"{FOLDER}-"
# Bytes the machine must have free in memory and in /dev/shm for the driver's folder there, and for the workers' too:
# the cluster test's peak is the driver's 2.1 GB and three executors' 1.6 GB, beside the rest of the suite.
DRIVER_IN_MEMORY_ROOM, WORKERS_IN_MEMORY_ROOM = 8 << 30, 14 << 30
GPU_ADDRESS_ENV = "HVDTEST_GPU_ADDRESS"  # the stand-in GPU address a worker's discovery script announces
DISCOVERY_SCRIPT = f"""#!/bin/sh
echo '{{"name": "gpu", "addresses": ["'"${GPU_ADDRESS_ENV}"'"]}}'
"""


@dataclasses.dataclass
class ClusterInfo:
    hosts: hosts_lib.HostsInfo
    folder: str
    spark_home: str
    python: str
    master_url: str
    master_ui: str
    conf_dir: str
    driver_dir: str  # a driver's local folder (:func:`in_memory` says where)
    work_dirs: Dict[str, str]  # each host's worker's work folder, by host name (:func:`in_memory` says where)
    hidden: Tuple[str, ...] = ()  # folders the workers and their executors cannot see (up's ``hide``)
    worker_spark_home: str = ""  # the Spark the workers run: spark_home, or its copy outside the hidden folders
    memory_dir: str = ""  # the cluster's own folder in IN_MEMORY (mkdtemp), when anything went in memory

    @property
    def slots(self) -> int:
        """Task slots of the whole cluster: one core per worker, one worker per host."""
        return WORKER_CORES * len(self.hosts.hosts)

    def env(self, base=None) -> Dict[str, str]:
        """``base`` (default os.environ) for a driver at the launcher's address: ``SparkSession.builder.getOrCreate()``
        joins this cluster (``SPARK_CONF_DIR``), and executors run ``python`` (``PYSPARK_PYTHON``)."""
        env = dict(os.environ if base is None else base)
        env.update(SPARK_HOME=self.spark_home, SPARK_CONF_DIR=self.conf_dir, PYSPARK_PYTHON=self.python,
                   PYSPARK_DRIVER_PYTHON=self.python, SPARK_LOCAL_IP=self.hosts.launcher_addr,
                   SPARK_LOCAL_DIRS=self.driver_dir)
        return env

    def to_json(self) -> str:
        d = {k: v for k, v in dataclasses.asdict(self).items() if k != "hosts"}
        return json.dumps({"hosts": json.loads(self.hosts.to_json()), **d}, indent=2)


def spark_home() -> Optional[str]:
    """The pyspark package's folder, which holds ``bin/spark-class`` and the jars (None without pyspark)."""
    try:
        import pyspark
    except ImportError:
        return None
    return os.path.dirname(os.path.abspath(pyspark.__file__))


def can_run() -> Tuple[bool, str]:
    """Whether this machine can run the cluster, and if not why (one line)."""
    ok, reason = hosts_lib.can_run()
    if not ok:
        return False, reason
    home = spark_home()
    if home is None or not os.access(os.path.join(home, "bin", "spark-class"), os.X_OK):
        return False, f"no pyspark with bin/spark-class for this Python ({sys.executable}): {INSTALL_HINT}"
    if shutil.which(JAVA) is None and not os.environ.get("JAVA_HOME"):
        return False, f"'{JAVA}' not found: {INSTALL_HINT}"
    return True, ""


def in_memory(room: int) -> Tuple[bool, bool]:
    """Whether the driver's folder, and whether the workers' work folders, go in :data:`IN_MEMORY`.

    Args:
        room: the bytes the machine has free both in memory and in /dev/shm.
    """
    return room >= DRIVER_IN_MEMORY_ROOM, room >= WORKERS_IN_MEMORY_ROOM


def _room() -> int:
    """The bytes free both in memory and in :data:`IN_MEMORY`'s filesystem (0 without one)."""
    import psutil

    try:
        free = shutil.disk_usage(IN_MEMORY).free
    except OSError:
        return 0
    return min(free, psutil.virtual_memory().available)


def driver_conf(master_url: str, driver_addr: str, python: str, folder: str, cores: int,
                local_dir: Optional[str] = None) -> Dict[str, str]:
    """A driver's ``spark-defaults.conf`` for the cluster: its master, the driver's address (which the
    executors connect back to), small executors, no UI, and nothing written outside ``folder``.

    ``spark.cores.max`` is the whole cluster's cores, as an application on a shared standalone cluster
    states its share: the SparkContext then starts once executors with 80% of them have registered
    (``spark.scheduler.minRegisteredResourcesRatio``; at most 30 s), and ``hvdkeras.spark.run`` refuses
    more ranks than that share at once. ``local_dir``: the driver's files (default ``folder/driver``)."""
    local = local_dir or os.path.join(folder, "driver")
    return {
        "spark.master": master_url,
        "spark.driver.host": driver_addr,
        "spark.driver.bindAddress": driver_addr,
        "spark.executor.memory": EXECUTOR_MEMORY,
        "spark.driver.memory": "512m",
        # Their temporary files (an archive fetched before it is unpacked) in the folder, not /tmp: a killed
        # executor leaves them behind, and down() leaves nothing.
        "spark.driver.extraJavaOptions": f"{FAST_START} -Djava.io.tmpdir={local}",
        "spark.executor.extraJavaOptions": f"{FAST_START} -Djava.io.tmpdir={os.path.join(folder, 'executor-tmp')}",
        "spark.pyspark.python": python,
        "spark.cores.max": str(cores),
        "spark.executor.resource.gpu.amount": "1",
        "spark.task.resource.gpu.amount": "1",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.warehouse.dir": os.path.join(folder, "warehouse"),
        "spark.local.dir": local,
    }


def _properties(conf: Dict[str, str]) -> str:
    return "".join(f"{k} {v}\n" for k, v in conf.items())


def _daemon_pids() -> List[int]:
    """Every JVM whose command line names a cluster folder: this module's daemons and the executors their
    workers start (whose class path holds the workers' conf folder)."""

    pids = []
    for proc in processes.scan(["pid", "cmdline"]):
        cmd = proc.info["cmdline"] or []
        if cmd and os.path.basename(cmd[0]) == JAVA and any(f"/{FOLDER}/" in a for a in cmd):
            pids.append(proc.info["pid"])
    return pids


def _running(pid: int) -> bool:
    """Whether any thread of ``pid`` still runs: a JVM's main thread can be a zombie while its others end."""
    processes.alive(pid)  # reaps it when it is this process's child and done
    try:
        states = []
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                states.append(f.read().rsplit(")", 1)[1].split()[0])
    except OSError:
        return False
    return any(state not in ("Z", "X") for state in states)


def _kill_jvms(pids: List[int], timeout: float = 10.0) -> List[int]:
    """SIGKILLs each JVM of ``pids`` and its process group (a daemon leads its own session; a worker's executors
    and their Python workers are in its group), then waits for every thread to end; returns those still running."""
    for pid in pids:
        processes.kill_group(pid)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    left = [p for p in pids if _running(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [p for p in left if _running(p)]
    return left


# What the daemons and their executors write under the cluster's folder, besides the logs: each executor's copy of
# a shipped environment (some 2 GB each, left behind by a SIGKILL), the fetch caches, the driver's files.
WORK_FOLDERS = ("master", "driver", "executor-tmp", "warehouse", "spark-home")


def _memory_dirs() -> List[str]:
    """The in-memory folders earlier clusters of this user left (real folders, not links): what down() without
    ``info`` removes."""
    found = []
    for name in os.listdir(IN_MEMORY) if os.path.isdir(IN_MEMORY) else []:
        path = os.path.join(IN_MEMORY, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if name.startswith(IN_MEMORY_PREFIX) and stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid():
            found.append(path)
    return found


def down(info: Optional[ClusterInfo] = None) -> None:
    """Kills the master, the workers and their executors (what else runs in the hosts goes with them), then
    removes the two hosts and, with ``info``, the daemons' work folders (the logs and the configuration stay).
    Idempotent; finds the JVMs by the folder name, ``info`` is optional."""
    left = _kill_jvms(_daemon_pids())
    hosts_lib.down(info.hosts if info is not None else None)
    left += [p for p in _daemon_pids() if p not in left and _running(p)]
    if left:
        raise RuntimeError(f"spark.down left JVMs running: {left}")
    for memory in ([info.memory_dir] if info is not None and info.memory_dir else _memory_dirs()):
        shutil.rmtree(memory, ignore_errors=True)
    if info is not None:
        for name in (*WORK_FOLDERS, *(h.name for h in info.hosts.hosts)):
            shutil.rmtree(os.path.join(info.folder, name), ignore_errors=True)


def _daemon_env(home: str, python: str, addr: str, folder: str, name: str, work_dir: str = "") -> Dict[str, str]:
    env = dict(os.environ, SPARK_HOME=home, SPARK_CONF_DIR=os.path.join(folder, "daemon-conf"),
               SPARK_LOCAL_IP=addr, SPARK_DAEMON_MEMORY=DAEMON_MEMORY, PYSPARK_PYTHON=python,
               SPARK_LOCAL_DIRS=os.path.join(folder, name, "local"),
               SPARK_WORKER_DIR=work_dir or os.path.join(folder, name, "work"),
               SPARK_DAEMON_JAVA_OPTS=f"-Djava.io.tmpdir={os.path.join(folder, name, 'tmp')} {FAST_START}")
    for var in ("SPARK_CONF_DIR", "SPARK_LOCAL_DIRS", "SPARK_WORKER_DIR"):
        os.makedirs(env[var], exist_ok=True)
    os.makedirs(os.path.join(folder, name, "tmp"), exist_ok=True)
    return env


def _start(cmd: List[str], env: Dict[str, str], log: str) -> subprocess.Popen:
    """A daemon in a session of its own (spark-class execs the JVM: the pid is the JVM's), output to ``log``."""
    with open(log, "w") as out:
        return subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, close_fds=True)


def master_state(info: ClusterInfo, timeout: float = 2.0) -> dict:
    """The master's JSON status (``aliveworkers``, ``cores``, ``workers``, ``activeapps``, ...)."""
    with urllib.request.urlopen(f"{info.master_ui}/json/", timeout=timeout) as resp:
        return json.loads(resp.read().decode())


def _log_tail(path: str, chars: int = 300) -> str:
    try:
        with open(path, errors="replace") as f:
            lines = [line for line in f.read().splitlines() if "ERROR" in line or "Exception" in line]
    except OSError:
        return "no log"
    return " | ".join(lines)[-chars:] or "no errors logged"


def _wait(info: ClusterInfo, daemons: List[Tuple[str, subprocess.Popen, str]], deadline: float, timeout: float,
          workers: int) -> None:
    """Until the master is ALIVE with ``workers`` workers alive, or one line at ``deadline``."""
    seen = "the master's UI did not answer"
    while time.monotonic() < deadline:
        for name, proc, log in daemons:
            if proc.poll() is not None:
                raise RuntimeError(f"the Spark {name} exited {proc.returncode} while starting: {_log_tail(log)} "
                                   f"(log: {log})")
        try:
            state = master_state(info)
            alive = [w for w in state.get("workers", []) if w.get("state") == "ALIVE"]
            seen = f"master {state.get('status')}, {len(alive)} of {workers} workers alive"
            if state.get("status") == "ALIVE" and len(alive) >= workers:
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.3)
    raise RuntimeError(f"the Spark cluster was not up at {info.master_url} within "
                       f"{timeout:g} s ({seen}): " + "; ".join(f"{n}: {_log_tail(log)}" for n, _, log in daemons))


def _inside(path: str, folders: Sequence[str]) -> bool:
    path = os.path.realpath(path)
    return any(path == os.path.realpath(f) or path.startswith(os.path.realpath(f) + os.sep) for f in folders)


def _worker_spark_home(home: str, folder: str, hide: Sequence[str]) -> str:
    """``home``, or when a folder of ``hide`` holds it, a copy in ``folder`` (hard links where the filesystem
    allows: the jars are some 460 MB), as a host's own Spark installation."""
    if not _inside(home, hide):
        return home
    copy = os.path.join(folder, "spark-home")
    linked = subprocess.run(["cp", "-al", home, copy], capture_output=True).returncode == 0
    if not linked:
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(home, copy, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def up(tmpdir, python: str = sys.executable, timeout: float = START_TIMEOUT_S, hide: Sequence[str] = ()) -> ClusterInfo:
    """Builds the hosts, starts the master and one worker per host, and waits (up to ``timeout`` s) until
    the master counts both workers alive; executors will run ``python``. On any failure removes
    everything again and raises one line.

    ``hide``: folders the workers, their executors and the ranks cannot see (an empty tmpfs over each in the
    worker's mount namespace), such as the driver's venv and checkout, for executors that get their Python from a
    shipped environment; the workers then run a copy of Spark (``ClusterInfo.worker_spark_home``)."""
    ok, reason = can_run()
    if not ok:
        raise RuntimeError(reason)
    down()
    tmpdir = os.path.abspath(str(tmpdir))
    hosts = hosts_lib.up(os.path.join(tmpdir, "hosts"))
    folder = os.path.join(tmpdir, FOLDER)
    hide = tuple(sorted({os.path.abspath(h) for h in hide}))
    hide = tuple(h for h in hide if not _inside(h, [o for o in hide if o != h]))  # one tmpfs over the outermost
    if _inside(folder, hide):
        raise RuntimeError(f"the cluster's folder {folder} is inside a hidden folder ({', '.join(hide)}): the workers"
                           " could not see it; give up() another tmpdir")
    try:
        home = spark_home()
        assert home is not None  # can_run checked
        launcher = hosts.launcher_addr
        os.makedirs(folder, exist_ok=True)
        driver_in_memory, workers_in_memory = in_memory(_room())
        memory = (tempfile.mkdtemp(prefix=IN_MEMORY_PREFIX, dir=IN_MEMORY)
                  if driver_in_memory or workers_in_memory else "")
        info = ClusterInfo(hosts=hosts, folder=folder, spark_home=home, python=python,
                           master_url=f"spark://{launcher}:{MASTER_PORT}",
                           master_ui=f"http://{launcher}:{MASTER_UI_PORT}", conf_dir=os.path.join(folder, "conf"),
                           driver_dir=os.path.join(memory if driver_in_memory else folder, "driver"),
                           work_dirs={h.name: os.path.join(memory if workers_in_memory else folder, h.name, "work")
                                      for h in hosts.hosts}, hidden=hide,
                           worker_spark_home=_worker_spark_home(home, folder, hide), memory_dir=memory)
        for sub in ("conf", "driver", "warehouse", "executor-tmp"):
            os.makedirs(os.path.join(folder, sub), exist_ok=True)
        os.makedirs(info.driver_dir, exist_ok=True)
        with open(os.path.join(info.conf_dir, "spark-defaults.conf"), "w") as f:
            f.write(_properties(driver_conf(info.master_url, launcher, python, folder, info.slots, info.driver_dir)))
        discovery = os.path.join(folder, "gpus.sh")
        with open(discovery, "w") as f:
            f.write(DISCOVERY_SCRIPT)
        os.chmod(discovery, 0o755)
        props = os.path.join(folder, "daemon.properties")  # also what puts the folder on every daemon's command line
        with open(props, "w") as f:
            f.write(_properties({"spark.master.rest.enabled": "false", "spark.worker.cleanup.enabled": "false",
                                 "spark.worker.resource.gpu.amount": "1",
                                 "spark.worker.resource.gpu.discoveryScript": discovery}))
        spark_class = os.path.join(home, "bin", "spark-class")
        log = os.path.join(folder, "master.log")
        cmd = [spark_class, "org.apache.spark.deploy.master.Master", "--host", launcher, "--port", str(MASTER_PORT),
               "--webui-port", str(MASTER_UI_PORT), "--properties-file", props]
        daemons = [("master", _start(cmd, _daemon_env(home, python, launcher, folder, "master"), log), log)]
        # The workers start once the master leads: one that registers earlier is told the master is in standby
        # and tries again only 5 to 15 s later.
        deadline = time.monotonic() + timeout
        _wait(info, daemons, deadline, timeout, 0)
        worker_home = info.worker_spark_home
        for index, host in enumerate(hosts.hosts):
            log = os.path.join(folder, f"worker-{host.name}.log")
            worker = [os.path.join(worker_home, "bin", "spark-class"), "org.apache.spark.deploy.worker.Worker",
                      info.master_url, "--host", host.addr,
                      "--cores", str(WORKER_CORES), "--memory", WORKER_MEMORY, "--webui-port", str(WORKER_UI_PORT),
                      "--work-dir", info.work_dirs[host.name], "--properties-file", props]
            env = dict(_daemon_env(worker_home, python, host.addr, folder, host.name, info.work_dirs[host.name]),
                       **{GPU_ADDRESS_ENV: str(index)})
            command = host.daemon_command(worker, hosts.etc_hosts(host), own_sysfs=False, hide=hide)
            daemons.append((f"worker on {host.name}", _start(command, env, log), log))
        _wait(info, daemons, deadline, timeout, len(hosts.hosts))
        with open(os.path.join(folder, "cluster.json"), "w") as f:
            f.write(info.to_json())
        return info
    except BaseException:
        try:
            down()
        finally:
            raise


@contextlib.contextmanager
def running(tmpdir, python: str = sys.executable, timeout: float = START_TIMEOUT_S,
            hide: Sequence[str] = ()) -> Iterator[ClusterInfo]:
    """:func:`up` for the ``with`` block, :func:`down` after it however it ends."""
    info = up(tmpdir, python=python, timeout=timeout, hide=hide)
    try:
        yield info
    finally:
        down(info)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("check", help="say whether this machine can run the cluster")
    p_up = sub.add_parser("up", help="start the cluster; prints its description as JSON")
    p_up.add_argument("tmpdir", nargs="?", help="where configs, work folders and logs go (default: a new temp dir)")
    sub.add_parser("down", help="stop everything up started (also after a killed run)")
    args = parser.parse_args(argv)
    if args.cmd == "check":
        ok, reason = can_run()
        print("ok" if ok else f"cannot run the Spark test cluster here: {reason}")
        return 0 if ok else 1
    if args.cmd == "down":
        down()
        return 0
    info = up(args.tmpdir or tempfile.mkdtemp(prefix="hvdkeras-spark-"))
    print(info.to_json())
    print(f"# e.g.: export SPARK_CONF_DIR={info.conf_dir} PYSPARK_PYTHON={info.python} SPARK_LOCAL_IP="
          f"{info.hosts.launcher_addr}; {info.python} -c 'from pyspark.sql import SparkSession;"
          f" print(SparkSession.builder.getOrCreate().sparkContext.master)'", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
