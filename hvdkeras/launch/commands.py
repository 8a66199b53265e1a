"""The command lines: what every launcher shares, ``horovodrun`` and ``mpirun``.

What every launcher's renderer shares: the launcher names, the training command, quoting, the checks.
``horovodrun``: the README's recipe, and its elastic form with a hosts file and host discovery.
``mpirun``: Horovod's documented Open MPI recipe, and the one copy of its flags (with :func:`main`,
``python -m hvdkeras.launch --mpirun-flags``).
"""
from __future__ import annotations

import os
import re
import shlex
import sys
from typing import List, Optional, Sequence, Tuple

from absl import flags

from hvdkeras import discover_hosts
from hvdkeras.common import command_line, hostnames
from hvdkeras.common.errors import LaunchError
from hvdkeras.launch.plan import Plan, hosts_text

LAUNCHERS = ("horovodrun", "mpirun", "slurm", "slurm-srun", "kubernetes", "ray")
DEFAULT_IMAGE = "hvdkeras:latest"
TRAIN_MODULE = ("python", "-m", "hvdkeras.train")


def check_launcher(launcher: str) -> None:
    """Raises LaunchError unless ``launcher`` is one of :data:`LAUNCHERS`."""
    if launcher not in LAUNCHERS:
        raise LaunchError(f"--launcher {launcher} is not one of {', '.join(LAUNCHERS)}")


def shell(fixed: Sequence[str], user: Sequence[str] = ()) -> str:
    """Fixed tokens as written (Horovod's recipes), user-given ones shell-quoted."""
    return " ".join(list(fixed) + [shlex.quote(a) for a in user])


def uses_gloo(p: Plan) -> bool:
    """``horovodrun --gloo`` on CPU hosts, as every CPU example in the README (the default install builds
    Horovod with Gloo only); GPU hosts follow the GPU example of docs/launching.md (horovodrun picks the controller)."""
    return p.gpus_per_host == 0


def job_name(p: Plan) -> str:
    """The job's name: ``hvdkeras-`` and the ``--config`` file's stem (``job`` without one)."""
    config = next((p.train_args[i + 1] for i, a in enumerate(p.train_args[:-1]) if a == "--config"), "job")
    stem = os.path.splitext(os.path.basename(config))[0]
    return "hvdkeras-" + (re.sub(r"[^a-z0-9-]+", "-", stem.lower()).strip("-") or "job")


def need_uniform(p: Plan, launcher: str) -> int:
    """The processes per host; raises LaunchError if the hosts' slots differ (``launcher`` needs them equal)."""
    slots = p.uniform_slots
    if slots is None:
        raise LaunchError(f"--launcher {launcher} runs the same number of processes on every host; --hosts "
                          f"{hosts_text(p.hosts)} differ (use horovodrun or mpirun, or equal slots)")
    return slots


def no_elastic(p: Plan, launcher: str) -> None:
    """Raises LaunchError if the config asks for elastic training: only horovodrun runs it."""
    if p.config.elastic.enabled:
        raise LaunchError(f"elastic.enabled=true runs only under horovodrun (Horovod's elastic driver), not --launcher"
                          f" {launcher}; use --launcher horovodrun or --set elastic.enabled=false")


def no_ipv6(p: Plan, launcher: str) -> None:
    """Raises LaunchError if a host is an IPv6 address: ``-H host:slots`` is split at ``:`` by ``launcher``."""
    for h in p.hosts:
        if hostnames.is_ipv6(h.name):
            raise LaunchError(f"--hosts {h.name}: {launcher}'s -H host:slots cannot carry an IPv6 address (it splits"
                              " at ':'); give the host by a name that resolves to it")


