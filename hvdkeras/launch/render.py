"""One plan, one launcher: the command or file text, and what ``--dry_run`` prints and writes.

:func:`render_command` picks the launcher's renderer, :func:`launch_file` is what ``--dry_run_output``
writes, :func:`dry_run` what ``python -m hvdkeras.train --dry_run`` prints: the summary, then the command
or file.
"""
from __future__ import annotations

import os
from typing import Optional, Sequence

from hvdkeras import config as config_lib
from hvdkeras.common.errors import LaunchError
from hvdkeras.launch.commands import DEFAULT_IMAGE, check_launcher, horovodrun_command, mpirun_command
from hvdkeras.launch.describe import describe
from hvdkeras.launch.kubernetes import KubernetesOptions, kubernetes_manifest
from hvdkeras.launch.plan import Plan, plan
from hvdkeras.launch.ray import RayOptions, ray_command
from hvdkeras.launch.slurm import slurm_script


def render_command(p: Plan, launcher: str = "horovodrun", image: str = DEFAULT_IMAGE,
                   ray: Optional[RayOptions] = None, kubernetes: Optional[KubernetesOptions] = None) -> str:
    """The exact command (horovodrun, mpirun, ray: with ``ray``'s flags) or file text (slurm: sbatch script;
    kubernetes: the TrainJob's or MPIJob's YAML, by ``kubernetes``' options)."""
    check_launcher(launcher)
    if launcher == "ray":
        return ray_command(p, ray or RayOptions())
    if launcher == "horovodrun":
        return horovodrun_command(p)
    if launcher == "mpirun":
        return mpirun_command(p)
    if launcher in ("slurm", "slurm-srun"):
        return slurm_script(p, srun=launcher == "slurm-srun")
    return kubernetes_manifest(p, image, kubernetes)


def launch_file(p: Plan, launcher: str = "horovodrun", image: str = DEFAULT_IMAGE,
                ray: Optional[RayOptions] = None, kubernetes: Optional[KubernetesOptions] = None) -> str:
    """What ``--dry_run_output`` writes: the command as a bash script, or the sbatch script / YAML itself."""
    text = render_command(p, launcher, image, ray, kubernetes)
    if launcher in ("horovodrun", "mpirun", "ray"):
        return "#!/bin/bash\nset -euo pipefail\n" + text + "\n"
    return text


def dry_run(config_path: str, overrides: Sequence[str] = (), workdir: Optional[str] = None,
            default_workdir: Optional[str] = None, np: Optional[int] = None, hosts: Optional[str] = None,
            launcher: str = "horovodrun", image: str = DEFAULT_IMAGE, gpus_per_host: int = 0,
            cores_per_host: Optional[int] = None, output: Optional[str] = None,
            ray: Optional[RayOptions] = None, kubernetes: Optional[KubernetesOptions] = None) -> str:
    """What ``python -m hvdkeras.train --dry_run`` prints: the summary, then the command or file.

    Nothing is written but ``output``.

    Args:
        config_path: The config file.
        overrides: The ``--set`` values.
        workdir: The ``--workdir`` given (repeated in the command).
        default_workdir: The workdir the trainer would use without ``--workdir``.
        np: The number of processes.
        hosts: ``--hosts`` (``"a:4,b:4"``).
        launcher: One of :data:`~hvdkeras.launch.commands.LAUNCHERS`.
        image: The container image of the Kubernetes job.
        gpus_per_host: GPUs on each host (0: CPU hosts).
        cores_per_host: Cores on each host (default: this machine's).
        output: Where the launch file is also written, if given.
        ray: The Ray launch's options (``launcher="ray"``).
        kubernetes: The Kubernetes launch's options (``launcher="kubernetes"``).
    """
    check_launcher(launcher)
    cfg = config_lib.load(config_path, overrides)
    train_args = ["--config", config_path]
    for text in overrides:
        train_args += ["--set", text]
    if workdir:
        train_args += ["--workdir", workdir]
    p = plan(cfg, np, hosts, gpus_per_host=gpus_per_host, cores_per_host=cores_per_host, train_args=train_args,
             workdir=workdir or default_workdir)
    command = render_command(p, launcher, image, ray, kubernetes)
    header = f"hvdkeras dry run: {config_path} (nothing started: no hvd.init, no training, no files)"
    text = f"{header}\n{describe(p, launcher, kubernetes)}\n\n"
    manifest = "MPIJob" if kubernetes is not None and kubernetes.api == "mpijob" else "TrainJob"
    kind = {"horovodrun": "command", "mpirun": "command", "slurm": "sbatch script", "slurm-srun": "sbatch script",
            "kubernetes": f"{manifest} manifest", "ray": "command"}[launcher]
    text += f"--- {kind} ---\n{command}" + ("" if command.endswith("\n") else "\n")
    if output:
        try:
            with open(output, "w") as f:
                f.write(launch_file(p, launcher, image, ray, kubernetes))
            if launcher in ("horovodrun", "mpirun", "ray"):
                os.chmod(output, 0o755)
        except OSError as exc:
            raise LaunchError(f"cannot write --dry_run_output {output}: {exc.strerror or exc}") from None
        text += f"--- written to {output} ---\n"
    return text
