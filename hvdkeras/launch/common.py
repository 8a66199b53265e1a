"""What every launcher's renderer shares: the launcher names, the training command, quoting, the checks."""
from __future__ import annotations

import os
import re
import shlex
from typing import Sequence

from hvdkeras.common.errors import LaunchError
from hvdkeras.launch.hosts import hosts_text
from hvdkeras.launch.plan import Plan

LAUNCHERS = ("horovodrun", "mpirun", "slurm", "slurm-srun", "kubernetes")
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