def horovodrun_command(p: Plan) -> str:
    """``horovodrun -np N -H a:4,b:4 [--gloo] python -m hvdkeras.train ...`` (README's recipe).

    With ``elastic.enabled``: README's elastic recipe, a hosts file read by
    ``python -m hvdkeras.discover_hosts`` and ``--min-np``/``--max-np`` from the config.
    """
    no_ipv6(p, "horovodrun")
    e = p.config.elastic
    if e.enabled:
        lines = "".join(f"{h.name}:{h.slots}\\n" for h in p.hosts)
        limits = ["--min-np", str(e.min_np)] + (["--max-np", str(e.max_np)] if e.max_np else [])
        keepalive = ("# across hosts, ssh keepalives let the driver drop a host whose link is down:\n"
                     "# ServerAliveInterval 3 and ServerAliveCountMax 3 in ~/.ssh/config (docs/elastic.md)\n"
                     if len(p.hosts) > 1 else "")
        discovery = ["--host-discovery-script", shlex.quote(discover_hosts.COMMAND)]
        return (keepalive + f"printf '{lines}' > hosts.txt\n"
                + shell(["HVDKERAS_HOSTS_FILE=hosts.txt", "horovodrun", "-np", str(p.np)] + limits
                         + discovery + list(TRAIN_MODULE), p.train_args))
    fixed = ["horovodrun", "-np", str(p.np), "-H", hosts_text(p.hosts)] + (["--gloo"] if uses_gloo(p) else [])
    return shell(fixed + list(TRAIN_MODULE), p.train_args)


# Horovod's documented Open MPI recipe (docs/mpi.rst), without -np and -H: the one copy, used by the dry
# run, `make train LAUNCHER=mpirun` (python -m hvdkeras.launch --mpirun-flags) and the test harness.
MPIRUN_FLAGS = ("-bind-to", "none", "-map-by", "slot", "-mca", "pml", "ob1", "-mca", "btl", "^openib",
                "-x", "PATH", "-x", "LD_LIBRARY_PATH", "-x", "TF_CPP_MIN_LOG_LEVEL")
MPIRUN_GPU_FLAGS = ("-x", "NCCL_DEBUG=INFO")  # GPU hosts: NCCL says which transport it picked


def mpirun_flags(gpus: bool = False) -> Tuple[str, ...]:
    """The flags of Horovod's Open MPI recipe, plus NCCL's transport report on GPU hosts."""
    return MPIRUN_FLAGS + (MPIRUN_GPU_FLAGS if gpus else ())


def mpirun_args(p: Plan, hosts: bool = True) -> list[str]:
    """Horovod's Open MPI recipe (docs/mpi.rst) for the plan, as a list (``-H`` only when ``hosts``)."""
    return (["mpirun", "-np", str(p.np)] + (["-H", hosts_text(p.hosts)] if hosts else [])
            + list(mpirun_flags(p.gpus_per_host > 0))
            + list(TRAIN_MODULE) + list(p.train_args))


def mpirun_command(p: Plan) -> str:
    """The mpirun command line for the plan, user arguments shell-quoted; raises LaunchError for elastic."""
    no_elastic(p, "mpirun")
    no_ipv6(p, "mpirun")
    args = mpirun_args(p)
    return shell(args[:len(args) - len(p.train_args)], p.train_args)


# python -m hvdkeras.launch's own flags (hvdkeras.common.command_line), apart from the dry run's (hvdkeras.launch.cli).
COMMAND = "python -m hvdkeras.launch"
COMMAND_FLAGS = command_line.flag_values()
flags.DEFINE_bool("mpirun-flags", False, "print the flags of Horovod's Open MPI recipe, shell-quoted",
                  flag_values=COMMAND_FLAGS)
flags.DEFINE_bool("gpus", False, "GPU hosts: add NCCL's transport report", flag_values=COMMAND_FLAGS)
REQUIRED = ("mpirun-flags",)  # checked by _print_mpirun_flags, in one line; the reference marks it


def _print_mpirun_flags(argv: List[str]) -> int:
    if len(argv) > 1:
        command_line.fail(f"unexpected arguments {' '.join(argv[1:])}; usage: {COMMAND} --mpirun-flags [--gpus]")
    if not COMMAND_FLAGS["mpirun-flags"].value:
        command_line.fail(f"--mpirun-flags is required: {COMMAND} --mpirun-flags [--gpus] prints the mpirun flags")
    print(" ".join(shlex.quote(flag) for flag in mpirun_flags(COMMAND_FLAGS.gpus)))
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m hvdkeras.launch --mpirun-flags [--gpus]``: prints the mpirun flags (for the Makefile); returns the
    exit status (2 after a flag it cannot take, said in one line)."""
    words = sys.argv[1:] if argv is None else list(argv)
    return command_line.call(_print_mpirun_flags, COMMAND_FLAGS, [COMMAND, *words],
                             f"{COMMAND} --mpirun-flags [--gpus]: prints the mpirun flags (for the Makefile).")
