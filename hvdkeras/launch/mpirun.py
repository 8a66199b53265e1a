"""``mpirun``: Horovod's documented Open MPI recipe, and the one copy of its flags."""
from __future__ import annotations

import argparse
import shlex
from typing import Optional, Sequence, Tuple

from hvdkeras.launch.common import TRAIN_MODULE, no_elastic, shell
from hvdkeras.launch.hosts import hosts_text
from hvdkeras.launch.plan import Plan

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
    args = mpirun_args(p)
    return shell(args[:len(args) - len(p.train_args)], p.train_args)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m hvdkeras.launch --mpirun-flags [--gpus]``: prints the mpirun flags (for the Makefile)."""
    parser = argparse.ArgumentParser(prog="python -m hvdkeras.launch")
    parser.add_argument("--mpirun-flags", action="store_true", required=True,
                        help="print the flags of Horovod's Open MPI recipe, shell-quoted")
    parser.add_argument("--gpus", action="store_true", help="GPU hosts: add NCCL's transport report")
    args = parser.parse_args(argv)
    print(" ".join(shlex.quote(flag) for flag in mpirun_flags(args.gpus)))
    return 0
